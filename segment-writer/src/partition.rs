//! The in-memory state of one partition this broker leads: offsets, recent batches,
//! idempotent-producer sequence state and transactions ([`crate::txn`]: open ones, the last
//! stable offset, aborted ones since `index_floor`). Pure: no I/O, no clocks; `log.rs`
//! drives it.
//!
//! Invariants (checked by the tests below):
//! - `log_start_offset <= sealed_end <= high_watermark <= log_end_offset`;
//! - `batches` are contiguous in offset order and end at `log_end_offset`;
//! - only batches wholly below the high watermark are ever returned to readers;
//! - a batch is sealed only after it is durable, and evicted from memory only once sealed.

use crate::batch::BatchHeader;
use crate::error::{Error, Result};
use crate::producer_state::ProducerStates;
pub use crate::producer_state::{ActiveProducer, SequenceCheck, PRODUCER_RECENT_BATCHES};
use crate::producer_summary::{self, ProducerBatch};
use crate::txn::{self, AbortedTxn, PartitionTxns};
use crate::txn_verify::{VerificationGuard, Verifications};
use bytes::Bytes;
use oxbow_metadata::{LeaderEpoch, LeaderEpochHistory, Offset};
use std::collections::VecDeque;

/// One batch held in memory.
#[derive(Clone, Debug)]
pub struct MemBatch {
    pub base_offset: Offset,
    pub last_offset: Offset,
    pub max_timestamp_ms: i64,
    pub bytes: Bytes,
    /// WAL sequence, once the batch is durable in the WAL.
    pub wal_sequence: Option<u64>,
    pub durable: bool,
    pub sealed: bool,
}

/// Where a read at some offset must go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadPlan {
    /// Served from memory: these batches (possibly none, at the high watermark).
    Memory(Vec<Bytes>),
    /// The offset is below what memory holds: read sealed objects, up to `sealed_end`.
    Objects,
}

/// The in-memory state of one partition.
#[derive(Debug)]
pub struct PartitionLogState {
    pub leader_epoch: LeaderEpoch,
    pub log_start_offset: Offset,
    /// Next offset to assign.
    pub log_end_offset: Offset,
    /// Everything below is durable and visible to consumers.
    pub high_watermark: Offset,
    /// Everything below is in the object store and the catalog.
    pub sealed_end: Offset,
    batches: VecDeque<MemBatch>,
    memory_bytes: usize,
    unsealed_bytes: usize,
    producers: ProducerStates,
    /// `--durability direct`: no WAL; a batch becomes durable (and visible) when it is
    /// sealed, so the sealer takes batches that are not durable yet.
    direct: bool,
    /// Where each recent epoch's data starts, as stored in the partition's state; its latest
    /// entry is `leader_epoch` once the open has recorded it (`LogManager::begin_epoch`).
    pub leader_epochs: LeaderEpochHistory,
    /// Transactions seen by [`Self::append`] (and restored open ones, [`Self::restore_open_txn`]).
    txns: PartitionTxns,
    /// The log end when this state was made, before any WAL replay or recovered tail: the
    /// aborted index knows every marker at or after it, none before (those reads walk the
    /// batches instead, [`txn::OutcomeScan`]).
    index_floor: Offset,
    /// Transactional producers asked about at their coordinator (KIP-890 part 1).
    verifications: Verifications,
    /// This leadership's last complete chunk (`producer_summary`, checkpoints): where it
    /// began, and how many chunks were sealed after it.
    checkpoint: (Option<Offset>, u32),
}

/// The rows a chunk carries for its partition's producers ([`PartitionLogState::carried_rows`]).
#[derive(Debug)]
pub struct CarriedRows {
    pub rows: Vec<ProducerBatch>,
    /// Every producer remembered: the chunk is a checkpoint.
    pub complete: bool,
}

impl PartitionLogState {
    /// State of a partition whose catalog ends at `log_end_offset`.
    pub fn new(
        leader_epoch: LeaderEpoch,
        log_start_offset: Offset,
        log_end_offset: Offset,
    ) -> Self {
        PartitionLogState {
            leader_epoch,
            log_start_offset,
            log_end_offset,
            high_watermark: log_end_offset,
            sealed_end: log_end_offset,
            batches: VecDeque::new(),
            memory_bytes: 0,
            unsealed_bytes: 0,
            producers: ProducerStates::default(),
            direct: false,
            leader_epochs: LeaderEpochHistory::default(),
            txns: PartitionTxns::default(),
            index_floor: log_end_offset,
            verifications: Verifications::default(),
            checkpoint: (None, 0),
        }
    }

