//! The partition side of transactions (issue 16), pure: the control batches that end a
//! transaction in a partition (commit / abort markers, Kafka's `EndTransactionMarker`), and
//! [`PartitionTxns`] — which producers have a transaction open here, the last stable offset
//! that follows from them, and the aborted transactions a `read_committed` fetch must be told
//! about — and [`OutcomeScan`], the same answers for data older than this leader's index,
//! found by walking batch headers. Driven by `partition.rs` (every append, WAL replay and
//! recovered tail included) and `log/append.rs` (`LogManager::write_marker`).
//!
//! Rules (Kafka's `ProducerStateManager` and `TransactionIndex`):
//! - a producer's first transactional batch after none is open starts its transaction at that
//!   batch's base offset; its later batches join it;
//! - a marker ends it: commit or abort, at the marker's offset; an abort is remembered as
//!   (producer, first offset, last offset = the marker's) so a `read_committed` consumer can
//!   drop that producer's batches in the range; a marker for a producer with nothing open
//!   here ends nothing (AddPartitionsToTxn may name a partition that got no data);
//! - the last stable offset is the first offset of the oldest transaction that is open or
//!   whose marker is not yet below the high watermark (*completing*: its outcome is not
//!   durable, so no reader may be told it), or the high watermark if there is none below it:
//!   `read_committed` fetches stop there. So an abort is only ever reported for a range below
//!   the last stable offset, whose markers are all durable;
//! - a fetch from `offset` up to `upper` is told of every aborted transaction whose range
//!   overlaps it (`last ≥ offset` and `first < upper`), in first-offset order;
//! - retention drops what lies wholly below the log start; the index is bounded
//!   ([`ABORTED_MAX`]): past it the oldest aborts are forgotten and counted;
//! - what a sealed chunk's catalog entry carries ([`PartitionTxns::index_for`],
//!   [`oxbow_metadata::TxnIndex`]): its aborts and the first offset of the oldest
//!   transaction open just after it — only while the partition is *exact*: it knows every
//!   transaction open where this leader's log began ([`PartitionTxns::set_exact`], proved at
//!   open from the catalogue's own index), and has forgotten no abort of the chunk. Else the
//!   entry carries no index and its readers walk batch headers.

use crate::batch::{BatchHeader, BATCH_HEADER_BYTES, BATCH_LOG_OVERHEAD};
use oxbow_metadata::{Offset, TxnIndex};
use std::collections::{BTreeMap, VecDeque};

/// Most aborted transactions remembered per partition (see the module docs).
pub const ABORTED_MAX: usize = 100_000;

/// Attributes of a control batch: transactional | control.
const ATTR_TXN_CONTROL: i16 = 0x10 | 0x20;

/// Control record types (the key's second field).
const MARKER_ABORT: i16 = 0;
const MARKER_COMMIT: i16 = 1;

/// What a control batch says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    pub commit: bool,
    pub coordinator_epoch: i32,
}

