//! The embedded single-node backend: [`MetadataStore`] on a `redb` file.
//!
//! Lifecycle: opened by `oxbow serve` at `{data-dir}/metadata.redb`; every write is a `redb`
//! transaction committed with immediate durability (fsync) before the call returns, so a
//! `kill -9` never loses an acknowledged metadata change.
//!
//! Tables (keys are stable; values are JSON with a version field `v`, see [`crate::codec`]):
//! - `topics`: topic name → [`TopicMetadata`]
//! - `topic_ids`: 16-byte topic id → topic name
//! - `catalog`: topic id (16 bytes) ‖ partition (4 bytes BE) ‖ base offset (8 bytes BE) →
//!   [`CatalogEntry`]; big-endian so a range scan walks a partition in offset order.
//! - `counters`: name → u64 (`next_producer_id`)
//! - `group_offsets`: group id length (u32 BE) ‖ group id ‖ topic length (u16 BE) ‖ topic ‖
//!   partition (4 bytes BE) → [`CommittedOffset`]; length-prefixed so any group id (even
//!   one containing separators) owns exactly one key range.
//! - `groups`: group id → the group record (version + base64 data)
//! - `wal_replicas`: broker id → [`WalReplicaSet`] (its `version` is the compare)
//! - `brokers`: emptied at open and no longer written (kept so older files open).
//!
//! Leases live only in this process's memory, and so does what is bound to them (broker
//! registrations and the controller post): on one node, "the process is gone" is exactly
//! "the lease expired", so a lease from a previous process is expired at open by
//! construction. Within the process a lease expires when not kept alive within its TTL; a
//! reaper task (started when the store is opened inside a tokio runtime, aborted when the
//! store is dropped) expires them every 100 ms, and every lease operation expires lazily
//! first, so the semantics hold even without the reaper.
//!
//! Watches are in-process fan-out ([`crate::watch`]). A writer publishes its event after it
//! commits but before it releases the process-local lock it took while its write transaction
//! was still open, so events arrive in commit order.
//!
//! redb calls block, so each operation runs on tokio's blocking pool.

use crate::catalog::{CatalogCommit, CatalogEntry, CatalogReplace};
use crate::codec::{decode, encode};
use crate::error::{Error, Result};
use crate::group::{validate_group_id, CommittedOffset, GroupRecord, StoredGroup};
use crate::keys::prefix_end;
use crate::store::{BrokerRegistration, Lease, LeaseId, MetadataStore, LEASE_TTL_MIN};
use crate::topic::{
    validate_partition_count, validate_topic_name, PartitionState, TopicConfigs, TopicMetadata,
    TopicSpec,
};
use crate::types::{BrokerId, Offset, PartitionId, TopicId};
use crate::wal_replicas::WalReplicaSet;
use crate::watch::{BrokerEvent, Subscribers, TopicEvent, Watch};
use bytes::Bytes;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
// tokio's clock: lease expiry follows the paused clock in tests and the simulation.
use tokio::time::Instant;

const TOPICS: TableDefinition<&str, &[u8]> = TableDefinition::new("topics");
const TOPIC_IDS: TableDefinition<&[u8], &str> = TableDefinition::new("topic_ids");
const CATALOG: TableDefinition<&[u8], &[u8]> = TableDefinition::new("catalog");
const BROKERS: TableDefinition<i32, &[u8]> = TableDefinition::new("brokers");
const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
const GROUP_OFFSETS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("group_offsets");
const GROUPS: TableDefinition<&str, &[u8]> = TableDefinition::new("groups");
const WAL_REPLICAS: TableDefinition<i32, &[u8]> = TableDefinition::new("wal_replicas");
const NEXT_PRODUCER_ID: &str = "next_producer_id";
/// How often the reaper looks for expired leases: well under the shortest TTL.
const REAPER_INTERVAL: Duration = Duration::from_millis(100);

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
    inner: Arc<Inner>,
}

struct Inner {
    db: Database,
    live: Mutex<Live>,
    /// The lease reaper; aborted when the last handle to the store is dropped.
    reaper: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.reaper).take() {
            task.abort();
        }
    }
}

