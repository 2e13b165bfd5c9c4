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
