//! The compactor: rewrites a partition's small catalog entries (its chunks of sealed
//! multi-partition objects, and small segments) into per-partition segments
//! ([`crate::segment`]), swaps them in the catalog atomically, and deletes superseded
//! objects once nothing can read them (design brief → Write path, step 6).
//!
//! Lifecycle: one task per broker ([`run_compactor`]), for the partitions this broker has
//! open (it leads them). Every `interval` it runs one round: for each partition, read its
//! catalog entries below what the sealer has finished committing (`sealed_end`: an entry
//! whose commit may still be retried is never touched), plan runs
//! ([`crate::compact_state::plan`]), and for each run: fetch the old ranges (CRC-checked,
//! bypassing the read-cache insert so a compaction scan does not evict what readers use),
//! build the segment in memory, PUT it create-only, then swap it in with
//! [`oxbow_metadata::MetadataStore::replace_catalog_entries_many`], fenced by the
//! partition's current leader epoch — [`SWAPS_PER_COMMIT`] partitions' swaps in one
//! request, each settled on its own, so a round costs tens of metadata writes however many
//! partitions it rewrites. Then it collects garbage
//! ([`crate::compact_state::DeletionLedger`]). On shutdown it stops between runs and
//! deletes only what is already due: nothing waits.
//!
//! Files: this one (rounds, planning, segment writing); `compact/swap.rs` (the catalog
//! swaps), `compact/gc.rs` (deleting superseded objects), `compact/key.rs` (key compaction
//! of compacted topics).
//!
//! Objects: it writes segments under `segments/…` (naming in [`crate::segment`]) and deletes
//! sealed objects (`data/…`) and segments it superseded.
//!
//! Failure: an entry whose data fails a CRC is frozen (left alone for the process's life,
//! logged, counted); a fenced, conflicting or failed replace leaves the catalog as it was,
//! and its new segment becomes a deletion candidate like any superseded object — deleted
//! only if the catalog does not reference it, so an unknown outcome (a timeout whose
//! transaction landed) is safe. A crash between the replace and the deletion leaves the
//! superseded objects behind (garbage, never lost data); the ledger lives in memory.
//!
//! Bounds per round: `round_bytes_max` of data read, `round_segments_max` segments written,
//! [`CATALOG_SCAN_MAX`] entries read per partition, and for deletion [`GC_INDEX_READS_MAX`]
//! object-index reads and [`GC_CATALOG_READS_MAX`] catalog reads. Memory peaks at one
//! segment being built (at most `segment_bytes`, or one entry larger than that) plus one
//! fetched range.

mod gc;
mod key;
mod rewrite;
mod swap;

