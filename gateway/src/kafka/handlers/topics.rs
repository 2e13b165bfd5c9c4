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
        // A manual assignment (kafka-topics.sh --replica-assignment): partition p is led by
        // the first broker of its list (Kafka's preferred replica).
        let manual = if t.assignments.is_empty() {
            None
        } else if t.num_partitions != -1 || t.replication_factor != -1 {
            Some(Err((
                ResponseError::InvalidRequest.code(),
                "both a partition count or replication factor and a replica assignment were set; set one".to_string(),
            )))
        } else {
            let mut lists: Vec<(i32, Vec<i32>)> = t
                .assignments
                .iter()
                .map(|a| {
                    (
                        a.partition_index,
                        a.broker_ids.iter().map(|b| b.0).collect(),
                    )
                })
                .collect();
            lists.sort_by_key(|(index, _)| *index);
            if lists
                .iter()
                .enumerate()
                .any(|(i, (index, _))| *index != i as i32)
            {
                Some(Err((
                    ResponseError::InvalidReplicaAssignment.code(),
                    "the assignment's partitions are not 0, 1, 2, ... in sequence".to_string(),
                )))
            } else {
                Some(assigned_leaders(
                    broker,
                    &lists.into_iter().map(|(_, l)| l).collect::<Vec<_>>(),
                ))
            }
        };
        let leaders = match manual {
            Some(Err((code, message))) => {
                results.push(
                    r.with_error_code(code)
                        .with_error_message(Some(str_bytes(&message))),
                );
                continue;
            }
            Some(Ok(leaders)) => Some(leaders),
            None => None,
        };
        let configs: BTreeMap<String, String> = t
            .configs
            .iter()
            .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
            .collect();
        let spec = TopicSpec {
            name: name.clone(),
            partitions: match &leaders {
                Some(l) => l.len() as i32,
                None if t.num_partitions == -1 => broker.settings.default_partitions,
                None => t.num_partitions,
            },
            replication_factor: match t.assignments.first() {
                Some(a) if leaders.is_some() => a.broker_ids.len() as i16,
                _ if t.replication_factor == -1 => 1,
                _ => t.replication_factor,
            },
            configs,
        };
        let outcome = if req.validate_only {
            broker.validate_topic(&spec).map(|_| None)
        } else {
            broker
                .create_topic_led_by(spec.clone(), leaders)
                .await
                .map(Some)
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
        // A manual assignment (kafka-topics.sh --alter --replica-assignment): one broker
        // list per new partition, led by its first broker.
        let leaders = match t.assignments.as_ref().filter(|a| !a.is_empty()) {
            None => None,
            Some(lists) => {
                let have = broker.topic(&name).map_or(0, |t| t.partitions.len() as i32);
                let lists: Vec<Vec<i32>> = lists
                    .iter()
                    .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                    .collect();
                let checked = if t.count - have != lists.len() as i32 {
                    Err((
                        ResponseError::InvalidReplicaAssignment.code(),
                        format!(
                            "{} new partition(s) asked for ({have} to {}), but {} assignment(s) given",
                            t.count - have,
                            t.count,
                            lists.len()
                        ),
                    ))
                } else {
                    assigned_leaders(broker, &lists)
                };
                match checked {
                    Ok(l) => Some(l),
                    Err((code, message)) => {
                        results.push(
                            r.with_error_code(code)
                                .with_error_message(Some(str_bytes(&message))),
                        );
                        continue;
                    }
                }
            }
        };
        let outcome = if req.validate_only {
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
            broker
                .create_partitions_led_by(&name, t.count, leaders)
                .await
                .map(|_| ())
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

/// The leaders of a manual assignment (one broker list per partition, in order): each
/// list's first broker, Kafka's preferred replica. An Oxbow partition has one replica, its
/// leader (WAL replicas and the object store make it durable), so the other brokers named
/// are not copies; they are checked as Kafka checks them. `INVALID_REPLICA_ASSIGNMENT`
/// for an empty list, a broker named twice, lists of different lengths, or a broker that
/// is not live.
fn assigned_leaders(
    broker: &Broker,
    lists: &[Vec<i32>],
) -> Result<Vec<oxbow_metadata::BrokerId>, (i16, String)> {
    let invalid = |why: String| Err((ResponseError::InvalidReplicaAssignment.code(), why));
    let width = lists.first().map_or(0, Vec::len);
    let mut leaders = Vec::with_capacity(lists.len());
    for (i, list) in lists.iter().enumerate() {
        let Some(&leader) = list.first() else {
            return invalid(format!("assignment {i} names no broker"));
        };
        if list.len() != width {
            return invalid(format!(
                "assignment {i} names {} broker(s), the first names {width}: every partition has the same replication factor",
                list.len()
            ));
        }
        let mut named = std::collections::HashSet::with_capacity(list.len());
        if let Some(dup) = list.iter().find(|b| !named.insert(**b)) {
            return invalid(format!("assignment {i} names broker {dup} twice"));
        }
        if let Some(gone) = list
            .iter()
            .find(|&&b| !broker.cluster.is_live(b) && b != broker.settings.broker_id)
        {
            return invalid(format!(
                "assignment {i} names broker {gone}, which is not a live broker"
            ));
        }
        leaders.push(leader);
    }
    Ok(leaders)
}
