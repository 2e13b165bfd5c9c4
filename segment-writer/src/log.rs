//! [`LogManager`]: the partitions this broker leads, their appends, reads and recovery.
//!
//! Lifecycle: [`LogManager::open`] opens the WAL and replays every entry not yet in the
//! catalog back into memory (those batches were acknowledged or may have been); the sealer
//! task ([`crate::seal`]) then uploads them like any other. Partitions are opened lazily on
//! first use, after checking with the metadata service that this broker leads them; before
//! a partition is served, its leader epoch's start offset is recorded in the partition's
//! stored epoch history (`begin_epoch`, ARCHITECTURE decision 19).
//!
//! Append order: an append holds its partition's order lock while it assigns offsets and
//! queues the WAL write, so the WAL holds each partition's batches in offset order. The WAL
//! writer thread marks batches durable (advancing the high watermark) before it publishes
//! its durable sequence, which the sealer relies on when it trims the WAL.

use crate::batch::{self, BatchHeader};
use crate::commit::CommitTracker;
use crate::error::{Error, Result};
use crate::partition::{PartitionLogState, SequenceCheck};
use crate::recovery_state::RecoveryKey;
use crate::replicate::{ReplicationSettings, Replicator};
use crate::transport::{ReplicaTransport, TcpTransport};
use crate::validate;
use crate::wal::{OnDurable, Wal, WalEntry, WalSettings};
use crate::wal_disk::{FsDisk, WalDisk};
use object_store::ObjectStore;
use oxbow_cache::ReadCache;
use oxbow_metadata::clock::{Clock, OsRng, Rng, SystemClock};
use oxbow_metadata::{
    BrokerId, LeaderEpoch, LeaseGuard, MetadataStore, Offset, TopicId, TopicMetadata,
    TopicPartition,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{oneshot, watch, Notify};

mod open;
mod recovery;

use recovery::LogRecovery;

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
    /// Most bytes one batch's records may decompress to, when the broker looks inside a
    /// compressed batch (produce validation, HTTP reads, ListOffsets by time). Each such
    /// look holds up to this much memory while it runs; a producer batch past it is
    /// refused (`MESSAGE_TOO_LARGE`), a stored one is not served over HTTP.
    pub max_decompressed_batch_bytes: usize,
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

/// Longest an `acks=all` write waits for its upload with `--durability direct` (the object
/// store may be down; the producer gets a retriable error rather than a hung request).
const DIRECT_ACK_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an `acks` producer waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acks {
    /// Answer once the batch is appended locally (queued for the WAL).
    Leader,
    /// Answer once the batch is durable (fsynced; later also replicated).
    All,
}

/// The result of an append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: Offset,
    /// The broker's timestamp for `LogAppendTime` topics, else -1.
    pub log_append_time_ms: i64,
    /// The batch was a retry of one already appended.
    pub duplicate: bool,
}

/// An append whose batch is queued for the WAL; [`PendingAppend::wait`] resolves once it
/// is as durable as the producer's `acks` asked.
pub struct PendingAppend {
    pub appended: Appended,
    durable: Option<Durable>,
    /// For `acks=all`: the in-sync set must still be large enough when the ack goes out.
    insync_check: Option<(Arc<Replicator>, i32)>,
    /// Checked again once durable: the lease may have lapsed while the batch waited.
    lease: Option<LeaseGuard>,
}

/// What an `acks=all` append waits for.
enum Durable {
    /// The WAL's commit callback (local fsync and every in-sync replica).
    Wal(oneshot::Receiver<Result<u64>>),
    /// `--durability direct`: the batch is durable once sealed, which is when the high
    /// watermark passes its last offset.
    Sealed {
        high_watermark: watch::Receiver<Offset>,
        last_offset: Offset,
    },
}

impl Durable {
    async fn wait(self) -> Result<()> {
        match self {
            Durable::Wal(rx) => match rx.await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(Error::ShuttingDown),
            },
            Durable::Sealed {
                mut high_watermark,
                last_offset,
            } => {
                let sealed = tokio::time::timeout(
                    DIRECT_ACK_TIMEOUT,
                    high_watermark.wait_for(|hw| *hw > last_offset),
                )
                .await;
                match sealed {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(_)) => Err(Error::ShuttingDown),
                    Err(_) => Err(Error::ObjectStore(format!(
                        "not uploaded within {DIRECT_ACK_TIMEOUT:?}"
                    ))),
                }
            }
        }
    }
}

