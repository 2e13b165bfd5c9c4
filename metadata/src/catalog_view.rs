//! A partition's catalog as readers see it: the pure resolution of everything stored about
//! the partition (entries of sealed objects, per-partition segments) and its leader-epoch
//! history into one sequence of entries, each offset resolved to exactly one entry.
//!
//! Why resolution and not a stored sequence: a sealed object's index is committed as one
//! key for all its partitions ([`crate::keys::object_index`]), fenced by the writer's lease
//! only, so a seal costs O(1) metadata operations whatever the partition count (ARCHITECTURE
//! decision 23). Per-partition fencing by leader epoch moves from the commit to here:
//!
//! 1. **Epoch cut.** An entry written under epoch `e` holds only offsets below the start of
//!    the next epoch in the partition's history ([`LeaderEpochHistory`]); anything at or
//!    after it is a deposed leader's divergent tail and is never served (Kafka's
//!    truncation by OffsetsForLeaderEpoch, applied at read time).
//! 2. **Precedence.** Where entries overlap (a deposed leader's late commit of data the new
//!    leader recovered, a retried seal, a segment that compaction wrote over sealed
//!    objects), the offset resolves to the entry of highest rank: a per-partition key
//!    (segment) over an object's entry, then the higher epoch, then the smaller object key
//!    and byte offset — a total order, so every reader of the same inputs picks the same.
//!
//! Resolved entries may be *clipped*: `base_offset`/`last_offset` narrowed to the offsets
//! the entry serves, its byte range (and CRC) unchanged; readers skip the batches of the
//! range outside those offsets. All the logs involved agree below each epoch's start (the
//! new leader's log is a prefix of its predecessor's plus its own appends), so switching
//! from one entry to another happens at a batch boundary.

use crate::catalog::CatalogEntry;
use crate::leader_epochs::LeaderEpochHistory;
use crate::types::{LeaderEpoch, Offset};
use std::cmp::Ordering;

/// Where a stored entry comes from; per-partition keys outrank objects' entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// An entry of a sealed object's index (one key for many partitions).
    Object,
    /// A per-partition key: a compacted segment (or an entry of the first catalog layout).
    Keyed,
}

/// One stored entry and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub entry: CatalogEntry,
    pub source: Source,
}

/// One past the last offset epoch `epoch` may hold: the start of the next epoch recorded in
/// `history` (`None`: unbounded).
fn epoch_end(history: &LeaderEpochHistory, epoch: LeaderEpoch) -> Option<Offset> {
    history
        .entries()
        .iter()
        .filter(|s| s.epoch > epoch)
        .map(|s| s.start_offset)
        .min()
}

/// Higher wins (see the module docs, rule 2).
fn rank(a: &Stored, b: &Stored) -> Ordering {
    a.source
        .cmp(&b.source)
        .then(a.entry.leader_epoch.cmp(&b.entry.leader_epoch))
        .then_with(|| b.entry.object_key.cmp(&a.entry.object_key))
        .then(b.entry.byte_start.cmp(&a.entry.byte_start))
        .then(b.entry.base_offset.cmp(&a.entry.base_offset))
        .then(a.entry.last_offset.cmp(&b.entry.last_offset))
}

/// Resolves a partition's stored entries against its epoch history into entries in offset
/// order, non-overlapping, each covering offsets exactly one stored entry serves (see the
/// module docs). Gaps between stored entries stay gaps.
pub fn resolve(stored: &[Stored], history: &LeaderEpochHistory) -> Vec<CatalogEntry> {
    // Each candidate with the last offset its epoch lets it serve.
    let mut cands: Vec<(&Stored, Offset)> = stored
        .iter()
        .filter_map(|s| {
            let e = &s.entry;
            let last = match epoch_end(history, e.leader_epoch) {
                Some(end) => e.last_offset.min(end - 1),
                None => e.last_offset,
            };
            (last >= e.base_offset).then_some((s, last))
        })
        .collect();
    cands.sort_by(|a, b| {
        a.0.entry
            .base_offset
            .cmp(&b.0.entry.base_offset)
            .then_with(|| rank(b.0, a.0))
    });
    // The common case, in O(n log n): nothing overlaps (one writer per epoch, segments
    // replacing what they cover), so every candidate serves exactly its offsets.
    if cands.windows(2).all(|w| w[1].0.entry.base_offset > w[0].1) {
        return cands
            .into_iter()
            .map(|(s, last)| clip(&s.entry, s.entry.base_offset, last))
            .collect();
    }
    let mut out: Vec<CatalogEntry> = Vec::new();
    let Some(first) = cands.first() else {
        return out;
    };
    let mut at = first.0.entry.base_offset;
    loop {
        // The best candidate serving `at`.
        let best = cands
            .iter()
            .filter(|(s, last)| s.entry.base_offset <= at && *last >= at)
            .max_by(|a, b| rank(a.0, b.0));
        let Some(&(best, best_last)) = best else {
            // A gap: go on at the next entry that starts after `at`.
            match cands.iter().find(|(s, _)| s.entry.base_offset > at) {
                Some((s, _)) => {
                    at = s.entry.base_offset;
                    continue;
                }
                None => return out,
            }
        };
        // Served by `best` until it ends or a higher-ranked entry begins.
        let mut last = best_last;
        for (s, _) in &cands {
            let base = s.entry.base_offset;
            if base > at && base <= last && rank(s, best) == Ordering::Greater {
                last = base - 1;
            }
        }
        out.push(clip(&best.entry, at, last));
        match last.checked_add(1) {
            Some(next) => at = next,
            None => return out,
        }
    }
}