struct LeaseState {
    deadline: Instant,
    ttl: Duration,
}

/// Process-local state: leases, what is bound to them, and watch subscribers.
#[derive(Default)]
struct Live {
    next_lease: LeaseId,
    leases: HashMap<LeaseId, LeaseState>,
    brokers: BTreeMap<BrokerId, (BrokerRegistration, LeaseId)>,
    controller: Option<(BrokerId, LeaseId)>,
    broker_subs: Subscribers<BrokerEvent>,
    topic_subs: Subscribers<TopicEvent>,
    controller_subs: Subscribers<Option<BrokerId>>,
}

impl Live {
    fn expire(&mut self, now: Instant) {
        let expired: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|(_, l)| l.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.drop_lease(id);
        }
    }

    /// Removes a lease and everything bound to it, publishing the departures.
    fn drop_lease(&mut self, id: LeaseId) -> bool {
        if self.leases.remove(&id).is_none() {
            return false;
        }
        let gone: Vec<BrokerId> = self
            .brokers
            .iter()
            .filter(|(_, (_, l))| *l == id)
            .map(|(b, _)| *b)
            .collect();
        for b in gone {
            self.brokers.remove(&b);
            self.broker_subs.publish(&BrokerEvent::Left(b));
        }
        if matches!(self.controller, Some((_, l)) if l == id) {
            self.controller = None;
            self.controller_subs.publish(&None);
        }
        true
    }

    fn alive(&self, id: LeaseId) -> Result<()> {
        if self.leases.contains_key(&id) {
            Ok(())
        } else {
            Err(Error::LeaseExpired(id))
        }
    }
}

/// Locks a mutex whose data stays consistent even if a holder panicked (every critical
/// section here leaves it valid), so poisoning is ignored rather than turned into a panic.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
            txn.open_table(COUNTERS).map_err(storage)?;
            txn.open_table(GROUP_OFFSETS).map_err(storage)?;
            txn.open_table(GROUPS).map_err(storage)?;
            txn.open_table(WAL_REPLICAS).map_err(storage)?;
            // Registrations of an earlier process: their leases died with it.
            let mut brokers = txn.open_table(BROKERS).map_err(storage)?;
            brokers.retain(|_, _| false).map_err(storage)?;
        }
        txn.commit().map_err(storage)?;
        let inner = Arc::new(Inner {
            db,
            live: Mutex::new(Live {
                // Distinct from any id a previous process handed out, so a stale lease id
                // kept somewhere can never name a live lease.
                next_lease: now_ms().max(1),
                ..Live::default()
            }),
            reaper: Mutex::new(None),
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let weak: Weak<Inner> = Arc::downgrade(&inner);
            let task = rt.spawn(async move {
                let mut tick = tokio::time::interval(REAPER_INTERVAL);
                loop {
                    tick.tick().await;
                    let Some(inner) = weak.upgrade() else { break };
                    lock(&inner.live).expire(Instant::now());
                }
            });
            *lock(&inner.reaper) = Some(task);
        }
        Ok(EmbeddedStore { inner })
    }

    /// Runs a blocking redb operation on the blocking pool.
    async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        crate::blocking::run_blocking(move || f(&inner))
            .await
            .map_err(|e| Error::Storage(format!("metadata task failed: {e}")))?
    }

    /// The process-local state, with expired leases already gone.
    fn live(&self) -> MutexGuard<'_, Live> {
        let mut live = lock(&self.inner.live);
        live.expire(Instant::now());
        live
    }
}

fn group_prefix(group_id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + group_id.len());
    k.extend_from_slice(&(group_id.len() as u32).to_be_bytes());
    k.extend_from_slice(group_id.as_bytes());
    k
}

fn group_offset_key(group_id: &str, topic: &str, partition: PartitionId) -> Vec<u8> {
    let mut k = group_prefix(group_id);
    k.extend_from_slice(&(topic.len() as u16).to_be_bytes());
    k.extend_from_slice(topic.as_bytes());
    k.extend_from_slice(&partition.to_be_bytes());
    k
}

