//! AlterPartitionReassignments and ListPartitionReassignments: steering partition
//! leadership by hand (`oxbow partitions reassign`, or Kafka's
//! `kafka-reassign-partitions.sh`).
//!
//! Oxbow partitions have one replica, their leader (durability is the WAL replicas and the
//! object store), so a reassignment names the new leader: the first broker of `replicas`.
//! Any broker accepts it and records it as a transfer request on the partition's state
//! (`transfer_to`, by compare-and-swap); the current leader then hands the partition over
//! gracefully (`cluster::handoff`). The answer comes once the request is recorded, not
//! when the move is done — as in Kafka, where reassignments complete in the background and
//! ListPartitionReassignments shows those still in progress. `replicas: null` cancels a
//! pending request.

use super::{denied, str_bytes, topic_name};
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::security::Session;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};
use oxbow_metadata::{ErrorKind, PartitionId, TopicMetadata};
use std::sync::Arc;

/// Compare-and-swap attempts before giving up on a partition that keeps changing.
const CAS_ATTEMPTS: usize = 5;

/// (error code, message) for one partition.
type Outcome = (i16, Option<String>);

pub async fn alter(
    broker: &Arc<Broker>,
    session: &Session,
    req: AlterPartitionReassignmentsRequest,
    version: i16,
) -> AlterPartitionReassignmentsResponse {
    // ALTER on the cluster (Kafka).
    if !broker.authorize(
        session,
        AclOperation::Alter,
        ResourceType::Cluster,
        CLUSTER_NAME,
    ) {
        return AlterPartitionReassignmentsResponse::default()
            .with_error_code(denied(ResourceType::Cluster))
            .with_error_message(Some(str_bytes("ALTER on the cluster is not authorized")));
    }
    let mut responses = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let name = t.name.0.to_string();
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let target = p
                .replicas
                .as_ref()
                .map(|r| r.first().map(|b| b.0).ok_or(()));
            let (code, message) = match target {
                Some(Err(())) => (
                    ResponseError::InvalidReplicaAssignment.code(),
                    Some("the replica list is empty: name the new leader first".to_string()),
                ),
                Some(Ok(to)) => request(broker, &name, p.partition_index, Some(to)).await,
                None => request(broker, &name, p.partition_index, None).await,
            };
            partitions.push(
                ReassignablePartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code)
                    .with_error_message(message.map(|m| str_bytes(&m))),
            );
        }
        responses.push(
            ReassignableTopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions),
        );
    }
    AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(version >= 1 && req.allow_replication_factor_change)
        .with_responses(responses)
}

/// Records (`Some(to)`) or withdraws (`None`) a transfer request for one partition.
async fn request(broker: &Broker, topic: &str, partition: PartitionId, to: Option<i32>) -> Outcome {
    if let Some(to) = to {
        if !broker.cluster.is_live(to) {
            return (
                ResponseError::InvalidReplicaAssignment.code(),
                Some(format!("broker {to} is not a live broker")),
            );
        }
    }
    for _ in 0..CAS_ATTEMPTS {
        let (topic_id, state) = match broker.metadata.topic(topic).await {
            Ok(Some(t)) => match t.partition(partition) {
                Some(p) => (t.topic_id, p.clone()),
                None => return unknown(topic, partition),
            },
            Ok(None) => return unknown(topic, partition),
            Err(e) => return failed(e.into()),
        };
        let mut next = state.clone();
        match to {
            Some(to) if to == state.leader && state.transfer_to.is_none() => return (0, None),
            // Already there: a pending request elsewhere is withdrawn.
            Some(to) if to == state.leader => next.transfer_to = None,
            Some(to) => next.transfer_to = Some(to),
            None if state.transfer_to.is_none() => {
                return (
                    ResponseError::NoReassignmentInProgress.code(),
                    Some(format!("no reassignment of {topic}-{partition} is pending")),
                )
            }
            None => next.transfer_to = None,
        }
        match broker
            .metadata
            .update_partition(topic_id, state.version, next)
            .await
        {
            Ok(stored) => {
                tracing::info!(topic, partition, leader = stored.leader, to = ?stored.transfer_to, "reassignment requested");
                return (0, None);
            }
            Err(e) if e.kind() == ErrorKind::Conflict => continue,
            Err(e) => return failed(e.into()),
        }
    }
    (
        ResponseError::RequestTimedOut.code(),
        Some(format!("{topic}-{partition} kept changing; try again")),
    )
}

fn unknown(topic: &str, partition: PartitionId) -> Outcome {
    (
        ResponseError::UnknownTopicOrPartition.code(),
        Some(format!("{topic}-{partition} does not exist")),
    )
}

fn failed(e: BrokerError) -> Outcome {
    (e.code(), Some(e.to_string()))
}

pub async fn list(
    broker: &Arc<Broker>,
    session: &Session,
    req: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    // DESCRIBE on the cluster (Kafka).
    if !broker.authorize(
        session,
        AclOperation::Describe,
        ResourceType::Cluster,
        CLUSTER_NAME,
    ) {
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(denied(ResourceType::Cluster))
            .with_error_message(Some(str_bytes("DESCRIBE on the cluster is not authorized")));
    }
    let topics: Vec<TopicMetadata> = match broker.metadata.list_topics().await {
        Ok(t) => t,
        Err(e) => {
            let e = BrokerError::from(e);
            return ListPartitionReassignmentsResponse::default()
                .with_error_code(e.code())
                .with_error_message(Some(str_bytes(&e.to_string())));
        }
    };
    let wanted = |name: &str, p: PartitionId| match &req.topics {
        None => true,
        Some(ts) => ts
            .iter()
            .any(|t| t.name.0.as_str() == name && t.partition_indexes.contains(&p)),
    };
    let ongoing = topics
        .iter()
        .filter_map(|t| {
            let partitions: Vec<OngoingPartitionReassignment> = t
                .partitions
                .iter()
                .filter(|p| wanted(&t.name, p.partition))
                .filter_map(|p| {
                    let to = p.transfer_to?;
                    Some(
                        OngoingPartitionReassignment::default()
                            .with_partition_index(p.partition)
                            .with_replicas(vec![BrokerId(p.leader), BrokerId(to)])
                            .with_adding_replicas(vec![BrokerId(to)])
                            .with_removing_replicas(vec![BrokerId(p.leader)]),
                    )
                })
                .collect();
            (!partitions.is_empty()).then(|| {
                OngoingTopicReassignment::default()
                    .with_name(topic_name(&t.name))
                    .with_partitions(partitions)
            })
        })
        .collect();
    ListPartitionReassignmentsResponse::default().with_topics(ongoing)
}
