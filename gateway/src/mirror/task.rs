//! One mirror partition's task (issue 20): on the partition's leader, fetch record batches
//! from the source partition at the mirror's log end and hold them at their source offsets
//! ([`oxbow_segment_writer::LogManager::enqueue_mirrored`]), as durable as an `acks=all`
//! produce before the next fetch.
//!
//! Where to fetch: always the mirror's log end, read again before every fetch, so a task
//! that starts on a new leader (failover, handoff) or after a pause resumes exactly where
//! the log ends: nothing is skipped, and what it fetches again is skipped by the append.
//! A source whose log starts past that end (retention, or an empty mirror of an old topic)
//! answers `OFFSET_OUT_OF_RANGE`; the task then fetches from the source's log start and the
//! append covers the gap with an empty batch. A source whose log ends below the mirror's
//! end no longer holds what was mirrored (it lost data, or it is another cluster): the
//! task stops and the topic is marked failed rather than appending a different history.
//!
//! Bounds: one fetch in flight per partition, at most [`FETCH_BYTES`] per fetch and
//! [`super::LINK_INFLIGHT_BYTES`] per link and broker (the client's frame limit bounds a
//! hostile answer), one connection set per task, every request under the client's timeout. Errors are retried after [`RETRY_BACKOFF`], and
//! reported as the link's last error (`oxbow links describe`).

use super::{Mirrors, PartitionLag};
use crate::broker::Broker;
use crate::client::{Client, ClientError, ClientOptions, ResponseError, EARLIEST_TIMESTAMP};
use oxbow_metadata::Link;
use oxbow_segment_writer::batch;
use oxbow_segment_writer::Mirrored;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Bytes asked for per fetch (per partition): the memory a task holds at most, besides
/// one larger first batch a source may send (bounded by the client's frame limit).
pub const FETCH_BYTES: i32 = 4 << 20;
/// The largest single source batch a mirror takes (Kafka's `message.max.bytes` ceiling is
/// far below this; a larger one is hostile).
pub const MAX_BATCH_BYTES: usize = 64 << 20;
/// How long a fetch waits at the source for new data.
pub const FETCH_WAIT: Duration = Duration::from_millis(500);
/// Pause after a failure before trying again.
pub const RETRY_BACKOFF: Duration = Duration::from_secs(1);
/// Bound on connecting and on every request to the source.
pub const SOURCE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a task ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// Asked to stop (shutdown, pause, promotion, leadership moved or link changed).
    Stopped,
    /// The source no longer matches the mirror: the topic must be failed.
    Failed(String),
}

/// What one task needs.
pub struct Task {
    pub broker: Arc<Broker>,
    pub mirrors: Arc<Mirrors>,
    pub topic: String,
    pub partition: i32,
    pub link: Link,
    pub source_topic: String,
    pub lag: Arc<PartitionLag>,
    pub bytes: Arc<AtomicU64>,
}

/// The client options of a link's connections.
pub fn client_options(link: &Link) -> Result<ClientOptions, String> {
    let sasl = match &link.security.sasl_mechanism {
        None => None,
        Some(m) => {
            let mechanism = crate::security::sasl::Mechanism::ALL
                .into_iter()
                .find(|x| x.name() == m)
                .ok_or_else(|| format!("SASL mechanism {m} is not supported"))?;
            let user = link.security.sasl_username.clone().unwrap_or_default();
            let password = link.security.sasl_password.clone().unwrap_or_default();
            Some(crate::client::sasl::SaslCredentials::new(
                mechanism, user, password,
            ))
        }
    };
    let tls = match &link.security.ssl_ca_pem {
        None => None,
        Some(pem) => Some(crate::client::connection::tls_config_from_pem(
            pem.as_bytes(),
        )?),
    };
    Ok(ClientOptions {
        timeout: SOURCE_TIMEOUT,
        client_id: format!("oxbow-mirror-{}", link.name),
        sasl,
        tls,
    })
}

/// Connects to a link's source cluster.
pub async fn connect(link: &Link) -> Result<Client, String> {
    let options = client_options(link)?;
    match tokio::time::timeout(
        SOURCE_TIMEOUT,
        Client::connect_with(&link.bootstrap, options),
    )
    .await
    {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(format!("connecting to {}: {e}", link.bootstrap)),
        Err(_) => Err(format!(
            "connecting to {}: no answer within {SOURCE_TIMEOUT:?}",
            link.bootstrap
        )),
    }
}

