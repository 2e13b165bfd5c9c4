//! The simulated cluster: brokers (each a real [`LogManager`] with its sealer, replicator,
//! recovery driver, internal server and lease keeper), the shared metadata service, object
//! store and network, and the two roles the gateway plays around them: the controller
//! (failover: a dead broker's partitions move to a live one at the next epoch, to recover
//! its tail) and each broker's topic follower (forget a partition led elsewhere now).
//!
//! A crash aborts a broker's tasks where they stand (no final seal, no lease revoke) and
//! its disk keeps what was fsynced plus a torn part of the rest; a lost disk keeps nothing.
//! A broker whose WAL failed exits as the real one does (after the storage-failure delay)
//! and the supervisor starts it again.

use crate::history::History;
use crate::lifecycle::{Lifecycle, LifecycleCounts, SimPolicies};
use crate::meta::{FaultyMetadata, MetaFaultCounts, MetaFaults};
use object_store::memory::InMemory;
use oxbow_cache::ReadCache;
use oxbow_metadata::clock::{Clock, Rng, SeededRng, SimClock};
use oxbow_metadata::lease::{register, run_lease_keeper, NewLeaseHook};
use oxbow_metadata::{
    BrokerId, BrokerRegistration, EmbeddedStore, LeaseGuard, MetadataStore, PartitionState,
    TopicId, TopicMetadata, TopicSpec,
};
use oxbow_segment_writer::faulty_store::FaultyObjectStore;
use oxbow_segment_writer::internal_auth::Secrets;
use oxbow_segment_writer::transport::SimNet;
use oxbow_segment_writer::wal_disk::{MemDisk, WalDisk};
use oxbow_segment_writer::{
    run_compactor, run_sealer, serve_internal, CompactSettings, Leadership, LogComponents,
    LogManager, LogSettings, ReplicationSettings, RetentionPolicies, WalSettings,
};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub const BROKERS: i32 = 3;
pub const PARTITIONS: i32 = 4;
pub const TOPIC: &str = "sim";
const LEASE_TTL: Duration = Duration::from_secs(2);
/// How long a broker whose WAL failed stays up before exiting (`--storage-failure-exit-delay`).
const STORAGE_EXIT_DELAY: Duration = Duration::from_secs(1);
/// The supervisor's delay before starting an exited broker again.
const RESTART_DELAY: Duration = Duration::from_secs(1);

pub fn zone(id: BrokerId) -> String {
    format!("az{id}")
}

/// The cluster's internal-auth secret: the same on every simulated broker.
fn sim_secrets() -> Secrets {
    Secrets::new(b"oxbow-simulation-cluster-secret-0123456789", None)
        .expect("the simulation's secret is long enough")
}

fn internal_addr(id: BrokerId) -> String {
    format!("b{id}:internal")
}

/// A running broker.
pub struct SimBroker {
    pub log: Arc<LogManager>,
    /// Its append gates and graceful handoff, as the gateway's broker holds them.
    pub leadership: Arc<Leadership>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

#[derive(Default)]
enum Slot {
    #[default]
    Down,
    Starting,
    Up(Arc<SimBroker>),
}

/// Everything a run shares; cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    pub seed: u64,
    pub clock: Arc<SimClock>,
    pub rng: Arc<SeededRng>,
    /// The metadata service itself (the controller's and the clients' routing view).
    pub metadata: Arc<dyn MetadataStore>,
    /// The same store, for writes that bypass its rules (a zombie's late commit).
    pub raw: Arc<EmbeddedStore>,
    /// What the brokers' faulty views counted and kept (fenced commits).
    pub meta_counts: Arc<MetaFaultCounts>,
    /// Each broker's faulty view of it.
    pub metas: Arc<BTreeMap<BrokerId, Arc<FaultyMetadata>>>,
    pub store: Arc<FaultyObjectStore>,
    pub net: SimNet,
    pub disks: Arc<BTreeMap<BrokerId, MemDisk>>,
    root: Arc<tempfile::TempDir>,
    slots: Arc<Mutex<BTreeMap<BrokerId, Slot>>>,
    pub history: Arc<Mutex<History>>,
    pub topic_id: TopicId,
    pub lifecycle: Option<Lifecycle>,
    pub lifecycle_counts: Arc<Mutex<LifecycleCounts>>,
    /// The latest wall time the shared clock has read so far (rule 10): a step forward
    /// reads later than the true time until it is lifted.
    wall_peak_ms: Arc<std::sync::atomic::AtomicI64>,
    /// The clocks' step now, and the furthest back they were ever stepped (rule 11).
    skew_ms: Arc<std::sync::atomic::AtomicI64>,
    skew_min_ms: Arc<std::sync::atomic::AtomicI64>,
    /// Incarnations started per broker (seeds each start's randomness).
    starts: Arc<Mutex<BTreeMap<BrokerId, u64>>>,
    /// Simulated time zero (monotonic: trace times ignore wall-clock steps).
    origin: tokio::time::Instant,
}