/// A control batch (base offset 0, to be stamped like any batch) ending `producer_id`'s
/// transaction at `producer_epoch`: one record whose key is (version 0, type) and value
/// (version 0, coordinator epoch).
pub fn marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    marker: Marker,
    timestamp_ms: i64,
) -> Vec<u8> {
    let kind = if marker.commit {
        MARKER_COMMIT
    } else {
        MARKER_ABORT
    };
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&kind.to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&marker.coordinator_epoch.to_be_bytes());
    // attributes, timestampDelta, offsetDelta, key, value, headers (zigzag varints).
    let mut body = vec![0u8, 0, 0];
    crate::records::put_varlong(&mut body, key.len() as i64);
    body.extend_from_slice(&key);
    crate::records::put_varlong(&mut body, value.len() as i64);
    body.extend_from_slice(&value);
    body.push(0);
    let mut record = Vec::with_capacity(body.len() + 1);
    crate::records::put_varlong(&mut record, body.len() as i64);
    record.extend_from_slice(&body);

    let mut b = Vec::with_capacity(BATCH_HEADER_BYTES + record.len());
    b.extend_from_slice(&0i64.to_be_bytes()); // base offset
    let length = (BATCH_HEADER_BYTES - BATCH_LOG_OVERHEAD + record.len()) as i32;
    b.extend_from_slice(&length.to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch (stamped)
    b.push(2); // magic
    b.extend_from_slice(&0u32.to_be_bytes()); // crc, below
    b.extend_from_slice(&ATTR_TXN_CONTROL.to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes()); // last offset delta
    b.extend_from_slice(&timestamp_ms.to_be_bytes());
    b.extend_from_slice(&timestamp_ms.to_be_bytes());
    b.extend_from_slice(&producer_id.to_be_bytes());
    b.extend_from_slice(&producer_epoch.to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence: none for control batches
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&record);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// The marker a control batch holds; `None` if `raw` is not a well-formed control batch
/// (hostile input: every length is checked).
pub fn parse_marker(raw: &[u8], h: &BatchHeader) -> Option<Marker> {
    if !h.is_control() || !h.is_transactional() || h.record_count != 1 {
        return None;
    }
    let section = crate::records::records_section(raw, h, 1 << 10).ok()?;
    let record = crate::records::walk(&section, 1).next()?.ok()?;
    let key = record.key?;
    let value = record.value?;
    if key.len() < 4 || value.len() < 6 {
        return None;
    }
    let kind = i16::from_be_bytes([key[2], key[3]]);
    let coordinator_epoch = i32::from_be_bytes([value[2], value[3], value[4], value[5]]);
    match kind {
        MARKER_COMMIT => Some(Marker {
            commit: true,
            coordinator_epoch,
        }),
        MARKER_ABORT => Some(Marker {
            commit: false,
            coordinator_epoch,
        }),
        _ => None,
    }
}

/// One aborted transaction, as Fetch reports it (the catalog's index carries the same).
pub use oxbow_metadata::AbortedTxn;

/// A partition's open and aborted transactions (see the module docs).
#[derive(Debug, Default)]
pub struct PartitionTxns {
    /// Producer → (epoch, first offset) of its open transaction.
    open: BTreeMap<i64, (i16, Offset)>,
    /// Aborted transactions by marker offset (so in first-offset order per producer).
    aborted: VecDeque<AbortedTxn>,
    /// Aborts forgotten past [`ABORTED_MAX`].
    pub forgotten: u64,
    /// Transactions ended by a marker not yet below the high watermark, in marker order:
    /// (producer, first offset, marker offset).
    completing: VecDeque<(i64, Offset, Offset)>,
    /// What the latest call changed, so an append whose WAL write could not be queued can
    /// be undone ([`Self::undo`]).
    last_change: Option<Change>,
    /// Every transaction open where this state's log began is known (with its first
    /// offset): what it tells a sealed chunk's catalog entry is then the truth.
    exact: bool,
    /// The marker offset of the newest abort forgotten past [`ABORTED_MAX`].
    forgotten_through: Option<Offset>,
    /// Transactions ended by a marker not yet sealed, in marker order: (producer, epoch,
    /// first offset, marker offset) — open as far as a chunk ending before the marker goes.
    ended: VecDeque<(i64, i16, Offset, Offset)>,
}

/// One change [`PartitionTxns::undo`] can take back.
#[derive(Clone, Copy, Debug)]
enum Change {
    /// A batch at this offset opened `producer_id`'s transaction.
    Opened { producer_id: i64, at: Offset },
    /// A marker at `at` ended this transaction.
    Ended {
        producer_id: i64,
        epoch: i16,
        first: Offset,
        at: Offset,
        aborted: bool,
    },
}

impl PartitionTxns {
    /// A transactional batch of `producer_id` stored at `base_offset`.
    pub fn on_data(&mut self, producer_id: i64, producer_epoch: i16, base_offset: Offset) {
        self.last_change = None;
        self.open
            .entry(producer_id)
            .and_modify(|(epoch, _)| *epoch = (*epoch).max(producer_epoch))
            .or_insert_with(|| {
                self.last_change = Some(Change::Opened {
                    producer_id,
                    at: base_offset,
                });
                (producer_epoch, base_offset)
            });
    }

    /// A marker of `producer_id` stored at `offset`; returns the transaction it ended, if
    /// one was open here.
    pub fn on_marker(
        &mut self,
        producer_id: i64,
        marker: Marker,
        offset: Offset,
    ) -> Option<Offset> {
        self.last_change = None;
        let (epoch, first) = self.open.remove(&producer_id)?;
        self.completing.push_back((producer_id, first, offset));
        self.ended.push_back((producer_id, epoch, first, offset));
        self.last_change = Some(Change::Ended {
            producer_id,
            epoch,
            first,
            at: offset,
            aborted: !marker.commit,
        });
        if !marker.commit {
            self.aborted.push_back(AbortedTxn {
                producer_id,
                first_offset: first,
                last_offset: offset,
            });
            while self.aborted.len() > ABORTED_MAX {
                if let Some(a) = self.aborted.pop_front() {
                    self.forgotten_through = Some(a.last_offset);
                }
                self.forgotten += 1;
            }
        }
        Some(first)
    }

    /// Where `read_committed` reads stop: the first offset of the oldest transaction open or
    /// completing (its marker at or above `high_watermark`), or `high_watermark`.
    pub fn last_stable_offset(&self, high_watermark: Offset) -> Offset {
        let open = self.open.values().map(|&(_, first)| first);
        let completing = self
            .completing
            .iter()
            .filter(|&&(_, _, marker)| marker >= high_watermark)
            .map(|&(_, first, _)| first);
        open.chain(completing)
            .fold(high_watermark, |lso, first| lso.min(first))
    }

    /// Forgets the completing transactions whose markers are below `high_watermark` (the
    /// high watermark moved): their outcome is durable.
    pub fn settle(&mut self, high_watermark: Offset) {
        while self
            .completing
            .front()
            .is_some_and(|&(_, _, marker)| marker < high_watermark)
        {
            self.completing.pop_front();
        }
    }

    /// Takes back the latest [`Self::on_data`] or [`Self::on_marker`] if it was for the
    /// batch at `base_offset` (the append could not be queued for the WAL).
    pub fn undo(&mut self, base_offset: Offset) {
        match self.last_change.take() {
            Some(Change::Opened { producer_id, at }) if at == base_offset => {
                self.open.remove(&producer_id);
            }
            Some(Change::Ended {
                producer_id,
                epoch,
                first,
                at,
                aborted,
            }) if at == base_offset => {
                self.open.insert(producer_id, (epoch, first));
                if self.completing.back().is_some_and(|c| c.2 == at) {
                    self.completing.pop_back();
                }
                if self.ended.back().is_some_and(|e| e.3 == at) {
                    self.ended.pop_back();
                }
                if aborted && self.aborted.back().is_some_and(|a| a.last_offset == at) {
                    self.aborted.pop_back();
                }
            }
            other => self.last_change = other,
        }
    }

    /// The aborted transactions a fetch from `offset` up to `upper` (exclusive) must skip,
    /// in first-offset order.
    pub fn aborted_in(&self, offset: Offset, upper: Offset) -> Vec<AbortedTxn> {
        let mut out: Vec<AbortedTxn> = self
            .aborted
            .iter()
            .filter(|a| a.last_offset >= offset && a.first_offset < upper)
            .copied()
            .collect();
        out.sort_by_key(|a| (a.first_offset, a.producer_id));
        out
    }

    /// Forgets aborts wholly below the log start (retention, DeleteRecords).
    pub fn trim_below(&mut self, log_start: Offset) {
        self.aborted.retain(|a| a.last_offset >= log_start);
    }

    /// The first offset of `producer_id`'s open transaction here, if one is open.
    pub fn open_first_offset(&self, producer_id: i64) -> Option<Offset> {
        self.open.get(&producer_id).map(|&(_, first)| first)
    }

    /// The epoch of `producer_id`'s open transaction here, if one is open.
    pub fn open_epoch(&self, producer_id: i64) -> Option<i16> {
        self.open.get(&producer_id).map(|&(epoch, _)| epoch)
    }

    /// Producers with a transaction open here.
    pub fn open_producers(&self) -> impl Iterator<Item = (i64, i16, Offset)> + '_ {
        self.open
            .iter()
            .map(|(&id, &(epoch, first))| (id, epoch, first))
    }

    /// The transactions open just after `last` (begun at or before it, not ended by then):
    /// those open now and those whose marker, not yet sealed, lies after it. For a chunk
    /// ending at `last` sealed after later markers were appended.
    pub fn open_at(&self, last: Offset) -> Vec<(i64, i16, Offset)> {
        let mut out: Vec<(i64, i16, Offset)> = self
            .open_producers()
            .filter(|&(_, _, first)| first <= last)
            .collect();
        out.extend(
            self.ended
                .iter()
                .filter(|&&(_, _, first, marker)| first <= last && marker > last)
                .map(|&(id, epoch, first, _)| (id, epoch, first)),
        );
        out
    }

    /// What the catalog entry of a sealed chunk `base..=last` carries ([`TxnIndex`]); `None`
    /// unless every abort there and every transaction open after it is surely known (see the
    /// module docs), or past [`oxbow_metadata::catalog_txn::ENTRY_ABORTS_MAX`].
    pub fn index_for(&self, base: Offset, last: Offset) -> Option<TxnIndex> {
        if !self.exact || self.forgotten_through.is_some_and(|f| f >= base) {
            return None;
        }
        // By marker offset, so the chunk's aborts are one run.
        let from = self.aborted.partition_point(|a| a.last_offset < base);
        let to = self.aborted.partition_point(|a| a.last_offset <= last);
        if to.saturating_sub(from) > oxbow_metadata::catalog_txn::ENTRY_ABORTS_MAX {
            return None;
        }
        let aborts = self.aborted.range(from..to.max(from)).copied().collect();
        let stable_end = self
            .open_at(last)
            .into_iter()
            .map(|(_, _, first)| first)
            .min()
            .unwrap_or(last + 1);
        Some(TxnIndex {
            stable_end: Some(stable_end),
            aborts,
        })
    }

    /// Everything up to `last` is sealed: ended transactions before it no longer matter to
    /// [`Self::open_at`].
    pub fn sealed_through(&mut self, last: Offset) {
        while self.ended.front().is_some_and(|e| e.3 <= last) {
            self.ended.pop_front();
        }
    }

    /// The transactions open where this state's log began are known to be exactly `open`
    /// (producer → epoch, first offset), found from the catalogue: they replace what was
    /// restored, and sealed chunks' entries carry an index from now on.
    pub fn set_exact(&mut self, open: BTreeMap<i64, (i16, Offset)>) {
        self.open = open;
        self.exact = true;
    }

    /// Whether sealed chunks' entries carry an index ([`Self::set_exact`]).
    pub fn is_exact(&self) -> bool {
        self.exact
    }
}

