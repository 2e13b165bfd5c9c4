//! KIP-890 part 1: a partition leader asks the transaction coordinator before it takes the
//! first batch of a transaction.
//!
//! Without it, a producer that writes to a partition it never added (a client bug, or a
//! produce request delayed past its transaction's abort) leaves a transaction that no marker
//! will end, and every `read_committed` reader of the partition stalls behind it. The
//! Produce handler, for a request with a `transactional.id`, takes for each partition a
//! verification guard from the log (`LogManager::start_txn_verification`: the sentinel if
//! the producer's transaction is open there already, else a fresh guard); for the others
//! it asks the coordinator — itself ([`super::coordinator::TxnCoordinators::verify`]) or
//! another broker with AddPartitionsToTxn v4 `verify_only`, as Kafka's brokers do — which
//! of them are in the producer's ongoing transaction ([`check`]). Partitions that are not
//! get INVALID_TXN_STATE; the rest are appended with their guard, which a marker landing in
//! between invalidates (`oxbow_segment_writer::txn_verify`).

use super::markers::{env, OFFSETS_TOPIC};
use super::state::{Request, Transaction, TxnPartition, TxnState};
use crate::broker::Broker;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, GroupId, ProduceRequest, ProducerId,
    TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use oxbow_segment_writer::txn_verify::VerificationGuard;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Bound on one verification exchange with another broker (an in-memory lookup there, or
/// one read of the metadata service on the coordinator's first sight of the id).
pub const REMOTE_TIMEOUT: Duration = Duration::from_secs(10);

/// The AddPartitionsToTxn versions brokers ask with: v4 batches transactions and carries
/// `verify_only` (clients use v3 and below); v5 only adds an error code.
pub const BROKER_VERSION: i16 = 4;
const BROKER_VERSION_MAX: i16 = 5;

/// The coordinator's answer for `producer_id` at `producer_epoch` (Kafka's
/// `handleVerifyPartitionsInTransaction`): the partitions of `partitions` not in its ongoing
/// transaction, or why it cannot say.
pub fn check(
    txn: Option<&Transaction>,
    producer_id: i64,
    producer_epoch: i16,
    partitions: &[TxnPartition],
) -> Result<Vec<TxnPartition>, ResponseError> {
    let t = match txn {
        Some(t) if t.producer_id == producer_id => t,
        _ => return Err(ResponseError::InvalidProducerIdMapping),
    };
    if t.producer_epoch != producer_epoch {
        return Err(ResponseError::ProducerFenced);
    }
    match t.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence => {
            Err(ResponseError::ConcurrentTransactions)
        }
        TxnState::Ongoing => Ok(partitions
            .iter()
            .filter(|p| !t.partitions.contains(*p) && !offsets_of_a_group_in(t, p))
            .cloned()
            .collect()),
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
            Ok(partitions.to_vec())
        }
    }
}

/// Whether `p` is the `__consumer_offsets` partition of a group `t` commits offsets for.
fn offsets_of_a_group_in(t: &Transaction, p: &TxnPartition) -> bool {
    p.0 == OFFSETS_TOPIC
        && t.groups
            .iter()
            .any(|g| crate::groups::offsets_partition(g) == p.1)
}

/// What a producer is told for a coordinator's refusal (Kafka's mapping in its produce
/// path): a coordinator that is busy, moving or unreachable is retriable for every client
/// (NOT_ENOUGH_REPLICAS, which clients before KIP-890 retry); PRODUCER_FENCED was never a
/// produce error, so INVALID_PRODUCER_EPOCH; the rest as they are.
pub fn produce_error(e: ResponseError) -> ResponseError {
    match e {
        ResponseError::ConcurrentTransactions
        | ResponseError::CoordinatorLoadInProgress
        | ResponseError::CoordinatorNotAvailable
        | ResponseError::NotCoordinator
        | ResponseError::NetworkException
        | ResponseError::RequestTimedOut => ResponseError::NotEnoughReplicas,
        ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
        ResponseError::ClusterAuthorizationFailed => ResponseError::InvalidTxnState,
        other => other,
    }
}

