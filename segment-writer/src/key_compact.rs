//! Key compaction (`cleanup.policy=compact`): the pure core that rewrites a partition's
//! closed batches keeping the latest record per key, as Kafka's log cleaner does. No I/O:
//! the compactor ([`crate::compact`]) fetches the batches of a run of catalog entries, calls
//! [`clean`], and writes the result as a segment with the same offset span.
//!
//! The rule (Kafka's `LogCleaner`, ARCHITECTURE.md decision 26):
//! - An [`OffsetMap`] (16-byte key hash → latest offset) is built from the *dirty* batches
//!   (offsets at or after `dirty_from`), batch by batch, until the next batch might not fit
//!   (`--compaction-key-map-bytes` / 24 bytes per key, Kafka's accounting). The map then
//!   covers up to the last offset of the last batch added: [`Cleaned::cleaned_to`].
//!   Batches after it are copied unchanged and cleaned in a later round (Kafka's "clean
//!   only up to the offset the map covers").
//! - Every record up to `cleaned_to` (the clean part before `dirty_from` too) is dropped if
//!   the map holds a later offset for its key, so a key's latest record within the map's
//!   range — or any record whose key's latest is beyond it — is kept. Records without a key
//!   are dropped (Kafka drops them too; compacted topics refuse them on produce).
//! - A tombstone (null value) that is its key's latest is kept until `delete.retention.ms`
//!   after the cleaning that first kept it, KIP-534's delete horizon, as Kafka does: the
//!   first cleaning that keeps a tombstone in a batch without a horizon stamps one
//!   (`now + delete.retention.ms`, attribute bit 6, stored as the base timestamp), and a
//!   later cleaning at or past it drops the batch's tombstones. So a consumer has
//!   `delete.retention.ms` from the first cleaning to see a delete, however old the
//!   tombstone's own timestamp (a quiet topic may first be cleaned long after the write).
//!   A negative `delete.retention.ms` stamps nothing and keeps tombstones forever.
//! - A batch keeps its header: base offset, last offset delta (Kafka's
//!   `overrideLastOffset`: the batch still ends where it ended), producer id, epoch, base
//!   sequence, attributes, codec, partition leader epoch and base timestamp (unless it is
//!   stamped); retained records are copied byte for byte, so their offset and timestamp
//!   deltas are unchanged and gaps appear inside the batch (a stamped batch re-encodes
//!   each timestamp delta against the horizon, so every record's timestamp is unchanged).
//!   Record count, length, max timestamp (`CreateTime`: of the retained records) and CRC
//!   are recomputed. A batch that lost nothing and needs no stamp is copied as stored.
//! - A batch left with no record is dropped, unless it is the last batch of the range (so
//!   the rewritten run still ends at the same offset and can replace it in the catalog) or
//!   the last batch of its producer in the range (its sequence is producer state, as Kafka
//!   keeps such batches). It is then written as Kafka's `writeEmptyHeader` does: no
//!   records, codec none, both timestamps the batch's max timestamp.
//!
//! **The transactions seam.** Transactional and control batches are copied verbatim and
//! their keys are not put in the map (an aborted record must not shadow an older committed
//! one). They exist once Produce takes transactional ids (the partition side is wired,
//! `txn.rs`); until this seam is done they are kept whole, never cleaned. The
//! transactions issue must, here: put the keys of *committed* transactional records in the
//! map and drop *aborted* ones (from the aborted-transaction index / the markers found in
//! the range, as Kafka's `CleanedTransactionMetadata`); drop a transaction's control
//! marker once no record of it remains and it is older than `delete.retention.ms`; and keep
//! the empty batch of a producer with an open transaction.
//!
//! Hostile stored bytes: every batch's CRC is checked, its records are decompressed within
//! `max_decompressed_batch_bytes` ([`crate::decompress`]) and walked by the one walker
//! ([`crate::records`]); offsets must increase within the batch and stay inside it.
//! Anything else is an error (the caller freezes the data), never a panic.

