//! [`LogManager`]: the partitions this broker leads, their appends, reads and recovery.
//!
//! Lifecycle: [`LogManager::open`] opens the WAL and replays every entry not yet in the
//! catalog back into memory (those batches were acknowledged or may have been); the sealer
//! task ([`crate::seal`]) then uploads them like any other. Partitions are opened lazily on
//! first use, after checking with the metadata service that this broker leads them; before
//! a partition is served, its leader epoch's start offset is recorded in the partition's
//! stored epoch history (`begin_epoch`, ARCHITECTURE decision 19).
//!
//! Layout: this file holds the settings and components, the [`LogManager`] itself (opening
//! the WAL, replaying it, forgetting partitions and the WAL entries held for them); its
//! child modules, which see its private fields, hold one concern each:
//! - `partition_handle.rs`: [`Partition`], the shared handle of one open partition;
//! - `open.rs`: opening a partition (leadership check, tails owed, its epoch's start);
//! - `append.rs`: the produce path ([`LogManager::enqueue`], [`Acks`], [`PendingAppend`])
//!   and appending a recovered tail;
//! - `recovery.rs`: `LogRecovery`, the WAL tail recoveries owed before serving, and the
//!   loop that retries them ([`LogManager::run_recoveries`]).
//!
//! Reads ([`crate::read`]), sealing ([`crate::seal`]) and fencing ([`crate::leadership::fence`]) are
//! `impl LogManager` blocks of their own modules.

use crate::batch;
use crate::commit::CommitTracker;
use crate::error::{Error, Result};
use crate::internal_auth::InternalAuth;
use crate::leadership::recovery_state::RecoveryKey;
use crate::replicate::{ReplicationSettings, Replicator};
use crate::transport::{ReplicaTransport, TcpTransport};
use crate::wal::{Wal, WalEntry, WalSettings};
use crate::wal_disk::{FsDisk, WalDisk};
use object_store::ObjectStore;
use oxbow_cache::ReadCache;
use oxbow_metadata::clock::{Clock, OsRng, Rng, SystemClock};
use oxbow_metadata::{BrokerId, LeaseGuard, MetadataStore, TopicId, TopicMetadata, TopicPartition};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{watch, Notify};

mod append;
mod mirror;
mod open;
mod partition_handle;
mod recovery;
mod retention;

pub use append::{Acks, AppendPolicy, Appended, PendingAppend};
pub use mirror::Mirrored;
pub use partition_handle::Partition;
use recovery::LogRecovery;

/// Partition opens that may run at once (see `LogManager::open_permits`): each costs a
/// few metadata round trips, so a broker taking over thousands of partitions opens them in
/// parallel, yet never floods the metadata service.
const OPENS_AT_ONCE: usize = 128;

/// Kafka's `producer.id.expiration.ms` default (1 day).
pub const PRODUCER_ID_EXPIRATION_DEFAULT: Duration = Duration::from_secs(24 * 3600);

/// How often partitions forget expired producers (Kafka's
/// `producer.id.expiration.check.interval.ms`, 10 minutes).
pub const PRODUCER_EXPIRATION_CHECK: Duration = Duration::from_secs(600);

