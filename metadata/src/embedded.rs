//! The embedded single-node backend: [`MetadataStore`] on a `redb` file.
//!
//! Lifecycle: opened by `oxbow serve` at `{data-dir}/metadata.redb`; every write is a `redb`
//! transaction committed with immediate durability (fsync) before the call returns, so a
//! `kill -9` never loses an acknowledged metadata change.
//!
//! Tables (keys are stable; values are JSON with a version field `v`, see [`Versioned`]):
//! - `topics`: topic name → [`TopicMetadata`]
//! - `topic_ids`: 16-byte topic id → topic name
//! - `catalog`: topic id (16 bytes) ‖ partition (4 bytes BE) ‖ base offset (8 bytes BE) →
//!   [`CatalogEntry`]; big-endian so a range scan walks a partition in offset order.
//! - `brokers`: broker id → [`BrokerRegistration`]
//! - `counters`: name → u64 (`next_producer_id`)
//!
//! redb calls block, so each operation runs on tokio's blocking pool.

use crate::catalog::{CatalogCommit, CatalogEntry};
use crate::error::{Error, Result};
use crate::store::{BrokerRegistration, MetadataStore};
use crate::topic::{
    validate_partition_count, validate_topic_name, PartitionState, TopicConfigs, TopicMetadata,
    TopicSpec,
};
use crate::types::{BrokerId, Offset, PartitionId, TopicId};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

const TOPICS: TableDefinition<&str, &[u8]> = TableDefinition::new("topics");
const TOPIC_IDS: TableDefinition<&[u8], &str> = TableDefinition::new("topic_ids");
const CATALOG: TableDefinition<&[u8], &[u8]> = TableDefinition::new("catalog");
const BROKERS: TableDefinition<i32, &[u8]> = TableDefinition::new("brokers");
const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
const NEXT_PRODUCER_ID: &str = "next_producer_id";

/// The encoding version written into every value. A reader refuses any other version with an
/// error naming the key, instead of guessing.
const VALUE_VERSION: u32 = 1;

/// Envelope of every stored value: `{"v": 1, ...fields}`.
#[derive(Serialize, Deserialize)]
struct Versioned<T> {
    v: u32,
    #[serde(flatten)]
    body: T,
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(&Versioned {
        v: VALUE_VERSION,
        body: value,
    })
    .map_err(|e| Error::Storage(format!("encoding a value: {e}")))
}

fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T> {
    #[derive(Deserialize)]
    struct VersionOnly {
        v: u32,
    }
    let version: VersionOnly = serde_json::from_slice(bytes).map_err(|e| Error::CorruptValue {
        key: key.to_string(),
        reason: e.to_string(),
    })?;
    if version.v != VALUE_VERSION {
        return Err(Error::CorruptValue {
            key: key.to_string(),
            reason: format!(
                "unknown encoding version {} (this build reads {VALUE_VERSION})",
                version.v
            ),
        });
    }
    let value: Versioned<T> = serde_json::from_slice(bytes).map_err(|e| Error::CorruptValue {
        key: key.to_string(),
        reason: e.to_string(),
    })?;
    Ok(value.body)
}

fn storage<E: std::fmt::Display>(e: E) -> Error {
    Error::Storage(e.to_string())
}

fn catalog_prefix(topic_id: TopicId, partition: PartitionId) -> [u8; 20] {
    let mut k = [0u8; 20];
    k[..16].copy_from_slice(topic_id.as_bytes());
    k[16..20].copy_from_slice(&partition.to_be_bytes());
    k
}

fn catalog_key(topic_id: TopicId, partition: PartitionId, base_offset: Offset) -> [u8; 28] {
    let mut k = [0u8; 28];
    k[..20].copy_from_slice(&catalog_prefix(topic_id, partition));
    // Offsets are never negative, so big-endian bytes sort like the numbers.
    k[20..28].copy_from_slice(&base_offset.to_be_bytes());
    k
}

