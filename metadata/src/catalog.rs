//! The segment catalog: which offsets of which partition live at which byte range of which
//! object in the object store.
//!
//! Entries are appended only after their object is durably in the object store, in one
//! transaction per sealed object, fenced by the leader epoch of every partition the object
//! holds (design brief → Write path, step 5). Readers look entries up by offset or timestamp.
//!
//! Compaction ([`CatalogReplace`]) later swaps a contiguous run of one partition's entries
//! for entries covering exactly the same offsets in per-partition segments, fenced by the
//! partition's leader epoch. A segment is catalogued as **one** entry whose byte range is
//! the segment's index ([`EntryLayout::SegmentIndex`]); readers fetch the index (cached),
//! then the chunk they need, each range checked against a CRC-32C — the entry's for the
//! index, the index row's for the chunk.

use crate::catalog_txn::TxnIndex;
use crate::error::{Error, Result};
use crate::types::{LeaderEpoch, Offset, PartitionId, TopicId, TopicPartition};
use serde::{Deserialize, Serialize};

/// What the byte range of a [`CatalogEntry`] holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryLayout {
    /// Record batches back to back (a partition's chunk of a sealed object). Entries
    /// written before segments existed carry no layout and mean this.
    #[default]
    Batches,
    /// The index of a per-partition segment (`segment-writer/src/segment.rs`): the batches
    /// are in chunks the index lists, each with its own byte range and CRC-32C.
    SegmentIndex,
}

impl EntryLayout {
    /// Whether this is the default layout (left out of the stored JSON, so entries of
    /// sealed objects are stored exactly as before segments existed).
    pub fn is_batches(&self) -> bool {
        *self == EntryLayout::Batches
    }
}

/// One contiguous run of record batches of one partition inside one object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogEntry {
    pub topic_id: TopicId,
    pub partition: PartitionId,
    /// Offset of the first record in the range.
    pub base_offset: Offset,
    /// Offset of the last record in the range (inclusive).
    pub last_offset: Offset,
    /// Largest record timestamp in the range, for lookups by time.
    pub max_timestamp_ms: i64,
    /// Object key relative to the store's root.
    pub object_key: String,
    /// Byte range of the partition's batches inside the object.
    pub byte_start: u64,
    pub byte_len: u64,
    /// CRC-32C of the byte range, checked on every read so a flipped bit is never served.
    pub crc32c: u32,
    /// Leader epoch under which the range was written.
    pub leader_epoch: LeaderEpoch,
    /// What the byte range holds: batches, or a segment's index.
    #[serde(default, skip_serializing_if = "EntryLayout::is_batches")]
    pub layout: EntryLayout,
    /// The aborted-transaction index of the entry's offsets ([`crate::catalog_txn`]);
    /// `None` (and absent from entries stored before it existed): not known, readers walk
    /// batch headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub txn: Option<TxnIndex>,
}

impl CatalogEntry {
    pub fn topic_partition(&self) -> TopicPartition {
        TopicPartition::new(self.topic_id, self.partition)
    }

    /// Offset one past the last record: the log end this entry establishes.
    pub fn next_offset(&self) -> Offset {
        self.last_offset + 1
    }
}

/// The leader epoch a writer believes it holds for a partition. A commit succeeds only if
/// every fence matches the partition's current epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochFence {
    pub topic_partition: TopicPartition,
    pub leader_epoch: LeaderEpoch,
}

/// The writer of a commit: its broker id and the lease its registration is bound to. The
/// commit lands only while that registration holds that lease, so a broker whose lease
/// expired (or that registered again since) commits nothing more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriterFence {
    pub broker_id: crate::types::BrokerId,
    pub lease_id: crate::store::LeaseId,
}

/// How much a store's in-memory catalogue holds ([`crate::MetadataStore::catalog_footprint`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CatalogFootprint {
    /// Partitions with anything catalogued.
    pub partitions: usize,
    /// Entries held: stored ones (sealed objects' and segments') and resolved views.
    pub entries: usize,
    /// Sealed objects' keys held.
    pub objects: usize,
    /// Heap bytes, estimated from the counts (entry, key and map-node sizes), not measured.
    pub approx_bytes: usize,
}

