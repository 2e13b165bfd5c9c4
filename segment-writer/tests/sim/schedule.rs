//! The fault schedule: one fault every few hundred simulated milliseconds, its kind, target
//! and duration drawn from the run's seed; each heals by itself (a restart, a lifted
//! partition or outage) so the cluster must come back on its own.

use crate::cluster::{zone, Cluster, BROKERS, PARTITIONS};
use crate::meta::MetaFaults;
use oxbow_metadata::clock::{Clock, Rng};
use oxbow_metadata::{CatalogCommit, CatalogEntry};
use oxbow_segment_writer::faulty_store::StoreFaults;
use oxbow_segment_writer::wal_disk::DiskFaults;
use oxbow_segment_writer::Handoff;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Every kind of fault the schedule injects (the figure "distinct fault kinds" counts the
/// ones a run exercised).
pub const FAULT_KINDS: &[&str] = &[
    "crash",
    "crash-lost-disk",
    "cluster-crash-lost-disk-first",
    "zone-partition",
    "store-outage",
    "store-errors-timeouts-latency",
    "store-lost-put-acks",
    "metadata-cut",
    "metadata-flaky-txns",
    "fsync-failure",
    "disk-full",
    "clock-step",
];

/// Graceful leadership moves (the gateway's balancer, `oxbow partitions reassign`) come
/// from a stream of their own, so adding them left the draws of the kinds above as they
/// were for each seed.
pub const MOVE_KIND: &str = "graceful-move";

/// The most a clock step moves a broker's wall clock from the true time (either way).
pub const MAX_SKEW_MS: i64 = 3000;

fn between(rng: &dyn Rng, lo_ms: u64, hi_ms: u64) -> Duration {
    Duration::from_millis(lo_ms + rng.next_u64() % (hi_ms - lo_ms + 1))
}

fn any_broker(rng: &dyn Rng) -> i32 {
    1 + (rng.next_u64() % BROKERS as u64) as i32
}

/// Injects faults until `stop`; `run_stop` bounds the restarts it schedules.
pub async fn inject(
    cluster: Cluster,
    rng: Arc<dyn Rng>,
    stop: CancellationToken,
    run_stop: CancellationToken,
) {
    loop {
        let wait = between(&*rng, 200, 1200);
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = cluster.clock.sleep(wait) => {}
        }
        let kind = FAULT_KINDS[(rng.next_u64() % FAULT_KINDS.len() as u64) as usize];
        let all_up = cluster.up_count() == BROKERS as usize;
        let b = any_broker(&*rng);
        let lasting = between(&*rng, 500, 3000);
        match kind {
            "crash" | "crash-lost-disk" => {
                let lose = kind == "crash-lost-disk";
                if !all_up || (lose && !cluster.disk_loss_allowed().await) {
                    continue;
                }
                if cluster.crash(b, lose).await {
                    cluster.fault(kind, format!("b{b}, restarted after {lasting:?}"));
                    tokio::spawn(cluster.clone().restart_later(b, lasting, run_stop.clone()));
                }
            }
            "cluster-crash-lost-disk-first" => {
                if !cluster.disk_loss_allowed().await {
                    continue;
                }
                for id in 1..=BROKERS {
                    cluster.crash(id, id == b).await;
                }
                cluster.fault(
                    kind,
                    format!("every broker; b{b} lost its disk and starts first, the others after {lasting:?}"),
                );
                tokio::spawn(
                    cluster
                        .clone()
                        .restart_later(b, Duration::ZERO, run_stop.clone()),
                );
                for id in (1..=BROKERS).filter(|id| *id != b) {
                    tokio::spawn(cluster.clone().restart_later(id, lasting, run_stop.clone()));
                }
            }
            "zone-partition" => {
                let other = 1 + (b % BROKERS);
                cluster.net.partition(&zone(b), &zone(other));
                cluster.fault(
                    kind,
                    format!("{} | {} for {lasting:?}", zone(b), zone(other)),
                );
                let c = cluster.clone();
                tokio::spawn(async move {
                    c.clock.sleep(lasting).await;
                    c.net.heal();
                    c.event("network healed".into());
                });
            }
            "store-outage" | "store-errors-timeouts-latency" | "store-lost-put-acks" => {
                let faults = match kind {
                    "store-outage" => StoreFaults {
                        down: true,
                        ..StoreFaults::default()
                    },
                    "store-errors-timeouts-latency" => StoreFaults {
                        error_rate: 0.3,
                        timeout_rate: 0.05,
                        timeout: Duration::from_secs(2),
                        latency_max: Duration::from_millis(80),
                        ..StoreFaults::default()
                    },
                    _ => StoreFaults {
                        lost_put_ack_rate: 0.5,
                        ..StoreFaults::default()
                    },
                };
                cluster.store.set_faults(faults);
                cluster.fault(kind, format!("for {lasting:?}"));
                let c = cluster.clone();
                tokio::spawn(async move {
                    c.clock.sleep(lasting).await;
                    c.store.set_faults(StoreFaults::default());
                    c.event("object store healed".into());
                });
            }
            "metadata-cut" | "metadata-flaky-txns" => {
                let Some(meta) = cluster.metas.get(&b).cloned() else {
                    continue;
                };
                let faults = if kind == "metadata-cut" {
                    MetaFaults {
                        cut: true,
                        ..MetaFaults::default()
                    }
                } else {
                    MetaFaults {
                        fail_rate: 0.3,
                        lost_ack_rate: 0.2,
                        ..MetaFaults::default()
                    }
                };
                let lasting = if kind == "metadata-cut" {
                    between(&*rng, 1000, 5000)
                } else {
                    lasting
                };
                meta.set_faults(faults);
                cluster.fault(kind, format!("b{b} for {lasting:?}"));
                let c = cluster.clone();
                tokio::spawn(async move {
                    c.clock.sleep(lasting).await;
                    meta.set_faults(MetaFaults::default());
                    c.event(format!("b{b} reaches the metadata service again"));
                });
            }
            "fsync-failure" | "disk-full" => {
                if cluster.broker(b).is_none() {
                    continue;
                }
                let Some(disk) = cluster.disks.get(&b).cloned() else {
                    continue;
                };
                let (faults, lasting) = if kind == "fsync-failure" {
                    (
                        DiskFaults {
                            sync_fails: true,
                            ..DiskFaults::default()
                        },
                        Duration::from_millis(100),
                    )
                } else {
                    (
                        DiskFaults {
                            full: true,
                            ..DiskFaults::default()
                        },
                        lasting,
                    )
                };
                disk.set_faults(faults);
                cluster.fault(kind, format!("b{b} for {lasting:?}"));
                let c = cluster.clone();
                tokio::spawn(async move {
                    c.clock.sleep(lasting).await;
                    disk.set_faults(DiskFaults::default());
                    c.event(format!("b{b}'s disk healed"));
                });
            }
            "clock-step" => {
                let skew = (rng.next_u64() % (2 * MAX_SKEW_MS as u64)) as i64 - MAX_SKEW_MS;
                cluster.set_skew_ms(skew);
                cluster.fault(kind, format!("wall clock {skew:+} ms for {lasting:?}"));
                let c = cluster.clone();
                tokio::spawn(async move {
                    c.clock.sleep(lasting).await;
                    c.set_skew_ms(0);
                });
            }
            _ => {}
        }
    }
}