fn catalog_key_name(key: &[u8]) -> String {
    let id = key
        .get(..16)
        .and_then(|b| uuid::Uuid::from_slice(b).ok())
        .map(|u| u.to_string())
        .unwrap_or_else(|| "?".into());
    let partition = key
        .get(16..20)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(i32::from_be_bytes)
        .unwrap_or(-1);
    let offset = key
        .get(20..28)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(i64::from_be_bytes)
        .unwrap_or(-1);
    format!("catalog/{id}/{partition}/{offset}")
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// [`MetadataStore`] on one node, durable in a local `redb` file.
#[derive(Clone)]
pub struct EmbeddedStore {
    db: Arc<Database>,
}

impl EmbeddedStore {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let db = Database::create(path)
            .map_err(|e| Error::Storage(format!("opening {}: {e}", path.display())))?;
        Self::init(db)
    }

    /// A store that lives in memory only, for tests.
    pub fn in_memory() -> Result<Self> {
        let db = Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(storage)?;
        Self::init(db)
    }

    fn init(db: Database) -> Result<Self> {
        let txn = db.begin_write().map_err(storage)?;
        {
            txn.open_table(TOPICS).map_err(storage)?;
            txn.open_table(TOPIC_IDS).map_err(storage)?;
            txn.open_table(CATALOG).map_err(storage)?;
            txn.open_table(BROKERS).map_err(storage)?;
            txn.open_table(COUNTERS).map_err(storage)?;
        }
        txn.commit().map_err(storage)?;
        Ok(EmbeddedStore { db: Arc::new(db) })
    }

    /// Runs a blocking redb operation on the blocking pool.
    async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Database) -> Result<T> + Send + 'static,
    {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(|e| Error::Storage(format!("metadata task failed: {e}")))?
    }
}

fn read_topic(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    name: &str,
) -> Result<Option<TopicMetadata>> {
    match table.get(name).map_err(storage)? {
        Some(v) => Ok(Some(decode(&format!("topics/{name}"), v.value())?)),
        None => Ok(None),
    }
}

fn write_topic(table: &mut redb::Table<&str, &[u8]>, topic: &TopicMetadata) -> Result<()> {
    let bytes = encode(topic)?;
    table
        .insert(topic.name.as_str(), bytes.as_slice())
        .map_err(storage)?;
    Ok(())
}

fn topic_name_by_id(
    table: &impl ReadableTable<&'static [u8], &'static str>,
    topic_id: TopicId,
) -> Result<Option<String>> {
    Ok(table
        .get(topic_id.as_bytes().as_slice())
        .map_err(storage)?
        .map(|v| v.value().to_string()))
}

fn last_catalog_entry(
    table: &impl ReadableTable<&'static [u8], &'static [u8]>,
    topic_id: TopicId,
    partition: PartitionId,
) -> Result<Option<CatalogEntry>> {
    let start = catalog_key(topic_id, partition, 0);
    let end = catalog_key(topic_id, partition, i64::MAX);
    let mut range = table
        .range(start.as_slice()..=end.as_slice())
        .map_err(storage)?;
    match range.next_back() {
        Some(item) => {
            let (k, v) = item.map_err(storage)?;
            Ok(Some(decode(&catalog_key_name(k.value()), v.value())?))
        }
        None => Ok(None),
    }
}

#[async_trait::async_trait]
impl MetadataStore for EmbeddedStore {
    async fn register_broker(&self, broker: BrokerRegistration) -> Result<()> {
        self.run(move |db| {
            let txn = db.begin_write().map_err(storage)?;
            {
                let mut t = txn.open_table(BROKERS).map_err(storage)?;
                let bytes = encode(&broker)?;
                t.insert(broker.broker_id, bytes.as_slice())
                    .map_err(storage)?;
            }
            txn.commit().map_err(storage)
        })
        .await
    }

    async fn list_brokers(&self) -> Result<Vec<BrokerRegistration>> {
        self.run(|db| {
            let txn = db.begin_read().map_err(storage)?;
            let t = txn.open_table(BROKERS).map_err(storage)?;
            let mut out = Vec::new();
            for item in t.iter().map_err(storage)? {
                let (k, v) = item.map_err(storage)?;
                out.push(decode(&format!("brokers/{}", k.value()), v.value())?);
            }
            Ok(out)
        })
        .await
    }

