//! TEMPORARY: stand-ins for the partition side (`Broker::write_txn_marker`) and the group
//! side (`Coordinator::complete_txn_offsets`, `groups::offsets_partition`) being built on
//! other branches; removed when they merge. Nothing advertises the APIs that reach these.

use crate::broker::Broker;
use crate::error::{BrokerError, Result};
use kafka_protocol::error::ResponseError;
use oxbow_metadata::{Offset, PartitionId, TopicMetadata};

impl Broker {
    pub async fn write_txn_marker(
        &self,
        _topic: &TopicMetadata,
        _partition: PartitionId,
        _producer_id: i64,
        _producer_epoch: i16,
        _commit: bool,
        _coordinator_epoch: i32,
    ) -> Result<Offset> {
        Err(BrokerError::Log(oxbow_segment_writer::Error::Internal(
            "transaction markers are not wired yet".into(),
        )))
    }
}

impl crate::groups::Coordinator {
    pub async fn complete_txn_offsets(
        &self,
        _producer_id: i64,
        _producer_epoch: i16,
        _partitions: &[i32],
        _commit: bool,
    ) -> std::result::Result<(), ResponseError> {
        Err(ResponseError::CoordinatorNotAvailable)
    }
}

pub fn offsets_partition(group: &str) -> i32 {
    (group.len() % 50) as i32
}