    /// Where `read_committed` reads stop (see [`PartitionTxns::last_stable_offset`]).
    pub fn last_stable_offset(&self) -> Offset {
        self.txns.last_stable_offset(self.high_watermark)
    }

    /// Offsets at or after this are covered by the aborted index (see the field).
    pub fn index_floor(&self) -> Offset {
        self.index_floor
    }

    /// The aborted transactions a `read_committed` read from `offset` up to `upper` must
    /// skip; only complete for `offset >= index_floor`.
    pub fn aborted_in(&self, offset: Offset, upper: Offset) -> Vec<AbortedTxn> {
        self.txns.aborted_in(offset, upper)
    }

    /// The guard the next transactional batch of `producer_id` at `producer_epoch` must
    /// carry ([`crate::txn_verify`]): [`VerificationGuard::SENTINEL`] if its transaction at
    /// that epoch is already open here (nothing to verify), else the one its coordinator's
    /// answer goes with. The epoch matters under protocol 2: the next transaction's first
    /// batch (one epoch up) may arrive before the previous one's marker; taken as part of the
    /// open transaction, the previous outcome would decide it.
    pub fn start_txn_verification(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
    ) -> VerificationGuard {
        if self.txns.open_epoch(producer_id) == Some(producer_epoch) {
            return VerificationGuard::SENTINEL;
        }
        self.verifications.start(producer_id)
    }

    /// Whether a batch may be appended as far as verification goes: anything but
    /// transactional data passes, and so does data of a transaction already open here;
    /// the first batch of a transaction needs the guard its verification handed out.
    pub fn check_txn_verification(&self, h: &BatchHeader, guard: VerificationGuard) -> Result<()> {
        if !h.is_transactional()
            || h.is_control()
            || h.producer_id < 0
            || self.txns.open_epoch(h.producer_id) == Some(h.producer_epoch)
            || self.verifications.admits(h.producer_id, guard)
        {
            return Ok(());
        }
        Err(Error::InvalidTxnState {
            producer_id: h.producer_id,
        })
    }

    /// Producers with a transaction open here: (producer id, epoch, first offset).
    pub fn open_txns(&self) -> Vec<(i64, i16, Offset)> {
        self.txns.open_producers().collect()
    }

    /// A transaction open in data this state did not append (a sealed object's producers
    /// section says so), from `first_offset`.
    pub fn restore_open_txn(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        first_offset: Offset,
    ) {
        self.txns.on_data(producer_id, producer_epoch, first_offset);
    }

    /// The transactions open just after `last` ([`PartitionTxns::open_at`]): what a sealed
    /// chunk ending there carries as open.
    pub fn open_txns_at(&self, last: Offset) -> Vec<(i64, i16, Offset)> {
        self.txns.open_at(last)
    }

    /// The aborted-transaction index of a sealed chunk `base..=last` ([`PartitionTxns::index_for`]).
    pub fn txn_index_for(&self, base: Offset, last: Offset) -> Option<oxbow_metadata::TxnIndex> {
        self.txns.index_for(base, last)
    }

    /// The transactions open where this log began are exactly `open` ([`PartitionTxns::set_exact`]).
    pub fn set_txns_exact(&mut self, open: std::collections::BTreeMap<i64, (i16, Offset)>) {
        self.txns.set_exact(open);
    }

    /// Whether sealed chunks' entries carry an aborted-transaction index.
    pub fn txns_exact(&self) -> bool {
        self.txns.is_exact()
    }

    /// Forgets aborted transactions wholly below the log start.
    pub fn trim_txns_below(&mut self, log_start: Offset) {
        self.txns.trim_below(log_start);
    }

    /// The epoch this partition remembers for `producer_id` (from its batches or markers).
    pub fn producer_epoch(&self, producer_id: i64) -> Option<i16> {
        self.producers.epoch(producer_id)
    }

    /// Idempotent-producer check ([`ProducerStates::check_sequence`]).
    pub fn check_sequence(&self, h: &BatchHeader) -> Result<SequenceCheck> {
        self.producers.check_sequence(h)
    }

    /// The idempotent producers remembered here, by id.
    pub fn active_producers(&self) -> Vec<ActiveProducer> {
        self.producers.active()
    }

