//! Metadata: brokers, and each topic's partitions with leader and leader epoch. Requested
//! topics that do not exist are created when the client allows it and the broker's
//! `--auto-create-topics` is on.
//!
//! Brokers are every live broker this broker sees (`cluster::ClusterView`), itself always
//! included (it is answering); rack is the broker's `--az`. A partition whose stored leader
//! has no live lease (between its death and the controller's failover) is reported with
//! leader -1 and LEADER_NOT_AVAILABLE, the dead leader as an offline replica: clients wait
//! and refresh instead of dialling a dead broker. A partition's replicas are its leader
//! and the brokers its leader's WAL is replicated to (what holds its data not yet in the
//! object store), its ISR the leader and those recorded in sync (`cluster::WalCopies`,
//! re-read every 2 s), so `kafka-topics.sh --under-replicated-partitions` and admin
//! clients see a partition whose acknowledged tail has fewer copies than configured. A
//! replica that is not live is listed offline. When the leader has re-chosen fewer
//! replicas than wanted (a lost zone, decision 33), the lost ones stay listed, offline and
//! out of the ISR, so the partition stays visibly under-replicated.
//!
//! `__consumer_offsets` is listed, internal, with Kafka's 50 partitions spread over the
//! live brokers, as clients and their test suites expect of a Kafka cluster (regex
//! subscriptions skip it as internal; franz-go's suite looks for it). It holds no records
//! here — group offsets live in the metadata service (decision 9) — so it cannot be created,
//! produced to or read; its partition number is what names a group's transactional offsets
//! in transaction markers, as in Kafka.

use super::{denied, str_bytes, topic_name};
use crate::broker::Broker;
use crate::cluster::split_host_port;
use crate::error::BrokerError;
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::security::Session;
use crate::transactions::markers::OFFSETS_TOPIC;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use oxbow_metadata::TopicMetadata;
use std::sync::Arc;

/// Every live broker as (id, host, port, az) on `listener`, sorted by id, this broker
/// always included (it is answering on that listener). A broker without the listener is
/// left out, as Kafka leaves it out.
pub fn live_brokers(broker: &Broker, listener: &str) -> Vec<(i32, String, i32, Option<String>)> {
    let s = &broker.settings;
    let mut out: Vec<_> = broker
        .cluster
        .brokers()
        .into_iter()
        .filter(|b| b.broker_id != s.broker_id)
        .filter_map(|b| {
            let (host, port) = split_host_port(b.endpoint(listener)?)?;
            Some((b.broker_id, host, port, b.az))
        })
        .collect();
    let my_az = broker.cluster.broker(s.broker_id).and_then(|b| b.az);
    let (host, port) = own_endpoint(broker, listener);
    out.push((s.broker_id, host, port, my_az));
    out.sort_by_key(|b| b.0);
    out
}

/// This broker's advertised (host, port) on `listener` (the inter-broker one if it has no
/// such listener, which cannot happen for a listener a request arrived on).
pub fn own_endpoint(broker: &Broker, listener: &str) -> (String, i32) {
    let s = &broker.settings;
    s.listeners
        .get(listener)
        .cloned()
        .unwrap_or_else(|| (s.advertised_host.clone(), s.advertised_port))
}

/// The controller to report: the elected one if live, else this broker (admin clients send
/// some requests to "the controller", and any Oxbow broker can serve them).
pub fn controller_id(broker: &Broker) -> i32 {
    broker
        .cluster
        .controller()
        .filter(|c| broker.cluster.is_live(*c))
        .unwrap_or(broker.settings.broker_id)
}

pub fn brokers(broker: &Broker, listener: &str) -> Vec<MetadataResponseBroker> {
    live_brokers(broker, listener)
        .into_iter()
        .map(|(id, host, port, az)| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(id))
                .with_host(str_bytes(&host))
                .with_port(port)
                .with_rack(az.map(|a| str_bytes(&a)))
        })
        .collect()
}

