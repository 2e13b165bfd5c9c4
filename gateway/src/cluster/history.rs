//! Keeps the metadata service's history bounded, and its footprint on `/metrics`.
//!
//! etcd keeps every revision until a client compacts it, and refuses every write once its
//! database reaches its quota (2 GiB by default): measured at ~10 MB/s, an uncompacted
//! etcd grew ~4.9 GiB a day. So Oxbow compacts it itself, as etcd's
//! `--auto-compaction-mode=periodic` would: every broker samples the current revision every
//! [`sample_every`] (one read of one key); the controller compacts to the newest sample at
//! least `--metadata-history-retention` old ([`HistoryRetention`], pure). Only the
//! controller compacts, but two brokers doing it (a controller change) is harmless: a
//! compaction at or below the compacted revision succeeds. Every watch Oxbow keeps resumes
//! within the retention or re-reads (ARCHITECTURE.md, decision 24).
//!
//! The footprint (database size and size in use, keys under the cluster's root, revision)
//! is sampled every [`FOOTPRINT_EVERY`] on every broker, not per scrape: counting the keys
//! walks etcd's key index.
//!
//! Lifecycle: [`run_history`] runs on the broker's `TaskTracker` until its token is
//! cancelled; every metadata call is bounded by [`CALL_TIMEOUT`], and a failure is logged
//! and retried at the next tick.

use super::history_state::{sample_every, HistoryRetention};
use crate::broker::Broker;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How often the footprint is sampled for `/metrics`.
pub const FOOTPRINT_EVERY: Duration = Duration::from_secs(30);
/// Bound on one metadata call of this task (the store's own retries fit in it).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Samples revisions and the footprint, and compacts while this broker is the controller,
/// until `shutdown`. `retention` zero: never compacts (the footprint is still sampled).
pub async fn run_history(broker: Arc<Broker>, retention: Duration, shutdown: CancellationToken) {
    let compacting = !retention.is_zero();
    let mut core = HistoryRetention::new(retention);
    let start = Instant::now();
    let mut samples = tokio::time::interval(if compacting {
        sample_every(retention)
    } else {
        FOOTPRINT_EVERY
    });
    samples.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut footprints = tokio::time::interval(FOOTPRINT_EVERY);
    footprints.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = footprints.tick() => sample_footprint(&broker).await,
            _ = samples.tick(), if compacting => {
                let now_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
                compact_step(&broker, &mut core, now_ms).await;
            }
        }
    }
}

/// One sample, and a compaction if one is due and this broker is the controller.
async fn compact_step(broker: &Broker, core: &mut HistoryRetention, now_ms: u64) {
    let metadata = &broker.metadata;
    let revision = match tokio::time::timeout(CALL_TIMEOUT, metadata.metadata_revision()).await {
        Ok(Ok(Some(r))) => r,
        // A backend without revisions: nothing to bound.
        Ok(Ok(None)) => return,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "reading the metadata revision failed; next tick");
            return;
        }
        Err(_) => {
            tracing::debug!("reading the metadata revision timed out; next tick");
            return;
        }
    };
    let m = &broker.metrics;
    m.metadata_revision
        .store(revision.max(0) as u64, Ordering::Relaxed);
    core.sample(now_ms, revision);
    if broker.cluster.controller() != Some(broker.cluster.me()) {
        return;
    }
    let Some(target) = core.due(now_ms) else {
        return;
    };
    match tokio::time::timeout(CALL_TIMEOUT, metadata.compact_history(target)).await {
        Ok(Ok(())) => {
            core.compacted(target);
            m.metadata_compactions.fetch_add(1, Ordering::Relaxed);
            m.metadata_compacted_revision
                .fetch_max(target.max(0) as u64, Ordering::Relaxed);
            tracing::debug!(
                revision = target,
                "compacted the metadata service's history"
            );
        }
        Ok(Err(e)) => {
            m.metadata_compaction_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, revision = target,
                "compacting the metadata service's history failed; retried next tick");
        }
        Err(_) => {
            m.metadata_compaction_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                revision = target,
                "compacting the metadata service's history timed out; retried next tick"
            );
        }
    }
}

async fn sample_footprint(broker: &Broker) {
    match tokio::time::timeout(CALL_TIMEOUT, broker.metadata.metadata_footprint()).await {
        Ok(Ok(Some(f))) => broker.metrics.set_metadata_footprint(f),
        Ok(Ok(None)) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "sampling the metadata footprint failed"),
        Err(_) => tracing::debug!("sampling the metadata footprint timed out"),
    }
}