use crate::batch;
use crate::compact_state::{plan, DeletionLedger, ObjectRef, PlanEntry, PlanKind, PlanLimits};
use crate::error::{Error, Result};
use crate::key_compact::{self, CleanableEntry, KeyCompaction, OffsetMap, RunParams};
use crate::log::{LogManager, Partition};
use crate::object;
use crate::producer_summary::{self, RunProducers};
use crate::retention::{Retention, RetentionPolicies};
use crate::segment::{self, SegmentBuilder, SegmentIndex, INDEX_INTERVAL_BYTES};
use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use oxbow_metadata::{
    CatalogEntry, CatalogReplace, EntryLayout, EpochFence, ErrorKind as MetadataErrorKind,
    LeaderEpoch, Offset, TopicId, TopicPartition,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Catalog entries read per partition per round (bounds memory and metadata reads; the
/// rest waits for the next round).
pub const CATALOG_SCAN_MAX: usize = 10_000;
/// Catalog entries per lookup while scanning.
const CATALOG_PAGE: usize = 1_000;
/// Most old entries one segment replaces (one catalog transaction reads them all).
const ENTRIES_PER_RUN_MAX: usize = 4_096;
/// References (partition, offset) of deletion candidates settled per round.
pub const GC_REFS_MAX: usize = 100_000;
/// Catalog reads per round to settle them (one per partition, up to 1000 entries each).
pub const GC_CATALOG_READS_MAX: usize = 2_000;
const GC_CATALOG_PAGE: usize = 1_000;
/// Sealed objects whose index is read per round (three small ranged GETs each): above the
/// seals of one default round (4 per second for 60 s) so the backlog does not grow.
pub const GC_INDEX_READS_MAX: usize = 1_000;
/// Most objects awaiting deletion; past it, superseded objects are left behind (and logged).
const LEDGER_CAPACITY: usize = 100_000;
/// Most entries remembered as failing their checks.
const FROZEN_MAX: usize = 10_000;

/// Settings of the compactor (typed; the CLI maps flags onto them).
#[derive(Clone, Debug)]
pub struct CompactSettings {
    /// Largest segment written. Larger means fewer catalog entries and objects and longer
    /// sequential reads, at the cost of more memory while one is built (the compactor holds
    /// one segment at a time) and more bytes re-written when small segments merge.
    pub segment_bytes: u64,
    /// How often a round runs; zero disables compaction. Shorter frees sealed objects (and
    /// their duplicate storage) sooner and keeps the catalog small, at the cost of more PUTs
    /// (about one per partition with new data per round) and more re-writing of small
    /// segments.
    pub interval: Duration,
    /// How long a superseded object stays after nothing references it, so readers that
    /// looked the old catalog entries up just before the swap can finish. Longer costs
    /// storage for that long; shorter makes slow readers re-look-up the catalog.
    pub delete_delay: Duration,
    /// Most data read per round (bounds a round's time and object-store traffic).
    pub round_bytes_max: u64,
    /// Most segments written per round.
    pub round_segments_max: usize,
    /// Longest a round compacts before it stops (the next one resumes there): retention
    /// and deletions run every round, so a round held up by a backlog must not hold them
    /// up too (found by the retention soak: a 3-minute round at 10 MB/s).
    pub round_time_max: Duration,
    /// Bytes per chunk of a segment (one offset-index row); see
    /// [`segment::INDEX_INTERVAL_BYTES`].
    pub index_interval_bytes: u64,
    /// Memory of key compaction's offset map (`--compaction-key-map-bytes`; 24 bytes a key,
    /// Kafka's `log.cleaner.dedupe.buffer.size` accounting, plus the hash table's overhead).
    /// A partition whose dirty part has more keys than fit is cleaned in several rounds, up
    /// to what the map covers each time; more memory cleans more per round.
    pub key_map_bytes: u64,
}

impl CompactSettings {
    /// Settings with the given segment size, interval and delete delay; defaults otherwise.
    pub fn new(segment_bytes: u64, interval: Duration, delete_delay: Duration) -> Self {
        CompactSettings {
            segment_bytes: segment_bytes.max(1),
            interval,
            delete_delay,
            round_bytes_max: (2u64 << 30).max(segment_bytes),
            round_segments_max: 256,
            round_time_max: interval.max(Duration::from_secs(10)),
            index_interval_bytes: INDEX_INTERVAL_BYTES,
            key_map_bytes: key_compact::DEFAULT_KEY_MAP_BYTES,
        }
    }
}

impl Default for CompactSettings {
    fn default() -> Self {
        CompactSettings::new(512 << 20, Duration::from_secs(60), Duration::from_secs(300))
    }
}

/// Counters of the compactor.
#[derive(Debug, Default)]
pub struct CompactMetrics {
    pub rounds: AtomicU64,
    pub segments_written: AtomicU64,
    pub segment_bytes_written: AtomicU64,
    pub entries_replaced: AtomicU64,
    pub objects_deleted: AtomicU64,
    /// Catalog entries that left by retention.
    pub entries_expired: AtomicU64,
    pub replace_conflicts: AtomicU64,
    pub replace_fenced: AtomicU64,
    pub checksum_failures: AtomicU64,
    pub failures: AtomicU64,
    /// Key compaction: partitions cleaned, and records it removed (older values per key,
    /// expired tombstones).
    pub key_cleanings: AtomicU64,
    pub key_records_removed: AtomicU64,
}

/// What one round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoundStats {
    pub segments_written: u64,
    pub entries_replaced: u64,
    pub bytes_read: u64,
    pub objects_deleted: u64,
}

/// The compactor of one broker (driven by [`run_compactor`], or by tests a round at a time).
pub struct Compactor {
    log: Arc<LogManager>,
    settings: CompactSettings,
    ledger: DeletionLedger,
    /// Entries whose data failed a check: never rewritten by this process.
    frozen: BTreeSet<(TopicPartition, Offset)>,
    /// Per partition, where the entries that may still change begin (everything before is
    /// segments too large to merge). Only saves catalog reads; forgotten on restart.
    cursors: HashMap<TopicPartition, Offset>,
    /// Partitions whose replace was fenced, with the epoch this broker held: skipped until
    /// the broker reopens them at another epoch (the sealer deals with a deposed leader).
    fenced: HashMap<TopicPartition, LeaderEpoch>,
    /// Segments written whose catalog swaps wait to be committed together
    /// ([`Compactor::commit_swaps`]): at most [`SWAPS_PER_COMMIT`].
    pending: Vec<Swap>,
    /// Each topic's retention; without it (or for a topic it does not know) nothing expires.
    retention: Option<Arc<dyn RetentionPolicies>>,
    /// Whether rounds rewrite entries into segments (off: retention and deletion only).
    compacting: bool,
    /// When the current round began (its time budget, `round_time_max`).
    round_started: Option<tokio::time::Instant>,
    /// Where the next round starts compacting: the partition the last one stopped at.
    resume_at: Option<TopicPartition>,
    /// Key-compacted partitions: where their dirty part starts (everything before was
    /// cleaned by this process). Forgotten on restart (the whole log is then dirty, and
    /// re-cleaning clean data changes nothing) and when a swap of the partition fails.
    key_cleaned: HashMap<TopicPartition, Offset>,
    pub metrics: Arc<CompactMetrics>,
}

/// What a round applies to one topic's partitions, asked of the policies once a round.
#[derive(Clone, Copy, Debug, Default)]
struct TopicPolicy {
    retention: Option<Retention>,
    key_compaction: Option<KeyCompaction>,
}

/// A segment written (PUT) whose catalog swap is not committed yet.
struct Swap {
    tp: TopicPartition,
    /// The epoch this broker leads the partition at: the swap's fence.
    leader_epoch: LeaderEpoch,
    old: Vec<CatalogEntry>,
    /// The segment's catalog entry.
    entry: CatalogEntry,
    size: u64,
    /// The segment's index, cached once the swap lands (the first reader fetches it).
    index: Bytes,
    /// When its PUT completed: a swap older than [`SWAP_AGE_MAX`] is not committed.
    written_at: tokio::time::Instant,
    /// Whether it holds key-compacted data (the memory tail's originals then go).
    keyed: bool,
}

/// Oldest segment a swap commits: the orphan sweep ([`crate::orphans`]) deletes objects
/// no catalog key names once older than its grace period (an hour by default), so a swap
/// must never make an object that old referenced. A round commits its swaps within
/// minutes; one that waited longer gives its segment up (deleted like a failed swap's).
pub const SWAP_AGE_MAX: Duration = Duration::from_secs(600);

/// Swaps committed together: one metadata request for up to this many partitions' swaps
/// (the store splits it into transactions within its limits), so a round rewriting
/// thousands of partitions costs tens of metadata writes, not thousands.
pub const SWAPS_PER_COMMIT: usize = 21;

/// Entries looked at from an object's offset when asking whether the object is still
/// served (an object entry is outranked at its front by at most a few others).
const REFERENCE_LOOKAHEAD: usize = 8;

/// How often retention is applied when compaction is disabled (Kafka checks every
/// `log.retention.check.interval.ms`, 5 minutes by default).
const RETENTION_ONLY_INTERVAL: Duration = Duration::from_secs(60);

/// Runs the compactor until `shutdown`: every round applies each topic's retention (from
/// `retention`), then compacts; a zero interval disables compaction (retention then runs
/// every [`RETENTION_ONLY_INTERVAL`]).
pub async fn run_compactor(
    log: Arc<LogManager>,
    settings: CompactSettings,
    retention: Option<Arc<dyn RetentionPolicies>>,
    shutdown: CancellationToken,
) {
    let compacting = !settings.interval.is_zero();
    let interval = if compacting {
        settings.interval
    } else if retention.is_some() {
        tracing::info!("compaction disabled (--compaction-interval 0); retention is still applied every {RETENTION_ONLY_INTERVAL:?}");
        RETENTION_ONLY_INTERVAL
    } else {
        tracing::info!("compaction disabled (--compaction-interval 0)");
        return;
    };
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate; the first round waits one interval, after start-up.
    tick.tick().await;
    let mut compactor = Compactor::new(log, settings);
    compactor.compacting = compacting;
    if let Some(r) = retention {
        compactor = compactor.with_retention(r);
    }
    loop {
        tokio::select! {
            // Polled in order (shutdown first): tokio's random branch order would make the
            // simulation's runs differ for one seed.
            biased;
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        match compactor.run_once(&shutdown).await {
            Ok(stats) if stats != RoundStats::default() => {
                tracing::debug!(?stats, "compaction round");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "compaction round failed; retried next round"),
        }
    }
    // Drain: delete what is already due; nothing waits for a grace period on shutdown.
    let now = tokio::time::Instant::now().into_std();
    if let Err(e) = compactor
        .collect_garbage(now, &CancellationToken::new())
        .await
    {
        tracing::debug!(error = %e, "final garbage collection failed; objects left behind");
    }
}

impl Compactor {
    pub fn new(log: Arc<LogManager>, settings: CompactSettings) -> Self {
        let metrics = log.compact_metrics.clone();
        Compactor {
            log,
            settings,
            ledger: DeletionLedger::new(LEDGER_CAPACITY),
            frozen: BTreeSet::new(),
            cursors: HashMap::new(),
            fenced: HashMap::new(),
            pending: Vec::new(),
            retention: None,
            compacting: true,
            round_started: None,
            resume_at: None,
            key_cleaned: HashMap::new(),
            metrics,
        }
    }

    /// The same compactor applying each topic's retention from `policies` every round.
    pub fn with_retention(mut self, policies: Arc<dyn RetentionPolicies>) -> Self {
        self.retention = Some(policies);
        self
    }

    /// A topic's retention and key compaction, from the policies (none without them).
    fn policy_of(&self, topic_id: TopicId) -> TopicPolicy {
        match &self.retention {
            Some(r) => TopicPolicy {
                retention: r.retention(topic_id),
                key_compaction: r.key_compaction(topic_id),
            },
            None => TopicPolicy::default(),
        }
    }

    /// Applies `retention` (the topic's, if known) to `p`; what left becomes deletion
    /// candidates.
    async fn apply_retention(&mut self, p: &Partition, retention: Option<Retention>, now_ms: i64) {
        let tp = p.topic_partition;
        let Some(retention) = retention else {
            return;
        };
        match self.log.apply_retention(p, retention, now_ms).await {
            Ok(removed) if !removed.is_empty() => {
                self.metrics
                    .entries_expired
                    .fetch_add(removed.len() as u64, Ordering::Relaxed);
                self.note_old_objects(tp, &removed);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(partition = %tp, error = %e, "applying retention failed; retried next round")
            }
        }
    }

    /// Objects awaiting deletion.
    pub fn pending_deletions(&self) -> usize {
        self.ledger.len()
    }

    /// One round: compact every open partition (within the round's bounds, stopping early
    /// once `stop` is cancelled), then collect garbage.
    pub async fn run_once(&mut self, stop: &CancellationToken) -> Result<RoundStats> {
        self.run_once_at(tokio::time::Instant::now().into_std(), stop)
            .await
    }

    /// [`Self::run_once`] with the time given (tests step it instead of waiting).
    pub async fn run_once_at(
        &mut self,
        now: Instant,
        stop: &CancellationToken,
    ) -> Result<RoundStats> {
        self.metrics.rounds.fetch_add(1, Ordering::Relaxed);
        let mut stats = RoundStats::default();
        let mut partitions = self.log.open_partitions();
        partitions.sort_by_key(|p| p.topic_partition);
        let open: BTreeSet<TopicPartition> = partitions.iter().map(|p| p.topic_partition).collect();
        self.cursors.retain(|tp, _| open.contains(tp));
        self.fenced.retain(|tp, _| open.contains(tp));
        self.key_cleaned.retain(|tp, _| open.contains(tp));
        // Each topic's policies, asked once per round (not once per partition and pass).
        let mut policies: HashMap<TopicId, TopicPolicy> = HashMap::new();
        for p in &partitions {
            let id = p.topic_partition.topic_id;
            if let std::collections::hash_map::Entry::Vacant(v) = policies.entry(id) {
                v.insert(self.policy_of(id));
            }
        }
        let policy = |tp: TopicPartition| policies.get(&tp.topic_id).copied().unwrap_or_default();
        let now_ms = self.log.clock.unix_ms();
        for p in &partitions {
            if stop.is_cancelled() {
                break;
            }
            self.apply_retention(p, policy(p.topic_partition).retention, now_ms)
                .await;
        }
        let compacting = self.compacting;
        self.round_started = Some(tokio::time::Instant::now());
        // From where the last round stopped (a round that ran out of time or bytes), so the
        // partitions at the end of the order are not always the ones left for later.
        let first = self
            .resume_at
            .and_then(|tp| partitions.iter().position(|p| p.topic_partition >= tp))
            .unwrap_or(0);
        let order: Vec<&Arc<Partition>> = partitions[first..]
            .iter()
            .chain(partitions[..first].iter())
            .collect();
        self.resume_at = None;
        for p in order.into_iter().filter(|_| compacting) {
            if stop.is_cancelled() || !self.has_budget(&stats) {
                self.resume_at = Some(p.topic_partition);
                break;
            }
            if let Err(e) = self
                .compact_partition(p, policy(p.topic_partition), &mut stats, stop)
                .await
            {
                self.metrics.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(partition = %p.topic_partition, error = %e, "compaction of a partition failed; retried next round");
            }
        }
        // Also when stopping: the segments are written, and one request commits them.
        self.commit_swaps(&mut stats).await;
        stats.objects_deleted = self.collect_garbage(now, stop).await?;
        Ok(stats)
    }

    fn has_budget(&self, stats: &RoundStats) -> bool {
        self.round_started
            .is_none_or(|t| t.elapsed() < self.settings.round_time_max)
            && stats.bytes_read < self.settings.round_bytes_max
            && (stats.segments_written as usize) + self.pending.len()
                < self.settings.round_segments_max
    }

    /// The partition's entries from its cursor up to `sealed_end`.
    async fn scan(&self, tp: TopicPartition, sealed_end: Offset) -> Result<Vec<CatalogEntry>> {
        let from = self.cursors.get(&tp).copied().unwrap_or(0);
        self.scan_from(tp, from, sealed_end).await
    }

    /// The partition's entries from `from` up to `sealed_end`.
    async fn scan_from(
        &self,
        tp: TopicPartition,
        from: Offset,
        sealed_end: Offset,
    ) -> Result<Vec<CatalogEntry>> {
        let mut next = from;
        let mut out: Vec<CatalogEntry> = Vec::new();
        while next < sealed_end && out.len() < CATALOG_SCAN_MAX {
            let page = self
                .log
                .metadata
                .catalog_entries(tp.topic_id, tp.partition, next, CATALOG_PAGE)
                .await?;
            let Some(last) = page.last() else { break };
            next = last.next_offset();
            out.extend(
                page.into_iter()
                    .filter(|e| e.last_offset < sealed_end)
                    .take(CATALOG_SCAN_MAX - out.len()),
            );
        }
        Ok(out)
    }

    async fn compact_partition(
        &mut self,
        p: &Partition,
        policy: TopicPolicy,
        stats: &mut RoundStats,
        stop: &CancellationToken,
    ) -> Result<()> {
        let tp = p.topic_partition;
        let (leader_epoch, sealed_end) = {
            let s = p.lock()?;
            (s.leader_epoch, s.sealed_end)
        };
        if self.fenced.get(&tp) == Some(&leader_epoch) {
            return Ok(());
        }
        if let Some(kc) = policy.key_compaction {
            if self
                .key_compact_partition(tp, leader_epoch, sealed_end, kc, stats, stop)
                .await?
            {
                return Ok(());
            }
            // Not due: its new entries are still merged into segments, as stored.
        }
        let entries = self.scan(tp, sealed_end).await?;
        let segment_bytes = self.settings.segment_bytes;
        let plan_entries: Vec<PlanEntry> = entries
            .iter()
            .map(|e| PlanEntry {
                base_offset: e.base_offset,
                last_offset: e.last_offset,
                bytes: segment::data_bytes(e),
                leader_epoch: e.leader_epoch,
                max_timestamp_ms: e.max_timestamp_ms,
                kind: if self.frozen.contains(&(tp, e.base_offset)) {
                    PlanKind::Frozen
                } else {
                    match e.layout {
                        EntryLayout::Batches => PlanKind::Shared,
                        EntryLayout::SegmentIndex => PlanKind::Segment,
                    }
                },
            })
            .collect();
        // Segments too large to merge with anything never change: the next scan starts
        // after them.
        let settled = plan_entries
            .iter()
            .take_while(|e| {
                e.kind == PlanKind::Segment && e.bytes.saturating_mul(2) > segment_bytes
            })
            .count();
        let cursor = match entries.get(settled) {
            Some(e) => Some(e.base_offset),
            None => entries.last().map(CatalogEntry::next_offset),
        };
        if let (true, Some(cursor)) = (settled > 0, cursor) {
            self.cursors.insert(tp, cursor);
        }
        let runs = plan(
            &plan_entries,
            &PlanLimits {
                segment_bytes,
                entries_per_run_max: ENTRIES_PER_RUN_MAX,
                // Time retention removes whole segments once their newest record is old:
                // a segment spans at most a quarter of it, so data outlives retention.ms
                // by at most about that much (per merge step).
                span_ms_max: policy.retention.filter(|r| r.ms >= 0).map(|r| r.ms / 4),
            },
        );
        for run in runs {
            if stop.is_cancelled() || !self.has_budget(stats) {
                break;
            }
            let old = &entries[run];
            match self.write_segment(tp, leader_epoch, old, stats).await {
                Ok(Some(swap)) => self.queue_swap(swap, stats).await,
                Ok(None) => {}
                Err(e) => {
                    self.metrics.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(partition = %tp, base_offset = old[0].base_offset, error = %e, "compacting a run failed; retried next round");
                }
            }
        }
        Ok(())
    }
}
