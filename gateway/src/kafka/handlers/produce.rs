//! Produce: every partition's batch is appended in request order (the ordered part); the
//! response waits until each is as durable as `acks` asks, or the request's timeout.

use super::{denied, str_bytes, topic_name, Reply};
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::security::acl::{AclOperation, ResourceType};
use crate::security::Session;
use futures::FutureExt;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, ResponseKind};
use oxbow_segment_writer::{Acks, PendingAppend};
use std::sync::Arc;
use std::time::Duration;

/// Used when a client sends no positive timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

enum Outcome {
    Pending {
        pending: PendingAppend,
        log_start_offset: i64,
    },
    Failed(i16, String),
}

fn error_response(
    version: i16,
    index: i32,
    code: i16,
    message: String,
) -> PartitionProduceResponse {
    // error_message exists from v8.
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(code)
        .with_base_offset(-1)
        .with_error_message((version >= 8).then(|| str_bytes(&message)))
}

/// Opens the request's partitions that this broker leads but has not opened yet, side by
/// side (bounded by the log's open shards): the appends below go one partition at a time,
/// in order, and a first request naming a thousand partitions would otherwise wait for a
/// thousand opens in a row. Errors are left for the appends to report.
async fn open_side_by_side(broker: &Arc<Broker>, req: &ProduceRequest) {
    let mut unopened = Vec::new();
    for t in &req.topic_data {
        let Some(topic) = broker.topic(&t.name.0) else {
            continue;
        };
        for p in &t.partition_data {
            let tp = oxbow_metadata::TopicPartition::new(topic.topic_id, p.index);
            let led_here = topic
                .partition(p.index)
                .is_some_and(|s| s.leader == broker.settings.broker_id);
            if led_here && broker.log.get(&tp).is_none() {
                unopened.push((topic.clone(), p.index));
            }
        }
    }
    if unopened.len() < 2 {
        return;
    }
    let opens = unopened
        .iter()
        .map(|(topic, index)| broker.partition(topic, *index));
    for r in futures::future::join_all(opens).await {
        if let Err(e) = r {
            tracing::debug!(error = %e, "opening a partition before its append failed");
        }
    }
}

