//! DeleteRecords (API 21): raises partitions' log start offsets, as Kafka's
//! `Partition.deleteRecordsOnLeader` does. Per partition: `-1` means the high watermark; an
//! offset below 0 or past the high watermark is OFFSET_OUT_OF_RANGE; a topic whose
//! `cleanup.policy` lacks `delete` is POLICY_VIOLATION; only the leader answers
//! (NOT_LEADER_OR_FOLLOWER elsewhere). Records not sealed yet are sealed first (the log start
//! never goes past the catalogue, see `oxbow_segment_writer::log::retention`), within the
//! request's timeout (REQUEST_TIMED_OUT past it). The answer's low watermark is the log start
//! after the call, stored by compare-and-swap fenced by this broker's leadership.

use super::{denied, topic_name};
use crate::broker::Broker;
use crate::security::acl::{AclOperation, ResourceType};
use crate::security::Session;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use oxbow_metadata::{Offset, TopicMetadata};
use std::sync::Arc;
use std::time::Duration;

/// `offset` meaning "up to the high watermark".
const HIGH_WATERMARK: i64 = -1;
/// Longest a request waits for its records to be sealed, whatever its timeout says.
const WAIT_MAX: Duration = Duration::from_secs(30);

pub async fn handle(
    broker: &Arc<Broker>,
    session: &Session,
    req: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let authz = broker.authz(session);
    let wait = Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0)).min(WAIT_MAX);
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.name.0.to_string();
        let topic = broker.topic(&name);
        // DELETE on the topic, as Kafka.
        let allowed = authz.allows(AclOperation::Delete, ResourceType::Topic, &name);
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let r = DeleteRecordsPartitionResult::default()
                .with_partition_index(p.partition_index)
                .with_low_watermark(-1);
            if !allowed {
                partitions.push(r.with_error_code(denied(ResourceType::Topic)));
                continue;
            }
            partitions.push(match &topic {
                None => r.with_error_code(ResponseError::UnknownTopicOrPartition.code()),
                Some(topic) => match delete(broker, topic, p.partition_index, p.offset, wait).await
                {
                    Ok(low) => r.with_low_watermark(low),
                    Err(code) => r.with_error_code(code.code()),
                },
            });
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(topic_name(&name))
                .with_partitions(partitions),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}

async fn delete(
    broker: &Arc<Broker>,
    topic: &TopicMetadata,
    partition: i32,
    offset: i64,
    wait: Duration,
) -> Result<Offset, ResponseError> {
    let part = broker
        .partition(topic, partition)
        .await
        .map_err(|e| e.mapped().kafka)?;
    if !topic.configs.deletes() {
        return Err(ResponseError::PolicyViolation);
    }
    // A mirror topic's log is its source's (issue 20): not trimmed by clients until promoted.
    broker
        .check_writable(&topic.name, partition)
        .map_err(|e| e.mapped().kafka)?;
    let (log_start, hw, _) = part
        .offsets()
        .map_err(|_| ResponseError::UnknownServerError)?;
    let target = if offset == HIGH_WATERMARK { hw } else { offset };
    if target < 0 || target > hw {
        return Err(ResponseError::OffsetOutOfRange);
    }
    if target <= log_start {
        return Ok(log_start);
    }
    let log = &broker.log;
    let sealed = log
        .wait_sealed(&part, target, wait)
        .await
        .map_err(|e| crate::error::BrokerError::from(e).mapped().kafka)?;
    if sealed < target {
        return Err(ResponseError::RequestTimedOut);
    }
    log.advance_log_start(&part, target)
        .await
        .map_err(|e| crate::error::BrokerError::from(e).mapped().kafka)
}
