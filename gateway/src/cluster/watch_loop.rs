//! The one loop every broker-side follower of the metadata service runs: subscribe to a
//! watch, then list (subscribe first, so no change between the two is missed), then apply
//! events; subscribe and list again when the watch ends or every [`RECONCILE_EVERY`]
//! (a relist mends whatever a lost event left wrong). A failed subscribe or list is
//! retried after [`RETRY`]. What differs per follower — what it watches, how a list and an
//! event are applied — is its [`Followed`] implementation.

use super::controller::RECONCILE_EVERY;
use super::watch_metrics::WatchMetrics;
use oxbow_metadata::Watch;
use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Pause before subscribing or listing again after the metadata service failed.
pub(crate) const RETRY: Duration = Duration::from_millis(500);

/// Waits [`RETRY`] (or until shutdown).
pub(crate) async fn pause(shutdown: &CancellationToken) {
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = tokio::time::sleep(RETRY) => {}
    }
}

/// A kind of record a broker keeps a copy of from the metadata service.
pub(crate) trait Followed {
    type Event: Send;
    /// What is followed, for the logs ("brokers", "topics", …).
    const WHAT: &'static str;
    /// Its name on `/metrics` (`oxbow_metadata_watch_*{watch}`).
    const METRIC: &'static str;
    /// Where its watch's queue is reported.
    fn metrics(&self) -> &WatchMetrics;
    /// Subscribes to changes.
    fn subscribe(&self) -> impl Future<Output = oxbow_metadata::Result<Watch<Self::Event>>> + Send;
    /// Lists everything and makes the copy that list.
    fn relist(&self) -> impl Future<Output = oxbow_metadata::Result<()>> + Send;
    /// Applies `first` (and, if it likes, whatever else `watch` already holds).
    fn apply(&self, first: Self::Event, watch: &mut Watch<Self::Event>);
}

/// Keeps `followed`'s copy current until `shutdown`.
pub(crate) async fn follow<F: Followed>(followed: &F, shutdown: &CancellationToken) {
    while !shutdown.is_cancelled() {
        let mut watch = match followed.subscribe().await {
            Ok(w) => {
                followed.metrics().watching(F::METRIC, w.queue());
                w
            }
            Err(e) => {
                tracing::debug!(error = %e, what = F::WHAT, "watching failed; retrying");
                pause(shutdown).await;
                continue;
            }
        };
        if let Err(e) = followed.relist().await {
            tracing::debug!(error = %e, what = F::WHAT, "listing failed; retrying");
            pause(shutdown).await;
            continue;
        }
        let relist = tokio::time::sleep(RECONCILE_EVERY);
        tokio::pin!(relist);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = &mut relist => break,
                event = watch.recv() => match event {
                    Some(first) => followed.apply(first, &mut watch),
                    None => {
                        followed.metrics().ended(F::METRIC);
                        break;
                    }
                },
            }
        }
    }
}