    async fn create_topic(&self, spec: TopicSpec, leader: BrokerId) -> Result<TopicMetadata> {
        validate_topic_name(&spec.name)?;
        validate_partition_count(spec.partitions)?;
        let configs = TopicConfigs::validated(spec.configs.clone())?;
        self.run(move |db| {
            let txn = db.begin_write().map_err(storage)?;
            let topic = {
                let mut topics = txn.open_table(TOPICS).map_err(storage)?;
                if read_topic(&topics, &spec.name)?.is_some() {
                    return Err(Error::TopicExists(spec.name));
                }
                let topic = TopicMetadata {
                    name: spec.name.clone(),
                    topic_id: TopicId::new_random(),
                    replication_factor: spec.replication_factor,
                    configs,
                    partitions: (0..spec.partitions)
                        .map(|p| PartitionState {
                            partition: p,
                            leader,
                            leader_epoch: 0,
                            log_start_offset: 0,
                            version: 0,
                        })
                        .collect(),
                    created_at_ms: now_ms(),
                };
                write_topic(&mut topics, &topic)?;
                let mut ids = txn.open_table(TOPIC_IDS).map_err(storage)?;
                ids.insert(topic.topic_id.as_bytes().as_slice(), topic.name.as_str())
                    .map_err(storage)?;
                topic
            };
            txn.commit().map_err(storage)?;
            Ok(topic)
        })
        .await
    }

    async fn delete_topic(&self, name: &str) -> Result<TopicMetadata> {
        let name = name.to_string();
        self.run(move |db| {
            let txn = db.begin_write().map_err(storage)?;
            let topic = {
                let mut topics = txn.open_table(TOPICS).map_err(storage)?;
                let topic = read_topic(&topics, &name)?.ok_or(Error::UnknownTopic(name.clone()))?;
                topics.remove(name.as_str()).map_err(storage)?;
                let mut ids = txn.open_table(TOPIC_IDS).map_err(storage)?;
                ids.remove(topic.topic_id.as_bytes().as_slice())
                    .map_err(storage)?;
                let mut catalog = txn.open_table(CATALOG).map_err(storage)?;
                let start = catalog_key(topic.topic_id, 0, 0);
                let end = catalog_key(topic.topic_id, i32::MAX, i64::MAX);
                catalog
                    .retain_in(start.as_slice()..=end.as_slice(), |_, _| false)
                    .map_err(storage)?;
                topic
            };
            txn.commit().map_err(storage)?;
            Ok(topic)
        })
        .await
    }

    async fn list_topics(&self) -> Result<Vec<TopicMetadata>> {
        self.run(|db| {
            let txn = db.begin_read().map_err(storage)?;
            let t = txn.open_table(TOPICS).map_err(storage)?;
            let mut out = Vec::new();
            for item in t.iter().map_err(storage)? {
                let (k, v) = item.map_err(storage)?;
                out.push(decode(&format!("topics/{}", k.value()), v.value())?);
            }
            Ok(out)
        })
        .await
    }

    async fn topic(&self, name: &str) -> Result<Option<TopicMetadata>> {
        let name = name.to_string();
        self.run(move |db| {
            let txn = db.begin_read().map_err(storage)?;
            let t = txn.open_table(TOPICS).map_err(storage)?;
            read_topic(&t, &name)
        })
        .await
    }

    async fn topic_by_id(&self, topic_id: TopicId) -> Result<Option<TopicMetadata>> {
        self.run(move |db| {
            let txn = db.begin_read().map_err(storage)?;
            let ids = txn.open_table(TOPIC_IDS).map_err(storage)?;
            let Some(name) = topic_name_by_id(&ids, topic_id)? else {
                return Ok(None);
            };
            let t = txn.open_table(TOPICS).map_err(storage)?;
            read_topic(&t, &name)
        })
        .await
    }