pub async fn handle(
    broker: &Arc<Broker>,
    session: &Session,
    req: ProduceRequest,
    version: i16,
) -> Reply {
    let authz = broker.authz(session);
    // WRITE on the transactional id (Kafka refuses the whole request), then WRITE on each
    // topic, checked before whether it exists. (Since KIP-679 an idempotent producer is
    // authorized at InitProducerId, not here.)
    let txn_refused = match &req.transactional_id {
        Some(id) => (!authz.allows(
            AclOperation::Write,
            ResourceType::TransactionalId,
            id.as_str(),
        ))
        .then_some("WRITE on the transactional id is not authorized"),
        // Kafka's `KafkaApis.handleProduceRequest`: transactional records need a
        // transactional id (and WRITE on it), refused for the whole request before anything
        // else — what a client gets for a transaction its coordinator never began.
        None => req
            .topic_data
            .iter()
            .flat_map(|t| t.partition_data.iter())
            .any(|p| p.records.as_deref().is_some_and(is_transactional))
            .then_some("transactional records in a request without a transactional id"),
    };
    let acks = if req.acks == -1 {
        Acks::All
    } else {
        Acks::Leader
    };
    let acks_invalid = !(-1..=1).contains(&req.acks);
    if !acks_invalid && txn_refused.is_none() {
        open_side_by_side(broker, &req).await;
    }
    // KIP-890 part 1: a transaction's first batch in a partition is taken only if its
    // coordinator says the partition is in the ongoing transaction.
    let mut guards = match (&req.transactional_id, acks_invalid || txn_refused.is_some()) {
        (Some(id), false) => {
            crate::transactions::verify::guards(broker, id.as_str(), &req, version).await
        }
        _ => Default::default(),
    };
    let mut topics = Vec::with_capacity(req.topic_data.len());
    for t in req.topic_data {
        let name = t.name.0.to_string();
        let topic = broker.topic(&name);
        let topic_refused = !authz.allows(AclOperation::Write, ResourceType::Topic, &name);
        let mut partitions = Vec::with_capacity(t.partition_data.len());
        for p in t.partition_data {
            let outcome = if let Some(why) = txn_refused {
                Outcome::Failed(denied(ResourceType::TransactionalId), why.into())
            } else if topic_refused {
                Outcome::Failed(
                    denied(ResourceType::Topic),
                    format!("WRITE on topic '{name}' is not authorized"),
                )
            } else if acks_invalid {
                Outcome::Failed(
                    ResponseError::InvalidRequiredAcks.code(),
                    format!("acks must be 0, 1 or -1, not {}", req.acks),
                )
            } else {
                match (&topic, p.records) {
                    // `__consumer_offsets` is listed (internal) but takes no records:
                    // INVALID_TOPIC_EXCEPTION, as Kafka answers a client producing there.
                    (None, _) if oxbow_metadata::topic::is_internal_topic(&name) => {
                        Outcome::Failed(
                            ResponseError::InvalidTopicException.code(),
                            format!("'{name}' is an internal topic: clients cannot produce to it"),
                        )
                    }
                    (None, _) => Outcome::Failed(
                        ResponseError::UnknownTopicOrPartition.code(),
                        format!("topic '{name}' does not exist"),
                    ),
                    (Some(_), None) => Outcome::Failed(
                        ResponseError::CorruptMessage.code(),
                        "no record batch".into(),
                    ),
                    (Some(_), Some(records)) if version < 7 && is_zstd(&records) => {
                        // Kafka's ProduceRequest.validateRecords: zstd needs v7 (KIP-110),
                        // so an old client never gets batches it cannot decompress.
                        let e = BrokerError::UnsupportedCompression(format!(
                            "zstd batches need Produce v7 or later, this request is v{version}"
                        ));
                        Outcome::Failed(e.code(), e.to_string())
                    }
                    (Some(topic), Some(records)) => {
                        let guard = match guards.remove(&(name.clone(), p.index)) {
                            Some(Ok(g)) => Some(g),
                            Some(Err((code, message))) => {
                                partitions.push((p.index, Outcome::Failed(code, message)));
                                continue;
                            }
                            // Not verifiable (not led here, unreadable): the log still
                            // refuses a transaction's first batch under the sentinel.
                            None if req.transactional_id.is_some() => {
                                Some(oxbow_segment_writer::txn_verify::VerificationGuard::SENTINEL)
                            }
                            None => None,
                        };
                        match broker
                            .produce_pending_verified(topic, p.index, &records, acks, guard)
                            .await
                        {
                            Ok(pending) => Outcome::Pending {
                                pending,
                                log_start_offset: topic
                                    .partition(p.index)
                                    .map(|s| s.log_start_offset)
                                    .unwrap_or(0),
                            },
                            Err(e) => {
                                log_rejection(&name, p.index, &e);
                                Outcome::Failed(e.code(), e.to_string())
                            }
                        }
                    }
                }
            };
            partitions.push((p.index, outcome));
        }
        topics.push((name, partitions));
    }
    if req.acks == 0 {
        return Reply::NoResponse;
    }
    let timeout = u64::try_from(req.timeout_ms)
        .ok()
        .filter(|t| *t > 0)
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_TIMEOUT);
    Reply::Later(
        async move {
            let mut responses = Vec::with_capacity(topics.len());
            for (name, partitions) in topics {
                let mut out = Vec::with_capacity(partitions.len());
                for (index, outcome) in partitions {
                    out.push(match outcome {
                        Outcome::Failed(code, message) => {
                            error_response(version, index, code, message)
                        }
                        Outcome::Pending {
                            pending,
                            log_start_offset,
                        } => match tokio::time::timeout(timeout, pending.wait()).await {
                            Ok(Ok(a)) => PartitionProduceResponse::default()
                                .with_index(index)
                                .with_base_offset(a.base_offset)
                                .with_log_append_time_ms(a.log_append_time_ms)
                                .with_log_start_offset(if version >= 5 {
                                    log_start_offset
                                } else {
                                    -1
                                }),
                            Ok(Err(e)) => {
                                let e = BrokerError::from(e);
                                error_response(version, index, e.code(), e.to_string())
                            }
                            Err(_) => error_response(
                                version,
                                index,
                                ResponseError::RequestTimedOut.code(),
                                "not durable within the request timeout".into(),
                            ),
                        },
                    });
                }
                responses.push(
                    TopicProduceResponse::default()
                        .with_name(topic_name(&name))
                        .with_partition_responses(out),
                );
            }
            ResponseKind::Produce(ProduceResponse::default().with_responses(responses))
        }
        .boxed(),
    )
}

