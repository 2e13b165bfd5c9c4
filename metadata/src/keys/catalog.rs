//! `catalog/{topic_id}/{partition:010}/{base_offset:020}` → [`CatalogEntry`]. Zero-padded so
//! a range scan walks a partition in offset order and "last entry" is a reverse scan with
//! limit 1.

use super::Root;
use crate::catalog::CatalogEntry;
use crate::codec;
use crate::error::Result;
use crate::types::{Offset, PartitionId, TopicId};

pub fn topic_prefix(root: &Root, topic_id: TopicId) -> String {
    root.join(&format!("catalog/{topic_id}/"))
}

pub fn partition_prefix(root: &Root, topic_id: TopicId, partition: PartitionId) -> String {
    root.join(&format!("catalog/{topic_id}/{partition:010}/"))
}

pub fn ser_key(root: &Root, topic_id: TopicId, partition: PartitionId, base: Offset) -> String {
    root.join(&format!("catalog/{topic_id}/{partition:010}/{base:020}"))
}

pub fn ser_value(e: &CatalogEntry) -> Result<Vec<u8>> {
    codec::encode(e)
}

pub fn deser_value(key: &[u8], value: &[u8]) -> Result<CatalogEntry> {
    codec::decode(&super::key_name(key), value)
}

/// The (topic, partition, base offset) a per-partition key names (delete events carry only
/// the key). Keys of sealed objects ([`super::object_index`]) are not of this kind.
pub fn deser_key(root: &Root, key: &[u8]) -> Result<(TopicId, PartitionId, Offset)> {
    let segs = super::segments_after(key, &root.join("catalog/"))?;
    let corrupt = || crate::Error::CorruptValue {
        key: super::key_name(key),
        reason: "not a per-partition catalog key".into(),
    };
    match segs.as_slice() {
        [topic, partition, base] => {
            let topic = uuid::Uuid::parse_str(topic)
                .map(TopicId)
                .map_err(|_| corrupt())?;
            Ok((
                topic,
                super::parse_num(key, partition)?,
                super::parse_num(key, base)?,
            ))
        }
        _ => Err(corrupt()),
    }
}
