//! The segment catalog's rules over [`Kv`]: the epoch-fenced, idempotent, contiguous commit;
//! the compaction swap ([`CatalogReplace`]); and the lookups.
//!
//! Keys: `catalog/{topic_id}/{partition:010}/{base_offset:020}` ([`keys::catalog`]), so a
//! range scan walks a partition in offset order and its last entry is a reverse scan of
//! one key. Fencing compares each partition's state key (its leader epoch lives there, or
//! it is absent and the epoch is 0) and the topic-id key, so a commit fails if either
//! changed between its reads and its write.

use super::{first, KvStore, TXN_OPS_MAX};
use crate::catalog::{CatalogCommit, CatalogEntry, CatalogReplace};
use crate::error::{Error, Result};
use crate::keys;
use crate::kv::{CmpOp, Compare, Get, KeyRange, KeyValue, Kv, Op, Target, Txn};
use crate::types::{Offset, PartitionId, TopicId, TopicPartition};
use std::collections::{BTreeSet, HashMap};

fn decode(kv: &KeyValue) -> Result<CatalogEntry> {
    keys::catalog::deser_value(&kv.key, &kv.value)
}

fn last_of(prefix: String) -> Get {
    Get::prefix(prefix).reverse().limit(1)
}

impl<K: Kv> KvStore<K> {
    pub(super) async fn last_entry(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
    ) -> Result<Option<CatalogEntry>> {
        let prefix = keys::catalog::partition_prefix(&self.root, topic_id, partition);
        let resp = self.kv.range(last_of(prefix)).await?;
        first(&resp).map(decode).transpose()
    }

    pub(super) async fn read_catalog(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
        from_offset: Offset,
        limit: usize,
    ) -> Result<Vec<CatalogEntry>> {
        let root = &self.root;
        let prefix = keys::catalog::partition_prefix(root, topic_id, partition);
        let from_key = keys::catalog::ser_key(root, topic_id, partition, from_offset.max(0));
        // The entry that contains `from_offset` starts at or before it.
        let before = self
            .kv
            .range(
                Get::new(KeyRange::through(prefix.clone(), from_key))
                    .reverse()
                    .limit(1),
            )
            .await?;
        let start = first(&before)
            .map(|kv| kv.key.clone())
            .unwrap_or_else(|| prefix.clone().into_bytes());
        let mut range = KeyRange::prefix(prefix);
        range.start = start;
        let resp = self
            .kv
            .range(Get::new(range).limit(limit.saturating_add(1)))
            .await?;
        let mut out = Vec::new();
        for kv in &resp.kvs {
            if out.len() >= limit {
                break;
            }
            let e = decode(kv)?;
            if e.last_offset >= from_offset {
                out.push(e);
            }
        }
        Ok(out)
    }