/// Moves one partition gracefully every so often until `stop`: its leader hands it to
/// another live broker through its `Leadership` (seal, catalog end, epoch swap).
pub async fn moves(cluster: Cluster, rng: Arc<dyn Rng>, stop: CancellationToken) {
    loop {
        let wait = between(&*rng, 300, 1500);
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = cluster.clock.sleep(wait) => {}
        }
        move_one(&cluster, &*rng).await;
    }
}

async fn move_one(cluster: &Cluster, rng: &dyn Rng) {
    let partition = (rng.next_u64() % PARTITIONS as u64) as i32;
    let Some(topic) = cluster.topic().await else {
        return;
    };
    let Some(state) = topic.partition(partition) else {
        return;
    };
    let from = state.leader;
    let to = 1 + ((from as u64 + rng.next_u64() % (BROKERS as u64 - 1)) % BROKERS as u64) as i32;
    let (Some(leader), Some(_)) = (cluster.broker(from), cluster.broker(to)) else {
        return;
    };
    cluster.fault(MOVE_KIND, format!("p{partition} from b{from} to b{to}"));
    let c = cluster.clone();
    let topic_id = topic.topic_id;
    tokio::spawn(async move {
        let moved = leader
            .leadership
            .hand_off(&[Handoff {
                topic_id,
                partition,
                to,
                requested: false,
            }])
            .await;
        match moved.first() {
            Some(m) => c.event(format!(
                "p{partition} handed to b{to} at epoch {}",
                m.state.leader_epoch
            )),
            None => c.event(format!("p{partition} stayed on b{from}")),
        }
    });
}

