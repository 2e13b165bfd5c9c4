//! CreateTopics, DeleteTopics, CreatePartitions.

use super::{denied, str_bytes, topic_name};
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::security::Session;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse,
};
use oxbow_metadata::TopicSpec;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `config_source` values of DescribeConfigs/CreateTopics.
pub const SOURCE_TOPIC_OVERRIDE: i8 = 1;
pub const SOURCE_DEFAULT: i8 = 5;

pub async fn create(
    broker: &Arc<Broker>,
    session: &Session,
    req: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let authz = broker.authz(session);
    // CREATE on the cluster covers every topic; else CREATE on each topic (Kafka).
    let cluster_create = authz.allows(AclOperation::Create, ResourceType::Cluster, CLUSTER_NAME);
    let mut results = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.name.0.to_string();
        // Kafka answers a null error_message on success (the generated default is "").
        let r = CreatableTopicResult::default()
            .with_name(topic_name(&name))
            .with_error_message(None);
        if !cluster_create && !authz.allows(AclOperation::Create, ResourceType::Topic, &name) {
            results.push(
                r.with_error_code(denied(ResourceType::Topic))
                    .with_error_message(Some(str_bytes("Authorization failed."))),
            );
            continue;
        }
        // The created topic's configs are shown only to who may describe them.
        let may_describe_configs =
            authz.allows(AclOperation::DescribeConfigs, ResourceType::Topic, &name);
        if !t.assignments.is_empty() {
            results.push(
                r.with_error_code(ResponseError::InvalidReplicaAssignment.code())
                    .with_error_message(Some(str_bytes(
                        "manual replica assignment is not supported: partitions are placed by the cluster",
                    ))),
            );
            continue;
        }
        let configs: BTreeMap<String, String> = t
            .configs
            .iter()
            .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
            .collect();
        let spec = TopicSpec {
            name: name.clone(),
            partitions: if t.num_partitions == -1 {
                broker.settings.default_partitions
            } else {
                t.num_partitions
            },
            replication_factor: if t.replication_factor == -1 {
                1
            } else {
                t.replication_factor
            },
            configs,
        };
        let outcome = if req.validate_only {
            broker.validate_topic(&spec).map(|_| None)
        } else {
            broker.create_topic(spec.clone()).await.map(Some)
        };
        results.push(match outcome {
            Ok(created) => {
                let (configs, topic_id) = match &created {
                    Some(t) => (t.configs.describe(), t.topic_id.0),
                    None => (
                        oxbow_metadata::TopicConfigs::validated(spec.configs.clone())
                            .map(|c| c.describe())
                            .unwrap_or_default(),
                        uuid::Uuid::nil(),
                    ),
                };
                if version < 5 {
                    // The created topic's details are in the response from v5 on.
                    results.push(r);
                    continue;
                }
                if !may_describe_configs {
                    results.push(
                        r.with_topic_id(if version >= 7 {
                            topic_id
                        } else {
                            uuid::Uuid::nil()
                        })
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                        .with_topic_config_error_code(denied(ResourceType::Topic))
                        .with_configs(None),
                    );
                    continue;
                }
                r.with_topic_id(if version >= 7 {
                    topic_id
                } else {
                    uuid::Uuid::nil()
                })
                .with_num_partitions(spec.partitions)
                .with_replication_factor(spec.replication_factor)
                .with_configs(Some(
                    configs
                        .into_iter()
                        .map(|c| {
                            CreatableTopicConfigs::default()
                                .with_name(str_bytes(c.name))
                                .with_value(Some(str_bytes(&c.value)))
                                .with_config_source(if c.is_default {
                                    SOURCE_DEFAULT
                                } else {
                                    SOURCE_TOPIC_OVERRIDE
                                })
                        })
                        .collect(),
                ))
            }
            Err(e) => r
                .with_error_code(e.code())
                .with_error_message(Some(str_bytes(&e.to_string()))),
        });
    }
    CreateTopicsResponse::default().with_topics(results)
}

