//! The metadata service: the one place where everything the cluster must agree on lives.
//!
//! Brokers are stateless; broker registrations (under leases), topics, partition leadership
//! and leader epochs, the segment catalog (which offsets of which partition live at which
//! byte range of which object), consumer group offsets and coordinator records, producer ids
//! and the controller post are kept behind the [`MetadataStore`] trait.
//!
//! # Layout
//! - [`blocking`]: blocking work from async code (inline where the simulation runs).
//! - [`clock`]: the [`Clock`] and [`Rng`] seams (production and simulated).
//! - [`types`]: the shared vocabulary (`TopicId`, `PartitionId`, `Offset`, `LeaderEpoch`, ...).
//! - [`topic`]: topic specs, configs and their validation.
//! - [`topic_configs`]: every Kafka topic config (type, default, validator, what Oxbow does
//!   with it) and the semantics of altering a topic's configs.
//! - [`leader_epochs`]: a partition's leader-epoch history (OffsetForLeaderEpoch's answers).
//! - [`catalog`]: segment catalog entries, the commit of sealed objects and compaction's swap.
//! - [`catalog_txn`]: the aborted-transaction index catalog entries carry, and its walk.
//! - [`catalog_view`]: how stored entries and epoch histories resolve into what readers see.
//! - [`group`]: consumer group offsets and versioned coordinator records.
//! - [`wal_replicas`]: each broker's WAL replica set (replicas, in-sync replicas).
//! - [`security`]: ACL, SCRAM-credential and client-quota records (opaque, versioned, watched).
//! - [`store`]: the [`MetadataStore`] trait every backend implements.
//! - [`kv`]: the key-value seam (etcd's model: range, txn, watch, leases) and its two
//!   implementations, [`kv::EtcdKv`] and [`kv::RedbKv`].
//! - [`kv_store`]: [`KvStore`], every rule of the trait written once over a [`kv::Kv`].
//! - [`keys`]: the key schema, one module per key kind; [`codec`]: the versioned JSON
//!   values.
//! - [`embedded`]: [`EmbeddedStore`] = `KvStore<RedbKv>`, the single-node default (a
//!   durable local file), and the migration of files in its first layout.
//! - [`etcd`]: [`EtcdStore`] = `KvStore<EtcdKv>` and its [`EtcdSettings`].
//! - [`watch`]: the [`Watch`] event streams (bounded mpsc; why, in its docs).
//! - [`lease`]: [`LeaseGuard`] (is this broker's lease certainly alive?) and the keeper task.
//! - [`connect`]: `--metadata embedded | etcd://…` → a store.
//! - [`testing`]: real etcd processes on loopback for tests of every crate.
//! - [`error`]: the crate's error type and the [`ErrorKind`] callers branch on.
//!
//! Why one generic store over a small seam rather than one implementation per backend: a
//! domain rule (fencing, compare-and-swap, catalog contiguity and replace) written twice
//! can be fixed or extended on one backend only; written once over etcd's model, the
//! single node runs the very transactions a cluster runs, on the same keys. One
//! conformance suite pins the trait on every backend (`tests/conformance.rs`), another
//! the seam on every key-value store (`tests/kv_conformance.rs`).
//!
//! The trait is object-safe (`Arc<dyn MetadataStore>`) because the backend is chosen at run
//! time from `--metadata`, and the per-call cost of dynamic dispatch is nothing next to a
//! durable write or an etcd round trip. Watches are returned as [`Watch`] values (a bounded
//! `tokio::sync::mpsc` receiver) rather than generic streams for the same reason.

// Tests may wait on the real clock; production code of this crate may not (clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod blocking;
pub mod catalog;
pub mod catalog_txn;
pub mod catalog_view;
pub mod clock;
pub mod codec;
pub mod connect;
pub mod embedded;
pub mod error;
pub mod etcd;
pub mod group;
pub mod keys;
pub mod kv;
pub mod kv_store;
pub mod leader_epochs;
pub mod lease;
pub mod mirror;
pub mod security;
pub mod store;
pub mod testing;
pub mod topic;
pub mod topic_configs;
pub mod txn;
pub mod types;
pub mod wal_replicas;
pub mod watch;

pub use catalog::{
    CatalogCommit, CatalogEntry, CatalogFootprint, CatalogReplace, EntryLayout, EpochFence,
    WriterFence, OBJECT_INDEX_BYTES_MAX, OBJECT_PARTITIONS_MAX, REPLACE_NEW_ENTRIES_MAX,
};
pub use catalog_txn::{AbortWalk, AbortedTxn, TxnIndex, WalkStep};
pub use clock::{Clock, OsRng, Rng, SeededRng, SimClock, SystemClock};
pub use connect::{open_store, MetadataLocation};
pub use embedded::EmbeddedStore;
pub use error::{Error, ErrorKind, Result};
pub use etcd::{EtcdSettings, EtcdStore};
pub use group::{CommittedOffset, GroupRecord, PendingTxnOffsets};
pub use kv_store::KvStore;
pub use leader_epochs::{EpochStart, LeaderEpochHistory, LEADER_EPOCHS_MAX};
pub use lease::{run_lease_keeper, LeaseGuard};
pub use mirror::{
    Link, LinkSecurity, LinkState, MirrorEvent, MirrorKind, MirrorRecord, MirrorState, MirrorTopic,
    MIRROR_RECORD_BYTES_MAX,
};
pub use security::{SecurityEvent, SecurityKind, SecurityRecord, SECURITY_RECORD_BYTES_MAX};
pub use store::{
    BrokerRegistration, Lease, LeaseId, MetadataFootprint, MetadataStore, LEASE_TTL_MIN,
};
pub use topic::{PartitionState, TopicConfigs, TopicMetadata, TopicSpec};
pub use topic_configs::{AlterOp, ConfigAlteration, ConfigChange};
pub use txn::TxnRecord;
pub use types::{BrokerId, LeaderEpoch, Offset, PartitionId, TopicId, TopicPartition};
pub use wal_replicas::WalReplicaSet;
pub use watch::{BrokerEvent, TopicEvent, Watch, WatchQueue};
