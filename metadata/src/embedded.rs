//! The embedded single-node backend: [`MetadataStore`](crate::MetadataStore) on a `redb`
//! file, as the shared rules ([`KvStore`]) over [`RedbKv`].
//!
//! Lifecycle: opened by `oxbow serve` at `{data-dir}/metadata.redb`. Keys are etcd's
//! ([`crate::keys`], under the root `/oxbow/default/`), so the two backends hold the same
//! data in the same form. Durability, leases and watches: [`crate::kv::RedbKv`].
//!
//! # Migration from the first layout
//! Files written before the key-value layout (up to this crate's issue 12) hold one table
//! per record kind: `topics` (name → `TopicMetadata`), `topic_ids`, `catalog` (16-byte topic
//! id ‖ partition BE ‖ base offset BE → `CatalogEntry`), `counters` (`next_producer_id` →
//! u64), `group_offsets` (length-prefixed group id ‖ length-prefixed topic ‖ partition BE →
//! `CommittedOffset`), `groups`, `wal_replicas` and `brokers` (always empty at rest). Opening
//! such a file moves every record to its key (values are the same versioned JSON, see
//! [`crate::codec`]) and drops the old tables, in the one write transaction that opens the
//! store: a crash leaves either the old file or the migrated one. A topic's partition
//! states become its record's initial leaders plus a partition key for each state that
//! differs from "epoch 0 under that leader", which is how the key schema stores them.
//! `tests/embedded_migration.rs` checks this against a file the old code wrote.

use crate::clock::{Clock, SystemClock};
use crate::codec;
use crate::connect::DEFAULT_CLUSTER;
use crate::error::{Error, Result};
use crate::group::CommittedOffset;
use crate::keys::{self, topic::TopicRecord, Root};
use crate::kv::RedbKv;
use crate::kv_store::KvStore;
use crate::topic::{PartitionState, TopicMetadata};
use crate::types::{PartitionId, TopicId};
use redb::{ReadableTable, TableDefinition, TableHandle, WriteTransaction};
use std::path::Path;
use std::sync::Arc;

/// [`MetadataStore`](crate::MetadataStore) on one node, durable in a local `redb` file.
pub type EmbeddedStore = KvStore<RedbKv>;

impl KvStore<RedbKv> {
    /// Opens (or creates) the store at `path`, migrating a file in the first layout.
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with_clock(path, Arc::new(SystemClock))
    }

    /// Like [`EmbeddedStore::open`], its leases expiring on `clock`.
    pub fn open_with_clock(path: &Path, clock: Arc<dyn Clock>) -> Result<Self> {
        let root = Root::new(DEFAULT_CLUSTER);
        let upgrade = |txn: &WriteTransaction| migrate_v1(txn, &root);
        let kv = RedbKv::open_with_upgrade(path, clock.clone(), &upgrade)?;
        Ok(KvStore::new(kv, root).with_clock(clock))
    }

    /// A store that lives in memory only, for tests.
    pub fn in_memory() -> Result<Self> {
        Self::in_memory_with_clock(Arc::new(SystemClock))
    }

    /// A store in memory whose leases expire (and whose topics are stamped) on `clock`: on
    /// paused tokio time, on simulated time.
    pub fn in_memory_with_clock(clock: Arc<dyn Clock>) -> Result<Self> {
        let kv = RedbKv::in_memory(clock.clone())?;
        Ok(KvStore::new(kv, Root::new(DEFAULT_CLUSTER)).with_clock(clock))
    }
}

// The first layout's tables, exactly as that code defined them (redb checks the types).
const V1_TOPICS: TableDefinition<&str, &[u8]> = TableDefinition::new("topics");
const V1_TOPIC_IDS: TableDefinition<&[u8], &str> = TableDefinition::new("topic_ids");
const V1_CATALOG: TableDefinition<&[u8], &[u8]> = TableDefinition::new("catalog");
const V1_BROKERS: TableDefinition<i32, &[u8]> = TableDefinition::new("brokers");
const V1_COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
const V1_GROUP_OFFSETS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("group_offsets");
const V1_GROUPS: TableDefinition<&str, &[u8]> = TableDefinition::new("groups");
const V1_WAL_REPLICAS: TableDefinition<i32, &[u8]> = TableDefinition::new("wal_replicas");
const V1_NEXT_PRODUCER_ID: &str = "next_producer_id";