/// What a partition leader (or group coordinator) asks of a transaction's coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// Protocol 1: are these in the ongoing transaction?
    Verify,
    /// Protocol 2 (Produce v12+, TxnOffsetCommit v5+): add them to it.
    Add,
}

/// Asks `id`'s coordinator which of `partitions` are not in `producer_id`'s ongoing
/// transaction ([`Ask::Verify`]; errors as [`check`] gives them), or to add them to it
/// ([`Ask::Add`]: none missing once added; errors as AddPartitionsToTxn answers).
pub async fn verify(
    broker: &Arc<Broker>,
    id: &str,
    producer_id: i64,
    producer_epoch: i16,
    partitions: &[TxnPartition],
    ask: Ask,
) -> Result<Vec<TxnPartition>, ResponseError> {
    let coordinator = broker.cluster.coordinator_for(id);
    if coordinator == broker.settings.broker_id {
        return match ask {
            Ask::Verify => {
                broker
                    .transactions
                    .verify(&env(broker), id, producer_id, producer_epoch, partitions)
                    .await
            }
            Ask::Add => {
                let reply = broker
                    .transactions
                    .request(
                        &env(broker),
                        id,
                        Request::AddPartitions {
                            producer_id,
                            producer_epoch,
                            partitions: partitions.to_vec(),
                        },
                    )
                    .await;
                reply.error.map_or(Ok(Vec::new()), Err)
            }
        };
    }
    let addr = broker
        .cluster
        .broker(coordinator)
        .map(|b| b.kafka_addr)
        .ok_or(ResponseError::CoordinatorNotAvailable)?;
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in partitions {
        topics.entry(t.as_str()).or_default().push(*p);
    }
    let request = AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_string())))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(producer_epoch)
            .with_verify_only(ask == Ask::Verify)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| {
                        AddPartitionsToTxnTopic::default()
                            .with_name(TopicName(StrBytes::from_string(t.to_string())))
                            .with_partitions(ps)
                    })
                    .collect(),
            ),
    ]);
    let answer = broker
        .verify_peers
        .call(coordinator, &addr, &request, BROKER_VERSION..=BROKER_VERSION_MAX)
        .await
        .map_err(|e| {
            tracing::info!(transactional_id = id, coordinator, error = %e, "transaction verification failed");
            ResponseError::NetworkException
        })?;
    let Some((_, response)) = answer else {
        // An older broker that cannot verify (a rolling upgrade): take the batch as before.
        tracing::debug!(
            coordinator,
            "coordinator cannot verify transactions; not verified"
        );
        return Ok(Vec::new());
    };
    if let Some(e) = ResponseError::try_from_code(response.error_code) {
        return Err(e);
    }
    let mut codes: HashMap<TxnPartition, i16> = HashMap::new();
    for r in &response.results_by_transaction {
        for t in &r.topic_results {
            for p in &t.results_by_partition {
                codes.insert(
                    (t.name.as_str().to_string(), p.partition_index),
                    p.partition_error_code,
                );
            }
        }
    }
    let invalid = ResponseError::InvalidTxnState.code();
    let mut missing = Vec::new();
    for p in partitions {
        match codes.get(p).copied() {
            Some(0) => {}
            Some(c) if c == invalid && ask == Ask::Verify => missing.push(p.clone()),
            Some(c) => {
                return Err(
                    ResponseError::try_from_code(c).unwrap_or(ResponseError::UnknownServerError)
                )
            }
            None => return Err(ResponseError::UnknownServerError),
        }
    }
    Ok(missing)
}

