//! The transaction APIs: InitProducerId with a `transactional.id`, AddPartitionsToTxn,
//! AddOffsetsToTxn and EndTxn (answered by the id's coordinator, `transactions::coordinator`),
//! WriteTxnMarkers (a coordinator's markers, written by partition leaders and group
//! coordinators), DescribeTransactions and ListTransactions.
//!
//! Authorization as Kafka's `KafkaApis`: WRITE on the transactional id for the producer's
//! requests (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), WRITE on each topic added
//! (TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED), READ on the group
//! added (GROUP_AUTHORIZATION_FAILED), CLUSTER_ACTION on the cluster for WriteTxnMarkers
//! (the inter-broker principal needs it, as in Kafka), DESCRIBE on each id described or
//! listed. Old request versions get INVALID_PRODUCER_EPOCH where newer ones get
//! PRODUCER_FENCED (KIP-588: clients before it do not know the code).

use super::{denied, str_bytes, topic_name};
use crate::broker::Broker;
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::security::Session;
use crate::transactions::markers::{env, OFFSETS_TOPIC};
use crate::transactions::state::{Reply, Request, TxnPartition, TxnState};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedState;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, DescribeTransactionsRequest, DescribeTransactionsResponse,
    EndTxnRequest, EndTxnResponse, InitProducerIdRequest, InitProducerIdResponse,
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, TransactionalId,
    WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Most partitions one AddPartitionsToTxn may add (bounds a transaction's record and its
/// marker fan-out; Kafka has no limit but its transaction log's record size).
const PARTITIONS_PER_TXN_MAX: usize = 10_000;

/// PRODUCER_FENCED as a client of `version` understands it (see the module docs).
fn compat(e: ResponseError, fenced_since: i16, version: i16) -> i16 {
    if e == ResponseError::ProducerFenced && version < fenced_since {
        ResponseError::InvalidProducerEpoch.code()
    } else {
        e.code()
    }
}

fn code_of(r: &Reply, fenced_since: i16, version: i16) -> i16 {
    r.error.map_or(0, |e| compat(e, fenced_since, version))
}

/// InitProducerId for a transactional producer (the idempotent case is `producer_id.rs`).
pub async fn init_producer_id(
    broker: &Arc<Broker>,
    id: &str,
    req: &InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let r = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if id.is_empty() {
        return r.with_error_code(ResponseError::InvalidRequest.code());
    }
    let expected = (req.producer_id.0 >= 0 && req.producer_epoch >= 0)
        .then_some((req.producer_id.0, req.producer_epoch));
    let reply = broker
        .transactions
        .request(
            &env(broker),
            id,
            Request::InitProducerId {
                timeout_ms: req.transaction_timeout_ms,
                max_timeout_ms: broker.transactions.settings().max_timeout_ms,
                expected,
                fresh_producer_id: None,
            },
        )
        .await;
    match (reply.error, reply.producer) {
        (None, Some((pid, epoch))) => r
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch),
        _ => r.with_error_code(code_of(&reply, 4, version)),
    }
}

pub async fn add_partitions(
    broker: &Arc<Broker>,
    session: &Session,
    req: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    if version >= 4 {
        return add_partitions_for_brokers(broker, session, req).await;
    }
    let id = req.v3_and_below_transactional_id.as_str().to_string();
    let asked = asked_partitions(&req.v3_and_below_topics);
    let codes =
        if broker
            .authz(session)
            .allows(AclOperation::Write, ResourceType::TransactionalId, &id)
        {
            let producer = (
                req.v3_and_below_producer_id.0,
                req.v3_and_below_producer_epoch,
            );
            add_or_verify(broker, session, &id, producer, &asked, false, version).await
        } else {
            asked
                .iter()
                .map(|k| (k.clone(), denied(ResourceType::TransactionalId)))
                .collect()
        };
    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topic_results(codes))
}