/// One atomic catalog update: the entries of sealed objects, every partition of each
/// (ARCHITECTURE decision 23).
///
/// Stored as one key per object, fenced by `writer` only — O(1) metadata work per seal
/// whatever the partition count. `fences` (the epoch the writer holds per partition) are
/// checked against the epochs the store has seen, to refuse early; what keeps a deposed
/// leader's late entries from ever being served is the epoch cut of
/// [`crate::catalog_view`], not this check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CatalogCommit {
    pub entries: Vec<CatalogEntry>,
    pub fences: Vec<EpochFence>,
    /// `None` only where no other broker can exist (the single-node embedded default, tests).
    pub writer: Option<WriterFence>,
}

/// Most bytes of one sealed object's catalog value (its entries, encoded by
/// [`crate::keys::object_index`], about 30 bytes each): etcd refuses requests over
/// `--max-request-bytes` (1.5 MiB by default), and the value shares the request with its key
/// and compares. The sealer caps the partitions per object ([`OBJECT_PARTITIONS_MAX`]) to stay
/// well inside.
pub const OBJECT_INDEX_BYTES_MAX: usize = 1 << 20;

/// Most partitions the sealer puts in one object, so its catalog value stays under
/// [`OBJECT_INDEX_BYTES_MAX`] (entries of up to ~40 bytes each, with room to spare).
pub const OBJECT_PARTITIONS_MAX: usize = 16_384;

/// Most entries a [`CatalogReplace`] may put: etcd allows 128 operations per transaction and
/// each new entry costs two (its put, and a range delete of the old keys up to the next).
pub const REPLACE_NEW_ENTRIES_MAX: usize = 64;

/// One atomic compaction step: `old`, a contiguous run of one partition's entries exactly as
/// stored, is replaced by `new`, entries covering exactly the same offsets. Fenced by the
/// partition's current leader epoch (held by the compacting leader), not by the epochs the
/// entries were written under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogReplace {
    pub fence: EpochFence,
    pub old: Vec<CatalogEntry>,
    pub new: Vec<CatalogEntry>,
}

impl CatalogReplace {
    /// First offset of the run (both `old` and `new` start here once validated).
    pub fn base_offset(&self) -> Offset {
        self.old.first().map(|e| e.base_offset).unwrap_or(0)
    }

    /// Last offset of the run, inclusive.
    pub fn last_offset(&self) -> Offset {
        self.old.last().map(|e| e.last_offset).unwrap_or(-1)
    }

    /// Checks the shape every backend relies on: both sides non-empty, of the fenced
    /// partition, contiguous, and covering the same offsets. A catalog key is a base offset,
    /// so every key of either side lies in `[base_offset, last_offset]`, and (the catalog
    /// being contiguous) no other entry's key does.
    pub fn validate(&self) -> Result<()> {
        let tp = self.fence.topic_partition;
        let check = |side: &str, entries: &[CatalogEntry]| -> Result<()> {
            let bad = |why: String| {
                Err(Error::InvalidRequest(format!(
                    "catalog replace: {side} {why}"
                )))
            };
            if entries.is_empty() {
                return bad("is empty".into());
            }
            let mut next: Option<Offset> = None;
            for e in entries {
                if e.topic_partition() != tp {
                    return bad(format!(
                        "holds an entry of {}, not {tp}",
                        e.topic_partition()
                    ));
                }
                if e.last_offset < e.base_offset || e.base_offset < 0 {
                    return bad(format!(
                        "holds an entry with offsets {}..={}",
                        e.base_offset, e.last_offset
                    ));
                }
                if next.is_some_and(|n| n != e.base_offset) {
                    return bad(format!("is not contiguous at offset {}", e.base_offset));
                }
                next = Some(e.next_offset());
            }
            Ok(())
        };
        check("old", &self.old)?;
        check("new", &self.new)?;
        if self.new.len() > REPLACE_NEW_ENTRIES_MAX {
            return Err(Error::InvalidRequest(format!(
                "catalog replace: {} new entries, at most {REPLACE_NEW_ENTRIES_MAX}",
                self.new.len()
            )));
        }
        let span = |v: &[CatalogEntry]| {
            (
                v.first().map(|e| e.base_offset),
                v.last().map(|e| e.last_offset),
            )
        };
        if span(&self.old) != span(&self.new) {
            return Err(Error::InvalidRequest(format!(
                "catalog replace: new entries cover {:?}, old ones {:?}",
                span(&self.new),
                span(&self.old)
            )));
        }
        Ok(())
    }
}
