//! The transactional workload (issue 16, ARCHITECTURE decision 29): transactional producers
//! and a `read_committed` consumer, driving the segment-writer calls the gateway makes for
//! them, under the same faults as the rest of the simulation.
//!
//! A transactional producer plays its client and its coordinator at once (the coordinator's
//! record in the metadata service is not what this simulates): it runs transactions over one
//! to three partitions — the partitions added first (AddPartitionsToTxn), then batches with
//! the transactional bit at its producer id and epoch, each retried with its sequence until
//! acknowledged, then the decision (mostly COMMIT) and a marker into every added partition
//! through the leader's append gate and `LogManager::enqueue_marker`, retried until
//! acknowledged, as the coordinator's marker writer does (`gateway/src/transactions/
//! markers.rs`). Only then does its next transaction begin (Kafka answers
//! CONCURRENT_TRANSACTIONS until the markers are written).
//!
//! Now and then, mid-transaction, a new instance of the producer takes over (InitProducerId
//! with the same transactional id): the open transaction is aborted under the epoch after
//! its own (the fence, written into each of its partitions), and the new instance goes on at
//! the epoch after that, as Kafka's coordinator hands out. The old instance, now a zombie,
//! keeps appending to its transaction's partitions at its old epoch for a few seconds and,
//! once the fence is written, writes COMMIT markers at it too (a deposed coordinator's late
//! markers): rules 12 and 14 judge what it got in.
//!
//! The consumer reads every partition at `read_committed` from its leader: up to the last
//! stable offset, dropping, as Kafka's client does (`CompletedFetch`), control batches and
//! the batches of a producer from an aborted transaction's first offset until its ABORT
//! marker; it records each record it keeps, and judges rule 15 on every answer.
//!
//! A late reader ([`late_reader`]) reads the partitions again and again from their log start
//! at `read_committed` on a broker that does not lead them (`read_catalogued_isolated`, as the
//! HTTP API serves any partition anywhere): far behind every leader's index floor, across
//! compaction and retention, it is told of aborts by the catalogue's aborted-transaction
//! index, or by the header walk where an entry has none; what it keeps is judged like the
//! consumer's (G1a, rule 12), and the table counts which way its reads (and the consumer's)
//! were answered.

use crate::cluster::{Cluster, PARTITIONS, TOPIC};
use crate::history::Ack;
use crate::txn_check::{Decision, MarkerAck, Txn, TxnBatch, TxnRead};
use crate::workload::{
    classify, leader_partition, produce_once, record_offsets, Fail, ACK_TIMEOUT, READ_BYTES,
};
use oxbow_metadata::clock::{Clock, Rng, SeededRng};
use oxbow_segment_writer::batch::{self, testing::make_txn_batch};
use oxbow_segment_writer::txn::parse_marker;
use oxbow_segment_writer::{AppendPolicy, ErrorKind, Isolation};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Transactional producers in a transactional run.
pub const TXN_PRODUCERS: u64 = 2;
/// In percent: transactions decided ABORT (the rest COMMIT), and those a new instance of
/// their producer fences mid-way (only while the faults run).
const ABORT_PERCENT: u64 = 25;
const FENCE_PERCENT: u64 = 6;
/// How long a zombie keeps trying after its fence began (ms): across a few leader changes.
const ZOMBIE_MS: (u64, u64) = (2_000, 6_000);
/// How long the new instance takes to begin its first transaction after the fence (ms): an
/// application restarting. Meanwhile nothing of its new epoch reaches the fenced partitions
/// but the fence itself, which alone then keeps the zombie out.
const RESTART_MS: (u64, u64) = (300, 2_000);

fn backoff(rng: &dyn Rng) -> Duration {
    Duration::from_millis(50 + rng.next_u64() % 100)
}

/// Retries one produce until it is acknowledged (or refused for good): the transactional
/// producer never gives a batch up, so every transaction it decides has all its batches
/// acknowledged.
async fn produce_acked(
    cluster: &Cluster,
    rng: &dyn Rng,
    partition: i32,
    raw: &[u8],
) -> Result<(i64, i32, bool, u32), Fail> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        match produce_once(cluster, partition, raw).await {
            Ok((offset, epoch, duplicate)) => return Ok((offset, epoch, duplicate, attempts)),
            Err(Fail::Retry(_)) => cluster.clock.sleep(backoff(rng)).await,
            Err(f) => return Err(f),
        }
    }
}

