//! [`MetadataStore`] for [`EtcdStore`]: each operation as reads plus one compare-and-swap
//! transaction, retried as a whole by [`EtcdStore::call`].

use super::{is_lease_not_found, Attempt, EtcdStore};
use crate::catalog::{CatalogCommit, CatalogEntry, CatalogReplace};
use crate::error::{Error, Result};
use crate::group::{validate_group_id, CommittedOffset, GroupRecord};
use crate::keys::{self, prefix_end, topic::TopicRecord};
use crate::store::{BrokerRegistration, Lease, LeaseId, MetadataStore, LEASE_TTL_MIN};
use crate::topic::{
    validate_partition_count, validate_topic_name, PartitionState, TopicConfigs, TopicMetadata,
    TopicSpec,
};
use crate::types::{BrokerId, Offset, PartitionId, TopicId, TopicPartition};
use crate::wal_replicas::WalReplicaSet;
use crate::watch::{BrokerEvent, TopicEvent, Watch};
use bytes::Bytes;
use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, GetResponse, KeyValue, PutOptions,
    SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// Most operations put in one etcd transaction: etcd's default `--max-txn-ops` is 128.
const TXN_OPS_MAX: usize = 128;
/// How many times a compare-and-swap that lost to an unrelated change is re-read and
/// re-tried before reporting a conflict.
const CAS_ATTEMPTS: usize = 16;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn prefix_opts(prefix: &str) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_range(prefix_end(prefix.as_bytes()).unwrap_or_default())
}

fn delete_prefix(prefix: &str) -> DeleteOptions {
    DeleteOptions::new().with_range(prefix_end(prefix.as_bytes()).unwrap_or_default())
}

/// Compare that holds iff `key` is as it was read: same mod revision, or still absent.
fn unchanged(key: &str, kv: Option<&KeyValue>) -> Compare {
    match kv {
        Some(kv) => Compare::mod_revision(key, CompareOp::Equal, kv.mod_revision()),
        None => Compare::create_revision(key, CompareOp::Equal, 0),
    }
}

fn default_partition(partition: PartitionId, leader: BrokerId) -> PartitionState {
    PartitionState::new(partition, leader)
}

/// A placement needs at least one leader.
fn check_leaders(leaders: &[BrokerId]) -> Result<()> {
    if leaders.is_empty() {
        return Err(Error::InvalidRequest(
            "a placement needs at least one leader".into(),
        ));
    }
    Ok(())
}

fn leader_of(leaders: &[BrokerId], partition: PartitionId) -> BrokerId {
    crate::topic::placed_leader(leaders, partition).expect("leaders checked non-empty")
}

/// A topic record plus its stored partition states → the topic as callers see it.
fn assemble(
    root: &keys::Root,
    record: TopicRecord,
    partitions: &[KeyValue],
) -> Result<TopicMetadata> {
    let mut states: Vec<PartitionState> = record
        .initial_leaders
        .iter()
        .enumerate()
        .map(|(i, leader)| default_partition(i as PartitionId, *leader))
        .collect();
    for kv in partitions {
        let state = keys::partition::deser_value(kv.key(), kv.value())?;
        if keys::partition::deser_key(root, kv.key())? != record.topic_id {
            continue;
        }
        if let Some(slot) = usize::try_from(state.partition)
            .ok()
            .and_then(|i| states.get_mut(i))
        {
            *slot = state;
        }
    }
    Ok(TopicMetadata {
        name: record.name,
        topic_id: record.topic_id,
        replication_factor: record.replication_factor,
        configs: record.configs,
        partitions: states,
        created_at_ms: record.created_at_ms,
    })
}

fn first(resp: &GetResponse) -> Option<&KeyValue> {
    resp.kvs().first()
}

fn revision(resp: &GetResponse) -> i64 {
    resp.header().map(|h| h.revision()).unwrap_or(0)
}

/// Runs read-only gets as transactions of at most [`TXN_OPS_MAX`] each, concurrently.
/// (A transaction's reads are one consistent snapshot; chunks are not, which the catalog
/// commit does not need: its compare-and-swap re-checks everything it relied on.)
async fn batch_get(
    client: &Client,
    gets: Vec<(String, Option<GetOptions>)>,
) -> std::result::Result<Vec<GetResponse>, Attempt> {
    let mut chunks = Vec::new();
    let mut iter = gets.into_iter().peekable();
    while iter.peek().is_some() {
        let ops: Vec<TxnOp> = iter
            .by_ref()
            .take(TXN_OPS_MAX)
            .map(|(k, o)| TxnOp::get(k, o))
            .collect();
        let mut c = client.clone();
        chunks.push(async move { c.txn(Txn::new().and_then(ops)).await });
    }
    let mut out = Vec::new();
    for r in futures::future::join_all(chunks).await {
        for op in r?.op_responses() {
            match op {
                TxnOpResponse::Get(g) => out.push(g),
                _ => {
                    return Err(Attempt::Done(Error::Storage(
                        "etcd answered a get with something else".into(),
                    )))
                }
            }
        }
    }
    Ok(out)
}

impl EtcdStore {
    /// A topic by name, with its partition states read at the same revision; also the topic
    /// key's state (for compare-and-swap).
    async fn read_topic(
        &self,
        c: &mut Client,
        name: &str,
    ) -> std::result::Result<Option<(TopicMetadata, KeyValue)>, Attempt> {
        let root = &self.root;
        let resp = c.get(keys::topic::ser_key(root, name), None).await?;
        let Some(kv) = first(&resp).cloned() else {
            return Ok(None);
        };
        let record = keys::topic::deser_value(kv.key(), kv.value())?;
        let prefix = keys::partition::topic_prefix(root, record.topic_id);
        let parts = c
            .get(
                prefix.clone(),
                Some(prefix_opts(&prefix).with_revision(revision(&resp))),
            )
            .await?;
        Ok(Some((assemble(root, record, parts.kvs())?, kv)))
    }

