//! ListOffsets: earliest (-2), latest (-1, the high watermark; at `read_committed`, the last
//! stable offset) or the first offset at or
//! after a timestamp. From v4 each answer carries the leader epoch of the offset, as Kafka's
//! `UnifiedLog.fetchOffsetByTimestamp` gives it: the leader's epoch for latest, else the
//! epoch the offset was written under (from the epoch history; -1 where it does not reach).
//! Clients keep it as their position's epoch and validate it after a leader change.

use super::leader_epoch::check_current_leader_epoch;
use super::{denied, topic_name};
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::security::acl::{AclOperation, ResourceType};
use crate::security::Session;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use oxbow_metadata::{LeaderEpoch, Offset};
use oxbow_segment_writer::Partition;
use std::sync::Arc;

/// `ListOffsets` timestamp for the latest offset.
const LATEST_TIMESTAMP: i64 = -1;

pub async fn handle(
    broker: &Arc<Broker>,
    session: &Session,
    req: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let authz = broker.authz(session);
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.name.0.to_string();
        let topic = broker.topic(&name);
        // DESCRIBE on the topic, as Kafka.
        let allowed = authz.allows(AclOperation::Describe, ResourceType::Topic, &name);
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let r = ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
            if !allowed {
                partitions.push(
                    r.with_error_code(denied(ResourceType::Topic))
                        .with_offset(-1)
                        .with_timestamp(-1),
                );
                continue;
            }
            let Some(topic) = &topic else {
                partitions.push(
                    r.with_error_code(ResponseError::UnknownTopicOrPartition.code())
                        .with_offset(-1)
                        .with_timestamp(-1),
                );
                continue;
            };
            // Checked against the leader's own epoch, as Kafka does (a non-leader answers
            // NOT_LEADER_OR_FOLLOWER).
            let part = match broker.partition(topic, p.partition_index).await {
                Ok(part) => part,
                Err(e) => {
                    partitions.push(
                        r.with_error_code(e.code())
                            .with_offset(-1)
                            .with_timestamp(-1),
                    );
                    continue;
                }
            };
            let epoch = part.leader_epoch().unwrap_or(-1);
            if let Some(code) = check_current_leader_epoch(p.current_leader_epoch, epoch) {
                partitions.push(
                    r.with_error_code(code.code())
                        .with_offset(-1)
                        .with_timestamp(-1),
                );
                continue;
            }
            // read_committed's latest is the last stable offset (Kafka's
            // `IsolationLevel.READ_COMMITTED` → `lastStableOffset`).
            let listed = if req.isolation_level == 1 && p.timestamp == LATEST_TIMESTAMP {
                part.last_stable_offset()
                    .map(|lso| (lso, -1))
                    .map_err(BrokerError::from)
            } else {
                broker
                    .list_offset(topic, p.partition_index, p.timestamp)
                    .await
            };
            partitions.push(match listed {
                Ok((offset, timestamp)) => r
                    .with_offset(offset)
                    .with_timestamp(timestamp)
                    // The field exists from v4; older versions must leave it unset.
                    .with_leader_epoch(if version >= 4 {
                        epoch_of(&part, epoch, p.timestamp, offset)
                    } else {
                        -1
                    }),
                Err(e) => r
                    .with_error_code(e.code())
                    .with_offset(-1)
                    .with_timestamp(-1),
            });
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(topic_name(&name))
                .with_partitions(partitions),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}

/// The leader epoch to answer with `offset` (see the module docs); -1 if unknown.
fn epoch_of(
    part: &Partition,
    leader_epoch: LeaderEpoch,
    timestamp: i64,
    offset: Offset,
) -> LeaderEpoch {
    if timestamp == LATEST_TIMESTAMP {
        return leader_epoch;
    }
    if offset < 0 {
        return -1;
    }
    part.epoch_for_offset(offset).ok().flatten().unwrap_or(-1)
}