/// TxnOffsetCommit's question (KIP-890 part 1 for offsets): is `group` in `producer_id`'s
/// ongoing transaction (AddOffsetsToTxn added it; the coordinator is asked about the
/// group's `__consumer_offsets` partition, as Kafka's brokers ask)? The error is the code a
/// TxnOffsetCommit answers: INVALID_TXN_STATE if not, COORDINATOR_NOT_AVAILABLE (retried
/// by clients) if the coordinator cannot say now.
pub async fn verify_group(
    broker: &Arc<Broker>,
    id: &str,
    producer_id: i64,
    producer_epoch: i16,
    group: &str,
    ask: Ask,
) -> Result<(), ResponseError> {
    let partition = (
        OFFSETS_TOPIC.to_string(),
        crate::groups::offsets_partition(group),
    );
    let answer = match ask {
        Ask::Verify => verify(broker, id, producer_id, producer_epoch, &[partition], ask).await,
        Ask::Add => add_group(broker, id, producer_id, producer_epoch, group)
            .await
            .map(|()| Vec::new()),
    };
    match answer {
        Ok(missing) if missing.is_empty() => Ok(()),
        Ok(_) => Err(ResponseError::InvalidTxnState),
        Err(e) => Err(match produce_error(e) {
            ResponseError::NotEnoughReplicas => ResponseError::CoordinatorNotAvailable,
            ResponseError::InvalidProducerEpoch => ResponseError::ProducerFenced,
            other => other,
        }),
    }
}