/// DeleteRecords (and retention, which takes the same step): the leader of a partition
/// raises its log start to an offset up to its high watermark, every so often. Its own
/// stream, like graceful moves, so the other draws stay as they were for each seed. The
/// checker then exempts what lies below the final log start from rules 1 and 6, and allows
/// a consumer to skip forward only to a log start that was set (ARCHITECTURE decision 25).
pub const DELETE_KIND: &str = "delete-records";

pub async fn deletions(cluster: Cluster, rng: Arc<dyn Rng>, stop: CancellationToken) {
    loop {
        let wait = between(&*rng, 500, 3000);
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = cluster.clock.sleep(wait) => {}
        }
        let partition = (rng.next_u64() % PARTITIONS as u64) as i32;
        let draw = rng.next_u64();
        let Some(topic) = cluster.topic().await else {
            continue;
        };
        let Some(state) = topic.partition(partition) else {
            continue;
        };
        let leader = state.leader;
        let Some(broker) = cluster.broker(leader) else {
            continue;
        };
        let tp = oxbow_metadata::TopicPartition::new(topic.topic_id, partition);
        let Some(p) = broker.log.get(&tp) else {
            continue;
        };
        let Ok((start, high, _)) = p.offsets() else {
            continue;
        };
        // Up to the high watermark, rarely past what is sealed (refused then).
        let span = u64::try_from((high - start).max(0)).unwrap_or(0);
        let to = start + i64::try_from(draw % (span / 2 + 1)).unwrap_or(0);
        cluster.fault(DELETE_KIND, format!("p{partition} below {to} on b{leader}"));
        cluster
            .history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .request_delete(partition, to);
        match broker.log.advance_log_start(&p, to).await {
            Ok(now) => {
                cluster
                    .history
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .set_log_start(partition, now);
                cluster.event(format!("p{partition}: log start {now} (b{leader})"));
            }
            Err(e) => cluster.event(format!("p{partition}: delete-records refused: {e}")),
        }
    }
}

/// A zombie's late commit: the catalog entries of a seal the service refused as fenced
/// (a deposed leader's, its object already in the store) land anyway, written straight
/// into the key-value store past every check of the commit — the worst a deposed leader
/// could do if its lease fence and the epoch check both missed it (ARCHITECTURE decision
/// 23). Readers must still never be served its data past the next epoch's start (rule 8
/// and rules 1–6). Its own stream, like graceful moves, so the other draws stay as they
/// were for each seed.
pub const ZOMBIE_KIND: &str = "zombie-commit";

pub async fn zombies(cluster: Cluster, rng: Arc<dyn Rng>, stop: CancellationToken) {
    loop {
        // Soon after the refusal, while the new leader has not yet written past the
        // zombie's offsets (where its higher epoch would outrank the zombie anyway).
        let wait = between(&*rng, 20, 400);
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = cluster.clock.sleep(wait) => {}
        }
        let refused = cluster
            .meta_counts
            .fenced_commits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            // The latest refusal: the likeliest to reach past the new leader's end.
            .pop();
        match refused {
            Some(commit) => land_raw(&cluster, &commit).await,
            // Refusals are rare (a deposed leader usually stops before it seals): forge the
            // divergent tail one would have left.
            None => forge_tail(&cluster, &*rng).await,
        }
    }
}