impl PendingAppend {
    /// Waits for durability (for [`Acks::All`]); immediate otherwise. Fails with
    /// [`Error::NotLeader`] if this broker's lease is no longer certainly alive: another
    /// broker may lead the partition by now, so the batch may never be committed.
    pub async fn wait(self) -> Result<Appended> {
        if let Some(durable) = self.durable {
            durable.wait().await?;
        }
        check_lease(self.lease.as_ref())?;
        if let Some((replicator, required)) = &self.insync_check {
            let in_sync = replicator.in_sync_copies();
            if (in_sync as i64) < i64::from(*required) {
                return Err(Error::NotEnoughReplicasAfterAppend {
                    in_sync,
                    required: *required,
                });
            }
        }
        Ok(self.appended)
    }
}

fn check_lease(lease: Option<&LeaseGuard>) -> Result<()> {
    match lease {
        Some(g) if !g.is_valid() => Err(Error::LeaseExpired),
        _ => Ok(()),
    }
}

/// A partition this broker leads.
pub struct Partition {
    pub topic_partition: TopicPartition,
    pub topic_name: String,
    pub(crate) state: Mutex<PartitionLogState>,
    /// Serializes appends so WAL order matches offset order (held across the WAL enqueue).
    append_order: tokio::sync::Mutex<()>,
    /// Publishes the high watermark, for long-polling fetches.
    pub(crate) high_watermark_tx: watch::Sender<Offset>,
    /// The topic's `min.insync.replicas` when the partition was opened: `acks=all` appends
    /// need this many in-sync WAL copies (this broker's included).
    min_insync_replicas: i32,
    /// Whether this leader's epoch and its start offset are in the partition's stored
    /// epoch history (`LogManager::begin_epoch`); nothing is served before.
    epoch_begun: AtomicBool,
    /// The topic's `message.timestamp.before.max.ms` / `after.max.ms` when the partition
    /// was opened: how far a `CreateTime` record may lie from the broker's clock.
    timestamp_before_max_ms: i64,
    timestamp_after_max_ms: i64,
    /// The topic's `cleanup.policy` includes `compact` (every record needs a key).
    compacted: bool,
}

impl Partition {
    pub(crate) fn lock(&self) -> Result<std::sync::MutexGuard<'_, PartitionLogState>> {
        self.state
            .lock()
            .map_err(|_| Error::Internal("partition state lock poisoned".into()))
    }

    /// Watches the high watermark (changes when new data becomes visible).
    pub fn subscribe(&self) -> watch::Receiver<Offset> {
        self.high_watermark_tx.subscribe()
    }

    /// (log start offset, high watermark, log end offset).
    pub fn offsets(&self) -> Result<(Offset, Offset, Offset)> {
        let s = self.lock()?;
        Ok((s.log_start_offset, s.high_watermark, s.log_end_offset))
    }

    pub fn leader_epoch(&self) -> Result<i32> {
        Ok(self.lock()?.leader_epoch)
    }

    /// OffsetForLeaderEpoch's answer for `requested`: (epoch, end offset), `None` for an
    /// undefined epoch or one newer than this leader's (see
    /// [`oxbow_metadata::LeaderEpochHistory::end_offset_for`]).
    pub fn end_offset_for(&self, requested: LeaderEpoch) -> Result<Option<(LeaderEpoch, Offset)>> {
        Ok(self.lock()?.end_offset_for(requested))
    }

    /// The epoch `offset` was written under, if the history goes back that far.
    pub fn epoch_for_offset(&self, offset: Offset) -> Result<Option<LeaderEpoch>> {
        Ok(self.lock()?.epoch_for_offset(offset))
    }

    fn epoch_begun(&self) -> bool {
        self.epoch_begun.load(Ordering::Acquire)
    }

    fn on_durable(&self, base_offset: Offset, wal_sequence: Option<u64>) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        if s.mark_durable(base_offset, wal_sequence) {
            let hw = s.high_watermark;
            drop(s);
            self.high_watermark_tx.send_replace(hw);
        }
    }
}

/// Counters exported on `/metrics`.
#[derive(Default)]
pub struct LogMetrics {
    pub appended_batches: AtomicU64,
    pub appended_bytes: AtomicU64,
    pub appended_records: AtomicU64,
    pub objects_uploaded: AtomicU64,
    pub object_bytes_uploaded: AtomicU64,
    pub upload_failures: AtomicU64,
    pub object_reads: AtomicU64,
    pub cache_hits: AtomicU64,
    pub checksum_failures: AtomicU64,
    /// Produce batches refused before the WAL because an earlier write or fsync failed (the
    /// writer counts those it failed itself: [`LogManager::storage_errors`]).
    pub storage_refusals: AtomicU64,
}

