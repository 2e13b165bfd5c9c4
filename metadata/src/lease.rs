//! Keeping a broker's lease, and knowing by the broker's own clock whether it still holds it.
//!
//! A broker may acknowledge a produce only while it is certain its lease is alive: once the
//! lease expires, the controller may give its partitions to another broker (bumping their
//! leader epochs), and an ack after that point could be for a write that is then lost.
//! [`LeaseGuard`] answers "certainly alive?" from a monotonic clock: valid until the send
//! time of the last successful keep-alive plus the TTL, minus a safety margin (for the two
//! clocks' rate difference and the time the keep-alive spent in flight *before* etcd reset
//! its timer, which the send time already covers). A paused process (SIGSTOP, a long GC-like
//! stall) therefore finds its guard invalid on resume, before any further ack.
//!
//! Lifecycle: [`run_lease_keeper`] runs as one background task per broker. It sends a
//! keep-alive every TTL/3; on `LeaseExpired` it invalidates the guard, registers again with
//! a new lease, runs the `on_new_lease` hook (the broker re-establishes its leadership by
//! bumping leader epochs, see `gateway/src/server.rs`), and only then validates the guard
//! again. On shutdown it revokes the lease so the broker's departure is seen at once.

use crate::clock::{Clock, SystemClock};
use crate::error::{ErrorKind, Result};
use crate::store::{BrokerRegistration, Lease, LeaseId, MetadataStore};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
// tokio's clock: the OS clock in production, the paused one in tests and the simulation.
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Whether this broker certainly still holds its lease. Cheap to clone and to check.
#[derive(Clone)]
pub struct LeaseGuard {
    inner: Arc<GuardInner>,
}

struct GuardInner {
    /// Where "now" is read (the production clock unless injected).
    clock: Arc<dyn Clock>,
    /// The origin of `valid_until_nanos` (a monotonic clock).
    base: Instant,
    /// Nanoseconds after `base` until which the lease is certainly alive; 0 = invalid.
    valid_until_nanos: AtomicU64,
    /// The lease this guard tracks (0 = none).
    lease_id: AtomicI64,
    /// Set by [`LeaseGuard::invalidate`] (the lease is gone, not merely unconfirmed),
    /// cleared by the next renewal.
    lost: AtomicBool,
    /// Woken by every renewal and invalidation, for [`LeaseGuard::wait_renewed`].
    changed: Notify,
    /// Never expires (the embedded default on one node, where nothing can take over).
    always: bool,
}

impl std::fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("valid", &self.is_valid())
            .field("lease_id", &self.lease_id())
            .finish()
    }
}

