//! [`KvStore`]: every rule of [`MetadataStore`], written once over the [`Kv`] seam.
//!
//! Each operation is reads plus one compare-and-swap [`Txn`] whose compares pin exactly what
//! the reads relied on (a key's mod revision, or its absence); a transaction that loses to
//! a concurrent change is re-read and re-decided, up to [`CAS_ATTEMPTS`] times, then
//! reported as a conflict. That makes every rule hold on any [`Kv`], and every write safe to
//! repeat after a timeout whose first attempt landed: catalog commits are idempotent,
//! compare-and-swaps then report a conflict (the caller re-reads), and a producer-id block
//! is skipped, never reused.
//!
//! Key schema and value encoding: [`crate::keys`] (etcd's, unchanged, so existing clusters'
//! data stays readable). A transaction stays within etcd's default `--max-txn-ops` (128):
//! larger offset commits are split (atomic per chunk); a seal is one key whatever its
//! partition count ([`catalog`]).
//!
//! Lifecycle: a value of this type is a handle (cheap to clone); the backends' constructors
//! are [`crate::EmbeddedStore`] (on [`crate::kv::RedbKv`]) and [`crate::EtcdStore`] (on
//! [`crate::kv::EtcdKv`]). "Now" and topic ids come from the injected [`Clock`] and [`Rng`].

mod catalog;
mod catalog_follow;
mod catalog_index;
mod groups;
mod mirror;
mod reclaim;
mod security;
mod topics;
mod transactions;
mod txn_offsets;
mod versioned;
mod watch;

use crate::catalog::{CatalogCommit, CatalogEntry, CatalogReplace};
use crate::clock::{Clock, OsRng, Rng, SystemClock};
use crate::error::{Error, Result};
use crate::group::{CommittedOffset, GroupRecord, PendingTxnOffsets};
use crate::keys::{self, topic::TopicRecord, Root};
use crate::kv::{Compare, Get, KeyRange, KeyValue, Kv, Op, RangeResponse, Txn};
use crate::store::{BrokerRegistration, Lease, LeaseId, MetadataStore, LEASE_TTL_MIN};
use crate::topic::{PartitionState, TopicMetadata, TopicSpec};
use crate::topic_configs::ConfigAlteration;
use crate::txn::TxnRecord;
use crate::types::{BrokerId, Offset, PartitionId, TopicId};
use crate::wal_replicas::WalReplicaSet;
use crate::watch::{BrokerEvent, TopicEvent, Watch};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;

/// Most operations (or compares) in one transaction: etcd's default `--max-txn-ops`.
pub const TXN_OPS_MAX: usize = 128;
/// How many times a compare-and-swap that lost to an unrelated change is re-read and
/// re-tried before reporting a conflict.
pub const CAS_ATTEMPTS: usize = 16;

/// [`MetadataStore`] on any [`Kv`] (see the module docs).
pub struct KvStore<K> {
    kv: Arc<K>,
    root: Root,
    clock: Arc<dyn Clock>,
    rng: Arc<dyn Rng>,
    /// The catalog in memory, shared by every clone of this handle.
    index: Arc<catalog_index::CatalogIndex>,
}

impl<K> Clone for KvStore<K> {
    fn clone(&self) -> Self {
        KvStore {
            kv: self.kv.clone(),
            root: self.root.clone(),
            clock: self.clock.clone(),
            rng: self.rng.clone(),
            index: self.index.clone(),
        }
    }
}

fn first(resp: &RangeResponse) -> Option<&KeyValue> {
    resp.kvs.first()
}

impl<K: Kv> KvStore<K> {
    /// The rules over `kv`, every key under `root`, with the production clock and rng.
    pub fn new(kv: K, root: Root) -> Self {
        KvStore {
            kv: Arc::new(kv),
            root,
            clock: Arc::new(SystemClock),
            rng: Arc::new(OsRng),
            index: Arc::default(),
        }
    }

    /// Another store over the same key-value store with its own in-memory catalogue, fed
    /// by watches like any other process's (what a second broker has): its view of other
    /// stores' commits lags until their events arrive or it syncs.
    pub fn with_own_catalogue(&self) -> Self {
        KvStore {
            kv: self.kv.clone(),
            root: self.root.clone(),
            clock: self.clock.clone(),
            rng: self.rng.clone(),
            index: Arc::default(),
        }
    }