    async fn name_of(
        &self,
        c: &mut Client,
        topic_id: TopicId,
    ) -> std::result::Result<Option<(String, KeyValue)>, Attempt> {
        let resp = c
            .get(keys::topic_id::ser_key(&self.root, topic_id), None)
            .await?;
        match first(&resp) {
            Some(kv) => Ok(Some((
                keys::topic_id::deser_value(kv.key(), kv.value())?,
                kv.clone(),
            ))),
            None => Ok(None),
        }
    }

    async fn last_entry(
        &self,
        c: &mut Client,
        topic_id: TopicId,
        partition: PartitionId,
    ) -> std::result::Result<Option<CatalogEntry>, Attempt> {
        let prefix = keys::catalog::partition_prefix(&self.root, topic_id, partition);
        let resp = c.get(prefix.clone(), Some(last_opts(&prefix))).await?;
        match first(&resp) {
            Some(kv) => Ok(Some(keys::catalog::deser_value(kv.key(), kv.value())?)),
            None => Ok(None),
        }
    }

    async fn put_lease_bound(
        &self,
        what: &str,
        key: String,
        value: Vec<u8>,
        lease: LeaseId,
    ) -> Result<()> {
        self.call(what, |mut c| {
            let (key, value) = (key.clone(), value.clone());
            async move {
                match c
                    .put(key, value, Some(PutOptions::new().with_lease(lease)))
                    .await
                {
                    Ok(_) => Ok(()),
                    Err(e) if is_lease_not_found(&e) => Err(Error::LeaseExpired(lease).into()),
                    Err(e) => Err(e.into()),
                }
            }
        })
        .await
    }

    /// One commit attempt: reads, checks, then one transaction. `Ok(false)`: the
    /// transaction's compares failed (something changed since the reads); read again.
    async fn try_commit_catalog(
        &self,
        c: &mut Client,
        commit: &CatalogCommit,
    ) -> std::result::Result<bool, Attempt> {
        let root = &self.root;
        // What the commit touches.
        let mut topics: BTreeSet<TopicId> = BTreeSet::new();
        let mut partitions: BTreeSet<TopicPartition> = BTreeSet::new();
        for f in &commit.fences {
            topics.insert(f.topic_partition.topic_id);
            partitions.insert(f.topic_partition);
        }
        for e in &commit.entries {
            topics.insert(e.topic_id);
            partitions.insert(e.topic_partition());
        }
        let topics: Vec<TopicId> = topics.into_iter().collect();
        let partitions: Vec<TopicPartition> = partitions.into_iter().collect();
        let mut gets = Vec::new();
        for t in &topics {
            gets.push((keys::topic_id::ser_key(root, *t), None));
        }
        for tp in &partitions {
            gets.push((
                keys::partition::ser_key(root, tp.topic_id, tp.partition),
                None,
            ));
            let prefix = keys::catalog::partition_prefix(root, tp.topic_id, tp.partition);
            gets.push((prefix.clone(), Some(last_opts(&prefix))));
        }
        let resps = batch_get(c, gets).await?;
        let mut resps = resps.into_iter();
        let mut next = || {
            resps
                .next()
                .ok_or_else(|| Attempt::Done(Error::Storage("etcd answered too few gets".into())))
        };
        let mut names: HashMap<TopicId, (String, KeyValue)> = HashMap::new();
        for t in &topics {
            let r = next()?;
            if let Some(kv) = first(&r) {
                let name = keys::topic_id::deser_value(kv.key(), kv.value())?;
                names.insert(*t, (name, kv.clone()));
            }
        }
        let mut states: HashMap<TopicPartition, Option<KeyValue>> = HashMap::new();
        let mut lasts: HashMap<TopicPartition, Option<CatalogEntry>> = HashMap::new();
        for tp in &partitions {
            let state = next()?;
            states.insert(*tp, first(&state).cloned());
            let last = next()?;
            let last = match first(&last) {
                Some(kv) => Some(keys::catalog::deser_value(kv.key(), kv.value())?),
                None => None,
            };
            lasts.insert(*tp, last);
        }

        // Fences: every partition still at the writer's epoch (a deleted topic is skipped:
        // its data goes with it).
        let mut compares = Vec::new();
        for t in &topics {
            if let Some((_, kv)) = names.get(t) {
                compares.push(unchanged(&keys::topic_id::ser_key(root, *t), Some(kv)));
            }
        }
        for f in &commit.fences {
            let tp = f.topic_partition;
            let Some((name, _)) = names.get(&tp.topic_id) else {
                continue;
            };
            let kv = states.get(&tp).and_then(|s| s.as_ref());
            let current = match kv {
                Some(kv) => keys::partition::deser_value(kv.key(), kv.value())?.leader_epoch,
                None => 0,
            };
            if current != f.leader_epoch {
                return Err(Error::Fenced {
                    topic_partition: format!("{name}-{}", tp.partition),
                    current,
                    held: f.leader_epoch,
                }
                .into());
            }
            compares.push(unchanged(
                &keys::partition::ser_key(root, tp.topic_id, tp.partition),
                kv,
            ));
        }
        // Entries: contiguous with the partition's end, or (a retry whose first attempt
        // landed) already there, identical. Only an entry that does not continue the log
        // costs a read of its own key, so the common commit reads nothing per entry.
        let mut puts = Vec::new();
        for e in &commit.entries {
            if !names.contains_key(&e.topic_id) {
                continue;
            }
            if e.last_offset < e.base_offset {
                return Err(Error::InvalidRequest(format!(
                    "catalog entry with last offset {} before base offset {}",
                    e.last_offset, e.base_offset
                ))
                .into());
            }
            let key = keys::catalog::ser_key(root, e.topic_id, e.partition, e.base_offset);
            let last = lasts.entry(e.topic_partition()).or_default();
            if let Some(l) = last {
                if e.base_offset != l.next_offset() {
                    let stored = c.get(key.clone(), None).await?;
                    match first(&stored) {
                        Some(kv) if keys::catalog::deser_value(kv.key(), kv.value())? == *e => {
                            continue;
                        }
                        Some(_) => {
                            return Err(
                                Error::Conflict(format!("{key} holds a different entry")).into()
                            )
                        }
                        None => {
                            return Err(Error::Conflict(format!(
                            "catalog for {}-{} ends at offset {} but the new entry starts at {}",
                            e.topic_id, e.partition, l.last_offset, e.base_offset
                        ))
                            .into())
                        }
                    }
                }
            }
            *last = Some(e.clone());
            puts.push(TxnOp::put(key, keys::catalog::ser_value(e)?, None));
        }
        if puts.is_empty() {
            return Ok(true);
        }
        if compares.len() > TXN_OPS_MAX || puts.len() > TXN_OPS_MAX {
            return Err(Error::InvalidRequest(format!(
                "a catalog commit of {} entries and {} fences exceeds etcd's {TXN_OPS_MAX} operations per transaction",
                puts.len(),
                compares.len()
            ))
            .into());
        }
        let resp = c.txn(Txn::new().when(compares).and_then(puts)).await?;
        Ok(resp.succeeded())
    }
}