/// Settings of the log (typed; the CLI maps flags onto them).
#[derive(Clone, Debug)]
pub struct LogSettings {
    pub broker_id: BrokerId,
    pub wal: WalSettings,
    /// Seal and upload at least this often. Shorter means less data in the WAL and fresher
    /// objects for other readers, at the cost of more PUTs (each billed) and smaller objects.
    pub flush_interval: Duration,
    /// Seal early once this much unsealed data is held: bounds memory and object size.
    pub flush_bytes: u64,
    /// Recent (already sealed) data kept in memory per partition for tail reads; larger
    /// serves more lagging readers without a GET, at the cost of broker memory.
    pub partition_tail_bytes: usize,
    /// Most sealed bytes all partitions' memory tails hold together: past it each keeps
    /// an equal share (`tail_memory_bytes / open partitions`, at most
    /// `partition_tail_bytes`), so memory does not grow with the partition count.
    pub tail_memory_bytes: usize,
    /// Most bytes one batch's records may decompress to, when the broker looks inside a
    /// compressed batch (produce validation, HTTP reads, ListOffsets by time). Each such
    /// look holds up to this much memory while it runs; a producer batch past it is
    /// refused (`MESSAGE_TOO_LARGE`), a stored one is not served over HTTP.
    pub max_decompressed_batch_bytes: usize,
    /// `producer.id.expiration.ms`: a producer idle this long (its newest record
    /// timestamp) with no transaction open is forgotten by each partition, checked every
    /// [`PRODUCER_EXPIRATION_CHECK`]. Longer keeps idempotence for producers idle longer,
    /// at the cost of memory per producer per partition.
    pub producer_id_expiration: Duration,
    /// WAL replication to other zones.
    pub replication: ReplicationSettings,
    /// Where a write is durable before `acks=all` is answered.
    pub durability: Durability,
}

/// Where a write is durable before `acks=all` is answered (`--durability`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// In the WAL (fsynced) and on every in-sync WAL replica: milliseconds.
    #[default]
    Wal,
    /// In the object store and the catalog, with no WAL at all (WarpStream style): nothing
    /// on the broker's disk, at the latency of a flush interval plus a PUT and a commit.
    Direct,
}

/// Counters and histograms exported on `/metrics`.
#[derive(Default)]
pub struct LogMetrics {
    pub appended_batches: AtomicU64,
    pub appended_bytes: AtomicU64,
    pub appended_records: AtomicU64,
    pub objects_uploaded: AtomicU64,
    pub object_bytes_uploaded: AtomicU64,
    pub upload_failures: AtomicU64,
    /// Objects of failed seals deleted once their commit was sure not to have landed.
    pub uncatalogued_objects_deleted: AtomicU64,
    pub object_reads: AtomicU64,
    pub cache_hits: AtomicU64,
    pub checksum_failures: AtomicU64,
    /// Produce batches refused before the WAL because an earlier write or fsync failed (the
    /// writer counts those it failed itself: [`LogManager::storage_errors`]).
    pub storage_refusals: AtomicU64,
    /// The sealer's steps.
    pub seal_latency: crate::latency::SealLatency,
    /// `read_committed` reads below the leader's in-memory index (or on a broker not leading
    /// the partition) told of their aborts by the catalogue's index ...
    pub aborts_from_catalog: AtomicU64,
    /// ... and those that walked batch headers for them (no index there, or past its bound).
    pub aborts_by_header_walk: AtomicU64,
    /// Every object-store request, timed by operation and outcome (`crate::metered_store`).
    pub object_store: crate::metered_store::StoreMeter,
}

impl LogMetrics {
    /// One batch of `bytes` holding `records` appended as leader (a produce or a mirrored
    /// batch).
    pub(crate) fn count_append(&self, bytes: usize, records: i32) {
        self.appended_batches.fetch_add(1, Ordering::Relaxed);
        self.appended_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
        self.appended_records
            .fetch_add(u64::try_from(records).unwrap_or(0), Ordering::Relaxed);
    }
}

