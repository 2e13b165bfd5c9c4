//! The idempotent and transactional producers one partition remembers (Kafka's
//! `ProducerStateManager`, simplified), pure: their epoch, last sequences and where their
//! latest batches are stored, so a retry gets its original offset, a gap is refused as out
//! of order and an older epoch as fenced. `partition.rs` holds one and feeds it every
//! append; sealed objects carry its rows ([`ProducerStates::carried`]) to the partition's
//! next leader, which rebuilds it from them.
//!
//! Bounded two ways: a producer idle past `producer.id.expiration.ms` (its newest batch's
//! timestamp, as Kafka measures it) with no transaction open is forgotten
//! ([`ProducerStates::expire`]), and at most [`PRODUCERS_MAX`] are remembered — past that
//! the ones whose latest batch lies furthest back in the log go first, so a client
//! inventing producer ids cannot grow a partition's memory without bound.

use crate::batch::BatchHeader;
use crate::error::{Error, Result};
use crate::producer_summary::{ProducerBatch, RowKind};
use oxbow_metadata::Offset;
use std::collections::{HashMap, VecDeque};

/// How many recent batches per producer are remembered for deduplication (Kafka's
/// `max.in.flight.requests.per.connection` limit for idempotence is 5).
pub const PRODUCER_RECENT_BATCHES: usize = 5;

/// Most producers one partition remembers (see the module docs).
pub const PRODUCERS_MAX: usize = 20_000;

#[derive(Clone, Debug)]
struct ProducerEntry {
    epoch: i16,
    last_sequence: i32,
    /// The newest record timestamp of its last batch appended here (-1: known only from a
    /// rebuilt state, which keeps no timestamps).
    last_timestamp_ms: i64,
    /// (first sequence, last sequence, base offset) of the latest batches.
    recent: VecDeque<(i32, i32, Offset)>,
    /// Where the newest marker at `epoch` is stored, if one is: what a sealed object
    /// carries forward for a producer known only from a marker (a fencing abort's).
    marker_offset: Option<Offset>,
}

impl ProducerEntry {
    fn new(epoch: i16) -> Self {
        ProducerEntry {
            epoch,
            last_sequence: -1,
            last_timestamp_ms: -1,
            recent: VecDeque::new(),
            marker_offset: None,
        }
    }

    /// Where its newest batch or marker is stored.
    fn last_offset(&self) -> Option<Offset> {
        let batch = self.recent.back().map(|&(_, _, o)| o);
        batch.max(self.marker_offset)
    }
}

/// An idempotent producer this partition remembers (DescribeProducers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActiveProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub last_sequence: i32,
    pub last_timestamp_ms: i64,
}

/// What to do with a produced batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it.
    Append,
    /// It is a retry of a batch already appended at this base offset: answer with that.
    Duplicate(Offset),
}

/// The producers of one partition.
#[derive(Debug, Default)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
}

impl ProducerStates {
    /// The epoch remembered for `producer_id` (from its batches or markers).
    pub fn epoch(&self, producer_id: i64) -> Option<i16> {
        self.producers.get(&producer_id).map(|e| e.epoch)
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// A marker of `producer_id` at `producer_epoch`, stored at `offset`: a newer epoch is
    /// remembered (Kafka's `ProducerStateManager`), so a later batch at an older one is
    /// fenced; its sequences restart (the producer's next batch at that epoch starts
    /// wherever it does).
    fn marker_epoch(&mut self, producer_id: i64, producer_epoch: i16, offset: Offset) {
        let entry = self
            .producers
            .entry(producer_id)
            .or_insert_with(|| ProducerEntry::new(producer_epoch));
        if producer_epoch > entry.epoch {
            entry.epoch = producer_epoch;
            entry.last_sequence = -1;
            entry.recent.clear();
        }
        if producer_epoch == entry.epoch {
            entry.marker_offset = Some(offset);
        }
    }

    /// Idempotent-producer check (Kafka's `ProducerStateManager` rules, simplified): a
    /// batch from a known producer must carry the next sequence, a retry of one of its last
    /// five batches is a duplicate, an older epoch is fenced.
    pub fn check_sequence(&self, h: &BatchHeader) -> Result<SequenceCheck> {
        if h.producer_id < 0 || h.base_sequence < 0 {
            return Ok(SequenceCheck::Append);
        }
        let Some(entry) = self.producers.get(&h.producer_id) else {
            // Unknown producer (new, or its state predates this broker's memory): accept.
            return Ok(SequenceCheck::Append);
        };
        if h.producer_epoch < entry.epoch {
            return Err(Error::ProducerFenced {
                producer_id: h.producer_id,
                current: entry.epoch,
                got: h.producer_epoch,
            });
        }
        if h.producer_epoch > entry.epoch {
            return if h.base_sequence == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err(Error::OutOfOrderSequence {
                    producer_id: h.producer_id,
                    expected: 0,
                    got: h.base_sequence,
                })
            };
        }
        if entry.recent.is_empty() {
            // Known only from a marker: its epoch, not its sequence.
            return Ok(SequenceCheck::Append);
        }
        if let Some((_, _, base)) = entry
            .recent
            .iter()
            .find(|(first, last, _)| *first == h.base_sequence && *last == h.last_sequence())
        {
            return Ok(SequenceCheck::Duplicate(*base));
        }
        let expected = if entry.last_sequence == i32::MAX {
            0
        } else {
            entry.last_sequence + 1
        };
        if h.base_sequence != expected {
            return Err(Error::OutOfOrderSequence {
                producer_id: h.producer_id,
                expected,
                got: h.base_sequence,
            });
        }
        Ok(SequenceCheck::Append)
    }