impl LeaseGuard {
    /// A guard that is invalid until [`LeaseGuard::renewed`].
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// Like [`LeaseGuard::new`], reading the time from `clock` (simulated time in tests).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self::build(clock, false)
    }

    /// A guard that is always valid: for a single node that no one can fence.
    pub fn always_valid() -> Self {
        Self::build(Arc::new(SystemClock), true)
    }

    /// Now, on this guard's clock, as [`LeaseGuard::renewed`] takes it.
    pub fn now(&self) -> Instant {
        self.inner.clock.now()
    }

    fn build(clock: Arc<dyn Clock>, always: bool) -> Self {
        let base = clock.now();
        LeaseGuard {
            inner: Arc::new(GuardInner {
                clock,
                base,
                valid_until_nanos: AtomicU64::new(0),
                lease_id: AtomicI64::new(0),
                lost: AtomicBool::new(false),
                changed: Notify::new(),
                always,
            }),
        }
    }

    /// The margin subtracted from the TTL: a fifth of it, at least 200 ms.
    pub fn margin(ttl: Duration) -> Duration {
        (ttl / 5).max(Duration::from_millis(200))
    }

    /// Records a successful grant or keep-alive of `lease` that was *sent* at `sent_at`.
    /// (A std `Instant` converts: callers outside the simulation may pass either.)
    pub fn renewed(&self, lease: LeaseId, sent_at: impl Into<Instant>, ttl: Duration) {
        let sent_at: Instant = sent_at.into();
        let until = sent_at + ttl.saturating_sub(Self::margin(ttl));
        let nanos = until
            .saturating_duration_since(self.inner.base)
            .as_nanos()
            .min(u128::from(u64::MAX)) as u64;
        self.inner.lease_id.store(lease, Ordering::Release);
        // Never move validity backwards: a slow older keep-alive answering after a newer one.
        self.inner
            .valid_until_nanos
            .fetch_max(nanos.max(1), Ordering::AcqRel);
        self.inner.lost.store(false, Ordering::Release);
        self.inner.changed.notify_waiters();
    }

    /// Marks the lease lost (expired, or about to be replaced).
    pub fn invalidate(&self) {
        self.inner.valid_until_nanos.store(0, Ordering::Release);
        self.inner.lost.store(true, Ordering::Release);
        self.inner.changed.notify_waiters();
    }

    /// Waits until this guard is valid for `lease` — the lease held when the caller began —
    /// or gives up after `max`. True if valid. False at once once that lease is known lost
    /// or replaced: a keep-alive was refused, or the broker registered with another lease
    /// (whose hook moved its leader epochs on), so whatever the caller did under the old one
    /// can no longer be vouched for. A lapse that ends with the same lease renewed (the
    /// metadata service was unreachable, then answered; etcd re-grants every lease a full
    /// TTL when it restarts) is a pause, not a loss: nothing could have taken over meanwhile.
    pub async fn wait_renewed(&self, lease: Option<LeaseId>, max: Duration) -> bool {
        let deadline = self.now() + max;
        loop {
            let changed = self.inner.changed.notified();
            if self.lease_id() != lease || self.inner.lost.load(Ordering::Acquire) {
                return false;
            }
            if self.is_valid() {
                return true;
            }
            // Validity begins only with a renewal, which wakes `changed` (created before the
            // checks above, so a renewal between them and the wait is not missed).
            let now = self.now();
            if now >= deadline {
                return false;
            }
            let _ = tokio::time::timeout(deadline - now, changed).await;
        }
    }

    /// True while the lease is certainly alive.
    pub fn is_valid(&self) -> bool {
        if self.inner.always {
            return true;
        }
        let until = self.inner.valid_until_nanos.load(Ordering::Acquire);
        let elapsed = self.now().saturating_duration_since(self.inner.base);
        until != 0 && (elapsed.as_nanos() as u64) < until
    }

    /// The lease last renewed, if any.
    pub fn lease_id(&self) -> Option<LeaseId> {
        match self.inner.lease_id.load(Ordering::Acquire) {
            0 => None,
            id => Some(id),
        }
    }
}

impl Default for LeaseGuard {
    fn default() -> Self {
        Self::new()
    }
}

/// What the broker does after it had to register with a new lease, before it serves again.
pub type NewLeaseHook =
    Arc<dyn Fn(Lease) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> + Send + Sync>;

/// Registers the broker and validates `guard`; the start-up half of [`run_lease_keeper`].
pub async fn register(
    store: &dyn MetadataStore,
    registration: &BrokerRegistration,
    ttl: Duration,
    guard: &LeaseGuard,
) -> Result<Lease> {
    let sent_at = guard.now();
    let lease = store.register_broker(registration.clone(), ttl).await?;
    guard.renewed(lease.id, sent_at, lease.ttl);
    Ok(lease)
}

