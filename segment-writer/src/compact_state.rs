//! The compactor's pure state: which runs of a partition's catalog entries to rewrite into
//! segments ([`plan`]), and which superseded objects may be deleted, and when
//! ([`DeletionLedger`]). No I/O and no clock: [`crate::compact`] drives both and passes
//! `now`.
//!
//! # Planning
//! A partition's catalog is a sequence of entries in offset order. Each round:
//! - every run of consecutive entries in sealed (multi-partition) objects is rewritten, cut
//!   at `segment_bytes`: such an entry pins its whole object — every other partition's data
//!   in it included — in the store until it is rewritten, and costs a catalog entry per
//!   seal;
//! - consecutive segments (with such a run, if one follows them) are merged while the
//!   result fits in `segment_bytes` **and no segment in it is more than half of the
//!   result** (a run of shared entries is written anyway, so its size does not count).
//!   Each rewrite of a byte at least doubles the segment holding it, so a byte is written
//!   at most `1 + log2(segment_bytes / first segment size)` times — a partition that trickles
//!   (a few KiB per round) ends in few segments without the quadratic cost of re-writing a
//!   growing "open" segment every round, and a busy one (a full segment's worth per round)
//!   is written once;
//! - a run never mixes leader epochs (the catalog keeps the epoch history) and never holds
//!   more than `entries_per_run_max` entries (bounds the catalog transaction and memory).
//!
//! Entries whose data failed a check are [`PlanKind::Frozen`]: left alone, and nothing is
//! merged across them.
//!
//! # Deleting superseded objects
//! After a replace commits, the objects of the old entries are candidates. A candidate is
//! deleted only when no catalog entry references it — a sealed object is referenced by
//! every partition its index lists, so each is looked up — and then only after
//! `delete_delay` more, so a reader that looked the old entries up just before the replace
//! still finds the object (and one that is slower still re-looks-up the catalog on
//! NotFound, see `read.rs`). References only ever disappear (compaction moves them to new
//! objects, retention and topic deletion drop them), so once unreferenced a candidate stays
//! so — except the new segment of a replace whose outcome is unknown (a timeout), which may
//! yet land: those are looked up again right before deletion.

use oxbow_metadata::{LeaderEpoch, Offset, TopicPartition};
use std::collections::BTreeMap;
use std::ops::Range;
use std::time::{Duration, Instant};

/// What kind of entry the planner sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanKind {
    /// A partition's chunk of a sealed (multi-partition) object: always rewritten.
    Shared,
    /// A per-partition segment: rewritten only to merge with comparable neighbours.
    Segment,
    /// Never rewritten (its data failed a check); nothing merges across it.
    Frozen,
}

/// What the planner knows of one catalog entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanEntry {
    pub base_offset: Offset,
    pub last_offset: Offset,
    /// Bytes of record batches the entry covers.
    pub bytes: u64,
    pub leader_epoch: LeaderEpoch,
    pub kind: PlanKind,
    /// Largest record timestamp in the entry.
    pub max_timestamp_ms: i64,
}

/// Bounds of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanLimits {
    /// Largest segment written (a single entry larger than this is rewritten alone).
    pub segment_bytes: u64,
    /// Most entries replaced by one segment.
    pub entries_per_run_max: usize,
    /// Most record time one run may span, by its entries' largest timestamps (`None`: any):
    /// with time retention, a segment expires only once its newest record is old, so one
    /// that kept absorbing newer data would keep its oldest past `retention.ms` (found by
    /// the retention soak: segments spanning minutes under a 60 s retention).
    pub span_ms_max: Option<i64>,
}

/// The span of record time a run covers, as (lowest, highest) largest timestamp.
#[derive(Clone, Copy, Debug)]
struct Span(i64, i64);

impl Span {
    fn of(ts: i64) -> Span {
        Span(ts, ts)
    }

    fn with(self, other: Span) -> Span {
        Span(self.0.min(other.0), self.1.max(other.1))
    }

    fn fits(self, max: Option<i64>) -> bool {
        max.is_none_or(|max| self.1.saturating_sub(self.0) <= max)
    }
}

/// A merge candidate: one segment, or a run of shared entries, or a barrier.
#[derive(Clone, Debug)]
struct Member {
    entries: Range<usize>,
    bytes: u64,
    leader_epoch: LeaderEpoch,
    kind: PlanKind,
    span: Span,
}