    async fn create_partitions(
        &self,
        name: &str,
        total: i32,
        leader: BrokerId,
    ) -> Result<TopicMetadata> {
        validate_partition_count(total)?;
        let name = name.to_string();
        self.run(move |db| {
            let txn = db.begin_write().map_err(storage)?;
            let topic = {
                let mut topics = txn.open_table(TOPICS).map_err(storage)?;
                let mut topic =
                    read_topic(&topics, &name)?.ok_or(Error::UnknownTopic(name.clone()))?;
                let current = topic.partitions.len() as i32;
                if total <= current {
                    return Err(Error::InvalidPartitions {
                        count: total,
                        reason: format!("topic '{name}' already has {current} partitions; partitions can only be added"),
                    });
                }
                topic.partitions.extend((current..total).map(|p| PartitionState {
                    partition: p,
                    leader,
                    leader_epoch: 0,
                    log_start_offset: 0,
                    version: 0,
                }));
                write_topic(&mut topics, &topic)?;
                topic
            };
            txn.commit().map_err(storage)?;
            Ok(topic)
        })
        .await
    }

    async fn update_partition(
        &self,
        topic_id: TopicId,
        expected_version: u64,
        new: PartitionState,
    ) -> Result<PartitionState> {
        self.run(move |db| {
            let txn = db.begin_write().map_err(storage)?;
            let updated = {
                let ids = txn.open_table(TOPIC_IDS).map_err(storage)?;
                let name = topic_name_by_id(&ids, topic_id)?
                    .ok_or_else(|| Error::UnknownTopic(topic_id.to_string()))?;
                let mut topics = txn.open_table(TOPICS).map_err(storage)?;
                let mut topic =
                    read_topic(&topics, &name)?.ok_or(Error::UnknownTopic(name.clone()))?;
                let slot = usize::try_from(new.partition)
                    .ok()
                    .and_then(|i| topic.partitions.get_mut(i))
                    .ok_or(Error::UnknownPartition {
                        topic: name.clone(),
                        partition: new.partition,
                    })?;
                if slot.version != expected_version {
                    return Err(Error::Conflict(format!(
                        "partition {name}-{} (version {} != expected {expected_version})",
                        new.partition, slot.version
                    )));
                }
                let updated = PartitionState {
                    version: expected_version + 1,
                    ..new
                };
                *slot = updated.clone();
                write_topic(&mut topics, &topic)?;
                updated
            };
            txn.commit().map_err(storage)?;
            Ok(updated)
        })
        .await
    }

    async fn allocate_producer_ids(&self, count: u32) -> Result<i64> {
        self.run(move |db| {
            let txn = db.begin_write().map_err(storage)?;
            let first = {
                let mut t = txn.open_table(COUNTERS).map_err(storage)?;
                let first = t
                    .get(NEXT_PRODUCER_ID)
                    .map_err(storage)?
                    .map(|v| v.value())
                    .unwrap_or(0);
                t.insert(NEXT_PRODUCER_ID, first + u64::from(count))
                    .map_err(storage)?;
                first
            };
            txn.commit().map_err(storage)?;
            i64::try_from(first).map_err(|_| Error::Storage("producer ids exhausted".into()))
        })
        .await
    }

