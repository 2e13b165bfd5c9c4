//! The in-memory catalogue's task ([`follow`]): applies watch events, re-scans when a
//! watch ends, and sweeps catalog keys nothing is served from any more (superseded sealed
//! objects, and segment keys below their partition's log start).

use super::catalog_index::{self, CatalogIndex};
use super::{KvStore, TXN_OPS_MAX};
use crate::keys;
use crate::kv::{CmpOp, Compare, KeyRange, Kv, Op, Target, Txn};
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
                loop {
                    let batch = tokio::select! {
                        // Polled in order: tokio's random branch order would make the
                        // simulation's runs differ for one seed.
                        biased;
                        b = catalog.recv() => b,
                        b = topics.recv() => b,
                        _ = clock.sleep_until(next_sweep) => {
                            next_sweep = clock.now() + SWEEP_INTERVAL;
                            let (Some(store), Some(index)) = (kv.upgrade(), index.upgrade()) else {
                                return;
                            };
                            sweep(&*store, &root, &index).await;
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
    use crate::{MetadataStore, SystemClock};
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
}