impl Cluster {
    pub async fn new(seed: u64, lifecycle: Option<Lifecycle>) -> Cluster {
        let clock = SimClock::new(1_750_000_000_000);
        let rng = SeededRng::new(seed);
        let raw = Arc::new(EmbeddedStore::in_memory().expect("in-memory metadata"));
        let metadata: Arc<dyn MetadataStore> = raw.clone();
        let meta_counts = Arc::new(MetaFaultCounts::default());
        let metas = (1..=BROKERS)
            .map(|id| {
                let r: Arc<dyn Rng> = SeededRng::new(seed.wrapping_mul(31).wrapping_add(id as u64));
                // Each broker its own store over the one key-value store: its in-memory
                // catalogue learns other brokers' commits through watches, as over etcd.
                let own: Arc<dyn MetadataStore> = Arc::new(raw.with_own_catalogue());
                (id, FaultyMetadata::new(own, r, meta_counts.clone()))
            })
            .collect();
        let store = FaultyObjectStore::new(
            Arc::new(InMemory::new()),
            clock.clone(),
            SeededRng::new(seed ^ 0x5EED_0B1E),
        );
        let disks = (1..=BROKERS)
            .map(|id| (id, MemDisk::new(format!("b{id}"))))
            .collect();
        let topic =
            metadata
                .create_topic_with_leaders(
                    TopicSpec {
                        name: TOPIC.into(),
                        partitions: PARTITIONS,
                        replication_factor: 3,
                        configs: BTreeMap::from_iter(
                            [("min.insync.replicas".to_string(), "2".to_string())]
                                .into_iter()
                                .chain(
                                    lifecycle
                                        .and_then(|l| l.retention_ms)
                                        .map(|ms| ("retention.ms".to_string(), ms.to_string())),
                                )
                                .chain(lifecycle.filter(|l| l.compact).map(|_| {
                                    ("cleanup.policy".to_string(), "compact".to_string())
                                })),
                        ),
                    },
                    &(1..=BROKERS).collect::<Vec<_>>(),
                )
                .await
                .expect("topic");
        let origin = clock.now();
        Cluster {
            seed,
            clock,
            rng,
            metadata,
            raw,
            meta_counts,
            metas: Arc::new(metas),
            store,
            net: SimNet::new(),
            disks: Arc::new(disks),
            root: Arc::new(tempfile::tempdir().expect("tempdir")),
            slots: Arc::default(),
            history: Arc::default(),
            topic_id: topic.topic_id,
            lifecycle,
            lifecycle_counts: Arc::default(),
            wall_peak_ms: Arc::default(),
            skew_ms: Arc::default(),
            skew_min_ms: Arc::default(),
            starts: Arc::default(),
            origin,
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.clock
            .now()
            .saturating_duration_since(self.origin)
            .as_millis() as u64
    }

    pub fn event(&self, line: String) {
        let t = self.now_ms();
        tracing::info!(target: "sim", "[{}.{:03}] {line}", t / 1000, t % 1000);
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .event(t, line);
    }

    pub fn violation(&self, line: String) {
        let t = self.now_ms();
        tracing::error!(target: "sim", "[{}.{:03}] VIOLATION {line}", t / 1000, t % 1000);
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .violation(t, line);
    }

    /// Whether the topic is key-compacted (rule 11).
    pub fn compacted(&self) -> bool {
        self.lifecycle.is_some_and(|l| l.compact)
    }

    /// Steps every broker's wall clock to `skew_ms` from the true time (0 lifts a step),
    /// remembering the latest time it read before the change.
    pub fn set_skew_ms(&self, skew_ms: i64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.note_wall();
        self.clock.set_skew_ms(skew_ms);
        self.skew_ms.store(skew_ms, Relaxed);
        self.skew_min_ms.fetch_min(skew_ms, Relaxed);
    }

    /// The wall time without the current step (when a record was really sent).
    pub fn true_unix_ms(&self) -> i64 {
        self.clock.unix_ms() - self.skew_ms.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What rule 11 needs of the clocks, as of now.
    pub fn compaction_clocks(&self) -> crate::history::Compacted {
        crate::history::Compacted {
            wall_peak_ms: self.note_wall(),
            skew_min_ms: self.skew_min_ms.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// The latest wall time any broker's clock can have read by now: readings under one
    /// skew only grow, so the peak is at a skew's end or now.
    fn note_wall(&self) -> i64 {
        let now = self.clock.unix_ms();
        self.wall_peak_ms
            .fetch_max(now, std::sync::atomic::Ordering::Relaxed)
            .max(now)
    }

    /// A client was served `start` as `partition`'s log start now (rules 9 and 10).
    pub fn observe_log_start(&self, partition: i32, start: i64) {
        let t = self.now_ms();
        let wall_max_ms = self.note_wall();
        let retention_ms = self.lifecycle.and_then(|l| l.retention_ms);
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe_log_start(t, partition, start, wall_max_ms, retention_ms);
    }

    pub fn fault(&self, kind: &'static str, line: String) {
        {
            let mut h = self.history.lock().unwrap_or_else(|e| e.into_inner());
            h.fault_kinds.insert(kind);
            h.faults += 1;
        }
        self.event(format!("fault {kind}: {line}"));
    }

    pub fn broker(&self, id: BrokerId) -> Option<Arc<SimBroker>> {
        match self.slots.lock().ok()?.get(&id) {
            Some(Slot::Up(b)) => Some(b.clone()),
            _ => None,
        }
    }

    pub fn is_down(&self, id: BrokerId) -> bool {
        matches!(
            self.slots
                .lock()
                .map(|s| s.get(&id).map(|x| matches!(x, Slot::Down))),
            Ok(Some(true)) | Ok(None)
        )
    }

    pub fn up_count(&self) -> usize {
        (1..=BROKERS)
            .filter(|id| self.broker(*id).is_some())
            .count()
    }

    pub async fn topic(&self) -> Option<TopicMetadata> {
        self.metadata
            .topic_by_id(self.topic_id)
            .await
            .ok()
            .flatten()
    }

    fn settings(&self, id: BrokerId) -> LogSettings {
        LogSettings {
            broker_id: id,
            wal: WalSettings {
                dir: self.replica_root(id).join("wal"),
                file_bytes_max: 16 << 10,
                budget_bytes: 64 << 20,
                direct_writes: true,
            },
            flush_interval: Duration::from_millis(250),
            flush_bytes: 1 << 20,
            partition_tail_bytes: 16 << 10,
            tail_memory_bytes: usize::MAX,
            producer_id_expiration: oxbow_segment_writer::PRODUCER_ID_EXPIRATION_DEFAULT,
            max_decompressed_batch_bytes:
                oxbow_segment_writer::decompress::DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES,
            durability: Default::default(),
            replication: ReplicationSettings {
                az: Some(zone(id)),
                replication_factor: 3,
                replica_lag_max: Duration::from_millis(500),
                // Every simulated broker shares one secret, so every seed runs the
                // handshake on every internal connection (nonces from the broker's Rng).
                internal_auth: Some(sim_secrets()),
            },
        }
    }

    /// The broker's directory, for the paths its settings name: its WAL and its replica
    /// store (other brokers' WAL copies) are both on its simulated disk, so nothing is
    /// written here.
    fn replica_root(&self, id: BrokerId) -> PathBuf {
        self.root.path().join(format!("b{id}"))
    }

    /// Starts broker `id` if it is down. Returns whether it came up.
    pub async fn start(&self, id: BrokerId) -> bool {
        {
            let Ok(mut slots) = self.slots.lock() else {
                return false;
            };
            let slot = slots.entry(id).or_default();
            if !matches!(slot, Slot::Down) {
                return false;
            }
            *slot = Slot::Starting;
        }
        let up = self.try_start(id).await;
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        match up {
            Some(b) => {
                slots.insert(id, Slot::Up(b));
                true
            }
            None => {
                slots.insert(id, Slot::Down);
                false
            }
        }
    }

    async fn try_start(&self, id: BrokerId) -> Option<Arc<SimBroker>> {
        let meta = self.metas.get(&id)?.clone();
        let metadata: Arc<dyn MetadataStore> = meta.clone();
        let start = {
            let mut s = self.starts.lock().unwrap_or_else(|e| e.into_inner());
            let n = s.entry(id).or_default();
            *n += 1;
            *n
        };
        let registration = BrokerRegistration {
            broker_id: id,
            az: Some(zone(id)),
            kafka_addr: format!("b{id}:9092"),
            http_addr: String::new(),
            internal_addr: internal_addr(id),
            listeners: Default::default(),
        };
        let guard = LeaseGuard::new();
        let lease = match register(&*metadata, &registration, LEASE_TTL, &guard).await {
            Ok(l) => l,
            Err(e) => {
                self.event(format!(
                    "b{id} could not register: {e}; the supervisor retries"
                ));
                return None;
            }
        };
        let listener = self.net.listen(&internal_addr(id), &zone(id));
        let components = LogComponents {
            clock: self.clock.clone(),
            rng: SeededRng::new(self.seed ^ ((id as u64) << 32) ^ start),
            wal_disk: Some(Arc::new(self.disks.get(&id)?.clone())),
            // The same disk: a crash tears both, a failed fsync or a full disk fails both.
            replica_disk: Some(self.disks.get(&id)?.subdir("replicas")),
            transport: self.net.transport(&zone(id)),
        };
        let opened = LogManager::open_with(
            self.settings(id),
            metadata.clone(),
            self.store.clone(),
            ReadCache::new(64 << 20),
            components,
        )
        .await;
        let log = match opened {
            Ok(log) => log,
            Err(e) => {
                let disk_faulted = self
                    .disks
                    .get(&id)
                    .is_some_and(|d| d.faults() != Default::default());
                if meta_faulted(&meta) || disk_faulted {
                    self.event(format!("b{id} exited on start (a fault is injected): {e}"));
                } else {
                    self.violation(format!("b{id} exited on start: {e}"));
                }
                let _ = metadata.revoke_lease(lease.id).await;
                return None;
            }
        };
        log.set_lease_guard(guard.clone());
        let leadership = Arc::new(Leadership::new(log.clone()));
        let stop = CancellationToken::new();
        let hook_log = log.clone();
        let on_new_lease: NewLeaseHook = Arc::new(move |_lease| {
            let log = hook_log.clone();
            Box::pin(async move {
                log.resume_after_lease_loss()
                    .await
                    .map(|_| ())
                    .map_err(|e| oxbow_metadata::Error::Unavailable(e.to_string()))
            })
        });
        let mut tasks = vec![
            tokio::spawn(run_sealer(log.clone(), stop.clone())),
            tokio::spawn(log.clone().run_recoveries(stop.clone())),
            tokio::spawn(log.replicator.clone().run(stop.clone())),
            tokio::spawn(serve_internal(
                listener,
                log.internal_auth().clone(),
                log.replica_store.clone(),
                stop.clone(),
                TaskTracker::new(),
            )),
            tokio::spawn(run_lease_keeper(
                metadata.clone(),
                registration,
                lease,
                guard,
                Some(on_new_lease),
                stop.clone(),
            )),
            tokio::spawn(follow_topic(
                self.clone(),
                id,
                leadership.clone(),
                stop.clone(),
            )),
            tokio::spawn(follow_membership(
                self.clone(),
                id,
                log.clone(),
                stop.clone(),
            )),
        ];
        if let Some(l) = self.lifecycle {
            let policies: Arc<dyn RetentionPolicies> = Arc::new(SimPolicies {
                topic_id: self.topic_id,
                lifecycle: l,
            });
            tasks.push(tokio::spawn(run_compactor(
                log.clone(),
                CompactSettings::new(l.segment_bytes, l.interval, l.delete_delay),
                Some(policies),
                stop.clone(),
            )));
        }
        self.event(format!("b{id} started (start {start})"));
        Some(Arc::new(SimBroker {
            log,
            leadership,
            stop,
            tasks,
        }))
    }

    /// kill -9: the broker's tasks stop where they are; its disk keeps what was fsynced
    /// plus a torn part of the rest (drawn from the seed).
    pub async fn crash(&self, id: BrokerId, lose_disk: bool) -> bool {
        let b = {
            let Ok(mut slots) = self.slots.lock() else {
                return false;
            };
            match slots.remove(&id) {
                Some(Slot::Up(b)) => {
                    slots.insert(id, Slot::Down);
                    b
                }
                Some(other) => {
                    slots.insert(id, other);
                    return false;
                }
                None => return false,
            }
        };
        for t in &b.tasks {
            t.abort();
        }
        b.stop.cancel();
        {
            use std::sync::atomic::Ordering::Relaxed;
            let m = &b.log.compact_metrics;
            let mut c = self
                .lifecycle_counts
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            c.rounds += m.rounds.load(Relaxed);
            c.segments_written += m.segments_written.load(Relaxed);
            c.entries_replaced += m.entries_replaced.load(Relaxed);
            c.entries_expired += m.entries_expired.load(Relaxed);
            c.objects_deleted += m.objects_deleted.load(Relaxed);
            c.key_cleanings += m.key_cleanings.load(Relaxed);
            c.key_records_removed += m.key_records_removed.load(Relaxed);
        }
        let Some(disk) = self.disks.get(&id) else {
            return false;
        };
        let rng = self.rng.clone();
        disk.crash(|_, pending| {
            if pending == 0 {
                0
            } else {
                (rng.next_u64() % (pending as u64 + 1)) as usize
            }
        });
        if lose_disk {
            // Its WAL and its copies of the others' go together.
            disk.lose();
        }
        drop(b);
        true
    }

    /// The supervisor: restarts exited brokers (a failed WAL exits like the real one).
    pub async fn supervise(self, stop: CancellationToken) {
        let mut failed_since: BTreeMap<BrokerId, u64> = BTreeMap::new();
        while !stop.is_cancelled() {
            self.clock.sleep(Duration::from_millis(100)).await;
            for id in 1..=BROKERS {
                if let Some(b) = self.broker(id) {
                    if let Some(why) = b.log.wal_failure() {
                        let since = *failed_since.entry(id).or_insert_with(|| self.now_ms());
                        if self.now_ms() >= since + STORAGE_EXIT_DELAY.as_millis() as u64 {
                            self.event(format!("b{id} exits (storage failure: {why})"));
                            self.crash(id, false).await;
                            failed_since.remove(&id);
                            // As systemd's Restart=on-failure would.
                            tokio::spawn(self.clone().restart_later(
                                id,
                                RESTART_DELAY,
                                stop.clone(),
                            ));
                        }
                    }
                }
            }
        }
    }

    /// Starts `id` after the supervisor's delay, retrying until it is up or `stop`.
    pub async fn restart_later(self, id: BrokerId, delay: Duration, stop: CancellationToken) {
        self.clock.sleep(delay).await;
        while !stop.is_cancelled() && self.broker(id).is_none() {
            if self.is_down(id) && self.start(id).await {
                return;
            }
            self.clock.sleep(RESTART_DELAY).await;
        }
    }

    /// The controller's failover rule (gateway `cluster::controller_state::failover_state`):
    /// a partition whose leader has no live registration moves to a live broker at the next
    /// epoch, with the old leader's tail to recover.
    pub async fn run_controller(self, stop: CancellationToken) {
        while !stop.is_cancelled() {
            self.clock.sleep(Duration::from_millis(200)).await;
            let Ok(live) = self.metadata.list_brokers().await else {
                continue;
            };
            let live: Vec<BrokerId> = live.iter().map(|b| b.broker_id).collect();
            if live.is_empty() {
                continue;
            }
            let Some(topic) = self.topic().await else {
                continue;
            };
            for state in &topic.partitions {
                if live.contains(&state.leader) {
                    continue;
                }
                let to = live[((state.partition + state.leader_epoch) as usize) % live.len()];
                let next = PartitionState {
                    leader: to,
                    leader_epoch: state.leader_epoch + 1,
                    recover_from: state.recover_from.or(Some(state.leader)),
                    transfer_to: None,
                    ..state.clone()
                };
                match self
                    .metadata
                    .update_partition(self.topic_id, state.version, next)
                    .await
                {
                    Ok(s) => {
                        let record = self
                            .metadata
                            .wal_replica_set(state.leader)
                            .await
                            .ok()
                            .flatten();
                        self.event(format!(
                            "controller: p{} from b{} to b{} at epoch {} (b{}'s WAL in sync on {:?})",
                            s.partition,
                            state.leader,
                            to,
                            s.leader_epoch,
                            state.leader,
                            record.map(|r| r.isr)
                        ))
                    }
                    Err(e) => self.event(format!(
                        "controller: moving p{} failed: {e}",
                        state.partition
                    )),
                }
            }
        }
    }

    /// Whether another disk may be lost within the guarantee: `acks=all` with
    /// `min.insync.replicas=2` survives one lost copy at a time, so nothing may still
    /// depend on a copy held by one broker alone (every broker up, no lost WAL or dead
    /// broker's tail still to recover).
    pub async fn disk_loss_allowed(&self) -> bool {
        if self.up_count() != BROKERS as usize {
            return false;
        }
        for id in 1..=BROKERS {
            match self.broker(id) {
                Some(b) if !b.log.owes_own_tail() && b.log.recoveries_pending() == 0 => {}
                _ => return false,
            }
        }
        match self.topic().await {
            Some(t) => t.partitions.iter().all(|p| p.recover_from.is_none()),
            None => false,
        }
    }

    /// Heals every injected fault.
    pub fn heal_all(&self) {
        self.net.heal();
        self.store.set_faults(Default::default());
        for m in self.metas.values() {
            m.set_faults(MetaFaults::default());
        }
        for d in self.disks.values() {
            d.set_faults(Default::default());
        }
        self.set_skew_ms(0);
    }

    /// Stops every broker as a crash would (the end of a run).
    pub async fn stop_all(&self) {
        for id in 1..=BROKERS {
            self.crash(id, false).await;
        }
    }
}

fn meta_faulted(meta: &FaultyMetadata) -> bool {
    meta.faulted()
}

/// The gateway's topic follower, reduced to what the log needs: forget a partition this
/// broker has open once the stored state names another leader.
async fn follow_topic(
    cluster: Cluster,
    id: BrokerId,
    leadership: Arc<Leadership>,
    stop: CancellationToken,
) {
    let Some(meta) = cluster.metas.get(&id).cloned() else {
        return;
    };
    while !stop.is_cancelled() {
        cluster.clock.sleep(Duration::from_millis(100)).await;
        let Ok(Some(topic)) = meta.topic_by_id(cluster.topic_id).await else {
            continue;
        };
        // The gateway's rule, shared: led elsewhere now, or at a newer epoch.
        for state in &topic.partitions {
            leadership.follow_state(topic.topic_id, state);
        }
    }
}

/// The gateway's membership follower, reduced to what the log needs: a broker that joins
/// may be the WAL replica a waiting recovery needs, so waiting recoveries retry at once.
async fn follow_membership(
    cluster: Cluster,
    id: BrokerId,
    log: Arc<LogManager>,
    stop: CancellationToken,
) {
    let Some(meta) = cluster.metas.get(&id).cloned() else {
        return;
    };
    while !stop.is_cancelled() {
        let Ok(mut watch) = meta.watch_brokers().await else {
            cluster.clock.sleep(Duration::from_millis(200)).await;
            continue;
        };
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                e = watch.recv() => match e {
                    Some(oxbow_metadata::BrokerEvent::Joined(_)) => log.retry_recoveries_now(),
                    Some(_) => {}
                    None => break,
                },
            }
        }
    }
}