    /// The same store reading "now" (topic creation times) from `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The same store drawing topic ids from `rng`.
    pub fn with_rng(mut self, rng: Arc<dyn Rng>) -> Self {
        self.rng = rng;
        self
    }

    /// The key root of this store's cluster.
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// The key-value store underneath.
    pub fn kv(&self) -> &K {
        &self.kv
    }

    async fn get(&self, key: String) -> Result<RangeResponse> {
        self.kv.range(Get::key(key)).await
    }

    /// Runs read-only gets as transactions of at most [`TXN_OPS_MAX`] each, concurrently.
    /// (A transaction's reads are one consistent snapshot; chunks are not, which the catalog
    /// commit does not need: its compare-and-swap re-checks everything it relied on.)
    async fn batch_get(&self, gets: Vec<Get>) -> Result<Vec<RangeResponse>> {
        let chunks = gets.chunks(TXN_OPS_MAX).map(|chunk| {
            let txn = Txn::new().then(chunk.iter().cloned().map(Op::Get));
            let n = chunk.len();
            async move {
                let resp = self.kv.txn(txn).await?;
                (0..n)
                    .map(|i| resp.get(i).cloned())
                    .collect::<Result<Vec<_>>>()
            }
        });
        let mut out = Vec::with_capacity(gets.len());
        for r in futures::future::join_all(chunks).await {
            out.extend(r?);
        }
        Ok(out)
    }

    /// A topic by name, with partition states read while its record was unchanged; also the
    /// record's key state (for compare-and-swap).
    async fn read_topic(&self, name: &str) -> Result<Option<(TopicMetadata, KeyValue)>> {
        let key = keys::topic::ser_key(&self.root, name);
        for _ in 0..CAS_ATTEMPTS {
            let resp = self.get(key.clone()).await?;
            let Some(kv) = first(&resp).cloned() else {
                return Ok(None);
            };
            let record = keys::topic::deser_value(&kv.key, &kv.value)?;
            let prefix = keys::partition::topic_prefix(&self.root, record.topic_id);
            let parts = self
                .kv
                .txn(
                    Txn::new()
                        .when([Compare::unchanged(key.clone(), Some(&kv))])
                        .then([Op::Get(Get::prefix(prefix))]),
                )
                .await?;
            if parts.succeeded {
                let topic = topics::assemble(&self.root, record, &parts.get(0)?.kvs)?;
                return Ok(Some((topic, kv)));
            }
        }
        Err(Error::Conflict(format!("topic '{name}' kept changing")))
    }

    /// A topic's record by name (no partition states).
    async fn topic_record(&self, name: &str) -> Result<Option<TopicRecord>> {
        let resp = self.get(keys::topic::ser_key(&self.root, name)).await?;
        first(&resp)
            .map(|kv| keys::topic::deser_value(&kv.key, &kv.value))
            .transpose()
    }

    async fn name_of(&self, topic_id: TopicId) -> Result<Option<(String, KeyValue)>> {
        let resp = self
            .get(keys::topic_id::ser_key(&self.root, topic_id))
            .await?;
        match first(&resp) {
            Some(kv) => Ok(Some((
                keys::topic_id::deser_value(&kv.key, &kv.value)?,
                kv.clone(),
            ))),
            None => Ok(None),
        }
    }

    /// Compare-and-swap of one versioned record at `key`: `decide` sees the stored value
    /// (decoded) and returns the ops to run if it is still stored, or the answer.
    async fn versioned<T, R>(
        &self,
        key: &str,
        what: &str,
        decode: impl Fn(&KeyValue) -> Result<T>,
        mut decide: impl FnMut(Option<T>) -> Result<(Vec<Op>, R)>,
    ) -> Result<R> {
        for _ in 0..CAS_ATTEMPTS {
            let resp = self.get(key.to_string()).await?;
            let kv = first(&resp);
            let current = kv.map(&decode).transpose()?;
            let (ops, answer) = decide(current)?;
            let txn = Txn::new().when([Compare::unchanged(key, kv)]).then(ops);
            if self.kv.txn(txn).await?.succeeded {
                return Ok(answer);
            }
        }
        Err(Error::Conflict(what.to_string()))
    }
}

