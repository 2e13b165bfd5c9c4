//! The [`MetadataStore`] trait: the seam between brokers and whatever holds cluster state
//! (the embedded `redb` file on one node; etcd in a cluster).

use crate::catalog::{CatalogCommit, CatalogEntry};
use crate::error::Result;
use crate::topic::{PartitionState, TopicMetadata, TopicSpec};
use crate::types::{BrokerId, Offset, PartitionId, TopicId};
use serde::{Deserialize, Serialize};

/// A broker as registered in the metadata service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub broker_id: BrokerId,
    /// Availability zone; WAL replicas are placed in other zones.
    pub az: Option<String>,
    /// `host:port` clients use for the Kafka protocol.
    pub kafka_addr: String,
    /// `host:port` of the HTTP API.
    pub http_addr: String,
}

/// Everything the cluster must agree on, behind one object-safe async trait.
///
/// Semantics every backend honours (checked by the conformance tests):
/// - writes are durable when the call returns;
/// - partition state changes only by compare-and-swap on [`PartitionState::version`];
/// - a catalog commit is all-or-nothing and fails with [`crate::Error::Fenced`] if any fence's
///   epoch is not the partition's current one.
#[async_trait::async_trait]
pub trait MetadataStore: Send + Sync + 'static {
    /// Records a broker's addresses (replacing an older registration with the same id).
    async fn register_broker(&self, broker: BrokerRegistration) -> Result<()>;
    async fn list_brokers(&self) -> Result<Vec<BrokerRegistration>>;

    /// Creates a topic whose partitions are all led by `leader` at epoch 0.
    async fn create_topic(&self, spec: TopicSpec, leader: BrokerId) -> Result<TopicMetadata>;
    /// Deletes a topic and its catalog entries; returns what was deleted.
    async fn delete_topic(&self, name: &str) -> Result<TopicMetadata>;
    async fn list_topics(&self) -> Result<Vec<TopicMetadata>>;
    async fn topic(&self, name: &str) -> Result<Option<TopicMetadata>>;
    async fn topic_by_id(&self, topic_id: TopicId) -> Result<Option<TopicMetadata>>;
    /// Grows a topic to `total` partitions (never shrinks), new ones led by `leader`.
    async fn create_partitions(
        &self,
        name: &str,
        total: i32,
        leader: BrokerId,
    ) -> Result<TopicMetadata>;
    /// Compare-and-swap of one partition's state: succeeds only if the stored version equals
    /// `expected_version`; the stored version becomes `expected_version + 1`.
    async fn update_partition(
        &self,
        topic_id: TopicId,
        expected_version: u64,
        new: PartitionState,
    ) -> Result<PartitionState>;

    /// Reserves `count` producer ids for idempotent producers; returns the first. Ids are
    /// never handed out twice, across restarts and brokers.
    async fn allocate_producer_ids(&self, count: u32) -> Result<i64>;

    /// Appends catalog entries atomically, fenced by leader epoch.
    async fn commit_catalog(&self, commit: CatalogCommit) -> Result<()>;
    /// Entries of a partition whose ranges end at or after `from_offset`, in offset order,
    /// at most `limit` of them.
    async fn catalog_entries(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
        from_offset: Offset,
        limit: usize,
    ) -> Result<Vec<CatalogEntry>>;
    /// The entry holding the partition's highest committed offset.
    async fn catalog_last(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
    ) -> Result<Option<CatalogEntry>>;
    /// The first entry whose largest timestamp is at or after `timestamp_ms`.
    async fn catalog_find_timestamp(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
        timestamp_ms: i64,
    ) -> Result<Option<CatalogEntry>>;
}