    /// The idempotent producers remembered here, by id.
    pub fn active(&self) -> Vec<ActiveProducer> {
        let mut out: Vec<ActiveProducer> = self
            .producers
            .iter()
            .map(|(&producer_id, e)| ActiveProducer {
                producer_id,
                producer_epoch: e.epoch,
                last_sequence: e.last_sequence,
                last_timestamp_ms: e.last_timestamp_ms,
            })
            .collect();
        out.sort_by_key(|p| p.producer_id);
        out
    }

    /// The remembered batches of producers whose last batch (or marker) lies before `before`
    /// (so none with one in a chunk starting there): newest producers first, each
    /// producer's batches in order — or, for one known only from a marker, that marker — at
    /// most `max` rows (what a sealed object carries forward for the partition's next
    /// leader).
    pub fn carried(&self, before: Offset, max: usize) -> Vec<ProducerBatch> {
        let mut producers: Vec<(&i64, &ProducerEntry)> = self
            .producers
            .iter()
            .filter(|(_, e)| e.last_offset().is_some_and(|o| o < before))
            .collect();
        producers.sort_by_key(|(id, e)| (std::cmp::Reverse(e.last_offset()), **id));
        let mut out = Vec::new();
        for (&producer_id, e) in producers {
            let rows: Vec<ProducerBatch> = match e.marker_offset {
                Some(offset) if e.recent.is_empty() => {
                    vec![ProducerBatch::marker(producer_id, e.epoch, offset)]
                }
                _ => e
                    .recent
                    .iter()
                    .map(
                        |&(base_sequence, last_sequence, base_offset)| ProducerBatch {
                            producer_id,
                            producer_epoch: e.epoch,
                            base_sequence,
                            last_sequence,
                            base_offset,
                            kind: RowKind::Batch,
                        },
                    )
                    .collect(),
            };
            if out.len() + rows.len() > max {
                break;
            }
            out.extend(rows);
        }
        out
    }

    /// Remembers a batch's producer sequence (`b.base_offset` is where it is stored) and,
    /// when known (`timestamp_ms >= 0`), its newest record timestamp; or a marker's epoch.
    /// A new producer past [`PRODUCERS_MAX`] makes room (`open`: producers with a
    /// transaction open here, never forgotten).
    pub fn record(&mut self, b: &ProducerBatch, timestamp_ms: i64, open: impl Fn(i64) -> bool) {
        let known = self.producers.contains_key(&b.producer_id);
        match b.kind {
            RowKind::Batch => self.batch(b),
            RowKind::Marker => self.marker_epoch(b.producer_id, b.producer_epoch, b.base_offset),
            RowKind::OpenTxn | RowKind::Checkpoint => return,
        }
        if timestamp_ms >= 0 {
            if let Some(e) = self.producers.get_mut(&b.producer_id) {
                e.last_timestamp_ms = e.last_timestamp_ms.max(timestamp_ms);
            }
        }
        if !known {
            self.bound(open);
        }
    }

