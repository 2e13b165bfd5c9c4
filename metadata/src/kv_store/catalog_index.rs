//! The catalog held in memory ([`CatalogIndex`]): every sealed object's entries, every
//! per-partition segment entry and every partition's leader-epoch history of the cluster,
//! fed by watches, so that catalog lookups (fetches below the memory tail, the compactor's
//! scans, ListOffsets by time) read no key from the metadata service, and the resolution of
//! [`crate::catalog_view`] runs on what is in memory.
//!
//! Lifecycle: started by the first catalog call of a store (a paged scan of `catalog/` and
//! `topics/` at revision R, then watches of both from R + 1, driven by a task the index owns
//! and aborts when dropped). A watch that ends (queue overflow, history compacted, a lost
//! connection) is re-established from a fresh scan after a pause. Every change is applied
//! idempotently by mod revision, so overlapping scans and watches converge.
//!
//! Freshness: this store's own writes (commits, replaces, partition updates) are applied
//! when they succeed; other brokers' arrive within the watch's delivery lag. A caller that
//! must see everything committed before a point — a new leader reading where a partition's
//! catalogue ends — calls [`super::KvStore::sync_catalog_partition`], which reads the keys
//! that matter for the partition directly (see its docs).
//!
//! Memory: per live catalog entry (objects not yet compacted away, segments), about the size
//! of a [`CatalogEntry`] (~150 bytes) plus map overhead; resolved views are cached per
//! partition and dropped on change.

use crate::catalog::CatalogEntry;
use crate::catalog_view::{self, Source, Stored};
use crate::error::Result;
use crate::keys::{self, object_index::ObjectIndex, Root};
use crate::kv::{EventKind, Get, KeyRange, KeyValue, Kv, Revision, WatchEvent};
use crate::leader_epochs::LeaderEpochHistory;
use crate::types::{LeaderEpoch, Offset, TopicId, TopicPartition};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// Keys read per page of a scan.
const SCAN_PAGE: usize = 1000;

/// One partition's stored catalog and epoch history.
#[derive(Default)]
struct PartitionIndex {
    /// Per-partition keys (segments; entries of the first catalog layout), by base offset,
    /// with their mod revision.
    keyed: BTreeMap<Offset, (CatalogEntry, Revision)>,
    /// Entries of sealed objects, by (base offset, object key).
    objects: BTreeMap<(Offset, String), CatalogEntry>,
    /// The partition's log start offset (retention, DeleteRecords): entries wholly below it
    /// are never served, and their keys are deleted by the sweep.
    log_start: Offset,
    /// The partition's leader epoch and epoch history, and the state's mod revision.
    leader_epoch: LeaderEpoch,
    epochs: LeaderEpochHistory,
    state_revision: Revision,
    /// The resolved view, until something changes.
    view: Option<Arc<Vec<CatalogEntry>>>,
}

impl PartitionIndex {
    fn view(&mut self) -> Arc<Vec<CatalogEntry>> {
        if let Some(v) = &self.view {
            return v.clone();
        }
        let stored: Vec<Stored> = self
            .keyed
            .values()
            .map(|(e, _)| Stored {
                entry: e.clone(),
                source: Source::Keyed,
            })
            .chain(self.objects.values().map(|e| Stored {
                entry: e.clone(),
                source: Source::Object,
            }))
            .collect();
        let mut resolved = catalog_view::resolve(&stored, &self.epochs);
        // Below the log start nothing is served; an entry holding it is served whole (a
        // reader skips the records before it, as with Kafka's log start inside a batch).
        resolved.retain(|e| e.last_offset >= self.log_start);
        let v = Arc::new(resolved);
        self.view = Some(v.clone());
        v
    }
}

/// What the index remembers of a sealed object's key.
struct ObjectRecord {
    mod_revision: Revision,
    /// (partition, base offset) of each entry, to remove them when the key goes.
    entries: Vec<(TopicPartition, Offset)>,
    object_key: String,
}