impl Task {
    fn label(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    /// Runs until stopped or failed.
    pub async fn run(self, stop: CancellationToken) -> Ended {
        let mut client: Option<Client> = None;
        // Where the next fetch starts when the source's log begins past the mirror's end.
        let mut skip_to: Option<i64> = None;
        loop {
            if stop.is_cancelled() || !self.mirrors.still_wanted(&self.topic, &self.link) {
                return Ended::Stopped;
            }
            let step = tokio::select! {
                _ = stop.cancelled() => return Ended::Stopped,
                r = self.step(&mut client, &mut skip_to) => r,
            };
            match step {
                Ok(()) => self.mirrors.set_link_error(&self.link.name, None),
                Err(StepError::Stop) => return Ended::Stopped,
                Err(StepError::Fail(why)) => return Ended::Failed(why),
                Err(StepError::Retry { why, reconnect }) => {
                    tracing::warn!(partition = %self.label(), link = %self.link.name, error = %why, "mirroring paused; retrying");
                    self.mirrors.set_link_error(&self.link.name, Some(why));
                    if reconnect {
                        client = None;
                    }
                    tokio::select! {
                        _ = stop.cancelled() => return Ended::Stopped,
                        _ = tokio::time::sleep(RETRY_BACKOFF) => {}
                    }
                }
            }
        }
    }

    /// One fetch and its appends.
    async fn step(
        &self,
        client: &mut Option<Client>,
        skip_to: &mut Option<i64>,
    ) -> Result<(), StepError> {
        let topic = self.broker.topic(&self.topic).ok_or(StepError::Stop)?;
        // Not (or no longer) the leader here: the supervisor stops this task.
        let p = self
            .broker
            .partition(&topic, self.partition)
            .await
            .map_err(|_| StepError::Stop)?;
        let (_, _, log_end) = p.offsets().map_err(|e| StepError::retry(e, false))?;
        let from = skip_to.filter(|s| *s > log_end).unwrap_or(log_end);
        if client.is_none() {
            *client = Some(connect(&self.link).await.map_err(|why| StepError::Retry {
                why,
                reconnect: true,
            })?);
        }
        let Some(c) = client.as_mut() else {
            return Err(StepError::Stop);
        };
        // The link's budget first: held until this fetch's batches are appended.
        let budget = self.mirrors.link_budget(&self.link.name);
        let _permit = budget
            .acquire_many((FETCH_BYTES >> 10) as u32)
            .await
            .map_err(|_| StepError::Stop)?;
        let fetched = c
            .fetch_raw_many(
                &self.source_topic,
                &[(self.partition, from)],
                FETCH_WAIT,
                FETCH_BYTES,
            )
            .await
            .map_err(classify)?
            .pop()
            .ok_or_else(|| StepError::retry("empty fetch response", true))?
            .result;
        let raw = match fetched {
            Ok(raw) => raw,
            Err(e) if e.kafka_error() == Some(ResponseError::OffsetOutOfRange) => {
                let start = c
                    .list_offsets(&self.source_topic, self.partition, EARLIEST_TIMESTAMP)
                    .await
                    .map_err(classify)?;
                let latest = c
                    .list_offsets(
                        &self.source_topic,
                        self.partition,
                        crate::client::LATEST_TIMESTAMP,
                    )
                    .await
                    .map_err(classify)?;
                if latest < log_end {
                    return Err(StepError::Fail(format!(
                        "source {}-{} ends at offset {latest}, below the mirror's log end {log_end}: \
                         the source no longer holds what was mirrored",
                        self.source_topic, self.partition
                    )));
                }
                if start > log_end {
                    *skip_to = Some(start);
                    return Ok(());
                }
                return Err(StepError::retry(
                    format!("offset {from} out of range at the source ({start}..{latest})"),
                    false,
                ));
            }
            Err(e) => return Err(classify(e)),
        };
        let min_isr = topic.configs.min_insync_replicas();
        let mut pending: Vec<oxbow_segment_writer::PendingAppend> = Vec::new();
        let mut appended_bytes = 0u64;
        // The oldest record timestamp this fetch brought (its first data batch's newest).
        let mut oldest_ts = -1i64;
        let mut max_producer_id = -1i64;
        let mut pos = 0usize;
        loop {
            // A partial last batch (the fetch's byte limit) is fetched whole next time; a
            // header that does not parse (magic 0 or 1, a bad length) cannot be mirrored.
            let h = match batch::peek_header(&raw.records[pos..]) {
                Ok(Some(h)) => h,
                Ok(None) => break,
                Err(e) => {
                    for a in pending {
                        let _ = a.wait().await;
                    }
                    return Err(StepError::Fail(format!(
                        "source {}-{} sent a batch that cannot be mirrored: {e}",
                        self.source_topic, self.partition
                    )));
                }
            };
            let one = &raw.records[pos..pos + h.size];
            pos += h.size;
            match self
                .broker
                .log
                .enqueue_mirrored(&p, one, MAX_BATCH_BYTES, min_isr)
                .await
            {
                Ok(Mirrored::Skipped) => {}
                Ok(Mirrored::Queued(q)) => {
                    appended_bytes += one.len() as u64;
                    if oldest_ts < 0 && h.record_count > 0 {
                        oldest_ts = h.max_timestamp;
                    }
                    max_producer_id = max_producer_id.max(h.producer_id);
                    pending.extend(q);
                }
                Err(e) => {
                    // Wait for what is queued before deciding (it stays appended).
                    for a in pending {
                        let _ = a.wait().await;
                    }
                    return Err(match e.kind() {
                        oxbow_segment_writer::ErrorKind::Corrupt
                        | oxbow_segment_writer::ErrorKind::InvalidRecord
                        | oxbow_segment_writer::ErrorKind::TooLarge => StepError::Fail(format!(
                            "source batch of {}-{} refused: {e}",
                            self.source_topic, self.partition
                        )),
                        oxbow_segment_writer::ErrorKind::NotLeader => StepError::Stop,
                        _ => StepError::retry(e, false),
                    });
                }
            }
        }
        // Before the batches count as mirrored, no producer of this cluster may get their ids.
        if max_producer_id >= 0 {
            self.mirrors
                .reserve_producer_ids_through(self.broker.metadata.as_ref(), max_producer_id)
                .await
                .map_err(|e| StepError::retry(e, false))?;
        }
        for a in pending {
            a.wait().await.map_err(|e| StepError::retry(e, false))?;
        }
        *skip_to = None;
        self.bytes.fetch_add(appended_bytes, Ordering::Relaxed);
        // Lag as the source answered this fetch: what it held past the mirror's end then
        // (0 only when the mirror was fully caught up), and how old the oldest record it
        // brought was when mirrored (by the source's timestamps; 0 if nothing new).
        let behind = (raw.high_watermark - from).max(0);
        self.lag.records.store(behind, Ordering::Relaxed);
        self.lag
            .source_high_watermark
            .store(raw.high_watermark, Ordering::Relaxed);
        let age_ms = if oldest_ts < 0 {
            0
        } else {
            (crate::metrics::lag::now_ms() as i64 - oldest_ts).max(0)
        };
        self.lag.ms.store(age_ms, Ordering::Relaxed);
        self.follow_log_start(&p, raw.log_start_offset).await;
        Ok(())
    }

    /// The source's log start (its retention, DeleteRecords) becomes the mirror's, as far
    /// as the mirror has sealed (a log start never passes what the object store holds; the
    /// rest follows on a later fetch). A failure is logged and tried again next fetch.
    async fn follow_log_start(&self, p: &oxbow_segment_writer::Partition, source_start: i64) {
        let Ok((start, _, _)) = p.offsets() else {
            return;
        };
        if source_start <= start {
            return;
        }
        let log = &self.broker.log;
        let sealed = match log.wait_sealed(p, source_start, Duration::ZERO).await {
            Ok(s) => s,
            Err(_) => return,
        };
        let to = source_start.min(sealed);
        if to > start {
            if let Err(e) = log.advance_log_start(p, to).await {
                tracing::debug!(partition = %self.label(), error = %e, "mirror log start not moved yet");
            }
        }
    }
}

enum StepError {
    /// Stop quietly (not leading, topic gone here): the supervisor decides what next.
    Stop,
    /// Stop and fail the mirror topic.
    Fail(String),
    /// Try again after a pause; `reconnect`: drop the connections first.
    Retry { why: String, reconnect: bool },
}

impl StepError {
    fn retry(e: impl std::fmt::Display, reconnect: bool) -> StepError {
        StepError::Retry {
            why: e.to_string(),
            reconnect,
        }
    }
}

fn classify(e: ClientError) -> StepError {
    match &e {
        ClientError::UnknownTopic(_) => StepError::Retry {
            why: format!("source topic gone: {e}"),
            reconnect: false,
        },
        ClientError::Kafka {
            code:
                ResponseError::SaslAuthenticationFailed
                | ResponseError::TopicAuthorizationFailed
                | ResponseError::ClusterAuthorizationFailed,
            ..
        } => StepError::Retry {
            why: format!("source refused the link's credentials: {e}"),
            reconnect: true,
        },
        _ => StepError::Retry {
            why: e.to_string(),
            reconnect: !e.is_retriable(),
        },
    }
}