    async fn commit_catalog(&self, commit: CatalogCommit) -> Result<()> {
        self.run(move |db| {
            let txn = db.begin_write().map_err(storage)?;
            {
                let ids = txn.open_table(TOPIC_IDS).map_err(storage)?;
                let topics = txn.open_table(TOPICS).map_err(storage)?;
                let mut catalog = txn.open_table(CATALOG).map_err(storage)?;
                for fence in &commit.fences {
                    let tp = fence.topic_partition;
                    // A topic deleted since the data was written: its data goes with it.
                    let Some(name) = topic_name_by_id(&ids, tp.topic_id)? else {
                        continue;
                    };
                    let Some(topic) = read_topic(&topics, &name)? else {
                        continue;
                    };
                    let current = topic
                        .partition(tp.partition)
                        .ok_or(Error::UnknownPartition {
                            topic: name.clone(),
                            partition: tp.partition,
                        })?
                        .leader_epoch;
                    if current != fence.leader_epoch {
                        return Err(Error::Fenced {
                            topic_partition: format!("{name}-{}", tp.partition),
                            current,
                            held: fence.leader_epoch,
                        });
                    }
                }
                for entry in &commit.entries {
                    if topic_name_by_id(&ids, entry.topic_id)?.is_none() {
                        continue;
                    }
                    let key = catalog_key(entry.topic_id, entry.partition, entry.base_offset);
                    if let Some(existing) = catalog.get(key.as_slice()).map_err(storage)? {
                        let existing: CatalogEntry =
                            decode(&catalog_key_name(&key), existing.value())?;
                        if existing == *entry {
                            // A retried commit whose first attempt landed: idempotent.
                            continue;
                        }
                        return Err(Error::Conflict(format!(
                            "{} holds a different entry",
                            catalog_key_name(&key)
                        )));
                    }
                    if let Some(last) =
                        last_catalog_entry(&catalog, entry.topic_id, entry.partition)?
                    {
                        if entry.base_offset != last.next_offset() {
                            return Err(Error::Conflict(format!(
                                "catalog for {}-{} ends at offset {} but the new entry starts at {}",
                                entry.topic_id,
                                entry.partition,
                                last.last_offset,
                                entry.base_offset
                            )));
                        }
                    }
                    if entry.last_offset < entry.base_offset {
                        return Err(Error::InvalidRequest(format!(
                            "catalog entry with last offset {} before base offset {}",
                            entry.last_offset, entry.base_offset
                        )));
                    }
                    let bytes = encode(entry)?;
                    catalog
                        .insert(key.as_slice(), bytes.as_slice())
                        .map_err(storage)?;
                }
            }
            txn.commit().map_err(storage)
        })
        .await
    }

    async fn catalog_entries(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
        from_offset: Offset,
        limit: usize,
    ) -> Result<Vec<CatalogEntry>> {
        self.run(move |db| {
            let txn = db.begin_read().map_err(storage)?;
            let catalog = txn.open_table(CATALOG).map_err(storage)?;
            let first = catalog_key(topic_id, partition, 0);
            let from = catalog_key(topic_id, partition, from_offset.max(0));
            let end = catalog_key(topic_id, partition, i64::MAX);
            // The entry that contains `from_offset` starts at or before it.
            let start = match catalog
                .range(first.as_slice()..=from.as_slice())
                .map_err(storage)?
                .next_back()
            {
                Some(item) => item.map_err(storage)?.0.value().to_vec(),
                None => first.to_vec(),
            };
            let mut out = Vec::new();
            for item in catalog
                .range(start.as_slice()..=end.as_slice())
                .map_err(storage)?
            {
                if out.len() >= limit {
                    break;
                }
                let (k, v) = item.map_err(storage)?;
                let entry: CatalogEntry = decode(&catalog_key_name(k.value()), v.value())?;
                if entry.last_offset >= from_offset {
                    out.push(entry);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn catalog_last(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
    ) -> Result<Option<CatalogEntry>> {
        self.run(move |db| {
            let txn = db.begin_read().map_err(storage)?;
            let catalog = txn.open_table(CATALOG).map_err(storage)?;
            last_catalog_entry(&catalog, topic_id, partition)
        })
        .await
    }

    async fn catalog_find_timestamp(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
        timestamp_ms: i64,
    ) -> Result<Option<CatalogEntry>> {
        self.run(move |db| {
            let txn = db.begin_read().map_err(storage)?;
            let catalog = txn.open_table(CATALOG).map_err(storage)?;
            let start = catalog_key(topic_id, partition, 0);
            let end = catalog_key(topic_id, partition, i64::MAX);
            // A linear scan: fine while catalogs are compacted into few large segments; the
            // compaction issue adds a time index.
            for item in catalog
                .range(start.as_slice()..=end.as_slice())
                .map_err(storage)?
            {
                let (k, v) = item.map_err(storage)?;
                let entry: CatalogEntry = decode(&catalog_key_name(k.value()), v.value())?;
                if entry.max_timestamp_ms >= timestamp_ms {
                    return Ok(Some(entry));
                }
            }
            Ok(None)
        })
        .await
    }
}
