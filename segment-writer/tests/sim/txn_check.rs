//! What the transactional workload (`txn.rs`) did and read, and the rules that judge it
//! against the final log (issue 16, ARCHITECTURE decisions 22 and 29), numbered after
//! `history.rs`'s:
//!
//! 12. `read_committed` reads only what is decided and committed: every transactional record
//!     the consumer kept belongs to a transaction decided COMMIT (never an aborted one: G1a,
//!     nor a fenced one, a zombie's data included), and it was read no earlier than that
//!     transaction's first marker write in its partition began (never while it was still
//!     open there: G1b, an intermediate read); and it is in the final log where it was read;
//! 13. committed transactions are whole and read once: every acknowledged batch of a
//!     committed transaction is in the final log at its offset and the next marker of its
//!     producer after it there is a COMMIT (an aborted or fenced one's: an ABORT); every
//!     acknowledged marker is in the final log at its offset; and the `read_committed`
//!     consumer read each record of a transaction whose markers were all acknowledged exactly
//!     once (below a log start it was reset to excepted), and no record twice;
//! 14. zombie fencing: no batch or marker of a producer epoch is acknowledged past an
//!     acknowledged marker of that producer at a higher epoch in its partition, and none is
//!     stored past one in the final log (a marker's epoch fences older ones, across leader
//!     changes: ARCHITECTURE decision 29, the row a marker leaves in its producer's state);
//! 15. the last stable offset a `read_committed` read is told never exceeds its high
//!     watermark, never moves back while one leader epoch serves it, and no batch it returns
//!     reaches it (judged while running, `txn::consume_once`);
//! 16. liveness: once the faults end every transaction is decided with a marker acknowledged
//!     in each of its partitions, no partition leader has a transaction open, and every
//!     partition's last stable offset reaches its high watermark (`txn::final_state`).

use crate::history::StoredBatch;
use std::collections::{BTreeMap, BTreeSet};

/// How a transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Commit,
    Abort,
    /// Aborted under a bumped epoch by a new instance of its producer (InitProducerId),
    /// while the old one, now a zombie, kept going.
    Fenced,
}

/// One transaction of the workload.
#[derive(Clone, Debug)]
pub struct Txn {
    /// Which transactional producer of the workload, and its transaction's number there.
    pub producer: u64,
    pub number: u64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The partitions it added (AddPartitionsToTxn): each gets a marker, data or not.
    pub partitions: Vec<i32>,
    pub decision: Option<Decision>,
    /// When the first marker write began in each partition: its outcome may be visible from
    /// then on, never before.
    pub markers_started_ms: BTreeMap<i32, u64>,
    /// The offset of the acknowledged marker in each partition.
    pub markers_acked: BTreeMap<i32, i64>,
}

impl Txn {
    pub fn name(&self) -> String {
        format!("txn{}.{}", self.producer, self.number)
    }

    /// Decided, with a marker acknowledged in every partition it added.
    pub fn ended(&self) -> bool {
        self.decision.is_some()
            && self
                .partitions
                .iter()
                .all(|p| self.markers_acked.contains_key(p))
    }
}

/// One transactional batch sent (a zombie's too: it belongs to the fenced transaction).
#[derive(Clone, Debug)]
pub struct TxnBatch {
    pub txn: usize,
    pub partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub count: i32,
    /// Sent by the zombie of a fenced epoch.
    pub zombie: bool,
    /// Where it was acknowledged.
    pub acked: Option<i64>,
}

/// One acknowledged marker.
#[derive(Clone, Debug)]
pub struct MarkerAck {
    pub txn: usize,
    pub partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub offset: i64,
    /// Written by a zombie of a fenced epoch (a deposed coordinator's late marker).
    pub zombie: bool,
}

/// One record the `read_committed` consumer kept.
#[derive(Clone, Copy, Debug)]
pub struct TxnRead {
    pub offset: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub sequence: i32,
    pub transactional: bool,
    pub t_ms: u64,
}

/// What the transactional workload recorded (part of [`crate::history::History`]).
#[derive(Default)]
pub struct TxnHistory {
    pub txns: Vec<Txn>,
    pub batches: Vec<TxnBatch>,
    /// (partition, producer id, producer epoch, base sequence) → index in `batches`.
    index: BTreeMap<(i32, i64, i16, i32), usize>,
    pub markers: Vec<MarkerAck>,
    /// What the `read_committed` consumer kept, per partition, in reading order.
    pub read: BTreeMap<i32, Vec<TxnRead>>,
    /// What the late reader (catalogued reads on other brokers, from the log start) kept.
    pub late_read: BTreeMap<i32, Vec<TxnRead>>,
    /// `read_committed` reads told of their aborts by the catalogue's index, and by walking
    /// batch headers (the consumer's below a leader's index floor, and the late reader's).
    pub index_reads: u64,
    pub walk_reads: u64,
    /// The highest log start the `read_committed` consumer reset to (auto.offset.reset).
    pub resets: BTreeMap<i32, i64>,
    /// The last stable offset last served per (partition, leader epoch) (rule 15).
    pub lso_seen: BTreeMap<(i32, i32), i64>,
    /// Zombie appends and markers refused as fenced, and zombie batches acknowledged (before
    /// the fence reached their partition).
    pub zombie_refusals: u64,
    pub zombie_acks: u64,
}

