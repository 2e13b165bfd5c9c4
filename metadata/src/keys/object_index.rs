//! `catalog/objects/{broker_id:010}/{object}` → [`ObjectIndex`]: the catalog entries of one
//! sealed object, every partition it holds, committed as one key (ARCHITECTURE decision 23).
//! `{object}` is the object's key in the object store, [`super::escape`]d.
//!
//! The value is binary ([`postcard`]: varints, no field names), not the JSON of
//! [`crate::codec`]: one key carries an entry per partition of the object, and its size is
//! what bounds the partitions one seal can catalogue within etcd's request limit (about
//! 30 bytes an entry here against about 250 as JSON). It starts with its own version, and a
//! value of another version, or bytes that do not decode, is [`Error::CorruptValue`].
//!
//! The entries' aborted-transaction indexes ([`crate::catalog_txn`]) follow the ranges as a
//! trailing section, one optional index per range, written only if some entry has one — so
//! a value without it is byte for byte what builds before the index wrote, and those
//! builds (postcard ignores trailing bytes) read a value with it as entries without
//! indexes, which is what such a value means to them: a rolling upgrade needs no new
//! version. Offsets in it are relative to the range's base: a few bytes per entry.

use super::{escape, segments_after, unescape, Root};
use crate::catalog::{CatalogEntry, EntryLayout};
use crate::catalog_txn::{AbortedTxn, TxnIndex};
use crate::error::{Error, Result};
use crate::types::{BrokerId, LeaderEpoch, Offset, PartitionId, TopicId};
use serde::{Deserialize, Serialize};

/// The encoding version of the value.
const VERSION: u32 = 1;

/// A sealed object's catalog entries (all of layout [`EntryLayout::Batches`], all naming
/// `object_key`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectIndex {
    /// The broker that sealed the object (whose lease fenced the commit).
    pub broker_id: BrokerId,
    pub object_key: String,
    pub entries: Vec<CatalogEntry>,
}

#[derive(Serialize, Deserialize)]
struct Stored {
    v: u32,
    broker_id: BrokerId,
    object_key: String,
    topics: Vec<TopicId>,
    ranges: Vec<Range>,
}

/// The trailing section: one optional index per range, in the same order.
#[derive(Serialize, Deserialize)]
struct StoredTxns {
    ranges: Vec<Option<RangeTxn>>,
}

/// An entry's [`TxnIndex`], offsets relative to its range.
#[derive(Serialize, Deserialize)]
struct RangeTxn {
    /// The entry's next offset minus its stop hint (usually 0), if known.
    stable_back: Option<u64>,
    aborts: Vec<RangeAbort>,
}

#[derive(Serialize, Deserialize)]
struct RangeAbort {
    producer_id: i64,
    /// Marker offset minus the transaction's first offset (it may begin in an earlier entry).
    first_back: u64,
    /// Marker offset minus the range's base.
    marker: u64,
}

/// One entry, its topic an index into `topics`, its last offset as a count past the base.
#[derive(Serialize, Deserialize)]
struct Range {
    topic: u32,
    partition: PartitionId,
    base_offset: Offset,
    extra_records: u64,
    max_timestamp_ms: i64,
    byte_start: u64,
    byte_len: u64,
    crc32c: u32,
    leader_epoch: LeaderEpoch,
}

pub fn prefix(root: &Root) -> String {
    root.join("catalog/objects/")
}

pub fn ser_key(root: &Root, broker_id: BrokerId, object_key: &str) -> String {
    root.join(&format!(
        "catalog/objects/{broker_id:010}/{}",
        escape(object_key)
    ))
}

/// The (broker, object key) a key names.
pub fn deser_key(root: &Root, key: &[u8]) -> Result<(BrokerId, String)> {
    let segs = segments_after(key, &prefix(root))?;
    match segs.as_slice() {
        [broker, object] => Ok((super::parse_num(key, broker)?, unescape(object))),
        _ => Err(corrupt(key, "not a sealed-object catalog key")),
    }
}