/// The runs (ranges of indices into `entries`, which must be one partition's contiguous
/// entries in offset order) to rewrite, each into one segment. See the module docs.
pub fn plan(entries: &[PlanEntry], limits: &PlanLimits) -> Vec<Range<usize>> {
    let per_run = limits.entries_per_run_max.max(1);
    // Shared entries first group into runs that fit a segment.
    let mut members: Vec<Member> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if e.kind == PlanKind::Shared {
            if let Some(m) = members.last_mut() {
                let span = m.span.with(Span::of(e.max_timestamp_ms));
                if m.kind == PlanKind::Shared
                    && m.leader_epoch == e.leader_epoch
                    && m.bytes + e.bytes <= limits.segment_bytes
                    && m.entries.len() < per_run
                    && span.fits(limits.span_ms_max)
                {
                    m.entries.end = i + 1;
                    m.bytes += e.bytes;
                    m.span = span;
                    continue;
                }
            }
        }
        members.push(Member {
            entries: i..i + 1,
            bytes: e.bytes,
            leader_epoch: e.leader_epoch,
            kind: e.kind,
            span: Span::of(e.max_timestamp_ms),
        });
    }
    let mut runs = Vec::new();
    let mut i = 0;
    while i < members.len() {
        let first = &members[i];
        if first.kind == PlanKind::Frozen {
            i += 1;
            continue;
        }
        // The longest run of members from `i` that fits and keeps the size ratio. Only
        // segments count for the ratio: a shared run is written anyway, whatever its size.
        let (mut total, mut largest, mut count) = (0u64, 0u64, 0usize);
        let mut span = first.span;
        let mut best = None;
        for (k, m) in members.iter().enumerate().skip(i) {
            if m.kind == PlanKind::Frozen || m.leader_epoch != first.leader_epoch {
                break;
            }
            span = span.with(m.span);
            if k > i
                && (total + m.bytes > limits.segment_bytes
                    || count + m.entries.len() > per_run
                    || !span.fits(limits.span_ms_max))
            {
                break;
            }
            total += m.bytes;
            if m.kind == PlanKind::Segment {
                largest = largest.max(m.bytes);
            }
            count += m.entries.len();
            if k > i && largest.saturating_mul(2) <= total {
                best = Some(k);
            }
        }
        match best {
            Some(k) => {
                runs.push(first.entries.start..members[k].entries.end);
                i = k + 1;
            }
            None => {
                if first.kind == PlanKind::Shared {
                    runs.push(first.entries.clone());
                }
                i += 1;
            }
        }
    }
    runs
}

/// A place in the catalog that may reference an object: the entry of `topic_partition`
/// holding `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectRef {
    pub topic_partition: TopicPartition,
    pub offset: Offset,
}

/// One object that may be deletable.
#[derive(Clone, Debug)]
struct Candidate {
    /// Every place that referenced it; `None` until learned (from a sealed object's index).
    refs: Option<Vec<ObjectRef>>,
    /// Places not yet seen to have stopped referencing it.
    pending: Vec<ObjectRef>,
    /// When the last reference was seen gone.
    unreferenced_since: Option<Instant>,
    /// Look every reference up again right before deleting (it might yet gain one).
    recheck: bool,
}

/// An object whose grace period has passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Due {
    pub key: String,
    /// References to look up once more before deleting (empty: delete).
    pub recheck: Vec<ObjectRef>,
}

/// Objects superseded by compaction, on their way to deletion (see the module docs).
/// Bounded: past `capacity` candidates, new ones are refused (and left in the store).
#[derive(Debug)]
pub struct DeletionLedger {
    candidates: BTreeMap<String, Candidate>,
    capacity: usize,
}

impl DeletionLedger {
    pub fn new(capacity: usize) -> Self {
        DeletionLedger {
            candidates: BTreeMap::new(),
            capacity,
        }
    }

    pub fn len(&self) -> usize {
        self.candidates.len()
    }

    pub fn is_empty(&self) -> bool {
        self.candidates.is_empty()
    }

