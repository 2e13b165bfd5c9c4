//! One broker's view of the metadata service, with the faults of a real one: the broker cut
//! off from it (every call fails, so its lease lapses), calls that fail before reaching it,
//! and transactions that commit but whose answer is lost (etcd's ambiguous timeout).
//!
//! Every broker of the simulation gets its own [`FaultyMetadata`] over the one shared
//! in-memory embedded store, so a fault can isolate one broker while the others go on.

use async_trait::async_trait;
use bytes::Bytes;
use oxbow_metadata::clock::Rng;
use oxbow_metadata::watch::{BrokerEvent, TopicEvent, Watch};
use oxbow_metadata::{
    BrokerId, BrokerRegistration, CatalogCommit, CatalogEntry, CatalogReplace, CommittedOffset,
    Error, ErrorKind, GroupRecord, Lease, LeaseId, MetadataStore, Offset, PartitionId,
    PartitionState, PendingTxnOffsets, Result, TopicId, TopicMetadata, TopicSpec, TxnRecord,
    WalReplicaSet,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What to inject; set at any time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MetaFaults {
    /// Every call fails (the broker cannot reach the metadata service).
    pub cut: bool,
    /// Chance that a write fails before it is applied.
    pub fail_rate: f64,
    /// Chance that a write is applied but reported as failed.
    pub lost_ack_rate: f64,
}

#[derive(Debug, Default)]
pub struct MetaFaultCounts {
    pub refused: AtomicU64,
    pub failed: AtomicU64,
    pub lost_acks: AtomicU64,
    /// Catalog commits the service refused as fenced (a deposed leader's seals, their
    /// objects already in the store): what a zombie would try to land later
    /// (`schedule::zombies`). The last few only.
    pub fenced_commits: Mutex<Vec<CatalogCommit>>,
}

/// Fenced commits kept for the zombie stream.
const FENCED_COMMITS_KEPT: usize = 16;

pub struct FaultyMetadata {
    inner: Arc<dyn MetadataStore>,
    faults: Mutex<MetaFaults>,
    rng: Arc<dyn Rng>,
    pub counts: Arc<MetaFaultCounts>,
}

fn unavailable(what: &str) -> Error {
    Error::Unavailable(format!("simulated: {what}"))
}

impl FaultyMetadata {
    pub fn new(
        inner: Arc<dyn MetadataStore>,
        rng: Arc<dyn Rng>,
        counts: Arc<MetaFaultCounts>,
    ) -> Arc<FaultyMetadata> {
        Arc::new(FaultyMetadata {
            inner,
            faults: Mutex::new(MetaFaults::default()),
            rng,
            counts,
        })
    }

    pub fn set_faults(&self, f: MetaFaults) {
        *self.faults.lock().unwrap_or_else(|e| e.into_inner()) = f;
    }

    /// Whether any fault is injected now.
    pub fn faulted(&self) -> bool {
        let f = self.faults();
        f.cut || f.fail_rate > 0.0 || f.lost_ack_rate > 0.0
    }

    fn faults(&self) -> MetaFaults {
        *self.faults.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Before a read: only a cut fails it.
    fn read(&self) -> Result<()> {
        if self.faults().cut {
            self.counts.refused.fetch_add(1, Ordering::Relaxed);
            return Err(unavailable("metadata service unreachable"));
        }
        Ok(())
    }

    /// Before a write: a cut or a failure drawn from the fail rate.
    fn before_write(&self) -> Result<()> {
        self.read()?;
        let f = self.faults();
        if f.fail_rate > 0.0 && self.rng.unit_f64() < f.fail_rate {
            self.counts.failed.fetch_add(1, Ordering::Relaxed);
            return Err(unavailable("transaction failed"));
        }
        Ok(())
    }

    /// After a write that was applied: maybe lose its answer.
    fn after_write<T>(&self, r: Result<T>) -> Result<T> {
        let f = self.faults();
        if r.is_ok() && f.lost_ack_rate > 0.0 && self.rng.unit_f64() < f.lost_ack_rate {
            self.counts.lost_acks.fetch_add(1, Ordering::Relaxed);
            return Err(unavailable("transaction outcome unknown (timed out)"));
        }
        r
    }
}

#[async_trait]
impl MetadataStore for FaultyMetadata {
    async fn register_broker(&self, broker: BrokerRegistration, ttl: Duration) -> Result<Lease> {
        self.before_write()?;
        self.inner.register_broker(broker, ttl).await
    }
    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration> {
        self.read()?;
        self.inner.keep_alive(lease).await
    }
    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        self.read()?;
        self.inner.revoke_lease(lease).await
    }
    async fn list_brokers(&self) -> Result<Vec<BrokerRegistration>> {
        self.read()?;
        self.inner.list_brokers().await
    }
    async fn watch_brokers(&self) -> Result<Watch<BrokerEvent>> {
        self.read()?;
        self.inner.watch_brokers().await
    }
    async fn create_topic_with_leaders(
        &self,
        spec: TopicSpec,
        leaders: &[BrokerId],
    ) -> Result<TopicMetadata> {
        self.before_write()?;
        self.inner.create_topic_with_leaders(spec, leaders).await
    }
    async fn delete_topic(&self, name: &str) -> Result<TopicMetadata> {
        self.before_write()?;
        self.inner.delete_topic(name).await
    }
    async fn list_topics(&self) -> Result<Vec<TopicMetadata>> {
        self.read()?;
        self.inner.list_topics().await
    }
    async fn topic(&self, name: &str) -> Result<Option<TopicMetadata>> {
        self.read()?;
        self.inner.topic(name).await
    }
    async fn topic_by_id(&self, topic_id: TopicId) -> Result<Option<TopicMetadata>> {
        self.read()?;
        self.inner.topic_by_id(topic_id).await
    }
    async fn create_partitions_with_leaders(
        &self,
        name: &str,
        total: i32,
        leaders: &[BrokerId],
    ) -> Result<TopicMetadata> {
        self.before_write()?;
        self.inner
            .create_partitions_with_leaders(name, total, leaders)
            .await
    }
    async fn update_partition(
        &self,
        topic_id: TopicId,
        expected_version: u64,
        new: PartitionState,
    ) -> Result<PartitionState> {
        self.before_write()?;
        let r = self
            .inner
            .update_partition(topic_id, expected_version, new)
            .await;
        self.after_write(r)
    }
    async fn watch_topics(&self) -> Result<Watch<TopicEvent>> {
        self.read()?;
        self.inner.watch_topics().await
    }
    async fn allocate_producer_ids(&self, count: u32) -> Result<i64> {
        self.before_write()?;
        self.inner.allocate_producer_ids(count).await
    }
    async fn commit_catalog(&self, commit: CatalogCommit) -> Result<()> {
        self.before_write()?;
        let r = self.inner.commit_catalog(commit.clone()).await;
        if r.as_ref().is_err_and(|e| e.kind() == ErrorKind::Fenced) {
            let mut kept = self
                .counts
                .fenced_commits
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if kept.len() >= FENCED_COMMITS_KEPT {
                kept.remove(0);
            }
            kept.push(commit);
        }
        self.after_write(r)
    }
    async fn sealed_object_catalogued(
        &self,
        broker_id: BrokerId,
        object_key: &str,
    ) -> Result<bool> {
        self.read()?;
        self.inner
            .sealed_object_catalogued(broker_id, object_key)
            .await
    }
    async fn sync_catalog(&self, topic_id: TopicId, partition: PartitionId) -> Result<()> {
        self.read()?;
        self.inner.sync_catalog(topic_id, partition).await
    }

    async fn partition_state(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
    ) -> Result<Option<(TopicMetadata, PartitionState)>> {
        self.read()?;
        self.inner.partition_state(topic_id, partition).await
    }

    async fn catalog_entries(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
        from_offset: Offset,
        limit: usize,
    ) -> Result<Vec<CatalogEntry>> {
        self.read()?;
        self.inner
            .catalog_entries(topic_id, partition, from_offset, limit)
            .await
    }
    async fn catalog_last(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
    ) -> Result<Option<CatalogEntry>> {
        self.read()?;
        self.inner.catalog_last(topic_id, partition).await
    }
    async fn catalog_find_timestamp(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
        timestamp_ms: i64,
    ) -> Result<Option<CatalogEntry>> {
        self.read()?;
        self.inner
            .catalog_find_timestamp(topic_id, partition, timestamp_ms)
            .await
    }
    async fn replace_catalog_entries(&self, replace: CatalogReplace) -> Result<()> {
        self.before_write()?;
        let r = self.inner.replace_catalog_entries(replace).await;
        self.after_write(r)
    }
    async fn commit_offsets(&self, group_id: &str, offsets: Vec<CommittedOffset>) -> Result<()> {
        self.before_write()?;
        self.inner.commit_offsets(group_id, offsets).await
    }
    async fn fetch_offsets(&self, group_id: &str) -> Result<Vec<CommittedOffset>> {
        self.read()?;
        self.inner.fetch_offsets(group_id).await
    }
    async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: Option<Vec<(String, PartitionId)>>,
    ) -> Result<()> {
        self.before_write()?;
        self.inner.delete_offsets(group_id, partitions).await
    }
    async fn group(&self, group_id: &str) -> Result<Option<GroupRecord>> {
        self.read()?;
        self.inner.group(group_id).await
    }
    async fn put_group(
        &self,
        group_id: &str,
        expected_version: Option<u64>,
        data: Bytes,
    ) -> Result<GroupRecord> {
        self.before_write()?;
        self.inner.put_group(group_id, expected_version, data).await
    }
    async fn delete_group(&self, group_id: &str, expected_version: u64) -> Result<()> {
        self.before_write()?;
        self.inner.delete_group(group_id, expected_version).await
    }
    async fn list_groups(&self) -> Result<Vec<String>> {
        self.read()?;
        self.inner.list_groups().await
    }
    async fn put_txn_offsets(
        &self,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        offsets: Vec<CommittedOffset>,
    ) -> Result<PendingTxnOffsets> {
        self.before_write()?;
        let r = self
            .inner
            .put_txn_offsets(group_id, producer_id, producer_epoch, offsets)
            .await;
        self.after_write(r)
    }
    async fn txn_offsets(&self, group_id: &str) -> Result<Vec<PendingTxnOffsets>> {
        self.read()?;
        self.inner.txn_offsets(group_id).await
    }
    async fn all_txn_offsets(&self) -> Result<Vec<PendingTxnOffsets>> {
        self.read()?;
        self.inner.all_txn_offsets().await
    }
    async fn txn_offsets_groups(&self, producer_id: i64) -> Result<Vec<String>> {
        self.read()?;
        self.inner.txn_offsets_groups(producer_id).await
    }
    async fn complete_txn_offsets(
        &self,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<Option<PendingTxnOffsets>> {
        self.before_write()?;
        let r = self
            .inner
            .complete_txn_offsets(group_id, producer_id, producer_epoch, commit)
            .await;
        self.after_write(r)
    }
    async fn transaction(&self, transactional_id: &str) -> Result<Option<TxnRecord>> {
        self.read()?;
        self.inner.transaction(transactional_id).await
    }
    async fn put_transaction(
        &self,
        transactional_id: &str,
        expected_version: Option<u64>,
        data: Bytes,
    ) -> Result<TxnRecord> {
        self.before_write()?;
        self.inner
            .put_transaction(transactional_id, expected_version, data)
            .await
    }
    async fn delete_transaction(
        &self,
        transactional_id: &str,
        expected_version: u64,
    ) -> Result<()> {
        self.before_write()?;
        self.inner
            .delete_transaction(transactional_id, expected_version)
            .await
    }
    async fn list_transactions(&self) -> Result<Vec<String>> {
        self.read()?;
        self.inner.list_transactions().await
    }
    async fn wal_replica_set(&self, broker: BrokerId) -> Result<Option<WalReplicaSet>> {
        self.read()?;
        self.inner.wal_replica_set(broker).await
    }
    async fn put_wal_replica_set(
        &self,
        set: WalReplicaSet,
        expected_version: Option<u64>,
    ) -> Result<WalReplicaSet> {
        self.before_write()?;
        let r = self.inner.put_wal_replica_set(set, expected_version).await;
        self.after_write(r)
    }
    async fn delete_wal_replica_set(&self, broker: BrokerId, expected_version: u64) -> Result<()> {
        self.before_write()?;
        self.inner
            .delete_wal_replica_set(broker, expected_version)
            .await
    }
    async fn campaign(&self, candidate: BrokerId, lease: LeaseId) -> Result<BrokerId> {
        self.before_write()?;
        self.inner.campaign(candidate, lease).await
    }
    async fn resign(&self, candidate: BrokerId) -> Result<()> {
        self.before_write()?;
        self.inner.resign(candidate).await
    }
    async fn controller(&self) -> Result<Option<BrokerId>> {
        self.read()?;
        self.inner.controller().await
    }
    async fn watch_controller(&self) -> Result<Watch<Option<BrokerId>>> {
        self.read()?;
        self.inner.watch_controller().await
    }
    async fn security_records(
        &self,
        kind: oxbow_metadata::SecurityKind,
    ) -> Result<Vec<oxbow_metadata::SecurityRecord>> {
        self.read()?;
        self.inner.security_records(kind).await
    }
    async fn put_security_record(
        &self,
        kind: oxbow_metadata::SecurityKind,
        name: &str,
        value: Vec<u8>,
        expected_version: Option<i64>,
    ) -> Result<i64> {
        self.before_write()?;
        let r = self
            .inner
            .put_security_record(kind, name, value, expected_version)
            .await;
        self.after_write(r)
    }
    async fn delete_security_record(
        &self,
        kind: oxbow_metadata::SecurityKind,
        name: &str,
        expected_version: Option<i64>,
    ) -> Result<()> {
        self.before_write()?;
        let r = self
            .inner
            .delete_security_record(kind, name, expected_version)
            .await;
        self.after_write(r)
    }
    async fn watch_security(&self) -> Result<Watch<oxbow_metadata::SecurityEvent>> {
        self.read()?;
        self.inner.watch_security().await
    }
    async fn mirror_records(
        &self,
        kind: oxbow_metadata::MirrorKind,
    ) -> Result<Vec<oxbow_metadata::MirrorRecord>> {
        self.read()?;
        self.inner.mirror_records(kind).await
    }
    async fn put_mirror_record(
        &self,
        kind: oxbow_metadata::MirrorKind,
        name: &str,
        value: Vec<u8>,
        expected_version: Option<i64>,
    ) -> Result<i64> {
        self.before_write()?;
        let r = self
            .inner
            .put_mirror_record(kind, name, value, expected_version)
            .await;
        self.after_write(r)
    }
    async fn delete_mirror_record(
        &self,
        kind: oxbow_metadata::MirrorKind,
        name: &str,
        expected_version: Option<i64>,
    ) -> Result<()> {
        self.before_write()?;
        let r = self
            .inner
            .delete_mirror_record(kind, name, expected_version)
            .await;
        self.after_write(r)
    }
    async fn watch_mirror(&self) -> Result<Watch<oxbow_metadata::MirrorEvent>> {
        self.read()?;
        self.inner.watch_mirror().await
    }
}