    pub(super) async fn find_timestamp(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
        timestamp_ms: i64,
    ) -> Result<Option<CatalogEntry>> {
        // A linear scan: fine while catalogs are compacted into few large segments; the
        // compaction issue adds a time index.
        let prefix = keys::catalog::partition_prefix(&self.root, topic_id, partition);
        let resp = self.kv.range(Get::prefix(prefix)).await?;
        for kv in &resp.kvs {
            let e = decode(kv)?;
            if e.max_timestamp_ms >= timestamp_ms {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    /// One commit attempt: reads, checks, then one transaction. `Ok(false)`: the
    /// transaction's compares failed (something changed since the reads); read again.
    pub(super) async fn try_commit_catalog(&self, commit: &CatalogCommit) -> Result<bool> {
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
        let mut gets = Vec::new();
        for t in &topics {
            gets.push(Get::key(keys::topic_id::ser_key(root, *t)));
        }
        for tp in &partitions {
            gets.push(Get::key(keys::partition::ser_key(
                root,
                tp.topic_id,
                tp.partition,
            )));
            gets.push(last_of(keys::catalog::partition_prefix(
                root,
                tp.topic_id,
                tp.partition,
            )));
        }
        let mut resps = self.batch_get(gets).await?.into_iter();
        let mut next = || {
            resps
                .next()
                .ok_or_else(|| Error::Storage("a batch read answered too few gets".into()))
        };
        let mut names: HashMap<TopicId, (String, KeyValue)> = HashMap::new();
        for t in &topics {
            if let Some(kv) = first(&next()?) {
                let name = keys::topic_id::deser_value(&kv.key, &kv.value)?;
                names.insert(*t, (name, kv.clone()));
            }
        }
        let mut states: HashMap<TopicPartition, Option<KeyValue>> = HashMap::new();
        let mut lasts: HashMap<TopicPartition, Option<CatalogEntry>> = HashMap::new();
        for tp in &partitions {
            states.insert(*tp, first(&next()?).cloned());
            lasts.insert(*tp, first(&next()?).map(decode).transpose()?);
        }

        // Fences: every partition still at the writer's epoch (a deleted topic is skipped:
        // its data goes with it).
        let mut compares = Vec::new();
        for t in &topics {
            if let Some((_, kv)) = names.get(t) {
                compares.push(Compare::unchanged(
                    keys::topic_id::ser_key(root, *t),
                    Some(kv),
                ));
            }
        }
        for f in &commit.fences {
            let tp = f.topic_partition;
            let Some((name, _)) = names.get(&tp.topic_id) else {
                continue;
            };
            let kv = states.get(&tp).and_then(|s| s.as_ref());
            let current = match kv {
                Some(kv) => keys::partition::deser_value(&kv.key, &kv.value)?.leader_epoch,
                None => 0,
            };
            if current != f.leader_epoch {
                return Err(Error::Fenced {
                    topic_partition: format!("{name}-{}", tp.partition),
                    current,
                    held: f.leader_epoch,
                });
            }
            compares.push(Compare::unchanged(
                keys::partition::ser_key(root, tp.topic_id, tp.partition),
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
                )));
            }
            let key = keys::catalog::ser_key(root, e.topic_id, e.partition, e.base_offset);
            let last = lasts.entry(e.topic_partition()).or_default();
            if let Some(l) = last {
                if e.base_offset != l.next_offset() {
                    let stored = self.kv.range(Get::key(key.clone())).await?;
                    match first(&stored) {
                        Some(kv) if decode(kv)? == *e => continue,
                        Some(_) => {
                            return Err(Error::Conflict(format!("{key} holds a different entry")))
                        }
                        None => {
                            return Err(Error::Conflict(format!(
                            "catalog for {}-{} ends at offset {} but the new entry starts at {}",
                            e.topic_id, e.partition, l.last_offset, e.base_offset
                        )))
                        }
                    }
                }
            }
            *last = Some(e.clone());
            puts.push(Op::put(key, keys::catalog::ser_value(e)?));
        }
        if puts.is_empty() {
            return Ok(true);
        }
        if compares.len() > TXN_OPS_MAX || puts.len() > TXN_OPS_MAX {
            return Err(Error::InvalidRequest(format!(
                "a catalog commit of {} entries and {} fences exceeds {TXN_OPS_MAX} operations per transaction",
                puts.len(),
                compares.len()
            )));
        }
        let resp = self.kv.txn(Txn::new().when(compares).then(puts)).await?;
        Ok(resp.succeeded)
    }

    /// One replace attempt: one snapshot read, checks, then one transaction. `Ok(false)`:
    /// the transaction's compares failed (something changed since the read); read again.
    pub(super) async fn try_replace_catalog(&self, r: &CatalogReplace) -> Result<bool> {
        let root = &self.root;
        let tp = r.fence.topic_partition;
        let id_key = keys::topic_id::ser_key(root, tp.topic_id);
        let part_key = keys::partition::ser_key(root, tp.topic_id, tp.partition);
        // Every key of the run (old or new) lies in [base, last]; no other does.
        let run_range = KeyRange::through(
            keys::catalog::ser_key(root, tp.topic_id, tp.partition, r.base_offset()),
            keys::catalog::ser_key(root, tp.topic_id, tp.partition, r.last_offset()),
        );
        // One more than either side holds, so an extra stored key shows.
        let limit = r.old.len().max(r.new.len()) + 1;
        let read = self
            .kv
            .txn(Txn::new().then([
                Op::Get(Get::key(id_key.clone())),
                Op::Get(Get::key(part_key.clone())),
                Op::Get(Get::new(run_range.clone()).limit(limit)),
            ]))
            .await?;
        let revision = read.revision;
        let (id, part, run) = (read.get(0)?, read.get(1)?, read.get(2)?);
        let Some(id_kv) = first(id) else {
            return Err(Error::UnknownTopic(tp.topic_id.to_string()));
        };
        let name = keys::topic_id::deser_value(&id_kv.key, &id_kv.value)?;
        let part_kv = first(part);
        let current = match part_kv {
            Some(kv) => keys::partition::deser_value(&kv.key, &kv.value)?.leader_epoch,
            None => 0,
        };
        if current != r.fence.leader_epoch {
            return Err(Error::Fenced {
                topic_partition: format!("{name}-{}", tp.partition),
                current,
                held: r.fence.leader_epoch,
            });
        }
        let stored = run.kvs.iter().map(decode).collect::<Result<Vec<_>>>()?;
        if stored == r.new {
            // A retry whose first attempt landed.
            return Ok(true);
        }
        let (Some(first_kv), Some(last_kv)) = (run.kvs.first(), run.kvs.last()) else {
            return Err(Error::Conflict(format!(
                "catalog run {name}-{} offsets {}..={} is gone",
                tp.partition,
                r.base_offset(),
                r.last_offset()
            )));
        };
        if stored != r.old {
            return Err(Error::Conflict(format!(
                "catalog run {name}-{} offsets {}..={} is not the one to replace (stored: {} entries, expected {})",
                tp.partition,
                r.base_offset(),
                r.last_offset(),
                stored.len(),
                r.old.len()
            )));
        }
        // The run is exactly `old` at `revision`. It is still exactly `old` at commit if no
        // key in its range was created or changed since (one range compare, whatever the
        // run's length) and its first and last keys are still there: every way an entry
        // leaves the catalog (retention from the front, another replace, which puts a key
        // at its own run's start, topic deletion) removes one of them or adds a key inside
        // the range.
        let compares = vec![
            Compare::unchanged(id_key, Some(id_kv)),
            Compare::unchanged(part_key, part_kv),
            Compare::new(
                run_range.clone(),
                Target::ModRevision(revision + 1),
                CmpOp::Less,
            ),
            Compare::unchanged(first_kv.key.clone(), Some(first_kv)),
            Compare::unchanged(last_kv.key.clone(), Some(last_kv)),
        ];
        // The old run goes in range deletes, whatever its length: a transaction may not put
        // inside a range it deletes (etcd's rule, see crate::kv), so the ranges are the
        // gaps between the new entries' keys (which the puts overwrite): (new[i],
        // new[i+1]) and (new[last], run end].
        let run_end = match &run_range.end {
            crate::kv::RangeEnd::Before(end) => end.clone(),
            _ => return Err(Error::Storage("a catalog run has no end".into())),
        };
        let mut ops = Vec::with_capacity(2 * r.new.len());
        for (i, e) in r.new.iter().enumerate() {
            let key = keys::catalog::ser_key(root, e.topic_id, e.partition, e.base_offset);
            let mut after = key.clone().into_bytes();
            after.push(0);
            let gap_end = match r.new.get(i + 1) {
                Some(n) => keys::catalog::ser_key(root, n.topic_id, n.partition, n.base_offset)
                    .into_bytes(),
                None => run_end.clone(),
            };
            ops.push(Op::put(key, keys::catalog::ser_value(e)?));
            ops.push(Op::delete(KeyRange::between(after, gap_end)));
        }
        let resp = self.kv.txn(Txn::new().when(compares).then(ops)).await?;
        Ok(resp.succeeded)
    }
}