/// One attempt at writing a marker, as the gateway's `Broker::write_txn_marker`: through the
/// partition's append gate, acknowledged once durable.
async fn marker_once(
    cluster: &Cluster,
    partition: i32,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
) -> Result<i64, Fail> {
    let (topic, leader, p, log) = leader_partition(cluster, partition).await?;
    let leadership = cluster
        .broker(leader)
        .ok_or_else(|| Fail::Retry(format!("b{leader} is down")))?
        .leadership
        .clone();
    let permit = leadership
        .append_permit(p.topic_partition, TOPIC)
        .await
        .map_err(classify)?;
    let pending = log
        .enqueue_marker(
            &p,
            producer_id,
            producer_epoch,
            commit,
            0,
            &AppendPolicy::of(&topic.configs),
        )
        .await
        .map_err(classify)?;
    drop(permit);
    match tokio::time::timeout(ACK_TIMEOUT, pending.wait()).await {
        Ok(r) => Ok(r.map_err(classify)?.base_offset),
        Err(_) => Err(Fail::Retry("marker acknowledgement timed out".into())),
    }
}

/// Writes `txn`'s marker into every partition it added, each retried until acknowledged.
async fn write_markers(
    cluster: &Cluster,
    rng: &dyn Rng,
    txn: usize,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
) -> Result<(), String> {
    let (partitions, name) = {
        let h = cluster.history.lock().unwrap_or_else(|e| e.into_inner());
        let t = &h.txn.txns[txn];
        (t.partitions.clone(), t.name())
    };
    for partition in partitions {
        let now = cluster.now_ms();
        cluster
            .history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .txn
            .txns[txn]
            .markers_started_ms
            .entry(partition)
            .or_insert(now);
        let mut attempts = 0u32;
        let offset = loop {
            attempts += 1;
            match marker_once(cluster, partition, producer_id, producer_epoch, commit).await {
                Ok(offset) => break offset,
                Err(Fail::Retry(_)) => cluster.clock.sleep(backoff(rng)).await,
                Err(f) => {
                    return Err(format!(
                        "{name}'s {} marker into p{partition} at epoch {producer_epoch}: {}",
                        if commit { "COMMIT" } else { "ABORT" },
                        f.why()
                    ))
                }
            }
        };
        {
            let mut h = cluster.history.lock().unwrap_or_else(|e| e.into_inner());
            h.txn.txns[txn].markers_acked.insert(partition, offset);
            h.txn.markers.push(MarkerAck {
                txn,
                partition,
                producer_id,
                producer_epoch,
                commit,
                offset,
                zombie: false,
            });
        }
        cluster.event(format!(
            "{name} {} marker p{partition} at {offset} epoch {producer_epoch}{}",
            if commit { "COMMIT" } else { "ABORT" },
            if attempts > 1 {
                format!(" after {attempts} attempts")
            } else {
                String::new()
            }
        ));
    }
    Ok(())
}

/// Records an acknowledged transactional batch for rules 1–4 and 12–14.
fn record_ack(
    cluster: &Cluster,
    batch: usize,
    count: i32,
    timestamp: i64,
    sent_true_ms: i64,
    (offset, leader_epoch, duplicate): (i64, i32, bool),
) {
    let mut h = cluster.history.lock().unwrap_or_else(|e| e.into_inner());
    let b = &mut h.txn.batches[batch];
    b.acked = Some(offset);
    let ack = Ack {
        partition: b.partition,
        producer_id: b.producer_id,
        base_sequence: b.base_sequence,
        count,
        base_offset: offset,
        max_timestamp_ms: timestamp + i64::from(count - 1),
        sent_true_ms,
        leader_epoch,
        duplicate,
    };
    if b.zombie {
        h.txn.zombie_acks += 1;
    }
    h.acks.push(ack);
}

