//! The signals that page on-call (the seed's list): partitions without a serving leader or
//! short of in-sync copies, the controller, the broker's load and headroom (partitions led,
//! runtime busy time, free disk).
//!
//! A "replica" of a partition in Oxbow is a copy of its leader's WAL on another broker (in
//! another zone); sealed data is in the object store and needs none. A partition is
//! under-replicated while its leader's live, recorded in-sync WAL copies (its own
//! included) are fewer than `--wal-replication-factor`, capped by the most brokers seen
//! live at once since start: a lost zone's broker counts until it comes back or is
//! replaced (the leader re-chooses its replicas among the brokers left, which would
//! otherwise hide the loss), and a single node is not under-replicated. After an
//! intentional scale-in below the factor, it counts until the brokers restart (or the
//! factor is lowered). Offline: its leader of record is not a live broker, or is still
//! recovering the tail a dead leader left.

use super::scrape::{Labels, Scrape};
use crate::broker::Broker;
use std::fmt;
use std::path::Path;
use std::sync::atomic::Ordering;

/// Partition counts by health, from this broker's view of the cluster.
#[derive(Debug, Default, PartialEq)]
pub struct PartitionHealth {
    /// Partitions whose leader of record is this broker.
    pub led: u64,
    /// Of those, the ones whose WAL has fewer live in-sync copies than replicas.
    pub under_replicated: u64,
    /// Partitions (any leader) that no broker serves now.
    pub offline: u64,
}

/// Counts [`PartitionHealth`] over every topic this broker knows.
pub fn partition_health(b: &Broker) -> PartitionHealth {
    let me = b.settings.broker_id;
    let live = |id: i32| id == me || b.cluster.is_live(id);
    let mine = b.cluster.wal_copies(me);
    let copies = 1 + mine.isr.iter().filter(|id| live(**id)).count();
    let short = copies < wanted_copies(b);
    let mut h = PartitionHealth::default();
    for topic in b.topics() {
        for p in &topic.partitions {
            if !live(p.leader) || p.recover_from.is_some() {
                h.offline += 1;
            } else if p.leader == me {
                h.led += 1;
                h.under_replicated += u64::from(short);
            }
        }
    }
    h
}

/// How many copies of its WAL (the leader's own included) a partition should have:
/// `--wal-replication-factor`, capped by the most brokers seen live at once (module docs).
/// The under-replicated count and the replicas Metadata lists both follow it.
pub fn wanted_copies(b: &Broker) -> usize {
    b.log
        .replicator
        .replication_factor()
        .min(note_live_brokers(b))
}

/// Notes how many brokers are live now; returns the most seen at once since start.
pub fn note_live_brokers(b: &Broker) -> usize {
    let live = b.cluster.live_ids().len().max(1) as u64;
    let before = b
        .metrics
        .brokers_seen_max
        .fetch_max(live, Ordering::Relaxed);
    before.max(live) as usize
}

pub(super) fn cluster(b: &Broker, s: &mut Scrape) -> fmt::Result {
    let h = partition_health(b);
    s.gauge(
        "oxbow_partitions_led",
        "Partitions whose leader is this broker (compare across brokers for skew).",
        h.led,
    )?;
    s.gauge(
        "oxbow_under_replicated_partitions",
        "Partitions led here whose WAL has fewer live in-sync copies than WAL replicas \
         (Kafka's UnderReplicatedPartitions; should be 0).",
        h.under_replicated,
    )?;
    s.gauge(
        "oxbow_offline_partitions",
        "Partitions with no serving leader as this broker sees them: the leader of record is \
         not live, or is recovering a dead leader's WAL tail (Kafka's OfflinePartitionsCount; \
         every broker reports the whole cluster, so take the max, not the sum).",
        h.offline,
    )?;
    let me = b.settings.broker_id;
    s.gauge(
        "oxbow_active_controller",
        "1 on the broker holding the controller post (Kafka's ActiveControllerCount).",
        u8::from(b.cluster.controller() == Some(me)) as u32,
    )?;
    s.gauge(
        "oxbow_live_brokers",
        "Brokers this broker sees registered (live leases), itself included.",
        b.cluster.live_ids().len().max(1),
    )
}