fn last_opts(prefix: &str) -> GetOptions {
    prefix_opts(prefix)
        .with_sort(SortTarget::Key, SortOrder::Descend)
        .with_limit(1)
}

// ---- segment catalog: compaction (replace_catalog_entries) ----

impl EtcdStore {
    /// One replace attempt: one snapshot read, checks, then one transaction. `Ok(false)`:
    /// the transaction's compares failed (something changed since the read); read again.
    async fn try_replace_catalog(
        &self,
        c: &mut Client,
        r: &CatalogReplace,
    ) -> std::result::Result<bool, Attempt> {
        let root = &self.root;
        let tp = r.fence.topic_partition;
        let id_key = keys::topic_id::ser_key(root, tp.topic_id);
        let part_key = keys::partition::ser_key(root, tp.topic_id, tp.partition);
        // Every key of the run (old or new) lies in [base, last]; no other does.
        let first_key = keys::catalog::ser_key(root, tp.topic_id, tp.partition, r.base_offset());
        let last_key = keys::catalog::ser_key(root, tp.topic_id, tp.partition, r.last_offset());
        let mut range_end = last_key.into_bytes();
        range_end.push(0);
        // One more than either side holds, so an extra stored key shows.
        let limit = r.old.len().max(r.new.len()) + 1;
        let read = c
            .txn(
                Txn::new().and_then([
                    TxnOp::get(id_key.clone(), None),
                    TxnOp::get(part_key.clone(), None),
                    TxnOp::get(
                        first_key.clone(),
                        Some(
                            GetOptions::new()
                                .with_range(range_end.clone())
                                .with_limit(limit as i64),
                        ),
                    ),
                ]),
            )
            .await?;
        let revision = read.header().map(|h| h.revision()).unwrap_or(0);
        let mut gets = read.op_responses().into_iter().map(|op| match op {
            TxnOpResponse::Get(g) => Ok(g),
            _ => Err(Attempt::Done(Error::Storage(
                "etcd answered a get with something else".into(),
            ))),
        });
        let mut next = || {
            gets.next().unwrap_or_else(|| {
                Err(Attempt::Done(Error::Storage(
                    "etcd answered too few gets".into(),
                )))
            })
        };
        let (id, part, run) = (next()?, next()?, next()?);
        let Some(id_kv) = first(&id) else {
            return Err(Error::UnknownTopic(tp.topic_id.to_string()).into());
        };
        let name = keys::topic_id::deser_value(id_kv.key(), id_kv.value())?;
        let part_kv = first(&part);
        let current = match part_kv {
            Some(kv) => keys::partition::deser_value(kv.key(), kv.value())?.leader_epoch,
            None => 0,
        };
        if current != r.fence.leader_epoch {
            return Err(Error::Fenced {
                topic_partition: format!("{name}-{}", tp.partition),
                current,
                held: r.fence.leader_epoch,
            }
            .into());
        }
        let mut stored = Vec::with_capacity(run.kvs().len());
        for kv in run.kvs() {
            stored.push(keys::catalog::deser_value(kv.key(), kv.value())?);
        }
        if stored == r.new {
            // A retry whose first attempt landed.
            return Ok(true);
        }
        let (Some(first_kv), Some(last_kv)) = (run.kvs().first(), run.kvs().last()) else {
            return Err(Error::Conflict(format!(
                "catalog run {name}-{} offsets {}..={} is gone",
                tp.partition,
                r.base_offset(),
                r.last_offset()
            ))
            .into());
        };
        if stored != r.old {
            return Err(Error::Conflict(format!(
                "catalog run {name}-{} offsets {}..={} is not the one to replace (stored: {} entries, expected {})",
                tp.partition,
                r.base_offset(),
                r.last_offset(),
                stored.len(),
                r.old.len()
            ))
            .into());
        }
        // The run is exactly `old` at `revision`. It is still exactly `old` at commit if no
        // key in its range was created or changed since (one range compare, whatever the
        // run's length) and its first and last keys are still there: every way an entry
        // leaves the catalog (retention from the front, another replace, which puts a key
        // at its own run's start, topic deletion) removes one of them or adds a key inside
        // the range.
        let compares = vec![
            unchanged(&id_key, Some(id_kv)),
            unchanged(&part_key, part_kv),
            Compare::mod_revision(first_key.clone(), CompareOp::Less, revision + 1)
                .with_range(range_end.clone()),
            Compare::mod_revision(first_kv.key(), CompareOp::Equal, first_kv.mod_revision()),
            Compare::mod_revision(last_kv.key(), CompareOp::Equal, last_kv.mod_revision()),
        ];
        // The old run goes in DeleteRanges, whatever its length: etcd refuses a put inside
        // a range deleted by the same transaction, so the ranges are the gaps between the
        // new entries' keys (which the puts overwrite): (new[i], new[i+1]) and
        // (new[last], run end].
        let mut ops = Vec::with_capacity(2 * r.new.len());
        for (i, e) in r.new.iter().enumerate() {
            let key = keys::catalog::ser_key(root, e.topic_id, e.partition, e.base_offset);
            let mut after = key.clone().into_bytes();
            after.push(0);
            let gap_end = match r.new.get(i + 1) {
                Some(n) => keys::catalog::ser_key(root, n.topic_id, n.partition, n.base_offset)
                    .into_bytes(),
                None => range_end.clone(),
            };
            ops.push(TxnOp::put(key, keys::catalog::ser_value(e)?, None));
            ops.push(TxnOp::delete(
                after,
                Some(DeleteOptions::new().with_range(gap_end)),
            ));
        }
        let resp = c.txn(Txn::new().when(compares).and_then(ops)).await?;
        Ok(resp.succeeded())
    }
}