#[async_trait::async_trait]
impl<K: Kv> MetadataStore for KvStore<K> {
    async fn register_broker(&self, broker: BrokerRegistration, ttl: Duration) -> Result<Lease> {
        if ttl < LEASE_TTL_MIN {
            return Err(Error::InvalidRequest(format!(
                "lease TTL {ttl:?} is shorter than the minimum {LEASE_TTL_MIN:?}"
            )));
        }
        let lease = self.kv.grant(ttl).await?;
        let key = keys::broker::ser_key(&self.root, broker.broker_id);
        let resp = self
            .kv
            .txn(Txn::new().then([
                Op::Get(Get::key(key.clone()).keys_only()),
                Op::put_with_lease(key, keys::broker::ser_value(&broker)?, lease.id),
            ]))
            .await?;
        // A re-registration under a new lease ends the old one, so nothing (the controller
        // post) stays bound to a lease no one keeps alive.
        if let Some(old) = first(resp.get(0)?).map(|kv| kv.lease) {
            if old != 0 && old != lease.id {
                if let Err(e) = self.kv.revoke(old).await {
                    tracing::warn!(error = %e, lease = old, "ending a replaced broker lease failed; it expires by itself");
                }
            }
        }
        Ok(lease)
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration> {
        self.kv.keep_alive(lease).await
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        self.kv.revoke(lease).await
    }

    async fn list_brokers(&self) -> Result<Vec<BrokerRegistration>> {
        let resp = self
            .kv
            .range(Get::prefix(keys::broker::prefix(&self.root)))
            .await?;
        resp.kvs
            .iter()
            .map(|kv| keys::broker::deser_value(&kv.key, &kv.value))
            .collect()
    }

    async fn watch_brokers(&self) -> Result<Watch<BrokerEvent>> {
        self.subscribe_brokers().await
    }

    async fn create_topic_with_leaders(
        &self,
        spec: TopicSpec,
        leaders: &[BrokerId],
    ) -> Result<TopicMetadata> {
        self.create_topic_with_leaders_rules(spec, leaders).await
    }

    async fn delete_topic(&self, name: &str) -> Result<TopicMetadata> {
        self.delete_topic_rules(name).await
    }

    async fn list_topics(&self) -> Result<Vec<TopicMetadata>> {
        self.list_topics_rules().await
    }

    async fn topic(&self, name: &str) -> Result<Option<TopicMetadata>> {
        Ok(self.read_topic(name).await?.map(|(t, _)| t))
    }

    async fn topic_by_id(&self, topic_id: TopicId) -> Result<Option<TopicMetadata>> {
        let Some((name, _)) = self.name_of(topic_id).await? else {
            return Ok(None);
        };
        Ok(self
            .read_topic(&name)
            .await?
            .map(|(t, _)| t)
            .filter(|t| t.topic_id == topic_id))
    }

    async fn partition_state(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
    ) -> Result<Option<(TopicMetadata, PartitionState)>> {
        self.partition_state_rules(topic_id, partition).await
    }

    async fn create_partitions_with_leaders(
        &self,
        name: &str,
        total: i32,
        leaders: &[BrokerId],
    ) -> Result<TopicMetadata> {
        self.create_partitions_with_leaders_rules(name, total, leaders)
            .await
    }

    async fn update_partition(
        &self,
        topic_id: TopicId,
        expected_version: u64,
        new: PartitionState,
    ) -> Result<PartitionState> {
        self.update_partition_rules(topic_id, expected_version, new)
            .await
    }

    async fn watch_topics(&self) -> Result<Watch<TopicEvent>> {
        self.subscribe_topics().await
    }

    async fn alter_topic_configs(
        &self,
        name: &str,
        alteration: ConfigAlteration,
    ) -> Result<TopicMetadata> {
        self.alter_topic_configs_rules(name, alteration).await
    }

    async fn allocate_producer_ids(&self, count: u32) -> Result<i64> {
        let key = keys::counter::ser_key(&self.root, keys::counter::PRODUCER_ID);
        let first = self
            .versioned(
                &key,
                "producer id counter",
                |kv| keys::counter::deser_value(&kv.key, &kv.value),
                |next| {
                    let next = next.unwrap_or(0);
                    let after = next
                        .checked_add(u64::from(count))
                        .ok_or_else(|| Error::Storage("producer ids exhausted".into()))?;
                    Ok((
                        vec![Op::put(key.clone(), keys::counter::ser_value(after)?)],
                        next,
                    ))
                },
            )
            .await?;
        i64::try_from(first).map_err(|_| Error::Storage("producer ids exhausted".into()))
    }

    async fn commit_catalog(&self, commit: CatalogCommit) -> Result<()> {
        for _ in 0..CAS_ATTEMPTS {
            if self.try_commit_catalog(&commit).await? {
                return Ok(());
            }
        }
        Err(Error::Conflict(
            "catalog commit kept losing to concurrent changes".into(),
        ))
    }

    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.kv.register_metrics(registry);
    }