/// Whether a produced batch says it is zstd-compressed (validation proper is the log's).
fn is_zstd(records: &[u8]) -> bool {
    oxbow_segment_writer::batch::peek_header(records)
        .ok()
        .flatten()
        .is_some_and(|h| h.compression() == 4)
}

fn is_transactional(records: &[u8]) -> bool {
    oxbow_segment_writer::batch::peek_header(records)
        .ok()
        .flatten()
        .is_some_and(|h| h.is_transactional())
}

fn log_rejection(topic: &str, partition: i32, e: &BrokerError) {
    tracing::debug!(topic, partition, error = %e, "produce rejected");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::handlers::txn;
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, InitProducerIdRequest, ProducerId, TransactionalId,
    };
    use oxbow_metadata::TopicSpec;
    use oxbow_segment_writer::batch::testing::make_txn_batch;

    fn session() -> Session {
        Session::plaintext("127.0.0.1:5000".parse().expect("address"))
    }

    /// Produces one transactional batch per partition (sequence `seq`) of topic `t` as
    /// transactional id `tx`: each partition's error code.
    async fn produce(broker: &Arc<Broker>, pid: i64, seq: i32, partitions: &[i32]) -> Vec<i16> {
        produce_at(broker, pid, 0, seq, partitions, 8).await
    }

    async fn produce_at(
        broker: &Arc<Broker>,
        pid: i64,
        epoch: i16,
        seq: i32,
        partitions: &[i32],
        version: i16,
    ) -> Vec<i16> {
        let req = ProduceRequest::default()
            .with_transactional_id(Some(TransactionalId(str_bytes("tx"))))
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(topic_name("t"))
                .with_partition_data(
                    partitions
                        .iter()
                        .map(|p| {
                            PartitionProduceData::default()
                                .with_index(*p)
                                .with_records(Some(
                                    make_txn_batch(1, 1_000, pid, epoch, seq).into(),
                                ))
                        })
                        .collect(),
                )]);
        let reply = handle(broker, &session(), req, version).await;
        let Reply::Later(f) = reply else {
            panic!("acks=all answers later")
        };
        let ResponseKind::Produce(r) = f.await else {
            panic!("a produce response")
        };
        r.responses[0]
            .partition_responses
            .iter()
            .map(|p| p.error_code)
            .collect()
    }

    async fn temp_broker_with_topic(dir: &std::path::Path) -> Arc<Broker> {
        let broker = crate::broker::testing::temp_broker(dir, Default::default()).await;
        broker
            .create_topic(TopicSpec {
                name: "t".into(),
                partitions: 2,
                replication_factor: 1,
                configs: Default::default(),
            })
            .await
            .expect("topic");
        broker
    }

    async fn init(broker: &Arc<Broker>) -> i64 {
        let init = txn::init_producer_id(
            broker,
            "tx",
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(str_bytes("tx"))))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
            4,
        )
        .await;
        assert_eq!(init.error_code, 0);
        init.producer_id.0
    }

    /// KIP-890 part 2 (transaction protocol 2): Produce v12 adds its partition to the
    /// transaction (no AddPartitionsToTxn), EndTxn v5 bumps the epoch and hands it back, and
    /// the next transaction runs at it; the old epoch is fenced from then on.
    #[tokio::test]
    async fn protocol_2_adds_partitions_with_produce_and_bumps_the_epoch_per_transaction() {
        use kafka_protocol::messages::EndTxnRequest;
        let dir = tempfile::tempdir().expect("tmp");
        let broker = temp_broker_with_topic(dir.path()).await;
        let pid = init(&broker).await;
        // Protocol 1 (Produce v11) still needs the partition added.
        let invalid = ResponseError::InvalidTxnState.code();
        assert_eq!(
            produce_at(&broker, pid, 0, 0, &[0], 11).await,
            vec![invalid]
        );
        assert_eq!(
            produce_at(&broker, pid, 0, 0, &[0, 1], 12).await,
            vec![0, 0]
        );
        let listing = broker.transactions.describe("tx").await.expect("describe");
        let t = listing.expect("stored").transaction;
        assert_eq!(
            t.partitions.len(),
            2,
            "both partitions added by the produce"
        );
        let end = |epoch: i16| {
            EndTxnRequest::default()
                .with_transactional_id(TransactionalId(str_bytes("tx")))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_committed(true)
        };
        let r = txn::end_txn(&broker, &session(), end(0), 5).await;
        assert_eq!(
            (r.error_code, r.producer_id.0, r.producer_epoch),
            (0, pid, 1)
        );
        // The markers are written in the background; the next transaction waits for them
        // (NOT_ENOUGH_REPLICAS, retriable) and then runs at epoch 1, sequences from 0.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let codes = produce_at(&broker, pid, 1, 0, &[0], 12).await;
            if codes == vec![0] {
                break;
            }
            assert_eq!(codes, vec![ResponseError::NotEnoughReplicas.code()]);
            assert!(
                std::time::Instant::now() < deadline,
                "the previous commit never completed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // A zombie at epoch 0 is fenced at the coordinator.
        assert_eq!(
            produce_at(&broker, pid, 0, 1, &[1], 12).await,
            vec![ResponseError::InvalidProducerEpoch.code()]
        );
    }

    /// KIP-890 part 1: a transaction's first batch in a partition is taken only once its
    /// coordinator says the partition is in the ongoing transaction (INVALID_TXN_STATE
    /// otherwise, nothing stored); AddPartitionsToTxn v4 `verify_only` answers the same
    /// question for another broker.
    #[tokio::test]
    async fn a_transactions_first_batch_is_verified_with_its_coordinator() {
        let dir = tempfile::tempdir().expect("tmp");
        let broker = temp_broker_with_topic(dir.path()).await;
        let pid = init(&broker).await;
        let invalid = ResponseError::InvalidTxnState.code();
        assert_eq!(
            produce(&broker, pid, 0, &[0]).await,
            vec![invalid],
            "never added"
        );
        let add = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(str_bytes("tx")))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(0)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(topic_name("t"))
                .with_partitions(vec![0])]);
        let added = txn::add_partitions(&broker, &session(), add, 3).await;
        assert_eq!(
            added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
            0
        );
        // Partition 0 is in the transaction, partition 1 is not.
        let verify = AddPartitionsToTxnRequest::default().with_transactions(vec![
            AddPartitionsToTxnTransaction::default()
                .with_transactional_id(TransactionalId(str_bytes("tx")))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(0)
                .with_verify_only(true)
                .with_topics(vec![AddPartitionsToTxnTopic::default()
                    .with_name(topic_name("t"))
                    .with_partitions(vec![0, 1])]),
        ]);
        let verified = txn::add_partitions(&broker, &session(), verify, 4).await;
        assert_eq!(verified.error_code, 0);
        let codes: Vec<i16> = verified.results_by_transaction[0].topic_results[0]
            .results_by_partition
            .iter()
            .map(|p| p.partition_error_code)
            .collect();
        assert_eq!(codes, vec![0, invalid]);
        assert_eq!(produce(&broker, pid, 0, &[0, 1]).await, vec![0, invalid]);
        // The transaction is open in partition 0 now: its next batch goes straight in.
        assert_eq!(produce(&broker, pid, 1, &[0]).await, vec![0]);
        let t = broker.topic("t").expect("t");
        let p1 = broker.partition(&t, 1).await.expect("p1");
        assert_eq!(
            p1.offsets().expect("offsets").1,
            0,
            "nothing stored in partition 1"
        );
    }
}
