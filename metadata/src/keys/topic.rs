//! `topics/names/{name}` → [`TopicRecord`]: what a topic is, without the partition states that
//! change (those are in [`super::partition`] keys, written on first change).

use super::Root;
use crate::codec;
use crate::error::Result;
use crate::topic::{TopicConfigs, TopicMetadata};
use crate::types::{BrokerId, TopicId};
use serde::{Deserialize, Serialize};

/// The stored form of a topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    pub name: String,
    pub topic_id: TopicId,
    pub replication_factor: i16,
    pub configs: TopicConfigs,
    pub created_at_ms: i64,
    /// The leader each partition was created with (at epoch 0); its length is the
    /// partition count.
    pub initial_leaders: Vec<BrokerId>,
}

impl TopicRecord {
    pub fn from_metadata(t: &TopicMetadata) -> Self {
        TopicRecord {
            name: t.name.clone(),
            topic_id: t.topic_id,
            replication_factor: t.replication_factor,
            configs: t.configs.clone(),
            created_at_ms: t.created_at_ms,
            initial_leaders: t.partitions.iter().map(|p| p.leader).collect(),
        }
    }
}

pub fn prefix(root: &Root) -> String {
    root.join("topics/names/")
}

pub fn ser_key(root: &Root, name: &str) -> String {
    root.join(&format!("topics/names/{name}"))
}

/// The topic name a key names.
pub fn deser_key<'k>(root: &Root, key: &'k [u8]) -> Result<&'k str> {
    let segs = super::segments_after(key, &prefix(root))?;
    segs.first()
        .copied()
        .ok_or_else(|| crate::Error::CorruptValue {
            key: super::key_name(key),
            reason: "not a topic key".into(),
        })
}

pub fn ser_value(t: &TopicRecord) -> Result<Vec<u8>> {
    codec::encode(t)
}

pub fn deser_value(key: &[u8], value: &[u8]) -> Result<TopicRecord> {
    codec::decode(&super::key_name(key), value)
}
