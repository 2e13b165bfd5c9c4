//! What a run observed — the trace, every acknowledgement, every record a consumer read —
//! and the checker that judges it against the log the cluster holds at the end.
//!
//! Invariants (the list; each violation names the partition and offsets):
//! 1. no acknowledged record is lost: at every acknowledged base offset the final log holds
//!    the batch that was acknowledged there (same producer, sequence and count);
//! 2. none is duplicated: each (producer, producer epoch, sequence) appears once in a
//!    partition's log (markers carry no sequence);
//! 3. offsets are dense and monotonic: each batch starts where the previous one ended;
//!    leader epochs never decrease along the log;
//! 4. a fenced writer acknowledged nothing after its fence: a (first) acknowledgement made
//!    under epoch E is stored under epoch E (a later leader did not overwrite it);
//! 5. the high watermark a consumer sees never moves back, across leader changes too;
//! 6. consumers neither rewind nor skip: each read continues at its position, validation
//!    after a leader change (OffsetForLeaderEpoch) never reports a truncation, and every
//!    record a consumer read is in the final log at the offset it was read at;
//! 7. liveness: no broker exits on start for a reason that is not an injected fault, and
//!    every partition is served again once the faults end;
//! 8. the catalogue resolves every offset below its end to exactly one entry (dense from
//!    the log start, no overlap), and no entry serves an offset at or past the start of the
//!    next leader epoch, and every entry it serves names an object the store holds
//!    (`workload::catalog_violations`, ARCHITECTURE decisions 23 and 25);
//! 9. nothing deleted comes back: the log start a client is served never moves back, across
//!    leader changes and restarts too;
//! 10. retention removes only what expired (the lifecycle runs): every acknowledged record
//!     below a served log start was either below a DeleteRecords request or older than
//!     `retention.ms` by the latest wall time any broker's clock could have read by then;
//! 11. key compaction removes a record only behind a later record of its key (compacted
//!     runs): every acknowledged record missing from the final log, and every record a
//!     consumer read that is gone, has a later record of its key there — or a tombstone of
//!     its key at or after it whose delete horizon may have passed: no tombstone goes before
//!     `delete.retention.ms` ([`DELETE_RETENTION_MS`]) after it was sent, by the latest wall
//!     time any broker's clock could have read, clock steps back included (KIP-534); a
//!     consumer may skip only offsets the final log does not hold; batches keep their
//!     ranges.

use std::collections::{BTreeMap, BTreeSet};

/// One acknowledged produce.
#[derive(Clone, Debug)]
pub struct Ack {
    pub partition: i32,
    pub producer_id: i64,
    pub base_sequence: i32,
    pub count: i32,
    pub base_offset: i64,
    /// The timestamp of its newest record (CreateTime, set by the producer).
    pub max_timestamp_ms: i64,
    /// The true wall time (no clock step) its first attempt was sent at.
    pub sent_true_ms: i64,
    /// The epoch of the leader that acknowledged it.
    pub leader_epoch: i32,
    /// A retry the leader recognised (its first attempt was written, perhaps under an
    /// earlier leader): its epoch is the first attempt's, so rule 4 does not apply.
    pub duplicate: bool,
}

/// One batch of the final log, from its header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The offsets of the records it holds: all of `base_offset..=last_offset`, fewer once
    /// key compaction removed some (the header keeps the batch's range).
    pub offsets: Vec<i64>,
    pub leader_epoch: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    /// A control batch: `Some(true)` a COMMIT marker, `Some(false)` an ABORT.
    pub marker: Option<bool>,
}

/// A produce a producer stopped retrying at the end without an answer: it may have landed,
/// at an offset no one learnt.
#[derive(Clone, Debug)]
pub struct Unsettled {
    pub partition: i32,
    pub producer_id: i64,
    pub base_sequence: i32,
    pub count: i32,
    pub sent_true_ms: i64,
}