    fn catalog_watch_lag(&self) -> Option<(usize, u64)> {
        self.index
            .started
            .initialized()
            .then(|| self.index.watch_lag())
    }

    fn catalog_footprint(&self) -> Option<crate::catalog::CatalogFootprint> {
        self.index
            .started
            .initialized()
            .then(|| self.index.lock().footprint())
    }

    async fn sealed_object_catalogued(
        &self,
        broker_id: BrokerId,
        object_key: &str,
    ) -> Result<bool> {
        let key = keys::object_index::ser_key(&self.root, broker_id, object_key);
        let resp = self.kv.range(Get::key(key).keys_only()).await?;
        Ok(!resp.kvs.is_empty())
    }

    async fn unreferenced_objects(&self, candidates: Vec<String>) -> Result<Vec<String>> {
        self.unreferenced(candidates).await
    }

    fn retired_objects(&self, mark: u64) -> (Vec<String>, u64) {
        if !self.index.started.initialized() {
            return (Vec::new(), 0);
        }
        self.index.lock().take_retired(mark)
    }

    async fn sync_catalog(&self, topic_id: TopicId, partition: PartitionId) -> Result<()> {
        self.sync_partition(crate::types::TopicPartition::new(topic_id, partition))
            .await
    }

    async fn catalog_entries(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
        from_offset: Offset,
        limit: usize,
    ) -> Result<Vec<CatalogEntry>> {
        self.read_catalog(topic_id, partition, from_offset, limit)
            .await
    }

    async fn catalog_last(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
    ) -> Result<Option<CatalogEntry>> {
        self.last_entry(topic_id, partition).await
    }

    async fn catalog_find_timestamp(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
        timestamp_ms: i64,
    ) -> Result<Option<CatalogEntry>> {
        self.find_timestamp(topic_id, partition, timestamp_ms).await
    }

    async fn replace_catalog_entries(&self, replace: CatalogReplace) -> Result<()> {
        // Validation caps the new entries at REPLACE_NEW_ENTRIES_MAX: each is one put plus
        // one range delete (see `try_replace_catalog`), within TXN_OPS_MAX.
        self.replace_catalog_alone(&replace).await
    }

    async fn replace_catalog_entries_many(&self, replaces: Vec<CatalogReplace>) -> Vec<Result<()>> {
        self.replace_catalog_many(&replaces).await
    }

    async fn commit_offsets(&self, group_id: &str, offsets: Vec<CommittedOffset>) -> Result<()> {
        self.store_offsets(group_id, offsets).await
    }

    async fn fetch_offsets(&self, group_id: &str) -> Result<Vec<CommittedOffset>> {
        self.read_offsets(group_id).await
    }