    /// What a sealed chunk starting at `before` carries forward ([`ProducerStates::carried`]).
    pub fn carried_producers(&self, before: Offset, max: usize) -> Vec<ProducerBatch> {
        self.producers.carried(before, max)
    }

    /// The producer rows a chunk from `first` to `last` carries forward: every remembered
    /// producer's if a checkpoint is due and at most `room` rows (what is left of the
    /// object's budget) make it complete, else the newest ones up to
    /// [`producer_summary::CARRIED_ROWS_MAX`] and a row naming the last complete chunk.
    /// Open transactions (as of `last`) come first either way.
    pub fn carried_rows(&self, first: Offset, last: Offset, room: usize) -> CarriedRows {
        let mut rows: Vec<ProducerBatch> = self
            .open_txns_at(last)
            .into_iter()
            .map(|(id, epoch, txn_first)| ProducerBatch::open_txn(id, epoch, txn_first))
            .collect();
        let all = self.producers.carried(first, usize::MAX);
        let (at, since) = self.checkpoint;
        let complete = all.len() <= producer_summary::CARRIED_ROWS_MAX
            || (all.len() <= room && producer_summary::checkpoint_due(at, since, last, all.len()));
        if complete {
            rows.extend(all);
        } else {
            rows.extend(
                self.producers
                    .carried(first, producer_summary::CARRIED_ROWS_MAX),
            );
            rows.extend(at.map(ProducerBatch::checkpoint));
        }
        CarriedRows { rows, complete }
    }

    /// A chunk beginning at `first` is catalogued; `complete`: it was a checkpoint.
    pub fn note_chunk_sealed(&mut self, first: Offset, complete: bool) {
        self.checkpoint = if complete {
            (Some(first), 0)
        } else {
            (self.checkpoint.0, self.checkpoint.1.saturating_add(1))
        };
    }

    /// Forgets producers idle past `expiration_ms` at `now_ms` with no transaction open
    /// here (`producer.id.expiration.ms`); returns how many.
    pub fn expire_producers(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let txns = &self.txns;
        self.producers.expire(now_ms, expiration_ms, |id| {
            txns.open_first_offset(id).is_some()
        })
    }

    /// How many producers this partition remembers.
    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    fn record_producer(&mut self, b: &ProducerBatch, timestamp_ms: i64) {
        let txns = &self.txns;
        self.producers
            .record(b, timestamp_ms, |id| txns.open_first_offset(id).is_some());
    }

    /// OffsetForLeaderEpoch's answer for `requested` (see
    /// [`LeaderEpochHistory::end_offset_for`]): the end of that epoch in this log, bounded by
    /// this log's start and end.
    pub fn end_offset_for(&self, requested: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        self.leader_epochs
            .end_offset_for(requested, self.log_start_offset, self.log_end_offset)
    }

    /// The epoch `offset` was written under, if the history goes back that far.
    pub fn epoch_for_offset(&self, offset: Offset) -> Option<LeaderEpoch> {
        self.leader_epochs.epoch_for_offset(offset)
    }

    /// Switches to `--durability direct` (see the field's docs).
    pub fn set_direct(&mut self) {
        self.direct = true;
    }

    /// Bytes held in memory, sealed or not.
    pub fn memory_bytes(&self) -> usize {
        self.memory_bytes
    }

    /// Bytes held in memory that are already in the object store (the tail kept for
    /// readers).
    pub fn sealed_memory_bytes(&self) -> usize {
        self.memory_bytes.saturating_sub(self.unsealed_bytes)
    }

    /// Bytes not yet in the object store.
    pub fn unsealed_bytes(&self) -> usize {
        self.unsealed_bytes
    }

    /// Remembers an already stored batch's producer sequence (state rebuilt from the log
    /// when a partition opens on a new leader), so retries of it are recognised.
    pub fn restore_producer(&mut self, b: &ProducerBatch) {
        self.record_producer(b, -1);
    }