/// The group id a `group_offsets` key belongs to.
fn group_of_offset_key(key: &[u8]) -> Option<String> {
    let len = u32::from_be_bytes(key.get(..4)?.try_into().ok()?) as usize;
    String::from_utf8(key.get(4..4 + len)?.to_vec()).ok()
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

/// A placement's leaders, owned (the store's closures outlive the call), never empty.
fn checked_leaders(leaders: &[BrokerId]) -> Result<Vec<BrokerId>> {
    if leaders.is_empty() {
        return Err(Error::InvalidRequest(
            "a placement needs at least one leader".into(),
        ));
    }
    Ok(leaders.to_vec())
}

fn leader_of(leaders: &[BrokerId], partition: PartitionId) -> BrokerId {
    crate::topic::placed_leader(leaders, partition).expect("leaders checked non-empty")
}

#[async_trait::async_trait]
impl MetadataStore for EmbeddedStore {
    async fn register_broker(&self, broker: BrokerRegistration, ttl: Duration) -> Result<Lease> {
        if ttl < LEASE_TTL_MIN {
            return Err(Error::InvalidRequest(format!(
                "lease TTL {ttl:?} is shorter than the minimum {LEASE_TTL_MIN:?}"
            )));
        }
        let mut live = self.live();
        let id = live.next_lease;
        live.next_lease += 1;
        live.leases.insert(
            id,
            LeaseState {
                deadline: Instant::now() + ttl,
                ttl,
            },
        );
        // A re-registration under a new lease replaces the old one (and ends that lease, so
        // nothing stays bound to a lease no one keeps alive).
        if let Some((_, old)) = live.brokers.get(&broker.broker_id) {
            let old = *old;
            if old != id {
                live.leases.remove(&old);
                if matches!(live.controller, Some((_, l)) if l == old) {
                    live.controller = None;
                    live.controller_subs.publish(&None);
                }
            }
        }
        live.brokers.insert(broker.broker_id, (broker.clone(), id));
        live.broker_subs.publish(&BrokerEvent::Joined(broker));
        Ok(Lease { id, ttl })
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration> {
        let mut live = self.live();
        let l = live
            .leases
            .get_mut(&lease)
            .ok_or(Error::LeaseExpired(lease))?;
        l.deadline = Instant::now() + l.ttl;
        Ok(l.ttl)
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        self.live().drop_lease(lease);
        Ok(())
    }

    async fn list_brokers(&self) -> Result<Vec<BrokerRegistration>> {
        Ok(self
            .live()
            .brokers
            .values()
            .map(|(b, _)| b.clone())
            .collect())
    }

    async fn watch_brokers(&self) -> Result<Watch<BrokerEvent>> {
        Ok(self.live().broker_subs.subscribe())
    }

    async fn watch_topics(&self) -> Result<Watch<TopicEvent>> {
        Ok(lock(&self.inner.live).topic_subs.subscribe())
    }

    async fn create_topic_with_leaders(
        &self,
        spec: TopicSpec,
        leaders: &[BrokerId],
    ) -> Result<TopicMetadata> {
        validate_topic_name(&spec.name)?;
        validate_partition_count(spec.partitions)?;
        let configs = TopicConfigs::validated(spec.configs.clone())?;
        let leaders = checked_leaders(leaders)?;
        self.run(move |inner| {
            let db = &inner.db;
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
                        .map(|p| PartitionState::new(p, leader_of(&leaders, p)))
                        .collect(),
                    created_at_ms: now_ms(),
                };
                write_topic(&mut topics, &topic)?;
                let mut ids = txn.open_table(TOPIC_IDS).map_err(storage)?;
                ids.insert(topic.topic_id.as_bytes().as_slice(), topic.name.as_str())
                    .map_err(storage)?;
                topic
            };
            let mut live = lock(&inner.live);
            txn.commit().map_err(storage)?;
            live.topic_subs.publish(&TopicEvent::Changed(topic.clone()));
            drop(live);
            Ok(topic)
        })
        .await
    }

    async fn delete_topic(&self, name: &str) -> Result<TopicMetadata> {
        let name = name.to_string();
        self.run(move |inner| {
            let db = &inner.db;
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
            let mut live = lock(&inner.live);
            txn.commit().map_err(storage)?;
            live.topic_subs.publish(&TopicEvent::Deleted {
                name: topic.name.clone(),
                topic_id: topic.topic_id,
            });
            drop(live);
            Ok(topic)
        })
        .await
    }

    async fn list_topics(&self) -> Result<Vec<TopicMetadata>> {
        self.run(|inner| {
            let db = &inner.db;
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
        self.run(move |inner| {
            let db = &inner.db;
            let txn = db.begin_read().map_err(storage)?;
            let t = txn.open_table(TOPICS).map_err(storage)?;
            read_topic(&t, &name)
        })
        .await
    }

    async fn topic_by_id(&self, topic_id: TopicId) -> Result<Option<TopicMetadata>> {
        self.run(move |inner| {
            let db = &inner.db;
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

    async fn create_partitions_with_leaders(
        &self,
        name: &str,
        total: i32,
        leaders: &[BrokerId],
    ) -> Result<TopicMetadata> {
        validate_partition_count(total)?;
        let leaders = checked_leaders(leaders)?;
        let name = name.to_string();
        self.run(move |inner| {
            let db = &inner.db;
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
                topic.partitions.extend(
                    (current..total).map(|p| PartitionState::new(p, leader_of(&leaders, p))),
                );
                write_topic(&mut topics, &topic)?;
                topic
            };
            let mut live = lock(&inner.live);
            txn.commit().map_err(storage)?;
            live.topic_subs.publish(&TopicEvent::Changed(topic.clone()));
            drop(live);
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
        self.run(move |inner| {
            let db = &inner.db;
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
            let mut live = lock(&inner.live);
            txn.commit().map_err(storage)?;
            live.topic_subs.publish(&TopicEvent::PartitionChanged {
                topic_id,
                state: updated.clone(),
            });
            drop(live);
            Ok(updated)
        })
        .await
    }

    async fn allocate_producer_ids(&self, count: u32) -> Result<i64> {
        self.run(move |inner| {
            let db = &inner.db;
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
        self.run(move |inner| {
            let db = &inner.db;
            let txn = db.begin_write().map_err(storage)?;
            {
                let ids = txn.open_table(TOPIC_IDS).map_err(storage)?;
                let topics = txn.open_table(TOPICS).map_err(storage)?;
                let mut catalog = txn.open_table(CATALOG).map_err(storage)?;
                // One object usually holds many partitions of few topics: decode each once.
                let mut seen: HashMap<TopicId, Option<TopicMetadata>> = HashMap::new();
                for fence in &commit.fences {
                    let tp = fence.topic_partition;
                    let topic = match seen.entry(tp.topic_id) {
                        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                        std::collections::hash_map::Entry::Vacant(e) => {
                            e.insert(match topic_name_by_id(&ids, tp.topic_id)? {
                                Some(name) => read_topic(&topics, &name)?,
                                None => None,
                            })
                        }
                    };
                    // A topic deleted since the data was written: its data goes with it.
                    let Some(topic) = topic else {
                        continue;
                    };
                    let name = &topic.name;
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
        self.run(move |inner| {
            let db = &inner.db;
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
        self.run(move |inner| {
            let db = &inner.db;
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
        self.run(move |inner| {
            let db = &inner.db;
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

    // ---- segment catalog: compaction (replace_catalog_entries) ----

    async fn replace_catalog_entries(&self, replace: CatalogReplace) -> Result<()> {
        replace.validate()?;
        self.run(move |inner| {
            let txn = inner.db.begin_write().map_err(storage)?;
            let changed = {
                let tp = replace.fence.topic_partition;
                let ids = txn.open_table(TOPIC_IDS).map_err(storage)?;
                let name = topic_name_by_id(&ids, tp.topic_id)?
                    .ok_or_else(|| Error::UnknownTopic(tp.topic_id.to_string()))?;
                let topics = txn.open_table(TOPICS).map_err(storage)?;
                let topic = read_topic(&topics, &name)?.ok_or(Error::UnknownTopic(name.clone()))?;
                let current = topic
                    .partition(tp.partition)
                    .ok_or(Error::UnknownPartition {
                        topic: name.clone(),
                        partition: tp.partition,
                    })?
                    .leader_epoch;
                if current != replace.fence.leader_epoch {
                    return Err(Error::Fenced {
                        topic_partition: format!("{name}-{}", tp.partition),
                        current,
                        held: replace.fence.leader_epoch,
                    });
                }
                let mut catalog = txn.open_table(CATALOG).map_err(storage)?;
                // Every key of the run (old or new) lies in [base, last]; no other does.
                let start = catalog_key(tp.topic_id, tp.partition, replace.base_offset());
                let end = catalog_key(tp.topic_id, tp.partition, replace.last_offset());
                let mut stored: Vec<CatalogEntry> = Vec::new();
                for item in catalog
                    .range(start.as_slice()..=end.as_slice())
                    .map_err(storage)?
                {
                    let (k, v) = item.map_err(storage)?;
                    stored.push(decode(&catalog_key_name(k.value()), v.value())?);
                }
                if stored == replace.new {
                    // A retry whose first attempt landed.
                    false
                } else if stored != replace.old {
                    return Err(Error::Conflict(format!(
                        "catalog run {}-{} offsets {}..={} is not the one to replace (stored: {} entries, expected {})",
                        name,
                        tp.partition,
                        replace.base_offset(),
                        replace.last_offset(),
                        stored.len(),
                        replace.old.len()
                    )));
                } else {
                    catalog
                        .retain_in(start.as_slice()..=end.as_slice(), |_, _| false)
                        .map_err(storage)?;
                    for e in &replace.new {
                        let key = catalog_key(e.topic_id, e.partition, e.base_offset);
                        let bytes = encode(e)?;
                        catalog
                            .insert(key.as_slice(), bytes.as_slice())
                            .map_err(storage)?;
                    }
                    true
                }
            };
            if changed {
                txn.commit().map_err(storage)
            } else {
                txn.abort().map_err(storage)
            }
        })
        .await
    }

    // ---- end of replace_catalog_entries ----

    async fn commit_offsets(&self, group_id: &str, offsets: Vec<CommittedOffset>) -> Result<()> {
        validate_group_id(group_id)?;
        let group_id = group_id.to_string();
        self.run(move |inner| {
            let txn = inner.db.begin_write().map_err(storage)?;
            {
                let mut t = txn.open_table(GROUP_OFFSETS).map_err(storage)?;
                for o in &offsets {
                    let key = group_offset_key(&group_id, &o.topic, o.partition);
                    let bytes = encode(o)?;
                    t.insert(key.as_slice(), bytes.as_slice())
                        .map_err(storage)?;
                }
            }
            txn.commit().map_err(storage)
        })
        .await
    }

    async fn fetch_offsets(&self, group_id: &str) -> Result<Vec<CommittedOffset>> {
        let group_id = group_id.to_string();
        self.run(move |inner| {
            let txn = inner.db.begin_read().map_err(storage)?;
            let t = txn.open_table(GROUP_OFFSETS).map_err(storage)?;
            let prefix = group_prefix(&group_id);
            let mut out: Vec<CommittedOffset> = Vec::new();
            let range = match prefix_end(&prefix) {
                Some(end) => t.range(prefix.as_slice()..end.as_slice()),
                None => t.range(prefix.as_slice()..),
            }
            .map_err(storage)?;
            for item in range {
                let (_, v) = item.map_err(storage)?;
                let key = format!("group_offsets/{group_id}");
                out.push(decode(&key, v.value())?);
            }
            out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
            Ok(out)
        })
        .await
    }

    async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: Option<Vec<(String, PartitionId)>>,
    ) -> Result<()> {
        let group_id = group_id.to_string();
        self.run(move |inner| {
            let txn = inner.db.begin_write().map_err(storage)?;
            {
                let mut t = txn.open_table(GROUP_OFFSETS).map_err(storage)?;
                match partitions {
                    Some(list) => {
                        for (topic, p) in list {
                            let key = group_offset_key(&group_id, &topic, p);
                            t.remove(key.as_slice()).map_err(storage)?;
                        }
                    }
                    None => delete_group_offsets(&mut t, &group_id)?,
                }
            }
            txn.commit().map_err(storage)
        })
        .await
    }

    async fn group(&self, group_id: &str) -> Result<Option<GroupRecord>> {
        let group_id = group_id.to_string();
        self.run(move |inner| {
            let txn = inner.db.begin_read().map_err(storage)?;
            let t = txn.open_table(GROUPS).map_err(storage)?;
            read_group(&t, &group_id)
        })
        .await
    }

    async fn put_group(
        &self,
        group_id: &str,
        expected_version: Option<u64>,
        data: Bytes,
    ) -> Result<GroupRecord> {
        validate_group_id(group_id)?;
        let group_id = group_id.to_string();
        self.run(move |inner| {
            let txn = inner.db.begin_write().map_err(storage)?;
            let record = {
                let mut t = txn.open_table(GROUPS).map_err(storage)?;
                let current = read_group(&t, &group_id)?.map(|g| g.version);
                if current != expected_version {
                    return Err(Error::Conflict(format!(
                        "group '{group_id}' (version {current:?}, expected {expected_version:?})"
                    )));
                }
                let record = GroupRecord {
                    group_id: group_id.clone(),
                    version: expected_version.unwrap_or(0) + 1,
                    data,
                };
                let bytes = encode(&StoredGroup::from_record(&record))?;
                t.insert(group_id.as_str(), bytes.as_slice())
                    .map_err(storage)?;
                record
            };
            txn.commit().map_err(storage)?;
            Ok(record)
        })
        .await
    }

    async fn delete_group(&self, group_id: &str, expected_version: u64) -> Result<()> {
        let group_id = group_id.to_string();
        self.run(move |inner| {
            let txn = inner.db.begin_write().map_err(storage)?;
            {
                let mut t = txn.open_table(GROUPS).map_err(storage)?;
                match read_group(&t, &group_id)? {
                    None => return Err(Error::UnknownGroup(group_id)),
                    Some(g) if g.version != expected_version => {
                        return Err(Error::Conflict(format!(
                            "group '{group_id}' (version {}, expected {expected_version})",
                            g.version
                        )))
                    }
                    Some(_) => {}
                }
                t.remove(group_id.as_str()).map_err(storage)?;
                let mut offsets = txn.open_table(GROUP_OFFSETS).map_err(storage)?;
                delete_group_offsets(&mut offsets, &group_id)?;
            }
            txn.commit().map_err(storage)
        })
        .await
    }

    async fn list_groups(&self) -> Result<Vec<String>> {
        self.run(|inner| {
            let txn = inner.db.begin_read().map_err(storage)?;
            let mut out = BTreeSet::new();
            let groups = txn.open_table(GROUPS).map_err(storage)?;
            for item in groups.iter().map_err(storage)? {
                out.insert(item.map_err(storage)?.0.value().to_string());
            }
            let offsets = txn.open_table(GROUP_OFFSETS).map_err(storage)?;
            for item in offsets.iter().map_err(storage)? {
                if let Some(g) = group_of_offset_key(item.map_err(storage)?.0.value()) {
                    out.insert(g);
                }
            }
            Ok(out.into_iter().collect())
        })
        .await
    }

    // ---- WAL replica sets ----

    async fn wal_replica_set(&self, broker: BrokerId) -> Result<Option<WalReplicaSet>> {
        self.run(move |inner| {
            let txn = inner.db.begin_read().map_err(storage)?;
            let t = txn.open_table(WAL_REPLICAS).map_err(storage)?;
            read_wal_replica_set(&t, broker)
        })
        .await
    }

    async fn put_wal_replica_set(
        &self,
        set: WalReplicaSet,
        expected_version: Option<u64>,
    ) -> Result<WalReplicaSet> {
        set.validate()?;
        self.run(move |inner| {
            let broker = set.broker_id;
            let txn = inner.db.begin_write().map_err(storage)?;
            let stored = {
                let mut t = txn.open_table(WAL_REPLICAS).map_err(storage)?;
                let current = read_wal_replica_set(&t, broker)?.map(|s| s.version);
                if current != expected_version {
                    return Err(Error::Conflict(format!(
                        "WAL replica set of broker {broker} (version {current:?}, expected {expected_version:?})"
                    )));
                }
                let stored = WalReplicaSet {
                    version: expected_version.unwrap_or(0) + 1,
                    ..set
                };
                let bytes = encode(&stored)?;
                t.insert(broker, bytes.as_slice()).map_err(storage)?;
                stored
            };
            txn.commit().map_err(storage)?;
            Ok(stored)
        })
        .await
    }

    async fn delete_wal_replica_set(&self, broker: BrokerId, expected_version: u64) -> Result<()> {
        self.run(move |inner| {
            let txn = inner.db.begin_write().map_err(storage)?;
            {
                let mut t = txn.open_table(WAL_REPLICAS).map_err(storage)?;
                match read_wal_replica_set(&t, broker)? {
                    None => return Err(Error::UnknownWalReplicaSet(broker)),
                    Some(s) if s.version != expected_version => {
                        return Err(Error::Conflict(format!(
                            "WAL replica set of broker {broker} (version {}, expected {expected_version})",
                            s.version
                        )))
                    }
                    Some(_) => {}
                }
                t.remove(broker).map_err(storage)?;
            }
            txn.commit().map_err(storage)
        })
        .await
    }

    // ---- end WAL replica sets ----

    async fn campaign(&self, candidate: BrokerId, lease: LeaseId) -> Result<BrokerId> {
        let mut live = self.live();
        live.alive(lease)?;
        match live.controller {
            Some((holder, _)) => Ok(holder),
            None => {
                live.controller = Some((candidate, lease));
                live.controller_subs.publish(&Some(candidate));
                Ok(candidate)
            }
        }
    }

    async fn resign(&self, candidate: BrokerId) -> Result<()> {
        let mut live = self.live();
        if matches!(live.controller, Some((holder, _)) if holder == candidate) {
            live.controller = None;
            live.controller_subs.publish(&None);
        }
        Ok(())
    }

    async fn controller(&self) -> Result<Option<BrokerId>> {
        Ok(self.live().controller.map(|(b, _)| b))
    }

    async fn watch_controller(&self) -> Result<Watch<Option<BrokerId>>> {
        let mut live = self.live();
        let now = live.controller.map(|(b, _)| b);
        Ok(live.controller_subs.subscribe_with(now))
    }
}

// ---- WAL replica sets ----

fn read_wal_replica_set(
    t: &impl ReadableTable<i32, &'static [u8]>,
    broker: BrokerId,
) -> Result<Option<WalReplicaSet>> {
    match t.get(broker).map_err(storage)? {
        Some(v) => Ok(Some(decode(&format!("wal_replicas/{broker}"), v.value())?)),
        None => Ok(None),
    }
}

// ---- end WAL replica sets ----

fn read_group(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
    group_id: &str,
) -> Result<Option<GroupRecord>> {
    match t.get(group_id).map_err(storage)? {
        Some(v) => {
            let key = format!("groups/{group_id}");
            let stored: StoredGroup = decode(&key, v.value())?;
            Ok(Some(stored.into_record(group_id, &key)?))
        }
        None => Ok(None),
    }
}

fn delete_group_offsets(t: &mut redb::Table<&[u8], &[u8]>, group_id: &str) -> Result<()> {
    let prefix = group_prefix(group_id);
    match prefix_end(&prefix) {
        Some(end) => t.retain_in(prefix.as_slice()..end.as_slice(), |_, _| false),
        None => t.retain_in(prefix.as_slice().., |_, _| false),
    }
    .map_err(storage)
}