fn corrupt(key: &[u8], reason: &str) -> Error {
    Error::CorruptValue {
        key: super::key_name(key),
        reason: reason.into(),
    }
}

pub fn ser_value(index: &ObjectIndex) -> Result<Vec<u8>> {
    let mut topics: Vec<TopicId> = Vec::new();
    let mut ranges = Vec::with_capacity(index.entries.len());
    let mut txns = Vec::with_capacity(index.entries.len());
    for e in &index.entries {
        txns.push(e.txn.as_ref().map(|t| range_txn(e, t)).transpose()?);
        if e.object_key != index.object_key || e.layout != EntryLayout::Batches {
            return Err(Error::InvalidRequest(format!(
                "an entry of object {} names {} ({:?})",
                index.object_key, e.object_key, e.layout
            )));
        }
        let extra_records = u64::try_from(e.last_offset - e.base_offset).map_err(|_| {
            Error::InvalidRequest(format!(
                "catalog entry with last offset {} before base offset {}",
                e.last_offset, e.base_offset
            ))
        })?;
        // Objects hold few topics: a linear search beats a map here.
        let topic = match topics.iter().position(|t| *t == e.topic_id) {
            Some(i) => i,
            None => {
                topics.push(e.topic_id);
                topics.len() - 1
            }
        };
        ranges.push(Range {
            topic: u32::try_from(topic)
                .map_err(|_| Error::InvalidRequest("too many topics".into()))?,
            partition: e.partition,
            base_offset: e.base_offset,
            extra_records,
            max_timestamp_ms: e.max_timestamp_ms,
            byte_start: e.byte_start,
            byte_len: e.byte_len,
            crc32c: e.crc32c,
            leader_epoch: e.leader_epoch,
        });
    }
    let encode_err = |e: postcard::Error| Error::Storage(format!("encoding an object index: {e}"));
    let mut out = postcard::to_stdvec(&Stored {
        v: VERSION,
        broker_id: index.broker_id,
        object_key: index.object_key.clone(),
        topics,
        ranges,
    })
    .map_err(encode_err)?;
    if txns.iter().any(Option::is_some) {
        out.extend(postcard::to_stdvec(&StoredTxns { ranges: txns }).map_err(encode_err)?);
    }
    Ok(out)
}

fn range_txn(e: &CatalogEntry, t: &TxnIndex) -> Result<RangeTxn> {
    let bad = || {
        Error::InvalidRequest(format!(
            "the transaction index of entry {}..={} names offsets outside it",
            e.base_offset, e.last_offset
        ))
    };
    let back = |from: Offset, to: Offset| u64::try_from(from - to).map_err(|_| bad());
    Ok(RangeTxn {
        stable_back: t.stable_end.map(|s| back(e.next_offset(), s)).transpose()?,
        aborts: t
            .aborts
            .iter()
            .map(|a| {
                if a.last_offset > e.last_offset {
                    return Err(bad());
                }
                Ok(RangeAbort {
                    producer_id: a.producer_id,
                    first_back: back(a.last_offset, a.first_offset)?,
                    marker: back(a.last_offset, e.base_offset)?,
                })
            })
            .collect::<Result<_>>()?,
    })
}

/// The [`TxnIndex`] a trailing-section row gives the entry `base..=last`.
fn txn_index(key: &[u8], base: Offset, last: Offset, r: RangeTxn) -> Result<TxnIndex> {
    let bad = || corrupt(key, "a transaction index names offsets outside its entry");
    let minus = |from: Offset, n: u64| -> Result<Offset> {
        i64::try_from(n)
            .ok()
            .and_then(|n| from.checked_sub(n))
            .ok_or_else(bad)
    };
    let mut aborts = Vec::with_capacity(r.aborts.len());
    for a in r.aborts {
        let last_offset = i64::try_from(a.marker)
            .ok()
            .and_then(|m| base.checked_add(m))
            .filter(|&m| m <= last)
            .ok_or_else(bad)?;
        aborts.push(AbortedTxn {
            producer_id: a.producer_id,
            first_offset: minus(last_offset, a.first_back)?,
            last_offset,
        });
    }
    Ok(TxnIndex {
        stable_end: r.stable_back.map(|b| minus(last + 1, b)).transpose()?,
        aborts,
    })
}

