//! DescribeCluster and FindCoordinator. On one node this broker is the controller and the
//! coordinator of every group.

use super::str_bytes;
use crate::broker::Broker;
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

pub fn describe(broker: &Arc<Broker>, req: DescribeClusterRequest) -> DescribeClusterResponse {
    let s = &broker.settings;
    let r = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(&s.cluster_id))
        .with_controller_id(BrokerId(s.broker_id))
        .with_endpoint_type(req.endpoint_type);
    if req.endpoint_type != ENDPOINT_BROKERS {
        return r
            .with_error_code(ResponseError::UnsupportedEndpointType.code())
            .with_error_message(Some(str_bytes("only broker endpoints are exposed")));
    }
    r.with_brokers(vec![DescribeClusterBroker::default()
        .with_broker_id(BrokerId(s.broker_id))
        .with_host(str_bytes(&s.advertised_host))
        .with_port(s.advertised_port)])
}

pub fn find_coordinator(
    broker: &Arc<Broker>,
    req: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let s = &broker.settings;
    let (code, message) = if req.key_type == KEY_GROUP {
        (0, None)
    } else {
        (
            ResponseError::CoordinatorNotAvailable.code(),
            Some(str_bytes("transactions are not supported yet")),
        )
    };
    if version >= 4 {
        let coordinators = req
            .coordinator_keys
            .into_iter()
            .map(|key| {
                Coordinator::default()
                    .with_key(key)
                    .with_node_id(BrokerId(s.broker_id))
                    .with_host(str_bytes(&s.advertised_host))
                    .with_port(s.advertised_port)
                    .with_error_code(code)
                    .with_error_message(message.clone())
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    FindCoordinatorResponse::default()
        .with_error_code(code)
        .with_error_message(message.filter(|_| version >= 1))
        .with_node_id(BrokerId(s.broker_id))
        .with_host(str_bytes(&s.advertised_host))
        .with_port(s.advertised_port)
}
