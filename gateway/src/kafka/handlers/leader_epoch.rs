//! OffsetForLeaderEpoch: where a leader epoch ended, which clients ask after a leader change
//! to check that what they read is still the log (KIP-101, KIP-320). Answered as Kafka's
//! `Partition.lastOffsetForLeaderEpoch` does, from the partition's epoch history (ARCHITECTURE
//! decision 19): the largest epoch at or below the requested one and the start offset of the
//! next higher epoch, or the log end offset for the leader's own epoch; `-1, -1` for an
//! undefined epoch or one newer than the leader's. `current_leader_epoch` is checked first
//! ([`check_current_leader_epoch`], shared with Fetch and ListOffsets), and only the leader
//! answers (NOT_LEADER_OR_FOLLOWER elsewhere).

use super::topic_name;
use crate::broker::Broker;
use crate::security::acl::{AclOperation, ResourceType};
use crate::security::Session;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use oxbow_metadata::leader_epochs::UNDEFINED_EPOCH;
use oxbow_metadata::LeaderEpoch;
use std::sync::Arc;

/// Kafka's `checkCurrentLeaderEpoch`: a client that names the epoch it believes current is
/// told FENCED_LEADER_EPOCH if the leader has moved past it, UNKNOWN_LEADER_EPOCH if the
/// leader has not reached it yet (its metadata is newer than this broker's); both make the
/// client refresh metadata and retry. `-1` means "no epoch" and is not checked.
pub(super) fn check_current_leader_epoch(
    current_leader_epoch: LeaderEpoch,
    leader_epoch: LeaderEpoch,
) -> Option<ResponseError> {
    if current_leader_epoch == UNDEFINED_EPOCH {
        None
    } else if current_leader_epoch < leader_epoch {
        Some(ResponseError::FencedLeaderEpoch)
    } else if current_leader_epoch > leader_epoch {
        Some(ResponseError::UnknownLeaderEpoch)
    } else {
        None
    }
}

pub async fn handle(
    broker: &Arc<Broker>,
    session: &Session,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let authz = broker.authz(session);
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.topic.0.to_string();
        // DESCRIBE on the topic, as Kafka asks of consumers.
        if !authz.allows(AclOperation::Describe, ResourceType::Topic, &name) {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_leader_epoch(-1)
                        .with_end_offset(-1)
                        .with_error_code(super::denied(ResourceType::Topic))
                })
                .collect();
            topics.push(
                OffsetForLeaderTopicResult::default()
                    .with_topic(topic_name(&name))
                    .with_partitions(partitions),
            );
            continue;
        }
        let topic = broker.topic(&name);
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let r = EpochEndOffset::default()
                .with_partition(p.partition)
                .with_leader_epoch(-1)
                .with_end_offset(-1);
            let partition = match &topic {
                Some(topic) => broker.partition(topic, p.partition).await,
                None => Err(crate::error::BrokerError::UnknownTopic(name.clone())),
            };
            let r = match partition {
                Err(e) => r.with_error_code(e.code()),
                Ok(part) => {
                    let answer = part
                        .leader_epoch()
                        .and_then(|epoch| Ok((epoch, part.end_offset_for(p.leader_epoch)?)));
                    match answer {
                        Err(e) => r.with_error_code(crate::error::BrokerError::from(e).code()),
                        Ok((epoch, found)) => {
                            match check_current_leader_epoch(p.current_leader_epoch, epoch) {
                                Some(e) => r.with_error_code(e.code()),
                                None => match found {
                                    Some((epoch, end)) => {
                                        r.with_leader_epoch(epoch).with_end_offset(end)
                                    }
                                    None => r,
                                },
                            }
                        }
                    }
                }
            };
            partitions.push(r);
        }
        topics.push(
            OffsetForLeaderTopicResult::default()
                .with_topic(topic_name(&name))
                .with_partitions(partitions),
        );
    }
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_leader_epoch_is_checked_as_kafka_does() {
        assert_eq!(check_current_leader_epoch(-1, 5), None);
        assert_eq!(check_current_leader_epoch(5, 5), None);
        assert_eq!(
            check_current_leader_epoch(4, 5),
            Some(ResponseError::FencedLeaderEpoch)
        );
        assert_eq!(
            check_current_leader_epoch(6, 5),
            Some(ResponseError::UnknownLeaderEpoch)
        );
        // Only -1 means "none" (Kafka's RequestUtils.getLeaderEpoch); other negatives are
        // older than any epoch.
        assert_eq!(
            check_current_leader_epoch(-2, 0),
            Some(ResponseError::FencedLeaderEpoch)
        );
    }
}
