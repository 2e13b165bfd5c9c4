//! The partition side of transactions (issue 16), pure: the control batches that end a
//! transaction in a partition (commit / abort markers, Kafka's `EndTransactionMarker`), and
//! [`PartitionTxns`] — which producers have a transaction open here, the last stable offset
//! that follows from them, and the aborted transactions a `read_committed` fetch must be told
//! about. Not wired yet: transactional batches are still refused at produce.
//!
//! Rules (Kafka's `ProducerStateManager` and `TransactionIndex`):
//! - a producer's first transactional batch after none is open starts its transaction at that
//!   batch's base offset; its later batches join it;
//! - a marker ends it: commit or abort, at the marker's offset; an abort is remembered as
//!   (producer, first offset, last offset = the marker's) so a `read_committed` consumer can
//!   drop that producer's batches in the range; a marker for a producer with nothing open
//!   here ends nothing (AddPartitionsToTxn may name a partition that got no data);
//! - the last stable offset is the first offset of the oldest open transaction, or the high
//!   watermark if none is open below it: `read_committed` fetches stop there;
//! - a fetch from `offset` up to `upper` is told of every aborted transaction whose range
//!   overlaps it (`last ≥ offset` and `first < upper`), in first-offset order;
//! - retention drops what lies wholly below the log start; the index is bounded
//!   ([`ABORTED_MAX`]): past it the oldest aborts are forgotten and counted, which a later
//!   step (the index persisted with sealed data) removes.

use crate::batch::{BatchHeader, BATCH_HEADER_BYTES, BATCH_LOG_OVERHEAD};
use oxbow_metadata::Offset;
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

/// One aborted transaction, as Fetch reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: Offset,
    /// The abort marker's offset.
    pub last_offset: Offset,
}

/// A partition's open and aborted transactions (see the module docs).
#[derive(Debug, Default)]
pub struct PartitionTxns {
    /// Producer → (epoch, first offset) of its open transaction.
    open: BTreeMap<i64, (i16, Offset)>,
    /// Aborted transactions by marker offset (so in first-offset order per producer).
    aborted: VecDeque<AbortedTxn>,
    /// Aborts forgotten past [`ABORTED_MAX`].
    pub forgotten: u64,
}

impl PartitionTxns {
    /// A transactional batch of `producer_id` stored at `base_offset`.
    pub fn on_data(&mut self, producer_id: i64, producer_epoch: i16, base_offset: Offset) {
        self.open
            .entry(producer_id)
            .and_modify(|(epoch, _)| *epoch = (*epoch).max(producer_epoch))
            .or_insert((producer_epoch, base_offset));
    }

    /// A marker of `producer_id` stored at `offset`; returns the transaction it ended, if
    /// one was open here.
    pub fn on_marker(
        &mut self,
        producer_id: i64,
        marker: Marker,
        offset: Offset,
    ) -> Option<Offset> {
        let (_, first) = self.open.remove(&producer_id)?;
        if !marker.commit {
            self.aborted.push_back(AbortedTxn {
                producer_id,
                first_offset: first,
                last_offset: offset,
            });
            while self.aborted.len() > ABORTED_MAX {
                self.aborted.pop_front();
                self.forgotten += 1;
            }
        }
        Some(first)
    }

    /// Where `read_committed` reads stop: the oldest open transaction's first offset, or
    /// `high_watermark`.
    pub fn last_stable_offset(&self, high_watermark: Offset) -> Offset {
        self.open
            .values()
            .map(|&(_, first)| first)
            .min()
            .map_or(high_watermark, |first| first.min(high_watermark))
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

    /// Producers with a transaction open here.
    pub fn open_producers(&self) -> impl Iterator<Item = (i64, i16, Offset)> + '_ {
        self.open
            .iter()
            .map(|(&id, &(epoch, first))| (id, epoch, first))
    }
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
}
