//! The consumer protocol's embedded formats (subscription and assignment), read only where
//! the coordinator must look inside them: OffsetDelete (is the group subscribed to this
//! topic?) and describe/lag views (which member owns which partition).

use super::group::Group;
use bytes::{Buf, Bytes};
use kafka_protocol::messages::{ConsumerProtocolAssignment, ConsumerProtocolSubscription};
use kafka_protocol::protocol::Decodable;
use std::collections::BTreeSet;

/// The protocol type of Kafka consumers; other types (e.g. Connect) are opaque.
pub const CONSUMER: &str = "consumer";

fn versioned(mut data: Bytes) -> Option<(i16, Bytes)> {
    if data.len() < 2 {
        return None;
    }
    let version = data.get_i16();
    Some((version, data))
}

/// Topics a consumer's subscription metadata names.
pub fn subscription_topics(metadata: &Bytes) -> Vec<String> {
    versioned(metadata.clone())
        .and_then(|(v, mut body)| {
            ConsumerProtocolSubscription::decode(&mut body, v.clamp(0, 3)).ok()
        })
        .map(|s| s.topics.iter().map(|t| t.to_string()).collect())
        .unwrap_or_default()
}

/// (topic, partition) pairs of a consumer's assignment.
pub fn assignment_partitions(assignment: &Bytes) -> Vec<(String, i32)> {
    versioned(assignment.clone())
        .and_then(|(v, mut body)| ConsumerProtocolAssignment::decode(&mut body, v.clamp(0, 3)).ok())
        .map(|a| {
            a.assigned_partitions
                .iter()
                .flat_map(|tp| tp.partitions.iter().map(|p| (tp.topic.0.to_string(), *p)))
                .collect()
        })
        .unwrap_or_default()
}

/// Every topic some member of a consumer group subscribes to.
pub fn subscribed_topics(group: &Group) -> BTreeSet<String> {
    if group.protocol_type.as_deref() != Some(CONSUMER) {
        return BTreeSet::new();
    }
    let protocol = group.protocol.clone().unwrap_or_default();
    group
        .members
        .values()
        .flat_map(|m| {
            m.protocols
                .iter()
                .filter(|(n, _)| *n == protocol)
                .flat_map(|(_, meta)| subscription_topics(meta))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn reads_subscriptions_and_assignments() {
        let mut buf = BytesMut::new();
        buf.put_i16(1);
        ConsumerProtocolSubscription::default()
            .with_topics(vec![
                StrBytes::from_static_str("a"),
                StrBytes::from_static_str("b"),
            ])
            .encode(&mut buf, 1)
            .expect("encode");
        assert_eq!(subscription_topics(&buf.freeze()), vec!["a", "b"]);
        let mut buf = BytesMut::new();
        buf.put_i16(0);
        ConsumerProtocolAssignment::default()
            .with_assigned_partitions(vec![TopicPartition::default()
                .with_topic(TopicName(StrBytes::from_static_str("a")))
                .with_partitions(vec![0, 2])])
            .encode(&mut buf, 0)
            .expect("encode");
        assert_eq!(
            assignment_partitions(&buf.freeze()),
            vec![("a".to_string(), 0), ("a".to_string(), 2)]
        );
        assert!(subscription_topics(&Bytes::from_static(b"x")).is_empty());
    }
}