/// AddPartitionsToTxn v4+, between brokers (KIP-890): many transactions per request, each
/// added or, with `verify_only`, checked (a partition leader asking before a transaction's
/// first batch, `transactions::verify`). Needs CLUSTER_ACTION on the cluster, as in Kafka.
async fn add_partitions_for_brokers(
    broker: &Arc<Broker>,
    session: &Session,
    req: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    let r = AddPartitionsToTxnResponse::default();
    if !broker.authz(session).allows(
        AclOperation::ClusterAction,
        ResourceType::Cluster,
        CLUSTER_NAME,
    ) {
        return r.with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let total: usize = req
        .transactions
        .iter()
        .flat_map(|t| t.topics.iter())
        .map(|t| t.partitions.len())
        .sum();
    if total > PARTITIONS_PER_TXN_MAX {
        return r.with_error_code(ResponseError::InvalidRequest.code());
    }
    let mut results = Vec::with_capacity(req.transactions.len());
    for t in &req.transactions {
        let id = t.transactional_id.as_str();
        let asked = asked_partitions(&t.topics);
        let producer = (t.producer_id.0, t.producer_epoch);
        let codes = add_or_verify(broker, session, id, producer, &asked, t.verify_only, 4).await;
        results.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(TransactionalId(str_bytes(id)))
                .with_topic_results(topic_results(codes)),
        );
    }
    r.with_results_by_transaction(results)
}

fn asked_partitions(topics: &[AddPartitionsToTxnTopic]) -> BTreeSet<TxnPartition> {
    topics
        .iter()
        .flat_map(|t| {
            let name = t.name.as_str().to_string();
            t.partitions.iter().map(move |p| (name.clone(), *p))
        })
        .collect()
}

/// Per-partition codes, grouped by topic, as both request shapes answer them.
fn topic_results(codes: BTreeMap<TxnPartition, i16>) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut by_topic: BTreeMap<String, Vec<AddPartitionsToTxnPartitionResult>> = BTreeMap::new();
    for ((t, p), code) in codes {
        by_topic.entry(t).or_default().push(
            AddPartitionsToTxnPartitionResult::default()
                .with_partition_index(p)
                .with_partition_error_code(code),
        );
    }
    by_topic
        .into_iter()
        .map(|(t, results)| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(topic_name(&t))
                .with_results_by_partition(results)
        })
        .collect()
}

/// One transaction's partitions added to it (or, `verify_only`, checked against it): the
/// code of each. Partitions refused here (WRITE on the topic, internal, unknown) keep their
/// code and the rest are OPERATION_NOT_ATTEMPTED.
async fn add_or_verify(
    broker: &Arc<Broker>,
    session: &Session,
    id: &str,
    (producer_id, producer_epoch): (i64, i16),
    asked: &BTreeSet<TxnPartition>,
    verify_only: bool,
    version: i16,
) -> BTreeMap<TxnPartition, i16> {
    let all = |code: i16| asked.iter().map(|k| (k.clone(), code)).collect();
    if asked.len() > PARTITIONS_PER_TXN_MAX {
        return all(ResponseError::InvalidRequest.code());
    }
    let authz = broker.authz(session);
    // Per partition: refused (code) or to add. One refusal and the rest are not attempted.
    let mut refused: BTreeMap<TxnPartition, i16> = BTreeMap::new();
    for (t, p) in asked {
        if verify_only && t == OFFSETS_TOPIC {
            // A group coordinator asking about a group's offsets partition (TxnOffsetCommit).
            continue;
        }
        if !authz.allows(AclOperation::Write, ResourceType::Topic, t) {
            refused.insert((t.clone(), *p), denied(ResourceType::Topic));
        } else if oxbow_metadata::topic::is_internal_topic(t) {
            refused.insert(
                (t.clone(), *p),
                ResponseError::TopicAuthorizationFailed.code(),
            );
        } else if broker
            .topic(t)
            .and_then(|m| m.partition(*p).map(|_| ()))
            .is_none()
        {
            refused.insert(
                (t.clone(), *p),
                ResponseError::UnknownTopicOrPartition.code(),
            );
        }
    }
    if !refused.is_empty() {
        let not_attempted = ResponseError::OperationNotAttempted.code();
        return asked
            .iter()
            .map(|k| (k.clone(), refused.get(k).copied().unwrap_or(not_attempted)))
            .collect();
    }
    let partitions: Vec<TxnPartition> = asked.iter().cloned().collect();
    if verify_only {
        return match broker
            .transactions
            .verify(&env(broker), id, producer_id, producer_epoch, &partitions)
            .await
        {
            Ok(missing) => asked
                .iter()
                .map(|k| {
                    let code = if missing.contains(k) {
                        ResponseError::InvalidTxnState.code()
                    } else {
                        0
                    };
                    (k.clone(), code)
                })
                .collect(),
            Err(e) => all(e.code()),
        };
    }
    let reply = broker
        .transactions
        .request(
            &env(broker),
            id,
            Request::AddPartitions {
                producer_id,
                producer_epoch,
                partitions,
            },
        )
        .await;
    all(code_of(&reply, 2, version))
}

