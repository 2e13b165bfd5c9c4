//! DescribeProducers (`kafka-transactions.sh describe-producers`, admin clients'
//! `describeProducers`): the idempotent producers a partition's leader remembers for
//! deduplication — id, epoch, last sequence and the newest timestamp of its last batch
//! (-1 for a producer known only from state rebuilt after the partition moved, which keeps
//! no timestamps). No transactions yet: `coordinator_epoch` and `current_txn_start_offset`
//! are -1. READ on the topic is required (Kafka); a partition led elsewhere answers
//! `NOT_LEADER_OR_FOLLOWER`, so clients ask its leader.

use super::{denied, str_bytes};
use crate::broker::Broker;
use crate::security::acl::{AclOperation, ResourceType};
use crate::security::Session;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};
use std::sync::Arc;

pub async fn describe(
    broker: &Arc<Broker>,
    session: &Session,
    req: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let authz = broker.authz(session);
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.name.0.to_string();
        let allowed = authz.allows(AclOperation::Read, ResourceType::Topic, &name);
        let topic = broker.topic(&name);
        let mut partitions = Vec::with_capacity(t.partition_indexes.len());
        for index in t.partition_indexes {
            let r = PartitionResponse::default().with_partition_index(index);
            let answer = if !allowed {
                Err((denied(ResourceType::Topic), None))
            } else if let Some(topic) = &topic {
                match broker.partition(topic, index).await {
                    // With each producer's open transaction's first offset, if any
                    // (`kafka-transactions.sh find-hanging` and `abort` read it).
                    Ok(p) => p
                        .active_producers()
                        .and_then(|a| Ok((a, p.open_txns()?)))
                        .map(|(active, open)| {
                            let starts: std::collections::HashMap<i64, i64> =
                                open.into_iter().map(|(id, _, first)| (id, first)).collect();
                            active
                                .into_iter()
                                .map(|a| {
                                    let start = starts.get(&a.producer_id).copied().unwrap_or(-1);
                                    (a, start)
                                })
                                .collect::<Vec<_>>()
                        })
                        .map_err(|e| {
                            (
                                ResponseError::UnknownServerError.code(),
                                Some(e.to_string()),
                            )
                        }),
                    Err(e) => Err((e.code(), Some(e.to_string()))),
                }
            } else {
                Err((
                    ResponseError::UnknownTopicOrPartition.code(),
                    Some(format!("topic '{name}' does not exist")),
                ))
            };
            partitions.push(match answer {
                Ok(producers) => r.with_active_producers(
                    producers
                        .into_iter()
                        .map(|(p, txn_start)| {
                            ProducerState::default()
                                .with_producer_id(ProducerId(p.producer_id))
                                .with_producer_epoch(i32::from(p.producer_epoch))
                                .with_last_sequence(p.last_sequence)
                                .with_last_timestamp(p.last_timestamp_ms)
                                .with_coordinator_epoch(-1)
                                .with_current_txn_start_offset(txn_start)
                        })
                        .collect(),
                ),
                Err((code, message)) => r
                    .with_error_code(code)
                    .with_error_message(message.map(|m| str_bytes(&m))),
            });
        }
        topics.push(
            TopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions),
        );
    }
    DescribeProducersResponse::default().with_topics(topics)
}
