//! Data-plane operations on [`Client`]: produce, fetch, list offsets.
//!
//! All three go to the partition leader. A retriable failure whose attempt certainly had
//! no effect (leader moved, no leader yet, leader unreachable) refreshes the topic's
//! metadata and is retried up to [`RETRIES_MAX`](super::kafka_client::RETRIES_MAX) times;
//! ambiguous failures (timeouts, broken connections) are returned, because this client is
//! not an idempotent producer and a blind retry could write records twice.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kafka_protocol::messages::{FetchRequest, ProduceRequest};
use kafka_protocol::protocol::Request;
use kafka_protocol::records::Compression;

use super::error::ClientError;
use super::kafka_client::{Client, Target};
use super::records::{decode_fetched, encode_batch, Acks, ConsumedRecord, ProduceRecord};
use super::requests::{self, TOPIC_ID_VERSION};

/// `timestamp` for [`Client::list_offsets`]: the first offset still in the log.
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// `timestamp` for [`Client::list_offsets`]: the high watermark (next offset to write).
pub const LATEST_TIMESTAMP: i64 = -1;

/// How a batch is produced.
#[derive(Debug, Clone, Copy)]
pub struct ProduceOptions {
    pub acks: Acks,
    /// Codec for the record batch; the broker stores it as sent.
    pub compression: Compression,
}

impl Default for ProduceOptions {
    fn default() -> Self {
        Self {
            acks: Acks::All,
            compression: Compression::None,
        }
    }
}

/// The result of fetching one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResult {
    /// Data records at or after the requested offset, in order.
    pub records: Vec<ConsumedRecord>,
    /// Offset to request next (past control records and partial batches).
    pub next_offset: i64,
    /// The partition's high watermark when the broker answered.
    pub high_watermark: i64,
    /// The partition's log start offset, `-1` if the broker did not say (Fetch < v5).
    pub log_start_offset: i64,
}

/// One partition's record batches as the broker sent them ([`Client::fetch_raw_many`]).
#[derive(Debug, Clone)]
pub struct RawFetch {
    /// Whole and partial record batches, back to back (a partial last one is possible).
    pub records: bytes::Bytes,
    pub high_watermark: i64,
    /// `-1` if the broker did not say (Fetch < v5).
    pub log_start_offset: i64,
}

/// One partition's outcome in [`Client::fetch_raw_many`].
#[derive(Debug)]
pub struct PartitionRawFetch {
    pub partition: i32,
    pub result: Result<RawFetch, ClientError>,
}

/// One partition's outcome in [`Client::fetch_many`].
#[derive(Debug)]
pub struct PartitionFetch {
    pub partition: i32,
    pub result: Result<FetchResult, ClientError>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Client {
    /// Produces `records` as one record batch to `topic`/`partition` on its leader and
    /// returns the offset the broker assigned to the first record, or `None` with
    /// `acks=0` (the broker does not answer).
    pub async fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        records: &[ProduceRecord],
        options: ProduceOptions,
    ) -> Result<Option<i64>, ClientError> {
        let batch = encode_batch(records, options.compression, now_ms())
            .map_err(|e| ClientError::Invalid(e.to_string()))?;
        let mut attempt = 0;
        loop {
            let result = self
                .produce_batch(topic, partition, batch.clone(), options.acks)
                .await;
            match result {
                Err(err) if self.should_retry(topic, &err, attempt).await => attempt += 1,
                other => return other,
            }
        }
    }

    /// Produces an already-encoded RecordBatch v2 (no retries).
    async fn produce_batch(
        &mut self,
        topic: &str,
        partition: i32,
        batch: bytes::Bytes,
        acks: Acks,
    ) -> Result<Option<i64>, ClientError> {
        let route = self.route(topic, partition).await?;
        // Produce v13 names topics by id; without one (old Metadata) stay below it.
        let max_version = route.topic_id.is_nil().then_some(TOPIC_ID_VERSION - 1);
        let timeout = self.options.timeout;
        let build = |v| {
            requests::produce(
                v,
                topic,
                route.topic_id,
                partition,
                batch,
                acks.as_i16(),
                timeout,
            )
        };
        if acks == Acks::None {
            self.call_without_response::<ProduceRequest>(
                Target::Node(route.leader),
                max_version,
                build,
            )
            .await?;
            return Ok(None);
        }
        let (_, response) = self
            .call(Target::Node(route.leader), max_version, timeout, build)
            .await?;
        let op = || format!("produce to {topic}-{partition}");
        let part = response
            .responses
            .iter()
            .flat_map(|t| t.partition_responses.iter())
            .find(|p| p.index == partition)
            .ok_or_else(|| ClientError::Protocol {
                addr: format!("broker {}", route.leader),
                detail: format!("produce response has no entry for {topic}-{partition}"),
            })?;
        // Kafka's error_message already summarises record errors; fall back to the first
        // record error only when the broker sent no message.
        let message = part
            .error_message
            .as_ref()
            .map(|m| m.to_string())
            .or_else(|| {
                part.record_errors.first().map(|e| {
                    let detail = e
                        .batch_index_error_message
                        .as_ref()
                        .map_or_else(String::new, |m| format!(": {m}"));
                    format!("record {} rejected{detail}", e.batch_index)
                })
            });
        ClientError::check(part.error_code, message.as_deref(), op)?;
        Ok(Some(part.base_offset))
    }