#[derive(Default)]
pub(super) struct IndexState {
    partitions: BTreeMap<TopicPartition, PartitionIndex>,
    /// Sealed objects' keys → what they hold.
    objects: BTreeMap<Vec<u8>, ObjectRecord>,
    /// Topics whose id key is gone: their entries are dropped and never taken in again.
    deleted_topics: BTreeSet<TopicId>,
    /// Sealed objects whose key went (nothing was served from them any more), numbered in
    /// the order they went, for [`IndexState::take_retired`]; at most [`RETIRED_MAX`].
    retired: VecDeque<(u64, String)>,
    /// The number the next retired object gets.
    retired_next: u64,
}

/// Retired objects remembered at most: beyond, the oldest are forgotten and left to the
/// orphan sweep (which finds them after its grace period).
pub(super) const RETIRED_MAX: usize = 100_000;

/// Typical length of an object key (`data/b{broker}/{sequence:020}-{uuid}.oxb`, a segment's
/// about the same), for [`IndexState::footprint`].
const KEY_BYTES: usize = 64;

impl IndexState {
    /// Counts and an estimate of the heap held, from the maps' lengths (one pass over the
    /// partitions and objects, none over entries): an entry and its key's string, plus a
    /// third for map nodes.
    pub(super) fn footprint(&self) -> crate::catalog::CatalogFootprint {
        use std::mem::size_of;
        let entry = size_of::<CatalogEntry>() + KEY_BYTES;
        let (mut entries, mut bytes) = (0, 0);
        for p in self.partitions.values() {
            let views = p.view.as_ref().map_or(0, |v| v.len());
            entries += p.keyed.len() + p.objects.len() + views;
            bytes += p.keyed.len() * (entry + 2 * size_of::<Offset>())
                + p.objects.len() * (entry + size_of::<Offset>() + size_of::<String>() + KEY_BYTES)
                + views * entry
                + size_of::<PartitionIndex>()
                + std::mem::size_of_val(p.epochs.entries());
        }
        for o in self.objects.values() {
            bytes += size_of::<ObjectRecord>()
                + 2 * KEY_BYTES
                + o.entries.len() * size_of::<(TopicPartition, Offset)>();
        }
        crate::catalog::CatalogFootprint {
            partitions: self.partitions.len(),
            entries,
            objects: self.objects.len(),
            approx_bytes: bytes + bytes / 3,
        }
    }

    fn partition(&mut self, tp: TopicPartition) -> &mut PartitionIndex {
        self.partitions.entry(tp).or_default()
    }

    /// Applies one stored key (from a scan, a watch or this store's own write).
    pub(super) fn put(&mut self, root: &Root, kv: &KeyValue) -> Result<()> {
        let key = kv.key.as_slice();
        if key.starts_with(keys::object_index::prefix(root).as_bytes()) {
            if self
                .objects
                .get(key)
                .is_some_and(|o| o.mod_revision >= kv.mod_revision)
            {
                return Ok(());
            }
            let index = keys::object_index::deser_value(key, &kv.value)?;
            self.put_object(key, kv.mod_revision, index);
        } else if key.starts_with(root.join("catalog/").as_bytes()) {
            let entry = keys::catalog::deser_value(key, &kv.value)?;
            if self.deleted_topics.contains(&entry.topic_id) {
                return Ok(());
            }
            let p = self.partition(entry.topic_partition());
            if p.keyed
                .get(&entry.base_offset)
                .is_some_and(|(_, r)| *r >= kv.mod_revision)
            {
                return Ok(());
            }
            p.keyed
                .insert(entry.base_offset, (entry.clone(), kv.mod_revision));
            p.view = None;
        } else if key.starts_with(keys::partition::prefix(root).as_bytes()) {
            let topic_id = keys::partition::deser_key(root, key)?;
            if self.deleted_topics.contains(&topic_id) {
                return Ok(());
            }
            let state = keys::partition::deser_value(key, &kv.value)?;
            let p = self.partition(TopicPartition::new(topic_id, state.partition));
            if p.state_revision >= kv.mod_revision {
                return Ok(());
            }
            p.leader_epoch = state.leader_epoch;
            p.epochs = state.leader_epochs;
            // Only forward: a state read before a retention step must not bring entries back.
            p.log_start = p.log_start.max(state.log_start_offset);
            p.state_revision = kv.mod_revision;
            p.view = None;
        }
        Ok(())
    }