/// The partitions this broker leads, with the WAL, object store and catalog behind them.
pub struct LogManager {
    pub(crate) settings: LogSettings,
    pub(crate) metadata: Arc<dyn MetadataStore>,
    pub(crate) objects: Arc<dyn ObjectStore>,
    pub(crate) cache: ReadCache,
    pub(crate) read_ahead: crate::read_ahead::ReadAhead,
    /// `None` with `--durability direct`.
    pub(crate) wal: Option<Wal>,
    pub(crate) partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// Wakes the sealer early when enough unsealed data is held.
    pub(crate) seal_wanted: Notify,
    pub(crate) unsealed_bytes: AtomicU64,
    pub(crate) seal_sequence: AtomicU64,
    /// This broker's lease (see [`LogManager::set_lease_guard`]); no guard: never fenced.
    pub(crate) lease: std::sync::OnceLock<LeaseGuard>,
    /// When an append was last refused for a lapsed lease (see `append.rs`).
    pub(crate) lease_refusals: append::LeaseRefusals,
    pub metrics: LogMetrics,
    /// When WAL entries count as committed (local fsync + in-sync replicas).
    pub(crate) commit: Arc<CommitTracker>,
    /// Streams the WAL to replicas; run by [`Replicator::run`].
    pub replicator: Arc<Replicator>,
    /// How internal connections authenticate, both ways (the replica server's copy comes
    /// from [`LogManager::internal_auth`]); its failure counter is exported on `/metrics`.
    internal_auth: InternalAuth,
    /// Compaction counters (shared with the compactor task; exported on `/metrics`).
    pub compact_metrics: Arc<crate::compact::CompactMetrics>,
    /// Other brokers' WAL copies held here (`{data dir}/replicas`, beside `wal/`).
    pub replica_store: Arc<crate::replica_store::ReplicaStore>,
    /// Serializes the opens that append this broker's own earlier entries (held ones, or
    /// a previous incarnation's tail).
    open_lock: tokio::sync::Mutex<()>,
    /// Serializes opens of one partition: the lock of each partition being opened (an
    /// open never waits for another partition's).
    opening: Mutex<HashMap<TopicPartition, Arc<tokio::sync::Mutex<()>>>>,
    /// At most [`OPENS_AT_ONCE`] opens do their I/O at once: a broker taking thousands of
    /// partitions opens them side by side, within a bound on the metadata requests in
    /// flight.
    open_permits: tokio::sync::Semaphore,
    /// Forgotten partitions whose unsealed entries the WAL must keep: lowest sequence each.
    held: Mutex<HashMap<TopicPartition, u64>>,
    /// Serializes seals: two seals of the same unsealed batches would race to catalogue
    /// them in different objects (the sealer task, shutdown, handoff and tests all seal).
    pub(crate) seal_lock: tokio::sync::Mutex<()>,
    /// The WAL tail recoveries owed before serving: their retries and fetched tails.
    recovery: LogRecovery,
    /// Objects whose catalog commit failed, deleted once sure never to be catalogued.
    pub(crate) uncatalogued: crate::seal::Uncatalogued,
    /// Sealed objects' producer sections, shared by the opens of a takeover (`open.rs`).
    pub(crate) producer_summaries: crate::producer_summary::ProducerSummaries,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) rng: Arc<dyn Rng>,
}

/// What a [`LogManager`] does its I/O and reads its time through (settings are separate:
/// [`LogSettings`]). [`LogComponents::default`] is production: the OS clock and randomness,
/// the WAL in real files at `settings.wal.dir`, TCP between brokers.
#[derive(Clone)]
pub struct LogComponents {
    pub clock: Arc<dyn Clock>,
    pub rng: Arc<dyn Rng>,
    /// `None`: real files in `settings.wal.dir`.
    pub wal_disk: Option<Arc<dyn WalDisk>>,
    /// Where other brokers' WAL copies go; `None`: real files in `replicas` beside
    /// `settings.wal.dir`.
    pub replica_disk: Option<Arc<dyn WalDisk>>,
    pub transport: Arc<dyn ReplicaTransport>,
}

impl Default for LogComponents {
    fn default() -> Self {
        LogComponents {
            clock: Arc::new(SystemClock),
            rng: Arc::new(OsRng),
            wal_disk: None,
            replica_disk: None,
            transport: Arc::new(TcpTransport),
        }
    }
}

impl LogManager {
    /// Opens the WAL and replays every durable entry not yet catalogued.
    pub async fn open(
        settings: LogSettings,
        metadata: Arc<dyn MetadataStore>,
        objects: Arc<dyn ObjectStore>,
        cache: ReadCache,
    ) -> Result<Arc<LogManager>> {
        Self::open_with(settings, metadata, objects, cache, LogComponents::default()).await
    }

