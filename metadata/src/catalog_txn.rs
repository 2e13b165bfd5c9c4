//! The aborted-transaction index carried by catalog entries (Kafka's `TransactionIndex`, per
//! entry instead of per segment file): which transactions aborted with their ABORT marker in
//! an entry's offsets, and where the oldest transaction still open after the entry began.
//! Pure: the types, what clipping and compaction do to them, and the walk a
//! `read_committed` read makes over a partition's entries ([`AbortWalk`]).
//!
//! Meaning (ARCHITECTURE decision 29): an entry whose [`CatalogEntry::txn`] is `None` says
//! nothing (data sealed before the index existed, or by a leader that could not be sure of
//! its transactions): a reader falls back to walking batch headers. `Some(index)` says:
//! - `aborts` holds every transaction of the partition that aborted with its marker at an
//!   offset of the entry, as (producer, first offset, marker offset);
//! - `stable_end`, if known, is the first offset of the oldest transaction open just after
//!   the entry's last offset (its next offset if none is): every transaction that began
//!   before it has its marker at or before the entry's last offset.
//!
//! A read from `offset` up to `upper` needs the aborts with `last ≥ offset` and
//! `first < upper`. Their markers lie at or after `offset`, so it walks the entries from the
//! one holding `offset` and stops at the first whose `stable_end ≥ upper` (Kafka's
//! `collectAbortedTransactions` and its last-stable-offset stop).

use crate::catalog::CatalogEntry;
use crate::types::Offset;
use serde::{Deserialize, Serialize};

/// Most aborts one entry's index holds; past it the entry is left without an index (its
/// readers walk batch headers, as for data older than the index). At most 1,024 aborts in one
/// seal interval (a quarter second by default) or in one compacted segment is far beyond
/// any workload that aborts on purpose; the bound keeps a segment's catalog value (JSON,
/// ~80 bytes an abort) under 100 KiB and a sealed object's within its request budget
/// ([`OBJECT_ABORTS_MAX`]).
pub const ENTRY_ABORTS_MAX: usize = 1024;

/// Most aborts in one sealed object's catalog value, all partitions together (about 12
/// bytes each there: ~96 KiB on top of [`crate::OBJECT_INDEX_BYTES_MAX`]'s entries, which
/// leave more than that free). The sealer leaves entries past it without an index.
pub const OBJECT_ABORTS_MAX: usize = 8192;

/// One aborted transaction, as Fetch reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: Offset,
    /// The abort marker's offset.
    pub last_offset: Offset,
}

/// An entry's aborted-transaction index (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnIndex {
    /// First offset of the oldest transaction open just after the entry's last offset, or
    /// its next offset if none is; `None` if not known (an entry clipped at its end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_end: Option<Offset>,
    /// Transactions aborted by a marker inside the entry, in marker order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aborts: Vec<AbortedTxn>,
}

impl TxnIndex {
    /// The index of a piece `base..=last` of an entry that ended at `stored_last`: the aborts
    /// whose marker is in the piece; the stop hint only if the piece ends where the entry did.
    pub fn clipped(&self, base: Offset, last: Offset, stored_last: Offset) -> TxnIndex {
        TxnIndex {
            stable_end: self.stable_end.filter(|_| last == stored_last),
            aborts: self
                .aborts
                .iter()
                .filter(|a| a.last_offset >= base && a.last_offset <= last)
                .copied()
                .collect(),
        }
    }
}

/// The index of one entry replacing `entries` (contiguous, in offset order): the union of
/// their aborts and the last one's stop hint; `None` if any input has no index or the union
/// is past [`ENTRY_ABORTS_MAX`].
pub fn merged(entries: &[CatalogEntry]) -> Option<TxnIndex> {
    let mut aborts = Vec::new();
    for e in entries {
        let index = e.txn.as_ref()?;
        if aborts.len() + index.aborts.len() > ENTRY_ABORTS_MAX {
            return None;
        }
        aborts.extend_from_slice(&index.aborts);
    }
    Some(TxnIndex {
        stable_end: entries.last()?.txn.as_ref()?.stable_end,
        aborts,
    })
}

/// What [`AbortWalk::feed`] concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WalkStep {
    /// Feed the next entry.
    More,
    /// Every abort the read needs is known ([`AbortWalk::aborts`]).
    Done,
    /// An entry has no index, or the entries are not contiguous: the index cannot answer.
    Unknown,
}

