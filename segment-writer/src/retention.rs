//! Retention by time and size (`retention.ms`, `retention.bytes`): which prefix of a
//! partition's catalogued log has expired. Pure: the compactor's round feeds it the
//! partition's catalog entries and applies the answer with
//! [`crate::LogManager::advance_log_start`].
//!
//! Kafka's rules, with catalog entries in the role of closed segments: an entry leaves once
//! its largest timestamp is older than `retention.ms`, or while the log without it is still
//! at least `retention.bytes` (the unsealed tail counts toward the size, as Kafka counts the
//! active segment, but is never removed); removal is a prefix (an entry is removed only if
//! every entry before it is); `-1` disables either rule. What is not catalogued yet (the
//! WAL tail) never expires here.

use oxbow_metadata::{Offset, TopicId};

/// Where the compactor learns each topic's retention (the broker's topic metadata, which
/// follows config changes): `None` for a topic it does not know (nothing is removed).
pub trait RetentionPolicies: Send + Sync {
    fn retention(&self, topic_id: TopicId) -> Option<Retention>;

    /// The topic's key compaction if its `cleanup.policy` includes `compact`; `None`
    /// otherwise (batches are then only merged into segments, as stored).
    fn key_compaction(&self, _topic_id: TopicId) -> Option<crate::key_compact::KeyCompaction> {
        None
    }
}

/// A topic's retention settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// `retention.ms`: `-1` keeps data forever.
    pub ms: i64,
    /// `retention.bytes`: `-1` keeps any size.
    pub bytes: i64,
}

impl Retention {
    /// Whether neither rule can remove anything.
    pub fn keeps_everything(&self) -> bool {
        self.ms < 0 && self.bytes < 0
    }
}

/// What retention looks at of one catalog entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetainedEntry {
    pub last_offset: Offset,
    pub max_timestamp_ms: i64,
    /// Bytes of record batches it holds.
    pub bytes: u64,
}

/// The new log start offset: one past the last entry of the expired prefix of `entries`
/// (the partition's catalogued entries from its log start on, in offset order), or `None`
/// if nothing expired. `unsealed_bytes`: the partition's data not catalogued yet.
pub fn expired_prefix_end(
    entries: &[RetainedEntry],
    unsealed_bytes: u64,
    now_ms: i64,
    retention: Retention,
) -> Option<Offset> {
    let mut size: u64 = entries
        .iter()
        .map(|e| e.bytes)
        .fold(unsealed_bytes, u64::saturating_add);
    let limit = u64::try_from(retention.bytes).ok();
    let mut end = None;
    for e in entries {
        let by_time = retention.ms >= 0 && e.max_timestamp_ms < now_ms.saturating_sub(retention.ms);
        let by_size = limit.is_some_and(|limit| size.saturating_sub(e.bytes) >= limit);
        if !(by_time || by_size) {
            break;
        }
        size = size.saturating_sub(e.bytes);
        end = Some(e.last_offset + 1);
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(last: Offset, ts: i64, bytes: u64) -> RetainedEntry {
        RetainedEntry {
            last_offset: last,
            max_timestamp_ms: ts,
            bytes,
        }
    }

    const KEEP: Retention = Retention { ms: -1, bytes: -1 };

    #[test]
    fn nothing_expires_when_both_rules_are_off() {
        let entries = [e(9, 0, 100), e(19, 1, 100)];
        assert_eq!(expired_prefix_end(&entries, 0, i64::MAX, KEEP), None);
        assert!(KEEP.keeps_everything());
    }

    #[test]
    fn time_removes_the_prefix_older_than_retention_ms() {
        let entries = [e(9, 1_000, 10), e(19, 2_000, 10), e(29, 9_000, 10)];
        let r = Retention {
            ms: 5_000,
            bytes: -1,
        };
        // now 10_000: everything with max timestamp before 5_000 goes.
        assert_eq!(expired_prefix_end(&entries, 0, 10_000, r), Some(20));
        assert_eq!(expired_prefix_end(&entries, 0, 6_001, r), Some(10));
        assert_eq!(expired_prefix_end(&entries, 0, 5_000, r), None);
    }

    #[test]
    fn an_entry_with_a_newer_record_keeps_the_ones_after_it() {
        // A producer-set timestamp far in the future pins its entry and everything after.
        let entries = [e(9, 1_000, 10), e(19, i64::MAX, 10), e(29, 1_000, 10)];
        let r = Retention { ms: 0, bytes: -1 };
        assert_eq!(expired_prefix_end(&entries, 0, 10_000, r), Some(10));
    }

    #[test]
    fn size_removes_while_the_rest_still_reaches_retention_bytes() {
        let entries = [e(9, 0, 100), e(19, 0, 100), e(29, 0, 100)];
        let r = Retention { ms: -1, bytes: 150 };
        // 300 in all: without the first 200 ≥ 150 → goes; without the second 100 < 150.
        assert_eq!(expired_prefix_end(&entries, 0, 0, r), Some(10));
        // The unsealed tail counts toward the size but is never removed.
        assert_eq!(expired_prefix_end(&entries, 100, 0, r), Some(20));
        assert_eq!(expired_prefix_end(&entries, 1_000, 0, r), Some(30));
        let zero = Retention { ms: -1, bytes: 0 };
        assert_eq!(expired_prefix_end(&entries, 0, 0, zero), Some(30));
    }

    #[test]
    fn either_rule_suffices_and_the_result_is_a_prefix() {
        let entries = [e(9, 0, 10), e(19, 50_000, 1_000), e(29, 0, 10)];
        let r = Retention {
            ms: 10_000,
            bytes: 500,
        };
        // First: old. Second: recent, but without it 20 < 500... stays; so does the third.
        assert_eq!(expired_prefix_end(&entries, 0, 60_000, r), Some(10));
    }
}
