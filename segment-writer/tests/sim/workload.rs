//! The simulation's clients: idempotent producers with `acks=all` (one batch in flight per
//! partition, retried with the same sequence until acknowledged, as librdkafka's idempotent
//! producer does), and a consumer that reads every partition from offset 0 and, after each
//! leader change, validates its position as KIP-320 consumers do (OffsetForLeaderEpoch on
//! the new leader with the epoch of the last batch it read).
//!
//! Clients find leaders from the stored partition state (what a Metadata request answers)
//! and call the leader's log directly: the Kafka codec is not what this simulates.

use crate::cluster::{Cluster, PARTITIONS};
use crate::history::{is_tombstone, key_of, Ack, StoredBatch, Unsettled};
use object_store::ObjectStoreExt;
use oxbow_metadata::clock::{Clock, Rng};
use oxbow_metadata::TopicMetadata;
use oxbow_segment_writer::batch::{
    self,
    testing::{make_idempotent_batch, make_keyed_idempotent_batch},
    BatchHeader,
};
use oxbow_segment_writer::{records, txn};
use oxbow_segment_writer::{Acks, AppendPolicy, ErrorKind, Partition};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a producer waits for one acknowledgement before retrying (delivery timeout).
pub const ACK_TIMEOUT: Duration = Duration::from_secs(5);
pub const READ_BYTES: usize = 16 << 10;

/// Why a client call did not complete.
pub enum Fail {
    /// Retry (not leader, broker down, not enough replicas, timeout...).
    Retry(String),
    /// The producer's epoch is older than the one the partition remembers: a bug for a
    /// live producer, what a zombie of a fenced epoch must get (`txn.rs`).
    Fenced(String),
    /// A client-visible error the workload never provokes: a bug.
    Fatal(String),
}

impl Fail {
    pub fn why(&self) -> &str {
        match self {
            Fail::Retry(w) | Fail::Fenced(w) | Fail::Fatal(w) => w,
        }
    }
}

/// The partition's leader as the stored state names it (what a Metadata request answers):
/// the topic, the leader's id, its open partition and its log.
pub async fn leader_partition(
    cluster: &Cluster,
    partition: i32,
) -> Result<
    (
        TopicMetadata,
        i32,
        Arc<Partition>,
        Arc<oxbow_segment_writer::LogManager>,
    ),
    Fail,
> {
    let topic = cluster
        .topic()
        .await
        .ok_or_else(|| Fail::Retry("no topic metadata".into()))?;
    let state = topic
        .partition(partition)
        .ok_or_else(|| Fail::Fatal(format!("p{partition} missing from the topic")))?;
    let leader = state.leader;
    let b = cluster
        .broker(leader)
        .ok_or_else(|| Fail::Retry(format!("b{leader} is down")))?;
    let p = b
        .log
        .partition(&topic, partition)
        .await
        .map_err(|e| Fail::Retry(format!("b{leader}: {e}")))?;
    Ok((topic, leader, p, b.log.clone()))
}

pub fn classify(e: oxbow_segment_writer::Error) -> Fail {
    match e.kind() {
        ErrorKind::ProducerFenced => Fail::Fenced(e.to_string()),
        ErrorKind::OutOfOrderSequence
        | ErrorKind::Corrupt
        | ErrorKind::InvalidRecord
        | ErrorKind::DataCorruption => Fail::Fatal(e.to_string()),
        _ => Fail::Retry(e.to_string()),
    }
}

/// One attempt at an `acks=all` produce through the leader's append gate: (base offset,
/// the leader epoch that acknowledged it, whether it was a recognised retry).
pub async fn produce_once(
    cluster: &Cluster,
    partition: i32,
    raw: &[u8],
) -> Result<(i64, i32, bool), Fail> {
    let (topic, leader, p, log) = leader_partition(cluster, partition).await?;
    let leadership = cluster
        .broker(leader)
        .ok_or_else(|| Fail::Retry(format!("b{leader} is down")))?
        .leadership
        .clone();
    // The append gate, as the gateway's produce path takes it: a handoff closes it.
    let permit = leadership
        .append_permit(p.topic_partition, crate::cluster::TOPIC)
        .await
        .map_err(classify)?;
    let epoch = p.leader_epoch().map_err(classify)?;
    let pending = log
        .enqueue(&p, raw, &AppendPolicy::of(&topic.configs), Acks::All)
        .await
        .map_err(classify)?;
    drop(permit);
    let appended = match tokio::time::timeout(ACK_TIMEOUT, pending.wait()).await {
        Ok(r) => r.map_err(classify)?,
        Err(_) => return Err(Fail::Retry("acknowledgement timed out".into())),
    };
    Ok((appended.base_offset, epoch, appended.duplicate))
}