/// A `read_committed` read of data older than the leader's index (`index_floor`, see
/// `partition.rs`): which transactions in the returned batches aborted, found by walking
/// batch headers (Kafka keeps a transaction index per segment; Oxbow's in-memory index only
/// knows markers appended since the partition opened here).
///
/// Feed it the returned batches in offset order ([`Self::returned`]), then, while
/// [`Self::resolved`] is false, batches after them ([`Self::ahead`]: only their markers
/// matter) up to the high watermark — every transaction below the last stable offset has its
/// marker below it. [`Self::finish`] gives the aborts and, if some transaction's outcome was
/// not found (the read-ahead hit its bound), the offset the response must be cut before: a
/// consumer is never given data whose outcome it cannot be told.
#[derive(Debug, Default)]
pub struct OutcomeScan {
    /// Producer → first offset of its returned transactional data not yet ended by a marker.
    pending: BTreeMap<i64, Offset>,
    aborted: Vec<AbortedTxn>,
}

/// What [`OutcomeScan::finish`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcomes {
    /// Aborted transactions with data in the returned batches, in first-offset order.
    pub aborted: Vec<AbortedTxn>,
    /// The first offset of returned data whose outcome is unknown: the batches from there on
    /// must not be returned.
    pub cut_at: Option<Offset>,
}