    /// Applies a sealed object's index stored at `key`.
    pub(super) fn put_object(&mut self, key: &[u8], mod_revision: Revision, index: ObjectIndex) {
        self.remove_object(key);
        let mut entries = Vec::with_capacity(index.entries.len());
        for e in index.entries {
            if self.deleted_topics.contains(&e.topic_id) {
                continue;
            }
            let tp = e.topic_partition();
            entries.push((tp, e.base_offset));
            let p = self.partition(tp);
            p.objects.insert((e.base_offset, e.object_key.clone()), e);
            p.view = None;
        }
        self.objects.insert(
            key.to_vec(),
            ObjectRecord {
                mod_revision,
                entries,
                object_key: index.object_key,
            },
        );
    }

    /// Drops `tp`'s per-partition keys a snapshot at `revision` no longer holds (replaced
    /// by compaction elsewhere, their deletions not seen yet).
    pub(super) fn retain_keyed(
        &mut self,
        tp: TopicPartition,
        present: &BTreeSet<Offset>,
        revision: Revision,
    ) {
        if let Some(p) = self.partitions.get_mut(&tp) {
            let before = p.keyed.len();
            p.keyed
                .retain(|base, (_, r)| present.contains(base) || *r > revision);
            if p.keyed.len() != before {
                p.view = None;
            }
        }
    }

    /// [`Self::retain_keyed`] over `range` of `tp`'s base offsets only.
    pub(super) fn retain_keyed_within(
        &mut self,
        tp: TopicPartition,
        range: std::ops::RangeInclusive<Offset>,
        present: &BTreeSet<Offset>,
        revision: Revision,
    ) {
        if let Some(p) = self.partitions.get_mut(&tp) {
            let stale: Vec<Offset> = p
                .keyed
                .range(range)
                .filter(|(base, (_, r))| !present.contains(base) && *r <= revision)
                .map(|(base, _)| *base)
                .collect();
            for base in &stale {
                p.keyed.remove(base);
            }
            if !stale.is_empty() {
                p.view = None;
            }
        }
    }

    /// Forgets a sealed object's key; returns the object's name if the key was known.
    fn remove_object(&mut self, key: &[u8]) -> Option<String> {
        let old = self.objects.remove(key)?;
        for (tp, base) in old.entries {
            if let Some(p) = self.partitions.get_mut(&tp) {
                p.objects.remove(&(base, old.object_key.clone()));
                p.view = None;
            }
        }
        Some(old.object_key)
    }

    /// Applies the deletion of a key at `revision`. A sealed object's key is deleted only
    /// once nothing is served from the object (the sweep), so the object is retired.
    pub(super) fn delete(&mut self, root: &Root, key: &[u8], revision: Revision) {
        if key.starts_with(keys::object_index::prefix(root).as_bytes()) {
            if self
                .objects
                .get(key)
                .is_some_and(|o| o.mod_revision < revision)
            {
                if let Some(object_key) = self.remove_object(key) {
                    self.retire(object_key);
                }
            }
        } else if key.starts_with(root.join("catalog/").as_bytes()) {
            if let Ok((topic_id, partition, base)) = keys::catalog::deser_key(root, key) {
                if let Some(p) = self
                    .partitions
                    .get_mut(&TopicPartition::new(topic_id, partition))
                {
                    if p.keyed.get(&base).is_some_and(|(_, r)| *r < revision) {
                        p.keyed.remove(&base);
                        p.view = None;
                    }
                }
            }
        } else if let Some(id) = key
            .strip_prefix(root.join("topics/ids/").as_bytes())
            .and_then(|id| std::str::from_utf8(id).ok())
            .and_then(|id| uuid::Uuid::parse_str(id).ok())
        {
            self.forget_topic(TopicId(id));
        }
    }