/// Keeps `lease` alive until `shutdown`, re-registering when it is lost (see module docs).
pub async fn run_lease_keeper(
    store: Arc<dyn MetadataStore>,
    registration: BrokerRegistration,
    lease: Lease,
    guard: LeaseGuard,
    on_new_lease: Option<NewLeaseHook>,
    shutdown: CancellationToken,
) {
    let ttl = lease.ttl;
    let mut current = Some(lease);
    let mut tick = tokio::time::interval((ttl / 3).max(Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // Polled in order (shutdown first): tokio's random branch order would make the
            // simulation's runs differ for one seed.
            biased;
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        match current {
            Some(l) => {
                let sent_at = guard.now();
                match store.keep_alive(l.id).await {
                    Ok(ttl) => guard.renewed(l.id, sent_at, ttl),
                    Err(e) if e.kind() == ErrorKind::Fenced => {
                        tracing::error!(error = %e, "broker lease lost; no acks until re-registered");
                        guard.invalidate();
                        current = None;
                        // Re-register on the next tick (not in a tight loop).
                    }
                    Err(e) => {
                        // The guard lapses by itself if this goes on past the TTL.
                        tracing::warn!(error = %e, "lease keep-alive failed; retrying");
                    }
                }
            }
            None => {
                let sent_at = guard.now();
                match store.register_broker(registration.clone(), ttl).await {
                    Ok(l) => {
                        if let Some(hook) = &on_new_lease {
                            if let Err(e) = hook(l).await {
                                tracing::warn!(error = %e, "re-establishing leadership after a new lease failed; retrying");
                                let _ = store.revoke_lease(l.id).await;
                                continue;
                            }
                        }
                        guard.renewed(l.id, sent_at, l.ttl);
                        tracing::info!(lease = l.id, "broker registered again with a new lease");
                        current = Some(l);
                    }
                    Err(e) => tracing::warn!(error = %e, "registering the broker failed; retrying"),
                }
            }
        }
    }
    // Leaving: vacate the registration now instead of after the TTL.
    guard.invalidate();
    if let Some(l) = current {
        if let Err(e) = store.revoke_lease(l.id).await {
            tracing::warn!(error = %e, "revoking the broker lease failed; it expires by itself");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_is_valid_until_ttl_minus_margin_from_send_time() {
        let g = LeaseGuard::new();
        assert!(!g.is_valid());
        let ttl = Duration::from_secs(2);
        g.renewed(5, Instant::now(), ttl);
        assert!(g.is_valid());
        assert_eq!(g.lease_id(), Some(5));
        // Sent long ago: already lapsed.
        let g2 = LeaseGuard::new();
        if let Some(old) = Instant::now().checked_sub(Duration::from_secs(3)) {
            g2.renewed(6, old, ttl);
            assert!(!g2.is_valid());
        }
        g.invalidate();
        assert!(!g.is_valid());
        assert!(LeaseGuard::always_valid().is_valid());
    }

    #[tokio::test]
    async fn a_lapse_ends_with_the_same_lease_renewed_and_only_then() {
        let ttl = Duration::from_secs(2);
        let lapsed = |id| {
            let g = LeaseGuard::new();
            if let Some(old) = Instant::now().checked_sub(Duration::from_secs(3)) {
                g.renewed(id, old, ttl);
            }
            assert!(!g.is_valid());
            g
        };
        let wait = Duration::from_secs(5);

        // Renewed (the metadata service answered again): the waiter goes on.
        let g = lapsed(7);
        let renew = {
            let g = g.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                g.renewed(7, Instant::now(), ttl);
            })
        };
        assert!(g.wait_renewed(Some(7), wait).await);
        renew.await.expect("renewal task");

        // Lost (a keep-alive refused): at once, not after `wait`.
        let g = lapsed(8);
        let lose = {
            let g = g.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                g.invalidate();
            })
        };
        let started = Instant::now();
        assert!(!g.wait_renewed(Some(8), wait).await);
        assert!(started.elapsed() < Duration::from_secs(2));
        lose.await.expect("loss task");

        // Replaced by another lease: valid, but not for the lease the caller held.
        let g = lapsed(9);
        g.renewed(10, Instant::now(), ttl);
        assert!(!g.wait_renewed(Some(9), wait).await);

        // Never renewed: gives up after `max`.
        let g = lapsed(11);
        assert!(!g.wait_renewed(Some(11), Duration::from_millis(200)).await);
    }
}