    /// [`LogManager::open`] with the given components (the simulation's, or a test's).
    pub async fn open_with(
        settings: LogSettings,
        metadata: Arc<dyn MetadataStore>,
        objects: Arc<dyn ObjectStore>,
        cache: ReadCache,
        components: LogComponents,
    ) -> Result<Arc<LogManager>> {
        let LogComponents {
            clock,
            rng,
            wal_disk,
            replica_disk,
            transport,
        } = components;
        let metrics = LogMetrics::default();
        let objects = crate::metered_store::MeteredObjectStore::wrap(
            objects,
            metrics.object_store.clone(),
            clock.clone(),
        );
        let (wal, entries) = match settings.durability {
            Durability::Wal => {
                let disk = wal_disk.unwrap_or_else(|| {
                    if settings.wal.direct_writes {
                        FsDisk::with_direct_writes(settings.wal.dir.clone())
                    } else {
                        FsDisk::new(settings.wal.dir.clone())
                    }
                });
                let (wal, entries) = Wal::open_on(settings.wal.clone(), disk, &*rng)?;
                (Some(wal), entries)
            }
            Durability::Direct => (None, Vec::new()),
        };
        let internal_auth = InternalAuth::new(
            settings.broker_id,
            settings.replication.internal_auth.clone(),
            clock.clone(),
            rng.clone(),
        );
        let durable_sequence = wal.as_ref().map_or(0, Wal::durable_sequence);
        let commit = Arc::new(CommitTracker::new(durable_sequence));
        let mut replication = settings.replication.clone();
        if wal.is_none() {
            replication.replication_factor = 1; // no WAL, nothing to replicate
        }
        let replicator = Arc::new(Replicator::new(
            settings.broker_id,
            wal.as_ref().map_or(0, Wal::incarnation),
            replication,
            metadata.clone(),
            commit.clone(),
            transport.clone(),
            internal_auth.clone(),
            clock.clone(),
            (durable_sequence, wal.as_ref().map_or(0..0, Wal::skipped)),
            // Raised by the first seal; until then no replica counts as covering the
            // replayed, unsealed entries.
            0,
        ));
        let mut lost_wal = false;
        let mut previous = None;
        if let Some(wal) = &wal {
            let sink = replicator.clone();
            wal.set_group_sink(Arc::new(move |first, next, bytes| {
                sink.publish(first, next, bytes)
            }));
            previous = metadata.wal_replica_set(settings.broker_id).await?;
            // The record names another incarnation until that one's tail is recovered (the
            // record is reset only then), so a broker that lost its disk and crashed again
            // before recovering still knows it has a tail to recover.
            lost_wal = previous
                .as_ref()
                .is_some_and(|p| p.incarnation != wal.incarnation());
        }
        let replica_disk = replica_disk
            .unwrap_or_else(|| FsDisk::new(settings.wal.dir.with_file_name("replicas")));
        let replica_store = Arc::new(crate::replica_store::ReplicaStore::new(
            replica_disk,
            settings.wal.file_bytes_max,
        ));
        if let Some(wal) = &wal {
            replica_store.set_own_wal(wal.clone());
        }
        let recovery = LogRecovery::new(
            settings.broker_id,
            metadata.clone(),
            replica_store.clone(),
            transport,
            internal_auth.clone(),
            clock.clone(),
            rng.clone(),
            if lost_wal { previous } else { None },
        );
        let manager = Arc::new(LogManager {
            internal_auth,
            compact_metrics: Arc::default(),
            replica_store,
            settings,
            metadata,
            read_ahead: crate::read_ahead::ReadAhead::new(objects.clone(), cache.clone()),
            objects,
            cache,
            wal,
            partitions: RwLock::new(HashMap::new()),
            seal_wanted: Notify::new(),
            unsealed_bytes: AtomicU64::new(0),
            seal_sequence: AtomicU64::new(clock.unix_ms() as u64),
            lease: std::sync::OnceLock::new(),
            lease_refusals: append::LeaseRefusals::default(),
            metrics,
            commit,
            replicator,
            open_lock: tokio::sync::Mutex::new(()),
            opening: Mutex::new(HashMap::new()),
            open_permits: tokio::sync::Semaphore::new(OPENS_AT_ONCE),
            held: Mutex::new(HashMap::new()),
            seal_lock: tokio::sync::Mutex::new(()),
            recovery,
            producer_summaries: crate::producer_summary::ProducerSummaries::new(clock.clone()),
            uncatalogued: Default::default(),
            clock,
            rng,
        });
        manager.replay(entries).await?;
        if lost_wal {
            // First attempt now; if no replica answers (it may not be up yet) it is retried
            // by `run_recoveries`, and until then every partition led here answers
            // NOT_LEADER_OR_FOLLOWER.
            tracing::warn!("the WAL directory is new but this broker had a WAL before: its tail is recovered from its WAL replicas before it serves");
            let me = manager.settings.broker_id;
            if let Err(e) = manager.recover_own_tail().await {
                manager.recovery.failed(RecoveryKey::OwnTail, me, None, &e);
            }
        } else if manager.wal.is_some() {
            // Nothing is acknowledged before the record says no replica is in sync yet.
            manager.replicator.reset_record().await?;
        }
        Ok(manager)
    }