    /// Drops everything of a deleted topic, and keeps it out from now on.
    pub(super) fn forget_topic(&mut self, topic_id: TopicId) {
        self.deleted_topics.insert(topic_id);
        let gone: Vec<TopicPartition> = self
            .partitions
            .range(TopicPartition::new(topic_id, 0)..)
            .take_while(|(tp, _)| tp.topic_id == topic_id)
            .map(|(tp, _)| *tp)
            .collect();
        for tp in gone {
            self.partitions.remove(&tp);
        }
    }

    fn retire(&mut self, object_key: String) {
        if self.retired.len() == RETIRED_MAX {
            self.retired.pop_front();
        }
        self.retired.push_back((self.retired_next, object_key));
        self.retired_next += 1;
    }

    /// The objects retired before `mark` (a number an earlier call returned; 0 at first),
    /// but those some key names again (a sealed object's key rewritten, a per-partition
    /// entry), and the mark for the next call: everything retired since this one.
    pub(super) fn take_retired(&mut self, mark: u64) -> (Vec<String>, u64) {
        let mut due = Vec::new();
        while self.retired.front().is_some_and(|(n, _)| *n < mark) {
            if let Some((_, key)) = self.retired.pop_front() {
                due.push(key);
            }
        }
        if !due.is_empty() {
            // Applying its own deletions before the watch brings them, the index may see an
            // object go twice (an older put of its key comes in between).
            due.sort_unstable();
            due.dedup();
            let named: std::collections::HashSet<&str> = self
                .objects
                .values()
                .map(|o| o.object_key.as_str())
                .chain(self.keyed_object_keys())
                .collect();
            due.retain(|k| !named.contains(k.as_str()));
        }
        (due, self.retired_next)
    }

    /// Keeps what `old` had retired (a re-scan replaces the rest of the state).
    pub(super) fn keep_retired(&mut self, old: &mut IndexState) {
        self.retired = std::mem::take(&mut old.retired);
        self.retired_next = old.retired_next;
    }

    pub(super) fn is_deleted(&self, topic_id: TopicId) -> bool {
        self.deleted_topics.contains(&topic_id)
    }

    /// The resolved catalog of `tp`.
    pub(super) fn view(&mut self, tp: TopicPartition) -> Arc<Vec<CatalogEntry>> {
        match self.partitions.get_mut(&tp) {
            Some(p) => p.view(),
            None => Arc::new(Vec::new()),
        }
    }

    /// The leader epoch the index last saw for `tp` (0 for a partition never changed).
    pub(super) fn leader_epoch(&self, tp: TopicPartition) -> LeaderEpoch {
        self.partitions.get(&tp).map_or(0, |p| p.leader_epoch)
    }

    /// Whether the sealed object's key holds exactly `entries` (`None`: the index does not
    /// know the key). Entries of deleted topics are not compared (the index drops them).
    pub(super) fn object_matches(&self, key: &[u8], entries: &[CatalogEntry]) -> Option<bool> {
        let rec = self.objects.get(key)?;
        let live: Vec<&CatalogEntry> = entries
            .iter()
            .filter(|e| !self.deleted_topics.contains(&e.topic_id))
            .collect();
        if live.len() != rec.entries.len() {
            return Some(false);
        }
        Some(live.iter().all(|e| {
            self.partitions
                .get(&e.topic_partition())
                .and_then(|p| p.objects.get(&(e.base_offset, e.object_key.clone())))
                == Some(*e)
        }))
    }

