//! ElectLeaders (`kafka-leader-election.sh`, admin clients' `electLeaders`).
//!
//! An Oxbow partition has one replica, its leader (durability is the WAL replicas and the
//! object store; Metadata reports `replicas = isr = [leader]`), so that replica is also the
//! preferred one, and the controller moves leadership itself: off a broker that died
//! (failover) and between live brokers when their counts drift apart (placement). So an
//! election by hand is never needed while the leader is live — `ELECTION_NOT_NEEDED`, as
//! Kafka answers when the preferred replica already leads — and cannot be forced while it
//! is not: `PREFERRED_LEADER_NOT_AVAILABLE` (preferred) or `ELIGIBLE_LEADERS_NOT_AVAILABLE`
//! (unclean) until the controller's failover has run. To move a partition to a chosen
//! broker, reassign it (AlterPartitionReassignments).
//!
//! ALTER on the cluster is required (Kafka). Without named partitions every partition is
//! considered and, as Kafka does, those that need no election are left out of the answer.

use super::{denied, str_bytes, topic_name};
use crate::broker::Broker;
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::security::Session;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};
use std::sync::Arc;

/// Election types (v1+; v0 elects the preferred replica).
const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

/// One partition's answer: (error code, message).
fn outcome(broker: &Broker, topic: &str, partition: i32, election_type: i8) -> (i16, String) {
    let Some(state) = broker
        .topic(topic)
        .and_then(|t| t.partition(partition).cloned())
    else {
        return (
            ResponseError::UnknownTopicOrPartition.code(),
            format!("{topic}-{partition} does not exist"),
        );
    };
    if broker.cluster.is_live(state.leader) {
        return (
            ResponseError::ElectionNotNeeded.code(),
            format!(
                "broker {} leads {topic}-{partition}: its only replica, so the preferred one",
                state.leader
            ),
        );
    }
    let code = if election_type == UNCLEAN {
        ResponseError::EligibleLeadersNotAvailable.code()
    } else {
        ResponseError::PreferredLeaderNotAvailable.code()
    };
    (
        code,
        format!(
            "broker {} (leader of {topic}-{partition}) is not live; the controller fails the partition over by itself",
            state.leader
        ),
    )
}

pub fn elect(
    broker: &Arc<Broker>,
    session: &Session,
    req: ElectLeadersRequest,
    version: i16,
) -> ElectLeadersResponse {
    let election_type = if version == 0 {
        PREFERRED
    } else {
        req.election_type
    };
    let top_level = if !broker.authorize(
        session,
        AclOperation::Alter,
        ResourceType::Cluster,
        CLUSTER_NAME,
    ) {
        Some((
            denied(ResourceType::Cluster),
            "ALTER on the cluster is not authorized".to_string(),
        ))
    } else if election_type != PREFERRED && election_type != UNCLEAN {
        Some((
            ResponseError::InvalidRequest.code(),
            format!("election type {election_type} is neither preferred (0) nor unclean (1)"),
        ))
    } else {
        None
    };
    let result = |partition: i32, (code, message): (i16, String)| {
        PartitionResult::default()
            .with_partition_id(partition)
            .with_error_code(code)
            .with_error_message((code != 0).then(|| str_bytes(&message)))
    };
    let results: Vec<ReplicaElectionResult> = match &req.topic_partitions {
        Some(topics) => topics
            .iter()
            .map(|t| {
                let name = t.topic.0.to_string();
                ReplicaElectionResult::default()
                    .with_topic(t.topic.clone())
                    .with_partition_result(
                        t.partitions
                            .iter()
                            .map(|&p| {
                                let o = top_level
                                    .clone()
                                    .unwrap_or_else(|| outcome(broker, &name, p, election_type));
                                result(p, o)
                            })
                            .collect(),
                    )
            })
            .collect(),
        // Every partition: only those an election was needed for.
        None if top_level.is_none() => broker
            .topics()
            .iter()
            .filter_map(|t| {
                let partitions: Vec<PartitionResult> = t
                    .partitions
                    .iter()
                    .map(|p| {
                        (
                            p.partition,
                            outcome(broker, &t.name, p.partition, election_type),
                        )
                    })
                    .filter(|(_, (code, _))| *code != ResponseError::ElectionNotNeeded.code())
                    .map(|(p, o)| result(p, o))
                    .collect();
                (!partitions.is_empty()).then(|| {
                    ReplicaElectionResult::default()
                        .with_topic(topic_name(&t.name))
                        .with_partition_result(partitions)
                })
            })
            .collect(),
        None => Vec::new(),
    };
    let response = ElectLeadersResponse::default().with_replica_election_results(results);
    match top_level {
        Some((code, _)) if version >= 1 => response.with_error_code(code),
        _ => response,
    }
}
