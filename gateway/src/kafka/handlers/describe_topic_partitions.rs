//! DescribeTopicPartitions (KIP-966's paginated describe, API 75): what Metadata says of
//! each partition — leader, epoch, replicas, ISR and offline replicas, with a lost zone
//! kept listed (decision 33) — for admin clients that prefer it (`kafka-topics.sh
//! --describe` and `Admin.describeTopics` from Kafka 3.8 on use it when a broker offers it).
//!
//! As Kafka answers it: the named topics (or, with none named, every topic the client may
//! describe, `__consumer_offsets` included), sorted by name; a named topic the client may
//! not describe is TOPIC_AUTHORIZATION_FAILED, an unknown one UNKNOWN_TOPIC_OR_PARTITION
//! (never created). At most `response_partition_limit` partitions (and at most
//! [`PARTITION_LIMIT_MAX`], Kafka's `max.request.partition.size.limit`) from the cursor on;
//! `next_cursor` names the first partition left out. Eligible leader replicas are empty
//! (not null: Kafka's Java client reads them as a list): there is no ELR here (a
//! partition's leader is chosen by the controller among live brokers, its data safe in the
//! WAL copies and the object store).

use super::metadata::{describe_topic, offsets_topic};
use super::{denied, topic_name};
use crate::broker::Broker;
use crate::security::acl::{AclOperation, ResourceType};
use crate::security::Session;
use crate::transactions::markers::OFFSETS_TOPIC;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse};
use std::sync::Arc;

/// Partitions in one response, at most (Kafka's `max.request.partition.size.limit`).
pub const PARTITION_LIMIT_MAX: i32 = 2000;

/// The Metadata version whose partition fields this answer carries (epochs, offline
/// replicas, topic ids).
const METADATA_VERSION: i16 = 12;

/// Kafka's "authorized operations not computed".
const OPERATIONS_UNKNOWN: i32 = i32::MIN;

/// A topic to answer: described, or an error for it.
enum Entry {
    Found(MetadataResponseTopic),
    Error(String, i16),
}

pub fn handle(
    broker: &Arc<Broker>,
    session: &Session,
    req: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    let authz = broker.authz(session);
    let describable = |name: &str| authz.allows(AclOperation::Describe, ResourceType::Topic, name);
    let from_topic = req.cursor.as_ref().map(|c| c.topic_name.0.to_string());
    let after_cursor = |name: &str| from_topic.as_deref().is_none_or(|c| name >= c);
    let describe = |name: &str| -> Entry {
        if name == OFFSETS_TOPIC {
            return Entry::Found(offsets_topic(broker, &session.listener, METADATA_VERSION));
        }
        match broker.topic(name) {
            Some(t) => Entry::Found(describe_topic(broker, &t, METADATA_VERSION)),
            None => Entry::Error(
                name.to_owned(),
                ResponseError::UnknownTopicOrPartition.code(),
            ),
        }
    };
    let mut names: Vec<(String, bool)> = if req.topics.is_empty() {
        let mut all: Vec<String> = broker
            .topics()
            .iter()
            .map(|t| t.name.clone())
            .filter(|n| describable(n))
            .collect();
        if describable(OFFSETS_TOPIC) {
            all.push(OFFSETS_TOPIC.to_owned());
        }
        all.into_iter().map(|n| (n, true)).collect()
    } else {
        req.topics
            .iter()
            .map(|t| {
                let name = t.name.0.to_string();
                let ok = describable(&name);
                (name, ok)
            })
            .collect()
    };
    names.retain(|(n, _)| after_cursor(n));
    names.sort();
    names.dedup();
    let entries = names.into_iter().map(|(name, allowed)| {
        if allowed {
            describe(&name)
        } else {
            Entry::Error(name, denied(ResourceType::Topic))
        }
    });
    page(entries, req.response_partition_limit, req.cursor.as_ref())
}