    /// Whether the index holds the sealed object's key at `mod_revision` or later.
    pub(super) fn knows_object(&self, key: &[u8], mod_revision: Revision) -> bool {
        self.objects
            .get(key)
            .is_some_and(|o| o.mod_revision >= mod_revision)
    }

    /// Per-partition keys (segments) wholly below their partition's log start, with their
    /// mod revisions: never served again, safe to delete (the log start only moves forward,
    /// by compare-and-swap of the partition's state).
    pub(super) fn below_log_start(&self, root: &Root, limit: usize) -> Vec<(Vec<u8>, Revision)> {
        let mut out = Vec::new();
        for (tp, p) in &self.partitions {
            if out.len() >= limit {
                break;
            }
            for (base, (e, revision)) in p.keyed.range(..p.log_start) {
                if out.len() >= limit {
                    break;
                }
                if e.last_offset < p.log_start {
                    let key = keys::catalog::ser_key(root, tp.topic_id, tp.partition, *base);
                    out.push((key.into_bytes(), *revision));
                }
            }
        }
        out
    }

    /// Object keys every per-partition entry names (segments; entries of the first layout).
    pub(super) fn keyed_object_keys(&self) -> std::collections::HashSet<&str> {
        self.partitions
            .values()
            .flat_map(|p| p.keyed.values().map(|(e, _)| e.object_key.as_str()))
            .collect()
    }

    /// Whether a sealed object's catalog key (`key`) is held.
    pub(super) fn has_object_record(&self, key: &[u8]) -> bool {
        self.objects.contains_key(key)
    }

    /// Sealed objects' keys whose every entry is served by nothing any more (superseded by
    /// segments or other entries, cut by a later epoch, or of deleted topics), with their
    /// mod revisions: safe to delete. One pass over every partition's resolved view.
    pub(super) fn superseded_objects(&mut self, limit: usize) -> Vec<(Vec<u8>, Revision)> {
        let mut referenced: BTreeSet<String> = BTreeSet::new();
        for p in self.partitions.values_mut() {
            if p.objects.is_empty() {
                continue;
            }
            for e in p.view().iter() {
                if !referenced.contains(&e.object_key) {
                    referenced.insert(e.object_key.clone());
                }
            }
        }
        self.objects
            .iter()
            .filter(|(_, rec)| !referenced.contains(&rec.object_key))
            .take(limit)
            .map(|(key, rec)| (key.clone(), rec.mod_revision))
            .collect()
    }
}

/// The in-memory catalog (see the module docs).
#[derive(Default)]
pub(super) struct CatalogIndex {
    state: Mutex<IndexState>,
    /// Set once the first scan is in and the watches run.
    pub(super) started: tokio::sync::OnceCell<()>,
    /// The number of the last completed listing of sealed objects' keys (see
    /// `KvStore::sync_objects`); held while listing, so concurrent syncs share one.
    pub(super) objects_synced: tokio::sync::Mutex<u64>,
    /// Listings started so far (numbered from 1).
    pub(super) listings_started: std::sync::atomic::AtomicU64,
    /// The task that applies watch events; aborted with the index.
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The task's current watches' queues (`catalog/` and `topics/`): deliveries not
    /// applied yet. Empty between watches.
    watch_queues: Mutex<Vec<crate::WatchQueue>>,
    /// The task's watches that ended (and were replaced by a re-scan).
    watch_ends: std::sync::atomic::AtomicU64,
    /// Held by a sweep from choosing its keys until their deletion is applied: two at once
    /// (the periodic one and a topic deletion's) would choose overlapping keys, and the one
    /// landing second would fail its compares and leave its other keys for ten seconds.
    pub(super) sweeping: tokio::sync::Mutex<()>,
}

impl Drop for CatalogIndex {
    fn drop(&mut self) {
        if let Some(task) = self
            .task
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }
}

