//! The segment catalog's rules over [`Kv`] (ARCHITECTURE decision 23): the commit of sealed
//! objects (one key per object, fenced by the writer's lease), the compaction swap into
//! per-partition segments ([`CatalogReplace`]), the lookups (from the in-memory
//! [`CatalogIndex`]) and the removal of objects' keys nothing is served from any more.
//!
//! Keys: `catalog/objects/{broker}/{object}` ([`keys::object_index`]) for sealed objects,
//! `catalog/{topic_id}/{partition:010}/{base_offset:020}` ([`keys::catalog`]) for segments.
//! A seal costs one transaction of one put and two compares whatever the number of
//! partitions in the object; what a reader sees is [`crate::catalog_view::resolve`] of both.

use super::catalog_index::{self, CatalogIndex};
use super::{first, KvStore, TXN_OPS_MAX};
use crate::catalog::{CatalogCommit, CatalogEntry, CatalogReplace, OBJECT_INDEX_BYTES_MAX};
use crate::error::{Error, Result};
use crate::keys::{self, object_index::ObjectIndex};
use crate::kv::{CmpOp, Compare, Get, KeyRange, KeyValue, Kv, Op, Target, Txn};
use crate::types::{Offset, PartitionId, TopicId, TopicPartition};
use std::collections::BTreeMap;
use std::sync::Arc;

fn decode(kv: &KeyValue) -> Result<CatalogEntry> {
    keys::catalog::deser_value(&kv.key, &kv.value)
}

impl<K: Kv> KvStore<K> {
    /// The in-memory catalog, started (scanned, watched) on first use.
    pub(super) async fn catalog_index(&self) -> Result<&CatalogIndex> {
        self.index
            .started
            .get_or_try_init(|| async {
                let (state, revision) = catalog_index::load(&*self.kv, &self.root).await?;
                self.index.replace_state(state);
                let task = tokio::spawn(super::catalog_follow::follow(
                    Arc::downgrade(&self.kv),
                    self.root.clone(),
                    Arc::downgrade(&self.index),
                    self.clock.clone(),
                    revision + 1,
                ));
                self.index.set_task(task);
                Ok::<(), Error>(())
            })
            .await?;
        Ok(&self.index)
    }

    /// Applies a key this store just wrote, if the index runs (else its scan will see it).
    pub(super) fn index_own_put(&self, kv: KeyValue) {
        if self.index.started.initialized() {
            if let Err(e) = self.index.lock().put(&self.root, &kv) {
                tracing::error!(error = %e, "a key just written does not decode");
            }
        }
    }

    pub(super) fn index_forget_topic(&self, topic_id: TopicId) {
        if self.index.started.initialized() {
            self.index.lock().forget_topic(topic_id);
        }
    }

    /// The resolved catalog of one partition, from memory.
    async fn view(&self, tp: TopicPartition) -> Result<Arc<Vec<CatalogEntry>>> {
        Ok(self.catalog_index().await?.lock().view(tp))
    }

    pub(super) async fn last_entry(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
    ) -> Result<Option<CatalogEntry>> {
        let view = self.view(TopicPartition::new(topic_id, partition)).await?;
        Ok(view.last().cloned())
    }

    pub(super) async fn read_catalog(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
        from_offset: Offset,
        limit: usize,
    ) -> Result<Vec<CatalogEntry>> {
        let view = self.view(TopicPartition::new(topic_id, partition)).await?;
        // The first entry ending at or after `from_offset`; entries are in offset order.
        let start = view.partition_point(|e| e.last_offset < from_offset);
        Ok(view.iter().skip(start).take(limit).cloned().collect())
    }

    pub(super) async fn find_timestamp(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
        timestamp_ms: i64,
    ) -> Result<Option<CatalogEntry>> {
        let view = self.view(TopicPartition::new(topic_id, partition)).await?;
        Ok(view
            .iter()
            .find(|e| e.max_timestamp_ms >= timestamp_ms)
            .cloned())
    }