    /// Why this broker does not serve everything it should (empty: it does): a failed WAL,
    /// recoveries waiting for a WAL replica. Reported on `/readyz`.
    pub fn not_ready_reasons(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(failure) = self.wal_failure() {
            out.push(format!(
                "wal: {failure}; no write is acknowledged until the broker restarts"
            ));
        }
        out.extend(self.recovery.not_ready_reasons());
        out
    }

    /// Registers the write path's latency histograms (WAL stages, replica wait, seal steps)
    /// in `registry`.
    pub fn register_latency(&self, registry: &mut prometheus_client::registry::Registry) {
        crate::latency::register(
            registry,
            self.wal.as_ref().map(|w| w.latency()),
            self.commit.replica_wait(),
            &self.metrics.seal_latency,
        );
        self.metrics.object_store.register(registry);
    }

    /// How this broker's internal connections authenticate: give a clone to
    /// [`crate::serve_internal`]; its [`InternalAuth::failures`] go on `/metrics`.
    pub fn internal_auth(&self) -> &InternalAuth {
        &self.internal_auth
    }

    /// Why the WAL stopped accepting writes (`None`: healthy, or no WAL).
    pub fn wal_failure(&self) -> Option<String> {
        self.wal.as_ref().and_then(Wal::failure)
    }

    /// Watches [`Self::wal_failure`] (`None` with `--durability direct`).
    pub fn watch_wal_failure(&self) -> Option<watch::Receiver<Option<String>>> {
        self.wal.as_ref().map(Wal::watch_failure)
    }

    /// Produce batches answered with a storage error because the WAL failed.
    pub fn storage_errors(&self) -> u64 {
        self.metrics.storage_refusals.load(Ordering::Relaxed)
            + self.wal.as_ref().map_or(0, Wal::failed_appends)
    }

    fn wal(&self) -> Result<&Wal> {
        self.wal
            .as_ref()
            .ok_or_else(|| Error::Internal("no WAL with --durability direct".into()))
    }