pub fn describe_topic(
    broker: &Broker,
    topic: &TopicMetadata,
    version: i16,
) -> MetadataResponseTopic {
    let wanted = crate::metrics::health::wanted_copies(broker);
    let partitions = topic
        .partitions
        .iter()
        .map(|p| {
            let state = broker.cluster.partition_replicas(p.leader, wanted);
            let ids = |v: Vec<i32>| v.into_iter().map(BrokerId).collect::<Vec<_>>();
            let r = MetadataResponsePartition::default()
                .with_partition_index(p.partition)
                .with_leader_epoch(if version >= 7 { p.leader_epoch } else { -1 })
                .with_replica_nodes(ids(state.replicas))
                .with_offline_replicas(if version >= 5 {
                    ids(state.offline)
                } else {
                    Vec::new()
                });
            if state.leader_live {
                r.with_leader_id(BrokerId(p.leader))
                    .with_isr_nodes(ids(state.isr))
            } else {
                r.with_error_code(ResponseError::LeaderNotAvailable.code())
                    .with_leader_id(BrokerId(-1))
            }
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

/// The listed `__consumer_offsets` (see the module docs): internal, its partitions led by
/// the live brokers in turn, a topic id fixed per cluster.
pub fn offsets_topic(broker: &Broker, listener: &str, version: i16) -> MetadataResponseTopic {
    let leaders: Vec<i32> = live_brokers(broker, listener)
        .into_iter()
        .map(|b| b.0)
        .collect();
    let partitions = (0..crate::groups::OFFSETS_PARTITIONS)
        .map(|p| {
            let leader = leaders
                .get(p as usize % leaders.len().max(1))
                .copied()
                .unwrap_or(broker.settings.broker_id);
            MetadataResponsePartition::default()
                .with_partition_index(p)
                .with_leader_id(BrokerId(leader))
                .with_leader_epoch(if version >= 7 { 0 } else { -1 })
                .with_replica_nodes(vec![BrokerId(leader)])
                .with_isr_nodes(vec![BrokerId(leader)])
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(OFFSETS_TOPIC)))
        .with_topic_id(if version >= 10 {
            offsets_topic_id(&broker.settings.cluster_id)
        } else {
            uuid::Uuid::nil()
        })
        .with_is_internal(true)
        .with_partitions(partitions)
}

/// A topic id for `__consumer_offsets`, the same on every broker of a cluster (two FNV-1a
/// hashes of the cluster id: stable across builds, unlike std's hasher).
fn offsets_topic_id(cluster_id: &str) -> uuid::Uuid {
    let fnv = |salt: u8| {
        format!("{cluster_id}/{OFFSETS_TOPIC}/{salt}")
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            })
    };
    uuid::Uuid::from_u64_pair(fnv(0), fnv(1))
}

fn topic_error(name: Option<&str>, id: uuid::Uuid, e: &BrokerError) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(name.map(topic_name))
        .with_topic_id(id)
        .with_error_code(e.code())
}

pub async fn handle(
    broker: &Arc<Broker>,
    session: &Session,
    req: MetadataRequest,
    version: i16,
) -> MetadataResponse {
    // v0 asks for every topic with an empty list; v1+ with null.
    let all = match &req.topics {
        None => true,
        Some(t) => t.is_empty() && version == 0,
    };
    let allow_create = version < 4 || req.allow_auto_topic_creation;
    let authz = broker.authz(session);
    let describable = |name: &str| authz.allows(AclOperation::Describe, ResourceType::Topic, name);
    let refused = |name: Option<&str>, id: uuid::Uuid| {
        MetadataResponseTopic::default()
            .with_name(name.map(topic_name))
            .with_topic_id(id)
            .with_error_code(denied(ResourceType::Topic))
    };
    let topics = if all {
        // Every topic the client may describe; the others are left out (Kafka).
        let mut all: Vec<MetadataResponseTopic> = broker
            .topics()
            .iter()
            .filter(|t| describable(&t.name))
            .map(|t| describe_topic(broker, t, version))
            .collect();
        if describable(OFFSETS_TOPIC) {
            all.push(offsets_topic(broker, &session.listener, version));
        }
        all
    } else {
        let cluster_create =
            authz.allows(AclOperation::Create, ResourceType::Cluster, CLUSTER_NAME);
        let offsets_id = offsets_topic_id(&broker.settings.cluster_id);
        let mut out = Vec::new();
        for t in req.topics.unwrap_or_default() {
            let by_name = t.name.as_ref().map(|n| n.0.to_string());
            // DESCRIBE first, whether the topic exists or not, so a refused client
            // learns nothing of it; a topic named by id is not named back.
            let refused_name = match &by_name {
                Some(name) => (!describable(name)).then_some(Some(name.as_str())),
                None if t.topic_id == offsets_id => (!describable(OFFSETS_TOPIC)).then_some(None),
                None => broker
                    .topic_by_id(t.topic_id)
                    .filter(|topic| !describable(&topic.name))
                    .map(|_| None),
            };
            if let Some(name) = refused_name {
                out.push(refused(name, t.topic_id));
                continue;
            }
            // By name, or by its id (`kafka-topics.sh --describe` asks by id for every
            // topic it listed, this one included).
            if by_name.as_deref() == Some(OFFSETS_TOPIC)
                || (by_name.is_none() && t.topic_id == offsets_id)
            {
                out.push(offsets_topic(broker, &session.listener, version));
                continue;
            }
            let result = match &by_name {
                Some(name) => {
                    let missing = broker.topic(name).is_none();
                    // Auto-creation needs CREATE on the cluster or the topic, else
                    // TOPIC_AUTHORIZATION_FAILED (Kafka's handleTopicMetadataRequest).
                    if missing
                        && allow_create
                        && broker.settings.auto_create_topics
                        && !cluster_create
                        && !authz.allows(AclOperation::Create, ResourceType::Topic, name)
                    {
                        out.push(refused(Some(name), t.topic_id));
                        continue;
                    }
                    broker.topic_or_create(name, allow_create).await
                }
                None => broker
                    .topic_by_id(t.topic_id)
                    .ok_or_else(|| BrokerError::UnknownTopic(t.topic_id.to_string())),
            };
            out.push(match result {
                Ok(topic) => describe_topic(broker, &topic, version),
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
        .with_brokers(brokers(broker, &session.listener))
        // cluster_id exists from v2, controller_id from v1.
        .with_cluster_id((version >= 2).then(|| str_bytes(&broker.settings.cluster_id)))
        .with_controller_id(BrokerId(if version >= 1 {
            controller_id(broker)
        } else {
            -1
        }))
        .with_topics(topics)
}