/// `entry` serving `base..=last` only; its transaction index keeps what lies in the piece
/// ([`crate::catalog_txn::TxnIndex::clipped`]).
fn clip(entry: &CatalogEntry, base: Offset, last: Offset) -> CatalogEntry {
    let mut piece = entry.clone();
    if base != entry.base_offset || last != entry.last_offset {
        piece.base_offset = base;
        piece.last_offset = last;
        piece.txn = piece.txn.map(|t| t.clipped(base, last, entry.last_offset));
    }
    piece
}

/// Whether `entry`'s offsets are narrower than the stored range it reads (see the module
/// docs): readers skip the range's batches outside them.
pub fn is_clipped(entry: &CatalogEntry, stored_base: Offset, stored_last: Offset) -> bool {
    entry.base_offset != stored_base || entry.last_offset != stored_last
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::EntryLayout;
    use crate::leader_epochs::EpochStart;
    use crate::types::TopicId;
    use proptest::prelude::*;

    fn e(base: Offset, last: Offset, epoch: LeaderEpoch, key: &str) -> CatalogEntry {
        CatalogEntry {
            topic_id: TopicId(uuid::Uuid::nil()),
            partition: 0,
            base_offset: base,
            last_offset: last,
            max_timestamp_ms: last,
            object_key: key.into(),
            byte_start: 0,
            byte_len: 10,
            crc32c: 0,
            leader_epoch: epoch,
            layout: EntryLayout::Batches,
            txn: None,
        }
    }

    fn obj(base: Offset, last: Offset, epoch: LeaderEpoch, key: &str) -> Stored {
        Stored {
            entry: e(base, last, epoch, key),
            source: Source::Object,
        }
    }

    fn seg(base: Offset, last: Offset, epoch: LeaderEpoch, key: &str) -> Stored {
        Stored {
            entry: e(base, last, epoch, key),
            source: Source::Keyed,
        }
    }

    fn history(starts: &[(LeaderEpoch, Offset)]) -> LeaderEpochHistory {
        LeaderEpochHistory::from_entries(
            starts
                .iter()
                .map(|&(epoch, start_offset)| EpochStart {
                    epoch,
                    start_offset,
                })
                .collect(),
        )
    }

    fn spans(v: &[CatalogEntry]) -> Vec<(Offset, Offset, String)> {
        v.iter()
            .map(|e| (e.base_offset, e.last_offset, e.object_key.clone()))
            .collect()
    }

    #[test]
    fn contiguous_entries_resolve_to_themselves() {
        let stored = [obj(0, 9, 0, "a"), obj(10, 19, 0, "b"), obj(20, 20, 0, "c")];
        let got = resolve(&stored, &LeaderEpochHistory::default());
        assert_eq!(
            spans(&got),
            vec![
                (0, 9, "a".into()),
                (10, 19, "b".into()),
                (20, 20, "c".into())
            ]
        );
    }

    #[test]
    fn a_deposed_leaders_tail_past_the_next_epoch_is_never_served() {
        // Epoch 1 wrote 0..=99 but epoch 2 starts at 90: its late commit serves 0..=89 only,
        // and where epoch 2 recovered the same offsets, epoch 2's entry wins.
        let stored = [
            obj(0, 49, 1, "old-1"),
            obj(50, 99, 1, "old-late"),
            obj(50, 89, 2, "new-recovered"),
            obj(90, 120, 2, "new"),
        ];
        let got = resolve(&stored, &history(&[(1, 0), (2, 90)]));
        assert_eq!(
            spans(&got),
            vec![
                (0, 49, "old-1".into()),
                (50, 89, "new-recovered".into()),
                (90, 120, "new".into())
            ]
        );
        // Alone, the late commit is cut at the next epoch's start.
        let got = resolve(&[obj(50, 99, 1, "old-late")], &history(&[(1, 0), (2, 90)]));
        assert_eq!(spans(&got), vec![(50, 89, "old-late".into())]);
        // Entirely past it: nothing.
        let got = resolve(&[obj(95, 99, 1, "old-late")], &history(&[(1, 0), (2, 90)]));
        assert!(got.is_empty());
    }

    #[test]
    fn a_clipped_entry_keeps_the_aborts_it_serves_and_loses_its_stop_hint() {
        use crate::catalog_txn::{AbortedTxn, TxnIndex};
        let abort = |producer_id, first_offset, last_offset| AbortedTxn {
            producer_id,
            first_offset,
            last_offset,
        };
        let mut late = obj(50, 99, 1, "old-late");
        late.entry.txn = Some(TxnIndex {
            stable_end: Some(100),
            aborts: vec![abort(1, 40, 60), abort(2, 70, 95)],
        });
        let got = resolve(&[late.clone()], &history(&[(1, 0), (2, 90)]));
        assert_eq!(
            got[0].txn,
            Some(TxnIndex {
                stable_end: None,
                aborts: vec![abort(1, 40, 60)],
            }),
            "the marker at 95 is in the deposed leader's tail"
        );
        // Unclipped, the index is served as stored.
        let got = resolve(&[late.clone()], &history(&[(1, 0)]));
        assert_eq!(got[0].txn, late.entry.txn);
    }

    #[test]
    fn segments_outrank_the_objects_they_were_compacted_from() {
        let stored = [
            obj(0, 9, 0, "a"),
            obj(10, 19, 0, "b"),
            obj(20, 29, 0, "c"),
            seg(0, 19, 0, "s"),
        ];
        let got = resolve(&stored, &LeaderEpochHistory::default());
        assert_eq!(spans(&got), vec![(0, 19, "s".into()), (20, 29, "c".into())]);
        // A segment starting inside an object's range clips it.
        let stored = [obj(0, 29, 0, "a"), seg(10, 19, 0, "s")];
        let got = resolve(&stored, &LeaderEpochHistory::default());
        assert_eq!(
            spans(&got),
            vec![
                (0, 9, "a".into()),
                (10, 19, "s".into()),
                (20, 29, "a".into())
            ]
        );
    }

    #[test]
    fn gaps_stay_gaps() {
        let got = resolve(
            &[obj(0, 9, 0, "a"), obj(20, 29, 0, "b")],
            &LeaderEpochHistory::default(),
        );
        assert_eq!(spans(&got), vec![(0, 9, "a".into()), (20, 29, "b".into())]);
    }

    #[test]
    fn identical_retries_resolve_to_one_deterministically() {
        let stored = [obj(0, 9, 0, "b"), obj(0, 9, 0, "a")];
        let got = resolve(&stored, &LeaderEpochHistory::default());
        assert_eq!(spans(&got), vec![(0, 9, "a".into())]);
        let reversed = [obj(0, 9, 0, "a"), obj(0, 9, 0, "b")];
        assert_eq!(resolve(&reversed, &LeaderEpochHistory::default()), got);
    }

    fn arb_stored() -> impl Strategy<Value = Vec<Stored>> {
        prop::collection::vec((0i64..60, 0i64..15, 0i32..4, any::<bool>(), 0u8..4), 0..12).prop_map(
            |v| {
                v.into_iter()
                    .map(|(base, len, epoch, keyed, key)| {
                        let key = format!("k{key}");
                        if keyed {
                            seg(base, base + len, epoch, &key)
                        } else {
                            obj(base, base + len, epoch, &key)
                        }
                    })
                    .collect()
            },
        )
    }

    proptest! {
        /// Every offset some stored entry may serve resolves to exactly one entry, the
        /// highest-ranked one serving it; nothing else is served; the result does not
        /// depend on the order entries are stored in.
        #[test]
        fn each_offset_resolves_to_exactly_the_best_entry(
            stored in arb_stored(),
            starts in prop::collection::vec((0i32..4, 0i64..70), 0..4),
        ) {
            let history = history(&starts);
            let got = resolve(&stored, &history);
            for w in got.windows(2) {
                prop_assert!(w[0].last_offset < w[1].base_offset, "overlap or disorder: {w:?}");
            }
            for offset in 0..80 {
                let serving: Vec<&CatalogEntry> = got
                    .iter()
                    .filter(|e| e.base_offset <= offset && offset <= e.last_offset)
                    .collect();
                let best = stored
                    .iter()
                    .filter(|s| {
                        let end = epoch_end(&history, s.entry.leader_epoch);
                        s.entry.base_offset <= offset
                            && offset <= s.entry.last_offset
                            && end.is_none_or(|end| offset < end)
                    })
                    .max_by(|a, b| rank(a, b));
                match best {
                    None => prop_assert!(serving.is_empty(), "offset {offset} served by {serving:?}"),
                    Some(best) => {
                        prop_assert_eq!(serving.len(), 1, "offset {}", offset);
                        let s = serving[0];
                        prop_assert_eq!(&s.object_key, &best.entry.object_key);
                        prop_assert_eq!(s.leader_epoch, best.entry.leader_epoch);
                    }
                }
            }
            let mut reversed = stored.clone();
            reversed.reverse();
            prop_assert_eq!(resolve(&reversed, &history), got);
        }
    }
}
