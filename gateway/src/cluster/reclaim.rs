//! The controller's sweep of leaked objects ([`oxbow_segment_writer::orphans`]): every
//! `--orphan-sweep-interval`, one bounded sweep of the object store, deleting objects no
//! catalog key names that are older than `--orphan-grace`. One broker at a time is enough
//! (the controller); two (a controller change) delete the same objects, harmlessly.
//!
//! Lifecycle: [`run_orphan_sweep`] runs on the broker's `TaskTracker` until its token is
//! cancelled; each sweep is bounded by [`SWEEP_TIMEOUT`], and a failure is logged and
//! retried at the next tick.

use crate::broker::Broker;
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
