//! InitProducerId for idempotent (non-transactional) producers: a producer id from a block
//! reserved in the metadata service, epoch 0; a producer that asks with its current id and
//! epoch (KIP-360, after an unknown-producer or timeout error) gets the epoch bumped.

use crate::broker::Broker;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use std::sync::Arc;

pub async fn init(broker: &Arc<Broker>, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let r = InitProducerIdResponse::default();
    if req.transactional_id.is_some() {
        tracing::warn!("refusing a transactional producer: transactions are not supported yet");
        return r
            .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code())
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