/// The walk of a `read_committed` read from `offset` up to `upper` (exclusive) over a
/// partition's entries in offset order (see the module docs). Feed entries from the one
/// holding `offset`; a caller that runs out of entries (or of its bound) before
/// [`WalkStep::Done`] knows the aborts whose markers are below [`Self::next`] only.
#[derive(Clone, Debug)]
pub struct AbortWalk {
    offset: Offset,
    upper: Offset,
    /// The offset the next entry must start at (`None` before the first).
    next: Option<Offset>,
    aborts: Vec<AbortedTxn>,
    done: bool,
}

impl AbortWalk {
    pub fn new(offset: Offset, upper: Offset) -> Self {
        AbortWalk {
            offset,
            upper,
            next: None,
            aborts: Vec::new(),
            done: upper <= offset,
        }
    }

    /// Takes the next entry in offset order.
    pub fn feed(&mut self, e: &CatalogEntry) -> WalkStep {
        if self.done {
            return WalkStep::Done;
        }
        if e.last_offset < self.offset {
            // Before the read: its aborts' markers are below `offset`.
            return WalkStep::More;
        }
        let contiguous = match self.next {
            None => e.base_offset <= self.offset,
            Some(next) => e.base_offset == next,
        };
        let Some(index) = e.txn.as_ref().filter(|_| contiguous) else {
            return WalkStep::Unknown;
        };
        self.next = Some(e.next_offset());
        self.aborts.extend(
            index
                .aborts
                .iter()
                .filter(|a| a.last_offset >= self.offset && a.first_offset < self.upper),
        );
        if index.stable_end.is_some_and(|s| s >= self.upper) {
            self.done = true;
            return WalkStep::Done;
        }
        WalkStep::More
    }

    /// Whether every abort the read needs is known.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// One past the last offset whose markers the walk has seen (`None` before any entry).
    pub fn next(&self) -> Option<Offset> {
        self.next
    }