    /// Fetches from one partition, waiting up to `max_wait` for data, at most
    /// `max_bytes` (a larger first batch is still returned whole, as Kafka does).
    pub async fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait: Duration,
        max_bytes: i32,
    ) -> Result<FetchResult, ClientError> {
        let mut attempt = 0;
        loop {
            let result = self
                .fetch_many(topic, &[(partition, offset)], max_wait, max_bytes)
                .await
                .and_then(|mut parts| {
                    parts.pop().map(|p| p.result).unwrap_or_else(|| {
                        Err(ClientError::Protocol {
                            addr: self.bootstrap_addr().to_string(),
                            detail: format!("fetch response has no entry for {topic}-{partition}"),
                        })
                    })
                });
            match result {
                Err(err) if self.should_retry(topic, &err, attempt).await => attempt += 1,
                other => return other,
            }
        }
    }

    /// Fetches several partitions of `topic` from `(partition, offset)` positions: one
    /// request per leader, sent one after another, each waiting up to `max_wait`.
    /// Per-partition errors (e.g. `OFFSET_OUT_OF_RANGE`, leader moved) are returned in
    /// place and mark the topic's metadata stale; a failed request fails the whole call.
    /// Results are in the order of `positions`.
    pub async fn fetch_many(
        &mut self,
        topic: &str,
        positions: &[(i32, i64)],
        max_wait: Duration,
        max_bytes: i32,
    ) -> Result<Vec<PartitionFetch>, ClientError> {
        let raw = self
            .fetch_raw_many(topic, positions, max_wait, max_bytes)
            .await?;
        let offsets: BTreeMap<i32, i64> = positions.iter().copied().collect();
        let addr = self.bootstrap_addr().to_string();
        Ok(raw
            .into_iter()
            .map(|p| {
                let offset = offsets.get(&p.partition).copied().unwrap_or(0);
                let partition = p.partition;
                let result = p.result.and_then(|raw| {
                    let decoded =
                        decode_fetched(raw.records, offset).map_err(|e| ClientError::Protocol {
                            addr: addr.clone(),
                            detail: format!("{topic}-{partition}: {e}"),
                        })?;
                    Ok(FetchResult {
                        records: decoded.records,
                        next_offset: decoded.next_offset,
                        high_watermark: raw.high_watermark,
                        log_start_offset: raw.log_start_offset,
                    })
                });
                PartitionFetch { partition, result }
            })
            .collect())
    }

    /// [`Self::fetch_many`] without decoding: each partition's record batches exactly as
    /// the broker sent them (read_uncommitted: every batch, control batches included), for
    /// a mirror that stores them as they are. `max_bytes` bounds each partition (the
    /// broker may still send one larger first batch, KIP-74).
    pub async fn fetch_raw_many(
        &mut self,
        topic: &str,
        positions: &[(i32, i64)],
        max_wait: Duration,
        max_bytes: i32,
    ) -> Result<Vec<PartitionRawFetch>, ClientError> {
        let mut by_leader: BTreeMap<i32, Vec<(i32, i64)>> = BTreeMap::new();
        let mut results: BTreeMap<i32, Result<RawFetch, ClientError>> = BTreeMap::new();
        let mut topic_id = uuid::Uuid::nil();
        for &(partition, offset) in positions {
            match self.route(topic, partition).await {
                Ok(route) => {
                    topic_id = route.topic_id;
                    by_leader
                        .entry(route.leader)
                        .or_default()
                        .push((partition, offset));
                }
                Err(
                    err @ (ClientError::NoLeader { .. } | ClientError::UnknownPartition { .. }),
                ) => {
                    results.insert(partition, Err(err));
                }
                Err(err) => return Err(err),
            }
        }
        let mut stale = false;
        for (leader, group) in by_leader {
            let max_version = topic_id.is_nil().then_some(TOPIC_ID_VERSION - 1);
            let (_, response) = self
                .call::<FetchRequest>(Target::Node(leader), max_version, max_wait, |v| {
                    requests::fetch(v, topic, topic_id, &group, max_wait, max_bytes)
                })
                .await?;
            ClientError::check(response.error_code, None, || format!("fetch from {topic}"))?;
            let offsets: BTreeMap<i32, i64> = group.iter().copied().collect();
            for part in response.responses.iter().flat_map(|t| t.partitions.iter()) {
                let Some(&offset) = offsets.get(&part.partition_index) else {
                    continue;
                };
                let partition = part.partition_index;
                let result = ClientError::check(part.error_code, None, || {
                    format!("fetch from {topic}-{partition} at offset {offset}")
                })
                .map(|()| RawFetch {
                    records: part.records.clone().unwrap_or_default(),
                    high_watermark: part.high_watermark,
                    log_start_offset: part.log_start_offset,
                });
                stale |= result.as_ref().is_err_and(ClientError::is_retriable);
                results.insert(partition, result);
            }
        }
        if stale || results.values().any(|r| r.is_err()) {
            self.invalidate_topic(topic);
        }
        Ok(positions
            .iter()
            .map(|&(partition, _)| PartitionRawFetch {
                partition,
                result: results.remove(&partition).unwrap_or_else(|| {
                    Err(ClientError::Protocol {
                        addr: self.bootstrap_addr().to_string(),
                        detail: format!("fetch response has no entry for {topic}-{partition}"),
                    })
                }),
            })
            .collect())
    }

    /// The offset for `timestamp` in a partition: [`EARLIEST_TIMESTAMP`] (-2) gives the
    /// log start, [`LATEST_TIMESTAMP`] (-1) the high watermark, a time in milliseconds the
    /// first offset whose timestamp is at or after it (`-1` if none).
    pub async fn list_offsets(
        &mut self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<i64, ClientError> {
        self.call_leader(
            topic,
            partition,
            "list offsets",
            |v, timeout| requests::list_offsets(v, topic, partition, timestamp, timeout),
            |r| {
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .find(|p| p.partition_index == partition)
                    .map(|p| (p.error_code, p.offset))
            },
        )
        .await
    }

    /// Deletes the records of a partition below `offset` (`-1`: below the high watermark),
    /// as `kafka-delete-records.sh` does; returns the partition's low watermark (log start
    /// offset) after it.
    pub async fn delete_records(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<i64, ClientError> {
        self.call_leader(
            topic,
            partition,
            "delete records",
            |v, timeout| requests::delete_records(v, topic, partition, offset, timeout),
            |r| {
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .find(|p| p.partition_index == partition)
                    .map(|p| (p.error_code, p.low_watermark))
            },
        )
        .await
    }

    /// One partition's request to its leader, retried like the others (metadata refreshed
    /// after a retriable error): `build` makes it at a version with the client's timeout,
    /// `pick` finds the partition's (error code, answer) in the response.
    async fn call_leader<R: Request, T>(
        &mut self,
        topic: &str,
        partition: i32,
        what: &str,
        build: impl Fn(i16, Duration) -> R,
        pick: impl Fn(&R::Response) -> Option<(i16, T)>,
    ) -> Result<T, ClientError> {
        let mut attempt = 0;
        loop {
            let result = async {
                let route = self.route(topic, partition).await?;
                let timeout = self.options.timeout;
                let (_, response) = self
                    .call(Target::Node(route.leader), None, Duration::ZERO, |v| {
                        build(v, timeout)
                    })
                    .await?;
                let (code, value) = pick(&response).ok_or_else(|| ClientError::Protocol {
                    addr: format!("broker {}", route.leader),
                    detail: format!("{what} response has no entry for {topic}-{partition}"),
                })?;
                ClientError::check(code, None, || format!("{what} of {topic}-{partition}"))?;
                Ok(value)
            }
            .await;
            match result {
                Err(err) if self.should_retry(topic, &err, attempt).await => attempt += 1,
                other => return other,
            }
        }
    }
}