// ---- end of replace_catalog_entries helpers ----

fn lease_ttl_secs(ttl: Duration) -> Result<i64> {
    if ttl < LEASE_TTL_MIN {
        return Err(Error::InvalidRequest(format!(
            "lease TTL {ttl:?} is shorter than the minimum {LEASE_TTL_MIN:?}"
        )));
    }
    // etcd counts whole seconds; round up so the lease never lives shorter than asked.
    Ok(ttl.as_secs() as i64 + i64::from(ttl.subsec_nanos() > 0))
}

#[async_trait::async_trait]
impl MetadataStore for EtcdStore {
    async fn register_broker(&self, broker: BrokerRegistration, ttl: Duration) -> Result<Lease> {
        let secs = lease_ttl_secs(ttl)?;
        let id = self
            .call("grant lease", |mut c| async move {
                Ok(c.lease_grant(secs, None).await?.id())
            })
            .await?;
        let key = keys::broker::ser_key(&self.root, broker.broker_id);
        let value = keys::broker::ser_value(&broker)?;
        self.put_lease_bound("register broker", key, value, id)
            .await?;
        Ok(Lease {
            id,
            ttl: Duration::from_secs(secs as u64),
        })
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration> {
        self.call("keep lease alive", |mut c| async move {
            let (mut keeper, mut stream) = match c.lease_keep_alive(lease).await {
                Ok(k) => k,
                Err(e) if is_lease_not_found(&e) => return Err(Error::LeaseExpired(lease).into()),
                Err(e) => return Err(e.into()),
            };
            // The first keep-alive went out with the stream and was answered; this second
            // one reads the TTL etcd now holds (0 if the lease just expired).
            keeper.keep_alive().await?;
            match stream.message().await? {
                Some(r) if r.ttl() > 0 => Ok(Duration::from_secs(r.ttl() as u64)),
                _ => Err(Error::LeaseExpired(lease).into()),
            }
        })
        .await
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        self.call("revoke lease", |mut c| async move {
            match c.lease_revoke(lease).await {
                Ok(_) => Ok(()),
                Err(e) if is_lease_not_found(&e) => Ok(()),
                Err(e) => Err(e.into()),
            }
        })
        .await
    }

    async fn list_brokers(&self) -> Result<Vec<BrokerRegistration>> {
        let prefix = keys::broker::prefix(&self.root);
        self.call("list brokers", |mut c| {
            let prefix = prefix.clone();
            async move {
                let resp = c.get(prefix.clone(), Some(prefix_opts(&prefix))).await?;
                let mut out = Vec::new();
                for kv in resp.kvs() {
                    out.push(keys::broker::deser_value(kv.key(), kv.value())?);
                }
                Ok(out)
            }
        })
        .await
    }

    async fn watch_brokers(&self) -> Result<Watch<BrokerEvent>> {
        self.subscribe_brokers().await
    }

    async fn create_topic_with_leaders(
        &self,
        spec: TopicSpec,
        leaders: &[BrokerId],
    ) -> Result<TopicMetadata> {
        validate_topic_name(&spec.name)?;
        validate_partition_count(spec.partitions)?;
        let configs = TopicConfigs::validated(spec.configs.clone())?;
        check_leaders(leaders)?;
        let topic = TopicMetadata {
            name: spec.name.clone(),
            topic_id: TopicId::new_random(),
            replication_factor: spec.replication_factor,
            configs,
            partitions: (0..spec.partitions)
                .map(|p| default_partition(p, leader_of(leaders, p)))
                .collect(),
            created_at_ms: now_ms(),
        };
        let root = &self.root;
        let topic_key = keys::topic::ser_key(root, &topic.name);
        let record = keys::topic::ser_value(&TopicRecord::from_metadata(&topic))?;
        let id_key = keys::topic_id::ser_key(root, topic.topic_id);
        let id_value = keys::topic_id::ser_value(&topic.name)?;
        self.call("create topic", |mut c| {
            let txn = Txn::new().when([unchanged(&topic_key, None)]).and_then([
                TxnOp::put(topic_key.clone(), record.clone(), None),
                TxnOp::put(id_key.clone(), id_value.clone(), None),
            ]);
            let name = topic.name.clone();
            async move {
                if c.txn(txn).await?.succeeded() {
                    Ok(())
                } else {
                    Err(Error::TopicExists(name).into())
                }
            }
        })
        .await?;
        Ok(topic)
    }

    async fn delete_topic(&self, name: &str) -> Result<TopicMetadata> {
        let root = &self.root;
        self.call("delete topic", |mut c| async move {
            for _ in 0..CAS_ATTEMPTS {
                let Some((topic, kv)) = self.read_topic(&mut c, name).await? else {
                    return Err(Error::UnknownTopic(name.to_string()).into());
                };
                let topic_key = keys::topic::ser_key(root, name);
                let parts = keys::partition::topic_prefix(root, topic.topic_id);
                let catalog = keys::catalog::topic_prefix(root, topic.topic_id);
                let txn = Txn::new()
                    .when([unchanged(&topic_key, Some(&kv))])
                    .and_then([
                        TxnOp::delete(topic_key.clone(), None),
                        TxnOp::delete(keys::topic_id::ser_key(root, topic.topic_id), None),
                        TxnOp::delete(parts.clone(), Some(delete_prefix(&parts))),
                        TxnOp::delete(catalog.clone(), Some(delete_prefix(&catalog))),
                    ]);
                if c.txn(txn).await?.succeeded() {
                    return Ok(topic);
                }
            }
            Err(Error::Conflict(format!("topic '{name}'")).into())
        })
        .await
    }

    async fn list_topics(&self) -> Result<Vec<TopicMetadata>> {
        let root = &self.root;
        self.call("list topics", |mut c| async move {
            let prefix = keys::topic::prefix(root);
            let topics = c.get(prefix.clone(), Some(prefix_opts(&prefix))).await?;
            let parts_prefix = keys::partition::prefix(root);
            let parts = c
                .get(
                    parts_prefix.clone(),
                    Some(prefix_opts(&parts_prefix).with_revision(revision(&topics))),
                )
                .await?;
            let mut by_topic: HashMap<TopicId, Vec<KeyValue>> = HashMap::new();
            for kv in parts.kvs() {
                let id = keys::partition::deser_key(root, kv.key())?;
                by_topic.entry(id).or_default().push(kv.clone());
            }
            let mut out = Vec::new();
            for kv in topics.kvs() {
                let record = keys::topic::deser_value(kv.key(), kv.value())?;
                let parts = by_topic.remove(&record.topic_id).unwrap_or_default();
                out.push(assemble(root, record, &parts)?);
            }
            Ok(out)
        })
        .await
    }

    async fn topic(&self, name: &str) -> Result<Option<TopicMetadata>> {
        self.call("read topic", |mut c| async move {
            Ok(self.read_topic(&mut c, name).await?.map(|(t, _)| t))
        })
        .await
    }

    async fn topic_by_id(&self, topic_id: TopicId) -> Result<Option<TopicMetadata>> {
        self.call("read topic by id", |mut c| async move {
            let Some((name, _)) = self.name_of(&mut c, topic_id).await? else {
                return Ok(None);
            };
            Ok(self
                .read_topic(&mut c, &name)
                .await?
                .map(|(t, _)| t)
                .filter(|t| t.topic_id == topic_id))
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
        check_leaders(leaders)?;
        let root = &self.root;
        self.call("create partitions", |mut c| async move {
            for _ in 0..CAS_ATTEMPTS {
                let Some((mut topic, kv)) = self.read_topic(&mut c, name).await? else {
                    return Err(Error::UnknownTopic(name.to_string()).into());
                };
                let current = topic.partitions.len() as i32;
                if total <= current {
                    return Err(Error::InvalidPartitions {
                        count: total,
                        reason: format!("topic '{name}' already has {current} partitions; partitions can only be added"),
                    }
                    .into());
                }
                topic
                    .partitions
                    .extend((current..total).map(|p| default_partition(p, leader_of(leaders, p))));
                let key = keys::topic::ser_key(root, name);
                let value = keys::topic::ser_value(&TopicRecord {
                    initial_leaders: {
                        let mut l = keys::topic::deser_value(kv.key(), kv.value())?.initial_leaders;
                        l.extend((current..total).map(|p| leader_of(leaders, p)));
                        l
                    },
                    ..TopicRecord::from_metadata(&topic)
                })?;
                let txn = Txn::new()
                    .when([unchanged(&key, Some(&kv))])
                    .and_then([TxnOp::put(key.clone(), value, None)]);
                if c.txn(txn).await?.succeeded() {
                    return Ok(topic);
                }
            }
            Err(Error::Conflict(format!("topic '{name}'")).into())
        })
        .await
    }

    async fn update_partition(
        &self,
        topic_id: TopicId,
        expected_version: u64,
        new: PartitionState,
    ) -> Result<PartitionState> {
        let root = &self.root;
        let new = &new;
        self.call("update partition", |mut c| async move {
            for _ in 0..CAS_ATTEMPTS {
                let Some((name, id_kv)) = self.name_of(&mut c, topic_id).await? else {
                    return Err(Error::UnknownTopic(topic_id.to_string()).into());
                };
                let Some((topic, _)) = self.read_topic(&mut c, &name).await? else {
                    return Err(Error::UnknownTopic(name).into());
                };
                if topic.partition(new.partition).is_none() {
                    return Err(Error::UnknownPartition {
                        topic: name,
                        partition: new.partition,
                    }
                    .into());
                }
                // The version compared is the one of the very key state the transaction's
                // compare pins (absent: never changed, version 0).
                let key = keys::partition::ser_key(root, topic_id, new.partition);
                let stored = c.get(key.clone(), None).await?;
                let current_version = match first(&stored) {
                    Some(kv) => keys::partition::deser_value(kv.key(), kv.value())?.version,
                    None => 0,
                };
                if current_version != expected_version {
                    return Err(Error::Conflict(format!(
                        "partition {name}-{} (version {current_version} != expected {expected_version})",
                        new.partition
                    ))
                    .into());
                }
                let updated = PartitionState {
                    version: expected_version + 1,
                    ..new.clone()
                };
                let txn = Txn::new()
                    .when([
                        unchanged(&key, first(&stored)),
                        unchanged(&keys::topic_id::ser_key(root, topic_id), Some(&id_kv)),
                    ])
                    .and_then([TxnOp::put(
                        key.clone(),
                        keys::partition::ser_value(&updated)?,
                        None,
                    )]);
                if c.txn(txn).await?.succeeded() {
                    return Ok(updated);
                }
            }
            Err(Error::Conflict(format!("partition {topic_id}-{}", new.partition)).into())
        })
        .await
    }

    async fn watch_topics(&self) -> Result<Watch<TopicEvent>> {
        self.subscribe_topics().await
    }

    async fn allocate_producer_ids(&self, count: u32) -> Result<i64> {
        let key = keys::counter::ser_key(&self.root, keys::counter::PRODUCER_ID);
        let key = &key;
        self.call("allocate producer ids", |mut c| async move {
            for _ in 0..CAS_ATTEMPTS {
                let resp = c.get(key.clone(), None).await?;
                let kv = first(&resp);
                let next = match kv {
                    Some(kv) => keys::counter::deser_value(kv.key(), kv.value())?,
                    None => 0,
                };
                let txn = Txn::new().when([unchanged(key, kv)]).and_then([TxnOp::put(
                    key.clone(),
                    keys::counter::ser_value(next + u64::from(count))?,
                    None,
                )]);
                if c.txn(txn).await?.succeeded() {
                    return i64::try_from(next)
                        .map_err(|_| Error::Storage("producer ids exhausted".into()).into());
                }
            }
            Err(Error::Conflict("producer id counter".into()).into())
        })
        .await
    }

    async fn commit_catalog(&self, commit: CatalogCommit) -> Result<()> {
        let commit = &commit;
        self.call("commit catalog", |mut c| async move {
            for _ in 0..CAS_ATTEMPTS {
                if self.try_commit_catalog(&mut c, commit).await? {
                    return Ok(());
                }
            }
            Err(Error::Conflict("catalog commit kept losing to concurrent changes".into()).into())
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
        let root = &self.root;
        self.call("read catalog", |mut c| async move {
            let prefix = keys::catalog::partition_prefix(root, topic_id, partition);
            let from_key = keys::catalog::ser_key(root, topic_id, partition, from_offset.max(0));
            // The entry that contains `from_offset` starts at or before it.
            let mut before_end = from_key.clone().into_bytes();
            before_end.push(0);
            let before = c
                .get(
                    prefix.clone(),
                    Some(
                        GetOptions::new()
                            .with_range(before_end)
                            .with_sort(SortTarget::Key, SortOrder::Descend)
                            .with_limit(1),
                    ),
                )
                .await?;
            let start = first(&before)
                .map(|kv| kv.key().to_vec())
                .unwrap_or_else(|| prefix.clone().into_bytes());
            let resp = c
                .get(
                    start,
                    Some(
                        GetOptions::new()
                            .with_range(prefix_end(prefix.as_bytes()).unwrap_or_default())
                            .with_limit(limit.saturating_add(1) as i64),
                    ),
                )
                .await?;
            let mut out = Vec::new();
            for kv in resp.kvs() {
                if out.len() >= limit {
                    break;
                }
                let e = keys::catalog::deser_value(kv.key(), kv.value())?;
                if e.last_offset >= from_offset {
                    out.push(e);
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
        self.call("read catalog end", |mut c| async move {
            self.last_entry(&mut c, topic_id, partition).await
        })
        .await
    }

    async fn catalog_find_timestamp(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
        timestamp_ms: i64,
    ) -> Result<Option<CatalogEntry>> {
        let root = &self.root;
        self.call("find catalog by time", |mut c| async move {
            // A linear scan, as in the embedded backend: the compaction issue adds a time
            // index once catalogs are compacted into few large segments.
            let prefix = keys::catalog::partition_prefix(root, topic_id, partition);
            let resp = c.get(prefix.clone(), Some(prefix_opts(&prefix))).await?;
            for kv in resp.kvs() {
                let e = keys::catalog::deser_value(kv.key(), kv.value())?;
                if e.max_timestamp_ms >= timestamp_ms {
                    return Ok(Some(e));
                }
            }
            Ok(None)
        })
        .await
    }

    // ---- segment catalog: compaction (replace_catalog_entries) ----

    async fn replace_catalog_entries(&self, replace: CatalogReplace) -> Result<()> {
        // Validation caps the new entries at REPLACE_NEW_ENTRIES_MAX: each is one put plus
        // one DeleteRange (see `try_replace_catalog`), within TXN_OPS_MAX.
        replace.validate()?;
        let replace = &replace;
        self.call("replace catalog entries", |mut c| async move {
            for _ in 0..CAS_ATTEMPTS {
                if self.try_replace_catalog(&mut c, replace).await? {
                    return Ok(());
                }
            }
            Err(Error::Conflict("catalog replace kept losing to concurrent changes".into()).into())
        })
        .await
    }

    // ---- end of replace_catalog_entries ----

    async fn commit_offsets(&self, group_id: &str, offsets: Vec<CommittedOffset>) -> Result<()> {
        validate_group_id(group_id)?;
        let root = &self.root;
        let mut puts = Vec::with_capacity(offsets.len());
        for o in &offsets {
            puts.push(TxnOp::put(
                keys::offset::ser_key(root, group_id, &o.topic, o.partition),
                keys::offset::ser_value(o)?,
                None,
            ));
        }
        // One transaction per TXN_OPS_MAX partitions: a larger commit is atomic per chunk
        // only (each partition's offset is still written whole).
        let puts = &puts;
        self.call("commit offsets", |c| async move {
            let txns = puts.chunks(TXN_OPS_MAX).map(|ops| {
                let mut c = c.clone();
                let txn = Txn::new().and_then(ops.to_vec());
                async move { c.txn(txn).await }
            });
            for r in futures::future::join_all(txns).await {
                r?;
            }
            Ok(())
        })
        .await
    }

    async fn fetch_offsets(&self, group_id: &str) -> Result<Vec<CommittedOffset>> {
        let prefix = keys::offset::group_prefix(&self.root, group_id);
        let prefix = &prefix;
        self.call("fetch offsets", |mut c| async move {
            let resp = c.get(prefix.clone(), Some(prefix_opts(prefix))).await?;
            let mut out: Vec<CommittedOffset> = Vec::new();
            for kv in resp.kvs() {
                out.push(keys::offset::deser_value(kv.key(), kv.value())?);
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
        let root = &self.root;
        let ops: Vec<TxnOp> = match &partitions {
            None => {
                let prefix = keys::offset::group_prefix(root, group_id);
                vec![TxnOp::delete(prefix.clone(), Some(delete_prefix(&prefix)))]
            }
            Some(list) => list
                .iter()
                .map(|(t, p)| TxnOp::delete(keys::offset::ser_key(root, group_id, t, *p), None))
                .collect(),
        };
        let ops = &ops;
        self.call("delete offsets", |c| async move {
            for chunk in ops.chunks(TXN_OPS_MAX) {
                c.clone().txn(Txn::new().and_then(chunk.to_vec())).await?;
            }
            Ok(())
        })
        .await
    }

    async fn group(&self, group_id: &str) -> Result<Option<GroupRecord>> {
        let key = keys::group::ser_key(&self.root, group_id);
        let key = &key;
        self.call("read group", |mut c| async move {
            let resp = c.get(key.clone(), None).await?;
            match first(&resp) {
                Some(kv) => Ok(Some(keys::group::deser_value(
                    group_id,
                    kv.key(),
                    kv.value(),
                )?)),
                None => Ok(None),
            }
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
        let key = keys::group::ser_key(&self.root, group_id);
        let (key, data) = (&key, &data);
        self.call("write group", |mut c| async move {
            for _ in 0..CAS_ATTEMPTS {
                let resp = c.get(key.clone(), None).await?;
                let kv = first(&resp);
                let current = match kv {
                    Some(kv) => {
                        Some(keys::group::deser_value(group_id, kv.key(), kv.value())?.version)
                    }
                    None => None,
                };
                if current != expected_version {
                    return Err(Error::Conflict(format!(
                        "group '{group_id}' (version {current:?}, expected {expected_version:?})"
                    ))
                    .into());
                }
                let record = GroupRecord {
                    group_id: group_id.to_string(),
                    version: expected_version.unwrap_or(0) + 1,
                    data: data.clone(),
                };
                let txn = Txn::new().when([unchanged(key, kv)]).and_then([TxnOp::put(
                    key.clone(),
                    keys::group::ser_value(&record)?,
                    None,
                )]);
                if c.txn(txn).await?.succeeded() {
                    return Ok(record);
                }
            }
            Err(Error::Conflict(format!("group '{group_id}'")).into())
        })
        .await
    }

    async fn delete_group(&self, group_id: &str, expected_version: u64) -> Result<()> {
        let root = &self.root;
        let key = keys::group::ser_key(root, group_id);
        let offsets = keys::offset::group_prefix(root, group_id);
        let (key, offsets) = (&key, &offsets);
        self.call("delete group", |mut c| async move {
            for _ in 0..CAS_ATTEMPTS {
                let resp = c.get(key.clone(), None).await?;
                let Some(kv) = first(&resp) else {
                    return Err(Error::UnknownGroup(group_id.to_string()).into());
                };
                let current = keys::group::deser_value(group_id, kv.key(), kv.value())?.version;
                if current != expected_version {
                    return Err(Error::Conflict(format!(
                        "group '{group_id}' (version {current}, expected {expected_version})"
                    ))
                    .into());
                }
                let txn = Txn::new().when([unchanged(key, Some(kv))]).and_then([
                    TxnOp::delete(key.clone(), None),
                    TxnOp::delete(offsets.clone(), Some(delete_prefix(offsets))),
                ]);
                if c.txn(txn).await?.succeeded() {
                    return Ok(());
                }
            }
            Err(Error::Conflict(format!("group '{group_id}'")).into())
        })
        .await
    }

    async fn list_groups(&self) -> Result<Vec<String>> {
        let root = &self.root;
        self.call("list groups", |mut c| async move {
            let mut out = BTreeSet::new();
            let groups = keys::group::prefix(root);
            let resp = c
                .get(groups.clone(), Some(prefix_opts(&groups).with_keys_only()))
                .await?;
            for kv in resp.kvs() {
                out.insert(keys::group::deser_key(root, kv.key())?);
            }
            let offsets = keys::offset::prefix(root);
            let resp = c
                .get(
                    offsets.clone(),
                    Some(prefix_opts(&offsets).with_keys_only()),
                )
                .await?;
            for kv in resp.kvs() {
                out.insert(keys::offset::deser_key(root, kv.key())?);
            }
            Ok(out.into_iter().collect())
        })
        .await
    }

    // ---- WAL replica sets ----

    async fn wal_replica_set(&self, broker: BrokerId) -> Result<Option<WalReplicaSet>> {
        let key = keys::wal_replicas::ser_key(&self.root, broker);
        let key = &key;
        self.call("read WAL replica set", |mut c| async move {
            let resp = c.get(key.clone(), None).await?;
            match first(&resp) {
                Some(kv) => Ok(Some(keys::wal_replicas::deser_value(kv.key(), kv.value())?)),
                None => Ok(None),
            }
        })
        .await
    }

    async fn put_wal_replica_set(
        &self,
        set: WalReplicaSet,
        expected_version: Option<u64>,
    ) -> Result<WalReplicaSet> {
        set.validate()?;
        let broker = set.broker_id;
        let key = keys::wal_replicas::ser_key(&self.root, broker);
        let (key, set) = (&key, &set);
        self.call("write WAL replica set", |mut c| async move {
            for _ in 0..CAS_ATTEMPTS {
                let resp = c.get(key.clone(), None).await?;
                let kv = first(&resp);
                let current = match kv {
                    Some(kv) => Some(keys::wal_replicas::deser_value(kv.key(), kv.value())?.version),
                    None => None,
                };
                if current != expected_version {
                    return Err(Error::Conflict(format!(
                        "WAL replica set of broker {broker} (version {current:?}, expected {expected_version:?})"
                    ))
                    .into());
                }
                let stored = WalReplicaSet {
                    version: expected_version.unwrap_or(0) + 1,
                    ..set.clone()
                };
                let txn = Txn::new().when([unchanged(key, kv)]).and_then([TxnOp::put(
                    key.clone(),
                    keys::wal_replicas::ser_value(&stored)?,
                    None,
                )]);
                if c.txn(txn).await?.succeeded() {
                    return Ok(stored);
                }
            }
            Err(Error::Conflict(format!("WAL replica set of broker {broker}")).into())
        })
        .await
    }

    async fn delete_wal_replica_set(&self, broker: BrokerId, expected_version: u64) -> Result<()> {
        let key = keys::wal_replicas::ser_key(&self.root, broker);
        let key = &key;
        self.call("delete WAL replica set", |mut c| async move {
            for _ in 0..CAS_ATTEMPTS {
                let resp = c.get(key.clone(), None).await?;
                let Some(kv) = first(&resp) else {
                    return Err(Error::UnknownWalReplicaSet(broker).into());
                };
                let current = keys::wal_replicas::deser_value(kv.key(), kv.value())?.version;
                if current != expected_version {
                    return Err(Error::Conflict(format!(
                        "WAL replica set of broker {broker} (version {current}, expected {expected_version})"
                    ))
                    .into());
                }
                let txn = Txn::new()
                    .when([unchanged(key, Some(kv))])
                    .and_then([TxnOp::delete(key.clone(), None)]);
                if c.txn(txn).await?.succeeded() {
                    return Ok(());
                }
            }
            Err(Error::Conflict(format!("WAL replica set of broker {broker}")).into())
        })
        .await
    }

    // ---- end WAL replica sets ----

    async fn campaign(&self, candidate: BrokerId, lease: LeaseId) -> Result<BrokerId> {
        let key = keys::controller::ser_key(&self.root);
        let value = keys::controller::ser_value(candidate)?;
        let (key, value) = (&key, &value);
        self.call("campaign for controller", |mut c| async move {
            let txn = Txn::new()
                .when([unchanged(key, None)])
                .and_then([TxnOp::put(
                    key.clone(),
                    value.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )])
                .or_else([TxnOp::get(key.clone(), None)]);
            let resp = match c.txn(txn).await {
                Ok(r) => r,
                Err(e) if is_lease_not_found(&e) => return Err(Error::LeaseExpired(lease).into()),
                Err(e) => return Err(e.into()),
            };
            if resp.succeeded() {
                return Ok(candidate);
            }
            for op in resp.op_responses() {
                if let TxnOpResponse::Get(g) = op {
                    if let Some(kv) = first(&g) {
                        return Ok(keys::controller::deser_value(kv.key(), kv.value())?);
                    }
                }
            }
            // The holder vanished between compare and get: let the caller campaign again.
            Err(Error::Conflict("controller post changed during the campaign".into()).into())
        })
        .await
    }

    async fn resign(&self, candidate: BrokerId) -> Result<()> {
        let key = keys::controller::ser_key(&self.root);
        let value = keys::controller::ser_value(candidate)?;
        let (key, value) = (&key, &value);
        self.call("resign controller", |mut c| async move {
            let txn = Txn::new()
                .when([Compare::value(key.clone(), CompareOp::Equal, value.clone())])
                .and_then([TxnOp::delete(key.clone(), None)]);
            c.txn(txn).await?;
            Ok(())
        })
        .await
    }

    async fn controller(&self) -> Result<Option<BrokerId>> {
        let key = keys::controller::ser_key(&self.root);
        let key = &key;
        self.call("read controller", |mut c| async move {
            let resp = c.get(key.clone(), None).await?;
            match first(&resp) {
                Some(kv) => Ok(Some(keys::controller::deser_value(kv.key(), kv.value())?)),
                None => Ok(None),
            }
        })
        .await
    }

    async fn watch_controller(&self) -> Result<Watch<Option<BrokerId>>> {
        self.subscribe_controller().await
    }
}