pub fn deser_value(key: &[u8], value: &[u8]) -> Result<ObjectIndex> {
    // The version comes first, so a value of another version is named as such.
    let (v, _) = postcard::take_from_bytes::<u32>(value)
        .map_err(|e| corrupt(key, &format!("not an object index: {e}")))?;
    if v != VERSION {
        return Err(corrupt(key, &format!("unknown object index version {v}")));
    }
    let (s, rest): (Stored, _) = postcard::take_from_bytes(value)
        .map_err(|e| corrupt(key, &format!("not an object index: {e}")))?;
    let mut txns: Vec<Option<RangeTxn>> = if rest.is_empty() {
        Vec::new()
    } else {
        postcard::from_bytes::<StoredTxns>(rest)
            .map_err(|e| corrupt(key, &format!("not an object index's transactions: {e}")))?
            .ranges
    };
    if !txns.is_empty() && txns.len() != s.ranges.len() {
        return Err(corrupt(key, "transaction indexes do not match the entries"));
    }
    txns.reverse();
    let mut entries = Vec::with_capacity(s.ranges.len());
    for r in s.ranges {
        let txn = txns.pop().flatten();
        let topic_id = *usize::try_from(r.topic)
            .ok()
            .and_then(|i| s.topics.get(i))
            .ok_or_else(|| corrupt(key, "an entry names a topic the index lacks"))?;
        let last_offset = i64::try_from(r.extra_records)
            .ok()
            .and_then(|n| r.base_offset.checked_add(n))
            .filter(|_| r.base_offset >= 0)
            .ok_or_else(|| corrupt(key, "an entry's offsets are out of range"))?;
        let txn = txn
            .map(|t| txn_index(key, r.base_offset, last_offset, t))
            .transpose()?;
        entries.push(CatalogEntry {
            topic_id,
            partition: r.partition,
            base_offset: r.base_offset,
            last_offset,
            max_timestamp_ms: r.max_timestamp_ms,
            object_key: s.object_key.clone(),
            byte_start: r.byte_start,
            byte_len: r.byte_len,
            crc32c: r.crc32c,
            leader_epoch: r.leader_epoch,
            layout: EntryLayout::Batches,
            txn,
        });
    }
    Ok(ObjectIndex {
        broker_id: s.broker_id,
        object_key: s.object_key,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(topic: u128, partition: PartitionId, base: Offset, last: Offset) -> CatalogEntry {
        CatalogEntry {
            topic_id: TopicId(uuid::Uuid::from_u128(topic)),
            partition,
            base_offset: base,
            last_offset: last,
            max_timestamp_ms: 1_733_000_000_000 + base,
            object_key: "data/b7/00000000000000000001-ab.oxb".into(),
            byte_start: 4096 * partition as u64,
            byte_len: 4096,
            crc32c: 0xdead_beef,
            leader_epoch: 3,
            layout: EntryLayout::Batches,
            txn: None,
        }
    }

    #[test]
    fn round_trips_and_is_compact() {
        let root = Root::new("c");
        let index = ObjectIndex {
            broker_id: 7,
            object_key: "data/b7/00000000000000000001-ab.oxb".into(),
            entries: (0..4000)
                .map(|p| entry(1 + (p % 3) as u128, p, 1_000_000, 1_000_040))
                .collect(),
        };
        let key = ser_key(&root, 7, &index.object_key);
        assert_eq!(
            deser_key(&root, key.as_bytes()).expect("key"),
            (7, index.object_key.clone())
        );
        let bytes = ser_value(&index).expect("encode");
        assert!(
            bytes.len() < 4000 * 40,
            "{} bytes for 4,000 entries",
            bytes.len()
        );
        assert_eq!(deser_value(key.as_bytes(), &bytes).expect("decode"), index);
    }

    #[test]
    fn transaction_indexes_ride_in_a_section_older_builds_skip() {
        let root = Root::new("c");
        let mut entries: Vec<CatalogEntry> = (0..3).map(|p| entry(1, p, 1_000, 1_040)).collect();
        entries[0].txn = Some(TxnIndex {
            stable_end: Some(1_041),
            aborts: vec![],
        });
        entries[1].txn = Some(TxnIndex {
            stable_end: Some(1_030),
            aborts: vec![
                AbortedTxn {
                    producer_id: 9,
                    first_offset: 990,
                    last_offset: 1_004,
                },
                AbortedTxn {
                    producer_id: 4_000_000_000,
                    first_offset: 1_010,
                    last_offset: 1_040,
                },
            ],
        });
        let index = ObjectIndex {
            broker_id: 7,
            object_key: entries[0].object_key.clone(),
            entries,
        };
        let key = ser_key(&root, 7, &index.object_key);
        let bytes = ser_value(&index).expect("encode");
        assert_eq!(deser_value(key.as_bytes(), &bytes).expect("decode"), index);
        // A build before the index reads the same entries, without it.
        let old: Stored = postcard::from_bytes(&bytes).expect("old decoder");
        assert_eq!(old.ranges.len(), 3);
        // Without any index the value is exactly what it was before the index existed.
        let plain = ObjectIndex {
            entries: index
                .entries
                .iter()
                .map(|e| CatalogEntry {
                    txn: None,
                    ..e.clone()
                })
                .collect(),
            ..index.clone()
        };
        let plain_bytes = ser_value(&plain).expect("encode");
        assert!(plain_bytes.len() + 10 < bytes.len());
        assert_eq!(
            postcard::take_from_bytes::<Stored>(&plain_bytes)
                .expect("decode")
                .1
                .len(),
            0
        );
        assert_eq!(
            deser_value(key.as_bytes(), &plain_bytes).expect("decode"),
            plain
        );
        // An abort whose marker lies outside its entry is refused.
        let mut bad = index.clone();
        bad.entries[0].txn = Some(TxnIndex {
            stable_end: None,
            aborts: vec![AbortedTxn {
                producer_id: 1,
                first_offset: 1_000,
                last_offset: 1_041,
            }],
        });
        assert!(ser_value(&bad).is_err());
    }

    #[test]
    fn hostile_values_are_corrupt_not_panics() {
        let key = b"/oxbow/c/catalog/objects/0000000001/x";
        for bad in [
            &b""[..],
            &[2],
            &[1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            &[1, 1, 0, 5],
        ] {
            let err = deser_value(key, bad).expect_err("corrupt");
            assert!(matches!(err, Error::CorruptValue { .. }), "{err}");
        }
        // A range naming a topic the value does not list.
        let bad = postcard::to_stdvec(&Stored {
            v: VERSION,
            broker_id: 1,
            object_key: "o".into(),
            topics: vec![],
            ranges: vec![Range {
                topic: 3,
                partition: 0,
                base_offset: 0,
                extra_records: 0,
                max_timestamp_ms: 0,
                byte_start: 0,
                byte_len: 1,
                crc32c: 0,
                leader_epoch: 0,
            }],
        })
        .expect("encode");
        assert!(matches!(
            deser_value(key, &bad),
            Err(Error::CorruptValue { .. })
        ));
        // An entry of another object or layout is refused at encoding.
        let mut e = entry(1, 0, 0, 0);
        e.object_key = "other".into();
        let index = ObjectIndex {
            broker_id: 1,
            object_key: "o".into(),
            entries: vec![e],
        };
        assert!(ser_value(&index).is_err());
    }
}
