//! Typed views of cluster metadata and topic configs, built from Kafka responses.
//!
//! The generated response structs carry every field of every version with sentinel
//! defaults; these types keep what the CLI and routing need, with `-1` leaders turned into
//! `None` and error codes into [`ResponseError`]s. Pure conversions, no I/O.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult;
use kafka_protocol::messages::MetadataResponse;
use uuid::Uuid;

/// The cluster as one broker sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterMetadata {
    pub cluster_id: Option<String>,
    /// `None` when the broker did not name one (`-1`).
    pub controller_id: Option<i32>,
    /// Sorted by node id.
    pub brokers: Vec<BrokerMetadata>,
    /// In the order the broker listed them.
    pub topics: Vec<TopicMetadata>,
}

/// A broker's advertised listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerMetadata {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

impl BrokerMetadata {
    /// `host:port`, bracketing IPv6 literals so the result can be dialled.
    pub fn addr(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// One topic's partitions and their leaders.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicMetadata {
    pub name: String,
    /// Nil when the broker's Metadata version predates topic ids (< v10).
    pub topic_id: Uuid,
    pub is_internal: bool,
    /// Topic-level error, e.g. `UnknownTopicOrPartition` or `LeaderNotAvailable` while
    /// the topic is being created.
    pub error: Option<ResponseError>,
    /// Sorted by partition index.
    pub partitions: Vec<PartitionMetadata>,
}

/// One partition's leadership and replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    pub partition: i32,
    /// `None` while no leader is elected.
    pub leader: Option<i32>,
    /// `-1` when the broker's Metadata version predates leader epochs (< v7).
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub offline_replicas: Vec<i32>,
    pub error: Option<ResponseError>,
}

impl TopicMetadata {
    /// The replication factor, as kafka-topics.sh reports it (replicas of partition 0).
    pub fn replication_factor(&self) -> usize {
        self.partitions.first().map_or(0, |p| p.replicas.len())
    }
}

/// Converts a Metadata response of any version.
pub fn parse_metadata(response: &MetadataResponse) -> ClusterMetadata {
    let mut brokers: Vec<BrokerMetadata> = response
        .brokers
        .iter()
        .map(|b| BrokerMetadata {
            node_id: b.node_id.0,
            host: b.host.to_string(),
            port: b.port,
            rack: b.rack.as_ref().map(|r| r.to_string()),
        })
        .collect();
    brokers.sort_by_key(|b| b.node_id);
    let topics = response
        .topics
        .iter()
        .map(|t| {
            let mut partitions: Vec<PartitionMetadata> = t
                .partitions
                .iter()
                .map(|p| PartitionMetadata {
                    partition: p.partition_index,
                    leader: (p.leader_id.0 >= 0).then_some(p.leader_id.0),
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.iter().map(|n| n.0).collect(),
                    isr: p.isr_nodes.iter().map(|n| n.0).collect(),
                    offline_replicas: p.offline_replicas.iter().map(|n| n.0).collect(),
                    error: ResponseError::try_from_code(p.error_code),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            TopicMetadata {
                name: t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
                topic_id: t.topic_id,
                is_internal: t.is_internal,
                error: ResponseError::try_from_code(t.error_code),
                partitions,
            }
        })
        .collect();
    ClusterMetadata {
        cluster_id: response.cluster_id.as_ref().map(|c| c.to_string()),
        controller_id: (response.controller_id.0 >= 0).then_some(response.controller_id.0),
        brokers,
        topics,
    }
}

/// Where a config value comes from (DescribeConfigs `config_source`, KIP-226).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopic,
    DynamicBroker,
    DynamicDefaultBroker,
    StaticBroker,
    Default,
    DynamicBrokerLogger,
    ClientMetrics,
    Group,
    Unknown(i8),
}

impl ConfigSource {
    /// Maps the protocol's `config_source` byte.
    pub fn from_code(code: i8) -> Self {
        match code {
            1 => ConfigSource::DynamicTopic,
            2 => ConfigSource::DynamicBroker,
            3 => ConfigSource::DynamicDefaultBroker,
            4 => ConfigSource::StaticBroker,
            5 => ConfigSource::Default,
            6 => ConfigSource::DynamicBrokerLogger,
            7 => ConfigSource::ClientMetrics,
            8 => ConfigSource::Group,
            other => ConfigSource::Unknown(other),
        }
    }
}

/// One topic config entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    /// `None` for sensitive values and unset configs.
    pub value: Option<String>,
    pub source: ConfigSource,
    pub read_only: bool,
    pub is_sensitive: bool,
}

impl ConfigEntry {
    /// Whether the value is the built-in default (kafka-topics.sh hides these in
    /// `--describe`).
    pub fn is_default(&self) -> bool {
        self.source == ConfigSource::Default
    }

    pub(crate) fn from_response(entry: &DescribeConfigsResourceResult) -> Self {
        ConfigEntry {
            name: entry.name.to_string(),
            value: entry.value.as_ref().map(|v| v.to_string()),
            source: ConfigSource::from_code(entry.config_source),
            read_only: entry.read_only,
            is_sensitive: entry.is_sensitive,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;

    #[test]
    fn parses_metadata_with_sentinels() {
        let mut response = MetadataResponse::default();
        response.controller_id = (-1).into();
        response.brokers = vec![
            MetadataResponseBroker::default()
                .with_node_id(2.into())
                .with_host(StrBytes::from_static_str("::1"))
                .with_port(9093),
            MetadataResponseBroker::default()
                .with_node_id(1.into())
                .with_host(StrBytes::from_static_str("b1"))
                .with_port(9092),
        ];
        response.topics = vec![MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str("orders"))))
            .with_partitions(vec![
                MetadataResponsePartition::default()
                    .with_partition_index(1)
                    .with_leader_id((-1).into())
                    .with_error_code(5),
                MetadataResponsePartition::default()
                    .with_partition_index(0)
                    .with_leader_id(1.into())
                    .with_leader_epoch(3)
                    .with_replica_nodes(vec![1.into(), 2.into()]),
            ])];
        let parsed = parse_metadata(&response);
        assert_eq!(parsed.controller_id, None);
        assert_eq!(parsed.brokers[0].addr(), "b1:9092");
        assert_eq!(parsed.brokers[1].addr(), "[::1]:9093");
        let topic = &parsed.topics[0];
        assert_eq!(topic.name, "orders");
        assert_eq!(topic.partitions[0].leader, Some(1));
        assert_eq!(topic.partitions[0].leader_epoch, 3);
        assert_eq!(topic.partitions[1].leader, None);
        assert_eq!(
            topic.partitions[1].error,
            Some(ResponseError::LeaderNotAvailable)
        );
        assert_eq!(topic.replication_factor(), 2);
    }
}