/// Records a batch sent and never answered: it may have landed.
fn unsettled(cluster: &Cluster, batch: Unsettled) {
    cluster
        .history
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .unsettled
        .push(batch);
}

/// One idempotent producer until `stop`.
pub async fn producer(cluster: Cluster, index: u64, rng: Arc<dyn Rng>, stop: CancellationToken) {
    let producer_id = loop {
        match cluster.metadata.allocate_producer_ids(1).await {
            Ok(id) => break id,
            Err(_) => cluster.clock.sleep(Duration::from_millis(100)).await,
        }
    };
    let mut sequences: BTreeMap<i32, i32> = BTreeMap::new();
    'batches: while !stop.is_cancelled() {
        let partition = (rng.next_u64() % PARTITIONS as u64) as i32;
        let count = 1 + (rng.next_u64() % 4) as i32;
        let sequence = *sequences.entry(partition).or_default();
        let timestamp = cluster.clock.unix_ms();
        let sent_true_ms = cluster.true_unix_ms();
        let raw = if cluster.compacted() {
            let records: Vec<(u8, bool)> = (sequence..sequence + count)
                .map(|s| (key_of(producer_id, s), is_tombstone(producer_id, s)))
                .collect();
            make_keyed_idempotent_batch(&records, timestamp, producer_id, 0, sequence)
        } else {
            make_idempotent_batch(count, timestamp, producer_id, 0, sequence)
        };
        let mut attempts = 0u32;
        loop {
            if stop.is_cancelled() {
                if attempts > 0 {
                    // Tried and never answered: it may have landed (rule 11 counts its
                    // tombstones).
                    unsettled(
                        &cluster,
                        Unsettled {
                            partition,
                            producer_id,
                            base_sequence: sequence,
                            count,
                            sent_true_ms,
                        },
                    );
                }
                break 'batches;
            }
            attempts += 1;
            match produce_once(&cluster, partition, &raw).await {
                Ok((base_offset, leader_epoch, duplicate)) => {
                    cluster
                        .history
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .acks
                        .push(Ack {
                            partition,
                            producer_id,
                            base_sequence: sequence,
                            count,
                            base_offset,
                            // make_idempotent_batch's records are a millisecond apart.
                            max_timestamp_ms: timestamp + i64::from(count - 1),
                            sent_true_ms,
                            leader_epoch,
                            duplicate,
                        });
                    cluster.event(format!(
                        "producer{index} acked p{partition} seq {sequence}+{count} at {base_offset} epoch {leader_epoch}{}{}",
                        if duplicate { " (deduplicated retry)" } else { "" },
                        if attempts > 1 { format!(" after {attempts} attempts") } else { String::new() }
                    ));
                    sequences.insert(partition, sequence + count);
                    break;
                }
                Err(Fail::Retry(_)) => {
                    let backoff = 50 + rng.next_u64() % 100;
                    cluster.clock.sleep(Duration::from_millis(backoff)).await;
                }
                Err(Fail::Fatal(why) | Fail::Fenced(why)) => {
                    cluster.violation(format!(
                        "producer{index} p{partition} seq {sequence}: {why}"
                    ));
                    break 'batches;
                }
            }
        }
        cluster
            .clock
            .sleep(Duration::from_millis(rng.next_u64() % 40))
            .await;
    }
}

/// Per-partition consumer position.
#[derive(Default)]
struct Position {
    next: i64,
    /// Leader epoch of the last batch read.
    last_epoch: Option<i32>,
    /// (leader, epoch) the last read was served by.
    served_by: Option<(i32, i32)>,
    high_watermark: i64,
}

/// Reads every partition from 0 until `stop` and then until caught up with the high
/// watermark (or `drain_deadline` passes).
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
        cluster.clock.sleep(Duration::from_millis(20)).await;
    }
}