/// One transactional producer until `stop` (then it finishes the transaction it is in);
/// `faults_stop`: no new instance fences it once the faults have ended.
pub async fn producer(
    cluster: Cluster,
    index: u64,
    rng: Arc<dyn Rng>,
    stop: CancellationToken,
    faults_stop: CancellationToken,
) {
    let producer_id = loop {
        match cluster.metadata.allocate_producer_ids(1).await {
            Ok(id) => break id,
            Err(_) => cluster.clock.sleep(Duration::from_millis(100)).await,
        }
    };
    let mut epoch: i16 = 0;
    let mut sequences: BTreeMap<i32, i32> = BTreeMap::new();
    let mut zombies = Vec::new();
    let mut number = 0u64;
    'txns: while !stop.is_cancelled() {
        number += 1;
        let mut partitions: Vec<i32> = Vec::new();
        for _ in 0..1 + rng.next_u64() % 3 {
            let p = (rng.next_u64() % PARTITIONS as u64) as i32;
            if !partitions.contains(&p) {
                partitions.push(p);
            }
        }
        let txn = cluster
            .history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .txn
            .begin(Txn {
                producer: index,
                number,
                producer_id,
                producer_epoch: epoch,
                partitions: partitions.clone(),
                decision: None,
                markers_started_ms: BTreeMap::new(),
                markers_acked: BTreeMap::new(),
            });
        let name = format!("txn{index}.{number}");
        cluster.event(format!(
            "{name} begins: producer {producer_id} epoch {epoch} on {partitions:?}"
        ));
        for _ in 0..1 + rng.next_u64() % 4 {
            let partition = partitions[(rng.next_u64() % partitions.len() as u64) as usize];
            let count = 1 + (rng.next_u64() % 3) as i32;
            let sequence = *sequences.entry(partition).or_default();
            let timestamp = cluster.clock.unix_ms();
            let sent_true_ms = cluster.true_unix_ms();
            let raw = make_txn_batch(count, timestamp, producer_id, epoch, sequence);
            let batch = cluster
                .history
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .txn
                .sent(TxnBatch {
                    txn,
                    partition,
                    producer_id,
                    producer_epoch: epoch,
                    base_sequence: sequence,
                    count,
                    zombie: false,
                    acked: None,
                });
            match produce_acked(&cluster, &*rng, partition, &raw).await {
                Ok((offset, leader_epoch, duplicate, attempts)) => {
                    record_ack(
                        &cluster,
                        batch,
                        count,
                        timestamp,
                        sent_true_ms,
                        (offset, leader_epoch, duplicate),
                    );
                    cluster.event(format!(
                        "{name} acked p{partition} seq {sequence}+{count} at {offset} epoch {leader_epoch}{}{}",
                        if duplicate { " (deduplicated retry)" } else { "" },
                        if attempts > 1 { format!(" after {attempts} attempts") } else { String::new() }
                    ));
                    sequences.insert(partition, sequence + count);
                }
                Err(f) => {
                    cluster.violation(format!(
                        "{name} p{partition} seq {sequence} epoch {epoch}: {}",
                        f.why()
                    ));
                    break 'txns;
                }
            }
        }
        if !faults_stop.is_cancelled() && rng.next_u64() % 100 < FENCE_PERCENT {
            // A new instance's InitProducerId: the open transaction is aborted under the
            // next epoch, which fences this one; the new instance gets the epoch after.
            let fence = epoch + 1;
            cluster
                .history
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .txn
                .txns[txn]
                .decision = Some(Decision::Fenced);
            cluster.event(format!(
                "{name}: a new instance fences producer {producer_id} epoch {epoch}: ABORT at epoch {fence}; the old one goes on as a zombie"
            ));
            let fenced = CancellationToken::new();
            let deadline =
                cluster.now_ms() + ZOMBIE_MS.0 + rng.next_u64() % (ZOMBIE_MS.1 - ZOMBIE_MS.0);
            zombies.push(tokio::spawn(zombie(
                cluster.clone(),
                Zombie {
                    name: name.clone(),
                    txn,
                    producer_id,
                    epoch,
                    partitions: partitions.clone(),
                    sequences: sequences.clone(),
                    deadline_ms: deadline,
                },
                SeededRng::new(rng.next_u64()),
                fenced.clone(),
            )));
            let written = write_markers(&cluster, &*rng, txn, producer_id, fence, false).await;
            fenced.cancel();
            if let Err(why) = written {
                cluster.violation(why);
                break 'txns;
            }
            epoch = fence + 1;
            sequences.clear();
            let restart = RESTART_MS.0 + rng.next_u64() % (RESTART_MS.1 - RESTART_MS.0);
            cluster.clock.sleep(Duration::from_millis(restart)).await;
            continue;
        }
        let commit = rng.next_u64() % 100 >= ABORT_PERCENT;
        cluster
            .history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .txn
            .txns[txn]
            .decision = Some(if commit {
            Decision::Commit
        } else {
            Decision::Abort
        });
        cluster.event(format!(
            "{name} decided {}",
            if commit { "COMMIT" } else { "ABORT" }
        ));
        if let Err(why) = write_markers(&cluster, &*rng, txn, producer_id, epoch, commit).await {
            cluster.violation(why);
            break;
        }
        cluster
            .clock
            .sleep(Duration::from_millis(rng.next_u64() % 200))
            .await;
    }
    for z in zombies {
        let _ = z.await;
    }
}

