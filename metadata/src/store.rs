//! The [`MetadataStore`] trait: the seam between brokers and whatever holds cluster state
//! (the embedded `redb` file on one node; etcd in a cluster).

use crate::catalog::{CatalogCommit, CatalogEntry, CatalogFootprint, CatalogReplace};
use crate::error::Result;
use crate::group::{CommittedOffset, GroupRecord, PendingTxnOffsets};
use crate::security::{SecurityEvent, SecurityKind, SecurityRecord};
use crate::topic::{PartitionState, TopicMetadata, TopicSpec};
use crate::topic_configs::ConfigAlteration;
use crate::txn::TxnRecord;
use crate::types::{BrokerId, Offset, PartitionId, TopicId};
use crate::wal_replicas::WalReplicaSet;
use crate::watch::{BrokerEvent, TopicEvent, Watch};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::time::Duration;

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
    /// `host:port` other brokers use (WAL replication); empty until that exists.
    #[serde(default)]
    pub internal_addr: String,
    /// Every Kafka listener's advertised `host:port` by listener name (Kafka's
    /// `advertised.listeners`): a client is told the addresses on the listener it asked
    /// through. Empty in registrations written before listeners existed: then `kafka_addr`
    /// serves every listener.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub listeners: std::collections::BTreeMap<String, String>,
}

impl BrokerRegistration {
    /// The advertised `host:port` on `listener`, if the broker has that listener (Kafka
    /// leaves a broker without it out of the answer).
    pub fn endpoint(&self, listener: &str) -> Option<&str> {
        if self.listeners.is_empty() {
            return Some(&self.kafka_addr);
        }
        self.listeners.get(listener).map(String::as_str)
    }
}

/// The id of a lease (etcd's lease id; in the embedded backend a counter kept in the file,
/// so an id is never handed out twice).
pub type LeaseId = i64;

/// A lease granted by the metadata service: alive while kept alive within `ttl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    pub id: LeaseId,
    pub ttl: Duration,
}

/// Shortest lease TTL accepted: etcd refuses shorter ones (its minimum is about 1.5 × its
/// election timeout), and the embedded backend keeps the same rule so tests mean the same.
pub const LEASE_TTL_MIN: Duration = Duration::from_secs(2);