    /// Brings the index up to date for `tp` with everything committed before this call:
    /// reads, in one snapshot at revision R, the partition's segment keys and its state;
    /// then makes sure the index holds every sealed object's key as of R or later. That
    /// costs a read of every live object key's name (bounded by compaction, which folds
    /// sealed objects into segments and lets their keys go), shared by every sync that
    /// waits meanwhile: a broker taking over thousands of partitions at once lists the keys
    /// a few times, not once per partition. For the moments that need it (a partition
    /// opening), not for every read.
    pub(super) async fn sync_partition(&self, tp: TopicPartition) -> Result<()> {
        let index = self.catalog_index().await?;
        let root = &self.root;
        let snapshot = self
            .kv
            .txn(Txn::new().then([
                Op::Get(Get::prefix(keys::catalog::partition_prefix(
                    root,
                    tp.topic_id,
                    tp.partition,
                ))),
                Op::Get(Get::key(keys::partition::ser_key(
                    root,
                    tp.topic_id,
                    tp.partition,
                ))),
            ]))
            .await?;
        let (segments, state) = (snapshot.get(0)?, snapshot.get(1)?);
        {
            let mut s = index.lock();
            let present = segments
                .kvs
                .iter()
                .map(|kv| keys::catalog::deser_key(root, &kv.key).map(|(_, _, base)| base))
                .collect::<Result<std::collections::BTreeSet<Offset>>>()?;
            s.retain_keyed(tp, &present, snapshot.revision);
            for kv in segments.kvs.iter().chain(state.kvs.iter()) {
                s.put(root, kv)?;
            }
        }
        self.sync_objects(index).await
    }

    /// Makes the index hold every sealed object's key stored before this call (see
    /// [`Self::sync_partition`]): a listing that *started* after the call began is enough,
    /// so every sync waiting while one listing runs shares the next one.
    async fn sync_objects(&self, index: &CatalogIndex) -> Result<()> {
        use std::sync::atomic::Ordering;
        let arrived = index.listings_started.load(Ordering::Acquire);
        let mut last_done = index.objects_synced.lock().await;
        if *last_done > arrived {
            // Listing number `last_done` started after this call began.
            return Ok(());
        }
        let this = index.listings_started.fetch_add(1, Ordering::AcqRel) + 1;
        let names = self
            .kv
            .range(Get::prefix(keys::object_index::prefix(&self.root)).keys_only())
            .await?;
        let missing: Vec<Get> = {
            let state = index.lock();
            names
                .kvs
                .iter()
                .filter(|kv| !state.knows_object(&kv.key, kv.mod_revision))
                .map(|kv| Get::key(kv.key.clone()))
                .collect()
        };
        let fetched = self.batch_get(missing).await?;
        {
            let mut s = index.lock();
            for kv in fetched.iter().flat_map(|r| r.kvs.iter()) {
                s.put(&self.root, kv)?;
            }
        }
        *last_done = this;
        Ok(())
    }

