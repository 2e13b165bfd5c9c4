//! `topics/ids/{topic_id}` → `{"name"}`: finds a topic by id (catalog readers and the WAL
//! know topics by id only).

use super::Root;
use crate::codec;
use crate::error::Result;
use crate::types::TopicId;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Name {
    name: String,
}

pub fn ser_key(root: &Root, topic_id: TopicId) -> String {
    root.join(&format!("topics/ids/{topic_id}"))
}

pub fn ser_value(name: &str) -> Result<Vec<u8>> {
    codec::encode(&Name {
        name: name.to_string(),
    })
}

pub fn deser_value(key: &[u8], value: &[u8]) -> Result<String> {
    codec::decode::<Name>(&super::key_name(key), value).map(|n| n.name)
}