/// Forges what a deposed leader that wrote past its successor's start would leave: an
/// object holding a batch at the start of the partition's latest epoch, written under the
/// epoch before (never acknowledged: a producer id no client uses), and its catalog entry
/// landed raw. It claims far more offsets than the run will write, so nothing of a later
/// epoch covers its end: only the epoch cut keeps readers from being served it.
async fn forge_tail(cluster: &Cluster, rng: &dyn Rng) {
    use object_store::{path::Path as ObjectPath, ObjectStoreExt, PutPayload};
    use oxbow_metadata::{EpochFence, TopicPartition};
    use oxbow_segment_writer::batch::testing::make_idempotent_batch;
    use oxbow_segment_writer::object::{self, Chunk};
    let partition = (rng.next_u64() % PARTITIONS as u64) as i32;
    let Some(topic) = cluster.topic().await else {
        return;
    };
    let Some(state) = topic.partition(partition) else {
        return;
    };
    let epochs = state.leader_epochs.entries();
    let [.., previous, latest] = epochs else {
        return;
    };
    const CLAIMED: i32 = 1_000_000;
    let mut raw = make_idempotent_batch(3, cluster.clock.unix_ms(), 1 << 40, 0, 0);
    // lastOffsetDelta (bytes 23..27, inside the CRC) claims CLAIMED offsets.
    raw[23..27].copy_from_slice(&(CLAIMED - 1).to_be_bytes());
    let crc = crc32c::crc32c(&raw[21..]);
    raw[17..21].copy_from_slice(&crc.to_be_bytes());
    let batch = oxbow_segment_writer::batch::stamp(&raw, latest.start_offset, previous.epoch, None);
    let tp = TopicPartition::new(topic.topic_id, partition);
    let key = format!("data/zombie/{:016x}.oxb", rng.next_u64());
    let sealed = object::build(
        key.clone(),
        0,
        &[Chunk {
            topic_partition: tp,
            leader_epoch: previous.epoch,
            base_offset: latest.start_offset,
            last_offset: latest.start_offset + i64::from(CLAIMED) - 1,
            max_timestamp_ms: cluster.clock.unix_ms(),
            batches: vec![batch],
            carried_producers: Vec::new(),
            producers_complete: false,
            txn: None,
        }],
    );
    if cluster
        .store
        .inner()
        .put(
            &ObjectPath::from(key.as_str()),
            PutPayload::from_bytes(sealed.body.clone()),
        )
        .await
        .is_err()
    {
        return;
    }
    let commit = CatalogCommit {
        entries: sealed.entries,
        fences: vec![EpochFence {
            topic_partition: tp,
            leader_epoch: previous.epoch,
        }],
        writer: None,
    };
    land_raw(cluster, &commit).await;
}

async fn land_raw(cluster: &Cluster, commit: &CatalogCommit) {
    use oxbow_metadata::keys::object_index::{self, ObjectIndex};
    use oxbow_metadata::kv::{Kv, Op, Txn};
    let root = cluster.raw.root().clone();
    let broker_id = commit.writer.map_or(0, |w| w.broker_id);
    let mut objects: Vec<(String, Vec<CatalogEntry>)> = Vec::new();
    for e in &commit.entries {
        match objects.iter_mut().find(|(k, _)| *k == e.object_key) {
            Some((_, v)) => v.push(e.clone()),
            None => objects.push((e.object_key.clone(), vec![e.clone()])),
        }
    }
    for (object_key, entries) in objects {
        let spans: Vec<String> = entries
            .iter()
            .map(|e| {
                format!(
                    "p{} {}..={} e{}",
                    e.partition, e.base_offset, e.last_offset, e.leader_epoch
                )
            })
            .collect();
        let key = object_index::ser_key(&root, broker_id, &object_key);
        let value = match object_index::ser_value(&ObjectIndex {
            broker_id,
            object_key: object_key.clone(),
            entries,
        }) {
            Ok(v) => v,
            Err(e) => {
                cluster.event(format!("zombie commit not encodable: {e}"));
                continue;
            }
        };
        match cluster
            .raw
            .kv()
            .txn(Txn::new().then([Op::put(key, value)]))
            .await
        {
            Ok(_) => cluster.fault(
                ZOMBIE_KIND,
                format!("b{broker_id}'s refused seal lands: {}", spans.join(", ")),
            ),
            Err(e) => cluster.event(format!("zombie commit failed: {e}")),
        }
    }
}
