//! Metadata: brokers, and each topic's partitions with leader and leader epoch. Requested
//! topics that do not exist are created when the client allows it and the broker's
//! `--auto-create-topics` is on.

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::error::BrokerError;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use oxbow_metadata::TopicMetadata;
use std::sync::Arc;

pub fn brokers(broker: &Broker) -> Vec<MetadataResponseBroker> {
    vec![MetadataResponseBroker::default()
        .with_node_id(BrokerId(broker.settings.broker_id))
        .with_host(str_bytes(&broker.settings.advertised_host))
        .with_port(broker.settings.advertised_port)]
}

pub fn describe_topic(topic: &TopicMetadata, version: i16) -> MetadataResponseTopic {
    let partitions = topic
        .partitions
        .iter()
        .map(|p| {
            MetadataResponsePartition::default()
                .with_partition_index(p.partition)
                .with_leader_id(BrokerId(p.leader))
                .with_leader_epoch(if version >= 7 { p.leader_epoch } else { -1 })
                .with_replica_nodes(vec![BrokerId(p.leader)])
                .with_isr_nodes(vec![BrokerId(p.leader)])
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(&topic.name)))
        .with_topic_id(if version >= 10 {
            topic.topic_id.0
        } else {
            uuid::Uuid::nil()
        })
        .with_partitions(partitions)
}

fn topic_error(name: Option<&str>, id: uuid::Uuid, e: &BrokerError) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(name.map(topic_name))
        .with_topic_id(id)
        .with_error_code(e.code())
}

pub async fn handle(broker: &Arc<Broker>, req: MetadataRequest, version: i16) -> MetadataResponse {
    // v0 asks for every topic with an empty list; v1+ with null.
    let all = match &req.topics {
        None => true,
        Some(t) => t.is_empty() && version == 0,
    };
    let allow_create = version < 4 || req.allow_auto_topic_creation;
    let topics = if all {
        broker
            .topics()
            .iter()
            .map(|t| describe_topic(t, version))
            .collect()
    } else {
        let mut out = Vec::new();
        for t in req.topics.unwrap_or_default() {
            let by_name = t.name.as_ref().map(|n| n.0.to_string());
            let result = match &by_name {
                Some(name) => broker.topic_or_create(name, allow_create).await,
                None => broker
                    .topic_by_id(t.topic_id)
                    .ok_or_else(|| BrokerError::UnknownTopic(t.topic_id.to_string())),
            };
            out.push(match result {
                Ok(topic) => describe_topic(&topic, version),
                Err(e) => {
                    let mut r = topic_error(by_name.as_deref(), t.topic_id, &e);
                    if by_name.is_none() {
                        r.error_code = ResponseError::UnknownTopicId.code();
                    }
                    r
                }
            });
        }
        out
    };
    MetadataResponse::default()
        .with_brokers(brokers(broker))
        // cluster_id exists from v2, controller_id from v1.
        .with_cluster_id((version >= 2).then(|| str_bytes(&broker.settings.cluster_id)))
        .with_controller_id(BrokerId(if version >= 1 {
            broker.settings.broker_id
        } else {
            -1
        }))
        .with_topics(topics)
}