use crate::batch::{self, BatchHeader, BATCH_HEADER_BYTES, BATCH_LOG_OVERHEAD};
use crate::compress::compress;
use crate::decompress::Codec;
use crate::error::{Error, Result};
use crate::records;
use bytes::Bytes;
use oxbow_metadata::Offset;
use std::collections::HashMap;
use std::hash::Hasher;

/// Bytes one key costs the map, as Kafka accounts it: a 16-byte hash and an 8-byte offset.
pub const KEY_MAP_ENTRY_BYTES: u64 = 24;
/// Default `--compaction-key-map-bytes` (64 MiB: about 2.8 M keys per cleaning).
pub const DEFAULT_KEY_MAP_BYTES: u64 = 64 << 20;

/// A key's 16-byte hash (two SipHash-1-3 passes with different prefixes; collisions at
/// 2^-64 per pair are as rare as with Kafka's MD5).
pub type KeyHash = [u8; 16];

pub fn key_hash(key: &[u8]) -> KeyHash {
    let mut out = [0u8; 16];
    for (i, half) in out.chunks_exact_mut(8).enumerate() {
        // `DefaultHasher::new()` is SipHash-1-3 with fixed keys: the same in every process
        // of one build (the map lives in memory only, so nothing depends on it across builds).
        let mut h = std::hash::DefaultHasher::new();
        h.write_u8(i as u8);
        h.write(key);
        half.copy_from_slice(&h.finish().to_be_bytes());
    }
    out
}

/// Key hash → latest offset, holding at most `capacity` keys. The hash table's own
/// overhead comes on top of the 24 bytes a key is charged (up to about 2× with the
/// table's load factor and power-of-two growth); it grows with the keys really seen.
#[derive(Debug)]
pub struct OffsetMap {
    latest: HashMap<KeyHash, Offset>,
    capacity: usize,
}

impl OffsetMap {
    /// A map within `bytes` ([`KEY_MAP_ENTRY_BYTES`] per key; at least one key).
    pub fn with_budget(bytes: u64) -> Self {
        OffsetMap {
            latest: HashMap::new(),
            capacity: usize::try_from(bytes / KEY_MAP_ENTRY_BYTES)
                .unwrap_or(usize::MAX)
                .max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    /// Room for `keys` more keys, whether or not they are new.
    fn has_room_for(&self, keys: usize) -> bool {
        self.latest.len().saturating_add(keys) <= self.capacity
    }

    fn put(&mut self, key: KeyHash, offset: Offset) {
        self.latest.insert(key, offset);
    }

    pub fn get(&self, key: &KeyHash) -> Option<Offset> {
        self.latest.get(key).copied()
    }
}

/// What the core needs besides the batches.
#[derive(Clone, Copy, Debug)]
pub struct CleanParams {
    /// First offset whose records go into the map (where the partition's cleaned prefix
    /// ends); records before it are only removed, never shadow others.
    pub dirty_from: Offset,
    /// The compactor's clock, Unix ms.
    pub now_ms: i64,
    /// `delete.retention.ms`: how long a latest tombstone stays (by its batch's max
    /// timestamp). Negative keeps tombstones forever.
    pub delete_retention_ms: i64,
    /// Budget of one batch's decompressed records (`--max-decompressed-batch-bytes`).
    pub max_decompressed_batch_bytes: usize,
}

/// The result of [`clean`].
#[derive(Clone, Debug, Default)]
pub struct Cleaned {
    /// The rewritten batches, in offset order; the last ends at the input's last offset.
    pub batches: Vec<Bytes>,
    /// Last offset the map covered: records up to it were cleaned, those after it copied.
    /// `None` when the map could not hold the first dirty batch (or there was none):
    /// nothing was cleaned and `batches` is the input.
    pub cleaned_to: Option<Offset>,
    pub records_in: u64,
    pub records_out: u64,
    /// Stored bytes of the input batches and of the output.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Decompressed record bytes walked (both passes): the core's read amplification.
    pub bytes_decoded: u64,
    /// Whether any batch differs from the input (otherwise nothing needs writing).
    pub changed: bool,
}

/// One batch's records, checked: the section and each record's absolute offset.
struct Decoded<'a> {
    header: BatchHeader,
    section: std::borrow::Cow<'a, [u8]>,
}

fn corrupt(h: &BatchHeader, why: impl std::fmt::Display) -> Error {
    Error::CorruptBatch(format!("batch at offset {}: {why}", h.base_offset))
}

/// Checks one stored batch (whole, CRC) and decompresses its records within the budget.
fn decode<'a>(raw: &'a [u8], limit: usize) -> Result<Decoded<'a>> {
    let header = batch::peek_header(raw)?
        .filter(|h| h.size == raw.len())
        .ok_or_else(|| {
            Error::CorruptBatch(format!(
                "{} bytes are not exactly one record batch",
                raw.len()
            ))
        })?;
    let stored_crc = u32::from_be_bytes([raw[17], raw[18], raw[19], raw[20]]);
    if crc32c::crc32c(&raw[21..]) != stored_crc {
        return Err(corrupt(&header, "CRC mismatch"));
    }
    if header.last_offset_delta < 0 || header.record_count < 0 {
        return Err(corrupt(
            &header,
            "negative last offset delta or record count",
        ));
    }
    let section = records::records_section(raw, &header, limit)?;
    Ok(Decoded { header, section })
}

