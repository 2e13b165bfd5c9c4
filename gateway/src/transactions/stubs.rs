//! TEMPORARY: a stand-in for the partition side (`Broker::write_txn_marker`) being built on
//! another branch; removed when it merges.

use crate::broker::Broker;
use crate::error::{BrokerError, Result};
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