    async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: Option<Vec<(String, PartitionId)>>,
    ) -> Result<()> {
        self.remove_offsets(group_id, partitions).await
    }

    async fn group(&self, group_id: &str) -> Result<Option<GroupRecord>> {
        self.read_group(group_id).await
    }

    async fn put_group(
        &self,
        group_id: &str,
        expected_version: Option<u64>,
        data: Bytes,
    ) -> Result<GroupRecord> {
        self.write_group(group_id, expected_version, data).await
    }

    async fn delete_group(&self, group_id: &str, expected_version: u64) -> Result<()> {
        self.remove_group(group_id, expected_version).await
    }

    async fn list_groups(&self) -> Result<Vec<String>> {
        self.group_names().await
    }

    async fn put_txn_offsets(
        &self,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        offsets: Vec<CommittedOffset>,
    ) -> Result<PendingTxnOffsets> {
        self.merge_txn_offsets(group_id, producer_id, producer_epoch, offsets)
            .await
    }

    async fn txn_offsets(&self, group_id: &str) -> Result<Vec<PendingTxnOffsets>> {
        self.pending_txn_offsets(keys::txn_offsets::group_prefix(&self.root, group_id))
            .await
    }

    async fn all_txn_offsets(&self) -> Result<Vec<PendingTxnOffsets>> {
        self.pending_txn_offsets(keys::txn_offsets::prefix(&self.root))
            .await
    }

    async fn txn_offsets_groups(&self, producer_id: i64) -> Result<Vec<String>> {
        self.txn_offsets_groups_of(producer_id).await
    }

    async fn complete_txn_offsets(
        &self,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<Option<PendingTxnOffsets>> {
        self.finish_txn_offsets(group_id, producer_id, producer_epoch, commit)
            .await
    }

    async fn transaction(&self, transactional_id: &str) -> Result<Option<TxnRecord>> {
        self.read_transaction(transactional_id).await
    }

    async fn put_transaction(
        &self,
        transactional_id: &str,
        expected_version: Option<u64>,
        data: Bytes,
    ) -> Result<TxnRecord> {
        self.write_transaction(transactional_id, expected_version, data)
            .await
    }

    async fn delete_transaction(
        &self,
        transactional_id: &str,
        expected_version: u64,
    ) -> Result<()> {
        self.remove_transaction(transactional_id, expected_version)
            .await
    }

    async fn list_transactions(&self) -> Result<Vec<String>> {
        self.transactional_ids().await
    }

    async fn wal_replica_set(&self, broker: BrokerId) -> Result<Option<WalReplicaSet>> {
        let resp = self
            .get(keys::wal_replicas::ser_key(&self.root, broker))
            .await?;
        first(&resp)
            .map(|kv| keys::wal_replicas::deser_value(&kv.key, &kv.value))
            .transpose()
    }

    async fn put_wal_replica_set(
        &self,
        set: WalReplicaSet,
        expected_version: Option<u64>,
    ) -> Result<WalReplicaSet> {
        set.validate()?;
        let broker = set.broker_id;
        let key = keys::wal_replicas::ser_key(&self.root, broker);
        self.versioned(
            &key,
            &format!("WAL replica set of broker {broker}"),
            |kv| keys::wal_replicas::deser_value(&kv.key, &kv.value),
            |current| {
                let current = current.map(|s| s.version);
                if current != expected_version {
                    return Err(Error::Conflict(format!(
                        "WAL replica set of broker {broker} (version {current:?}, expected {expected_version:?})"
                    )));
                }
                let stored = WalReplicaSet {
                    version: expected_version.unwrap_or(0) + 1,
                    ..set.clone()
                };
                Ok((
                    vec![Op::put(key.clone(), keys::wal_replicas::ser_value(&stored)?)],
                    stored,
                ))
            },
        )
        .await
    }

    async fn delete_wal_replica_set(&self, broker: BrokerId, expected_version: u64) -> Result<()> {
        let key = keys::wal_replicas::ser_key(&self.root, broker);
        self.versioned(
            &key,
            &format!("WAL replica set of broker {broker}"),
            |kv| keys::wal_replicas::deser_value(&kv.key, &kv.value),
            |current| match current {
                None => Err(Error::UnknownWalReplicaSet(broker)),
                Some(s) if s.version != expected_version => Err(Error::Conflict(format!(
                    "WAL replica set of broker {broker} (version {}, expected {expected_version})",
                    s.version
                ))),
                Some(_) => Ok((vec![Op::delete(KeyRange::key(key.clone()))], ())),
            },
        )
        .await
    }

    async fn campaign(&self, candidate: BrokerId, lease: LeaseId) -> Result<BrokerId> {
        let key = keys::controller::ser_key(&self.root);
        let txn = Txn::new()
            .when([Compare::absent(key.clone())])
            .then([Op::put_with_lease(
                key.clone(),
                keys::controller::ser_value(candidate)?,
                lease,
            )])
            .otherwise([Op::Get(Get::key(key))]);
        let resp = self.kv.txn(txn).await?;
        if resp.succeeded {
            return Ok(candidate);
        }
        match first(resp.get(0)?) {
            Some(kv) => keys::controller::deser_value(&kv.key, &kv.value),
            // The holder vanished between compare and get: let the caller campaign again.
            None => Err(Error::Conflict(
                "controller post changed during the campaign".into(),
            )),
        }
    }

    async fn resign(&self, candidate: BrokerId) -> Result<()> {
        let key = keys::controller::ser_key(&self.root);
        let txn = Txn::new()
            .when([Compare::value(
                key.clone(),
                keys::controller::ser_value(candidate)?,
            )])
            .then([Op::delete(KeyRange::key(key))]);
        self.kv.txn(txn).await?;
        Ok(())
    }

    async fn controller(&self) -> Result<Option<BrokerId>> {
        Ok(self.read_controller().await?.0)
    }

    async fn watch_controller(&self) -> Result<Watch<Option<BrokerId>>> {
        self.subscribe_controller().await
    }

    async fn metadata_revision(&self) -> Result<Option<i64>> {
        // A read of one small key: its header carries the store's revision.
        let get = Get::key(keys::controller::ser_key(&self.root)).keys_only();
        Ok(Some(self.kv.range(get).await?.revision))
    }

    async fn compact_history(&self, revision: i64) -> Result<()> {
        self.kv.compact(revision).await
    }

    async fn security_records(
        &self,
        kind: crate::SecurityKind,
    ) -> Result<Vec<crate::SecurityRecord>> {
        self.list_security(kind).await
    }

    async fn put_security_record(
        &self,
        kind: crate::SecurityKind,
        name: &str,
        value: Vec<u8>,
        expected_version: Option<i64>,
    ) -> Result<i64> {
        self.put_security(kind, name, value, expected_version).await
    }

    async fn delete_security_record(
        &self,
        kind: crate::SecurityKind,
        name: &str,
        expected_version: Option<i64>,
    ) -> Result<()> {
        self.delete_security(kind, name, expected_version).await
    }

    async fn mirror_records(&self, kind: crate::MirrorKind) -> Result<Vec<crate::MirrorRecord>> {
        self.list_mirror(kind).await
    }

    async fn put_mirror_record(
        &self,
        kind: crate::MirrorKind,
        name: &str,
        value: Vec<u8>,
        expected_version: Option<i64>,
    ) -> Result<i64> {
        self.put_mirror(kind, name, value, expected_version).await
    }

    async fn delete_mirror_record(
        &self,
        kind: crate::MirrorKind,
        name: &str,
        expected_version: Option<i64>,
    ) -> Result<()> {
        self.delete_mirror(kind, name, expected_version).await
    }

    async fn watch_mirror(&self) -> Result<Watch<crate::MirrorEvent>> {
        self.subscribe_mirror().await
    }

    async fn watch_security(&self) -> Result<Watch<crate::SecurityEvent>> {
        self.subscribe_security().await
    }

    async fn metadata_footprint(&self) -> Result<Option<crate::store::MetadataFootprint>> {
        let (status, keys) = futures::future::try_join(
            self.kv.status(),
            self.kv.count(KeyRange::prefix(self.root.as_str())),
        )
        .await?;
        Ok(Some(crate::store::MetadataFootprint {
            revision: status.revision,
            compacted_revision: status.compacted_revision,
            db_bytes: status.db_bytes,
            db_bytes_in_use: status.db_bytes_in_use,
            keys,
        }))
    }
}

impl<K: Kv> KvStore<K> {
    /// The controller and the revision it was read at.
    async fn read_controller(&self) -> Result<(Option<BrokerId>, crate::kv::Revision)> {
        let resp = self.get(keys::controller::ser_key(&self.root)).await?;
        let holder = first(&resp)
            .map(|kv| keys::controller::deser_value(&kv.key, &kv.value))
            .transpose()?;
        Ok((holder, resp.revision))
    }
}