/// One record of a decoded batch: its offset, key, whether it is a tombstone, its
/// timestamp delta and its encoding.
struct Rec<'a> {
    offset: Offset,
    key: Option<&'a [u8]>,
    tombstone: bool,
    timestamp_delta: i64,
    encoded: &'a [u8],
}

/// Walks a decoded batch's records, checking offsets increase and stay inside the batch.
fn records_of<'a>(d: &'a Decoded<'a>) -> Result<Vec<Rec<'a>>> {
    let h = &d.header;
    let mut out = Vec::new();
    let mut previous: Option<i32> = None;
    for r in records::walk(&d.section, h.record_count) {
        let r = r?;
        if r.offset_delta < 0
            || r.offset_delta > h.last_offset_delta
            || previous.is_some_and(|p| r.offset_delta <= p)
        {
            return Err(corrupt(
                h,
                format!("record offset delta {} out of order", r.offset_delta),
            ));
        }
        previous = Some(r.offset_delta);
        out.push(Rec {
            offset: h.base_offset + i64::from(r.offset_delta),
            key: r.key,
            tombstone: r.value.is_none(),
            timestamp_delta: r.timestamp_delta,
            encoded: r.encoded(),
        });
    }
    Ok(out)
}

/// How far [`OffsetMap::add`] got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapProgress {
    /// Last offset of the last batch whose keys are in the map (or that needed none).
    pub covered_to: Option<Offset>,
    /// The map could not take the next batch: cleaning stops at `covered_to`.
    pub full: bool,
    /// Decompressed record bytes walked.
    pub bytes_decoded: u64,
}

impl OffsetMap {
    /// Pass 1: puts the keys of the dirty batches of `batches` (those ending at or after
    /// `dirty_from`; one partition's, in offset order) in the map, batch by batch, and stops
    /// before a batch whose records might not fit. Call it on consecutive pieces of the
    /// dirty range, until it reports `full`.
    pub fn add(
        &mut self,
        batches: &[Bytes],
        dirty_from: Offset,
        limit: usize,
    ) -> Result<MapProgress> {
        let mut p = MapProgress::default();
        for raw in batches {
            let h = batch::peek_header(raw)?
                .ok_or_else(|| Error::CorruptBatch("a record batch is cut short".into()))?;
            if h.last_offset() < dirty_from {
                continue;
            }
            if h.is_transactional() || h.is_control() {
                // Not in the map: see the transactions seam in the module docs.
                p.covered_to = Some(h.last_offset());
                continue;
            }
            let count = usize::try_from(h.record_count).unwrap_or(usize::MAX);
            if !self.has_room_for(count) {
                p.full = true;
                break;
            }
            let d = decode(raw, limit)?;
            p.bytes_decoded += d.section.len() as u64;
            for r in records_of(&d)? {
                if let Some(key) = r.key {
                    self.put(key_hash(key), r.offset);
                }
            }
            p.covered_to = Some(h.last_offset());
        }
        Ok(p)
    }
}