/// One record a consumer read: (offset, producer, sequence).
pub type Consumed = (i64, i64, i32);

#[derive(Default)]
pub struct History {
    /// Readable event trace, one line per event, prefixed with the simulated time.
    pub trace: Vec<String>,
    pub acks: Vec<Ack>,
    pub unsettled: Vec<Unsettled>,
    pub consumed: BTreeMap<i32, Vec<Consumed>>,
    /// Violations found while running (the rest are found by [`check`]).
    pub violations: Vec<String>,
    /// Distinct fault kinds injected in this run.
    pub fault_kinds: BTreeSet<&'static str>,
    /// Faults injected.
    pub faults: u64,
    /// The highest log start each partition was given (DeleteRecords): a consumer may skip
    /// forward to at most this.
    pub log_starts: BTreeMap<i32, i64>,
    /// The highest offset each partition was asked to delete below (DeleteRecords, whether
    /// or not its answer arrived: a lost answer may still have landed).
    pub delete_requested: BTreeMap<i32, i64>,
    /// The highest log start each partition was served at (rule 9).
    pub served_starts: BTreeMap<i32, i64>,
    /// How often a served log start moved forward.
    pub start_advances: u64,
    /// What the transactional workload did and read (transactional runs, `txn_check.rs`).
    pub txn: crate::txn_check::TxnHistory,
}

impl History {
    pub fn event(&mut self, t_ms: u64, line: String) {
        self.trace
            .push(format!("[{:>4}.{:03}] {line}", t_ms / 1000, t_ms % 1000));
    }

    pub fn set_log_start(&mut self, partition: i32, start: i64) {
        let s = self.log_starts.entry(partition).or_default();
        *s = (*s).max(start);
    }

    pub fn violation(&mut self, t_ms: u64, line: String) {
        self.event(t_ms, format!("VIOLATION {line}"));
        self.violations.push(line);
    }

    pub fn request_delete(&mut self, partition: i32, below: i64) {
        let r = self.delete_requested.entry(partition).or_default();
        *r = (*r).max(below);
    }

    /// A client was served `start` as `partition`'s log start at `t_ms`, when no broker's
    /// wall clock could yet have read past `wall_max_ms`. Checks rules 9 and 10
    /// (`retention_ms`: the topic's, if retention runs).
    pub fn observe_log_start(
        &mut self,
        t_ms: u64,
        partition: i32,
        start: i64,
        wall_max_ms: i64,
        retention_ms: Option<i64>,
    ) {
        let seen = self.served_starts.get(&partition).copied().unwrap_or(0);
        if start < seen {
            self.violation(
                t_ms,
                format!("p{partition}: the log start went back from {seen} to {start}: deleted records came back"),
            );
            return;
        }
        if start == seen {
            return;
        }
        self.served_starts.insert(partition, start);
        self.start_advances += 1;
        let requested = self.delete_requested.get(&partition).copied().unwrap_or(0);
        // Retention removes whole catalog entries, each at most as new as its newest record:
        // one may go only once that record is older than retention.ms by the deciding
        // broker's clock, which never reads past `wall_max_ms`.
        let removable = |a: &Ack| {
            retention_ms.is_some_and(|ms| a.max_timestamp_ms < wall_max_ms.saturating_sub(ms))
        };
        let young: Vec<String> = self
            .acks
            .iter()
            .filter(|a| a.partition == partition)
            .filter(|a| {
                let end = a.base_offset + i64::from(a.count);
                end <= start && end > seen.max(requested)
            })
            .filter(|a| !removable(a))
            .map(|a| {
                format!(
                    "p{partition}: log start {start} removed acknowledged offsets {}..{} (producer {} sequence {}) whose newest record ({} ms) had not expired: no clock could read past {wall_max_ms} ms yet, retention.ms {retention_ms:?}, DeleteRecords asked for below {requested}",
                    a.base_offset,
                    a.base_offset + i64::from(a.count),
                    a.producer_id,
                    a.base_sequence,
                    a.max_timestamp_ms,
                )
            })
            .collect();
        for v in young {
            self.violation(t_ms, v);
        }
    }
}