pub async fn delete(
    broker: &Arc<Broker>,
    session: &Session,
    req: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let authz = broker.authz(session);
    let cluster_delete = authz.allows(AclOperation::Delete, ResourceType::Cluster, CLUSTER_NAME);
    // v6 names topics by name or id; earlier versions by name only.
    let mut wanted: Vec<(Option<String>, uuid::Uuid)> = req
        .topic_names
        .iter()
        .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
        .collect();
    wanted.extend(
        req.topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)),
    );
    let mut results = Vec::with_capacity(wanted.len());
    for (name, id) in wanted {
        let resolved = match &name {
            Some(n) => Some(n.clone()),
            None => broker.topic_by_id(id).map(|t| t.name.clone()),
        };
        // topic_id exists from v6, error_message from v5.
        let id_field = |id: uuid::Uuid| if version >= 6 { id } else { uuid::Uuid::nil() };
        let message = |e: &BrokerError| (version >= 5).then(|| str_bytes(&e.to_string()));
        let r = DeletableTopicResult::default()
            .with_name(name.as_deref().map(topic_name))
            .with_topic_id(id_field(id));
        let Some(resolved) = resolved else {
            results.push(r.with_error_code(ResponseError::UnknownTopicId.code()));
            continue;
        };
        // DELETE on the cluster covers every topic; else DESCRIBE (to learn the topic
        // exists) and DELETE on it, checked before existence, so a refused client learns
        // nothing (Kafka's ControllerApis.deleteTopics). A topic named by id is not named
        // back to who may not describe it.
        let all = cluster_delete;
        if !all && !authz.allows(AclOperation::Describe, ResourceType::Topic, &resolved) {
            results.push(r.with_error_code(denied(ResourceType::Topic)));
            continue;
        }
        if !all && !authz.allows(AclOperation::Delete, ResourceType::Topic, &resolved) {
            results.push(
                r.with_name(Some(topic_name(&resolved)))
                    .with_error_code(denied(ResourceType::Topic)),
            );
            continue;
        }
        results.push(match broker.delete_topic(&resolved).await {
            Ok(t) => r
                .with_name(Some(topic_name(&t.name)))
                .with_topic_id(id_field(t.topic_id.0)),
            Err(e) => r.with_error_code(e.code()).with_error_message(message(&e)),
        });
    }
    DeleteTopicsResponse::default().with_responses(results)
}

pub async fn create_partitions(
    broker: &Arc<Broker>,
    session: &Session,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let authz = broker.authz(session);
    let mut results = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.name.0.to_string();
        let r = CreatePartitionsTopicResult::default().with_name(topic_name(&name));
        // ALTER on the topic (Kafka).
        if !authz.allows(AclOperation::Alter, ResourceType::Topic, &name) {
            results.push(
                r.with_error_code(denied(ResourceType::Topic))
                    .with_error_message(Some(str_bytes("Authorization failed."))),
            );
            continue;
        }
        let outcome = if t.assignments.as_ref().is_some_and(|a| !a.is_empty()) {
            Err(BrokerError::InvalidRequest(
                "manual replica assignment is not supported".into(),
            ))
        } else if req.validate_only {
            match broker.topic(&name) {
                None => Err(BrokerError::UnknownTopic(name.clone())),
                Some(topic) if t.count <= topic.partitions.len() as i32 => {
                    Err(oxbow_metadata::Error::InvalidPartitions {
                        count: t.count,
                        reason: format!("topic already has {} partitions", topic.partitions.len()),
                    }
                    .into())
                }
                Some(_) => oxbow_metadata::topic::validate_partition_count(t.count)
                    .map_err(BrokerError::from),
            }
        } else {
            broker.create_partitions(&name, t.count).await.map(|_| ())
        };
        results.push(match outcome {
            Ok(()) => r,
            Err(e) => r
                .with_error_code(e.code())
                .with_error_message(Some(str_bytes(&e.to_string()))),
        });
    }
    CreatePartitionsResponse::default().with_results(results)
}