fn storage<E: std::fmt::Display>(e: E) -> Error {
    Error::Storage(format!("migrating the metadata file: {e}"))
}

fn corrupt(table: &str, why: &str) -> Error {
    Error::CorruptValue {
        key: format!("{table} (first layout)"),
        reason: why.to_string(),
    }
}

/// A `catalog` key of the first layout: topic id, partition, base offset.
fn v1_catalog_key(key: &[u8]) -> Result<(TopicId, PartitionId, i64)> {
    let bad = || corrupt("catalog", "key is not 28 bytes of id, partition, offset");
    let id = uuid::Uuid::from_slice(key.get(..16).ok_or_else(bad)?).map_err(|_| bad())?;
    let partition = i32::from_be_bytes(
        key.get(16..20)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(bad)?,
    );
    let offset = i64::from_be_bytes(
        key.get(20..28)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(bad)?,
    );
    Ok((TopicId(id), partition, offset))
}

/// The group id a `group_offsets` key of the first layout belongs to.
fn v1_offset_group(key: &[u8]) -> Result<String> {
    let bad = || corrupt("group_offsets", "key does not start with a group id");
    let len = u32::from_be_bytes(
        key.get(..4)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(bad)?,
    ) as usize;
    let group = key.get(4..4 + len).ok_or_else(bad)?;
    String::from_utf8(group.to_vec()).map_err(|_| bad())
}

