//! InitProducerId. A transactional producer's goes to its id's transaction coordinator
//! (`txn.rs`). An idempotent producer gets a producer id from a block reserved in the
//! metadata service, epoch 0; one that asks with its current id and epoch (KIP-360, after
//! an unknown-producer or timeout error) gets the epoch bumped.

use super::denied;
use crate::broker::Broker;
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::security::Session;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use std::sync::Arc;

pub async fn init(
    broker: &Arc<Broker>,
    session: &Session,
    req: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let r = InitProducerIdResponse::default();
    let authz = broker.authz(session);
    if let Some(id) = &req.transactional_id {
        // WRITE on the transactional id (checked first, as Kafka does).
        if !authz.allows(
            AclOperation::Write,
            ResourceType::TransactionalId,
            id.as_str(),
        ) {
            return r
                .with_error_code(denied(ResourceType::TransactionalId))
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
        }
        return super::txn::init_producer_id(broker, id.as_str(), &req, version).await;
    }
    // An idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic
    // (KIP-679), else CLUSTER_AUTHORIZATION_FAILED, as Kafka.
    if !authz.allows(
        AclOperation::IdempotentWrite,
        ResourceType::Cluster,
        CLUSTER_NAME,
    ) && !authz.allows_some(AclOperation::Write, ResourceType::Topic)
    {
        return r
            .with_error_code(denied(ResourceType::Cluster))
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
    }
    if req.producer_id.0 >= 0 && req.producer_epoch >= 0 && req.producer_epoch < i16::MAX - 1 {
        return r
            .with_producer_id(req.producer_id)
            .with_producer_epoch(req.producer_epoch + 1);
    }
    match broker.next_producer_id().await {
        Ok(id) => r.with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Err(e) => {
            tracing::warn!(error = %e, "cannot allocate a producer id");
            r.with_error_code(ResponseError::CoordinatorNotAvailable.code())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
        }
    }
}