impl OutcomeScan {
    /// A batch of the response (`raw` its bytes, for a control batch's marker).
    pub fn returned(&mut self, h: &BatchHeader, raw: &[u8]) {
        if h.is_control() {
            self.ahead(h, raw);
        } else if h.is_transactional() && h.producer_id >= 0 {
            self.pending.entry(h.producer_id).or_insert(h.base_offset);
        }
    }

    /// A batch after the response: only a marker ending a pending transaction matters.
    pub fn ahead(&mut self, h: &BatchHeader, raw: &[u8]) {
        if !h.is_control() {
            return;
        }
        let Some(marker) = parse_marker(raw, h) else {
            return;
        };
        if let Some(first) = self.pending.remove(&h.producer_id) {
            if !marker.commit {
                self.aborted.push(AbortedTxn {
                    producer_id: h.producer_id,
                    first_offset: first,
                    last_offset: h.base_offset,
                });
            }
        }
    }

    /// Every returned transaction's outcome is known.
    pub fn resolved(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn finish(self) -> Outcomes {
        let cut_at = self.pending.values().copied().min();
        let mut aborted: Vec<AbortedTxn> = self
            .aborted
            .into_iter()
            .filter(|a| cut_at.is_none_or(|cut| a.first_offset < cut))
            .collect();
        aborted.sort_by_key(|a| (a.first_offset, a.producer_id));
        Outcomes { aborted, cut_at }
    }
}

/// What a `read_committed` consumer keeps of `batches` told of `aborted` (Kafka's
/// `CompletedFetch`): no control batches, and no batch of a producer from its aborted
/// transaction's first offset until that producer's ABORT marker.
pub fn drop_aborted(batches: &[bytes::Bytes], aborted: &[AbortedTxn]) -> Vec<bytes::Bytes> {
    let mut pending: Vec<&AbortedTxn> = aborted.iter().collect();
    pending.sort_by_key(|a| std::cmp::Reverse(a.first_offset));
    let mut skipping = std::collections::BTreeSet::new();
    let mut out = Vec::with_capacity(batches.len());
    for raw in batches {
        let Ok(Some(h)) = crate::batch::peek_header(raw) else {
            continue;
        };
        while pending
            .last()
            .is_some_and(|a| a.first_offset <= h.last_offset())
        {
            if let Some(a) = pending.pop() {
                skipping.insert(a.producer_id);
            }
        }
        if h.is_control() {
            if parse_marker(raw, &h).is_some_and(|m| !m.commit) {
                skipping.remove(&h.producer_id);
            }
            continue;
        }
        if h.is_transactional() && skipping.contains(&h.producer_id) {
            continue;
        }
        out.push(raw.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::peek_header;

    #[test]
    fn markers_round_trip_and_pass_the_batch_checks() {
        for commit in [true, false] {
            let m = Marker {
                commit,
                coordinator_epoch: 7,
            };
            let raw = marker_batch(42, 3, m, 1_700_000_000_000);
            let h = peek_header(&raw).expect("valid").expect("whole");
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.record_count),
                (42, 3, 1)
            );
            assert_eq!(h.size, raw.len());
            assert_eq!(parse_marker(&raw, &h), Some(m));
        }
        // Not a control batch, or a cut one: no marker.
        let data = crate::batch::testing::make_batch(1, 0);
        let h = peek_header(&data).expect("valid").expect("whole");
        assert_eq!(parse_marker(&data, &h), None);
        let raw = marker_batch(
            1,
            0,
            Marker {
                commit: true,
                coordinator_epoch: 0,
            },
            0,
        );
        let h = peek_header(&raw).expect("valid").expect("whole");
        assert_eq!(parse_marker(&raw[..raw.len() - 3], &h), None);
    }

    #[test]
    fn the_last_stable_offset_waits_for_the_oldest_open_transaction() {
        let mut t = PartitionTxns::default();
        assert_eq!(t.last_stable_offset(10), 10);
        t.on_data(1, 0, 10);
        t.on_data(2, 0, 12);
        t.on_data(1, 0, 14); // joins producer 1's transaction
        assert_eq!(t.last_stable_offset(20), 10);
        assert_eq!(t.last_stable_offset(5), 5, "never past the high watermark");
        let commit = Marker {
            commit: true,
            coordinator_epoch: 0,
        };
        assert_eq!(t.on_marker(1, commit, 20), Some(10));
        assert_eq!(t.last_stable_offset(25), 12);
        assert_eq!(t.on_marker(2, commit, 21), Some(12));
        assert_eq!(t.last_stable_offset(25), 25);
        // A marker for a producer with nothing open here ends nothing.
        assert_eq!(t.on_marker(3, commit, 22), None);
        assert!(t.aborted_in(0, 100).is_empty(), "commits are not aborts");
    }

    #[test]
    fn fetches_are_told_of_the_aborts_they_overlap() {
        let mut t = PartitionTxns::default();
        let abort = Marker {
            commit: false,
            coordinator_epoch: 0,
        };
        t.on_data(1, 0, 0);
        t.on_marker(1, abort, 4);
        t.on_data(2, 0, 5);
        t.on_data(1, 1, 6);
        t.on_marker(1, abort, 8);
        t.on_marker(2, abort, 9);
        let ids = |v: Vec<AbortedTxn>| -> Vec<(i64, i64, i64)> {
            v.iter()
                .map(|a| (a.producer_id, a.first_offset, a.last_offset))
                .collect()
        };
        assert_eq!(
            ids(t.aborted_in(0, 100)),
            vec![(1, 0, 4), (2, 5, 9), (1, 6, 8)]
        );
        assert_eq!(ids(t.aborted_in(5, 100)), vec![(2, 5, 9), (1, 6, 8)]);
        assert_eq!(
            ids(t.aborted_in(0, 5)),
            vec![(1, 0, 4)],
            "upper bound exclusive"
        );
        t.trim_below(5);
        assert_eq!(ids(t.aborted_in(0, 100)), vec![(2, 5, 9), (1, 6, 8)]);
    }

    #[test]
    fn the_index_is_bounded_and_says_what_it_forgot() {
        let mut t = PartitionTxns::default();
        let abort = Marker {
            commit: false,
            coordinator_epoch: 0,
        };
        for i in 0..(ABORTED_MAX as i64 + 3) {
            t.on_data(1, 0, 2 * i);
            t.on_marker(1, abort, 2 * i + 1);
        }
        assert_eq!(t.forgotten, 3);
        assert_eq!(t.aborted_in(0, 6).len(), 0);
        assert_eq!(t.aborted_in(0, 8).len(), 1);
    }

    #[test]
    fn a_sealed_chunk_s_index_needs_an_exact_partition_and_sees_markers_after_it() {
        let abort = Marker {
            commit: false,
            coordinator_epoch: 0,
        };
        let commit = Marker {
            commit: true,
            coordinator_epoch: 0,
        };
        let mut t = PartitionTxns::default();
        t.on_data(1, 0, 0);
        t.on_marker(1, abort, 2);
        assert_eq!(t.index_for(0, 9), None, "not known to be exact");
        // Exact, with producer 5's transaction open from before this log began (at 0).
        t.set_exact(BTreeMap::from([(5, (0, -3))]));
        assert_eq!(t.open_first_offset(1), None);
        t.on_data(1, 0, 3);
        t.on_data(2, 0, 4);
        t.on_marker(5, commit, 5);
        t.on_marker(1, abort, 6);
        t.on_marker(2, abort, 8);
        let a = |producer_id, first_offset, last_offset| AbortedTxn {
            producer_id,
            first_offset,
            last_offset,
        };
        // A chunk 0..=6 sealed after 2's marker at 8 was appended: 2 is open after it.
        let i = t.index_for(0, 6).expect("exact");
        assert_eq!(i.aborts, vec![a(1, 0, 2), a(1, 3, 6)]);
        assert_eq!(i.stable_end, Some(4));
        assert_eq!(t.open_at(6), vec![(2, 0, 4)]);
        // After 4, 5's transaction from before this log is still open too (its marker is at 5).
        assert_eq!(t.open_at(4), vec![(5, 0, -3), (1, 0, 3), (2, 0, 4)]);
        assert_eq!(t.index_for(0, 4).expect("exact").stable_end, Some(-3));
        t.sealed_through(6);
        let i = t.index_for(7, 8).expect("exact");
        assert_eq!((i.aborts, i.stable_end), (vec![a(2, 4, 8)], Some(9)));
        // Forgetting aborts of a chunk unsettles its index.
        t.forgotten_through = Some(7);
        assert_eq!(t.index_for(7, 8), None);
    }

    /// A stamped transactional data batch of `producer_id` at `base`.
    fn txn_data(producer_id: i64, base: Offset) -> (BatchHeader, Vec<u8>) {
        let mut raw = crate::batch::testing::make_batch(2, 0);
        raw[21..23].copy_from_slice(&0x10i16.to_be_bytes());
        raw[43..51].copy_from_slice(&producer_id.to_be_bytes());
        raw[51..53].copy_from_slice(&0i16.to_be_bytes());
        raw[53..57].copy_from_slice(&0i32.to_be_bytes());
        let crc = crc32c::crc32c(&raw[21..]);
        raw[17..21].copy_from_slice(&crc.to_be_bytes());
        let raw = crate::batch::stamp(&raw, base, 0, None).to_vec();
        (peek_header(&raw).expect("valid").expect("whole"), raw)
    }

    fn txn_marker(producer_id: i64, commit: bool, at: Offset) -> (BatchHeader, Vec<u8>) {
        let m = Marker {
            commit,
            coordinator_epoch: 0,
        };
        let raw = crate::batch::stamp(&marker_batch(producer_id, 0, m, 0), at, 0, None).to_vec();
        (peek_header(&raw).expect("valid").expect("whole"), raw)
    }

    #[test]
    fn a_transaction_is_stable_only_once_its_marker_is_below_the_high_watermark() {
        let mut t = PartitionTxns::default();
        let abort = Marker {
            commit: false,
            coordinator_epoch: 0,
        };
        t.on_data(1, 0, 10);
        t.on_marker(1, abort, 12);
        // The marker is appended but not durable: the transaction is still unsettled.
        assert_eq!(t.last_stable_offset(12), 10);
        assert!(t.aborted_in(0, t.last_stable_offset(12)).is_empty());
        t.settle(12);
        assert_eq!(t.last_stable_offset(12), 10, "marker at 12 is not below 12");
        t.settle(13);
        assert_eq!(t.last_stable_offset(13), 13);
        assert_eq!(t.aborted_in(0, 13).len(), 1);
        // A later open transaction holds the LSO; a completed earlier one does not.
        t.on_data(2, 0, 14);
        t.on_data(3, 0, 15);
        t.on_marker(3, abort, 16);
        assert_eq!(t.last_stable_offset(20), 14);
        t.on_marker(2, abort, 17);
        assert_eq!(
            t.last_stable_offset(17),
            14,
            "2's marker at 17 is not durable"
        );
        assert_eq!(t.last_stable_offset(18), 18);
    }

    #[test]
    fn undo_takes_back_an_append_that_was_not_queued() {
        let mut t = PartitionTxns::default();
        let abort = Marker {
            commit: false,
            coordinator_epoch: 0,
        };
        t.on_data(1, 0, 10);
        t.undo(10);
        assert_eq!(t.last_stable_offset(20), 20);
        t.on_data(1, 0, 10);
        t.on_data(1, 0, 11);
        t.undo(11); // joined, opened nothing
        assert_eq!(t.open_first_offset(1), Some(10));
        t.on_marker(1, abort, 12);
        t.undo(12);
        assert_eq!(t.open_first_offset(1), Some(10));
        assert!(t.aborted_in(0, 100).is_empty());
        assert_eq!(t.last_stable_offset(20), 10);
    }

    #[test]
    fn scanning_headers_finds_aborts_and_cuts_before_unknown_outcomes() {
        // 0: p1 data, 2: p2 data, 4: p1 abort, 5: plain, 6: p2 commit ... 7: p3 data.
        let batches = [
            txn_data(1, 0),
            txn_data(2, 2),
            txn_marker(1, false, 4),
            txn_marker(2, true, 6),
            txn_data(3, 7),
        ];
        let mut scan = OutcomeScan::default();
        for (h, raw) in &batches[..2] {
            scan.returned(h, raw);
        }
        assert!(!scan.resolved());
        scan.ahead(&batches[2].0, &batches[2].1);
        assert!(!scan.resolved());
        scan.ahead(&batches[4].0, &batches[4].1); // data ahead: ignored
        scan.ahead(&batches[3].0, &batches[3].1);
        assert!(scan.resolved());
        let out = scan.finish();
        assert_eq!(out.cut_at, None);
        assert_eq!(
            out.aborted,
            vec![AbortedTxn {
                producer_id: 1,
                first_offset: 0,
                last_offset: 4
            }]
        );

        // The read-ahead stopped before p2's marker: cut at p2's data; p1's abort is
        // below it and kept.
        let mut scan = OutcomeScan::default();
        for (h, raw) in &batches[..3] {
            scan.returned(h, raw);
        }
        let out = scan.finish();
        assert_eq!(out.cut_at, Some(2));
        assert_eq!(out.aborted.len(), 1);
        // ... and an abort at or past the cut is not reported.
        let mut scan = OutcomeScan::default();
        scan.returned(&batches[1].0, &batches[1].1);
        scan.returned(&batches[0].0, &batches[0].1);
        let out = scan.finish();
        assert_eq!(out.cut_at, Some(0));
        assert!(out.aborted.is_empty());
    }

    #[test]
    fn a_committed_reader_drops_aborted_batches_and_markers() {
        let bytes = |(_, raw): (BatchHeader, Vec<u8>)| bytes::Bytes::from(raw);
        let batches = vec![
            bytes(txn_data(1, 0)),
            bytes(txn_data(2, 2)),
            bytes(txn_marker(1, false, 4)),
            bytes(txn_data(1, 5)),
            bytes(txn_marker(2, true, 7)),
        ];
        let aborted = [AbortedTxn {
            producer_id: 1,
            first_offset: 0,
            last_offset: 4,
        }];
        let kept: Vec<Offset> = drop_aborted(&batches, &aborted)
            .iter()
            .filter_map(|b| peek_header(b).ok().flatten())
            .map(|h| h.base_offset)
            .collect();
        assert_eq!(
            kept,
            vec![2, 5],
            "1's aborted data and both markers dropped"
        );
    }
}
