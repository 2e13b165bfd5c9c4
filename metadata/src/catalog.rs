//! The segment catalog: which offsets of which partition live at which byte range of which
//! object in the object store.
//!
//! Entries are appended only after their object is durably in the object store, in one
//! transaction per sealed object, fenced by the leader epoch of every partition the object
//! holds (design brief → Write path, step 5). Readers look entries up by offset or timestamp.

use crate::types::{LeaderEpoch, Offset, PartitionId, TopicId, TopicPartition};
use serde::{Deserialize, Serialize};

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

/// One atomic catalog update: new entries for many partitions, fenced by epoch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CatalogCommit {
    pub entries: Vec<CatalogEntry>,
    pub fences: Vec<EpochFence>,
}