/// One fetch of one partition; `Ok(true)` when the position is at the high watermark.
async fn consume_once(cluster: &Cluster, partition: i32, pos: &mut Position) -> Result<bool, Fail> {
    let (topic, leader, p, log) = leader_partition(cluster, partition).await?;
    let epoch = p.leader_epoch().map_err(classify)?;
    // KIP-320: a fetch carries the epoch the consumer's metadata names; a broker serving
    // another one answers FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH and the consumer
    // refreshes its metadata (a fenced broker that still has the partition open).
    let current = topic.partition(partition).map(|s| s.leader_epoch);
    if current != Some(epoch) {
        return Err(Fail::Retry(format!(
            "b{leader} serves epoch {epoch}, the metadata says {current:?}"
        )));
    }
    if pos.served_by != Some((leader, epoch)) {
        if let Some(last_epoch) = pos.last_epoch {
            // KIP-320: is the position still on the new leader's log?
            match p.end_offset_for(last_epoch).map_err(classify)? {
                Some((_, end)) if end >= pos.next => {}
                Some((answer_epoch, end)) => {
                    cluster.violation(format!(
                        "consumer p{partition}: truncation detected on b{leader} epoch {epoch}: position {} read under epoch {last_epoch}, the leader says that epoch ends at {end} (epoch {answer_epoch}); the consumer would reset",
                        pos.next
                    ));
                }
                None => {
                    cluster.violation(format!(
                        "consumer p{partition}: b{leader} epoch {epoch} has no end offset for epoch {last_epoch} (OffsetForLeaderEpoch -1): the consumer would reset its position {}",
                        pos.next
                    ));
                }
            }
        }
        pos.served_by = Some((leader, epoch));
    }
    // Rules 9 and 10: the log start this leader serves (what ListOffsets earliest answers).
    let (start, _, _) = p.offsets().map_err(classify)?;
    cluster.observe_log_start(partition, start);
    let read = match log.read(&p, pos.next, READ_BYTES, true).await {
        Ok(r) => r,
        // Below the log start (DeleteRecords): auto.offset.reset=earliest.
        Err(e) if e.kind() == ErrorKind::OffsetOutOfRange => {
            let (start, _, _) = p.offsets().map_err(classify)?;
            if pos.next < start {
                pos.next = start;
                return Ok(false);
            }
            return Err(classify(e));
        }
        Err(e) => return Err(classify(e)),
    };
    if read.high_watermark < pos.high_watermark {
        cluster.violation(format!(
            "consumer p{partition}: high watermark moved back from {} to {} (b{leader} epoch {epoch})",
            pos.high_watermark, read.high_watermark
        ));
    }
    pos.high_watermark = pos.high_watermark.max(read.high_watermark);
    let mut consumed = Vec::new();
    for raw in &read.batches {
        let Ok(Some(h)) = batch::peek_header(raw) else {
            cluster.violation(format!(
                "consumer p{partition}: an unreadable batch from b{leader}"
            ));
            break;
        };
        if h.last_offset() < pos.next {
            continue;
        }
        // Key compaction drops batches it emptied, and records inside the rest.
        if h.base_offset > pos.next && !cluster.compacted() {
            cluster.violation(format!(
                "consumer p{partition}: b{leader} answered a batch at {} for position {} (a gap)",
                h.base_offset, pos.next
            ));
        }
        let offsets = match record_offsets(raw, &h) {
            Ok(o) => o,
            Err(why) => {
                cluster.violation(format!(
                    "consumer p{partition}: b{leader} answered a batch at {} whose records do not decode: {why}",
                    h.base_offset
                ));
                break;
            }
        };
        for offset in offsets.into_iter().filter(|&o| o >= pos.next) {
            let seq = h.base_sequence + (offset - h.base_offset) as i32;
            consumed.push((offset, h.producer_id, seq));
        }
        pos.next = h.last_offset() + 1;
        pos.last_epoch = Some(h.partition_leader_epoch);
    }
    if !consumed.is_empty() {
        cluster
            .history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .consumed
            .entry(partition)
            .or_default()
            .extend(consumed);
    }
    Ok(pos.next >= read.high_watermark)
}