    /// One commit attempt (see the module docs). `Ok(false)`: the transaction's compares
    /// failed for a reason worth another attempt.
    pub(super) async fn try_commit_catalog(&self, commit: &CatalogCommit) -> Result<bool> {
        let root = &self.root;
        let index = self.catalog_index().await?;
        // One key per object.
        // One key per object, in the order the commit names them.
        let mut objects: Vec<(&str, Vec<CatalogEntry>)> = Vec::new();
        for e in &commit.entries {
            if e.last_offset < e.base_offset || e.base_offset < 0 {
                return Err(Error::InvalidRequest(format!(
                    "catalog entry with offsets {}..={}",
                    e.base_offset, e.last_offset
                )));
            }
            match objects.iter_mut().find(|(k, _)| *k == e.object_key) {
                Some((_, v)) => v.push(e.clone()),
                None => objects.push((&e.object_key, vec![e.clone()])),
            }
        }
        let broker_id = commit.writer.map_or(0, |w| w.broker_id);
        let mut puts = Vec::new();
        // What each put holds, decoded: applied to the index once the commit lands (the
        // value is not decoded again for it).
        let mut written = Vec::new();
        {
            let mut state = index.lock();
            // Fences: a partition whose epoch the index has seen move past the writer's is
            // refused here, all or nothing. Not a guarantee (the index may lag): what keeps a
            // deposed leader's late entries from being served is the epoch cut at read time.
            for f in &commit.fences {
                let current = state.leader_epoch(f.topic_partition);
                if current > f.leader_epoch && !state.is_deleted(f.topic_partition.topic_id) {
                    return Err(Error::Fenced {
                        topic_partition: f.topic_partition.to_string(),
                        current,
                        held: f.leader_epoch,
                    });
                }
            }
            let mut landed = Vec::new();
            for (object_key, entries) in &objects {
                let key = keys::object_index::ser_key(root, broker_id, object_key);
                match state.object_matches(key.as_bytes(), entries) {
                    // A retry whose first attempt landed.
                    Some(true) => landed.push(*object_key),
                    Some(false) => {
                        return Err(Error::Conflict(format!("{key} holds a different object")))
                    }
                    None => {}
                }
            }
            // Each entry continues its partition's catalogue (one writer per epoch appends in
            // order, so this holds unless the caller is confused).
            let mut ends: BTreeMap<TopicPartition, Offset> = BTreeMap::new();
            for e in &commit.entries {
                if landed.contains(&e.object_key.as_str()) || state.is_deleted(e.topic_id) {
                    continue;
                }
                let tp = e.topic_partition();
                let end = match ends.get(&tp) {
                    Some(end) => Some(*end),
                    None => state.view(tp).last().map(|l| l.next_offset()),
                };
                if let Some(end) = end.filter(|end| *end != e.base_offset) {
                    return Err(Error::Conflict(format!(
                        "catalog for {tp} ends before offset {end} but the new entry starts at {}",
                        e.base_offset
                    )));
                }
                ends.insert(tp, e.next_offset());
            }
            for (object_key, entries) in &objects {
                if landed.contains(object_key) {
                    continue;
                }
                let index = ObjectIndex {
                    broker_id,
                    object_key: object_key.to_string(),
                    entries: entries.clone(),
                };
                let value = keys::object_index::ser_value(&index)?;
                if value.len() > OBJECT_INDEX_BYTES_MAX {
                    return Err(Error::InvalidRequest(format!(
                        "the catalog entries of object {object_key} take {} bytes, more than the {OBJECT_INDEX_BYTES_MAX} one metadata request may carry; seal fewer partitions per object",
                        value.len()
                    )));
                }
                let key = keys::object_index::ser_key(root, broker_id, object_key);
                puts.push((key, value));
                written.push(index);
            }
        }
        if puts.is_empty() {
            return Ok(true);
        }
        let mut compares = Vec::new();
        if let Some(w) = commit.writer {
            compares.push(Compare::new(
                KeyRange::key(keys::broker::ser_key(root, w.broker_id)),
                Target::Lease(w.lease_id),
                CmpOp::Equal,
            ));
        }
        compares.extend(puts.iter().map(|(k, _)| Compare::absent(k.clone())));
        if compares.len() > TXN_OPS_MAX || puts.len() > TXN_OPS_MAX {
            return Err(Error::InvalidRequest(format!(
                "a catalog commit of {} objects exceeds {TXN_OPS_MAX} operations per transaction",
                puts.len()
            )));
        }
        let ops: Vec<Op> = puts
            .iter()
            .map(|(k, v)| Op::put(k.clone(), v.clone()))
            .collect();
        let resp = self.kv.txn(Txn::new().when(compares).then(ops)).await?;
        if resp.succeeded {
            let mut state = index.lock();
            for ((k, _), object) in puts.iter().zip(written) {
                state.put_object(k.as_bytes(), resp.revision, object);
            }
            return Ok(true);
        }
        // Why not: the writer's lease is gone (fenced), or an object's key exists (a retry
        // whose first attempt landed, with an answer lost: then it holds what we wrote).
        if let Some(w) = commit.writer {
            let broker = self.get(keys::broker::ser_key(root, w.broker_id)).await?;
            if first(&broker).map_or(0, |kv| kv.lease) != w.lease_id {
                return Err(Error::LeaseExpired(w.lease_id));
            }
        }
        let gets = puts.iter().map(|(k, _)| Get::key(k.clone())).collect();
        let stored = self.batch_get(gets).await?;
        for ((k, v), r) in puts.iter().zip(&stored) {
            match first(r) {
                Some(kv) if kv.value == *v => {
                    index.lock().put(root, kv)?;
                }
                Some(_) => return Err(Error::Conflict(format!("{k} holds a different object"))),
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    /// One replace attempt: one snapshot read, checks, then one transaction. `Ok(false)`:
    /// the transaction's compares failed (something changed since the read); read again.
    pub(super) async fn try_replace_catalog(&self, r: &CatalogReplace) -> Result<bool> {
        let read = self.kv.txn(Txn::new().then(self.replace_reads(r))).await?;
        let planned = self.plan_replace(r, &read, 0).await?;
        let Planned::Write(w) = planned else {
            return Ok(true);
        };
        let resp = self
            .kv
            .txn(Txn::new().when(w.compares.clone()).then(w.ops.clone()))
            .await?;
        if resp.succeeded {
            self.applied(&[w], resp.revision).await?;
        }
        Ok(resp.succeeded)
    }

    /// Several partitions' replaces in as few transactions as etcd's limits allow
    /// ([`REPLACES_PER_TXN`] each: one read of all, one write of all). A replace that fails
    /// its own checks gets its error alone; if a combined write loses a compare, its
    /// replaces are retried one by one ([`Self::try_replace_catalog`]'s rules), so one
    /// partition's change never fails another's replace.
    pub(super) async fn replace_catalog_many(
        &self,
        replaces: &[CatalogReplace],
    ) -> Vec<Result<()>> {
        let mut out: Vec<Option<Result<()>>> = replaces
            .iter()
            .map(|r| r.validate().err().map(Err))
            .collect();
        // Greedy chunks within etcd's limits: six compares per replace, two operations per
        // new entry.
        let mut chunks: Vec<Vec<usize>> = Vec::new();
        let mut ops = 0;
        for i in (0..replaces.len()).filter(|i| out[*i].is_none()) {
            let need = 2 * replaces[i].new.len();
            match chunks.last_mut() {
                Some(c) if c.len() < REPLACES_PER_TXN && ops + need <= TXN_OPS_MAX => {
                    c.push(i);
                    ops += need;
                }
                _ => {
                    chunks.push(vec![i]);
                    ops = need;
                }
            }
        }
        for chunk in &chunks {
            let mut retry_alone = Vec::new();
            // Lost a compare, or failed as a whole (the store unavailable): each on its own.
            if !matches!(
                self.try_replace_chunk(replaces, chunk, &mut out).await,
                Ok(true)
            ) {
                retry_alone.extend(chunk.iter().copied().filter(|i| out[*i].is_none()));
            }
            for i in retry_alone {
                out[i] = Some(self.replace_catalog_alone(&replaces[i]).await);
            }
        }
        out.into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(Error::Storage("catalog replace not attempted".into())))
            })
            .collect()
    }