/// The partitions this broker leads, with the WAL, object store and catalog behind them.
pub struct LogManager {
    pub(crate) settings: LogSettings,
    pub(crate) metadata: Arc<dyn MetadataStore>,
    pub(crate) objects: Arc<dyn ObjectStore>,
    pub(crate) cache: ReadCache,
    /// `None` with `--durability direct`.
    pub(crate) wal: Option<Wal>,
    pub(crate) partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// Wakes the sealer early when enough unsealed data is held.
    pub(crate) seal_wanted: Notify,
    pub(crate) unsealed_bytes: AtomicU64,
    pub(crate) seal_sequence: AtomicU64,
    /// This broker's lease (see [`LogManager::set_lease_guard`]); no guard: never fenced.
    pub(crate) lease: std::sync::OnceLock<LeaseGuard>,
    pub metrics: LogMetrics,
    /// When WAL entries count as committed (local fsync + in-sync replicas).
    pub(crate) commit: Arc<CommitTracker>,
    /// Streams the WAL to replicas; run by [`Replicator::run`].
    pub replicator: Arc<Replicator>,
    /// Compaction counters (shared with the compactor task; exported on `/metrics`).
    pub compact_metrics: Arc<crate::compact::CompactMetrics>,
    /// Other brokers' WAL copies held here (`{data dir}/replicas`, beside `wal/`).
    pub replica_store: Arc<crate::replica_store::ReplicaStore>,
    /// Serializes partition opens (an open may recover a dead broker's tail first).
    open_lock: tokio::sync::Mutex<()>,
    /// Forgotten partitions whose unsealed entries the WAL must keep: lowest sequence each.
    held: Mutex<HashMap<TopicPartition, u64>>,
    /// Serializes seals: two seals of the same unsealed batches would race to catalogue
    /// them in different objects (the sealer task, shutdown, handoff and tests all seal).
    pub(crate) seal_lock: tokio::sync::Mutex<()>,
    /// The WAL tail recoveries owed before serving: their retries and fetched tails.
    recovery: LogRecovery,
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
    pub transport: Arc<dyn ReplicaTransport>,
}