/// The old instance of a fenced producer (see the module docs).
struct Zombie {
    name: String,
    txn: usize,
    producer_id: i64,
    epoch: i16,
    partitions: Vec<i32>,
    sequences: BTreeMap<i32, i32>,
    deadline_ms: u64,
}

/// Keeps appending to the fenced transaction's partitions at its old epoch until its
/// deadline, and once `fenced` (the fence's markers all written) writes COMMIT markers too.
/// Anything acknowledged is recorded; rules 12 and 14 judge it.
async fn zombie(cluster: Cluster, mut z: Zombie, rng: Arc<dyn Rng>, fenced: CancellationToken) {
    let mut refused: BTreeSet<(i32, bool)> = BTreeSet::new();
    while cluster.now_ms() < z.deadline_ms {
        let partition = z.partitions[(rng.next_u64() % z.partitions.len() as u64) as usize];
        if fenced.is_cancelled() && rng.next_u64().is_multiple_of(3) {
            match marker_once(&cluster, partition, z.producer_id, z.epoch, true).await {
                Ok(offset) => {
                    let mut h = cluster.history.lock().unwrap_or_else(|e| e.into_inner());
                    h.txn.markers.push(MarkerAck {
                        txn: z.txn,
                        partition,
                        producer_id: z.producer_id,
                        producer_epoch: z.epoch,
                        commit: true,
                        offset,
                        zombie: true,
                    });
                    drop(h);
                    cluster.event(format!(
                        "{} zombie COMMIT marker p{partition} at {offset} epoch {} acknowledged",
                        z.name, z.epoch
                    ));
                }
                Err(Fail::Fenced(why)) => {
                    cluster
                        .history
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .txn
                        .zombie_refusals += 1;
                    if refused.insert((partition, true)) {
                        cluster.event(format!(
                            "{} zombie marker p{partition} refused: {why}",
                            z.name
                        ));
                    }
                }
                Err(_) => {}
            }
        } else {
            let count = 1 + (rng.next_u64() % 2) as i32;
            let sequence = *z.sequences.entry(partition).or_default();
            let timestamp = cluster.clock.unix_ms();
            let sent_true_ms = cluster.true_unix_ms();
            let raw = make_txn_batch(count, timestamp, z.producer_id, z.epoch, sequence);
            let batch = cluster
                .history
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .txn
                .sent(TxnBatch {
                    txn: z.txn,
                    partition,
                    producer_id: z.producer_id,
                    producer_epoch: z.epoch,
                    base_sequence: sequence,
                    count,
                    zombie: true,
                    acked: None,
                });
            // Retried until answered or the deadline, as the client's own retries.
            loop {
                match produce_once(&cluster, partition, &raw).await {
                    Ok(answer) => {
                        record_ack(&cluster, batch, count, timestamp, sent_true_ms, answer);
                        cluster.event(format!(
                            "{} zombie acked p{partition} seq {sequence}+{count} at {} epoch {} (producer epoch {})",
                            z.name, answer.0, answer.1, z.epoch
                        ));
                        z.sequences.insert(partition, sequence + count);
                        break;
                    }
                    Err(Fail::Fenced(why)) => {
                        cluster
                            .history
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .txn
                            .zombie_refusals += 1;
                        if refused.insert((partition, false)) {
                            cluster.event(format!(
                                "{} zombie append p{partition} seq {sequence} refused: {why}",
                                z.name
                            ));
                        }
                        break;
                    }
                    Err(Fail::Retry(_)) if cluster.now_ms() < z.deadline_ms => {
                        cluster.clock.sleep(backoff(&*rng)).await;
                    }
                    Err(Fail::Retry(_)) => break,
                    Err(Fail::Fatal(why)) => {
                        cluster.violation(format!(
                            "{} zombie p{partition} seq {sequence} epoch {}: {why}",
                            z.name, z.epoch
                        ));
                        return;
                    }
                }
            }
        }
        cluster
            .clock
            .sleep(Duration::from_millis(100 + rng.next_u64() % 300))
            .await;
    }
    cluster.event(format!("{} zombie stops", z.name));
}

