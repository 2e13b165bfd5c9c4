//! Builders for the requests the client sends, one function per API (sans-I/O).
//!
//! Each takes the negotiated version and sets only the fields that exist at that version:
//! `kafka-protocol` refuses to encode a non-default value in a field the version lacks
//! (e.g. DeleteTopics `topics` before v6), and topic ids replace topic names in Produce
//! v13+ and Fetch v13+. The unit tests encode every builder at every version the crate
//! supports, so a version the broker picks can always be sent.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    CreateTopicsRequest, DeleteRecordsRequest, DeleteTopicsRequest, DescribeConfigsRequest,
    FetchRequest, IncrementalAlterConfigsRequest, ListOffsetsRequest, MetadataRequest,
    ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

/// First Produce/Fetch version that names topics by id instead of by name.
pub const TOPIC_ID_VERSION: i16 = 13;

/// DescribeConfigs resource type for topics (Kafka's `ConfigResource.Type.TOPIC`).
const RESOURCE_TYPE_TOPIC: i8 = 2;

/// Replica id consumers send in Fetch/ListOffsets: "not a broker".
const CONSUMER_REPLICA_ID: i32 = -1;

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// Clamps a duration to the `i32` milliseconds Kafka's timeout fields hold.
pub fn duration_ms(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// Metadata for `topics`, or for every topic when `None`. Never auto-creates topics:
/// describing or consuming a missing topic must say so, not create it.
pub fn metadata(version: i16, topics: Option<&[String]>) -> MetadataRequest {
    let mut request = MetadataRequest::default();
    request.topics = match topics {
        // v0 has no null array: an empty list means "all topics" there.
        None if version == 0 => Some(Vec::new()),
        None => None,
        Some(names) => Some(
            names
                .iter()
                .map(|n| MetadataRequestTopic::default().with_name(Some(topic_name(n))))
                .collect(),
        ),
    };
    if version >= 4 {
        request.allow_auto_topic_creation = false;
    }
    request
}

/// CreateTopics for one topic. `-1` partitions or replication factor means the broker's
/// default (v4+).
pub fn create_topics(
    version: i16,
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &[(String, String)],
    timeout: Duration,
) -> CreateTopicsRequest {
    let _ = version; // every field used here exists in all supported versions (2+)
    let topic = CreatableTopic::default()
        .with_name(topic_name(name))
        .with_num_partitions(partitions)
        .with_replication_factor(replication_factor)
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    CreatableTopicConfig::default()
                        .with_name(StrBytes::from_string(k.clone()))
                        .with_value(Some(StrBytes::from_string(v.clone())))
                })
                .collect(),
        );
    CreateTopicsRequest::default()
        .with_topics(vec![topic])
        .with_timeout_ms(duration_ms(timeout))
}

/// DeleteTopics for one topic by name.
pub fn delete_topics(version: i16, name: &str, timeout: Duration) -> DeleteTopicsRequest {
    let request = DeleteTopicsRequest::default().with_timeout_ms(duration_ms(timeout));
    if version >= 6 {
        request.with_topics(vec![
            DeleteTopicState::default().with_name(Some(topic_name(name)))
        ])
    } else {
        request.with_topic_names(vec![topic_name(name)])
    }
}

/// DescribeConfigs for all configs of one topic.
pub fn describe_configs(version: i16, topic: &str) -> DescribeConfigsRequest {
    let _ = version; // include_synonyms/include_documentation stay at their defaults
    DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
        .with_resource_type(RESOURCE_TYPE_TOPIC)
        .with_resource_name(StrBytes::from_string(topic.to_string()))
        .with_configuration_keys(None)])
}