    /// The aborts found, in first-offset order.
    pub fn aborts(mut self) -> Vec<AbortedTxn> {
        self.aborts.sort_by_key(|a| (a.first_offset, a.producer_id));
        self.aborts.dedup();
        self.aborts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::EntryLayout;
    use crate::types::TopicId;

    fn entry(base: Offset, last: Offset, txn: Option<TxnIndex>) -> CatalogEntry {
        CatalogEntry {
            topic_id: TopicId(uuid::Uuid::nil()),
            partition: 0,
            base_offset: base,
            last_offset: last,
            max_timestamp_ms: 0,
            object_key: format!("o{base}"),
            byte_start: 0,
            byte_len: 1,
            crc32c: 0,
            leader_epoch: 0,
            layout: EntryLayout::Batches,
            txn,
        }
    }

    fn abort(producer_id: i64, first_offset: Offset, last_offset: Offset) -> AbortedTxn {
        AbortedTxn {
            producer_id,
            first_offset,
            last_offset,
        }
    }

    fn index(stable_end: Option<Offset>, aborts: &[AbortedTxn]) -> Option<TxnIndex> {
        Some(TxnIndex {
            stable_end,
            aborts: aborts.to_vec(),
        })
    }

    fn walk(entries: &[CatalogEntry], offset: Offset, upper: Offset) -> (WalkStep, AbortWalk) {
        let mut w = AbortWalk::new(offset, upper);
        let mut step = WalkStep::More;
        for e in entries {
            step = w.feed(e);
            if step != WalkStep::More {
                break;
            }
        }
        (step, w)
    }

    #[test]
    fn the_walk_collects_overlapping_aborts_until_every_earlier_transaction_ended() {
        // p1 aborts 2..=5 (marker in the first entry); p2 opens at 8, still open after the
        // second entry, aborts at 12; p3 aborts 13..=14.
        let entries = [
            entry(0, 9, index(Some(8), &[abort(1, 2, 5)])),
            entry(10, 11, index(Some(8), &[])),
            entry(
                12,
                19,
                index(Some(20), &[abort(2, 8, 12), abort(3, 13, 14)]),
            ),
            entry(20, 29, None),
        ];
        // Up to 8: the first entry's hint says every transaction begun before 8 ended.
        let (step, w) = walk(&entries, 0, 8);
        assert_eq!(step, WalkStep::Done);
        assert_eq!(w.aborts(), vec![abort(1, 2, 5)]);
        // Up to 10: p2 (begun at 8) is open after both first entries: on to the third.
        let (step, w) = walk(&entries, 3, 10);
        assert_eq!(step, WalkStep::Done);
        assert_eq!(w.aborts(), vec![abort(1, 2, 5), abort(2, 8, 12)]);
        // From 6: p1's abort ended before the read; p3's began after it.
        let (step, w) = walk(&entries, 6, 13);
        assert_eq!(step, WalkStep::Done);
        assert_eq!(w.aborts(), vec![abort(2, 8, 12)]);
        // Past the third entry's hint: the fourth has no index.
        let (step, _) = walk(&entries, 12, 21);
        assert_eq!(step, WalkStep::Unknown);
        // An empty read needs nothing.
        let (step, w) = walk(&entries, 5, 5);
        assert_eq!(step, WalkStep::Done);
        assert!(w.aborts().is_empty());
    }

    #[test]
    fn gaps_and_unindexed_entries_make_the_walk_unknown_and_running_out_is_reported() {
        let entries = [
            entry(0, 9, index(Some(5), &[])),
            entry(11, 19, index(Some(20), &[])),
        ];
        assert_eq!(walk(&entries, 0, 15).0, WalkStep::Unknown, "gap at 10");
        let entries = [entry(0, 9, None)];
        assert_eq!(walk(&entries, 0, 5).0, WalkStep::Unknown);
        // The entry holding the offset must be the first fed.
        let entries = [entry(5, 9, index(Some(10), &[]))];
        assert_eq!(walk(&entries, 3, 5).0, WalkStep::Unknown);
        // Out of entries before the stop: the caller learns how far the markers are known.
        let entries = [entry(0, 9, index(Some(4), &[abort(1, 4, 7)]))];
        let (step, w) = walk(&entries, 0, 10);
        assert_eq!(step, WalkStep::More);
        assert_eq!(w.next(), Some(10));
        assert_eq!(w.aborts(), vec![abort(1, 4, 7)]);
    }

    #[test]
    fn clipping_keeps_the_piece_s_aborts_and_the_hint_only_at_the_entry_s_end() {
        let i = TxnIndex {
            stable_end: Some(30),
            aborts: vec![abort(1, 0, 5), abort(2, 3, 15), abort(3, 16, 25)],
        };
        assert_eq!(
            i.clipped(0, 15, 29),
            TxnIndex {
                stable_end: None,
                aborts: vec![abort(1, 0, 5), abort(2, 3, 15)],
            }
        );
        assert_eq!(
            i.clipped(16, 29, 29),
            TxnIndex {
                stable_end: Some(30),
                aborts: vec![abort(3, 16, 25)],
            }
        );
    }

    #[test]
    fn merging_unions_aborts_takes_the_last_hint_and_is_unknown_if_any_input_is() {
        let a = entry(0, 9, index(Some(4), &[abort(1, 0, 3)]));
        let b = entry(10, 19, index(Some(20), &[abort(2, 4, 12)]));
        assert_eq!(
            merged(&[a.clone(), b.clone()]),
            index(Some(20), &[abort(1, 0, 3), abort(2, 4, 12)])
        );
        assert_eq!(merged(&[a.clone(), entry(10, 19, None)]), None);
        assert_eq!(merged(&[entry(0, 9, None), b.clone()]), None);
        // A clipped last input: aborts known, no hint.
        let c = entry(10, 15, index(None, &[]));
        assert_eq!(merged(&[a, c]), index(None, &[abort(1, 0, 3)]));
        // Too many aborts to carry.
        let many: Vec<AbortedTxn> = (0..ENTRY_ABORTS_MAX as i64)
            .map(|i| abort(i, i, i))
            .collect();
        let big = entry(0, 9, index(Some(10), &many));
        assert_eq!(merged(&[big, b]), None);
    }

    #[test]
    fn old_json_without_the_index_decodes_as_unknown_and_an_empty_index_is_small() {
        let json = br#"{"v":1,"topic_id":"00000000-0000-0000-0000-000000000000","partition":0,
            "base_offset":0,"last_offset":9,"max_timestamp_ms":0,"object_key":"o",
            "byte_start":0,"byte_len":1,"crc32c":0,"leader_epoch":0}"#;
        let e: CatalogEntry = crate::codec::decode("k", json).expect("old entry");
        assert_eq!(e.txn, None);
        let mut e = entry(0, 9, index(Some(10), &[]));
        let bytes = crate::codec::encode(&e).expect("encode");
        let text = String::from_utf8(bytes.clone()).expect("utf8");
        assert!(text.contains(r#""txn":{"stable_end":10}"#), "{text}");
        assert_eq!(
            crate::codec::decode::<CatalogEntry>("k", &bytes).expect("decode"),
            e
        );
        e.txn = None;
        let text = String::from_utf8(crate::codec::encode(&e).expect("encode")).expect("utf8");
        assert!(!text.contains("txn"), "{text}");
    }
}
