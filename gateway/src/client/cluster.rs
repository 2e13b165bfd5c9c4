//! Cluster admin operations on [`Client`]: steer partition leadership
//! (AlterPartitionReassignments) and list pending moves (ListPartitionReassignments).
//!
//! Both go to any broker (Oxbow records the request in the metadata service from any
//! broker; Apache Kafka forwards them to its controller). A partition's "replicas" in a
//! reassignment are, for Oxbow, the new leader alone: the first broker listed leads.

use std::time::Duration;

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, ListPartitionReassignmentsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::error::ClientError;
use super::kafka_client::{Client, Target};
use super::requests::duration_ms;

/// A reassignment still in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reassignment {
    pub topic: String,
    pub partition: i32,
    /// Current replicas (for Oxbow: the current leader, then the requested one).
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

impl Client {
    /// Asks for `topic`'s `partition` to be led by broker `to` (`None`: cancel a pending
    /// request). Returns once the request is recorded; the move happens in the background.
    pub async fn reassign_partition(
        &mut self,
        topic: &str,
        partition: i32,
        to: Option<i32>,
    ) -> Result<(), ClientError> {
        let timeout = self.timeout();
        let (_, response) = self
            .call(Target::Any, None, Duration::ZERO, |_| {
                AlterPartitionReassignmentsRequest::default()
                    .with_timeout_ms(duration_ms(timeout))
                    .with_topics(vec![ReassignableTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                        .with_partitions(vec![ReassignablePartition::default()
                            .with_partition_index(partition)
                            .with_replicas(to.map(|b| vec![BrokerId(b)]))])])
            })
            .await?;
        let op = || format!("reassign {topic}-{partition}");
        ClientError::check(response.error_code, response.error_message.as_deref(), op)?;
        for t in &response.responses {
            for p in &t.partitions {
                ClientError::check(p.error_code, p.error_message.as_deref(), op)?;
            }
        }
        Ok(())
    }

    /// Every reassignment still in progress.
    pub async fn list_reassignments(&mut self) -> Result<Vec<Reassignment>, ClientError> {
        let timeout = self.timeout();
        let (_, response) = self
            .call(Target::Any, None, Duration::ZERO, |_| {
                ListPartitionReassignmentsRequest::default().with_timeout_ms(duration_ms(timeout))
            })
            .await?;
        ClientError::check(
            response.error_code,
            response.error_message.as_deref(),
            || "list reassignments".to_string(),
        )?;
        let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
        Ok(response
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| Reassignment {
                    topic: t.name.0.to_string(),
                    partition: p.partition_index,
                    replicas: ids(&p.replicas),
                    adding: ids(&p.adding_replicas),
                    removing: ids(&p.removing_replicas),
                })
            })
            .collect())
    }
}