/// A run's transactions in figures (the per-seed table).
#[derive(Clone, Copy, Debug, Default)]
pub struct TxnCounts {
    pub committed: u64,
    pub aborted: u64,
    pub fenced: u64,
    pub zombie_refusals: u64,
    pub zombie_acks: u64,
    pub records_read: u64,
    pub late_records_read: u64,
    pub index_reads: u64,
    pub walk_reads: u64,
}

impl TxnHistory {
    pub fn begin(&mut self, txn: Txn) -> usize {
        self.txns.push(txn);
        self.txns.len() - 1
    }

    pub fn sent(&mut self, b: TxnBatch) -> usize {
        let key = (
            b.partition,
            b.producer_id,
            b.producer_epoch,
            b.base_sequence,
        );
        self.batches.push(b);
        let i = self.batches.len() - 1;
        self.index.insert(key, i);
        i
    }

    /// The batch holding (partition, producer, epoch, sequence), if one was sent.
    pub fn batch_of(&self, partition: i32, pid: i64, epoch: i16, seq: i32) -> Option<&TxnBatch> {
        let (&(p, id, e, base), &i) = self
            .index
            .range(..=(partition, pid, epoch, seq))
            .next_back()?;
        let b = self.batches.get(i)?;
        (p == partition && id == pid && e == epoch && seq < base + b.count).then_some(b)
    }

    pub fn counts(&self) -> TxnCounts {
        let of = |d| self.txns.iter().filter(|t| t.decision == Some(d)).count() as u64;
        TxnCounts {
            committed: of(Decision::Commit),
            aborted: of(Decision::Abort),
            fenced: of(Decision::Fenced),
            zombie_refusals: self.zombie_refusals,
            zombie_acks: self.zombie_acks,
            records_read: self.read.values().map(|r| r.len() as u64).sum(),
            late_records_read: self.late_read.values().map(|r| r.len() as u64).sum(),
            index_reads: self.index_reads,
            walk_reads: self.walk_reads,
        }
    }
}

