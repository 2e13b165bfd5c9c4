//! `offsets/{group}/{topic}/{partition:010}` → [`CommittedOffset`]; the group id escaped
//! ([`super::escape`]), so `offsets/{group}/` holds exactly one group's offsets.

use super::{escape, Root};
use crate::codec;
use crate::error::Result;
use crate::group::CommittedOffset;
use crate::types::PartitionId;

pub fn prefix(root: &Root) -> String {
    root.join("offsets/")
}

pub fn group_prefix(root: &Root, group_id: &str) -> String {
    root.join(&format!("offsets/{}/", escape(group_id)))
}

pub fn ser_key(root: &Root, group_id: &str, topic: &str, partition: PartitionId) -> String {
    root.join(&format!(
        "offsets/{}/{topic}/{partition:010}",
        escape(group_id)
    ))
}

/// The group id an offset key belongs to.
pub fn deser_key(root: &Root, key: &[u8]) -> Result<String> {
    let segs = super::segments_after(key, &prefix(root))?;
    Ok(super::unescape(segs.first().copied().unwrap_or_default()))
}

pub fn ser_value(o: &CommittedOffset) -> Result<Vec<u8>> {
    codec::encode(o)
}

pub fn deser_value(key: &[u8], value: &[u8]) -> Result<CommittedOffset> {
    codec::decode(&super::key_name(key), value)
}
