//! [`RedbKv`](super::RedbKv)'s records in its `kv` table (the layout is in `redb.rs`'s
//! module docs): encoding a key's record, decoding one (a short or damaged record is a
//! data error naming the key), and reading a key or a range of them.

use super::redb::storage;
use super::{Get, KeyRange, KeyValue, RangeEnd};
use crate::error::{Error, Result};
use crate::store::LeaseId;
use redb::{ReadableTable, Table};
use std::ops::Bound;

/// Bytes of a record's header in `kv`.
const HEADER_BYTES: usize = 32;

pub(super) fn encode_record(kv: &KeyValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + kv.value.len());
    for n in [kv.create_revision, kv.mod_revision, kv.version, kv.lease] {
        out.extend_from_slice(&n.to_be_bytes());
    }
    out.extend_from_slice(&kv.value);
    out
}

pub(super) fn decode_record(key: &[u8], bytes: &[u8], keys_only: bool) -> Result<KeyValue> {
    let corrupt = || Error::CorruptValue {
        key: crate::keys::key_name(key),
        reason: "kv record shorter than its header".into(),
    };
    let header = bytes.get(..HEADER_BYTES).ok_or_else(corrupt)?;
    let field = |i: usize| -> Result<i64> {
        let b: [u8; 8] = header
            .get(i * 8..i * 8 + 8)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(corrupt)?;
        Ok(i64::from_be_bytes(b))
    };
    Ok(KeyValue {
        key: key.to_vec(),
        value: if keys_only {
            Vec::new()
        } else {
            bytes[HEADER_BYTES..].to_vec()
        },
        create_revision: field(0)?,
        mod_revision: field(1)?,
        version: field(2)?,
        lease: field(3)?,
    })
}

pub(super) fn leased_key(lease: LeaseId, key: &[u8]) -> Vec<u8> {
    let mut k = lease.to_be_bytes().to_vec();
    k.extend_from_slice(key);
    k
}

pub(super) fn bounds(range: &KeyRange) -> (Bound<&[u8]>, Bound<&[u8]>) {
    let start = Bound::Included(range.start.as_slice());
    let end = match &range.end {
        RangeEnd::Single => Bound::Included(range.start.as_slice()),
        RangeEnd::Before(end) => Bound::Excluded(end.as_slice()),
        RangeEnd::Unbounded => Bound::Unbounded,
    };
    (start, end)
}

/// Whether the range holds no key at all (its end at or before its start); redb refuses
/// such bounds, etcd answers them with nothing.
pub(super) fn empty(range: &KeyRange) -> bool {
    matches!(&range.end, RangeEnd::Before(end) if end.as_slice() <= range.start.as_slice())
}

/// Reads a range from any redb table of the `kv` shape.
pub(super) fn read_range(
    table: &impl ReadableTable<&'static [u8], &'static [u8]>,
    get: &Get,
) -> Result<(Vec<KeyValue>, bool)> {
    if empty(&get.range) {
        return Ok((Vec::new(), false));
    }
    let mut iter = table.range::<&[u8]>(bounds(&get.range)).map_err(storage)?;
    let mut out = Vec::new();
    let mut more = false;
    loop {
        let item = if get.reverse {
            iter.next_back()
        } else {
            iter.next()
        };
        let Some(item) = item else { break };
        if get.limit > 0 && out.len() == get.limit {
            more = true;
            break;
        }
        let (k, v) = item.map_err(storage)?;
        out.push(decode_record(k.value(), v.value(), get.keys_only)?);
    }
    Ok((out, more))
}

pub(super) fn read_key(table: &Table<&[u8], &[u8]>, key: &[u8]) -> Result<Option<KeyValue>> {
    match table.get(key).map_err(storage)? {
        Some(v) => Ok(Some(decode_record(key, v.value(), false)?)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let kv = KeyValue {
            key: b"k".to_vec(),
            value: b"value".to_vec(),
            create_revision: 3,
            mod_revision: 9,
            version: 4,
            lease: 77,
        };
        let bytes = encode_record(&kv);
        assert_eq!(decode_record(b"k", &bytes, false).expect("decode"), kv);
        let keys_only = decode_record(b"k", &bytes, true).expect("decode");
        assert!(keys_only.value.is_empty());
        let err = decode_record(b"k", &bytes[..10], false).expect_err("short");
        assert_eq!(err.kind(), crate::ErrorKind::Data);
    }
}