/// Rules 12, 13 and 14 (15 and 16 are judged while running and at the end): the
/// transactional history against the final logs (read from their log starts) and log starts;
/// `log_starts`: the highest log start each partition was given (DeleteRecords).
pub fn check(
    t: &TxnHistory,
    logs: &BTreeMap<i32, Vec<StoredBatch>>,
    starts: &BTreeMap<i32, i64>,
    log_starts: &BTreeMap<i32, i64>,
) -> Vec<String> {
    let mut out = Vec::new();
    let start_of = |p: i32| starts.get(&p).copied().unwrap_or(0);
    // Below this a record may be gone, or skipped by a consumer reset to a log start.
    let exempt_below = |p: i32| {
        start_of(p)
            .max(log_starts.get(&p).copied().unwrap_or(0))
            .max(t.resets.get(&p).copied().unwrap_or(0))
    };
    // The final logs: per partition, offset → (producer, epoch, sequence) of each data
    // record, and each producer's markers in offset order (offset, commit).
    let mut records: BTreeMap<i32, BTreeMap<i64, (i64, i16, i32)>> = BTreeMap::new();
    let mut markers: BTreeMap<(i32, i64), Vec<(i64, bool)>> = BTreeMap::new();
    let mut marker_at: BTreeMap<(i32, i64), &StoredBatch> = BTreeMap::new();
    for (&p, batches) in logs {
        // Rule 14, in the final log: a producer's highest marker epoch so far.
        let mut fenced_at: BTreeMap<i64, (i16, i64)> = BTreeMap::new();
        for b in batches {
            if b.producer_id >= 0 {
                if let Some(&(epoch, at)) = fenced_at.get(&b.producer_id) {
                    if b.producer_epoch < epoch {
                        out.push(format!(
                            "p{p}: a {} of producer {} epoch {} is stored at {} past its marker of epoch {epoch} at {at}: a zombie's {} was accepted after the fence (rule 14)",
                            if b.marker.is_some() { "marker" } else { "batch" },
                            b.producer_id,
                            b.producer_epoch,
                            b.base_offset,
                            if b.marker.is_some() { "marker" } else { "append" },
                        ));
                    }
                }
            }
            match b.marker {
                Some(commit) => {
                    markers
                        .entry((p, b.producer_id))
                        .or_default()
                        .push((b.base_offset, commit));
                    marker_at.insert((p, b.base_offset), b);
                    let e = fenced_at
                        .entry(b.producer_id)
                        .or_insert((b.producer_epoch, b.base_offset));
                    if b.producer_epoch > e.0 {
                        *e = (b.producer_epoch, b.base_offset);
                    }
                }
                None => {
                    let r = records.entry(p).or_default();
                    for &o in &b.offsets {
                        let seq = b.base_sequence + (o - b.base_offset) as i32;
                        r.insert(o, (b.producer_id, b.producer_epoch, seq));
                    }
                }
            }
        }
    }
    let none = BTreeMap::new();
    // The first marker of `pid` in `p` after `offset`.
    let next_marker = |p: i32, pid: i64, offset: i64| {
        markers
            .get(&(p, pid))
            .and_then(|ms| ms.iter().find(|&&(o, _)| o > offset).copied())
    };

    // Rule 13: acknowledged batches and markers are in the final log, with the outcome their
    // transaction was decided.
    for b in &t.batches {
        let Some(offset) = b.acked else { continue };
        let Some(txn) = t.txns.get(b.txn) else {
            continue;
        };
        let last = offset + i64::from(b.count) - 1;
        if last < start_of(b.partition) {
            continue;
        }
        let stored = records.get(&b.partition).unwrap_or(&none);
        for i in 0..b.count {
            let o = offset + i64::from(i);
            let want = (b.producer_id, b.producer_epoch, b.base_sequence + i);
            if o >= start_of(b.partition) && stored.get(&o) != Some(&want) {
                out.push(format!(
                    "p{}: {}'s acknowledged record (producer {} epoch {} sequence {}) is not at offset {o} in the final log, which holds {:?} (rule 13)",
                    b.partition, txn.name(), want.0, want.1, want.2, stored.get(&o)
                ));
                break;
            }
        }
        let want_commit = match txn.decision {
            Some(Decision::Commit) => Some(true),
            Some(Decision::Abort | Decision::Fenced) => Some(false),
            None => None,
        };
        match (next_marker(b.partition, b.producer_id, last), want_commit) {
            (Some((at, commit)), Some(want)) if commit != want => out.push(format!(
                "p{}: {}'s acknowledged batch at {offset}..={last}{} ({:?}) is followed by a{} marker at {at}: {} (rule {})",
                b.partition,
                txn.name(),
                if b.zombie { " (a zombie's)" } else { "" },
                txn.decision,
                if commit { " COMMIT" } else { "n ABORT" },
                if commit { "aborted data made visible (G1a)" } else { "committed data lost" },
                if commit { 12 } else { 13 },
            )),
            (None, Some(_)) if txn.ended() => out.push(format!(
                "p{}: {}'s acknowledged batch at {offset}..={last} has no marker of its producer after it in the final log (rule 13)",
                b.partition,
                txn.name()
            )),
            _ => {}
        }
    }
    for m in t
        .markers
        .iter()
        .filter(|m| m.offset >= start_of(m.partition))
    {
        let found = marker_at.get(&(m.partition, m.offset));
        if !found.is_some_and(|s| {
            s.producer_id == m.producer_id
                && s.producer_epoch == m.producer_epoch
                && s.marker == Some(m.commit)
        }) {
            out.push(format!(
                "p{}: an acknowledged {} marker of producer {} epoch {} is not at {} in the final log (rule 13)",
                m.partition,
                if m.commit { "COMMIT" } else { "ABORT" },
                m.producer_id,
                m.producer_epoch,
                m.offset
            ));
        }
    }

    // Rule 14: nothing of an older epoch acknowledged past an acknowledged fence.
    let fence_before = |p: i32, pid: i64, epoch: i16, offset: i64| {
        t.markers
            .iter()
            .filter(|m| m.partition == p && m.producer_id == pid)
            .filter(|m| m.producer_epoch > epoch && m.offset < offset)
            .map(|m| (m.producer_epoch, m.offset))
            .min_by_key(|&(_, o)| o)
    };
    for b in &t.batches {
        let Some(offset) = b.acked else { continue };
        if let Some((epoch, at)) =
            fence_before(b.partition, b.producer_id, b.producer_epoch, offset)
        {
            out.push(format!(
                "p{}: a batch of producer {} epoch {} (sequence {}) was acknowledged at {offset}, past the acknowledged marker of epoch {epoch} at {at}: a fenced producer's append accepted (rule 14)",
                b.partition, b.producer_id, b.producer_epoch, b.base_sequence
            ));
        }
    }
    for m in &t.markers {
        if let Some((epoch, at)) =
            fence_before(m.partition, m.producer_id, m.producer_epoch, m.offset)
        {
            out.push(format!(
                "p{}: {}'s {} marker of producer {} epoch {} was acknowledged at {}, past the acknowledged marker of epoch {epoch} at {at}: {} marker of a fenced epoch accepted (rule 14)",
                m.partition,
                t.txns.get(m.txn).map_or_else(String::new, Txn::name),
                if m.commit { "COMMIT" } else { "ABORT" },
                m.producer_id,
                m.producer_epoch,
                m.offset,
                if m.zombie { "a zombie's" } else { "a" }
            ));
        }
    }

    // Rule 12: what the read_committed consumer kept.
    let mut times: BTreeMap<(i32, i64, i16, i32), u32> = BTreeMap::new();
    // The late reader's reads are judged alike, but not counted (it reads everything again
    // and again).
    let late = t.late_read.iter().map(|(p, r)| (p, r, true));
    for (&p, reads, is_late) in t.read.iter().map(|(p, r)| (p, r, false)).chain(late) {
        let stored = records.get(&p).unwrap_or(&none);
        for r in reads {
            if !is_late {
                *times
                    .entry((p, r.producer_id, r.producer_epoch, r.sequence))
                    .or_default() += 1;
            }
            if r.offset >= start_of(p)
                && stored.get(&r.offset) != Some(&(r.producer_id, r.producer_epoch, r.sequence))
            {
                out.push(format!(
                    "p{p}: read_committed read producer {} epoch {} sequence {} at {}, which the final log does not hold there ({:?}) (rule 12)",
                    r.producer_id, r.producer_epoch, r.sequence, r.offset, stored.get(&r.offset)
                ));
            }
            if !r.transactional {
                continue;
            }
            let Some(b) = t.batch_of(p, r.producer_id, r.producer_epoch, r.sequence) else {
                out.push(format!(
                    "p{p}: read_committed read transactional producer {} epoch {} sequence {} at {}, which no transaction sent (rule 12)",
                    r.producer_id, r.producer_epoch, r.sequence, r.offset
                ));
                continue;
            };
            let Some(txn) = t.txns.get(b.txn) else {
                continue;
            };
            let what = format!(
                "p{p}: {}read_committed read {}'s record at {} (producer {} epoch {} sequence {}{}) at {} ms",
                if is_late { "the late reader's " } else { "" },
                txn.name(),
                r.offset,
                r.producer_id,
                r.producer_epoch,
                r.sequence,
                if b.zombie { ", a zombie's" } else { "" },
                r.t_ms
            );
            match txn.decision {
                Some(Decision::Abort | Decision::Fenced) => out.push(format!(
                    "{what}, but it was {}: aborted data read (G1a, rule 12)",
                    if txn.decision == Some(Decision::Fenced) {
                        "fenced and aborted"
                    } else {
                        "aborted"
                    }
                )),
                _ => match txn.markers_started_ms.get(&p) {
                    Some(&started) if started <= r.t_ms && txn.decision.is_some() => {}
                    started => out.push(format!(
                        "{what}, before its transaction ended there (first marker write began at {started:?} ms): an intermediate read (G1b, rule 12)"
                    )),
                },
            }
        }
    }
    for (&(p, pid, epoch, seq), &n) in &times {
        if n > 1 {
            out.push(format!(
                "p{p}: read_committed read producer {pid} epoch {epoch} sequence {seq} {n} times (rule 13)"
            ));
        }
    }
    // Rule 13: every record of an ended committed transaction read, once.
    for b in &t.batches {
        let Some(offset) = b.acked else { continue };
        let Some(txn) = t.txns.get(b.txn) else {
            continue;
        };
        if txn.decision != Some(Decision::Commit) || !txn.ended() {
            continue;
        }
        for i in 0..b.count {
            let o = offset + i64::from(i);
            let seq = b.base_sequence + i;
            if o < exempt_below(b.partition) {
                continue;
            }
            let key = (b.partition, b.producer_id, b.producer_epoch, seq);
            if !times.contains_key(&key) {
                out.push(format!(
                    "p{}: read_committed never read committed {}'s record at {o} (producer {} epoch {} sequence {seq}) (rule 13)",
                    b.partition,
                    txn.name(),
                    b.producer_id,
                    b.producer_epoch
                ));
                break;
            }
        }
    }
    out
}

/// The transactions the workload left undecided or without all their markers (rule 16).
pub fn unended(t: &TxnHistory) -> Vec<String> {
    t.txns
        .iter()
        .filter(|x| !x.ended())
        .map(|x| {
            let missing: BTreeSet<i32> = x
                .partitions
                .iter()
                .copied()
                .filter(|p| !x.markers_acked.contains_key(p))
                .collect();
            format!(
                "{} (producer {} epoch {}) never ended after the faults: decision {:?}, no marker acknowledged in {:?} (rule 16)",
                x.name(),
                x.producer_id,
                x.producer_epoch,
                x.decision,
                missing
            )
        })
        .collect()
}
