//! `topics/partitions/{topic_id}/{partition:010}` → [`PartitionState`]. Absent until the state first
//! changes (see the schema notes in [`super`]); changed only by compare-and-swap on the key's
//! mod revision, which is also what a catalog commit's epoch fence compares.

use super::Root;
use crate::codec;
use crate::error::Result;
use crate::topic::PartitionState;
use crate::types::{PartitionId, TopicId};

pub fn topic_prefix(root: &Root, topic_id: TopicId) -> String {
    root.join(&format!("topics/partitions/{topic_id}/"))
}

pub fn prefix(root: &Root) -> String {
    root.join("topics/partitions/")
}

pub fn ser_key(root: &Root, topic_id: TopicId, partition: PartitionId) -> String {
    root.join(&format!("topics/partitions/{topic_id}/{partition:010}"))
}

/// The topic id a partition key belongs to.
pub fn deser_key(root: &Root, key: &[u8]) -> Result<TopicId> {
    let segs = super::segments_after(key, &prefix(root))?;
    let id = segs.first().copied().unwrap_or_default();
    uuid::Uuid::parse_str(id)
        .map(TopicId)
        .map_err(|_| crate::Error::CorruptValue {
            key: super::key_name(key),
            reason: format!("'{id}' is not a topic id"),
        })
}

pub fn ser_value(p: &PartitionState) -> Result<Vec<u8>> {
    codec::encode(p)
}

pub fn deser_value(key: &[u8], value: &[u8]) -> Result<PartitionState> {
    codec::decode(&super::key_name(key), value)
}
