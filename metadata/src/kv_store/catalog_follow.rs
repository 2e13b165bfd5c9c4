//! The in-memory catalogue's task ([`follow`]): applies watch events, re-scans when a
//! watch ends, and sweeps catalog keys nothing is served from any more (superseded sealed
//! objects, and segment keys below their partition's log start).

use super::catalog_index::{self, CatalogIndex};
use super::{KvStore, TXN_OPS_MAX};
use crate::keys;
use crate::kv::{CmpOp, Compare, KeyRange, Kv, Op, Target, Txn};
use futures::future::OptionFuture;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// How often superseded objects' keys are looked for and deleted.
const SWEEP_INTERVAL: Duration = Duration::from_secs(10);
/// Pause before a watch that ended is re-established from a fresh scan.
const REWATCH_PAUSE: Duration = Duration::from_millis(500);

/// Most superseded objects' keys deleted per transaction (a compare and a delete each).
const SWEEP_BATCH: usize = TXN_OPS_MAX / 2;

/// The index's task: applies watch events of `catalog/` and `topics/` from `from` on;
/// re-scans and re-watches when a watch ends; every [`SWEEP_INTERVAL`] deletes keys of
/// sealed objects nothing is served from any more (each compared unchanged, so a racing
/// broker's identical sweep or a late rewrite is harmless).
pub(super) async fn follow<K: Kv>(
    kv: std::sync::Weak<K>,
    root: crate::keys::Root,
    index: std::sync::Weak<CatalogIndex>,
    clock: Arc<dyn crate::clock::Clock>,
    mut from: crate::kv::Revision,
) {
    // Both the store and the index are held weakly, and only while used: dropping the last
    // handle of a store closes its backend at once (an embedded file can be opened again).
    let mut next_sweep = clock.now() + SWEEP_INTERVAL;
    loop {
        let Some(store) = kv.upgrade() else { return };
        let watches = futures::future::try_join(
            store.watch(KeyRange::prefix(root.join("catalog/")), Some(from)),
            store.watch(KeyRange::prefix(keys::topics_prefix(&root)), Some(from)),
        )
        .await;
        drop(store);
        match watches {
            Ok((mut catalog, mut topics)) => {
                let Some(watching) = index.upgrade() else {
                    return;
                };
                watching.watching(vec![catalog.queue(), topics.queue()]);
                drop(watching);
                // The sweep in flight, polled beside the watches: its deletions wait on the
                // store (etcd's commit, or a slow or unreachable etcd up to the request
                // timeout), and changes must be applied meanwhile, or every read of the
                // catalogue is as stale as the slowest sweep.
                let mut sweeping: Option<Pin<Box<dyn Future<Output = ()> + Send>>> = None;
                loop {
                    let batch = tokio::select! {
                        // Polled in order: tokio's random branch order would make the
                        // simulation's runs differ for one seed.
                        biased;
                        b = catalog.recv() => b,
                        b = topics.recv() => b,
                        Some(()) = OptionFuture::from(sweeping.as_mut()), if sweeping.is_some() => {
                            sweeping = None;
                            next_sweep = clock.now() + SWEEP_INTERVAL;
                            continue;
                        }
                        _ = clock.sleep_until(next_sweep), if sweeping.is_none() => {
                            let (Some(store), Some(index)) = (kv.upgrade(), index.upgrade()) else {
                                return;
                            };
                            let root = root.clone();
                            sweeping = Some(Box::pin(async move { sweep(&*store, &root, &index).await }));
                            continue;
                        }
                    };
                    let Some(index) = index.upgrade() else { return };
                    match batch {
                        Some(events) => catalog_index::apply(&index, &root, &events),
                        None => {
                            index.watch_ended();
                            break;
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "catalog watch could not start; retrying"),
        }
        clock.sleep(REWATCH_PAUSE).await;
        let Some(store) = kv.upgrade() else { return };
        let loaded = catalog_index::load(&*store, &root).await;
        drop(store);
        match loaded {
            Ok((state, revision)) => {
                let Some(index) = index.upgrade() else { return };
                index.replace_state(state);
                from = revision + 1;
            }
            Err(e) => tracing::warn!(error = %e, "catalog re-scan failed; retrying"),
        }
    }
}

impl<K: Kv> KvStore<K> {
    /// Deletes, now, the keys of sealed objects nothing is served from (after a topic
    /// deletion, so its objects' keys do not wait for the periodic sweep).
    pub(super) async fn sweep_objects(&self) {
        if self.index.started.initialized() {
            sweep(&*self.kv, &self.root, &self.index).await;
        }
    }
}

async fn sweep<K: Kv>(kv: &K, root: &keys::Root, index: &CatalogIndex) {
    let _one_at_a_time = index.sweeping.lock().await;
    let (gone, trimmed) = {
        let mut state = index.lock();
        let gone = state.superseded_objects(SWEEP_BATCH);
        let trimmed = state.below_log_start(root, SWEEP_BATCH - gone.len());
        (gone, trimmed)
    };
    if !trimmed.is_empty() {
        sweep_keys(kv, root, index, trimmed, "catalog keys below the log start").await;
    }
    if !gone.is_empty() {
        sweep_keys(kv, root, index, gone, "catalog keys of compacted objects").await;
    }
}

/// Deletes catalog keys, each compared unchanged — all or nothing: a key changed since the
/// index saw it fails the batch, which the next sweep retries without it — and applies the
/// deletions to the index once they land.
async fn sweep_keys<K: Kv>(
    kv: &K,
    root: &keys::Root,
    index: &CatalogIndex,
    keys: Vec<(Vec<u8>, crate::kv::Revision)>,
    what: &str,
) {
    let txn = Txn::new()
        .when(keys.iter().map(|(k, r)| {
            Compare::new(
                KeyRange::key(k.clone()),
                Target::ModRevision(*r),
                CmpOp::Equal,
            )
        }))
        .then(
            keys.iter()
                .map(|(k, _)| Op::delete(KeyRange::key(k.clone()))),
        );
    match kv.txn(txn).await {
        Ok(resp) if resp.succeeded => {
            let mut state = index.lock();
            for (k, _) in &keys {
                state.delete(root, k, resp.revision);
            }
            tracing::debug!(keys = keys.len(), "deleted {what}");
        }
        Ok(_) => tracing::debug!("{what} changed under the sweep; next time"),
        Err(e) => tracing::warn!(error = %e, "deleting {what} failed"),
    }
}

#[cfg(test)]
mod tests {
    // A real runtime and real waits: the applier runs on another worker.
    #![allow(clippy::disallowed_methods)]

    use crate::kv::{Kv, Op, RedbKv, Txn};
    use crate::{
        CatalogCommit, CatalogEntry, CatalogReplace, EntryLayout, EpochFence, MetadataStore,
        PartitionState, SystemClock, TopicPartition, TopicSpec,
    };
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Duration;

    /// Polls `check` every 20 ms for up to 10 s.
    async fn until(what: &str, check: impl Fn() -> bool) {
        for _ in 0..500 {
            if check() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{what}: not within 10 s");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    // The test holds the index to stall its applier on purpose.
    #[allow(clippy::await_holding_lock)]
    async fn the_catalogue_watch_counts_changes_delivered_and_not_applied() {
        let kv = RedbKv::in_memory(Arc::new(SystemClock)).expect("kv");
        let store = super::KvStore::new(kv, crate::keys::Root::new("lag"));
        assert_eq!(store.catalog_watch_lag(), None, "not started: no catalogue");
        store.catalog_index().await.expect("start the catalogue");
        assert_eq!(store.catalog_watch_lag(), Some((0, 0)));
        // The applier takes the index's lock for each delivery: while this test holds it,
        // the first delivery waits inside the applier and the others queue.
        let held = store.index.lock();
        for i in 0..5 {
            let key = store.root.join(&format!("catalog/not-a-partition/{i}"));
            let put = Txn::new().then([Op::put(key.into_bytes(), "x")]);
            store.kv.txn(put).await.expect("put");
        }
        until("4 deliveries queued behind the stalled applier", || {
            store.catalog_watch_lag() == Some((4, 0))
        })
        .await;
        drop(held);
        until("the queue drained once the applier runs", || {
            store.catalog_watch_lag() == Some((0, 0))
        })
        .await;
    }

    /// A [`RedbKv`] whose transactions of deletions only (the sweep's) wait, while `held`,
    /// until released: an etcd slow to commit them.
    struct SlowDeletes {
        inner: RedbKv,
        held: std::sync::atomic::AtomicBool,
        release: tokio::sync::Notify,
        waiting: std::sync::atomic::AtomicUsize,
    }

    #[async_trait::async_trait]
    impl Kv for SlowDeletes {
        async fn range(&self, get: crate::kv::Get) -> crate::Result<crate::kv::RangeResponse> {
            self.inner.range(get).await
        }
        async fn txn(&self, txn: Txn) -> crate::Result<crate::kv::TxnResponse> {
            let deletes =
                !txn.then.is_empty() && txn.then.iter().all(|op| matches!(op, Op::Delete(_)));
            if deletes && self.held.load(Ordering::SeqCst) {
                let released = self.release.notified();
                self.waiting.fetch_add(1, Ordering::SeqCst);
                released.await;
            }
            self.inner.txn(txn).await
        }
        async fn watch(
            &self,
            range: crate::kv::KeyRange,
            from: Option<crate::kv::Revision>,
        ) -> crate::Result<crate::Watch<Vec<crate::kv::WatchEvent>>> {
            self.inner.watch(range, from).await
        }
        async fn grant(&self, ttl: Duration) -> crate::Result<crate::Lease> {
            self.inner.grant(ttl).await
        }
        async fn keep_alive(&self, lease: crate::LeaseId) -> crate::Result<Duration> {
            self.inner.keep_alive(lease).await
        }
        async fn revoke(&self, lease: crate::LeaseId) -> crate::Result<()> {
            self.inner.revoke(lease).await
        }
        async fn compact(&self, revision: crate::kv::Revision) -> crate::Result<()> {
            self.inner.compact(revision).await
        }
        async fn count(&self, range: crate::kv::KeyRange) -> crate::Result<u64> {
            self.inner.count(range).await
        }
        async fn status(&self) -> crate::Result<crate::kv::KvStatus> {
            self.inner.status().await
        }
    }

    fn entry(tp: TopicPartition, base: i64, last: i64, layout: EntryLayout) -> CatalogEntry {
        CatalogEntry {
            topic_id: tp.topic_id,
            partition: tp.partition,
            base_offset: base,
            last_offset: last,
            max_timestamp_ms: base,
            object_key: format!("obj-{base}"),
            byte_start: 0,
            byte_len: 10,
            crc32c: 7,
            leader_epoch: 0,
            layout,
            txn: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn changes_are_applied_while_a_sweep_waits_on_the_store() {
        let clock = crate::SimClock::new(1_700_000_000_000);
        let kv = SlowDeletes {
            inner: RedbKv::in_memory(clock.clone()).expect("kv"),
            held: false.into(),
            release: tokio::sync::Notify::new(),
            waiting: 0.into(),
        };
        let store = super::KvStore::new(kv, crate::keys::Root::new("sweep")).with_clock(clock);
        let spec = TopicSpec {
            name: "swept".into(),
            partitions: 1,
            replication_factor: 1,
            configs: Default::default(),
        };
        let t = store.create_topic(spec, 1).await.expect("create");
        let tp = TopicPartition::new(t.topic_id, 0);
        let fence = EpochFence {
            topic_partition: tp,
            leader_epoch: 0,
        };
        let commit = |base: i64| CatalogCommit {
            entries: vec![entry(tp, base, base + 9, EntryLayout::Batches)],
            fences: vec![fence],
            writer: None,
        };
        store.commit_catalog(commit(0)).await.expect("commit");
        // Compacted into a segment (a per-partition key), then wholly below the log start:
        // the sweep's to delete.
        let old = store
            .catalog_entries(t.topic_id, 0, 0, 10)
            .await
            .expect("read");
        let segment = CatalogEntry {
            object_key: "segments/0-9.oxs".into(),
            ..entry(tp, 0, 9, EntryLayout::SegmentIndex)
        };
        let replace = CatalogReplace {
            fence,
            old,
            new: vec![segment],
        };
        store
            .replace_catalog_entries(replace)
            .await
            .expect("replace");
        store.commit_catalog(commit(10)).await.expect("commit");
        let (_, state) = store
            .partition_state(t.topic_id, 0)
            .await
            .expect("state")
            .expect("some");
        let version = state.version;
        let advanced = PartitionState {
            log_start_offset: 10,
            ..state
        };
        store
            .update_partition(t.topic_id, version, advanced)
            .await
            .expect("advance");

        store.kv.held.store(true, Ordering::SeqCst);
        // The first sweep starts within its interval and waits on the store.
        tokio::time::sleep(super::SWEEP_INTERVAL * 2).await;
        assert_eq!(
            store.kv.waiting.load(Ordering::SeqCst),
            1,
            "the sweep waits"
        );
        // Meanwhile a seal is catalogued: the catalogue serves it.
        store.commit_catalog(commit(20)).await.expect("commit");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            store.catalog_watch_lag(),
            Some((0, 0)),
            "nothing left queued"
        );
        let last = store.catalog_last(t.topic_id, 0).await.expect("last");
        assert_eq!(
            last.map(|e| e.last_offset),
            Some(29),
            "applied while the sweep waits"
        );
        assert_eq!(
            store.kv.waiting.load(Ordering::SeqCst),
            1,
            "one sweep at a time"
        );

        // Released, the sweep deletes the segment's key.
        store.kv.held.store(false, Ordering::SeqCst);
        store.kv.release.notify_waiters();
        let segment_key = crate::keys::catalog::ser_key(&store.root, t.topic_id, 0, 0);
        for _ in 0..100 {
            let get = crate::kv::Get::key(segment_key.clone().into_bytes());
            if store.kv.range(get).await.expect("range").kvs.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the sweep did not delete the segment key below the log start");
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_topics_objects_are_retired_once_and_handed_out_a_mark_later() {
        let clock = crate::SimClock::new(1_700_000_000_000);
        let kv = RedbKv::in_memory(clock.clone()).expect("kv");
        let store = super::KvStore::new(kv, crate::keys::Root::new("retire")).with_clock(clock);
        let spec = |name: &str| TopicSpec {
            name: name.into(),
            partitions: 1,
            replication_factor: 1,
            configs: Default::default(),
        };
        let gone = store.create_topic(spec("gone"), 1).await.expect("create");
        let kept = store.create_topic(spec("kept"), 1).await.expect("create");
        for (t, base) in [(&gone, 0), (&gone, 10), (&kept, 0)] {
            let tp = TopicPartition::new(t.topic_id, 0);
            let e = CatalogEntry {
                object_key: format!("data/{}-{base}", t.name),
                ..entry(tp, base, base + 9, EntryLayout::Batches)
            };
            let fence = EpochFence {
                topic_partition: tp,
                leader_epoch: 0,
            };
            let commit = CatalogCommit {
                entries: vec![e],
                fences: vec![fence],
                writer: None,
            };
            store.commit_catalog(commit).await.expect("commit");
        }
        let (due, mark) = store.retired_objects(0);
        assert!(due.is_empty());
        store.delete_topic("gone").await.expect("delete");
        tokio::time::sleep(super::SWEEP_INTERVAL * 2).await;
        let (due, next) = store.retired_objects(mark);
        assert!(
            due.is_empty(),
            "nothing is handed out before a mark passed after it went"
        );
        let (mut due, last) = store.retired_objects(next);
        due.sort();
        assert_eq!(
            due,
            vec!["data/gone-0", "data/gone-10"],
            "the deleted topic's objects, once"
        );
        assert_eq!(store.retired_objects(last).0, Vec::<String>::new());
        let last_entry = store.catalog_last(kept.topic_id, 0).await.expect("last");
        assert_eq!(
            last_entry.map(|e| e.object_key),
            Some("data/kept-0".into()),
            "kept"
        );
    }
}