    /// One replace with its compare-and-swap retries ([`crate::MetadataStore::replace_catalog_entries`]).
    pub(super) async fn replace_catalog_alone(&self, r: &CatalogReplace) -> Result<()> {
        r.validate()?;
        for _ in 0..super::CAS_ATTEMPTS {
            if self.try_replace_catalog(r).await? {
                return Ok(());
            }
        }
        Err(Error::Conflict(
            "catalog replace kept losing to concurrent changes".into(),
        ))
    }

    /// One read and one write for the replaces `chunk` (indices into `replaces`); fills
    /// `out` for those settled. `Ok(false)`: the write lost a compare (nothing written; the
    /// unsettled ones are left for the caller to retry).
    async fn try_replace_chunk(
        &self,
        replaces: &[CatalogReplace],
        chunk: &[usize],
        out: &mut [Option<Result<()>>],
    ) -> Result<bool> {
        let reads: Vec<Op> = chunk
            .iter()
            .flat_map(|i| self.replace_reads(&replaces[*i]))
            .collect();
        let read = self.kv.txn(Txn::new().then(reads)).await?;
        let mut writes = Vec::new();
        for (n, i) in chunk.iter().enumerate() {
            match self
                .plan_replace(&replaces[*i], &read, n * READS_PER_REPLACE)
                .await
            {
                Ok(Planned::Landed) => out[*i] = Some(Ok(())),
                Ok(Planned::Write(w)) => writes.push((*i, w)),
                Err(e) => out[*i] = Some(Err(e)),
            }
        }
        if writes.is_empty() {
            return Ok(true);
        }
        let compares: Vec<Compare> = writes
            .iter()
            .flat_map(|(_, w)| w.compares.clone())
            .collect();
        let ops: Vec<Op> = writes.iter().flat_map(|(_, w)| w.ops.clone()).collect();
        if compares.len() > TXN_OPS_MAX || ops.len() > TXN_OPS_MAX {
            return Ok(false);
        }
        let resp = self.kv.txn(Txn::new().when(compares).then(ops)).await?;
        if !resp.succeeded {
            return Ok(false);
        }
        let planned: Vec<PlannedWrite> = writes.iter().map(|(_, w)| w.clone()).collect();
        self.applied(&planned, resp.revision).await?;
        for (i, _) in writes {
            out[i] = Some(Ok(()));
        }
        Ok(true)
    }

