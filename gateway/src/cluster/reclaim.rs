//! The controller's sweep of leaked objects ([`oxbow_segment_writer::orphans`]): every
//! `--orphan-sweep-interval`, one bounded sweep of the object store, deleting objects no
//! catalog key names that are older than `--orphan-grace`. One broker at a time is enough
//! (the controller); two (a controller change) delete the same objects, harmlessly.
//!
//! Lifecycle: [`run_orphan_sweep`] runs on the broker's `TaskTracker` until its token is
//! cancelled; each sweep is bounded by [`SWEEP_TIMEOUT`], and a failure is logged and
//! retried at the next tick.

use crate::broker::Broker;
use futures::StreamExt;
use object_store::ObjectStoreExt;
use oxbow_segment_writer::orphans::OrphanSweeper;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

/// Bound on one sweep (listing pages, metadata reads, deletes).
pub const SWEEP_TIMEOUT: Duration = Duration::from_secs(300);

/// Sweeps every `interval` while this broker is the controller, until `shutdown`; a zero
/// interval disables it.
pub async fn run_orphan_sweep(
    broker: Arc<Broker>,
    interval: Duration,
    grace: Duration,
    shutdown: CancellationToken,
) {
    if interval.is_zero() {
        return;
    }
    let mut sweeper = OrphanSweeper::new(grace);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate: the first sweep waits one interval after start-up.
    tick.tick().await;
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if broker.cluster.controller() != Some(broker.cluster.me()) {
            continue;
        }
        let log = &broker.log;
        let swept = tokio::time::timeout(
            SWEEP_TIMEOUT,
            sweeper.sweep(
                log.object_store().as_ref(),
                broker.metadata.as_ref(),
                SystemTime::now(),
            ),
        )
        .await;
        match swept {
            Ok(Ok(stats)) => {
                broker
                    .metrics
                    .orphan_objects_deleted
                    .fetch_add(stats.deleted as u64, Ordering::Relaxed);
                tracing::debug!(?stats, "object sweep");
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the object sweep failed; retried next interval")
            }
            Err(_) => tracing::warn!("the object sweep timed out; retried next interval"),
        }
    }
}

/// Deletes the sealed objects the catalogue retired (their keys deleted because nothing is
/// served from them: every partition in them deleted with its topic, or superseded by
/// compaction, whose own deletes usually came first), each `delay` to twice `delay` after
/// it went, so reads that looked it up just before have finished — minutes, where the
/// orphan sweep would wait its grace period (an hour). Every broker takes its catalogue's
/// list each `delay` (so it stays short); the controller deletes, the others forget.
/// A failed delete is left to the orphan sweep.
pub async fn run_retired_reclaim(
    broker: Arc<Broker>,
    delay: Duration,
    shutdown: CancellationToken,
) {
    if delay.is_zero() {
        return;
    }
    let mut tick = tokio::time::interval(delay);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut mark = 0;
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let (due, next) = broker.metadata.retired_objects(mark);
        mark = next;
        if due.is_empty() || broker.cluster.controller() != Some(broker.cluster.me()) {
            continue;
        }
        let store = broker.log.object_store();
        let deletes = futures::stream::iter(due)
            .map(|key| {
                let store = store.clone();
                async move {
                    let path = object_store::path::Path::from(key.as_str());
                    match tokio::time::timeout(SWEEP_TIMEOUT, store.delete(&path)).await {
                        Ok(Ok(())) | Ok(Err(object_store::Error::NotFound { .. })) => true,
                        Ok(Err(e)) => {
                            tracing::warn!(%key, error = %e, "deleting a retired object failed; the orphan sweep retries");
                            false
                        }
                        Err(_) => false,
                    }
                }
            })
            .buffer_unordered(RETIRED_DELETES_AT_ONCE)
            .filter(|deleted| futures::future::ready(*deleted))
            .count()
            .await;
        broker
            .metrics
            .orphan_objects_deleted
            .fetch_add(deletes as u64, Ordering::Relaxed);
        tracing::debug!(deleted = deletes, "deleted retired objects");
    }
}

/// Deletes of retired objects in flight at once.
const RETIRED_DELETES_AT_ONCE: usize = 16;

/// Drops the WAL copies this broker holds of sources gone for good (see
/// [`oxbow_segment_writer::replica_store::gone_sources`]): every `interval`, from the
/// registered brokers and every partition's leader and `recover_from` in this broker's
/// topic view, once that has held for `grace`. Every broker runs it for its own copies.
pub async fn run_wal_copy_gc(
    broker: Arc<Broker>,
    interval: Duration,
    grace: Duration,
    shutdown: CancellationToken,
) {
    use oxbow_segment_writer::replica_store::{gone_sources, SourceUse};
    if interval.is_zero() {
        return;
    }
    let mut gone_since = std::collections::BTreeMap::new();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let store = broker.log.replica_store.clone();
        let sources = match oxbow_metadata::blocking::run_blocking(move || store.sources()).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "listing WAL copies failed");
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "listing WAL copies failed");
                continue;
            }
        };
        if sources.is_empty() {
            gone_since.clear();
            continue;
        }
        let registered =
            match tokio::time::timeout(SWEEP_TIMEOUT, broker.metadata.list_brokers()).await {
                Ok(Ok(b)) => b.into_iter().map(|b| b.broker_id).collect(),
                // Without a current view nothing is judged gone.
                _ => continue,
            };
        let mut named = std::collections::BTreeSet::new();
        for t in broker.topics() {
            for p in &t.partitions {
                named.insert(p.leader);
                if let Some(r) = p.recover_from {
                    named.insert(r);
                }
            }
        }
        let used = SourceUse { registered, named };
        for source in gone_sources(
            &sources,
            &used,
            &mut gone_since,
            std::time::Instant::now(),
            grace,
        ) {
            let store = broker.log.replica_store.clone();
            match oxbow_metadata::blocking::run_blocking(move || store.drop_source(source)).await {
                Ok(Ok(freed)) => {
                    gone_since.remove(&source);
                    broker
                        .metrics
                        .wal_copy_sources_dropped
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        source,
                        freed_bytes = freed,
                        "dropped the WAL copies of a broker gone for good"
                    );
                }
                Ok(Err(e)) => {
                    tracing::warn!(source, error = %e, "dropping WAL copies failed; retried next interval")
                }
                Err(e) => {
                    tracing::warn!(source, error = %e, "dropping WAL copies failed; retried next interval")
                }
            }
        }
    }
}