/// IncrementalAlterConfigs of one topic: `(key, op, value)` with Kafka's op ids (0 SET,
/// 1 DELETE, 2 APPEND, 3 SUBTRACT).
pub fn incremental_alter_configs(
    version: i16,
    topic: &str,
    changes: &[(String, i8, Option<String>)],
) -> IncrementalAlterConfigsRequest {
    let _ = version; // the same fields in v0 and v1 (v1 is the flexible encoding)
    let configs = changes
        .iter()
        .map(|(name, op, value)| {
            AlterableConfig::default()
                .with_name(StrBytes::from_string(name.clone()))
                .with_config_operation(*op)
                .with_value(value.clone().map(StrBytes::from_string))
        })
        .collect();
    IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(RESOURCE_TYPE_TOPIC)
        .with_resource_name(StrBytes::from_string(topic.to_string()))
        .with_configs(configs)])
}

/// Produce one record batch to one partition.
pub fn produce(
    version: i16,
    topic: &str,
    topic_id: Uuid,
    partition: i32,
    batch: Bytes,
    acks: i16,
    timeout: Duration,
) -> ProduceRequest {
    let data =
        TopicProduceData::default().with_partition_data(vec![PartitionProduceData::default()
            .with_index(partition)
            .with_records(Some(batch))]);
    let data = if version >= TOPIC_ID_VERSION {
        data.with_topic_id(topic_id)
    } else {
        data.with_name(topic_name(topic))
    };
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(duration_ms(timeout))
        .with_topic_data(vec![data])
}

/// Fetch (read uncommitted, no fetch session) from several partitions of one topic.
/// `max_bytes` bounds each partition's data; the response as a whole is bounded by
/// `max_bytes * partitions`.
pub fn fetch(
    version: i16,
    topic: &str,
    topic_id: Uuid,
    positions: &[(i32, i64)],
    max_wait: Duration,
    max_bytes: i32,
) -> FetchRequest {
    let partitions = positions
        .iter()
        .map(|&(partition, offset)| {
            FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(max_bytes)
        })
        .collect();
    let fetch_topic = FetchTopic::default().with_partitions(partitions);
    let fetch_topic = if version >= TOPIC_ID_VERSION {
        fetch_topic.with_topic_id(topic_id)
    } else {
        fetch_topic.with_topic(topic_name(topic))
    };
    let count = i32::try_from(positions.len().max(1)).unwrap_or(i32::MAX);
    // replica_id (v4-14) and replica_state (v15+) keep their defaults, which say
    // "consumer" (-1).
    FetchRequest::default()
        .with_max_wait_ms(duration_ms(max_wait))
        // Return as soon as anything is there: the CLI prints records as they arrive.
        .with_min_bytes(1)
        .with_max_bytes(max_bytes.saturating_mul(count))
        .with_topics(vec![fetch_topic])
}

/// ListOffsets for one partition at `timestamp` (`-2` earliest, `-1` latest).
pub fn list_offsets(
    version: i16,
    topic: &str,
    partition: i32,
    timestamp: i64,
    timeout: Duration,
) -> ListOffsetsRequest {
    let request = ListOffsetsRequest::default()
        .with_replica_id(CONSUMER_REPLICA_ID.into())
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(timestamp)])]);
    if version >= 10 {
        request.with_timeout_ms(duration_ms(timeout))
    } else {
        request
    }
}

