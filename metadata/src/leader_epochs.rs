//! A partition's leader-epoch history: the offset at which each leader epoch's data starts,
//! so OffsetForLeaderEpoch (KIP-101, KIP-320) can tell a client where an older epoch ended.
//!
//! Lifecycle: a leader opening a partition at epoch `E`, once it knows the log end (after any
//! recovery of a dead leader's tail, whose batches keep their older epoch), records
//! `(E, log end)` with [`LeaderEpochHistory::assign`] in the partition's state by
//! compare-and-swap, before it answers anything at `E` (ARCHITECTURE decision 19). The
//! history is stored in [`crate::PartitionState::leader_epochs`], so it is in every broker's
//! topic cache and survives failover, handoff, compaction and restarts.
//!
//! The rules are those of Kafka's `LeaderEpochFileCache` (`assign`, `endOffsetFor`,
//! `truncateFromStart`, `epochForOffset`), with one difference: the history is bounded to
//! [`LEADER_EPOCHS_MAX`] entries, the oldest dropped first. Dropping only ever makes an answer
//! for a forgotten epoch *later* than the truth (the start of the oldest epoch kept), never
//! earlier, so a consumer positioned in a forgotten epoch never sees a false truncation.

use crate::types::{LeaderEpoch, Offset};
use serde::{Deserialize, Serialize};

/// Most entries kept per partition. Each costs ~40 bytes of JSON in the partition's state,
/// which every broker caches; a consumer positioned more than this many leader changes back
/// is answered with the start of the oldest epoch kept, which is safe (see the module docs).
pub const LEADER_EPOCHS_MAX: usize = 32;

/// Kafka's `UNDEFINED_EPOCH`: what a client sends when it knows no epoch.
pub const UNDEFINED_EPOCH: LeaderEpoch = -1;

/// The first offset written under a leader epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochStart {
    pub epoch: LeaderEpoch,
    pub start_offset: Offset,
}

/// Entries in increasing epoch and strictly increasing start offset (an epoch under which
/// nothing was written is replaced by the next one, as in Kafka).
/// Read through [`LeaderEpochHistory::from_entries`], so a stored value is never trusted to be
/// in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<EpochStart>", into = "Vec<EpochStart>")]
pub struct LeaderEpochHistory(Vec<EpochStart>);

impl From<Vec<EpochStart>> for LeaderEpochHistory {
    fn from(entries: Vec<EpochStart>) -> Self {
        LeaderEpochHistory::from_entries(entries)
    }
}

impl From<LeaderEpochHistory> for Vec<EpochStart> {
    fn from(h: LeaderEpochHistory) -> Self {
        h.0
    }
}

impl LeaderEpochHistory {
    /// A history from stored entries. Entries breaking the order (a corrupt or hand-edited
    /// value) are dropped rather than trusted: every later lookup relies on the order.
    pub fn from_entries(entries: Vec<EpochStart>) -> Self {
        let mut h = LeaderEpochHistory::default();
        for e in entries {
            h.assign(e.epoch, e.start_offset);
        }
        h
    }