    /// The reads a replace is planned from ([`READS_PER_REPLACE`] gets): the topic's id key,
    /// the partition's state, and the stored keys of the run (one more than either side
    /// holds, so an extra stored key shows).
    fn replace_reads(&self, r: &CatalogReplace) -> Vec<Op> {
        let root = &self.root;
        let tp = r.fence.topic_partition;
        let limit = r.old.len().max(r.new.len()) + 1;
        vec![
            Op::Get(Get::key(keys::topic_id::ser_key(root, tp.topic_id))),
            Op::Get(Get::key(keys::partition::ser_key(
                root,
                tp.topic_id,
                tp.partition,
            ))),
            Op::Get(Get::new(run_range(root, r)).limit(limit)),
            // The partition's key right below the run: an entry there may reach into it.
            Op::Get(
                Get::new(KeyRange::between(
                    keys::catalog::partition_prefix(root, tp.topic_id, tp.partition),
                    keys::catalog::ser_key(root, tp.topic_id, tp.partition, r.base_offset()),
                ))
                .reverse()
                .limit(1),
            ),
        ]
    }

    /// Checks a replace against what `read` (from [`Self::replace_reads`], at `at`) holds
    /// and what readers are served, and plans its write.
    async fn plan_replace(
        &self,
        r: &CatalogReplace,
        read: &crate::kv::TxnResponse,
        at: usize,
    ) -> Result<Planned> {
        let root = &self.root;
        let index = self.catalog_index().await?;
        let tp = r.fence.topic_partition;
        let id_key = keys::topic_id::ser_key(root, tp.topic_id);
        let part_key = keys::partition::ser_key(root, tp.topic_id, tp.partition);
        let run_range = run_range(root, r);
        let revision = read.revision;
        let (id, part, run) = (read.get(at)?, read.get(at + 1)?, read.get(at + 2)?);
        let below = first(read.get(at + 3)?);
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
            for kv in &run.kvs {
                index.lock().put(root, kv)?;
            }
            return Ok(Planned::Landed);
        }
        // The run must be exactly what readers see over its offsets now (the compactor
        // planned it from the same view). Keys of the run that only the index knows of yet
        // are read above; the index holds this store's own writes.
        // The index may lag this store's own writes (a racing replace whose answer is not
        // applied yet): what it holds over the run is made exactly what was read — the run's
        // keys, none it no longer has, and the key below it — so the check below judges the
        // store as read, not a stale view (two racing replaces both passed it once).
        {
            let mut state = index.lock();
            let present: std::collections::BTreeSet<Offset> = run
                .kvs
                .iter()
                .filter_map(|kv| keys::catalog::deser_key(root, &kv.key).ok())
                .map(|(_, _, base)| base)
                .collect();
            state.retain_keyed_within(tp, r.base_offset()..=r.last_offset(), &present, revision);
            for kv in run.kvs.iter().chain(below) {
                state.put(root, kv)?;
            }
        }
        let seen: Vec<CatalogEntry> = index
            .lock()
            .view(tp)
            .iter()
            .filter(|e| e.last_offset >= r.base_offset() && e.base_offset <= r.last_offset())
            .cloned()
            .collect();
        if seen != r.old {
            return Err(Error::Conflict(format!(
                "catalog run {name}-{} offsets {}..={} is not the one to replace (served: {} entries, expected {})",
                tp.partition,
                r.base_offset(),
                r.last_offset(),
                seen.len(),
                r.old.len()
            )));
        }
        // What readers see over the run is still what was checked at commit if no
        // per-partition key of the partition was created or changed since (one range
        // compare, whatever the number: every replace puts at least one key, so a racing
        // replace anywhere in the partition shows, even one whose run merely overlaps this
        // one from below) and the run's first and last keys are still there (a deletion
        // shows in no range compare); sealed objects' entries in the run leave only once
        // nothing is served from them, or with the topic (the id key's compare).
        let mut compares = vec![
            Compare::unchanged(id_key, Some(id_kv)),
            Compare::unchanged(part_key, part_kv),
            Compare::new(
                KeyRange::prefix(keys::catalog::partition_prefix(
                    root,
                    tp.topic_id,
                    tp.partition,
                )),
                Target::ModRevision(revision + 1),
                CmpOp::Less,
            ),
        ];
        if let (Some(first_kv), Some(last_kv)) = (run.kvs.first(), run.kvs.last()) {
            compares.push(Compare::unchanged(first_kv.key.clone(), Some(first_kv)));
            compares.push(Compare::unchanged(last_kv.key.clone(), Some(last_kv)));
        }
        if let Some(b) = below {
            compares.push(Compare::unchanged(b.key.clone(), Some(b)));
        }
        // The old keys go in range deletes, whatever their number: a transaction may not put
        // inside a range it deletes (etcd's rule, see crate::kv), so the ranges are the gaps
        // between the new entries' keys (which the puts overwrite): (new[i], new[i+1]) and
        // (new[last], run end].
        let run_end = match &run_range.end {
            crate::kv::RangeEnd::Before(end) => end.clone(),
            _ => return Err(Error::Storage("a catalog run has no end".into())),
        };
        let mut ops = Vec::with_capacity(2 * r.new.len());
        let mut written = Vec::with_capacity(r.new.len());
        for (i, e) in r.new.iter().enumerate() {
            let key = keys::catalog::ser_key(root, e.topic_id, e.partition, e.base_offset);
            let mut after = key.clone().into_bytes();
            after.push(0);
            let gap_end = match r.new.get(i + 1) {
                Some(n) => keys::catalog::ser_key(root, n.topic_id, n.partition, n.base_offset)
                    .into_bytes(),
                None => run_end.clone(),
            };
            let value = keys::catalog::ser_value(e)?;
            written.push((key.clone(), value.clone()));
            ops.push(Op::put(key, value));
            ops.push(Op::delete(KeyRange::between(after, gap_end)));
        }
        Ok(Planned::Write(PlannedWrite {
            compares,
            ops,
            run_keys: run.kvs.iter().map(|kv| kv.key.clone()).collect(),
            written,
        }))
    }

    /// Brings the in-memory index up to a landed write of `planned` at `revision`.
    async fn applied(&self, planned: &[PlannedWrite], revision: i64) -> Result<()> {
        let root = &self.root;
        let index = self.catalog_index().await?;
        let mut state = index.lock();
        for w in planned {
            for key in &w.run_keys {
                state.delete(root, key, revision);
            }
            for (key, value) in &w.written {
                state.put(
                    root,
                    &KeyValue {
                        key: key.clone().into_bytes(),
                        value: value.clone(),
                        create_revision: revision,
                        mod_revision: revision,
                        version: 1,
                        lease: 0,
                    },
                )?;
            }
        }
        Ok(())
    }
}

/// Gets per replace in a batched read ([`KvStore::replace_reads`]).
const READS_PER_REPLACE: usize = 4;
/// Most replaces per combined transaction: each compares at most six keys (21 × 6 = 126,
/// within etcd's 128 compares); their new entries, two operations each, are kept within 128
/// too.
pub const REPLACES_PER_TXN: usize = 21;

/// Every per-partition key of a replace's run (old or new) lies in [base, last].
fn run_range(root: &keys::Root, r: &CatalogReplace) -> KeyRange {
    let tp = r.fence.topic_partition;
    KeyRange::through(
        keys::catalog::ser_key(root, tp.topic_id, tp.partition, r.base_offset()),
        keys::catalog::ser_key(root, tp.topic_id, tp.partition, r.last_offset()),
    )
}

/// What a replace needs written, once checked.
enum Planned {
    /// The stored run already is the new one (a retry whose first attempt landed).
    Landed,
    Write(PlannedWrite),
}

#[derive(Clone)]
struct PlannedWrite {
    compares: Vec<Compare>,
    ops: Vec<Op>,
    /// Keys of the run as read (deleted from the index once the write lands).
    run_keys: Vec<Vec<u8>>,
    /// (key, value) put.
    written: Vec<(String, Vec<u8>)>,
}