/// The offsets of the records a batch holds (its header's range, less what key compaction
/// removed).
pub fn record_offsets(raw: &[u8], h: &BatchHeader) -> Result<Vec<i64>, String> {
    let section = records::records_section(raw, h, 1 << 20).map_err(|e| e.to_string())?;
    records::walk(&section, h.record_count)
        .map(|r| {
            r.map(|r| h.base_offset + i64::from(r.offset_delta))
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// Every partition's log at the end (read from its leader, from its log start) and its
/// log start.
pub type FinalLogs = (BTreeMap<i32, Vec<StoredBatch>>, BTreeMap<i32, i64>);

/// The whole log of every partition, read from its leader from its log start.
pub async fn final_logs(cluster: &Cluster) -> Result<FinalLogs, String> {
    let mut out = BTreeMap::new();
    let mut starts = BTreeMap::new();
    for partition in 0..PARTITIONS {
        let (_, leader, p, log) = match leader_partition(cluster, partition).await {
            Ok(x) => x,
            Err(f) => {
                return Err(format!(
                    "p{partition} is not served at the end: {}",
                    f.why()
                ))
            }
        };
        let mut batches = Vec::new();
        let (start, _, _) = p
            .offsets()
            .map_err(|e| format!("p{partition} on b{leader}: offsets: {e}"))?;
        starts.insert(partition, start);
        cluster.observe_log_start(partition, start);
        let mut next = start;
        loop {
            let r = log
                .read(&p, next, 1 << 20, true)
                .await
                .map_err(|e| format!("p{partition} on b{leader}: final read at {next}: {e}"))?;
            let mut progressed = false;
            for raw in &r.batches {
                let h = batch::peek_header(raw)
                    .ok()
                    .flatten()
                    .ok_or_else(|| format!("p{partition}: an unreadable batch at the end"))?;
                if h.last_offset() < next {
                    continue;
                }
                batches.push(StoredBatch {
                    base_offset: h.base_offset,
                    last_offset: h.last_offset(),
                    offsets: record_offsets(raw, &h).map_err(|why| {
                        format!(
                            "p{partition}: a batch at {} does not decode: {why}",
                            h.base_offset
                        )
                    })?,
                    leader_epoch: h.partition_leader_epoch,
                    producer_id: h.producer_id,
                    producer_epoch: h.producer_epoch,
                    base_sequence: h.base_sequence,
                    marker: if h.is_control() {
                        txn::parse_marker(raw, &h).map(|m| m.commit)
                    } else {
                        None
                    },
                });
                next = h.last_offset() + 1;
                progressed = true;
            }
            if !progressed || next >= r.high_watermark {
                break;
            }
        }
        out.insert(partition, batches);
    }
    Ok((out, starts))
}

/// Rule 8 (ARCHITECTURE decision 23): the catalogue readers are served resolves every
/// offset below its end to exactly one entry — dense from the log start, no overlap — and
/// no entry serves an offset at or past the start of the epoch after its own (a deposed
/// leader's late commit is never visible, whatever landed in the metadata service).
pub async fn catalog_violations(
    cluster: &Cluster,
    logs: &BTreeMap<i32, Vec<StoredBatch>>,
) -> Vec<String> {
    let mut out = Vec::new();
    let Some(topic) = cluster.topic().await else {
        return vec!["catalog check: no topic metadata at the end".into()];
    };
    for partition in 0..PARTITIONS {
        let Some(state) = topic.partition(partition) else {
            continue;
        };
        let entries = match cluster
            .metadata
            .catalog_entries(topic.topic_id, partition, 0, usize::MAX)
            .await
        {
            Ok(e) => e,
            Err(e) => {
                out.push(format!("p{partition}: catalog read at the end: {e}"));
                continue;
            }
        };
        let mut next = state.log_start_offset;
        for (i, e) in entries.iter().enumerate() {
            // The first entry may hold the log start (served whole; readers skip what is
            // before it).
            let holds_start = i == 0 && e.base_offset <= next && next <= e.last_offset;
            if e.base_offset != next && !holds_start {
                out.push(format!(
                    "p{partition}: catalogue not dense: an entry at {}..={} after one ending at {}",
                    e.base_offset,
                    e.last_offset,
                    next - 1
                ));
            }
            let cut = state
                .leader_epochs
                .entries()
                .iter()
                .filter(|s| s.epoch > e.leader_epoch)
                .map(|s| s.start_offset)
                .min();
            if cut.is_some_and(|cut| e.last_offset >= cut) {
                out.push(format!(
                    "p{partition}: an entry of epoch {} serves {}..={}, past the next epoch's start {}",
                    e.leader_epoch,
                    e.base_offset,
                    e.last_offset,
                    cut.unwrap_or_default()
                ));
            }
            // Nothing still in the log is lost: an entry readers are served names an object
            // the store holds (compaction and retention delete only what nothing references).
            if e.last_offset >= state.log_start_offset {
                let path = object_store::path::Path::from(e.object_key.as_str());
                if let Err(err) = cluster.store.head(&path).await {
                    out.push(format!(
                        "p{partition}: the entry serving {}..={} names object {}, which the store does not hold: {err}",
                        e.base_offset, e.last_offset, e.object_key
                    ));
                }
            }
            next = e.last_offset + 1;
        }
        let log_end = logs
            .get(&partition)
            .and_then(|b| b.last())
            .map_or(0, |b| b.last_offset + 1);
        if next > log_end.max(state.log_start_offset) {
            out.push(format!(
                "p{partition}: the catalogue ends at {next}, past the log's end {log_end}"
            ));
        }
    }
    out
}

/// Idle producers (issue 16): more than a sealed chunk carries rows for.
pub const CROWD: u32 = 300;

/// [`CROWD`] idempotent producers each store one batch in one partition early on, then
/// wait for `retry` (the faults are over: failovers, restarts and the busy producers'
/// records came after them) and send that batch again, as a producer whose acknowledgement
/// was lost would. Each retry must be recognised: a duplicate at the offset first
/// acknowledged — whichever broker leads now and however many chunks were sealed since.
pub async fn crowd(
    cluster: Cluster,
    rng: Arc<dyn Rng>,
    retry: CancellationToken,
    stop: CancellationToken,
) {
    let first = loop {
        match cluster.metadata.allocate_producer_ids(CROWD).await {
            Ok(id) => break id,
            Err(_) => cluster.clock.sleep(Duration::from_millis(100)).await,
        }
    };
    let partition = (rng.next_u64() % PARTITIONS as u64) as i32;
    let mut stored = Vec::new();
    for producer_id in first..first + i64::from(CROWD) {
        let timestamp = cluster.clock.unix_ms();
        let sent_true_ms = cluster.true_unix_ms();
        let raw = make_idempotent_batch(1, timestamp, producer_id, 0, 0);
        let Some((base_offset, leader_epoch, duplicate)) =
            until_acked(&cluster, partition, &raw, &stop, "crowd").await
        else {
            unsettled(
                &cluster,
                Unsettled {
                    partition,
                    producer_id,
                    base_sequence: 0,
                    count: 1,
                    sent_true_ms,
                },
            );
            return;
        };
        cluster
            .history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .acks
            .push(Ack {
                partition,
                producer_id,
                base_sequence: 0,
                count: 1,
                base_offset,
                max_timestamp_ms: timestamp,
                sent_true_ms,
                leader_epoch,
                duplicate,
            });
        stored.push((producer_id, raw, base_offset));
    }
    cluster.event(format!(
        "crowd: {CROWD} idle producers stored a batch each in p{partition}"
    ));
    tokio::select! {
        _ = retry.cancelled() => {}
        _ = stop.cancelled() => return,
    }
    for (producer_id, raw, first_offset) in stored {
        let Some((offset, _, duplicate)) =
            until_acked(&cluster, partition, &raw, &stop, "crowd retry").await
        else {
            return;
        };
        if !duplicate || offset != first_offset {
            cluster.violation(format!(
                "idle producer {producer_id}'s retry in p{partition} was answered at {offset} \
                 (duplicate: {duplicate}); its batch was stored at {first_offset}"
            ));
        }
    }
    cluster.event(format!("crowd: {CROWD} retries recognised in p{partition}"));
}

/// Sends `raw` until it is acknowledged; `None` if `stop` came first or the answer is one
/// the workload never provokes (a violation).
async fn until_acked(
    cluster: &Cluster,
    partition: i32,
    raw: &[u8],
    stop: &CancellationToken,
    who: &str,
) -> Option<(i64, i32, bool)> {
    let mut said = false;
    while !stop.is_cancelled() {
        match produce_once(cluster, partition, raw).await {
            Ok(acked) => return Some(acked),
            Err(Fail::Retry(why)) => {
                if !std::mem::replace(&mut said, true) {
                    cluster.event(format!("{who} p{partition}: {why}; retrying"));
                }
                cluster.clock.sleep(Duration::from_millis(100)).await
            }
            Err(Fail::Fatal(why) | Fail::Fenced(why)) => {
                cluster.violation(format!("{who} p{partition}: {why}"));
                return None;
            }
        }
    }
    None
}