/// How many keys a compacted run's producer writes to in one generation (few, so most
/// records are superseded and every cleaning removes something).
pub const KEYS: u64 = 6;

/// Sequences per generation: the first [`GENERATION`] − [`KEYS`] write values to the
/// generation's keys, the last [`KEYS`] delete each of them (tombstones), so every run has
/// keys that end deleted and tombstones old enough to expire.
pub const GENERATION: i32 = 24;

/// Generations before keys repeat (the key is one byte).
const GENERATIONS: i32 = 8;

/// The key of a compacted run's record: a function of who wrote it, so the checker knows
/// the key of every acknowledged record and of every record it finds.
pub fn key_of(producer_id: i64, sequence: i32) -> u8 {
    let generation = sequence.div_euclid(GENERATION).rem_euclid(GENERATIONS);
    let within = sequence.rem_euclid(GENERATION);
    let slot = if is_tombstone(producer_id, sequence) {
        (within - (GENERATION - KEYS as i32)) as u64
    } else {
        let mix = (producer_id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (sequence as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        (mix >> 29) % KEYS
    };
    b'0' + (generation as u64 * KEYS + slot) as u8
}

/// Whether a compacted run's record is a tombstone (null value): the last [`KEYS`]
/// sequences of each generation, one per key of it.
pub fn is_tombstone(_producer_id: i64, sequence: i32) -> bool {
    sequence.rem_euclid(GENERATION) >= GENERATION - KEYS as i32
}

/// The compacted topic's `delete.retention.ms`: longer than two clock steps
/// (`schedule::MAX_SKEW_MS`) so rule 11 has tombstones to protect, short enough that early
/// ones expire within a run.
pub const DELETE_RETENTION_MS: i64 = 8_000;

/// What rule 11 needs of a key-compacted run's clocks.
#[derive(Clone, Copy, Debug)]
pub struct Compacted {
    /// The latest wall time any broker's clock could have read by the final read.
    pub wall_peak_ms: i64,
    /// The furthest back the clocks were ever stepped (≤ 0).
    pub skew_min_ms: i64,
}

impl Compacted {
    /// Clocks that never read past `wall_peak_ms` and were never stepped.
    pub fn at(wall_peak_ms: i64) -> Compacted {
        Compacted {
            wall_peak_ms,
            skew_min_ms: 0,
        }
    }

    /// Whether a tombstone sent at `sent_true_ms` may be gone: its horizon was stamped by a
    /// cleaning no earlier than its send, on a clock reading at least the true time plus the
    /// furthest step back, and removing it needed a reading at or past the horizon.
    fn may_have_expired(&self, sent_true_ms: i64) -> bool {
        sent_true_ms + self.skew_min_ms + DELETE_RETENTION_MS <= self.wall_peak_ms
    }
}

/// Checks the history against the final logs (partition → batches from its log start,
/// the first one holding it) and the final log starts. `compacted`: the topic is
/// key-compacted, so a record may be missing behind a later record of its key, or a
/// tombstone of it may have expired (rule 11).
pub fn check(
    h: &History,
    logs: &BTreeMap<i32, Vec<StoredBatch>>,
    starts: &BTreeMap<i32, i64>,
    compaction: Option<Compacted>,
) -> Vec<String> {
    let compacted = compaction.is_some();
    let mut out = h.violations.clone();
    let start_of = |p: i32| starts.get(&p).copied().unwrap_or(0);
    // Every record of the final logs: partition → offset → (producer, sequence).
    let present: BTreeMap<i32, BTreeMap<i64, (i64, i32)>> = logs
        .iter()
        .map(|(p, bs)| {
            let records = bs
                .iter()
                .flat_map(|b| {
                    b.offsets.iter().map(move |&o| {
                        (
                            o,
                            (b.producer_id, b.base_sequence + (o - b.base_offset) as i32),
                        )
                    })
                })
                .collect();
            (*p, records)
        })
        .collect();
    // The last offset of each key in the final logs (compacted runs).
    let latest: BTreeMap<(i32, u8), i64> = present
        .iter()
        .flat_map(|(p, records)| {
            records
                .iter()
                .map(move |(&o, &(pid, seq))| ((*p, key_of(pid, seq)), o))
        })
        .collect();
    // The tombstones that may have expired by the final read, by partition and key: at an
    // acknowledged offset, or (unsettled) at an offset no one learnt.
    let mut expired: BTreeMap<(i32, u8), Vec<Option<i64>>> = BTreeMap::new();
    if let Some(c) = compaction {
        for a in h.acks.iter().filter(|a| c.may_have_expired(a.sent_true_ms)) {
            for i in 0..a.count {
                let seq = a.base_sequence + i;
                if is_tombstone(a.producer_id, seq) {
                    expired
                        .entry((a.partition, key_of(a.producer_id, seq)))
                        .or_default()
                        .push(Some(a.base_offset + i64::from(i)));
                }
            }
        }
        for u in h
            .unsettled
            .iter()
            .filter(|u| c.may_have_expired(u.sent_true_ms))
        {
            for seq in (u.base_sequence..).take(u.count as usize) {
                if is_tombstone(u.producer_id, seq) {
                    expired
                        .entry((u.partition, key_of(u.producer_id, seq)))
                        .or_default()
                        .push(None);
                }
            }
        }
    }
    // Rule 11: compaction removed the record at `offset` only behind a later one of its key,
    // or with an expired tombstone of its key at or after it (the tombstone itself included).
    let superseded = |p: i32, offset: i64, pid: i64, seq: i32| {
        let key = key_of(pid, seq);
        compacted
            && (latest.get(&(p, key)).is_some_and(|&l| l > offset)
                || expired
                    .get(&(p, key))
                    .is_some_and(|ts| ts.iter().any(|t| t.is_none_or(|t| t >= offset))))
    };
    for (p, batches) in logs {
        let mut next = batches.first().map_or(0, |b| b.base_offset);
        // (Compacted: the batches at the start may have been emptied and dropped.)
        if next > start_of(*p) && !compacted {
            out.push(format!(
                "p{p}: the log begins at {next}, past its log start {}",
                start_of(*p)
            ));
        }
        let mut epoch = i32::MIN;
        let mut seen = BTreeSet::new();
        for b in batches {
            // Compaction drops batches it emptied: later batches start further on, never
            // before the previous one's end.
            let gap_allowed = compacted && b.base_offset > next;
            if b.base_offset != next && !gap_allowed {
                out.push(format!(
                    "p{p}: offsets not dense: a batch at {} after one ending at {}",
                    b.base_offset,
                    next - 1
                ));
            }
            if b.leader_epoch < epoch {
                out.push(format!(
                    "p{p}: leader epoch went back from {epoch} to {} at offset {}",
                    b.leader_epoch, b.base_offset
                ));
            }
            epoch = epoch.max(b.leader_epoch);
            if !compacted && b.offsets.len() as i64 != b.last_offset - b.base_offset + 1 {
                out.push(format!(
                    "p{p}: the batch at {}..={} holds {} records",
                    b.base_offset,
                    b.last_offset,
                    b.offsets.len()
                ));
            }
            // Markers carry no sequence; a bumped producer epoch restarts sequences.
            for &o in b.offsets.iter().filter(|_| b.marker.is_none()) {
                let seq = b.base_sequence + (o - b.base_offset) as i32;
                if !seen.insert((b.producer_id, b.producer_epoch, seq)) {
                    out.push(format!(
                        "p{p}: producer {} sequence {seq} stored twice (again at offset {o})",
                        b.producer_id,
                    ));
                }
            }
            next = b.last_offset + 1;
        }
    }
    let none = BTreeMap::new();
    for a in &h.acks {
        // Wholly below the log start: deleted, as asked (rule 1 is about the rest).
        if a.base_offset + i64::from(a.count) <= start_of(a.partition) {
            continue;
        }
        let records = present.get(&a.partition).unwrap_or(&none);
        let found = logs
            .get(&a.partition)
            .and_then(|bs| bs.iter().find(|b| b.base_offset == a.base_offset));
        if let Some(b) = found {
            let count = (b.last_offset - b.base_offset + 1) as i32;
            if b.producer_id != a.producer_id
                || b.base_sequence != a.base_sequence
                || count != a.count
            {
                out.push(format!(
                    "p{}: acknowledged batch lost: offset {} holds producer {} sequence {} ({} records), acknowledged producer {} sequence {} ({} records)",
                    a.partition, a.base_offset, b.producer_id, b.base_sequence, count,
                    a.producer_id, a.base_sequence, a.count
                ));
                continue;
            } else if !a.duplicate && b.leader_epoch != a.leader_epoch {
                out.push(format!(
                    "p{}: offset {} acknowledged under epoch {} but stored under epoch {}: a fenced leader acknowledged it",
                    a.partition, a.base_offset, a.leader_epoch, b.leader_epoch
                ));
            }
        }
        // Record by record: each is there, or (compacted) superseded by a later one of its
        // key, or below the log start.
        for i in 0..a.count {
            let offset = a.base_offset + i64::from(i);
            let seq = a.base_sequence + i;
            if offset < start_of(a.partition) || records.get(&offset) == Some(&(a.producer_id, seq))
            {
                continue;
            }
            if records.get(&offset).is_none() && superseded(a.partition, offset, a.producer_id, seq)
            {
                continue;
            }
            out.push(format!(
                "p{}: acknowledged record lost: producer {} sequence {seq} at offset {offset} (batch {}..{}); the final log holds {:?} there{}",
                a.partition,
                a.producer_id,
                a.base_offset,
                a.base_offset + i64::from(a.count),
                records.get(&offset),
                if compacted {
                    format!(", and key {} last at {:?}", key_of(a.producer_id, seq) as char,
                        latest.get(&(a.partition, key_of(a.producer_id, seq))))
                } else {
                    String::new()
                }
            ));
            break;
        }
    }
    for (p, read) in &h.consumed {
        let stored = present.get(p).unwrap_or(&none);
        let mut expect = 0i64;
        // A consumer below the log start resets to it (auto.offset.reset): a skip forward to
        // at most the highest log start set, or the final one, is that reset.
        let reset_to = h.log_starts.get(p).copied().unwrap_or(0).max(start_of(*p));
        for &(offset, pid, seq) in read {
            let reset = offset > expect && offset <= reset_to;
            // Compacted: a skip over offsets the final log does not hold (removed before the
            // consumer got there) is no skip.
            let compacted_away =
                compacted && offset > expect && stored.range(expect..offset).next().is_none();
            if offset != expect && !reset && !compacted_away {
                out.push(format!(
                    "p{p}: the consumer read offset {offset} after {} (a {})",
                    expect - 1,
                    if offset < expect { "rewind" } else { "skip" }
                ));
            }
            expect = offset + 1;
            // Below the final log start: deleted since it was read.
            if offset < start_of(*p) {
                continue;
            }
            if stored.get(&offset) != Some(&(pid, seq))
                && !(stored.get(&offset).is_none() && superseded(*p, offset, pid, seq))
            {
                out.push(format!(
                    "p{p}: the consumer read producer {pid} sequence {seq} at offset {offset}, which the final log does not hold there ({:?})",
                    stored.get(&offset)
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    // The checker is exercised by the simulation's tests in main.rs (a clean run passes; a
    // run with a reintroduced bug fails); these cases pin each rule on hand-made logs.
    use super::*;

    fn batch(base: i64, last: i64, epoch: i32, pid: i64, seq: i32) -> StoredBatch {
        StoredBatch {
            base_offset: base,
            last_offset: last,
            offsets: (base..=last).collect(),
            leader_epoch: epoch,
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: seq,
            marker: None,
        }
    }

    fn ack(base: i64, count: i32, epoch: i32, pid: i64, seq: i32) -> Ack {
        Ack {
            partition: 0,
            producer_id: pid,
            base_sequence: seq,
            count,
            base_offset: base,
            max_timestamp_ms: 0,
            sent_true_ms: 0,
            leader_epoch: epoch,
            duplicate: false,
        }
    }

    #[test]
    fn served_log_starts_never_go_back_and_retention_removes_only_expired_records() {
        let mut h = History {
            acks: vec![
                Ack {
                    max_timestamp_ms: 1_000,
                    ..ack(0, 2, 0, 7, 0)
                },
                Ack {
                    max_timestamp_ms: 5_000,
                    ..ack(2, 2, 0, 7, 2)
                },
            ],
            ..History::default()
        };
        // By wall time 4_000 with retention.ms 2_000 only records before 2_000 may go.
        h.observe_log_start(0, 0, 2, 4_000, Some(2_000));
        assert!(h.violations.is_empty(), "{:?}", h.violations);
        h.observe_log_start(0, 0, 4, 4_000, Some(2_000));
        assert!(
            h.violations.iter().any(|v| v.contains("had not expired")),
            "{:?}",
            h.violations
        );
        h.violations.clear();
        h.observe_log_start(0, 0, 3, 4_000, Some(2_000));
        assert!(h.violations.iter().any(|v| v.contains("went back")));
        // Without retention only DeleteRecords may remove anything; what it asked for is not
        // judged by age.
        let mut d = History {
            acks: h.acks.clone(),
            ..History::default()
        };
        d.request_delete(0, 4);
        d.observe_log_start(0, 0, 4, 0, None);
        assert!(d.violations.is_empty(), "{:?}", d.violations);
        let mut n = History {
            acks: h.acks.clone(),
            ..History::default()
        };
        n.request_delete(0, 1);
        n.observe_log_start(0, 0, 2, i64::MAX, None);
        assert!(n.violations.iter().any(|v| v.contains("had not expired")));
    }

    #[test]
    fn each_rule_fires_on_its_violation_and_not_otherwise() {
        let good = BTreeMap::from([(0, vec![batch(0, 1, 0, 7, 0), batch(2, 2, 1, 7, 2)])]);
        let mut h = History {
            acks: vec![ack(0, 2, 0, 7, 0), ack(2, 1, 1, 7, 2)],
            ..History::default()
        };
        h.consumed.insert(0, vec![(0, 7, 0), (1, 7, 1), (2, 7, 2)]);
        let none = BTreeMap::new();
        assert!(
            check(&h, &good, &none, None).is_empty(),
            "{:?}",
            check(&h, &good, &none, None)
        );

        let gap = BTreeMap::from([(0, vec![batch(0, 1, 0, 7, 0), batch(3, 3, 1, 7, 2)])]);
        assert!(check(&h, &gap, &none, None)
            .iter()
            .any(|v| v.contains("not dense")));
        let lost = BTreeMap::from([(0, vec![batch(0, 1, 0, 7, 0)])]);
        assert!(check(&h, &lost, &none, None)
            .iter()
            .any(|v| v.contains("lost")));
        let dup = BTreeMap::from([(0, vec![batch(0, 1, 0, 7, 0), batch(2, 3, 1, 7, 0)])]);
        assert!(check(&h, &dup, &none, None)
            .iter()
            .any(|v| v.contains("twice")));
        let fenced = BTreeMap::from([(0, vec![batch(0, 1, 0, 7, 0), batch(2, 2, 2, 7, 2)])]);
        assert!(check(&h, &fenced, &none, None)
            .iter()
            .any(|v| v.contains("fenced")));
        let back = BTreeMap::from([(0, vec![batch(0, 1, 3, 7, 0), batch(2, 2, 1, 7, 2)])]);
        assert!(check(&h, &back, &none, None)
            .iter()
            .any(|v| v.contains("went back")));

        let mut rewind = History::default();
        rewind
            .consumed
            .insert(0, vec![(0, 7, 0), (1, 7, 1), (0, 7, 0)]);
        assert!(check(&rewind, &good, &none, None)
            .iter()
            .any(|v| v.contains("rewind")));
        let mut skip = History::default();
        skip.consumed.insert(0, vec![(0, 7, 0), (2, 7, 2)]);
        assert!(check(&skip, &good, &none, None)
            .iter()
            .any(|v| v.contains("skip")));

        // DeleteRecords below 2: the first batch is gone, its ack and reads are exempt, and
        // a consumer's skip to the log start is its reset; a skip past it is not.
        let trimmed = BTreeMap::from([(0, vec![batch(2, 2, 1, 7, 2)])]);
        let starts = BTreeMap::from([(0, 2)]);
        assert!(
            check(&h, &trimmed, &starts, None).is_empty(),
            "{:?}",
            check(&h, &trimmed, &starts, None)
        );
        let mut reset = History {
            acks: h.acks.clone(),
            ..History::default()
        };
        reset.set_log_start(0, 2);
        reset.consumed.insert(0, vec![(2, 7, 2)]);
        assert!(check(&reset, &trimmed, &starts, None).is_empty());
        let mut past = History::default();
        past.consumed.insert(0, vec![(0, 7, 0), (3, 7, 3)]);
        let longer = BTreeMap::from([(0, vec![batch(2, 3, 1, 7, 2)])]);
        assert!(check(&past, &longer, &starts, None)
            .iter()
            .any(|v| v.contains("skip")));
        // A log that begins past its log start lost what was between.
        let begins_late = BTreeMap::from([(0, vec![batch(2, 2, 1, 7, 2)])]);
        assert!(check(&History::default(), &begins_late, &none, None)
            .iter()
            .any(|v| v.contains("past its log start")));
    }

    #[test]
    fn compaction_may_remove_a_record_only_behind_a_later_one_of_its_key() {
        // Producer 7's sequences 0..8 at offsets 0..8: find a sequence whose key comes back
        // later, and the last sequence of some key.
        let seqs: Vec<i32> = (0..8).collect();
        let older = *seqs
            .iter()
            .find(|&&s| seqs.iter().any(|&l| l > s && key_of(7, l) == key_of(7, s)))
            .expect("six keys over eight records repeat one");
        let last_of_key = |s: i32| !seqs.iter().any(|&l| l > s && key_of(7, l) == key_of(7, s));
        let newest = *seqs
            .iter()
            .find(|&&s| last_of_key(s))
            .expect("some key ends");
        let h = History {
            acks: vec![ack(0, 8, 0, 7, 0)],
            ..History::default()
        };
        let without = |gone: i32| {
            let mut b = batch(0, 7, 0, 7, 0);
            b.offsets.retain(|&o| o != i64::from(gone));
            BTreeMap::from([(0, vec![b])])
        };
        let none = BTreeMap::new();
        // The older value of a key may go in a compacted topic, not in another.
        let compacted = without(older);
        assert!(
            check(&h, &compacted, &none, Some(Compacted::at(0))).is_empty(),
            "{:?}",
            check(&h, &compacted, &none, Some(Compacted::at(0)))
        );
        assert!(check(&h, &compacted, &none, None)
            .iter()
            .any(|v| v.contains("lost")));
        // A key's last record may not.
        let lost = without(newest);
        assert!(check(&h, &lost, &none, Some(Compacted::at(0)))
            .iter()
            .any(|v| v.contains("lost")));
        // A consumer that read past the removed offset did not skip; one that missed a
        // record still there did.
        let mut read = History::default();
        read.consumed.insert(
            0,
            (0..8)
                .filter(|&s| s != older)
                .map(|s| (i64::from(s), 7, s))
                .collect(),
        );
        assert!(check(&read, &compacted, &none, Some(Compacted::at(0))).is_empty());
        assert!(check(&read, &without(99), &none, Some(Compacted::at(0)))
            .iter()
            .any(|v| v.contains("skip")));
        // A batch emptied and dropped leaves a gap the next batch may start after.
        let dropped = BTreeMap::from([(0, vec![batch(0, 3, 0, 7, 0), batch(6, 7, 0, 7, 6)])]);
        let two = History {
            acks: vec![ack(0, 4, 0, 7, 0), ack(6, 2, 0, 7, 6)],
            ..History::default()
        };
        assert!(check(&two, &dropped, &none, Some(Compacted::at(0)))
            .iter()
            .all(|v| !v.contains("dense")));
        assert!(check(&two, &dropped, &none, None)
            .iter()
            .any(|v| v.contains("dense")));
    }

    #[test]
    fn a_tombstone_may_go_only_after_its_delete_horizon_with_what_it_deleted() {
        // A tombstone that is its key's last record, and the records of its key before it.
        let seqs: Vec<i32> = (0..40).collect();
        let last_of_key = |s: i32| !seqs.iter().any(|&l| l > s && key_of(7, l) == key_of(7, s));
        let tomb = *seqs
            .iter()
            .find(|&&s| is_tombstone(7, s) && last_of_key(s) && s > 0)
            .expect("some key ends with a tombstone");
        let gone: Vec<i64> = seqs
            .iter()
            .filter(|&&s| key_of(7, s) == key_of(7, tomb))
            .map(|&s| i64::from(s))
            .collect();
        let sent = 1_000;
        let h = History {
            acks: vec![Ack {
                sent_true_ms: sent,
                ..ack(0, 40, 0, 7, 0)
            }],
            ..History::default()
        };
        let mut b = batch(0, 39, 0, 7, 0);
        b.offsets.retain(|o| !gone.contains(o));
        let log = BTreeMap::from([(0, vec![b])]);
        let none = BTreeMap::new();
        let after = Compacted::at(sent + DELETE_RETENTION_MS);
        assert!(
            check(&h, &log, &none, Some(after)).is_empty(),
            "{:?}",
            check(&h, &log, &none, Some(after))
        );
        // Before its horizon: the tombstone (and so what it deleted) was removed too early.
        let before = Compacted::at(sent + DELETE_RETENTION_MS - 1);
        assert!(check(&h, &log, &none, Some(before))
            .iter()
            .any(|v| v.contains("lost")));
        // A clock once stepped back stamps an earlier horizon: it may go that much sooner.
        let stepped = Compacted {
            wall_peak_ms: sent + DELETE_RETENTION_MS - 500,
            skew_min_ms: -500,
        };
        assert!(check(&h, &log, &none, Some(stepped)).is_empty());
        // Sent by a produce whose answer never came: its offset is unknown, it still counts.
        let unsettled = History {
            acks: vec![ack(0, tomb, 0, 7, 0)],
            unsettled: vec![Unsettled {
                partition: 0,
                producer_id: 7,
                base_sequence: tomb,
                count: 1,
                sent_true_ms: sent,
            }],
            ..History::default()
        };
        let mut b = batch(0, i64::from(tomb) - 1, 0, 7, 0);
        b.offsets.retain(|o| !gone.contains(o));
        let log = BTreeMap::from([(0, vec![b])]);
        assert!(check(&unsettled, &log, &none, Some(after)).is_empty());
        assert!(check(&unsettled, &log, &none, Some(before))
            .iter()
            .any(|v| v.contains("lost")));
    }
}
