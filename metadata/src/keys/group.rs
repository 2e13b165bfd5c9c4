//! `groups/{group}` → the group coordinator's record (version + base64 data), replaced by
//! compare-and-swap on the stored version (checked through the key's mod revision).

use super::{escape, Root};
use crate::codec;
use crate::error::Result;
use crate::group::{GroupRecord, StoredOpaque};

pub fn prefix(root: &Root) -> String {
    root.join("groups/")
}

pub fn ser_key(root: &Root, group_id: &str) -> String {
    root.join(&format!("groups/{}", escape(group_id)))
}

/// The group id a key names.
pub fn deser_key(root: &Root, key: &[u8]) -> Result<String> {
    let segs = super::segments_after(key, &prefix(root))?;
    Ok(super::unescape(segs.first().copied().unwrap_or_default()))
}

pub fn ser_value(r: &GroupRecord) -> Result<Vec<u8>> {
    codec::encode(&StoredOpaque::from_record(r))
}

pub fn deser_value(group_id: &str, key: &[u8], value: &[u8]) -> Result<GroupRecord> {
    let name = super::key_name(key);
    codec::decode::<StoredOpaque>(&name, value)?.into_record(group_id, &name)
}