/// Pass 2 of one run of batches that the compactor rewrites as one segment.
#[derive(Clone, Copy, Debug)]
pub struct RunParams {
    /// Records up to here are cleaned against the map; batches starting after it are
    /// copied (the map does not cover them).
    pub cleaned_to: Offset,
    pub now_ms: i64,
    pub delete_retention_ms: i64,
    pub max_decompressed_batch_bytes: usize,
}

/// Both passes over one range, as one run: the map from its dirty part, then the rewrite.
pub fn clean(batches: &[Bytes], params: CleanParams, map: &mut OffsetMap) -> Result<Cleaned> {
    let limit = params.max_decompressed_batch_bytes;
    let progress = map.add(batches, params.dirty_from, limit)?;
    let Some(cleaned_to) = progress.covered_to else {
        let bytes: u64 = batches.iter().map(|b| b.len() as u64).sum();
        return Ok(Cleaned {
            batches: batches.to_vec(),
            bytes_in: bytes,
            bytes_out: bytes,
            ..Cleaned::default()
        });
    };
    let mut out = clean_run(
        batches,
        map,
        RunParams {
            cleaned_to,
            now_ms: params.now_ms,
            delete_retention_ms: params.delete_retention_ms,
            max_decompressed_batch_bytes: limit,
        },
    )?;
    out.bytes_decoded += progress.bytes_decoded;
    Ok(out)
}

/// Pass 2: rewrites one run of `batches` (one partition's, in offset order, as stored)
/// against `map` by the rule in the module docs; the result ends at the same offset.
/// Errors are the input's: a batch that fails its checks.
pub fn clean_run(batches: &[Bytes], map: &OffsetMap, params: RunParams) -> Result<Cleaned> {
    let limit = params.max_decompressed_batch_bytes;
    let cleaned_to = params.cleaned_to;
    let mut out = Cleaned {
        bytes_in: batches.iter().map(|b| b.len() as u64).sum(),
        cleaned_to: Some(cleaned_to),
        ..Cleaned::default()
    };
    // Each producer's last batch in the run: kept even if emptied (producer state).
    let mut last_of_producer: HashMap<i64, usize> = HashMap::new();
    for (i, raw) in batches.iter().enumerate() {
        if let Some(h) = batch::peek_header(raw)? {
            if h.producer_id >= 0 {
                last_of_producer.insert(h.producer_id, i);
            }
        }
    }
    // The horizon a batch keeping a tombstone gets if it has none yet.
    let stamp = (params.delete_retention_ms >= 0)
        .then(|| params.now_ms.saturating_add(params.delete_retention_ms));
    for (i, raw) in batches.iter().enumerate() {
        let d = decode(raw, limit)?;
        let h = d.header;
        let count = u64::try_from(h.record_count).unwrap_or(0);
        out.records_in += count;
        if h.base_offset > cleaned_to || h.is_transactional() || h.is_control() {
            out.records_out += count;
            out.batches.push(raw.clone());
            continue;
        }
        out.bytes_decoded += d.section.len() as u64;
        let recs = records_of(&d)?;
        let expired = h.delete_horizon_ms().is_some_and(|t| params.now_ms >= t);
        let kept: Vec<&Rec> = recs
            .iter()
            .filter(|r| {
                let Some(key) = r.key else { return false };
                let shadowed = map.get(&key_hash(key)).is_some_and(|m| r.offset < m);
                let expired_tombstone = r.tombstone && expired;
                !(shadowed || expired_tombstone)
            })
            .collect();
        out.records_out += kept.len() as u64;
        let new_horizon =
            stamp.filter(|_| h.delete_horizon_ms().is_none() && kept.iter().any(|r| r.tombstone));
        if kept.len() == recs.len() && new_horizon.is_none() {
            out.batches.push(raw.clone());
            continue;
        }
        out.changed = true;
        if kept.is_empty() {
            let last = i + 1 == batches.len();
            let producer_state =
                h.producer_id >= 0 && last_of_producer.get(&h.producer_id) == Some(&i);
            if last || producer_state {
                out.batches.push(empty_batch(raw, &h));
            }
            continue;
        }
        out.batches
            .push(rebuilt_batch(raw, &h, &kept, new_horizon)?);
    }
    out.bytes_out = out.batches.iter().map(|b| b.len() as u64).sum();
    Ok(out)
}

