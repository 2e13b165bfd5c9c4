//! `txns/{transactional id}` → the transaction coordinator's record (version + base64
//! data), replaced by compare-and-swap on the stored version.

use super::{escape, Root};
use crate::codec;
use crate::error::Result;
use crate::group::StoredOpaque;
use crate::txn::TxnRecord;

pub fn prefix(root: &Root) -> String {
    root.join("txns/")
}

pub fn ser_key(root: &Root, id: &str) -> String {
    root.join(&format!("txns/{}", escape(id)))
}

/// The transactional id a key names.
pub fn deser_key(root: &Root, key: &[u8]) -> Result<String> {
    let segs = super::segments_after(key, &prefix(root))?;
    Ok(super::unescape(segs.first().copied().unwrap_or_default()))
}

pub fn ser_value(r: &TxnRecord) -> Result<Vec<u8>> {
    codec::encode(&StoredOpaque::new(r.version, &r.data))
}

pub fn deser_value(id: &str, key: &[u8], value: &[u8]) -> Result<TxnRecord> {
    let name = super::key_name(key);
    let (version, data) =
        codec::decode::<StoredOpaque>(&name, value)?.into_parts(&name, "transaction")?;
    Ok(TxnRecord {
        transactional_id: id.to_string(),
        version,
        data,
    })
}