    async fn replay(&self, entries: Vec<WalEntry>) -> Result<()> {
        let count = entries.len();
        let mut replayed = 0usize;
        // One metadata lookup per topic and one open per partition, not one per entry: a
        // restart replays up to the whole WAL budget.
        let mut topics: HashMap<TopicId, Option<TopicMetadata>> = HashMap::new();
        let mut opened: HashMap<TopicPartition, Option<Arc<Partition>>> = HashMap::new();
        for e in entries {
            let tp = e.topic_partition;
            let topic = match topics.get(&tp.topic_id) {
                Some(t) => t.clone(),
                None => {
                    let t = self.metadata.topic_by_id(tp.topic_id).await?;
                    topics.insert(tp.topic_id, t.clone());
                    t
                }
            };
            let Some(topic) = topic else {
                continue; // deleted since: its data goes with it
            };
            let partition = match opened.get(&tp) {
                Some(p) => p.clone(),
                None => {
                    // Not begun: the epoch's start is the log end after this replay, recorded
                    // when the partition is first used (see `begin_epoch`).
                    let p = match self
                        .open_partition(&topic, tp.partition, false, false)
                        .await
                    {
                        Ok(p) => Some(p),
                        Err(err) => {
                            tracing::warn!(error = %err, "holding the WAL entries of a partition this broker no longer leads");
                            None
                        }
                    };
                    opened.insert(tp, p.clone());
                    p
                }
            };
            let Some(partition) = partition else {
                // Led elsewhere now (this broker was down): keep the entries until the new
                // leader has recovered them (see `release_holds`).
                if let Ok(mut held) = self.held.lock() {
                    let h = held.entry(tp).or_insert(e.sequence);
                    *h = (*h).min(e.sequence);
                }
                continue;
            };
            let Some(h) = batch::peek_header(&e.batch)? else {
                return Err(Error::Internal(format!(
                    "WAL entry {} holds no whole batch",
                    e.sequence
                )));
            };
            let size = e.batch.len() as u64;
            let applied = match partition.lock()?.replay(&h, e.batch, e.sequence) {
                Ok(applied) => applied,
                Err(err) => {
                    tracing::error!(error = %err, sequence = e.sequence, "WAL entry does not continue its partition; skipped");
                    false
                }
            };
            if applied {
                replayed += 1;
                self.unsealed_bytes.fetch_add(size, Ordering::AcqRel);
                let hw = partition.lock()?.high_watermark;
                partition.high_watermark_tx.send_replace(hw);
            }
        }
        if count > 0 {
            tracing::info!(entries = count, replayed, "recovered WAL");
        }
        Ok(())
    }

    pub fn broker_id(&self) -> BrokerId {
        self.settings.broker_id
    }

    /// The budget of every look inside a compressed batch ([`LogSettings`]).
    pub fn max_decompressed_batch_bytes(&self) -> usize {
        self.settings.max_decompressed_batch_bytes
    }

    /// Ties acknowledgements to this broker's metadata lease: once `guard` is invalid,
    /// appends fail with [`Error::NotLeader`] instead of being acknowledged. Set once,
    /// before serving; later calls are ignored.
    pub fn set_lease_guard(&self, guard: LeaseGuard) {
        let _ = self.lease.set(guard);
    }

    /// Whether this broker's metadata lease is certainly alive (`None`: no guard was set,
    /// so appends are never fenced by one).
    pub fn lease_valid(&self) -> Option<bool> {
        self.lease.get().map(LeaseGuard::is_valid)
    }

    /// The partition if this broker has it open.
    pub fn get(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        self.partitions.read().ok()?.get(tp).cloned()
    }

    /// Forgets every partition of a deleted topic (its unsealed data goes with it).
    pub fn drop_topic(&self, topic_id: TopicId) {
        self.forget_where(|tp| tp.topic_id == topic_id);
        if let Ok(mut held) = self.held.lock() {
            held.retain(|tp, _| tp.topic_id != topic_id);
        }
    }