    /// Notes an object that may no longer be referenced. `refs`: the places that
    /// referenced it, if known (a segment: its one entry); `None` for a sealed object, whose
    /// index lists them. `recheck`: it may gain a reference yet (the new segment of a
    /// replace whose outcome is unknown). Returns false if the ledger is full.
    pub fn superseded(&mut self, key: String, refs: Option<Vec<ObjectRef>>, recheck: bool) -> bool {
        if let Some(c) = self.candidates.get_mut(&key) {
            c.recheck |= recheck;
            return true;
        }
        if self.candidates.len() >= self.capacity {
            return false;
        }
        let pending = refs.clone().unwrap_or_default();
        self.candidates.insert(
            key,
            Candidate {
                refs,
                pending,
                unreferenced_since: None,
                recheck,
            },
        );
        true
    }

    /// Up to `max` candidates whose references are still unknown.
    pub fn needing_refs(&self, max: usize) -> Vec<String> {
        self.candidates
            .iter()
            .filter(|(_, c)| c.refs.is_none())
            .take(max)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Records the places that referenced `key` (from its index).
    pub fn set_refs(&mut self, key: &str, refs: Vec<ObjectRef>) {
        if let Some(c) = self.candidates.get_mut(key) {
            c.pending = refs.clone();
            c.refs = Some(refs);
        }
    }

    /// Up to `max` references to look up: places that may still reference a candidate.
    pub fn lookups(&self, max: usize) -> Vec<(String, ObjectRef)> {
        self.candidates
            .iter()
            .filter(|(_, c)| c.refs.is_some())
            .flat_map(|(k, c)| c.pending.iter().map(move |r| (k.clone(), *r)))
            .take(max)
            .collect()
    }

    /// `r` no longer references `key`. Once no place does, its grace period starts `now`.
    pub fn unreferenced(&mut self, key: &str, r: ObjectRef, now: Instant) {
        if let Some(c) = self.candidates.get_mut(key) {
            c.pending.retain(|p| *p != r);
            if c.pending.is_empty() && c.unreferenced_since.is_none() {
                c.unreferenced_since = Some(now);
            }
        }
    }

    /// Candidates unreferenced for at least `delay` by `now`.
    pub fn due(&self, now: Instant, delay: Duration) -> Vec<Due> {
        self.candidates
            .iter()
            .filter(|(_, c)| {
                c.refs.is_some()
                    && c.unreferenced_since
                        .is_some_and(|since| now.saturating_duration_since(since) >= delay)
            })
            .map(|(k, c)| Due {
                key: k.clone(),
                recheck: if c.recheck {
                    c.refs.clone().unwrap_or_default()
                } else {
                    Vec::new()
                },
            })
            .collect()
    }

    /// Stops tracking `key`: deleted, gone already, or referenced again after all.
    pub fn forget(&mut self, key: &str) {
        self.candidates.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxbow_metadata::TopicId;

    const MIB: u64 = 1 << 20;

    fn limits(segment_bytes: u64) -> PlanLimits {
        PlanLimits {
            segment_bytes,
            entries_per_run_max: 1000,
            span_ms_max: None,
        }
    }

    /// Entries of the given kinds and sizes, contiguous from offset 0, epoch 0.
    fn entries(spec: &[(PlanKind, u64)]) -> Vec<PlanEntry> {
        let mut next = 0;
        spec.iter()
            .map(|(kind, bytes)| {
                let e = PlanEntry {
                    base_offset: next,
                    last_offset: next + 9,
                    bytes: *bytes,
                    leader_epoch: 0,
                    kind: *kind,
                    max_timestamp_ms: 0,
                };
                next += 10;
                e
            })
            .collect()
    }

    use PlanKind::{Frozen, Segment, Shared};

    #[test]
    fn shared_entries_always_compact_and_are_cut_at_segment_bytes() {
        let e = entries(&[(Shared, 40), (Shared, 40), (Shared, 40), (Shared, 10)]);
        assert_eq!(plan(&e, &limits(100)), vec![0..2, 2..4]);
        // One shared entry alone still goes (it pins its object); an oversized one alone.
        let e = entries(&[(Shared, 500)]);
        assert_eq!(plan(&e, &limits(100)), vec![0..1]);
        // Full segments are left alone; nothing to do without shared entries.
        let e = entries(&[(Segment, 90), (Segment, 95)]);
        assert!(plan(&e, &limits(100)).is_empty());
        assert!(plan(&[], &limits(100)).is_empty());
    }

    #[test]
    fn segments_merge_only_with_comparable_neighbours() {
        // A big segment does not swallow a small run: the run becomes its own segment.
        let e = entries(&[(Segment, 64), (Shared, 1), (Shared, 1)]);
        assert_eq!(plan(&e, &limits(512)), vec![1..3]);
        // Comparable sizes merge, small segments with the run after them.
        let e = entries(&[(Segment, 2), (Segment, 1), (Shared, 1)]);
        assert_eq!(plan(&e, &limits(512)), vec![0..3]);
        // A small segment joins a larger run (it is written anyway).
        let e = entries(&[(Segment, 2), (Shared, 5)]);
        assert_eq!(plan(&e, &limits(512)), vec![0..2]);
        let e = entries(&[(Segment, 4), (Segment, 4)]);
        assert_eq!(plan(&e, &limits(512)), vec![0..2]);
        // …unless the result would exceed a segment.
        assert!(plan(&e, &limits(7)).is_empty());
        // A short merge is found even when a longer one breaks the ratio.
        let e = entries(&[(Segment, 1), (Segment, 1), (Segment, 100)]);
        assert_eq!(plan(&e, &limits(512)), vec![0..2]);
    }

    #[test]
    fn runs_never_cross_epochs_or_frozen_entries() {
        let mut e = entries(&[(Shared, 1), (Shared, 1), (Shared, 1), (Shared, 1)]);
        e[2].leader_epoch = 1;
        e[3].leader_epoch = 1;
        assert_eq!(plan(&e, &limits(512)), vec![0..2, 2..4]);
        let e = entries(&[(Shared, 1), (Frozen, 1), (Shared, 1)]);
        assert_eq!(plan(&e, &limits(512)), vec![0..1, 2..3]);
        let e = entries(&[(Segment, 1), (Frozen, 1), (Segment, 1)]);
        assert!(plan(&e, &limits(512)).is_empty());
    }

    #[test]
    fn entries_per_run_are_bounded() {
        let e = entries(&[(Shared, 1); 10]);
        let l = PlanLimits {
            segment_bytes: 512,
            entries_per_run_max: 4,
            span_ms_max: None,
        };
        assert_eq!(plan(&e, &l), vec![0..4, 4..8, 8..10]);
    }

    /// Simulates many rounds of a partition: each round appends `per_round` bytes of shared
    /// entries, then applies the plan. Returns (bytes written by compaction, bytes
    /// ingested, entries left).
    fn simulate(
        rounds: usize,
        per_round: u64,
        seals_per_round: u64,
        segment_bytes: u64,
    ) -> (u64, u64, usize) {
        let mut log: Vec<PlanEntry> = Vec::new();
        let mut next = 0;
        let (mut written, mut ingested) = (0u64, 0u64);
        for _ in 0..rounds {
            for _ in 0..seals_per_round {
                let bytes = per_round / seals_per_round;
                log.push(PlanEntry {
                    base_offset: next,
                    last_offset: next,
                    bytes,
                    leader_epoch: 0,
                    kind: Shared,
                    max_timestamp_ms: 0,
                });
                next += 1;
                ingested += bytes;
            }
            let runs = plan(&log, &limits(segment_bytes));
            // Apply from the back so earlier ranges stay valid.
            for r in runs.iter().rev() {
                let bytes: u64 = log[r.clone()].iter().map(|e| e.bytes).sum();
                written += bytes;
                let merged = PlanEntry {
                    base_offset: log[r.start].base_offset,
                    last_offset: log[r.end - 1].last_offset,
                    bytes,
                    leader_epoch: 0,
                    kind: Segment,
                    max_timestamp_ms: 0,
                };
                log.splice(r.clone(), [merged]);
            }
            // Invariants: contiguous, nothing shared left, segments within the cap.
            let mut expect = 0;
            for e in &log {
                assert_eq!(e.base_offset, expect);
                expect = e.last_offset + 1;
                assert_eq!(e.kind, Segment);
                assert!(e.bytes <= segment_bytes);
            }
        }
        (written, ingested, log.len())
    }

    #[test]
    fn write_amplification_is_logarithmic_and_segments_stay_few() {
        // A trickle: 4 KiB per round for a day of 1-minute rounds.
        let (written, ingested, left) = simulate(1440, 4096, 4, 512 * MIB);
        let amplification = written as f64 / ingested as f64;
        assert!(amplification <= 1.0 + 12.0, "trickle: {amplification:.1}x");
        assert!(left <= 12, "trickle: {left} segments");
        // Busy: 64 MiB per round; segments fill up to 512 MiB.
        let (written, ingested, left) = simulate(200, 64 * MIB, 256, 512 * MIB);
        let amplification = written as f64 / ingested as f64;
        assert!(amplification <= 5.0, "busy: {amplification:.1}x");
        assert!(
            left as u64 <= ingested / (256 * MIB) + 4,
            "busy: {left} segments for {ingested} bytes"
        );
    }

    fn r(p: i32, offset: Offset) -> ObjectRef {
        ObjectRef {
            topic_partition: TopicPartition::new(TopicId(uuid::Uuid::from_u128(1)), p),
            offset,
        }
    }

    #[test]
    fn ledger_deletes_only_unreferenced_objects_after_the_delay() {
        let t0 = Instant::now();
        let delay = Duration::from_secs(300);
        let mut l = DeletionLedger::new(10);
        // A sealed object: references learned from its index.
        assert!(l.superseded("obj".into(), None, false));
        assert_eq!(l.needing_refs(10), vec!["obj".to_string()]);
        assert!(
            l.lookups(10).is_empty(),
            "nothing to look up before the index is read"
        );
        l.set_refs("obj", vec![r(0, 0), r(1, 5)]);
        assert_eq!(l.lookups(10).len(), 2);
        l.unreferenced("obj", r(0, 0), t0);
        assert!(
            l.due(t0 + delay * 2, delay).is_empty(),
            "partition 1 still references it"
        );
        l.unreferenced("obj", r(1, 5), t0 + delay);
        assert!(
            l.due(t0 + delay, delay).is_empty(),
            "grace starts when the last goes"
        );
        assert_eq!(
            l.due(t0 + delay * 2, delay),
            vec![Due {
                key: "obj".into(),
                recheck: vec![]
            }]
        );
        l.forget("obj");
        assert!(l.is_empty());
        // A segment whose replace may have landed: rechecked before deletion.
        assert!(l.superseded("seg".into(), Some(vec![r(0, 0)]), true));
        l.unreferenced("seg", r(0, 0), t0);
        assert_eq!(l.due(t0, Duration::ZERO)[0].recheck, vec![r(0, 0)]);
        // Bounded.
        let mut full = DeletionLedger::new(1);
        assert!(full.superseded("a".into(), None, false));
        assert!(full.superseded("a".into(), None, false), "already there");
        assert!(!full.superseded("b".into(), None, false));
        assert_eq!(full.len(), 1);
    }

    #[test]
    fn runs_never_span_more_record_time_than_allowed() {
        // Shared entries a second apart, and two segments: without a bound everything
        // merges; with 2.5 s, runs cut where the span would pass it.
        let e: Vec<PlanEntry> = (0..6)
            .map(|i| PlanEntry {
                base_offset: i * 10,
                last_offset: i * 10 + 9,
                bytes: 10,
                leader_epoch: 0,
                kind: Shared,
                max_timestamp_ms: 1_000 * i,
            })
            .collect();
        let mut l = limits(1 << 20);
        assert_eq!(plan(&e, &l), vec![0..6]);
        l.span_ms_max = Some(2_500);
        assert_eq!(plan(&e, &l), vec![0..3, 3..6]);
        // An old segment is not merged into newer data past the bound, even when the sizes
        // would let it.
        let mut segs = vec![
            PlanEntry {
                base_offset: 0,
                last_offset: 9,
                bytes: 10,
                leader_epoch: 0,
                kind: Segment,
                max_timestamp_ms: 0,
            },
            PlanEntry {
                base_offset: 10,
                last_offset: 19,
                bytes: 10,
                leader_epoch: 0,
                kind: Segment,
                max_timestamp_ms: 10_000,
            },
        ];
        assert!(plan(&segs, &l).is_empty());
        segs[1].max_timestamp_ms = 2_000;
        assert_eq!(plan(&segs, &l), vec![0..2]);
    }
}
