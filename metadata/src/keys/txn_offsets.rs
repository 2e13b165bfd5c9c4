//! `txn-offsets/{group}/{producer_id:020}` → [`PendingTxnOffsets`]: a transaction's offsets
//! for a group, pending until its marker (issue 16). The group id escaped
//! ([`super::escape`]), so `txn-offsets/{group}/` holds exactly one group's records, and
//! `txn-offsets/` every transaction in flight.

use super::{escape, Root};
use crate::codec;
use crate::error::Result;
use crate::group::PendingTxnOffsets;

pub fn prefix(root: &Root) -> String {
    root.join("txn-offsets/")
}

pub fn group_prefix(root: &Root, group_id: &str) -> String {
    root.join(&format!("txn-offsets/{}/", escape(group_id)))
}

/// `producer_id` is never negative (checked before a key is made).
pub fn ser_key(root: &Root, group_id: &str, producer_id: i64) -> String {
    root.join(&format!(
        "txn-offsets/{}/{producer_id:020}",
        escape(group_id)
    ))
}

/// The group id and producer id a key names.
pub fn deser_key(root: &Root, key: &[u8]) -> Result<(String, i64)> {
    let segs = super::segments_after(key, &prefix(root))?;
    match segs.as_slice() {
        [group, producer_id] => Ok((super::unescape(group), super::parse_num(key, producer_id)?)),
        _ => Err(crate::Error::CorruptValue {
            key: super::key_name(key),
            reason: "not a pending offsets key".into(),
        }),
    }
}

pub fn ser_value(r: &PendingTxnOffsets) -> Result<Vec<u8>> {
    codec::encode(r)
}

pub fn deser_value(key: &[u8], value: &[u8]) -> Result<PendingTxnOffsets> {
    codec::decode(&super::key_name(key), value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_groups_records_are_not_a_prefix_of_anothers() {
        let root = Root::new("c");
        let a = ser_key(&root, "g", 7);
        let b = ser_key(&root, "g/x", 7);
        assert!(a.starts_with(&group_prefix(&root, "g")));
        assert!(!b.starts_with(&group_prefix(&root, "g")));
        assert!(ser_key(&root, "g", 9) < ser_key(&root, "g", 10));
        assert!(a.starts_with(&prefix(&root)));
        assert_eq!(
            deser_key(&root, b.as_bytes()).expect("key"),
            ("g/x".to_string(), 7)
        );
        assert!(deser_key(&root, prefix(&root).as_bytes()).is_err());
    }
}