    fn batch(&mut self, b: &ProducerBatch) {
        let entry = self
            .producers
            .entry(b.producer_id)
            .or_insert_with(|| ProducerEntry::new(b.producer_epoch));
        if b.producer_epoch != entry.epoch {
            entry.epoch = b.producer_epoch;
            entry.recent.clear();
            entry.marker_offset = None;
        }
        entry.last_sequence = b.last_sequence;
        entry
            .recent
            .push_back((b.base_sequence, b.last_sequence, b.base_offset));
        while entry.recent.len() > PRODUCER_RECENT_BATCHES {
            entry.recent.pop_front();
        }
    }

    /// Forgets producers idle for `expiration_ms` or longer at `now_ms` (their newest
    /// timestamp; one known only from a rebuilt state starts its clock now) unless
    /// `open(producer_id)` (a transaction open here). Returns how many were forgotten.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64, open: impl Fn(i64) -> bool) -> usize {
        let before = self.producers.len();
        self.producers.retain(|&id, e| {
            if e.last_timestamp_ms < 0 {
                e.last_timestamp_ms = now_ms;
            }
            open(id) || now_ms.saturating_sub(e.last_timestamp_ms) < expiration_ms
        });
        before - self.producers.len()
    }

    /// Past [`PRODUCERS_MAX`]: forgets an eighth of them, those whose latest batch or
    /// marker lies furthest back, never one with a transaction open (`open`).
    fn bound(&mut self, open: impl Fn(i64) -> bool) {
        if self.producers.len() <= PRODUCERS_MAX {
            return;
        }
        let mut by_age: Vec<(Option<Offset>, i64)> = self
            .producers
            .iter()
            .filter(|(id, _)| !open(**id))
            .map(|(id, e)| (e.last_offset(), *id))
            .collect();
        by_age.sort_unstable();
        for (_, id) in by_age.into_iter().take(PRODUCERS_MAX / 8) {
            self.producers.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(producer_id: i64, sequence: i32, base_offset: Offset) -> ProducerBatch {
        ProducerBatch {
            producer_id,
            producer_epoch: 0,
            base_sequence: sequence,
            last_sequence: sequence,
            base_offset,
            kind: RowKind::Batch,
        }
    }

    #[test]
    fn idle_producers_expire_unless_a_transaction_is_open() {
        let mut p = ProducerStates::default();
        p.record(&batch(1, 0, 0), 1_000, |_| false);
        p.record(&batch(2, 0, 1), 5_000, |_| false);
        p.record(&batch(3, 0, 2), 1_000, |_| false);
        // Rebuilt from a sealed object: no timestamp, its clock starts at the first check.
        p.record(&batch(4, 0, 3), -1, |_| false);
        assert_eq!(
            p.expire(10_000, 8_000, |id| id == 3),
            1,
            "only 1 (3 is open)"
        );
        assert_eq!(p.epoch(1), None);
        assert!(p.epoch(2).is_some() && p.epoch(3).is_some() && p.epoch(4).is_some());
        assert_eq!(
            p.expire(13_000, 8_000, |_| false),
            2,
            "2, and 3 with its transaction over"
        );
        assert_eq!(p.expire(17_999, 8_000, |_| false), 0);
        assert_eq!(
            p.expire(18_000, 8_000, |_| false),
            1,
            "4, 8 s after it was first seen"
        );
        assert_eq!(p.len(), 0);
        // A forgotten producer's next batch is taken as a new producer's.
        let h = crate::batch::peek_header(&crate::batch::testing::make_idempotent_batch(
            1, 1_000, 1, 0, 7,
        ))
        .expect("header")
        .expect("whole");
        assert_eq!(
            p.check_sequence(&h).expect("unknown"),
            SequenceCheck::Append
        );
    }

    #[test]
    fn invented_producer_ids_cannot_grow_a_partition_without_bound() {
        let mut p = ProducerStates::default();
        for id in 0..(PRODUCERS_MAX as i64 + 1) {
            p.record(&batch(id, 0, id), 1_000, |id| id == 0);
        }
        assert!(p.len() <= PRODUCERS_MAX, "{}", p.len());
        assert!(p.epoch(0).is_some(), "an open transaction's producer stays");
        assert_eq!(p.epoch(1), None, "the one furthest back goes first");
        assert!(p.epoch(PRODUCERS_MAX as i64).is_some(), "the newest stays");
    }
}