/// How far behind the metadata service this broker's watches are (`cluster::watch_metrics`).
pub(super) fn watches(b: &Broker, s: &mut Scrape) -> fmt::Result {
    let mut queued = Vec::new();
    let mut ends = Vec::new();
    let catalog = b
        .metadata
        .catalog_watch_lag()
        .map(|(q, e)| ("catalog", q, e));
    for (name, q, e) in b
        .cluster
        .watch_metrics
        .snapshot()
        .into_iter()
        .chain(catalog)
    {
        let labels: Labels = vec![("watch", name.to_string())];
        queued.push((labels.clone(), q as u64));
        ends.push((labels, e));
    }
    s.gauges(
        "oxbow_metadata_watch_queued_events",
        "Changes the metadata service delivered to this broker that it has not applied yet, \
         per watch (brokers, topics, security: this broker's view; catalog: its in-memory \
         segment catalogue, counted in deliveries; controller_*: the controller's event \
         queue, Kafka's EventQueueSize). A watch ends at 1024.",
        &queued,
    )?;
    s.counters(
        "oxbow_metadata_watch_ends_total",
        "Watches that ended (fell 1024 events behind, or the metadata service lost the \
         stream) and were replaced by a full re-list, per watch.",
        &ends,
    )
}

/// The async runtime's load: tokio's stable runtime metrics. `1 - rate(busy) / workers` is
/// the share of time the workers were idle (Kafka's NetworkProcessorAvgIdlePercent).
pub(super) fn runtime(s: &mut Scrape) -> fmt::Result {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return Ok(());
    };
    let m = handle.metrics();
    let workers = m.num_workers();
    let busy: f64 = (0..workers)
        .map(|w| m.worker_total_busy_duration(w).as_secs_f64())
        .sum();
    s.gauge(
        "oxbow_runtime_workers",
        "Worker threads of the broker's async runtime.",
        workers,
    )?;
    s.counter(
        "oxbow_runtime_busy_seconds_total",
        "Time the runtime's workers spent running tasks, summed over workers (a counter; \
         busy share = rate / workers).",
        busy,
    )?;
    s.gauge(
        "oxbow_runtime_global_queue_depth",
        "Tasks waiting in the runtime's global queue (work arriving faster than it is run).",
        m.global_queue_depth(),
    )?;
    s.gauge(
        "oxbow_runtime_alive_tasks",
        "Tasks alive in the runtime (connections, partitions' workers, timers).",
        m.num_alive_tasks(),
    )
}

/// Size and free space of the filesystems holding the WAL and the read cache's disk tier.
pub(super) fn disks(b: &Broker, s: &mut Scrape) -> fmt::Result {
    let mut size = Vec::new();
    let mut free = Vec::new();
    let dirs = [("wal", b.log.wal_dir()), ("cache", b.log.cache_dir())];
    for (what, dir) in dirs {
        if let Some((total, available)) = dir.and_then(filesystem) {
            let labels: Labels = vec![("dir", what.to_string())];
            size.push((labels.clone(), total));
            free.push((labels, available));
        }
    }
    s.gauges(
        "oxbow_filesystem_size_bytes",
        "Size of the filesystem holding each of this broker's directories (dir=wal, cache).",
        &size,
    )?;
    s.gauges(
        "oxbow_filesystem_free_bytes",
        "Bytes an unprivileged writer may still use on the filesystem holding each of this \
         broker's directories: the WAL fails, and the broker exits, when it runs out.",
        &free,
    )
}

fn filesystem(dir: &Path) -> Option<(u64, u64)> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    let block = st.fragment_size() as u64;
    Some((
        (st.blocks() as u64).saturating_mul(block),
        (st.blocks_available() as u64).saturating_mul(block),
    ))
}
