//! The storage lifecycle a simulated run exercises beside its faults (compaction,
//! retention, deletion, key compaction), the topic policies the brokers' compactors read,
//! and the counts of what they did.

use oxbow_metadata::TopicId;
use oxbow_segment_writer::key_compact::KeyCompaction;
use oxbow_segment_writer::{Retention, RetentionPolicies};
use std::time::Duration;

/// The storage lifecycle a run exercises beside its faults: every broker runs the
/// compactor (merging sealed objects into segments, applying time retention, deleting
/// objects nothing references after a delay), as `oxbow serve` does. Off in the default
/// runs: the compactor draws segment keys from the log's Rng, so turning it on changes
/// every seed's schedule, and the pinned seeds stand for the schedules they were found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifecycle {
    /// The topic's `retention.ms`, if it deletes: longer than a clock step
    /// (`schedule::MAX_SKEW_MS`) so rule 10 has something to judge, short enough to expire
    /// data mid-faults.
    pub retention_ms: Option<i64>,
    /// `cleanup.policy=compact`: producers write keyed records (`history::key_of`) and
    /// rounds keep the latest record per key (rules 1, 3 and 6 then allow what compaction
    /// removes, rule 11 judges it).
    pub compact: bool,
    /// How often a round runs, and how long a superseded object outlives its last
    /// reference (a reader that looked it up just before has that long).
    pub interval: Duration,
    pub delete_delay: Duration,
    /// Largest segment a round writes (a few seconds of one partition's data).
    pub segment_bytes: u64,
}

pub const LIFECYCLE: Lifecycle = Lifecycle {
    retention_ms: Some(6_000),
    compact: false,
    interval: Duration::from_millis(500),
    delete_delay: Duration::from_secs(1),
    segment_bytes: 2 << 10,
};

/// Key compaction under the same faults (`cleanup.policy=compact`, no retention).
pub const KEY_COMPACTION: Lifecycle = Lifecycle {
    retention_ms: None,
    compact: true,
    ..LIFECYCLE
};

/// The sim topic's retention, as the gateway's policies give a real topic's.
pub struct SimPolicies {
    pub topic_id: TopicId,
    pub lifecycle: Lifecycle,
}

impl RetentionPolicies for SimPolicies {
    fn retention(&self, topic_id: TopicId) -> Option<Retention> {
        (topic_id == self.topic_id).then_some(Retention {
            ms: self.lifecycle.retention_ms.unwrap_or(-1),
            bytes: -1,
        })
    }

    fn key_compaction(&self, topic_id: TopicId) -> Option<KeyCompaction> {
        (topic_id == self.topic_id && self.lifecycle.compact).then_some(KeyCompaction {
            delete_retention_ms: crate::history::DELETE_RETENTION_MS,
            // Clean whatever is dirty, every round: the most cleanings racing the faults.
            min_lag_ms: 0,
            max_lag_ms: i64::MAX,
            min_dirty_ratio: 0.0,
        })
    }
}

/// What the compactors did over a run (summed over every broker incarnation).
#[derive(Clone, Copy, Debug, Default)]
pub struct LifecycleCounts {
    pub rounds: u64,
    pub segments_written: u64,
    pub entries_replaced: u64,
    pub entries_expired: u64,
    pub objects_deleted: u64,
    pub key_cleanings: u64,
    pub key_records_removed: u64,
    /// Acknowledged tombstones, and those of them gone from the final log (expired, or
    /// superseded by a later record of their key).
    pub tombstones_acked: u64,
    pub tombstones_gone: u64,
}