/// The response for `entries` (in name order) from `cursor`, at most `limit` partitions.
fn page(
    entries: impl Iterator<Item = Entry>,
    limit: i32,
    cursor: Option<&kafka_protocol::messages::describe_topic_partitions_request::Cursor>,
) -> DescribeTopicPartitionsResponse {
    let mut room = limit.clamp(1, PARTITION_LIMIT_MAX);
    let mut topics = Vec::new();
    let mut next_cursor = None;
    for entry in entries {
        let topic = match entry {
            Entry::Error(name, code) => DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(topic_name(&name)))
                .with_error_code(code)
                .with_topic_authorized_operations(OPERATIONS_UNKNOWN),
            Entry::Found(t) => {
                let name = t.name.clone().unwrap_or_default();
                let first = cursor
                    .filter(|c| c.topic_name == name)
                    .map_or(0, |c| c.partition_index.max(0));
                let mut partitions: Vec<_> = t
                    .partitions
                    .into_iter()
                    .filter(|p| p.partition_index >= first)
                    .collect();
                partitions.sort_by_key(|p| p.partition_index);
                if room == 0 {
                    // The limit fell on the end of the topic before: continue here.
                    next_cursor = Some(
                        Cursor::default()
                            .with_topic_name(name)
                            .with_partition_index(first),
                    );
                    break;
                }
                let left_out = partitions.len().saturating_sub(room as usize);
                if left_out > 0 {
                    let rest = partitions.split_off(room as usize);
                    next_cursor = rest.first().map(|p| {
                        Cursor::default()
                            .with_topic_name(name.clone())
                            .with_partition_index(p.partition_index)
                    });
                }
                room -= partitions.len() as i32;
                let topic = DescribeTopicPartitionsResponseTopic::default()
                    .with_name(Some(name))
                    .with_topic_id(t.topic_id)
                    .with_is_internal(t.is_internal)
                    .with_error_code(t.error_code)
                    .with_topic_authorized_operations(OPERATIONS_UNKNOWN)
                    .with_partitions(
                        partitions
                            .into_iter()
                            .map(|p| {
                                DescribeTopicPartitionsResponsePartition::default()
                                    .with_error_code(p.error_code)
                                    .with_partition_index(p.partition_index)
                                    .with_leader_id(p.leader_id)
                                    .with_leader_epoch(p.leader_epoch)
                                    .with_replica_nodes(p.replica_nodes)
                                    .with_isr_nodes(p.isr_nodes)
                                    .with_eligible_leader_replicas(Some(Vec::new()))
                                    .with_last_known_elr(Some(Vec::new()))
                                    .with_offline_replicas(p.offline_replicas)
                            })
                            .collect(),
                    );
                topics.push(topic);
                if next_cursor.is_some() {
                    break;
                }
                continue;
            }
        };
        topics.push(topic);
    }
    DescribeTopicPartitionsResponse::default()
        .with_topics(topics)
        .with_next_cursor(next_cursor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::metadata_response::MetadataResponsePartition;
    use kafka_protocol::messages::BrokerId;

    fn topic(name: &str, partitions: i32) -> Entry {
        Entry::Found(
            MetadataResponseTopic::default()
                .with_name(Some(topic_name(name)))
                .with_partitions(
                    (0..partitions)
                        .rev()
                        .map(|i| {
                            MetadataResponsePartition::default()
                                .with_partition_index(i)
                                .with_leader_id(BrokerId(1))
                                .with_replica_nodes(vec![BrokerId(1), BrokerId(2)])
                                .with_isr_nodes(vec![BrokerId(1)])
                                .with_offline_replicas(vec![BrokerId(2)])
                        })
                        .collect(),
                ),
        )
    }

    fn summary(r: &DescribeTopicPartitionsResponse) -> Vec<(String, Vec<i32>)> {
        r.topics
            .iter()
            .map(|t| {
                (
                    t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
                    t.partitions.iter().map(|p| p.partition_index).collect(),
                )
            })
            .collect()
    }

    fn cursor(
        name: &str,
        partition: i32,
    ) -> kafka_protocol::messages::describe_topic_partitions_request::Cursor {
        kafka_protocol::messages::describe_topic_partitions_request::Cursor::default()
            .with_topic_name(topic_name(name))
            .with_partition_index(partition)
    }

    #[test]
    fn partitions_are_paged_from_the_cursor_in_order() {
        let r = page([topic("a", 3), topic("b", 4)].into_iter(), 5, None);
        assert_eq!(
            summary(&r),
            vec![("a".into(), vec![0, 1, 2]), ("b".into(), vec![0, 1])]
        );
        let next = r.next_cursor.expect("more to come");
        assert_eq!(
            (next.topic_name.0.to_string(), next.partition_index),
            ("b".into(), 2)
        );
        let r = page([topic("b", 4)].into_iter(), 5, Some(&cursor("b", 2)));
        assert_eq!(summary(&r), vec![("b".into(), vec![2, 3])]);
        assert!(r.next_cursor.is_none());
        let p = &r.topics[0].partitions[0];
        assert_eq!(p.replica_nodes, vec![BrokerId(1), BrokerId(2)]);
        assert_eq!(p.isr_nodes, vec![BrokerId(1)]);
        assert_eq!(p.offline_replicas, vec![BrokerId(2)]);
        assert_eq!(p.eligible_leader_replicas, Some(Vec::new()));
    }

    #[test]
    fn a_limit_ending_a_topic_points_the_cursor_at_the_next_one() {
        let r = page([topic("a", 2), topic("b", 2)].into_iter(), 2, None);
        assert_eq!(summary(&r), vec![("a".into(), vec![0, 1])]);
        let next = r.next_cursor.expect("b is left");
        assert_eq!(
            (next.topic_name.0.to_string(), next.partition_index),
            ("b".into(), 0)
        );
    }

    #[test]
    fn errors_take_no_room_and_a_bad_limit_is_clamped() {
        let r = page(
            [Entry::Error("a".into(), 3), topic("b", 3)].into_iter(),
            -7,
            None,
        );
        assert_eq!(r.topics[0].error_code, 3);
        assert_eq!(summary(&r)[1], ("b".into(), vec![0]));
        assert!(r.next_cursor.is_some());
    }
}