    /// Assigns offsets to a validated batch and holds it (not yet durable). Returns its base
    /// offset. `bytes` must already carry that base offset (see [`crate::batch::stamp`]).
    pub fn append(&mut self, h: &BatchHeader, bytes: Bytes) -> Offset {
        let base = self.log_end_offset;
        let last = base + i64::from(h.last_offset_delta);
        if let Some(b) = ProducerBatch::of(h) {
            self.record_producer(
                &ProducerBatch {
                    base_offset: base,
                    ..b
                },
                h.max_timestamp,
            );
        }
        if h.is_control() {
            // Only markers are control batches here (produce refuses the rest).
            // Its epoch is remembered above, as a marker row.
            if let Some(marker) = txn::parse_marker(&bytes, h) {
                self.txns.on_marker(h.producer_id, marker, base);
            }
            // A verification asked before this marker answered for what it ended.
            self.verifications.clear(h.producer_id);
        } else if h.is_transactional() && h.producer_id >= 0 {
            self.txns.on_data(h.producer_id, h.producer_epoch, base);
            self.verifications.clear(h.producer_id);
        }
        self.memory_bytes += bytes.len();
        self.unsealed_bytes += bytes.len();
        self.batches.push_back(MemBatch {
            base_offset: base,
            last_offset: last,
            max_timestamp_ms: h.max_timestamp,
            bytes,
            wal_sequence: None,
            durable: false,
            sealed: false,
        });
        self.log_end_offset = last + 1;
        base
    }

    /// The next offset [`Self::append`] will assign.
    pub fn next_offset(&self) -> Offset {
        self.log_end_offset
    }

    /// Undoes the latest append (its WAL write could not even be queued).
    pub fn undo_last_append(&mut self, base_offset: Offset) {
        if let Some(b) = self.batches.back() {
            if b.base_offset == base_offset && !b.durable {
                self.memory_bytes -= b.bytes.len();
                self.unsealed_bytes -= b.bytes.len();
                self.log_end_offset = b.base_offset;
                self.batches.pop_back();
                // A marker's epoch bump stays: the coordinator retries the marker at it.
                self.txns.undo(base_offset);
                // Sequence state may now be ahead; the producer's retry is then treated as a
                // duplicate of nothing and refused as out of order, which makes it reset —
                // never a silent loss.
            }
        }
    }

    fn index_of(&self, base_offset: Offset) -> Option<usize> {
        let i = self
            .batches
            .partition_point(|b| b.base_offset < base_offset);
        (self.batches.get(i)?.base_offset == base_offset).then_some(i)
    }

    /// Marks the batch at `base_offset` durable; returns whether the high watermark moved.
    pub fn mark_durable(&mut self, base_offset: Offset, wal_sequence: Option<u64>) -> bool {
        if let Some(i) = self.index_of(base_offset) {
            self.batches[i].durable = true;
            self.batches[i].wal_sequence = wal_sequence;
        }
        let before = self.high_watermark;
        let start = self
            .batches
            .partition_point(|b| b.last_offset < self.high_watermark);
        for b in self.batches.iter().skip(start) {
            if !b.durable || b.base_offset != self.high_watermark {
                break;
            }
            self.high_watermark = b.last_offset + 1;
        }
        self.txns.settle(self.high_watermark);
        self.high_watermark != before
    }

    /// Re-holds a batch recovered from the WAL at its recorded offset: durable, unsealed.
    /// Batches at or below what is already held (catalogued) are skipped.
    pub fn replay(&mut self, h: &BatchHeader, bytes: Bytes, wal_sequence: u64) -> Result<bool> {
        if h.last_offset() < self.log_end_offset {
            return Ok(false);
        }
        if h.base_offset != self.log_end_offset {
            return Err(Error::Internal(format!(
                "WAL replay gap: log ends at {} but the next WAL batch starts at {}",
                self.log_end_offset, h.base_offset
            )));
        }
        let base = self.append(h, bytes);
        self.mark_durable(base, Some(wal_sequence));
        Ok(true)
    }

    /// Plans a read at `offset`: from memory if it holds the offset, else from objects.
    /// Returns at most `max_bytes`, but always the first batch if `min_one` (KIP-74).
    pub fn plan_read(&self, offset: Offset, max_bytes: usize, min_one: bool) -> Result<ReadPlan> {
        if offset < self.log_start_offset || offset > self.log_end_offset {
            return Err(Error::OffsetOutOfRange {
                offset,
                log_start: self.log_start_offset,
                log_end: self.log_end_offset,
            });
        }
        if offset >= self.high_watermark {
            return Ok(ReadPlan::Memory(Vec::new()));
        }
        match self.batches.front() {
            Some(first) if first.base_offset <= offset => {}
            _ => return Ok(ReadPlan::Objects),
        }
        let start = self.batches.partition_point(|b| b.last_offset < offset);
        Ok(ReadPlan::Memory(
            self.collect_from(start, max_bytes, min_one),
        ))
    }