pub async fn add_offsets(
    broker: &Arc<Broker>,
    session: &Session,
    req: AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    let id = req.transactional_id.as_str();
    let group = req.group_id.as_str();
    let authz = broker.authz(session);
    let r = AddOffsetsToTxnResponse::default();
    if !authz.allows(AclOperation::Write, ResourceType::TransactionalId, id) {
        return r.with_error_code(denied(ResourceType::TransactionalId));
    }
    if !authz.allows(AclOperation::Read, ResourceType::Group, group) {
        return r.with_error_code(denied(ResourceType::Group));
    }
    if group.is_empty() {
        return r.with_error_code(ResponseError::InvalidGroupId.code());
    }
    let reply = broker
        .transactions
        .request(
            &env(broker),
            id,
            Request::AddOffsets {
                producer_id: req.producer_id.0,
                producer_epoch: req.producer_epoch,
                group: group.to_string(),
            },
        )
        .await;
    r.with_error_code(code_of(&reply, 2, version))
}

pub async fn end_txn(
    broker: &Arc<Broker>,
    session: &Session,
    req: EndTxnRequest,
    version: i16,
) -> EndTxnResponse {
    let id = req.transactional_id.as_str();
    let r = EndTxnResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if !broker
        .authz(session)
        .allows(AclOperation::Write, ResourceType::TransactionalId, id)
    {
        return r.with_error_code(denied(ResourceType::TransactionalId));
    }
    let reply = broker
        .transactions
        .request(
            &env(broker),
            id,
            Request::EndTxn {
                producer_id: req.producer_id.0,
                producer_epoch: req.producer_epoch,
                commit: req.committed,
                // Transaction protocol 2 (KIP-890) is EndTxn v5+.
                bump_epoch: version >= 5,
            },
        )
        .await;
    let r = r.with_error_code(code_of(&reply, 2, version));
    match reply.producer {
        Some((pid, epoch)) => r
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch),
        None => r,
    }
}

pub async fn write_markers(
    broker: &Arc<Broker>,
    session: &Session,
    req: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let allowed = broker.authz(session).allows(
        AclOperation::ClusterAction,
        ResourceType::Cluster,
        CLUSTER_NAME,
    );
    let mut results = Vec::with_capacity(req.markers.len());
    for m in req.markers {
        let topics: BTreeMap<String, Vec<i32>> = m
            .topics
            .iter()
            .map(|t| (t.name.as_str().to_string(), t.partition_indexes.clone()))
            .collect();
        let codes = if allowed {
            broker
                .apply_markers(
                    m.producer_id.0,
                    m.producer_epoch,
                    m.transaction_result,
                    m.coordinator_epoch,
                    &topics,
                )
                .await
        } else {
            topics
                .iter()
                .flat_map(|(t, ps)| {
                    ps.iter().map(move |p| {
                        (
                            (t.clone(), *p),
                            ResponseError::ClusterAuthorizationFailed.code(),
                        )
                    })
                })
                .collect()
        };
        let mut by_topic: BTreeMap<String, Vec<WritableTxnMarkerPartitionResult>> = BTreeMap::new();
        for ((t, p), code) in codes {
            by_topic.entry(t).or_default().push(
                WritableTxnMarkerPartitionResult::default()
                    .with_partition_index(p)
                    .with_error_code(code),
            );
        }
        results.push(
            WritableTxnMarkerResult::default()
                .with_producer_id(m.producer_id)
                .with_topics(
                    by_topic
                        .into_iter()
                        .map(|(t, partitions)| {
                            WritableTxnMarkerTopicResult::default()
                                .with_name(topic_name(&t))
                                .with_partitions(partitions)
                        })
                        .collect(),
                ),
        );
    }
    WriteTxnMarkersResponse::default().with_markers(results)
}