/// ListOffsets of the latest offset (the high watermark, read_uncommitted) of many
/// partitions at once: `topics` is (name, partitions).
pub fn list_latest_offsets(
    version: i16,
    topics: &[(String, Vec<i32>)],
    timeout: Duration,
) -> ListOffsetsRequest {
    let request = ListOffsetsRequest::default()
        .with_replica_id(CONSUMER_REPLICA_ID.into())
        .with_topics(
            topics
                .iter()
                .map(|(name, partitions)| {
                    ListOffsetsTopic::default()
                        .with_name(topic_name(name))
                        .with_partitions(
                            partitions
                                .iter()
                                .map(|p| {
                                    ListOffsetsPartition::default()
                                        .with_partition_index(*p)
                                        .with_timestamp(-1)
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    if version >= 10 {
        request.with_timeout_ms(duration_ms(timeout))
    } else {
        request
    }
}

/// DeleteRecords of one partition below `offset` (`-1`: the high watermark).
pub fn delete_records(
    _version: i16,
    topic: &str,
    partition: i32,
    offset: i64,
    timeout: Duration,
) -> DeleteRecordsRequest {
    DeleteRecordsRequest::default()
        .with_timeout_ms(duration_ms(timeout))
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(partition)
                .with_offset(offset)])])
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::protocol::{Decodable, Encodable, Message};

    /// Encodes and decodes a request at `version`, checking nothing is left over.
    pub(crate) fn round_trip<T: Encodable + Decodable>(request: &T, version: i16) -> T {
        let mut buf = BytesMut::new();
        request
            .encode(&mut buf, version)
            .unwrap_or_else(|e| panic!("encodes at v{version}: {e}"));
        let mut bytes = buf.freeze();
        let decoded =
            T::decode(&mut bytes, version).unwrap_or_else(|e| panic!("decodes at v{version}: {e}"));
        assert!(bytes.is_empty(), "v{version} leaves no trailing bytes");
        decoded
    }

    /// Every version the codec knows for `T`.
    pub(crate) fn versions<T: Message>() -> std::ops::RangeInclusive<i16> {
        T::VERSIONS.min..=T::VERSIONS.max
    }

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn metadata_encodes_at_every_version() {
        let names = vec!["a".to_string()];
        for v in versions::<MetadataRequest>() {
            round_trip(&metadata(v, None), v);
            let decoded = round_trip(&metadata(v, Some(&names)), v);
            assert_eq!(decoded.topics.map(|t| t.len()), Some(1));
        }
    }

    #[test]
    fn admin_requests_encode_at_every_version() {
        let configs = vec![("cleanup.policy".to_string(), "compact".to_string())];
        for v in versions::<CreateTopicsRequest>() {
            let decoded = round_trip(&create_topics(v, "t", 3, 1, &configs, T), v);
            assert_eq!(decoded.topics[0].num_partitions, 3);
        }
        for v in versions::<DeleteTopicsRequest>() {
            let decoded = round_trip(&delete_topics(v, "t", T), v);
            assert_eq!(decoded.topics.len() + decoded.topic_names.len(), 1);
        }
        for v in versions::<DescribeConfigsRequest>() {
            round_trip(&describe_configs(v, "t"), v);
        }
        for v in versions::<DeleteRecordsRequest>() {
            let decoded = round_trip(&delete_records(v, "t", 2, -1, T), v);
            assert_eq!(decoded.topics[0].partitions[0].partition_index, 2);
            assert_eq!(decoded.topics[0].partitions[0].offset, -1);
        }
    }

    #[test]
    fn data_requests_encode_at_every_version() {
        let id = Uuid::from_u128(7);
        for v in versions::<ProduceRequest>() {
            let decoded = round_trip(&produce(v, "t", id, 2, Bytes::from_static(b"x"), -1, T), v);
            let topic = &decoded.topic_data[0];
            if v >= TOPIC_ID_VERSION {
                assert_eq!(topic.topic_id, id);
            } else {
                assert_eq!(topic.name.0.as_str(), "t");
            }
            assert_eq!(topic.partition_data[0].index, 2);
        }
        for v in versions::<FetchRequest>() {
            let decoded = round_trip(&fetch(v, "t", id, &[(0, 5), (1, 9)], T, 1024), v);
            assert_eq!(decoded.topics[0].partitions[1].fetch_offset, 9);
            assert_eq!(decoded.max_bytes, 2048);
        }
        for v in versions::<ListOffsetsRequest>() {
            let decoded = round_trip(&list_offsets(v, "t", 0, -2, T), v);
            assert_eq!(decoded.topics[0].partitions[0].timestamp, -2);
        }
    }

    #[test]
    fn durations_clamp_to_i32_millis() {
        assert_eq!(duration_ms(Duration::from_millis(1500)), 1500);
        assert_eq!(duration_ms(Duration::from_secs(u64::MAX / 2)), i32::MAX);
    }
}