    fn collect_from(&self, start: usize, max_bytes: usize, min_one: bool) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut total = 0usize;
        for b in self.batches.iter().skip(start) {
            if b.last_offset >= self.high_watermark {
                break;
            }
            if total + b.bytes.len() > max_bytes && !(min_one && out.is_empty()) {
                break;
            }
            total += b.bytes.len();
            out.push(b.bytes.clone());
        }
        out
    }

    /// Batches from memory starting at `offset` (for a read that began in objects and
    /// reached the memory tail). Empty if memory does not hold `offset`.
    pub fn read_memory_from(&self, offset: Offset, max_bytes: usize) -> Vec<Bytes> {
        match self.batches.front() {
            Some(first) if first.base_offset <= offset => {}
            _ => return Vec::new(),
        }
        let start = self.batches.partition_point(|b| b.last_offset < offset);
        self.collect_from(start, max_bytes, false)
    }

    /// First durable batch (in memory) whose max timestamp is at or after `timestamp_ms`.
    pub fn find_timestamp_in_memory(&self, timestamp_ms: i64) -> Option<Bytes> {
        self.batches
            .iter()
            .filter(|b| b.last_offset < self.high_watermark)
            .find(|b| b.max_timestamp_ms >= timestamp_ms)
            .map(|b| b.bytes.clone())
    }

    /// Batches to seal next, in offset order: durable ones not yet sealed (in direct mode,
    /// every one not yet sealed).
    pub fn unsealed(&self) -> Vec<MemBatch> {
        self.batches
            .iter()
            .filter(|b| !b.sealed && (self.direct || b.last_offset < self.high_watermark))
            .cloned()
            .collect()
    }

    /// Records that everything up to and including `last_offset` is catalogued. Returns
    /// whether the high watermark moved (only in direct mode, where sealed means durable).
    pub fn mark_sealed(&mut self, last_offset: Offset) -> bool {
        let mut newly_durable = Vec::new();
        for b in self.batches.iter_mut() {
            if b.last_offset > last_offset {
                break;
            }
            if !b.sealed {
                b.sealed = true;
                self.unsealed_bytes -= b.bytes.len();
            }
            if !b.durable {
                newly_durable.push(b.base_offset);
            }
        }
        self.sealed_end = self.sealed_end.max(last_offset + 1);
        self.txns.sealed_through(last_offset);
        let mut moved = false;
        for base in newly_durable {
            moved |= self.mark_durable(base, None);
        }
        moved
    }

    /// Lowest WAL sequence of a batch that is not yet sealed (the WAL must keep it).
    pub fn min_unsealed_wal_sequence(&self) -> Option<u64> {
        self.batches
            .iter()
            .filter(|b| !b.sealed)
            .filter_map(|b| b.wal_sequence)
            .min()
    }

    /// Whether a batch is held that is not yet durable (its WAL sequence still unknown).
    pub fn has_pending_durability(&self) -> bool {
        self.batches.iter().any(|b| !b.durable)
    }

    /// Drops the sealed batches at the front that end at or before `offset`: key
    /// compaction replaced them in the catalog, and readers must get the compacted data
    /// (a reader that already took the originals saw a prefix of the same log).
    pub fn evict_through(&mut self, offset: Offset) {
        while let Some(b) = self.batches.front() {
            if !b.sealed || b.last_offset > offset {
                break;
            }
            self.memory_bytes -= b.bytes.len();
            self.batches.pop_front();
        }
    }

    /// Drops sealed batches from the front until the sealed ones are within `keep_bytes`
    /// (`--partition-tail-bytes`: what is kept for tail readers besides the unsealed
    /// batches, which stay whatever their size). Readers of older offsets go to the object
    /// store (through the read cache). Counting the unsealed bytes too, as this once did,
    /// dropped every sealed batch whenever more than `keep_bytes` awaited the next seal —
    /// at high produce rates, always — so readers a moment behind read from the cache.
    pub fn evict(&mut self, keep_bytes: usize) {
        while self.sealed_memory_bytes() > keep_bytes {
            match self.batches.front() {
                Some(b) if b.sealed => {
                    self.memory_bytes -= b.bytes.len();
                    self.batches.pop_front();
                }
                _ => break,
            }
        }
    }
}

#[cfg(test)]
mod tests;