/// Per-partition position of the `read_committed` consumer.
#[derive(Default)]
struct Position {
    next: i64,
    last_epoch: Option<i32>,
    served_by: Option<(i32, i32)>,
}

/// Reads every partition at `read_committed` until `stop` and then until caught up: its
/// position at the high watermark (so the last stable offset reached it).
pub async fn consumer(cluster: Cluster, stop: CancellationToken, drained: CancellationToken) {
    let mut positions: BTreeMap<i32, Position> = BTreeMap::new();
    loop {
        let mut caught_up = true;
        for partition in 0..PARTITIONS {
            let pos = positions.entry(partition).or_default();
            match consume_once(&cluster, partition, pos).await {
                Ok(done) => caught_up &= done,
                Err(_) => caught_up = false,
            }
        }
        if stop.is_cancelled() && caught_up {
            drained.cancel();
            return;
        }
        cluster.clock.sleep(Duration::from_millis(100)).await;
    }
}

/// Reads every partition from its log start at `read_committed` on a broker that does not
/// lead it, over and over, until `stop` (see the module docs).
pub async fn late_reader(cluster: Cluster, stop: CancellationToken) {
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    let mut turn = 0i32;
    while !stop.is_cancelled() {
        for partition in 0..PARTITIONS {
            turn = turn.wrapping_add(1);
            let at = next.entry(partition).or_insert(0);
            match late_read_once(&cluster, partition, *at, turn).await {
                Ok(Some(n)) => *at = n,
                // At the end of what is catalogued: from the start again.
                Ok(None) => *at = 0,
                Err(_) => {}
            }
        }
        cluster.clock.sleep(Duration::from_millis(150)).await;
    }
}

/// One catalogued `read_committed` read of `partition` from `from` on a broker other than its
/// leader; the next position, or `None` at the end.
async fn late_read_once(
    cluster: &Cluster,
    partition: i32,
    from: i64,
    turn: i32,
) -> Result<Option<i64>, Fail> {
    let topic = cluster
        .topic()
        .await
        .ok_or_else(|| Fail::Retry("no topic metadata".into()))?;
    let state = topic
        .partition(partition)
        .ok_or_else(|| Fail::Fatal(format!("p{partition} missing")))?;
    let id = (1..=crate::cluster::BROKERS)
        .map(|i| 1 + (i + turn) % crate::cluster::BROKERS)
        .find(|&id| id != state.leader && cluster.broker(id).is_some())
        .ok_or_else(|| Fail::Retry("no other broker up".into()))?;
    let b = cluster
        .broker(id)
        .ok_or_else(|| Fail::Retry(format!("b{id} is down")))?;
    let tp = oxbow_metadata::TopicPartition::new(topic.topic_id, partition);
    let from = from.max(state.log_start_offset);
    let before = paths_of(&b.log);
    let r = match b
        .log
        .read_catalogued_isolated(
            tp,
            state.log_start_offset,
            from,
            READ_BYTES,
            true,
            Isolation::ReadCommitted,
        )
        .await
    {
        Ok(r) => r,
        Err(e) if e.kind() == ErrorKind::OffsetOutOfRange => return Ok(None),
        Err(e) => return Err(classify(e)),
    };
    count_paths(cluster, before, paths_of(&b.log));
    let Some(aborted) = r.aborted.clone() else {
        cluster.violation(format!(
            "late reader p{partition}: a read_committed read on b{id} carried no aborted transactions list"
        ));
        return Err(Fail::Retry("no aborted list".into()));
    };
    let mut pending: Vec<_> = aborted.iter().collect();
    pending.sort_by_key(|a| std::cmp::Reverse((a.first_offset, a.producer_id)));
    let mut skipping: BTreeSet<i64> = BTreeSet::new();
    let mut kept = Vec::new();
    let mut next = from;
    let t_ms = cluster.now_ms();
    for raw in &r.batches {
        let Ok(Some(h)) = batch::peek_header(raw) else {
            cluster.violation(format!(
                "late reader p{partition}: an unreadable batch from b{id}"
            ));
            break;
        };
        if h.last_offset() < next {
            continue;
        }
        let at = next;
        while pending
            .last()
            .is_some_and(|a| a.first_offset <= h.last_offset())
        {
            if let Some(a) = pending.pop() {
                skipping.insert(a.producer_id);
            }
        }
        next = h.last_offset() + 1;
        if h.is_control() {
            if parse_marker(raw, &h).is_some_and(|m| !m.commit) {
                skipping.remove(&h.producer_id);
            }
            continue;
        }
        if !h.is_transactional() || skipping.contains(&h.producer_id) {
            continue;
        }
        let offsets = record_offsets(raw, &h).map_err(Fail::Fatal)?;
        for offset in offsets.into_iter().filter(|&o| o >= at) {
            kept.push(TxnRead {
                offset,
                producer_id: h.producer_id,
                producer_epoch: h.producer_epoch,
                sequence: h.base_sequence + (offset - h.base_offset) as i32,
                transactional: true,
                t_ms,
            });
        }
    }
    if !kept.is_empty() {
        cluster
            .history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .txn
            .late_read
            .entry(partition)
            .or_default()
            .extend(kept);
    }
    Ok((next > from).then_some(next))
}