impl CatalogIndex {
    pub(super) fn lock(&self) -> MutexGuard<'_, IndexState> {
        // A panic while applying a change leaves a state no worse than a lagging one.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn set_task(&self, task: tokio::task::JoinHandle<()>) {
        *self.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }

    pub(super) fn replace_state(&self, mut state: IndexState) {
        let mut current = self.lock();
        state.keep_retired(&mut current);
        *current = state;
    }

    /// The task's watches are these from now on.
    pub(super) fn watching(&self, queues: Vec<crate::WatchQueue>) {
        *self.watch_queues.lock().unwrap_or_else(|e| e.into_inner()) = queues;
    }

    /// The task's watches ended; it re-scans and watches again.
    pub(super) fn watch_ended(&self) {
        self.watch_queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.watch_ends
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// (deliveries the task has not applied, watches ended so far).
    pub(super) fn watch_lag(&self) -> (usize, u64) {
        let queued = self
            .watch_queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|q| q.queued())
            .sum();
        let ends = self.watch_ends.load(std::sync::atomic::Ordering::Relaxed);
        (queued, ends)
    }
}

/// Reads every key of `range` in pages; returns them and the first page's revision (a watch
/// from one past it misses nothing the pages missed).
pub(super) async fn scan<K: Kv>(kv: &K, range: KeyRange) -> Result<(Vec<KeyValue>, Revision)> {
    let mut out = Vec::new();
    let mut revision = None;
    let mut next = range.clone();
    loop {
        let resp = kv.range(Get::new(next.clone()).limit(SCAN_PAGE)).await?;
        revision.get_or_insert(resp.revision);
        let last = resp.kvs.last().map(|kv| kv.key.clone());
        let more = resp.more && resp.kvs.len() == SCAN_PAGE;
        out.extend(resp.kvs);
        match last {
            Some(mut last) if more => {
                last.push(0);
                next.start = last;
            }
            _ => break,
        }
    }
    Ok((out, revision.unwrap_or(0)))
}

/// The state a scan of everything the index needs gives, and the revision to watch from.
pub(super) async fn load<K: Kv>(kv: &K, root: &Root) -> Result<(IndexState, Revision)> {
    // The catalog first: a topic whose entries it finds had its id key written before them,
    // so the later scan of topics finds the id unless the topic was deleted since.
    let (catalog, r2) = scan(kv, KeyRange::prefix(root.join("catalog/"))).await?;
    let (topics, r1) = scan(kv, KeyRange::prefix(keys::topics_prefix(root))).await?;
    let mut state = IndexState::default();
    let ids_prefix = root.join("topics/ids/");
    let live: BTreeSet<TopicId> = topics
        .iter()
        .filter_map(|kv| kv.key.strip_prefix(ids_prefix.as_bytes()))
        .filter_map(|id| std::str::from_utf8(id).ok())
        .filter_map(|id| uuid::Uuid::parse_str(id).ok())
        .map(TopicId)
        .collect();
    for kv in topics.iter().chain(catalog.iter()) {
        if let Err(e) = state.put(root, kv) {
            tracing::error!(error = %e, "skipping an undecodable catalog key");
        }
    }
    // Entries of topics without an id key are of deleted topics (an id key is written with
    // its topic, before any entry).
    let dead: Vec<TopicId> = state
        .partitions
        .keys()
        .map(|tp| tp.topic_id)
        .filter(|t| !live.contains(t))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    for t in dead {
        state.forget_topic(t);
    }
    Ok((state, r1.min(r2)))
}

/// Applies a batch of watch events.
pub(super) fn apply(index: &CatalogIndex, root: &Root, events: &[WatchEvent]) {
    let mut state = index.lock();
    for e in events {
        match e.kind {
            EventKind::Put => {
                if let Err(err) = state.put(root, &e.kv) {
                    tracing::error!(error = %err, "skipping an undecodable catalog key");
                }
            }
            EventKind::Delete => state.delete(root, &e.kv.key, e.kv.mod_revision),
        }
    }
}