/// Everything the cluster must agree on, behind one object-safe async trait.
///
/// Semantics every backend honours (checked by `tests/conformance.rs`):
/// - writes are durable when the call returns;
/// - partition state changes only by compare-and-swap on [`PartitionState::version`]; group
///   records only by compare-and-swap on [`GroupRecord::version`];
/// - a catalog commit is all-or-nothing, idempotent under retry, and fails with
///   [`crate::Error::Fenced`] if any fence's epoch is not the partition's current one;
/// - keys bound to a lease (broker registrations, the controller) disappear when the lease
///   expires; a lease granted by an earlier process of the embedded backend is expired;
/// - watches follow the contract in [`crate::watch`].
#[async_trait::async_trait]
pub trait MetadataStore: Send + Sync + 'static {
    // ---- brokers and leases ----

    /// Grants a lease of `ttl` and records the broker's addresses under it (replacing an
    /// older registration with the same id). The registration disappears when the lease
    /// expires; keep it with [`MetadataStore::keep_alive`].
    async fn register_broker(&self, broker: BrokerRegistration, ttl: Duration) -> Result<Lease>;
    /// Renews a lease; returns its TTL. A lease that already expired gives
    /// [`crate::Error::LeaseExpired`] (kind `Fenced`): register again.
    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration>;
    /// Ends a lease now (clean shutdown), removing what is bound to it.
    async fn revoke_lease(&self, lease: LeaseId) -> Result<()>;
    /// The brokers whose leases are alive, by id.
    async fn list_brokers(&self) -> Result<Vec<BrokerRegistration>>;
    /// Joins and departures from now on.
    async fn watch_brokers(&self) -> Result<Watch<BrokerEvent>>;

    // ---- topics and partitions ----

    /// Creates a topic whose partitions are all led by `leader` at epoch 0.
    async fn create_topic(&self, spec: TopicSpec, leader: BrokerId) -> Result<TopicMetadata> {
        self.create_topic_with_leaders(spec, &[leader]).await
    }
    /// Creates a topic at epoch 0 whose partition `p` is led by
    /// [`crate::topic::placed_leader`]`(leaders, p)` (the cluster's placement); an empty
    /// `leaders` is [`crate::ErrorKind::Invalid`].
    async fn create_topic_with_leaders(
        &self,
        spec: TopicSpec,
        leaders: &[BrokerId],
    ) -> Result<TopicMetadata>;
    /// Deletes a topic and its catalog entries; returns what was deleted.
    async fn delete_topic(&self, name: &str) -> Result<TopicMetadata>;
    async fn list_topics(&self) -> Result<Vec<TopicMetadata>>;
    async fn topic(&self, name: &str) -> Result<Option<TopicMetadata>>;
    async fn topic_by_id(&self, topic_id: TopicId) -> Result<Option<TopicMetadata>>;
    /// Grows a topic to `total` partitions (never shrinks), new ones led by `leader`.
    /// One partition's state as stored now, with its topic (whose other partitions are
    /// as created: their states are not read, so the cost does not grow with the topic).
    /// `None` if the topic or partition does not exist.
    async fn partition_state(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
    ) -> Result<Option<(TopicMetadata, PartitionState)>>;

    async fn create_partitions(
        &self,
        name: &str,
        total: i32,
        leader: BrokerId,
    ) -> Result<TopicMetadata> {
        self.create_partitions_with_leaders(name, total, &[leader])
            .await
    }
    /// Grows a topic to `total` partitions (never shrinks); new partition `p` is led by
    /// [`crate::topic::placed_leader`]`(leaders, p)` (existing ones keep theirs).
    async fn create_partitions_with_leaders(
        &self,
        name: &str,
        total: i32,
        leaders: &[BrokerId],
    ) -> Result<TopicMetadata>;
    /// Compare-and-swap of one partition's state: succeeds only if the stored version equals
    /// `expected_version`; the stored version becomes `expected_version + 1`. The log start
    /// offset never decreases (a lower one is stored as the current one); catalog lookups
    /// serve nothing wholly below it, and its keys are deleted in the background.
    async fn update_partition(
        &self,
        topic_id: TopicId,
        expected_version: u64,
        new: PartitionState,
    ) -> Result<PartitionState>;
    /// Topic creations, deletions and partition state changes from now on.
    async fn watch_topics(&self) -> Result<Watch<TopicEvent>>;
    /// Changes a topic's config overrides (IncrementalAlterConfigs, AlterConfigs) by
    /// compare-and-swap on its record, re-read and re-applied if the record changed
    /// meanwhile (a concurrent alteration or CreatePartitions), so no change is lost. The
    /// result is validated as a whole ([`ConfigAlteration::apply`]): [`crate::ErrorKind::Invalid`]
    /// and nothing stored if it breaks a rule; [`crate::Error::UnknownTopic`] if there is no
    /// such topic. Returns the topic with its new configs; every watcher of topics sees a
    /// [`TopicEvent::Changed`] (none if nothing changed). The default refuses (a store
    /// wrapper that does not pass it on).
    async fn alter_topic_configs(
        &self,
        name: &str,
        alteration: ConfigAlteration,
    ) -> Result<TopicMetadata> {
        let _ = alteration;
        Err(crate::Error::InvalidRequest(format!(
            "this metadata store cannot alter the configs of topic '{name}'"
        )))
    }

    // ---- producer ids ----

    /// Reserves `count` producer ids for idempotent producers; returns the first. Ids are
    /// never handed out twice, across restarts and brokers.
    async fn allocate_producer_ids(&self, count: u32) -> Result<i64>;

    // ---- segment catalog ----

    /// Catalogues sealed objects atomically (one key per object, fenced by the writer's
    /// lease; see [`CatalogCommit`]). Fails with [`crate::ErrorKind::Fenced`] if the writer's
    /// lease is gone or a partition's epoch is known to have moved past the writer's,
    /// [`crate::ErrorKind::Conflict`] if an entry does not continue its partition's
    /// catalogue. Idempotent: a retry whose first attempt landed succeeds.
    async fn commit_catalog(&self, commit: CatalogCommit) -> Result<()>;
    /// What the in-memory catalogue holds now, if this store keeps one (cheap: counts, no
    /// walk over entries).
    fn catalog_footprint(&self) -> Option<CatalogFootprint> {
        None
    }
    /// How far behind the in-memory catalogue's watches are, if this store keeps one: (changes
    /// delivered but not applied yet, watches that ended and were replaced by a re-scan).
    /// A change here is one delivery of the metadata service (one revision's keys, or a
    /// few revisions' when it batches them).
    fn catalog_watch_lag(&self) -> Option<(usize, u64)> {
        None
    }
    /// Adds the backend's own metrics (etcd request latency) to `registry`; none by default.
    fn register_metrics(&self, _registry: &mut prometheus_client::registry::Registry) {}
    /// Whether the catalog key of a sealed object (`broker_id`'s `object_key`) is stored,
    /// read from the store itself (not an in-memory copy). A seal whose commit failed may
    /// have landed all the same (an unknown outcome): its object is deleted only once this
    /// says no. The default answers yes (keep the object).
    async fn sealed_object_catalogued(
        &self,
        broker_id: BrokerId,
        object_key: &str,
    ) -> Result<bool> {
        let _ = (broker_id, object_key);
        Ok(true)
    }
    /// The object keys among `candidates` that no catalog key names (neither a sealed
    /// object's catalog key nor any per-partition entry), checked against the in-memory
    /// catalogue and, for what it does not know, the store itself; a name of a shape Oxbow
    /// does not write is never returned. For the sweep that deletes leaked objects (only
    /// objects older than its grace period are candidates). The default returns none.
    async fn unreferenced_objects(&self, candidates: Vec<String>) -> Result<Vec<String>> {
        let _ = candidates;
        Ok(Vec::new())
    }
    /// Sealed objects this store's in-memory catalogue saw retired — their keys deleted
    /// because nothing is served from them any more (superseded by compaction, or every
    /// partition in them deleted with its topic) — before `mark` (what the previous call
    /// returned; 0 the first time), and the mark for the next call. A caller that passes
    /// each mark back after waiting a delay gets each object at least that delay after it
    /// went, so reads that looked it up just before have finished. Bounded: what it forgot
    /// (or what went while its watch was down) is left to the orphan sweep. None without
    /// an in-memory catalogue.
    fn retired_objects(&self, mark: u64) -> (Vec<String>, u64) {
        let _ = mark;
        (Vec::new(), 0)
    }
    /// Makes the lookups of one partition reflect everything committed before this call
    /// (lookups are served from memory, fed by watches, and may otherwise lag other brokers'
    /// commits by the watch's delivery time). For a broker taking a partition over, before it
    /// reads where the partition's catalogue ends. Costs a read of every live sealed
    /// object's key name: not for every fetch.
    async fn sync_catalog(&self, topic_id: TopicId, partition: PartitionId) -> Result<()>;
    /// Entries of a partition whose ranges end at or after `from_offset`, in offset order,
    /// at most `limit` of them: what readers are served ([`crate::catalog_view`]), each
    /// offset by exactly one entry; an entry may be clipped (offsets narrower than its byte
    /// range holds — skip the batches outside them).
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

    // ---- segment catalog: compaction ----

    /// Replaces a contiguous run of one partition's catalog entries (`replace.old`, exactly
    /// as stored) with entries covering the same offsets (`replace.new`), atomically: readers
    /// see either every old entry or every new one. Fails, changing nothing, with
    /// [`crate::Error::Fenced`] if the partition's leader epoch is not `replace.fence`'s,
    /// [`crate::ErrorKind::Conflict`] if the stored run is not exactly `old` any more
    /// (retention, a concurrent compactor), [`crate::ErrorKind::NotFound`] if the topic is
    /// gone, [`crate::ErrorKind::Invalid`] if `old`/`new` break
    /// [`CatalogReplace::validate`]. Idempotent: if the stored run already is exactly `new`
    /// (a retry whose first attempt landed), it succeeds. At most 64 new entries (etcd's 128
    /// operations per transaction); `old` may be any length.
    async fn replace_catalog_entries(&self, replace: CatalogReplace) -> Result<()>;
    /// [`Self::replace_catalog_entries`] for several runs (of one or many partitions), each
    /// atomic and checked on its own, its outcome at its index: one partition's conflict or
    /// fence fails only its own replace. Backends combine them into few transactions (a
    /// compaction round that rewrites thousands of partitions costs tens of metadata writes,
    /// not thousands); this default runs them one by one.
    async fn replace_catalog_entries_many(&self, replaces: Vec<CatalogReplace>) -> Vec<Result<()>> {
        let mut out = Vec::with_capacity(replaces.len());
        for r in replaces {
            out.push(self.replace_catalog_entries(r).await);
        }
        out
    }

    // ---- consumer groups ----

    /// Stores committed offsets of many partitions of one group atomically (last write wins
    /// per partition, as in Kafka).
    async fn commit_offsets(&self, group_id: &str, offsets: Vec<CommittedOffset>) -> Result<()>;
    /// Every committed offset of a group, sorted by topic and partition.
    async fn fetch_offsets(&self, group_id: &str) -> Result<Vec<CommittedOffset>>;
    /// Deletes the given partitions' offsets of a group (`None`: all of them).
    async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: Option<Vec<(String, PartitionId)>>,
    ) -> Result<()>;
    /// A group's coordinator record, if any.
    async fn group(&self, group_id: &str) -> Result<Option<GroupRecord>>;
    /// Compare-and-swap of a group record: `expected_version` `None` creates it (fails if it
    /// exists), `Some(v)` replaces version `v`. Returns the stored record (version bumped).
    async fn put_group(
        &self,
        group_id: &str,
        expected_version: Option<u64>,
        data: Bytes,
    ) -> Result<GroupRecord>;
    /// Deletes a group's record (compare-and-swap on its version) and its committed offsets.
    async fn delete_group(&self, group_id: &str, expected_version: u64) -> Result<()>;
    /// Ids of every group that has a record or committed offsets.
    async fn list_groups(&self) -> Result<Vec<String>>;

    // ---- transactions' pending offsets (TxnOffsetCommit) ----

    /// Stores offsets a transaction commits for a group, pending until its marker, under
    /// (group, producer id): a record of the same `producer_epoch` gets them merged in (a
    /// partition already there takes the new offset); a record of an older epoch (an
    /// earlier transaction whose marker has not ended it yet) refuses with
    /// [`crate::ErrorKind::Conflict`], to retry once it has; a record of a newer epoch
    /// refuses with [`crate::Error::ProducerFenced`] (a zombie producer). Returns the
    /// record as stored. Over [`crate::group::PENDING_TXN_OFFSETS_BYTES_MAX`] gives
    /// [`crate::ErrorKind::Invalid`]; a negative producer id too.
    async fn put_txn_offsets(
        &self,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        offsets: Vec<CommittedOffset>,
    ) -> Result<PendingTxnOffsets>;
    /// A group's pending records, by producer id.
    async fn txn_offsets(&self, group_id: &str) -> Result<Vec<PendingTxnOffsets>>;
    /// Every pending record of every group (one range read; the records are as many as the
    /// transactions in flight that committed offsets, not a group count), by group then
    /// producer id.
    async fn all_txn_offsets(&self) -> Result<Vec<PendingTxnOffsets>>;
    /// The groups `producer_id` has pending offsets for: what a transaction's marker
    /// completes. A keys-only read of every pending record (no values: a marker for one
    /// transaction does not read every other transaction's offsets).
    async fn txn_offsets_groups(&self, producer_id: i64) -> Result<Vec<String>>;
    /// Ends a transaction's pending offsets for a group. On `commit` they become the group's
    /// committed offsets (as [`Self::commit_offsets`] stores them) and the record is deleted
    /// in one metadata transaction (past 127 partitions: offsets first, record last, each
    /// step guarded, so a failure leaves the record for the retry); on abort the record is
    /// deleted. Returns the record ended; `None` if there is none (a retry whose first
    /// attempt landed: success) or it is of a newer epoch than `producer_epoch` (a late
    /// marker of an earlier transaction, which must not end the next one).
    async fn complete_txn_offsets(
        &self,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<Option<PendingTxnOffsets>>;

    // ---- transactional ids ----

    /// A transactional id's coordinator record, if any.
    async fn transaction(&self, transactional_id: &str) -> Result<Option<TxnRecord>>;
    /// Compare-and-swap of a transactional id's record: `expected_version` `None` creates it
    /// (Conflict if it exists), `Some(v)` replaces version `v` (Conflict otherwise). Returns
    /// the stored record (version bumped).
    async fn put_transaction(
        &self,
        transactional_id: &str,
        expected_version: Option<u64>,
        data: Bytes,
    ) -> Result<TxnRecord>;
    /// Deletes a transactional id's record (compare-and-swap on its version; expiration).
    async fn delete_transaction(&self, transactional_id: &str, expected_version: u64)
        -> Result<()>;
    /// Every transactional id with a record.
    async fn list_transactions(&self) -> Result<Vec<String>>;

    // ---- WAL replica sets ----

    /// The WAL replica set of `broker`, if it ever recorded one.
    async fn wal_replica_set(&self, broker: BrokerId) -> Result<Option<WalReplicaSet>>;
    /// Compare-and-swap of a broker's WAL replica set: `expected_version` `None` creates it
    /// (Conflict if it exists), `Some(v)` replaces version `v` (Conflict otherwise). Returns
    /// the stored set with `version` bumped (created at 1). The `version` of `set` is
    /// ignored. A set breaking [`WalReplicaSet`]'s invariants (`isr ⊆ replicas`,
    /// `broker_id ∉ replicas`, no duplicates) gives [`crate::ErrorKind::Invalid`].
    async fn put_wal_replica_set(
        &self,
        set: WalReplicaSet,
        expected_version: Option<u64>,
    ) -> Result<WalReplicaSet>;
    /// Deletes a broker's WAL replica set (compare-and-swap on version): Conflict if it is
    /// at another version, NotFound if there is none.
    async fn delete_wal_replica_set(&self, broker: BrokerId, expected_version: u64) -> Result<()>;

    // ---- controller election ----

    /// Tries to become the controller, bound to `lease` (so the post is vacated when the
    /// candidate's lease expires). Returns the controller after the attempt: `candidate`
    /// if it won or already held it.
    async fn campaign(&self, candidate: BrokerId, lease: LeaseId) -> Result<BrokerId>;
    /// Gives up the post if `candidate` holds it.
    async fn resign(&self, candidate: BrokerId) -> Result<()>;
    /// The current controller, if any.
    async fn controller(&self) -> Result<Option<BrokerId>>;
    /// The controller now (first event), then every change.
    async fn watch_controller(&self) -> Result<Watch<Option<BrokerId>>>;

    // ---- history and footprint (issue 14) ----

    /// The metadata service's current revision, read linearizably; `None` for a backend
    /// without revisions (the default).
    async fn metadata_revision(&self) -> Result<Option<i64>> {
        Ok(None)
    }
    /// Discards the metadata service's history before `revision` (etcd's compaction, see
    /// [`crate::kv::Kv::compact`]): watches from an earlier revision end and their readers
    /// re-read; nothing current changes. At or below what is compacted already it is
    /// success, so two brokers compacting is harmless. The default has nothing to discard.
    async fn compact_history(&self, revision: i64) -> Result<()> {
        let _ = revision;
        Ok(())
    }
    /// How big the metadata service is: its database, revisions and this cluster's keys.
    /// One status call and one count-only range of the cluster's keys (the count costs the
    /// service a walk of its key index: sample it, do not call it per scrape). `None` for
    /// a backend that keeps no such figures (the default).
    async fn metadata_footprint(&self) -> Result<Option<MetadataFootprint>> {
        Ok(None)
    }

    // ---- security records (ACLs, SCRAM credentials, client quotas) ----

    /// Every record of `kind`, sorted by name.
    async fn security_records(&self, kind: SecurityKind) -> Result<Vec<SecurityRecord>>;
    /// Compare-and-swap of one record: `expected_version` `None` creates it (Conflict if it
    /// exists), `Some(v)` replaces the record at version `v` (Conflict otherwise). Returns
    /// the new version. An empty name or a value over
    /// [`crate::SECURITY_RECORD_BYTES_MAX`] gives [`crate::ErrorKind::Invalid`].
    async fn put_security_record(
        &self,
        kind: SecurityKind,
        name: &str,
        value: Vec<u8>,
        expected_version: Option<i64>,
    ) -> Result<i64>;
    /// Deletes one record: `expected_version` `Some(v)` only at version `v` (Conflict
    /// otherwise), `None` whatever its version. Deleting a record that is not there is
    /// not an error.
    async fn delete_security_record(
        &self,
        kind: SecurityKind,
        name: &str,
        expected_version: Option<i64>,
    ) -> Result<()>;
    /// Every change of every security record from now on (subscribe, then list: see
    /// [`crate::watch`]).
    async fn watch_security(&self) -> Result<Watch<SecurityEvent>>;

    // ---- mirror records (cluster links and mirror topics, issue 20) ----

    /// Every record of `kind`, sorted by name.
    async fn mirror_records(&self, kind: crate::MirrorKind) -> Result<Vec<crate::MirrorRecord>>;
    /// Compare-and-swap of one record, as [`Self::put_security_record`]; a name outside
    /// `[a-zA-Z0-9._-]{1,249}` or a value over [`crate::MIRROR_RECORD_BYTES_MAX`] gives
    /// [`crate::ErrorKind::Invalid`].
    async fn put_mirror_record(
        &self,
        kind: crate::MirrorKind,
        name: &str,
        value: Vec<u8>,
        expected_version: Option<i64>,
    ) -> Result<i64>;
    /// Deletes one record, as [`Self::delete_security_record`].
    async fn delete_mirror_record(
        &self,
        kind: crate::MirrorKind,
        name: &str,
        expected_version: Option<i64>,
    ) -> Result<()>;
    /// Every change of every mirror record from now on (subscribe, then list).
    async fn watch_mirror(&self) -> Result<Watch<crate::MirrorEvent>>;
}

/// The metadata service's size ([`MetadataStore::metadata_footprint`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetadataFootprint {
    /// The current revision.
    pub revision: i64,
    /// History before it is gone (`None`: the backend does not say; etcd does not).
    pub compacted_revision: Option<i64>,
    /// Bytes of the database file (etcd: of the member that answered; its quota applies
    /// to this). 0 in memory.
    pub db_bytes: u64,
    /// Bytes of it holding live data, what a defragmentation would leave (`None`: unknown).
    pub db_bytes_in_use: Option<u64>,
    /// Keys under this cluster's root.
    pub keys: u64,
}
