//! DescribeCluster and FindCoordinator, for the whole cluster: every live broker (rack =
//! its `--az`), the elected controller, and each group's or transactional id's coordinator
//! — the live broker `cluster::placement::coordinator_for` picks (rendezvous hashing of the
//! key), so every broker gives the same answer. On one node this broker is all of them.

use super::metadata::{controller_id, live_brokers, own_endpoint};
use super::{denied, str_bytes};
use crate::broker::Broker;
use crate::cluster::split_host_port;
use crate::security::acl::{AclOperation, ResourceType};
use crate::security::Session;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, FindCoordinatorRequest,
    FindCoordinatorResponse,
};
use std::sync::Arc;

/// DescribeCluster `endpoint_type` for brokers (2 would be controllers, which Oxbow does not
/// expose: etcd is its controller quorum).
const ENDPOINT_BROKERS: i8 = 1;
/// FindCoordinator key types.
const KEY_GROUP: i8 = 0;
const KEY_TRANSACTION: i8 = 1;

pub fn describe(
    broker: &Arc<Broker>,
    session: &Session,
    req: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let s = &broker.settings;
    // Not authorized, as in Kafka: like Metadata it only says who the brokers are (Kafka gates
    // just its cluster_authorized_operations, which Oxbow does not compute).
    let r = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(&s.cluster_id))
        .with_controller_id(BrokerId(controller_id(broker)))
        .with_endpoint_type(req.endpoint_type);
    if req.endpoint_type != ENDPOINT_BROKERS {
        return r
            .with_error_code(ResponseError::UnsupportedEndpointType.code())
            .with_error_message(Some(str_bytes("only broker endpoints are exposed")));
    }
    r.with_brokers(
        live_brokers(broker, &session.listener)
            .into_iter()
            .map(|(id, host, port, az)| {
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(id))
                    .with_host(str_bytes(&host))
                    .with_port(port)
                    .with_rack(az.map(|a| str_bytes(&a)))
            })
            .collect(),
    )
}

/// (node id, host, port) of the broker coordinating `group` (or transactional id), if it
/// is reachable.
fn coordinator_of(broker: &Broker, listener: &str, group: &str) -> Option<(i32, String, i32)> {
    let id = broker.cluster.coordinator_for(group);
    if id == broker.settings.broker_id {
        let (host, port) = own_endpoint(broker, listener);
        return Some((id, host, port));
    }
    let (host, port) = split_host_port(broker.cluster.broker(id)?.endpoint(listener)?)?;
    Some((id, host, port))
}

pub fn find_coordinator(
    broker: &Arc<Broker>,
    session: &Session,
    req: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let authz = broker.authz(session);
    // (node, host, port, error code, message) for one key.
    let answer = |key: &str| {
        // DESCRIBE on the group or the transactional id, before anything is said of it.
        let resource = match req.key_type {
            KEY_GROUP => Some(ResourceType::Group),
            KEY_TRANSACTION => Some(ResourceType::TransactionalId),
            _ => None,
        };
        if let Some(rt) = resource {
            if !authz.allows(AclOperation::Describe, rt, key) {
                return (-1, String::new(), -1, denied(rt), None);
            }
        }
        if req.key_type != KEY_GROUP && req.key_type != KEY_TRANSACTION {
            // As Kafka answers a coordinator type it does not know.
            return (
                -1,
                String::new(),
                -1,
                ResponseError::InvalidRequest.code(),
                Some(str_bytes(&format!(
                    "coordinator type {} is not supported",
                    req.key_type
                ))),
            );
        }
        match coordinator_of(broker, &session.listener, key) {
            Some((id, host, port)) => (id, host, port, 0, None),
            None => (
                -1,
                String::new(),
                -1,
                ResponseError::CoordinatorNotAvailable.code(),
                Some(str_bytes("the coordinator is not reachable yet")),
            ),
        }
    };
    if version >= 4 {
        let coordinators = req
            .coordinator_keys
            .iter()
            .map(|key| {
                let (id, host, port, code, message) = answer(key);
                Coordinator::default()
                    .with_key(key.clone())
                    .with_node_id(BrokerId(id))
                    .with_host(str_bytes(&host))
                    .with_port(port)
                    .with_error_code(code)
                    .with_error_message(message)
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let (id, host, port, code, message) = answer(&req.key);
    FindCoordinatorResponse::default()
        .with_error_code(code)
        .with_error_message(message.filter(|_| version >= 1))
        .with_node_id(BrokerId(id))
        .with_host(str_bytes(&host))
        .with_port(port)
}
