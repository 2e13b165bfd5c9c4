//! The broker side of the coordinator's [`TxnEnv`]: writing a transaction's markers where
//! they belong, as Kafka's `TransactionMarkerChannelManager` does.
//!
//! A job's partitions are grouped by leader (the topic cache's view): those led here are
//! written through the log ([`Broker::write_txn_marker`]); the others go to their leader in
//! one WriteTxnMarkers request each, over a connection per broker kept for reuse
//! ([`super::peers`]). A job's
//! groups are the consumer groups whose offsets the transaction committed: each group's
//! coordinator completes the group's pending offsets (here: the group coordinator;
//! elsewhere: WriteTxnMarkers naming `__consumer_offsets` and the group's offsets
//! partition, as Kafka's coordinator does). A partition whose topic is gone is skipped
//! (Kafka drops deleted partitions from a pending transaction too); every other failure
//! fails the job, which the driver retries whole — each part is idempotent (a marker
//! written twice ends nothing the second time; completed offsets are not pending any more).

use super::coordinator::{MarkerJob, TxnEnv};
use crate::broker::Broker;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{ProducerId, WriteTxnMarkersRequest};
use oxbow_metadata::BrokerId;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The internal topic group markers name (Kafka's offsets topic).
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Bound on one WriteTxnMarkers exchange with another broker (the markers are acks=all
/// appends there).
pub const REMOTE_TIMEOUT: Duration = Duration::from_secs(30);

/// Where one job's markers go: (topic, partitions) per broker.
type Plan = BTreeMap<BrokerId, BTreeMap<String, Vec<i32>>>;

#[async_trait::async_trait]
impl TxnEnv for Broker {
    fn coordinates(&self, transactional_id: &str) -> bool {
        self.cluster.coordinator_for(transactional_id) == self.settings.broker_id
    }

    async fn next_producer_id(&self) -> Result<i64, String> {
        Broker::next_producer_id(self)
            .await
            .map_err(|e| e.to_string())
    }

    async fn write_markers(&self, job: &MarkerJob) -> Result<(), String> {
        let mut plan: Plan = BTreeMap::new();
        for (topic, partition) in &job.partitions {
            let Some(meta) = self.topic(topic) else {
                tracing::info!(topic, partition, "topic gone: no transaction marker for it");
                continue;
            };
            let Some(state) = meta.partition(*partition) else {
                continue;
            };
            plan.entry(state.leader)
                .or_default()
                .entry(topic.clone())
                .or_default()
                .push(*partition);
        }
        for group in &job.groups {
            let coordinator = self.cluster.coordinator_for(group);
            plan.entry(coordinator)
                .or_default()
                .entry(OFFSETS_TOPIC.to_string())
                .or_default()
                .push(crate::groups::offsets_partition(group));
        }
        // Every broker's part at once.
        let results = futures::future::join_all(plan.iter().map(|(leader, topics)| async move {
            let result = if *leader == self.settings.broker_id {
                self.write_markers_here(job, topics).await
            } else {
                self.write_markers_at(*leader, job, topics).await
            };
            result.map_err(|e| format!("broker {leader}: {e}"))
        }))
        .await;
        let failures: Vec<String> = results.into_iter().filter_map(|r| r.err()).collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }

    fn now_ms(&self) -> i64 {
        #[allow(clippy::disallowed_methods)] // the gateway's wall clock (not simulated)
        let now = std::time::SystemTime::now();
        now.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }

    async fn pause(&self, d: Duration) {
        #[allow(clippy::disallowed_methods)] // the gateway's real clock
        tokio::time::sleep(d).await;
    }
}

impl Broker {
    /// One marker (or a group's completion) per (topic, partition), each led or
    /// coordinated here. Returns the Kafka code of each, as WriteTxnMarkers answers.
    pub async fn apply_markers(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
        topics: &BTreeMap<String, Vec<i32>>,
    ) -> BTreeMap<(String, i32), i16> {
        let mut codes = BTreeMap::new();
        for (topic, partitions) in topics {
            if topic == OFFSETS_TOPIC {
                // Groups another broker coordinates now: NOT_COORDINATOR for their partition,
                // so the transaction coordinator sends the marker there.
                let (code, elsewhere) = match self
                    .coordinator
                    .complete_txn_offsets(producer_id, producer_epoch, partitions, commit)
                    .await
                {
                    Ok(done) => (
                        0,
                        done.not_coordinator
                            .into_iter()
                            .map(|(_, p)| p)
                            .collect::<std::collections::BTreeSet<i32>>(),
                    ),
                    Err(e) => {
                        tracing::info!(error = %e, "pending transactional offsets not completed yet");
                        (
                            ResponseError::CoordinatorNotAvailable.code(),
                            Default::default(),
                        )
                    }
                };
                for p in partitions {
                    let code = if elsewhere.contains(p) {
                        ResponseError::NotCoordinator.code()
                    } else {
                        code
                    };
                    codes.insert((topic.clone(), *p), code);
                }
                continue;
            }
            let Some(meta) = self.topic(topic) else {
                for p in partitions {
                    codes.insert(
                        (topic.clone(), *p),
                        ResponseError::UnknownTopicOrPartition.code(),
                    );
                }
                continue;
            };
            // All at once, so they share the WAL's group commits instead of one fsync each.
            let written = futures::future::join_all(partitions.iter().map(|p| {
                self.write_txn_marker(
                    &meta,
                    *p,
                    producer_id,
                    producer_epoch,
                    commit,
                    coordinator_epoch,
                )
            }))
            .await;
            for (p, result) in partitions.iter().zip(written) {
                let code = match result {
                    Ok(_) => 0,
                    Err(e) => e.code(),
                };
                codes.insert((topic.clone(), *p), code);
            }
        }
        codes
    }

    async fn write_markers_here(
        &self,
        job: &MarkerJob,
        topics: &BTreeMap<String, Vec<i32>>,
    ) -> Result<(), String> {
        let codes = self
            .apply_markers(
                job.producer_id,
                job.producer_epoch,
                job.commit,
                job.coordinator_epoch,
                topics,
            )
            .await;
        settled(codes)
    }

    async fn write_markers_at(
        &self,
        leader: BrokerId,
        job: &MarkerJob,
        topics: &BTreeMap<String, Vec<i32>>,
    ) -> Result<(), String> {
        let addr = self
            .cluster
            .broker(leader)
            .map(|b| b.kafka_addr)
            .ok_or_else(|| "not registered".to_string())?;
        let marker = WritableTxnMarker::default()
            .with_producer_id(ProducerId(job.producer_id))
            .with_producer_epoch(job.producer_epoch)
            .with_transaction_result(job.commit)
            .with_coordinator_epoch(job.coordinator_epoch)
            .with_topics(
                topics
                    .iter()
                    .map(|(t, ps)| {
                        WritableTxnMarkerTopic::default()
                            .with_name(kafka_protocol::messages::TopicName(
                                kafka_protocol::protocol::StrBytes::from_string(t.clone()),
                            ))
                            .with_partition_indexes(ps.clone())
                    })
                    .collect(),
            );
        let request = WriteTxnMarkersRequest::default().with_markers(vec![marker]);
        let (_, response) = self
            .marker_peers
            .call(leader, &addr, &request, 0..=i16::MAX)
            .await?
            .ok_or_else(|| "does not take WriteTxnMarkers".to_string())?;
        let mut codes = BTreeMap::new();
        for m in response.markers {
            for t in m.topics {
                for p in t.partitions {
                    codes.insert((t.name.to_string(), p.partition_index), p.error_code);
                }
            }
        }
        // Every partition asked must be answered.
        for (t, ps) in topics {
            for p in ps {
                codes
                    .entry((t.clone(), *p))
                    .or_insert(ResponseError::UnknownServerError.code());
            }
        }
        settled(codes)
    }
}

/// Whether every marker of a job's part landed. A partition whose producer moved to a
/// newer epoch than the marker's (INVALID_PRODUCER_EPOCH) is given up on, as Kafka's
/// marker channel does: a later transaction of a newer epoch owns it. Anything else
/// (including UNKNOWN_TOPIC_OR_PARTITION from a leader whose cache lags) is retried; a
/// topic deleted for good is dropped from the plan once this broker's cache says so.
fn settled(codes: BTreeMap<(String, i32), i16>) -> Result<(), String> {
    let stale_epoch = ResponseError::InvalidProducerEpoch.code();
    let failed: Vec<String> = codes
        .into_iter()
        .filter(|((t, p), c)| {
            if *c == stale_epoch {
                tracing::warn!(topic = %t, partition = p, "transaction marker older than the partition's producer epoch; not written");
            }
            *c != 0 && *c != stale_epoch
        })
        .map(|((t, p), c)| format!("{t}-{p}: error {c}"))
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join(", "))
    }
}

/// Keeps `Arc<Broker>` usable where the driver wants its environment.
pub fn env(broker: &Arc<Broker>) -> Arc<dyn TxnEnv> {
    broker.clone()
}