    /// Stops serving the partitions `which` selects and drops what memory holds of them.
    /// Their unsealed WAL entries stay held in this broker's WAL (and so on its replicas)
    /// until a new leader has recovered them (`recover_from` cleared) or this broker leads
    /// the partition again and re-reads them itself (see [`Self::release_holds`]).
    pub fn forget_where(&self, which: impl Fn(&TopicPartition) -> bool) {
        let mut newly_held = Vec::new();
        if let Ok(mut map) = self.partitions.write() {
            map.retain(|tp, p| {
                if !which(tp) {
                    return true;
                }
                if let Ok(s) = p.state.lock() {
                    self.unsealed_bytes
                        .fetch_sub(s.unsealed_bytes() as u64, Ordering::AcqRel);
                    if let Some(seq) = s.min_unsealed_wal_sequence() {
                        newly_held.push((*tp, seq));
                    }
                }
                false
            });
        }
        if let Ok(mut held) = self.held.lock() {
            for (tp, seq) in newly_held {
                let e = held.entry(tp).or_insert(seq);
                *e = (*e).min(seq);
            }
        }
    }

    /// Lowest WAL sequence held for forgotten partitions.
    pub(crate) fn held_floor(&self) -> Option<u64> {
        self.held.lock().ok()?.values().copied().min()
    }

    /// Lets go of held WAL entries whose partition no longer needs them: the topic is gone,
    /// or another broker leads it and is not (or no longer) recovering from this one.
    pub async fn release_holds(&self) -> Result<()> {
        let held: Vec<TopicPartition> = match self.held.lock() {
            Ok(h) => h.keys().copied().collect(),
            Err(_) => return Ok(()),
        };
        let me = self.settings.broker_id;
        for tp in held {
            let state = self
                .metadata
                .topic_by_id(tp.topic_id)
                .await?
                .and_then(|t| t.partition(tp.partition).cloned());
            let release = match state {
                None => true,
                Some(s) => s.leader != me && s.recover_from != Some(me),
            };
            if release {
                if let Ok(mut h) = self.held.lock() {
                    h.remove(&tp);
                }
            }
        }
        Ok(())
    }

    /// The WAL's directory (`None`: durability from the object store alone, no WAL).
    pub fn wal_dir(&self) -> Option<&std::path::Path> {
        self.wal.as_ref().map(|_| self.settings.wal.dir.as_path())
    }

    /// Bytes the WAL holds on disk.
    pub fn wal_bytes(&self) -> u64 {
        self.wal.as_ref().map_or(0, Wal::bytes)
    }

    /// Bytes this broker's WAL has written since start.
    pub fn wal_written_bytes(&self) -> u64 {
        self.wal.as_ref().map_or(0, Wal::written_bytes)
    }

    /// Already uploaded bytes the open partitions keep in memory for tail readers.
    pub fn tail_memory_bytes(&self) -> usize {
        self.open_partitions()
            .iter()
            .filter_map(|p| p.lock().ok().map(|s| s.sealed_memory_bytes()))
            .sum()
    }

    /// Bytes held in memory not yet uploaded.
    pub fn unsealed_bytes(&self) -> u64 {
        self.unsealed_bytes.load(Ordering::Acquire)
    }

    /// The object store this broker seals into (for the controller's sweep of leaked
    /// objects, [`crate::orphans`]).
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.objects
    }

    /// Every open partition.
    pub fn open_partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Forgets, in every open partition, producers idle past `producer_id_expiration`
    /// with no transaction open there; returns how many.
    pub fn expire_producers(&self) -> usize {
        let now = self.clock.unix_ms();
        let expiration =
            i64::try_from(self.settings.producer_id_expiration.as_millis()).unwrap_or(i64::MAX);
        let mut forgotten = 0;
        for p in self.open_partitions() {
            if let Ok(mut s) = p.lock() {
                forgotten += s.expire_producers(now, expiration);
            }
        }
        if forgotten > 0 {
            tracing::debug!(forgotten, "expired idle producer ids");
        }
        forgotten
    }

    /// Bytes of sealed object data held in the read cache.
    pub fn cache_usage_bytes(&self) -> usize {
        self.cache.usage_bytes()
    }

    /// The read cache's disk tier directory (`--cache-dir`), if it has one.
    pub fn cache_dir(&self) -> Option<&std::path::Path> {
        self.cache.disk_dir()
    }
}