    pub fn entries(&self) -> &[EpochStart] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The newest epoch recorded.
    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.0.last().map(|e| e.epoch)
    }

    /// Records that `epoch` starts at `start_offset` (Kafka's `assign`). Returns whether the
    /// history changed. Entries at or above `epoch`, or starting at or after `start_offset`,
    /// are removed first (an epoch that wrote nothing ends where the next starts); then the
    /// oldest entries go until at most [`LEADER_EPOCHS_MAX`] remain.
    pub fn assign(&mut self, epoch: LeaderEpoch, start_offset: Offset) -> bool {
        if epoch < 0 || start_offset < 0 {
            return false;
        }
        let needed = match self.0.last() {
            Some(last) => epoch != last.epoch || start_offset < last.start_offset,
            None => true,
        };
        if !needed {
            return false;
        }
        while let Some(last) = self.0.last() {
            if last.epoch >= epoch || last.start_offset >= start_offset {
                self.0.pop();
            } else {
                break;
            }
        }
        self.0.push(EpochStart {
            epoch,
            start_offset,
        });
        let excess = self.0.len().saturating_sub(LEADER_EPOCHS_MAX);
        self.0.drain(..excess);
        true
    }

    /// Forgets what lies wholly below `log_start` (Kafka's `truncateFromStart`): the newest
    /// epoch starting at or below it is kept, now starting at `log_start`. Returns whether
    /// the history changed.
    pub fn truncate_from_start(&mut self, log_start: Offset) -> bool {
        let below = self
            .0
            .iter()
            .take_while(|e| e.start_offset <= log_start)
            .count();
        let Some(kept) = below.checked_sub(1).map(|i| self.0[i]) else {
            return false;
        };
        if below == 1 && kept.start_offset == log_start {
            return false;
        }
        self.0.drain(..below);
        self.0.insert(
            0,
            EpochStart {
                epoch: kept.epoch,
                start_offset: log_start,
            },
        );
        true
    }

    /// Kafka's `endOffsetFor`: for `requested`, the largest epoch at or below it and the
    /// start offset of the next higher epoch, or `log_end` if `requested` is the latest
    /// epoch. An epoch older than every one known gets itself and the start of the oldest
    /// known; [`UNDEFINED_EPOCH`], or one newer than every one known, gets `None` (the
    /// response's `-1, -1`). What lies below `log_start` is treated as truncated away.
    pub fn end_offset_for(
        &self,
        requested: LeaderEpoch,
        log_start: Offset,
        log_end: Offset,
    ) -> Option<(LeaderEpoch, Offset)> {
        if requested == UNDEFINED_EPOCH {
            return None;
        }
        let mut h = self.clone();
        h.truncate_from_start(log_start);
        let entries = h.entries();
        if entries.last().map(|e| e.epoch) == Some(requested) {
            return Some((requested, log_end));
        }
        let higher = entries.iter().find(|e| e.epoch > requested)?;
        match entries.iter().rev().find(|e| e.epoch <= requested) {
            Some(floor) => Some((floor.epoch, higher.start_offset)),
            None => Some((requested, higher.start_offset)),
        }
    }

    /// Kafka's `epochForOffset`: the epoch `offset` was written under, if the history goes
    /// back that far (`None` below the oldest entry).
    pub fn epoch_for_offset(&self, offset: Offset) -> Option<LeaderEpoch> {
        self.0
            .iter()
            .take_while(|e| e.start_offset <= offset)
            .last()
            .map(|e| e.epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(entries: &[(LeaderEpoch, Offset)]) -> LeaderEpochHistory {
        let mut h = LeaderEpochHistory::default();
        for (e, s) in entries {
            h.assign(*e, *s);
        }
        h
    }

    #[test]
    fn end_offsets_follow_kafka_rules() {
        // Epoch 0 from 0, 2 from 100 (1 wrote nothing), 5 from 250; log ends at 300.
        let h = history(&[(0, 0), (1, 100), (2, 100), (5, 250)]);
        assert_eq!(
            h.entries(),
            &[
                EpochStart {
                    epoch: 0,
                    start_offset: 0
                },
                EpochStart {
                    epoch: 2,
                    start_offset: 100
                },
                EpochStart {
                    epoch: 5,
                    start_offset: 250
                },
            ]
        );
        assert_eq!(h.end_offset_for(0, 0, 300), Some((0, 100)));
        // An epoch that wrote nothing: the epoch before it, ending where the next starts.
        assert_eq!(h.end_offset_for(1, 0, 300), Some((0, 100)));
        assert_eq!(h.end_offset_for(3, 0, 300), Some((2, 250)));
        // The latest epoch ends at the log end.
        assert_eq!(h.end_offset_for(5, 0, 300), Some((5, 300)));
        // Newer than anything known, or undefined: nothing.
        assert_eq!(h.end_offset_for(6, 0, 300), None);
        assert_eq!(h.end_offset_for(UNDEFINED_EPOCH, 0, 300), None);
        assert_eq!(LeaderEpochHistory::default().end_offset_for(0, 0, 9), None);
    }

    #[test]
    fn older_than_known_and_log_start_moves() {
        let h = history(&[(3, 40), (4, 100), (6, 200)]);
        // Older than the oldest known: itself, and the start of the oldest known.
        assert_eq!(h.end_offset_for(1, 0, 300), Some((1, 40)));
        // The log start moved past epoch 3 and into epoch 4: epochs below 4 are gone and
        // 4 now starts at the log start.
        assert_eq!(h.end_offset_for(3, 150, 300), Some((3, 150)));
        assert_eq!(h.end_offset_for(4, 150, 300), Some((4, 200)));
        assert_eq!(h.end_offset_for(6, 250, 300), Some((6, 300)));
        let mut t = h.clone();
        assert!(t.truncate_from_start(150));
        assert_eq!(t.entries()[0].start_offset, 150);
        assert_eq!(t.entries()[0].epoch, 4);
        assert!(!t.truncate_from_start(150));
        assert!(!t.truncate_from_start(10));
    }

    #[test]
    fn epoch_for_offset_and_repeated_assign() {
        let mut h = history(&[(0, 0), (2, 10)]);
        assert!(!h.assign(2, 10), "same epoch, same start: no change");
        assert!(
            !h.assign(2, 15),
            "a later start of the same epoch changes nothing"
        );
        assert_eq!(h.epoch_for_offset(0), Some(0));
        assert_eq!(h.epoch_for_offset(9), Some(0));
        assert_eq!(h.epoch_for_offset(10), Some(2));
        assert_eq!(history(&[(3, 5)]).epoch_for_offset(4), None);
        assert!(!h.assign(-1, 3));
        let corrupt = LeaderEpochHistory::from_entries(vec![
            EpochStart {
                epoch: 4,
                start_offset: 50,
            },
            EpochStart {
                epoch: 2,
                start_offset: 60,
            },
        ]);
        assert_eq!(corrupt.entries().len(), 1);
        assert_eq!(corrupt.latest_epoch(), Some(2));
    }

    /// A small deterministic generator (no dependency, no OS randomness).
    struct Gen(u64);
    impl Gen {
        fn next(&mut self, bound: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % bound.max(1)
        }
    }

    /// Simulates leadership changes over a log whose every offset carries the epoch it was
    /// written under, and checks each answer against that log: exact while the history
    /// holds every epoch, and never a false truncation for a consumer anywhere in the log.
    #[test]
    fn property_answers_match_the_log() {
        for seed in 1..400u64 {
            let mut g = Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut h = LeaderEpochHistory::default();
            let mut log: Vec<LeaderEpoch> = Vec::new();
            let mut epoch: LeaderEpoch = 0;
            let changes = g.next(50) as usize;
            for _ in 0..=changes {
                h.assign(epoch, log.len() as Offset);
                for _ in 0..g.next(4) {
                    log.push(epoch);
                }
                epoch += 1 + g.next(3) as i32;
            }
            let current = h.latest_epoch().expect("assigned");
            let log_end = log.len() as Offset;
            assert!(h.entries().len() <= LEADER_EPOCHS_MAX);
            assert!(h
                .entries()
                .windows(2)
                .all(|w| w[0].epoch < w[1].epoch && w[0].start_offset < w[1].start_offset));
            let complete = changes < LEADER_EPOCHS_MAX;
            for requested in 0..=current + 1 {
                let got = h.end_offset_for(requested, 0, log_end);
                if requested > current {
                    assert_eq!(got, None, "seed {seed}");
                    continue;
                }
                if requested == current {
                    assert_eq!(got, Some((current, log_end)), "seed {seed}");
                    continue;
                }
                let (found, end) = got.expect("an epoch at or below the current one");
                // Truth from the log: the end of `requested` is the first offset written
                // under a later epoch (`current` is never later than itself, so that exists
                // or the log ends).
                let true_end = log
                    .iter()
                    .position(|e| *e > requested)
                    .map_or(log_end, |p| p as Offset);
                let true_floor = log.iter().filter(|e| **e <= requested).max().copied();
                if complete {
                    assert_eq!(end, true_end, "seed {seed} epoch {requested}");
                    assert_eq!(Some(found), true_floor.or(Some(requested)), "seed {seed}");
                } else {
                    assert!(
                        end >= true_end,
                        "seed {seed}: a forgotten epoch ends late, never early"
                    );
                }
            }
            // KIP-320's check from a consumer that has read up to offset `o` (position o+1,
            // epoch of `o`): the epoch must not end before the position.
            for (o, e) in log.iter().enumerate() {
                let (_, end) = h.end_offset_for(*e, 0, log_end).expect("known");
                assert!(end > o as Offset, "seed {seed}: false truncation at {o}");
            }
        }
    }
}
