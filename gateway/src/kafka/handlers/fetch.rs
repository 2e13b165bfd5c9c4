//! Fetch: whole batches below the high watermark (at `read_committed`, below the last stable
//! offset, with the aborted transactions they overlap), honouring `max_bytes` (at least one batch,
//! KIP-74), `partition_max_bytes`, and the long poll: the response waits until `min_bytes`
//! are available or `max_wait_ms` passes. Fetch sessions (KIP-227) are not kept: the
//! response's session id 0 tells clients to send full requests.
//!
//! Leader epochs: `current_leader_epoch` is checked as OffsetForLeaderEpoch checks it
//! (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), and a `last_fetched_epoch` (v12+) is
//! validated against the epoch history as Kafka's `Partition.readRecords` does: if that epoch
//! ended before the fetch offset (or is unknown here), the answer is a `diverging_epoch` with
//! no records, for the client to truncate to (KIP-595).
//!
//! Zone-local reads (KIP-392, issue 17): a consumer that sets `client.rack` (the request's
//! `rack_id`, v11+) and fetches from a leader in another zone, while a live broker is in
//! its zone, is answered with that broker as `preferred_read_replica` and no records (as
//! Kafka's `RackAwareReplicaSelector` answers). That broker serves the partition from the
//! object store through the catalogue and the read cache — what is sealed, a flush
//! interval behind the leader — with the catalogue's end as the high watermark, long-polling
//! for the next seal; an offset past the catalogue's end when the poll ends is
//! OFFSET_OUT_OF_RANGE, which sends the client back to the leader (Kafka's follower
//! answer). So a consumer reads across zones only from the object store, not from a broker
//! in another zone. Without `rack_id`, or in the leader's zone, nothing changes.

use super::leader_epoch::check_current_leader_epoch;
use super::{denied, topic_name, Reply};
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::security::acl::{AclOperation, AuthzView, ResourceType};
use crate::security::Session;
use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId, ResponseKind};
use oxbow_metadata::leader_epochs::UNDEFINED_EPOCH;
use oxbow_metadata::{TopicMetadata, TopicPartition};
use oxbow_segment_writer::{Isolation, Partition, ReadResult};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Longest long poll honoured, whatever the client asks.
const MAX_WAIT_CAP: Duration = Duration::from_secs(30);

struct Wanted {
    topic: String,
    partition: i32,
    fetch_offset: i64,
    partition_max_bytes: usize,
    current_leader_epoch: i32,
    /// The epoch of the last batch the client fetched (v12+; -1: none).
    last_fetched_epoch: i32,
    /// The request's `isolation_level` (v4+).
    isolation: Isolation,
}

enum Source {
    Ready(Arc<Partition>),
    /// Led here; the client's zone has a broker to read from (KIP-392).
    Redirect {
        replica: i32,
        partition: Arc<Partition>,
    },
    /// Led from another zone; this broker is in the client's: catalogued data.
    Follower(Arc<TopicMetadata>),
    Failed(i16),
}

/// How often a follower read looks at the catalogue again while long-polling.
const FOLLOWER_POLL: Duration = Duration::from_millis(100);

/// The live broker of `rack` (not this one) that serves `partition` to clients there, if
/// the client has a rack, this broker is not in it and some live broker is: one of that
/// zone's brokers, spread by partition.
fn zone_replica(broker: &Broker, rack: Option<&str>, partition: i32) -> Option<i32> {
    let rack = rack?;
    let me = broker.settings.broker_id;
    if broker.cluster.broker(me).and_then(|b| b.az).as_deref() == Some(rack) {
        return None;
    }
    let in_zone: Vec<i32> = broker
        .cluster
        .brokers()
        .into_iter()
        .filter(|b| b.broker_id != me && b.az.as_deref() == Some(rack))
        .map(|b| b.broker_id)
        .collect();
    in_zone
        .get(usize::try_from(partition).unwrap_or(0) % in_zone.len().max(1))
        .copied()
}