/// A compacted topic's settings (its `cleanup.policy` includes `compact`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyCompaction {
    /// `delete.retention.ms`.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: an entry is cleanable once its newest record is this old.
    pub min_lag_ms: i64,
    /// `max.compaction.lag.ms`: dirty data this old is cleaned whatever the dirty ratio.
    pub max_lag_ms: i64,
    /// `min.cleanable.dirty.ratio`.
    pub min_dirty_ratio: f64,
}

/// What deciding whether to clean looks at of one catalog entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CleanableEntry {
    pub last_offset: Offset,
    pub max_timestamp_ms: i64,
    /// Bytes of record batches it holds.
    pub bytes: u64,
}

/// How many of `entries` (a partition's catalogued entries from its log start, in offset
/// order, all below the sealed end) may be cleaned: the prefix whose newest record is at
/// least `min.compaction.lag.ms` old (Kafka's first uncleanable offset: the first segment
/// with a record too young).
pub fn cleanable_len(entries: &[CleanableEntry], now_ms: i64, c: &KeyCompaction) -> usize {
    let newest_allowed = now_ms.saturating_sub(c.min_lag_ms.max(0));
    entries
        .iter()
        .take_while(|e| e.max_timestamp_ms <= newest_allowed)
        .count()
}

/// Whether the cleanable `entries` should be cleaned now, the partition having been
/// cleaned up to `dirty_from` (exclusive; `Offset::MIN` if never, since this process
/// started): some are dirty, and the dirty share of their bytes reaches
/// `min.cleanable.dirty.ratio`, or the first dirty entry's newest record is older than
/// `max.compaction.lag.ms` (Kafka measures the first dirty segment's oldest; an entry's
/// newest is what the catalog keeps, so this may run up to one entry's span later).
pub fn due(entries: &[CleanableEntry], dirty_from: Offset, now_ms: i64, c: &KeyCompaction) -> bool {
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    let dirty: Vec<&CleanableEntry> = entries
        .iter()
        .filter(|e| e.last_offset >= dirty_from)
        .collect();
    let Some(first_dirty) = dirty.first() else {
        return false;
    };
    let dirty_bytes: u64 = dirty.iter().map(|e| e.bytes).sum();
    let ratio = if total == 0 {
        1.0
    } else {
        dirty_bytes as f64 / total as f64
    };
    let overdue = first_dirty.max_timestamp_ms < now_ms.saturating_sub(c.max_lag_ms.max(0));
    ratio >= c.min_dirty_ratio || overdue
}

/// Header fields (RecordBatch v2 offsets; see [`crate::batch`]).
const AT_LENGTH: usize = 8;
const AT_CRC: usize = 17;
const AT_ATTRIBUTES: usize = 21;
const AT_BASE_TIMESTAMP: usize = 27;
const AT_MAX_TIMESTAMP: usize = 35;
const AT_RECORD_COUNT: usize = 57;