fn described(id: &str, error: i16) -> TransactionState {
    TransactionState::default()
        .with_transactional_id(TransactionalId(str_bytes(id)))
        .with_error_code(error)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
        .with_transaction_state(str_bytes(""))
        .with_transaction_start_time_ms(-1)
}

pub async fn describe(
    broker: &Arc<Broker>,
    session: &Session,
    req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let authz = broker.authz(session);
    let env = env(broker);
    let mut states = Vec::with_capacity(req.transactional_ids.len());
    for id in req.transactional_ids {
        let id = id.as_str();
        if !authz.allows(AclOperation::Describe, ResourceType::TransactionalId, id) {
            states.push(described(id, denied(ResourceType::TransactionalId)));
            continue;
        }
        if !env.coordinates(id) {
            states.push(described(id, ResponseError::NotCoordinator.code()));
            continue;
        }
        let state = match broker.transactions.describe(id).await {
            Err(e) => described(id, e.code()),
            Ok(None) => described(id, ResponseError::TransactionalIdNotFound.code()),
            Ok(Some(l)) => {
                let t = l.transaction;
                let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
                for (topic, p) in &t.partitions {
                    topics.entry(topic.as_str()).or_default().push(*p);
                }
                TransactionState::default()
                    .with_transactional_id(TransactionalId(str_bytes(id)))
                    .with_transaction_state(str_bytes(t.state.name()))
                    .with_transaction_timeout_ms(t.timeout_ms)
                    .with_transaction_start_time_ms(t.start_ms)
                    .with_producer_id(ProducerId(t.producer_id))
                    .with_producer_epoch(t.producer_epoch)
                    .with_topics(
                        topics
                            .into_iter()
                            .map(|(topic, partitions)| {
                                TopicData::default()
                                    .with_topic(topic_name(topic))
                                    .with_partitions(partitions)
                            })
                            .collect(),
                    )
            }
        };
        states.push(state);
    }
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

pub async fn list(
    broker: &Arc<Broker>,
    session: &Session,
    req: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let authz = broker.authz(session);
    let env = env(broker);
    let known: BTreeSet<&str> = TxnState::ALL.iter().map(|s| s.name()).collect();
    let unknown: Vec<_> = req
        .state_filters
        .iter()
        .filter(|s| !known.contains(s.as_str()))
        .cloned()
        .collect();
    let states: BTreeSet<&str> = req.state_filters.iter().map(|s| s.as_str()).collect();
    let pids: BTreeSet<i64> = req.producer_id_filters.iter().map(|p| p.0).collect();
    // KIP-1152 (v2): ids matching a regular expression, wholly (Java's `matches`).
    let pattern = match req
        .transactional_id_pattern
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        None => None,
        Some(p) => match regex::RegexBuilder::new(&format!("^(?:{p})$"))
            .size_limit(1 << 20)
            .build()
        {
            Ok(r) => Some(r),
            Err(_) => {
                return ListTransactionsResponse::default()
                    .with_error_code(ResponseError::InvalidRegularExpression.code())
            }
        },
    };
    let listings = match broker.transactions.listings(&env).await {
        Ok(l) => l,
        Err(e) => return ListTransactionsResponse::default().with_error_code(e.code()),
    };
    let now = env.now_ms();
    let listed = listings
        .into_iter()
        .filter(|l| {
            authz.allows(
                AclOperation::Describe,
                ResourceType::TransactionalId,
                &l.transactional_id,
            )
        })
        .filter(|l| states.is_empty() || states.contains(l.transaction.state.name()))
        .filter(|l| pids.is_empty() || pids.contains(&l.transaction.producer_id))
        .filter(|l| {
            pattern
                .as_ref()
                .is_none_or(|r| r.is_match(&l.transactional_id))
        })
        .filter(|l| {
            // KIP-994 (v1): only transactions running longer than the filter.
            req.duration_filter < 0
                || (l.transaction.start_ms >= 0
                    && now.saturating_sub(l.transaction.start_ms) >= req.duration_filter)
        })
        .map(|l| {
            ListedState::default()
                .with_transactional_id(TransactionalId(str_bytes(&l.transactional_id)))
                .with_producer_id(ProducerId(l.transaction.producer_id))
                .with_transaction_state(str_bytes(l.transaction.state.name()))
        })
        .collect();
    ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown)
        .with_transaction_states(listed)
}