/// Reads and drops the first layout's tables, returning their records as `(key, value)`
/// pairs of the key schema; nothing if the file is not in that layout.
fn migrate_v1(txn: &WriteTransaction, root: &Root) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let names: Vec<String> = txn
        .list_tables()
        .map_err(storage)?
        .map(|t| t.name().to_string())
        .collect();
    let v1 = [
        V1_TOPICS.name(),
        V1_TOPIC_IDS.name(),
        V1_CATALOG.name(),
        V1_BROKERS.name(),
        V1_COUNTERS.name(),
        V1_GROUP_OFFSETS.name(),
        V1_GROUPS.name(),
        V1_WAL_REPLICAS.name(),
    ];
    if !names.iter().any(|n| v1.contains(&n.as_str())) {
        return Ok(Vec::new());
    }
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut put = |key: String, value: Vec<u8>| out.push((key.into_bytes(), value));
    {
        let topics = txn.open_table(V1_TOPICS).map_err(storage)?;
        for item in topics.iter().map_err(storage)? {
            let (name, value) = item.map_err(storage)?;
            let name = name.value();
            let topic: TopicMetadata = codec::decode(&format!("topics/{name}"), value.value())?;
            put(
                keys::topic::ser_key(root, &topic.name),
                keys::topic::ser_value(&TopicRecord::from_metadata(&topic))?,
            );
            put(
                keys::topic_id::ser_key(root, topic.topic_id),
                keys::topic_id::ser_value(&topic.name)?,
            );
            for state in &topic.partitions {
                if *state != PartitionState::new(state.partition, state.leader) {
                    put(
                        keys::partition::ser_key(root, topic.topic_id, state.partition),
                        keys::partition::ser_value(state)?,
                    );
                }
            }
        }
        let catalog = txn.open_table(V1_CATALOG).map_err(storage)?;
        for item in catalog.iter().map_err(storage)? {
            let (key, value) = item.map_err(storage)?;
            let (topic_id, partition, base) = v1_catalog_key(key.value())?;
            let key = keys::catalog::ser_key(root, topic_id, partition, base);
            // Decoded to refuse a damaged entry now rather than on some later read.
            keys::catalog::deser_value(key.as_bytes(), value.value())?;
            put(key, value.value().to_vec());
        }
        let counters = txn.open_table(V1_COUNTERS).map_err(storage)?;
        if let Some(next) = counters.get(V1_NEXT_PRODUCER_ID).map_err(storage)? {
            put(
                keys::counter::ser_key(root, keys::counter::PRODUCER_ID),
                keys::counter::ser_value(next.value())?,
            );
        }
        let offsets = txn.open_table(V1_GROUP_OFFSETS).map_err(storage)?;
        for item in offsets.iter().map_err(storage)? {
            let (key, value) = item.map_err(storage)?;
            let group = v1_offset_group(key.value())?;
            let o: CommittedOffset =
                codec::decode(&format!("group_offsets/{group}"), value.value())?;
            put(
                keys::offset::ser_key(root, &group, &o.topic, o.partition),
                keys::offset::ser_value(&o)?,
            );
        }
        let groups = txn.open_table(V1_GROUPS).map_err(storage)?;
        for item in groups.iter().map_err(storage)? {
            let (group, value) = item.map_err(storage)?;
            let group = group.value();
            let key = keys::group::ser_key(root, group);
            keys::group::deser_value(group, key.as_bytes(), value.value())?;
            put(key, value.value().to_vec());
        }
        let sets = txn.open_table(V1_WAL_REPLICAS).map_err(storage)?;
        for item in sets.iter().map_err(storage)? {
            let (broker, value) = item.map_err(storage)?;
            let key = keys::wal_replicas::ser_key(root, broker.value());
            keys::wal_replicas::deser_value(key.as_bytes(), value.value())?;
            put(key, value.value().to_vec());
        }
    }
    // Broker registrations were never kept at rest (their leases died with the process).
    txn.delete_table(V1_TOPICS).map_err(storage)?;
    txn.delete_table(V1_TOPIC_IDS).map_err(storage)?;
    txn.delete_table(V1_CATALOG).map_err(storage)?;
    txn.delete_table(V1_BROKERS).map_err(storage)?;
    txn.delete_table(V1_COUNTERS).map_err(storage)?;
    txn.delete_table(V1_GROUP_OFFSETS).map_err(storage)?;
    txn.delete_table(V1_GROUPS).map_err(storage)?;
    txn.delete_table(V1_WAL_REPLICAS).map_err(storage)?;
    tracing::info!(
        records = out.len(),
        "metadata file migrated to the key-value layout"
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{SeededRng, SimClock};
    use crate::store::{BrokerRegistration, MetadataStore};
    use crate::topic::TopicSpec;
    use crate::watch::BrokerEvent;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn leases_topics_and_ids_follow_the_injected_clock_and_rng() {
        let clock = SimClock::new(1_700_000_000_000);
        let make = || {
            EmbeddedStore::in_memory_with_clock(clock.clone())
                .expect("open")
                .with_rng(SeededRng::new(7))
        };
        let store = make();
        let mut brokers = store.watch_brokers().await.expect("watch");
        let b = BrokerRegistration {
            broker_id: 3,
            az: None,
            kafka_addr: "k".into(),
            http_addr: "h".into(),
            internal_addr: String::new(),
            listeners: Default::default(),
        };
        let lease = store
            .register_broker(b.clone(), Duration::from_secs(2))
            .await
            .expect("register");
        assert_eq!(brokers.recv().await, Some(BrokerEvent::Joined(b)));
        tokio::time::advance(Duration::from_millis(1999)).await;
        assert_eq!(store.list_brokers().await.expect("list").len(), 1);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(store.list_brokers().await.expect("list").is_empty());
        assert_eq!(brokers.recv().await, Some(BrokerEvent::Left(3)));
        let err = store.keep_alive(lease.id).await.expect_err("expired");
        assert_eq!(err.kind(), crate::ErrorKind::Fenced);

        let spec = TopicSpec {
            name: "t".into(),
            partitions: 1,
            replication_factor: 1,
            configs: Default::default(),
        };
        let t = store.create_topic(spec.clone(), 1).await.expect("create");
        assert_eq!(t.created_at_ms, clock.unix_ms());
        let again = make().create_topic(spec, 1).await.expect("create");
        assert_eq!(
            again.topic_id, t.topic_id,
            "topic ids come from the seeded rng"
        );
    }
}