/// `raw`'s header with a new records section, count and max timestamp; CRC recomputed.
fn with_records(raw: &[u8], section: &[u8], count: usize, max_timestamp: i64) -> Result<Bytes> {
    let mut b = Vec::with_capacity(BATCH_HEADER_BYTES + section.len());
    b.extend_from_slice(&raw[..BATCH_HEADER_BYTES]);
    b.extend_from_slice(section);
    let length = i32::try_from(b.len() - BATCH_LOG_OVERHEAD)
        .map_err(|_| Error::Internal("rewritten batch over 2 GiB".into()))?;
    let count = i32::try_from(count).map_err(|_| Error::Internal("record count".into()))?;
    b[AT_LENGTH..AT_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
    b[AT_MAX_TIMESTAMP..AT_MAX_TIMESTAMP + 8].copy_from_slice(&max_timestamp.to_be_bytes());
    b[AT_RECORD_COUNT..AT_RECORD_COUNT + 4].copy_from_slice(&count.to_be_bytes());
    let crc = crc32c::crc32c(&b[AT_ATTRIBUTES..]);
    b[AT_CRC..AT_CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(Bytes::from(b))
}

/// The batch with only `kept` (in order), in its own codec; with `horizon`, stamped with
/// that delete horizon (attribute bit 6, base timestamp) and each record's timestamp delta
/// re-encoded against it so that its timestamp is unchanged.
fn rebuilt_batch(
    raw: &[u8],
    h: &BatchHeader,
    kept: &[&Rec],
    horizon: Option<i64>,
) -> Result<Bytes> {
    let mut plain: Vec<u8> = Vec::new();
    for r in kept {
        match horizon {
            None => plain.extend_from_slice(r.encoded),
            Some(base) => {
                let timestamp = h.base_timestamp.saturating_add(r.timestamp_delta);
                let delta = timestamp.saturating_sub(base);
                plain.extend_from_slice(&records::with_timestamp_delta(r.encoded, delta)?);
            }
        }
    }
    let section = compress(Codec::from_attributes(h.attributes)?, &plain)?;
    let max_timestamp = if h.is_log_append_time() {
        h.max_timestamp
    } else {
        kept.iter()
            .map(|r| h.base_timestamp.saturating_add(r.timestamp_delta))
            .max()
            .unwrap_or(h.max_timestamp)
    };
    match horizon {
        None => with_records(raw, &section, kept.len(), max_timestamp),
        Some(base) => {
            let mut head = raw[..BATCH_HEADER_BYTES].to_vec();
            let attributes = h.attributes | batch::ATTR_DELETE_HORIZON;
            head[AT_ATTRIBUTES..AT_ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
            head[AT_BASE_TIMESTAMP..AT_BASE_TIMESTAMP + 8].copy_from_slice(&base.to_be_bytes());
            with_records(&head, &section, kept.len(), max_timestamp)
        }
    }
}

/// The batch with no records, as Kafka's `DefaultRecordBatch.writeEmptyHeader`: codec
/// none, base and max timestamp the batch's max timestamp.
fn empty_batch(raw: &[u8], h: &BatchHeader) -> Bytes {
    let mut head = raw[..BATCH_HEADER_BYTES].to_vec();
    let attributes = h.attributes & !0x07 & !batch::ATTR_DELETE_HORIZON;
    head[AT_ATTRIBUTES..AT_ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    head[AT_BASE_TIMESTAMP..AT_BASE_TIMESTAMP + 8].copy_from_slice(&h.max_timestamp.to_be_bytes());
    // A 61-byte batch always fits its length field.
    match with_records(&head, &[], 0, h.max_timestamp) {
        Ok(b) => b,
        Err(_) => Bytes::from(head),
    }
}

/// Builders of keyed batches for tests and benches (here and in other crates' tests).
#[doc(hidden)]
pub mod testing {
    use super::*;

    fn put_varlong(out: &mut Vec<u8>, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }

    fn put_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) {
        match b {
            Some(b) => {
                put_varlong(out, b.len() as i64);
                out.extend_from_slice(b);
            }
            None => put_varlong(out, -1),
        }
    }

    /// A record to build: key and value (`None` value: a tombstone).
    pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

    /// A valid batch at `base_offset` of `records` (key, value; `None` value: a tombstone)
    /// with offset deltas 0, 1, …, timestamps `timestamp`, `timestamp + 1`, …, in `codec`.
    pub fn keyed_batch(
        base_offset: Offset,
        timestamp: i64,
        records: &[KeyValue],
        codec: Codec,
    ) -> Bytes {
        let mut plain = Vec::new();
        for (i, (k, v)) in records.iter().enumerate() {
            let mut body = vec![0u8];
            put_varlong(&mut body, i as i64);
            put_varlong(&mut body, i as i64);
            put_bytes(&mut body, *k);
            put_bytes(&mut body, *v);
            put_varlong(&mut body, 0);
            put_varlong(&mut plain, body.len() as i64);
            plain.extend_from_slice(&body);
        }
        let attributes: i16 = match codec {
            Codec::None => 0,
            Codec::Gzip => 1,
            Codec::Snappy => 2,
            Codec::Lz4 => 3,
            Codec::Zstd => 4,
        };
        #[allow(clippy::unwrap_used)]
        let section = compress(codec, &plain).unwrap();
        let n = records.len() as i32;
        let mut b = Vec::new();
        b.extend_from_slice(&base_offset.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.push(2);
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&attributes.to_be_bytes());
        b.extend_from_slice(&(n - 1).max(0).to_be_bytes());
        b.extend_from_slice(&timestamp.to_be_bytes());
        b.extend_from_slice(&(timestamp + i64::from(n - 1).max(0)).to_be_bytes());
        b.extend_from_slice(&(-1i64).to_be_bytes());
        b.extend_from_slice(&(-1i16).to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&n.to_be_bytes());
        b.extend_from_slice(&section);
        let length = (b.len() - BATCH_LOG_OVERHEAD) as i32;
        b[AT_LENGTH..AT_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
        let crc = crc32c::crc32c(&b[AT_ATTRIBUTES..]);
        b[AT_CRC..AT_CRC + 4].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(b)
    }

    /// Sets a batch's producer id, epoch, base sequence and attribute bits (OR-ed in);
    /// CRC recomputed.
    pub fn with_producer(
        raw: &[u8],
        producer_id: i64,
        epoch: i16,
        base_sequence: i32,
        attributes: i16,
    ) -> Bytes {
        let mut b = raw.to_vec();
        b[43..51].copy_from_slice(&producer_id.to_be_bytes());
        b[51..53].copy_from_slice(&epoch.to_be_bytes());
        b[53..57].copy_from_slice(&base_sequence.to_be_bytes());
        let a = i16::from_be_bytes([b[21], b[22]]) | attributes;
        b[21..23].copy_from_slice(&a.to_be_bytes());
        let crc = crc32c::crc32c(&b[AT_ATTRIBUTES..]);
        b[AT_CRC..AT_CRC + 4].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(b)
    }

    /// (offset, key, value) of every record of `batches`, in order.
    pub fn decoded_records(batches: &[Bytes]) -> Vec<(Offset, Vec<u8>, Option<Vec<u8>>)> {
        let mut out = Vec::new();
        for raw in batches {
            #[allow(clippy::unwrap_used)]
            let d = decode(raw, 64 << 20).unwrap();
            #[allow(clippy::unwrap_used)]
            for r in records::walk(&d.section, d.header.record_count) {
                let r = r.unwrap();
                out.push((
                    d.header.base_offset + i64::from(r.offset_delta),
                    r.key.unwrap_or_default().to_vec(),
                    r.value.map(<[u8]>::to_vec),
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