/// A broker's (index, header walk) answers to `read_committed` reads so far.
fn paths_of(log: &oxbow_segment_writer::LogManager) -> (u64, u64) {
    use std::sync::atomic::Ordering;
    (
        log.metrics.aborts_from_catalog.load(Ordering::Relaxed),
        log.metrics.aborts_by_header_walk.load(Ordering::Relaxed),
    )
}

/// Adds the answers between two readings of [`paths_of`] to the run's counts.
fn count_paths(cluster: &Cluster, before: (u64, u64), after: (u64, u64)) {
    let mut h = cluster.history.lock().unwrap_or_else(|e| e.into_inner());
    h.txn.index_reads += after.0.saturating_sub(before.0);
    h.txn.walk_reads += after.1.saturating_sub(before.1);
}

/// One `read_committed` fetch of one partition; `Ok(true)` when the position is at the high
/// watermark.
async fn consume_once(cluster: &Cluster, partition: i32, pos: &mut Position) -> Result<bool, Fail> {
    let (topic, leader, p, log) = leader_partition(cluster, partition).await?;
    let epoch = p.leader_epoch().map_err(classify)?;
    let current = topic.partition(partition).map(|s| s.leader_epoch);
    if current != Some(epoch) {
        return Err(Fail::Retry(format!(
            "b{leader} serves epoch {epoch}, the metadata says {current:?}"
        )));
    }
    if pos.served_by != Some((leader, epoch)) {
        if let Some(last_epoch) = pos.last_epoch {
            match p.end_offset_for(last_epoch).map_err(classify)? {
                Some((_, end)) if end >= pos.next => {}
                answer => cluster.violation(format!(
                    "txn consumer p{partition}: b{leader} epoch {epoch} answers {answer:?} for epoch {last_epoch}, below the position {} read at read_committed: a truncation",
                    pos.next
                )),
            }
        }
        pos.served_by = Some((leader, epoch));
    }
    let before = paths_of(&log);
    let r = match log
        .read_isolated(&p, pos.next, READ_BYTES, true, Isolation::ReadCommitted)
        .await
    {
        Ok(r) => {
            count_paths(cluster, before, paths_of(&log));
            r
        }
        Err(e) if e.kind() == ErrorKind::OffsetOutOfRange => {
            let (start, _, _) = p.offsets().map_err(classify)?;
            if pos.next < start {
                cluster.event(format!(
                    "txn consumer p{partition}: reset from {} to the log start {start}",
                    pos.next
                ));
                pos.next = start;
                let mut h = cluster.history.lock().unwrap_or_else(|e| e.into_inner());
                let reset = h.txn.resets.entry(partition).or_default();
                *reset = (*reset).max(start);
                return Ok(false);
            }
            return Err(classify(e));
        }
        Err(e) => return Err(classify(e)),
    };
    let lso = r.last_stable_offset;
    // Rule 15.
    if lso > r.high_watermark {
        cluster.violation(format!(
            "txn consumer p{partition}: b{leader} epoch {epoch} serves last stable offset {lso} above its high watermark {} (rule 15)",
            r.high_watermark
        ));
    }
    {
        let mut h = cluster.history.lock().unwrap_or_else(|e| e.into_inner());
        let seen = h.txn.lso_seen.entry((partition, epoch)).or_insert(lso);
        let before = *seen;
        *seen = before.max(lso);
        drop(h);
        if lso < before {
            cluster.violation(format!(
                "txn consumer p{partition}: the last stable offset moved back from {before} to {lso} on b{leader} epoch {epoch} (rule 15)"
            ));
        }
    }
    let Some(aborted) = r.aborted.clone() else {
        cluster.violation(format!(
            "txn consumer p{partition}: a read_committed read on b{leader} carried no aborted transactions list"
        ));
        return Err(Fail::Retry("no aborted list".into()));
    };
    // Kafka's CompletedFetch at read_committed: aborted transactions by first offset; a
    // producer's batches are skipped from there until its ABORT marker.
    let mut pending: Vec<_> = aborted.iter().collect();
    pending.sort_by_key(|a| std::cmp::Reverse((a.first_offset, a.producer_id)));
    let mut skipping: BTreeSet<i64> = BTreeSet::new();
    let mut kept = Vec::new();
    let t_ms = cluster.now_ms();
    for raw in &r.batches {
        let Ok(Some(h)) = batch::peek_header(raw) else {
            cluster.violation(format!(
                "txn consumer p{partition}: an unreadable batch from b{leader}"
            ));
            break;
        };
        if h.last_offset() >= lso {
            cluster.violation(format!(
                "txn consumer p{partition}: b{leader} epoch {epoch} returned the batch at {}..={} at read_committed, at or past the last stable offset {lso} (rule 15)",
                h.base_offset,
                h.last_offset()
            ));
        }
        if h.last_offset() < pos.next {
            continue;
        }
        let from = pos.next;
        while pending
            .last()
            .is_some_and(|a| a.first_offset <= h.last_offset())
        {
            if let Some(a) = pending.pop() {
                skipping.insert(a.producer_id);
            }
        }
        pos.next = h.last_offset() + 1;
        pos.last_epoch = Some(h.partition_leader_epoch);
        if h.is_control() {
            if parse_marker(raw, &h).is_some_and(|m| !m.commit) {
                skipping.remove(&h.producer_id);
            }
            continue;
        }
        if h.is_transactional() && skipping.contains(&h.producer_id) {
            continue;
        }
        let offsets = record_offsets(raw, &h).map_err(Fail::Fatal)?;
        for offset in offsets.into_iter().filter(|&o| o >= from) {
            kept.push(TxnRead {
                offset,
                producer_id: h.producer_id,
                producer_epoch: h.producer_epoch,
                sequence: h.base_sequence + (offset - h.base_offset) as i32,
                transactional: h.is_transactional(),
                t_ms,
            });
        }
    }
    if !kept.is_empty() {
        cluster
            .history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .txn
            .read
            .entry(partition)
            .or_default()
            .extend(kept);
    }
    Ok(pos.next >= r.high_watermark)
}

/// Rule 16 at the end (every broker up, the consumer drained): no partition leader has a
/// transaction open and every last stable offset is at its high watermark.
pub async fn final_state(cluster: &Cluster) -> Vec<String> {
    let mut out = Vec::new();
    for partition in 0..PARTITIONS {
        let (_, leader, p, _) = match leader_partition(cluster, partition).await {
            Ok(x) => x,
            Err(f) => {
                out.push(format!(
                    "p{partition} is not served at the end: {}",
                    f.why()
                ));
                continue;
            }
        };
        let (Ok((_, high, _)), Ok(lso), Ok(open)) =
            (p.offsets(), p.last_stable_offset(), p.open_txns())
        else {
            out.push(format!("p{partition} on b{leader}: no state at the end"));
            continue;
        };
        if lso != high || !open.is_empty() {
            out.push(format!(
                "p{partition} on b{leader}: last stable offset {lso} below the high watermark {high} after the faults, transactions open: {open:?} (producer, epoch, first offset) (rule 16)"
            ));
        }
    }
    out
}