/// Protocol 2's TxnOffsetCommit: adds `group` to `producer_id`'s transaction at its
/// coordinator (here, or AddOffsetsToTxn to the broker that coordinates `id`, as the
/// client itself would under protocol 1).
async fn add_group(
    broker: &Arc<Broker>,
    id: &str,
    producer_id: i64,
    producer_epoch: i16,
    group: &str,
) -> Result<(), ResponseError> {
    let coordinator = broker.cluster.coordinator_for(id);
    if coordinator == broker.settings.broker_id {
        let reply = broker
            .transactions
            .request(
                &env(broker),
                id,
                Request::AddOffsets {
                    producer_id,
                    producer_epoch,
                    group: group.to_string(),
                },
            )
            .await;
        return reply.error.map_or(Ok(()), Err);
    }
    let addr = broker
        .cluster
        .broker(coordinator)
        .map(|b| b.kafka_addr)
        .ok_or(ResponseError::CoordinatorNotAvailable)?;
    let request = AddOffsetsToTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_string())))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(producer_epoch)
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())));
    // v3+: PRODUCER_FENCED rather than INVALID_PRODUCER_EPOCH (KIP-588).
    let answer = broker
        .verify_peers
        .call(coordinator, &addr, &request, 3..=4)
        .await
        .map_err(|e| {
            tracing::info!(transactional_id = id, coordinator, error = %e, "adding a group to a transaction failed");
            ResponseError::NetworkException
        })?;
    let (_, response) = answer.ok_or(ResponseError::CoordinatorNotAvailable)?;
    match ResponseError::try_from_code(response.error_code) {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

/// A partition's verification outcome for a Produce request: the guard to append with, or
/// the (code, message) to answer with instead.
pub type Guarded = Result<VerificationGuard, (i16, String)>;

/// Verifies the transactional batches of a Produce request from transactional id `id`:
/// one guard per (topic, partition) with a transactional batch (partitions not led here, or
/// whose batch is unreadable, are left out: their appends fail on their own).
pub async fn guards(
    broker: &Arc<Broker>,
    id: &str,
    req: &ProduceRequest,
    version: i16,
) -> HashMap<TxnPartition, Guarded> {
    // Protocol 2: the client sends no AddPartitionsToTxn; its Produce adds the partition.
    let question = if version >= 12 { Ask::Add } else { Ask::Verify };
    let mut out: HashMap<TxnPartition, Guarded> = HashMap::new();
    // Partitions to ask about, per (producer id, epoch) — one producer per request in
    // practice, but the bytes decide.
    let mut ask: BTreeMap<(i64, i16), Vec<(TxnPartition, VerificationGuard)>> = BTreeMap::new();
    for t in &req.topic_data {
        let name = t.name.as_str();
        let Some(topic) = broker.topic(name) else {
            continue;
        };
        for p in &t.partition_data {
            let Some(h) = p
                .records
                .as_deref()
                .and_then(|r| oxbow_segment_writer::batch::peek_header(r).ok().flatten())
            else {
                continue;
            };
            if !h.is_transactional() || h.producer_id < 0 {
                continue;
            }
            let key = (name.to_string(), p.index);
            match broker
                .start_txn_verification(&topic, p.index, h.producer_id, h.producer_epoch)
                .await
            {
                Ok(g) if g == VerificationGuard::SENTINEL => {
                    out.insert(key, Ok(g));
                }
                Ok(g) => ask
                    .entry((h.producer_id, h.producer_epoch))
                    .or_default()
                    .push((key, g)),
                // Not led here and the like: the append says so.
                Err(_) => {}
            }
        }
    }
    for ((producer_id, producer_epoch), parts) in ask {
        let keys: Vec<TxnPartition> = parts.iter().map(|(k, _)| k.clone()).collect();
        match verify(broker, id, producer_id, producer_epoch, &keys, question).await {
            Ok(missing) => {
                for (key, g) in parts {
                    let outcome = if missing.contains(&key) {
                        Err((
                            ResponseError::InvalidTxnState.code(),
                            format!(
                                "partition {}-{} is not in the ongoing transaction of '{id}' \
                                 (producer {producer_id}, epoch {producer_epoch}): \
                                 AddPartitionsToTxn first",
                                key.0, key.1
                            ),
                        ))
                    } else {
                        Ok(g)
                    };
                    out.insert(key, outcome);
                }
            }
            Err(e) => {
                let code = produce_error(e).code();
                for (key, _) in parts {
                    out.insert(
                        key,
                        Err((
                            code,
                            format!("the transaction coordinator of '{id}' answered {e:?}"),
                        )),
                    );
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn txn(state: TxnState, partitions: &[(&str, i32)]) -> Transaction {
        Transaction {
            producer_id: 7,
            producer_epoch: 3,
            timeout_ms: 60_000,
            state,
            partitions: partitions
                .iter()
                .map(|(t, p)| (t.to_string(), *p))
                .collect::<BTreeSet<_>>(),
            groups: BTreeSet::new(),
            start_ms: 0,
            updated_ms: 0,
        }
    }

    #[test]
    fn the_coordinator_answers_as_kafkas_does() {
        let asked = vec![("a".to_string(), 0), ("a".to_string(), 1)];
        let ongoing = txn(TxnState::Ongoing, &[("a", 0)]);
        assert_eq!(
            check(Some(&ongoing), 7, 3, &asked),
            Ok(vec![("a".to_string(), 1)])
        );
        assert_eq!(
            check(Some(&ongoing), 7, 2, &asked),
            Err(ResponseError::ProducerFenced)
        );
        assert_eq!(
            check(Some(&ongoing), 8, 3, &asked),
            Err(ResponseError::InvalidProducerIdMapping)
        );
        assert_eq!(
            check(None, 7, 3, &asked),
            Err(ResponseError::InvalidProducerIdMapping)
        );
        for preparing in [
            TxnState::PrepareCommit,
            TxnState::PrepareAbort,
            TxnState::PrepareEpochFence,
        ] {
            assert_eq!(
                check(Some(&txn(preparing, &[("a", 0)])), 7, 3, &asked),
                Err(ResponseError::ConcurrentTransactions)
            );
        }
        // A finished transaction's partitions are not in the next one.
        let done = txn(TxnState::CompleteCommit, &[("a", 0), ("a", 1)]);
        assert_eq!(check(Some(&done), 7, 3, &asked), Ok(asked.clone()));
    }

    #[test]
    fn coordinator_trouble_is_retriable_for_a_producer() {
        for e in [
            ResponseError::ConcurrentTransactions,
            ResponseError::CoordinatorLoadInProgress,
            ResponseError::CoordinatorNotAvailable,
            ResponseError::NotCoordinator,
            ResponseError::NetworkException,
        ] {
            assert_eq!(produce_error(e), ResponseError::NotEnoughReplicas, "{e:?}");
        }
        assert_eq!(
            produce_error(ResponseError::ProducerFenced),
            ResponseError::InvalidProducerEpoch
        );
        assert_eq!(
            produce_error(ResponseError::InvalidProducerIdMapping),
            ResponseError::InvalidProducerIdMapping
        );
    }
}