/// Whether this broker serves `leader`'s partition to a client in `rack` as its zone's
/// replica: it is in that zone and the leader is not.
fn serves_as_follower(broker: &Broker, rack: Option<&str>, leader: i32) -> bool {
    let Some(rack) = rack else { return false };
    let az_of = |id: i32| broker.cluster.broker(id).and_then(|b| b.az);
    az_of(broker.settings.broker_id).as_deref() == Some(rack)
        && az_of(leader).as_deref() != Some(rack)
}

pub fn handle(broker: &Arc<Broker>, session: &Session, req: FetchRequest, version: i16) -> Reply {
    let broker = broker.clone();
    let authz = broker.authz(session);
    Reply::Later(
        async move { ResponseKind::Fetch(fetch(broker, authz, req, version).await) }.boxed(),
    )
}

async fn fetch(
    broker: Arc<Broker>,
    authz: AuthzView,
    req: FetchRequest,
    version: i16,
) -> FetchResponse {
    let mut wanted = Vec::new();
    for t in &req.topics {
        for p in &t.partitions {
            wanted.push(Wanted {
                topic: t.topic.0.to_string(),
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                partition_max_bytes: usize::try_from(p.partition_max_bytes).unwrap_or(0),
                current_leader_epoch: p.current_leader_epoch,
                last_fetched_epoch: if version >= 12 {
                    p.last_fetched_epoch
                } else {
                    UNDEFINED_EPOCH
                },
                isolation: if req.isolation_level == 1 {
                    Isolation::ReadCommitted
                } else {
                    Isolation::ReadUncommitted
                },
            });
        }
    }
    let rack = (version >= 11 && !req.rack_id.is_empty()).then(|| req.rack_id.to_string());
    let rack = rack.as_deref();
    let mut sources = Vec::with_capacity(wanted.len());
    let mut watches = Vec::new();
    for w in &wanted {
        // READ on the topic (Kafka's `KafkaApis.handleFetchRequest`).
        if !authz.allows(AclOperation::Read, ResourceType::Topic, &w.topic) {
            sources.push(Source::Failed(denied(ResourceType::Topic)));
            continue;
        }
        let source = match broker.topic(&w.topic) {
            None => Source::Failed(ResponseError::UnknownTopicOrPartition.code()),
            Some(topic) => match broker.partition(&topic, w.partition).await {
                Err(e) => {
                    let stored = topic.partition(w.partition);
                    match stored {
                        Some(s)
                            if e.code() == ResponseError::NotLeaderOrFollower.code()
                                && serves_as_follower(&broker, rack, s.leader) =>
                        {
                            match check_current_leader_epoch(w.current_leader_epoch, s.leader_epoch)
                            {
                                Some(e) => Source::Failed(e.code()),
                                None => Source::Follower(topic.clone()),
                            }
                        }
                        _ => Source::Failed(e.code()),
                    }
                }
                Ok(p) => match p.leader_epoch() {
                    Err(e) => Source::Failed(BrokerError::from(e).code()),
                    Ok(epoch) => match check_current_leader_epoch(w.current_leader_epoch, epoch) {
                        Some(e) => Source::Failed(e.code()),
                        None => match zone_replica(&broker, rack, w.partition) {
                            Some(replica) => Source::Redirect {
                                replica,
                                partition: p,
                            },
                            None => {
                                // Subscribed before the first read, so no append in
                                // between is missed.
                                watches.push(p.subscribe());
                                Source::Ready(p)
                            }
                        },
                    },
                },
            },
        };
        sources.push(source);
    }
    let max_bytes = usize::try_from(req.max_bytes).unwrap_or(0);
    let min_bytes = usize::try_from(req.min_bytes).unwrap_or(0).max(1);
    let max_wait =
        Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0)).min(MAX_WAIT_CAP);
    let deadline = tokio::time::Instant::now() + max_wait;
    // Follower reads have no watch: they look at the catalogue again every FOLLOWER_POLL.
    let polling = sources.iter().any(|s| matches!(s, Source::Follower(_)));
    loop {
        let last = tokio::time::Instant::now() >= deadline;
        let (partitions, total) =
            read_all(&broker, &wanted, &sources, max_bytes, version, last).await;
        let errors = partitions.iter().any(|(_, d)| d.error_code != 0);
        let redirects = partitions
            .iter()
            .any(|(_, d)| d.preferred_read_replica.0 >= 0);
        if total >= min_bytes || errors || redirects || last || (watches.is_empty() && !polling) {
            return respond(partitions);
        }
        let poll = async {
            if polling {
                tokio::time::sleep(FOLLOWER_POLL).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let changed = async {
            if watches.is_empty() {
                std::future::pending::<()>().await;
            } else {
                let _ =
                    futures::future::select_all(watches.iter_mut().map(|w| w.changed().boxed()))
                        .await;
            }
        };
        let woken = async {
            tokio::select! {
                _ = poll => {}
                _ = changed => {}
            }
        };
        // Past the deadline: one last read (`last`) answers.
        let _ = tokio::time::timeout_at(deadline, woken).await;
    }
}

/// Partition reads of one Fetch in flight at once. Each reads its own partition's state
/// and ranges, so a partition whose range must be fetched from the object store (tens of
/// milliseconds on S3) does not hold up the others' reads behind it; bounded, so one
/// request over many cold partitions starts at most this many GETs (each with its
/// read-ahead window) at a time.
const READS_IN_FLIGHT_MAX: usize = 4;

/// One partition's answer before the response's `max_bytes` is applied.
enum Found {
    /// Complete: an error, a redirect, a diverging epoch (no records).
    Answer(PartitionData),
    /// The leader's read, at the most this partition could be given.
    Leader {
        data: PartitionData,
        partition: Arc<Partition>,
        read: oxbow_segment_writer::Result<ReadResult>,
    },
    /// A read as its zone's replica (the module docs), at the most it could be given.
    Follower {
        data: PartitionData,
        read: oxbow_segment_writer::Result<ReadResult>,
    },
}

/// Reads every partition of the request, at most [`READS_IN_FLIGHT_MAX`] at once, and
/// answers them in request order within `max_bytes` as Kafka's `ReplicaManager.readFromLog`
/// does reading them one after another: each partition gets what the ones before it left
/// (and at most its `partition_max_bytes`), and the first that has data gets at least one
/// batch even past the limits (KIP-74). A read starting while every partition before it
/// is still in flight or empty asks for the most its partition could be given
/// (`min(partition_max_bytes, max_bytes)`, at least one batch); one starting after earlier
/// partitions took some of the room asks only for what they left (nothing, and no object
/// read, once the response is full). Each is then cut to what it is given
/// ([`ReadResult::truncate`]): a read takes whole batches in order and stops at the first
/// that does not fit, so the cut is what the smaller read would have returned. What is
/// read past the cut is bounded by the reads in flight, not by the partitions asked for.
async fn read_all(
    broker: &Broker,
    wanted: &[Wanted],
    sources: &[Source],
    max_bytes: usize,
    version: i16,
    last: bool,
) -> (Vec<(String, PartitionData)>, usize) {
    // What the partitions answered so far (in request order) were given; read by each
    // read as it starts.
    let given = AtomicUsize::new(0);
    let given = &given;
    // Boxed one by one, so the stream's type names no closure over borrowed arguments (the
    // handler's `Send` future over such a stream does not type-check: "implementation of
    // `FnOnce` is not general enough", rust-lang/rust#102211).
    let reads: Vec<BoxFuture<'_, Found>> = wanted
        .iter()
        .zip(sources)
        .map(|(w, source)| {
            async move {
                let before = given.load(Ordering::Acquire);
                let most = w.partition_max_bytes.min(max_bytes);
                let (budget, min_one) = if before == 0 {
                    (most, true)
                } else {
                    (most.min(max_bytes.saturating_sub(before)), false)
                };
                read_source(broker, w, source, budget, min_one, version).await
            }
            .boxed()
        })
        .collect();
    // In order, so each answer is fitted (and `given` moved on) as soon as the ones before
    // it are.
    let mut found = futures::stream::iter(reads).buffered(READS_IN_FLIGHT_MAX);
    let mut total = 0usize;
    let mut out = Vec::with_capacity(wanted.len());
    let mut wanted = wanted.iter();
    while let Some(f) = found.next().await {
        let Some(w) = wanted.next() else { break };
        let data = fit(f, w, max_bytes, &mut total, version, last);
        given.store(total, Ordering::Release);
        out.push((w.topic.clone(), data));
    }
    (out, total)
}

/// One partition's read, as [`Found`].
async fn read_source(
    broker: &Broker,
    w: &Wanted,
    source: &Source,
    budget: usize,
    min_one: bool,
    version: i16,
) -> Found {
    // log_start_offset exists from v5.
    let log_start = |offset: i64| if version >= 5 { offset } else { -1 };
    let data = PartitionData::default().with_partition_index(w.partition);
    match source {
        Source::Failed(code) => Found::Answer(data.with_error_code(*code).with_high_watermark(-1)),
        Source::Ready(p) => {
            if w.last_fetched_epoch != UNDEFINED_EPOCH {
                match diverging(p, w) {
                    Ok(None) => {}
                    Ok(Some(d)) => {
                        let (start, hw, _) = p.offsets().unwrap_or((-1, -1, -1));
                        return Found::Answer(
                            d.with_high_watermark(hw)
                                .with_last_stable_offset(p.last_stable_offset().unwrap_or(hw))
                                .with_log_start_offset(log_start(start))
                                .with_records(Some(Bytes::new())),
                        );
                    }
                    Err(code) => {
                        return Found::Answer(data.with_error_code(code).with_high_watermark(-1))
                    }
                }
            }
            let started = tokio::time::Instant::now();
            let read = broker
                .log
                .read_isolated(p, w.fetch_offset, budget, min_one, w.isolation)
                .await;
            time_read(broker, &read, started);
            Found::Leader {
                data,
                partition: p.clone(),
                read,
            }
        }
        Source::Redirect { replica, partition } => {
            let (start, hw, _) = partition.offsets().unwrap_or((-1, -1, -1));
            Found::Answer(
                data.with_high_watermark(hw)
                    .with_last_stable_offset(partition.last_stable_offset().unwrap_or(hw))
                    .with_log_start_offset(log_start(start))
                    .with_preferred_read_replica(BrokerId(*replica))
                    .with_records(Some(Bytes::new())),
            )
        }
        Source::Follower(topic) => {
            let log_start = topic
                .partition(w.partition)
                .map_or(0, |p| p.log_start_offset);
            let tp = TopicPartition::new(topic.topic_id, w.partition);
            let started = tokio::time::Instant::now();
            let read = broker
                .log
                .read_catalogued_isolated(
                    tp,
                    log_start,
                    w.fetch_offset,
                    budget,
                    min_one,
                    w.isolation,
                )
                .await;
            time_read(broker, &read, started);
            Found::Follower { data, read }
        }
    }
}

/// `f` as the response's partition, its records cut to what is left of `max_bytes` after
/// the partitions before it (`total`, which it adds to); `last`: the long poll is over.
fn fit(
    f: Found,
    w: &Wanted,
    max_bytes: usize,
    total: &mut usize,
    version: i16,
    last: bool,
) -> PartitionData {
    let log_start = |offset: i64| if version >= 5 { offset } else { -1 };
    // KIP-74: the first batch of the response is returned even if it exceeds the limits, so
    // a large batch can never stall a consumer.
    let cut = |r: &mut ReadResult, total: usize| {
        r.truncate(
            w.partition_max_bytes.min(max_bytes.saturating_sub(total)),
            total == 0,
        );
    };
    match f {
        Found::Answer(data) => data,
        Found::Leader {
            data,
            partition,
            read,
        } => match read {
            Ok(mut r) => {
                cut(&mut r, *total);
                with_read(data, r, total, version)
            }
            Err(e) => {
                let (start, hw, _) = partition.offsets().unwrap_or((-1, -1, -1));
                data.with_error_code(BrokerError::from(e).code())
                    .with_high_watermark(hw)
                    .with_last_stable_offset(partition.last_stable_offset().unwrap_or(hw))
                    .with_log_start_offset(log_start(start))
                    .with_records(Some(Bytes::new()))
            }
        },
        Found::Follower { data, read } => match read {
            Ok(r) if r.batches.is_empty() && w.fetch_offset > r.high_watermark && last => data
                .with_error_code(ResponseError::OffsetOutOfRange.code())
                .with_high_watermark(r.high_watermark)
                .with_log_start_offset(log_start(r.log_start_offset))
                .with_records(Some(Bytes::new())),
            Ok(mut r) => {
                cut(&mut r, *total);
                with_read(data, r, total, version)
            }
            Err(e) => data
                .with_error_code(BrokerError::from(e).code())
                .with_high_watermark(-1)
                .with_records(Some(Bytes::new())),
        },
    }
}

/// Kafka's last-fetched-epoch check: `Some` with the diverging epoch if the client's last
/// fetched epoch ended before its fetch offset here; an error code if that epoch is unknown.
fn diverging(p: &Partition, w: &Wanted) -> Result<Option<PartitionData>, i16> {
    let found = p
        .end_offset_for(w.last_fetched_epoch)
        .map_err(|e| BrokerError::from(e).code())?;
    match found {
        None => Err(ResponseError::OffsetOutOfRange.code()),
        Some((epoch, end)) if epoch < w.last_fetched_epoch || end < w.fetch_offset => Ok(Some(
            PartitionData::default()
                .with_partition_index(w.partition)
                .with_diverging_epoch(
                    EpochEndOffset::default()
                        .with_epoch(epoch)
                        .with_end_offset(end),
                ),
        )),
        Some(_) => Ok(None),
    }
}

/// Records a read that returned data in `oxbow_fetch_read_seconds{source}` (empty reads, a
/// long poll at the tail, are not: see `request_latency`).
fn time_read(
    broker: &Broker,
    read: &oxbow_segment_writer::Result<ReadResult>,
    started: tokio::time::Instant,
) {
    if let Ok(r) = read {
        if !r.batches.is_empty() {
            broker
                .metrics
                .request_latency
                .fetch_read(r.source, started.elapsed());
        }
    }
}

/// `data` with what a read found: its batches as the records (counted into `total`), its
/// offsets, and its aborted transactions (null at read_uncommitted, as Kafka sends them).
fn with_read(data: PartitionData, r: ReadResult, total: &mut usize, version: i16) -> PartitionData {
    let size = r.bytes();
    *total += size;
    let records = records_of(&r, size);
    let aborted = r.aborted.map(|aborted| {
        aborted
            .iter()
            .map(|a| {
                AbortedTransaction::default()
                    .with_producer_id(ProducerId(a.producer_id))
                    .with_first_offset(a.first_offset)
            })
            .collect()
    });
    data.with_high_watermark(r.high_watermark)
        .with_last_stable_offset(r.last_stable_offset)
        .with_log_start_offset(if version >= 5 { r.log_start_offset } else { -1 })
        .with_aborted_transactions(aborted)
        .with_records(Some(records))
}

/// A read's batches as one `Bytes` for the response's records: without a copy when they
/// lie one after the other in one buffer (a cached range, or a single batch), which the
/// response writer then sends by reference (`frame::encode_response_frame`); else copied
/// once into a buffer of exactly `size` bytes (batches from a partition's tail, each its
/// own buffer).
fn records_of(r: &ReadResult, size: usize) -> Bytes {
    let mut spans = r.spans();
    if spans.len() <= 1 {
        return spans.pop().unwrap_or_default();
    }
    let mut records = BytesMut::with_capacity(size);
    for s in &spans {
        records.extend_from_slice(s);
    }
    records.freeze()
}

fn respond(partitions: Vec<(String, PartitionData)>) -> FetchResponse {
    let mut topics: Vec<FetchableTopicResponse> = Vec::new();
    for (name, data) in partitions {
        match topics.last_mut() {
            Some(t) if t.topic.0.as_str() == name => t.partitions.push(data),
            _ => topics.push(
                FetchableTopicResponse::default()
                    .with_topic(topic_name(&name))
                    .with_partitions(vec![data]),
            ),
        }
    }
    FetchResponse::default().with_responses(topics)
}

#[cfg(test)]
mod tests;