impl Default for LogComponents {
    fn default() -> Self {
        LogComponents {
            clock: Arc::new(SystemClock),
            rng: Arc::new(OsRng),
            wal_disk: None,
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
            transport,
        } = components;
        let (wal, entries) = match settings.durability {
            Durability::Wal => {
                let disk = wal_disk.unwrap_or_else(|| FsDisk::new(settings.wal.dir.clone()));
                let (wal, entries) = Wal::open_on(settings.wal.clone(), disk, &*rng)?;
                (Some(wal), entries)
            }
            Durability::Direct => (None, Vec::new()),
        };
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
            clock.clone(),
            durable_sequence,
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
        let replica_store = Arc::new(crate::replica_store::ReplicaStore::new(
            settings.wal.dir.with_file_name("replicas"),
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
            clock.clone(),
            rng.clone(),
            if lost_wal { previous } else { None },
        );
        let manager = Arc::new(LogManager {
            compact_metrics: Arc::default(),
            replica_store,
            settings,
            metadata,
            objects,
            cache,
            wal,
            partitions: RwLock::new(HashMap::new()),
            seal_wanted: Notify::new(),
            unsealed_bytes: AtomicU64::new(0),
            seal_sequence: AtomicU64::new(clock.unix_ms() as u64),
            lease: std::sync::OnceLock::new(),
            metrics: LogMetrics::default(),
            commit,
            replicator,
            open_lock: tokio::sync::Mutex::new(()),
            held: Mutex::new(HashMap::new()),
            seal_lock: tokio::sync::Mutex::new(()),
            recovery,
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

    /// The partition if this broker has it open.
    pub fn get(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        self.partitions.read().ok()?.get(tp).cloned()
    }

    /// Appends the batches of `tail` that continue `partition` from `from` to this broker's
    /// WAL, and waits until they are committed.
    async fn append_recovered(
        &self,
        partition: &Arc<Partition>,
        tail: &crate::recover::Tail,
        from: Offset,
    ) -> Result<()> {
        let batches = crate::recover::chain(tail, partition.topic_partition, from)?;
        if batches.is_empty() {
            return Ok(());
        }
        let mut waits = Vec::with_capacity(batches.len());
        let mut bytes = 0u64;
        {
            let _order = partition.append_order.lock().await;
            for b in &batches {
                let Some(h) = batch::peek_header(b)? else {
                    continue;
                };
                let base = {
                    let mut s = partition.lock()?;
                    if h.base_offset != s.next_offset() {
                        return Err(Error::Internal(format!(
                            "recovered batch at {} does not continue the log at {}",
                            h.base_offset,
                            s.next_offset()
                        )));
                    }
                    s.append(&h, b.clone())
                };
                let (tx, rx) = oneshot::channel();
                let p = partition.clone();
                self.wal()?
                    .append(
                        partition.topic_partition,
                        h.partition_leader_epoch,
                        b,
                        self.durability_callback(p, base, tx),
                    )
                    .await?;
                waits.push(rx);
                bytes += b.len() as u64;
            }
        }
        self.unsealed_bytes.fetch_add(bytes, Ordering::AcqRel);
        for rx in waits {
            match rx.await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(Error::ShuttingDown),
            }
        }
        tracing::info!(
            partition = %format!("{}-{}", partition.topic_name, partition.topic_partition.partition),
            batches = batches.len(), bytes, from, "recovered a WAL tail"
        );
        Ok(())
    }

    /// The WAL callback of an append: once the entry is committed (fsynced here and on every
    /// in-sync replica), mark it durable in its partition and answer the waiter.
    fn durability_callback(
        &self,
        partition: Arc<Partition>,
        base_offset: Offset,
        tx: oneshot::Sender<Result<u64>>,
    ) -> OnDurable {
        self.commit.gate(Box::new(move |result| {
            if let Ok(seq) = &result {
                partition.on_durable(base_offset, Some(*seq));
            }
            let _ = tx.send(result);
        }))
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

    /// Appends one producer batch and waits as long as `acks` asks (see [`Self::enqueue`]).
    pub async fn append(
        &self,
        partition: &Arc<Partition>,
        raw: &[u8],
        max_message_bytes: usize,
        log_append_time: bool,
        acks: Acks,
    ) -> Result<Appended> {
        self.enqueue(partition, raw, max_message_bytes, log_append_time, acks)
            .await?
            .wait()
            .await
    }

    /// Appends one producer batch: validate, check sequence, assign offsets and queue the
    /// WAL write. Returns once the batch has its offsets, so a connection can go on to its
    /// next request (keeping per-connection order) while this one becomes durable.
    pub async fn enqueue(
        &self,
        partition: &Arc<Partition>,
        raw: &[u8],
        max_message_bytes: usize,
        log_append_time: bool,
        acks: Acks,
    ) -> Result<PendingAppend> {
        check_lease(self.lease.get())?;
        // With direct durability an acknowledged write is in the object store, which keeps
        // its own copies: min.insync.replicas is about WAL copies, of which there are none.
        let check_insync = acks == Acks::All && self.wal.is_some();
        if check_insync {
            let in_sync = self.replicator.in_sync_copies();
            if (in_sync as i64) < i64::from(partition.min_insync_replicas) {
                return Err(Error::NotEnoughReplicas {
                    in_sync,
                    required: partition.min_insync_replicas,
                });
            }
        }
        let now = self.clock.unix_ms();
        let rules = validate::ProduceRules {
            max_message_bytes,
            log_append_time,
            max_decompressed_batch_bytes: self.settings.max_decompressed_batch_bytes,
            now_ms: now,
            timestamp_before_max_ms: partition.timestamp_before_max_ms,
            timestamp_after_max_ms: partition.timestamp_after_max_ms,
            compacted: partition.compacted,
        };
        let validated = validate::validate_produced(raw, &rules)?;
        let mut header: BatchHeader = validated.header;
        let corrected;
        let raw = if !log_append_time && validated.max_timestamp != header.max_timestamp {
            corrected = batch::with_max_timestamp(raw, validated.max_timestamp);
            header.max_timestamp = validated.max_timestamp;
            &corrected[..]
        } else {
            raw
        };
        let log_append_time_ms = if log_append_time { now } else { -1 };
        let (base_offset, durable) = {
            let _order = partition.append_order.lock().await;
            match &self.wal {
                Some(wal) => {
                    if let Err(e) = wal.check_accepting() {
                        if matches!(e, Error::WalFailed(_)) {
                            self.metrics
                                .storage_refusals
                                .fetch_add(1, Ordering::Relaxed);
                        }
                        return Err(e);
                    }
                }
                // Direct: memory holds what awaits upload; bound it like the WAL budget.
                None if self.unsealed_bytes() >= self.settings.wal.budget_bytes => {
                    return Err(Error::UnsealedFull {
                        budget_bytes: self.settings.wal.budget_bytes,
                    });
                }
                None => {}
            }
            let (base_offset, epoch, stamped) = {
                let mut s = partition.lock()?;
                match s.check_sequence(&header)? {
                    SequenceCheck::Duplicate(base_offset) => {
                        // The original is at least queued; a retry waits for nothing more.
                        return Ok(PendingAppend {
                            appended: Appended {
                                base_offset,
                                log_append_time_ms,
                                duplicate: true,
                            },
                            durable: None,
                            insync_check: None,
                            lease: self.lease.get().cloned(),
                        });
                    }
                    SequenceCheck::Append => {}
                }
                let stamped = batch::stamp(
                    raw,
                    s.next_offset(),
                    s.leader_epoch,
                    log_append_time.then_some(log_append_time_ms),
                );
                let base = s.append(&header, stamped.clone());
                (base, s.leader_epoch, stamped)
            };
            let durable = match &self.wal {
                Some(wal) => {
                    let (tx, rx) = oneshot::channel();
                    let queued = wal
                        .append(
                            partition.topic_partition,
                            epoch,
                            &stamped,
                            self.durability_callback(partition.clone(), base_offset, tx),
                        )
                        .await;
                    if let Err(e) = queued {
                        partition.lock()?.undo_last_append(base_offset);
                        return Err(e);
                    }
                    Durable::Wal(rx)
                }
                // Direct: durable once sealed; the sealer's high watermark says when.
                None => Durable::Sealed {
                    high_watermark: partition.subscribe(),
                    last_offset: base_offset + i64::from(header.last_offset_delta),
                },
            };
            (base_offset, durable)
        };
        let size = raw.len() as u64;
        self.metrics
            .appended_batches
            .fetch_add(1, Ordering::Relaxed);
        self.metrics
            .appended_bytes
            .fetch_add(size, Ordering::Relaxed);
        self.metrics
            .appended_records
            .fetch_add(header.record_count as u64, Ordering::Relaxed);
        let unsealed = self.unsealed_bytes.fetch_add(size, Ordering::AcqRel) + size;
        if unsealed >= self.settings.flush_bytes {
            self.seal_wanted.notify_one();
        }
        Ok(PendingAppend {
            appended: Appended {
                base_offset,
                log_append_time_ms,
                duplicate: false,
            },
            durable: (acks == Acks::All).then_some(durable),
            insync_check: check_insync
                .then(|| (self.replicator.clone(), partition.min_insync_replicas)),
            lease: self.lease.get().cloned(),
        })
    }

    /// Waits until every batch appended so far is durable in the WAL (or `timeout`
    /// passes); used on shutdown so `acks=1` writes still queued are not dropped.
    pub async fn wait_durable(&self, timeout: Duration) -> bool {
        let deadline = self.clock.now() + timeout;
        loop {
            let pending = self.open_partitions().iter().any(|p| {
                p.lock()
                    .map(|s| s.has_pending_durability())
                    .unwrap_or(false)
            });
            if !pending {
                return true;
            }
            let Some(wal) = &self.wal else {
                // Direct: the final seal is what makes pending writes durable.
                return true;
            };
            if self.clock.now() >= deadline || wal.check_accepting().is_err() {
                return false;
            }
            self.clock.sleep(Duration::from_millis(5)).await;
        }
    }

    /// Bytes the WAL holds on disk.
    pub fn wal_bytes(&self) -> u64 {
        self.wal.as_ref().map_or(0, Wal::bytes)
    }

    /// Bytes this broker's WAL has written since start.
    pub fn wal_written_bytes(&self) -> u64 {
        self.wal.as_ref().map_or(0, Wal::written_bytes)
    }

    /// Bytes held in memory not yet uploaded.
    pub fn unsealed_bytes(&self) -> u64 {
        self.unsealed_bytes.load(Ordering::Acquire)
    }

    /// Every open partition.
    pub fn open_partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Bytes of sealed object data held in the read cache.
    pub fn cache_usage_bytes(&self) -> usize {
        self.cache.usage_bytes()
    }
}
