//! Recoveries that could not finish yet, with their retry schedule (pure: the caller passes
//! `now` and a jitter draw; [`crate::log::LogManager::run_recoveries`] drives it).
//!
//! A broker that lost its WAL recovers its old tail from its WAL replicas before it serves
//! the partitions it leads; a partition whose state carries `recover_from` recovers that
//! broker's tail before it opens (ARCHITECTURE decision 13). Both need an in-sync replica of
//! the source to answer, which after a whole-cluster crash may not be up yet. Instead of
//! failing (or exiting), each such recovery waits here: retried with bounded, jittered
//! exponential backoff, reported on `/readyz`, and answered `NOT_LEADER_OR_FOLLOWER` (clients
//! look the leader up again and retry) until it succeeds.

use oxbow_metadata::{BrokerId, TopicId, TopicPartition};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// First retry delay.
pub const BACKOFF_MIN: Duration = Duration::from_millis(250);
/// Longest retry delay: bounds how long after its replicas appear a recovery finishes.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What is being recovered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RecoveryKey {
    /// This broker's own WAL tail, lost with its disk.
    OwnTail,
    /// A partition led here whose `recover_from` broker's tail is not recovered yet.
    Partition(TopicPartition),
}

/// One recovery waiting for its next attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct Pending {
    /// The partition's topic (for [`RecoveryKey::Partition`]): name for reports, id to
    /// reload it.
    pub topic: Option<(TopicId, String)>,
    /// Whose tail is needed.
    pub source: BrokerId,
    /// Attempts so far, all failed.
    pub attempts: u32,
    pub last_error: String,
    pub next_attempt: Instant,
}

/// Every recovery not finished yet.
#[derive(Debug, Default)]
pub struct Recoveries {
    pending: BTreeMap<RecoveryKey, Pending>,
}

/// The delay before attempt `attempts + 1`: doubling from [`BACKOFF_MIN`], capped at
/// [`BACKOFF_MAX`], scaled by `jitter` in `[0.5, 1.0]` so brokers restarted together do
/// not retry in lockstep.
pub fn backoff(attempts: u32, jitter: f64) -> Duration {
    let doubled = BACKOFF_MIN.saturating_mul(1u32 << attempts.saturating_sub(1).min(16));
    doubled.min(BACKOFF_MAX).mul_f64(jitter.clamp(0.5, 1.0))
}

impl Recoveries {
    /// Registers a recovery to be attempted at `now` (if not already waiting).
    pub fn add(
        &mut self,
        key: RecoveryKey,
        source: BrokerId,
        topic: Option<(TopicId, String)>,
        now: Instant,
    ) {
        self.pending.entry(key).or_insert(Pending {
            topic,
            source,
            attempts: 0,
            last_error: String::new(),
            next_attempt: now,
        });
    }

    /// An attempt failed: schedules the next one. Returns its delay.
    pub fn failed(
        &mut self,
        key: RecoveryKey,
        source: BrokerId,
        topic: Option<(TopicId, String)>,
        error: String,
        now: Instant,
        jitter: f64,
    ) -> (u32, Duration) {
        self.add(key, source, topic, now);
        let p = self
            .pending
            .get_mut(&key)
            .expect("added just above while the lock is held");
        p.attempts = p.attempts.saturating_add(1);
        p.last_error = error;
        let delay = backoff(p.attempts, jitter);
        p.next_attempt = now + delay;
        (p.attempts, delay)
    }

    /// The recovery finished (or is no longer needed).
    pub fn done(&mut self, key: RecoveryKey) -> Option<Pending> {
        self.pending.remove(&key)
    }

    pub fn get(&self, key: &RecoveryKey) -> Option<&Pending> {
        self.pending.get(key)
    }

    /// Whether `key` waits and its next attempt is not due yet.
    pub fn backing_off(&self, key: &RecoveryKey, now: Instant) -> bool {
        self.pending.get(key).is_some_and(|p| p.next_attempt > now)
    }

    /// Makes every waiting recovery due at `now` (a broker joined: it may be the replica
    /// they wait for). Backoff resumes from the attempt count if it fails again.
    pub fn expedite(&mut self, now: Instant) {
        for p in self.pending.values_mut() {
            p.next_attempt = p.next_attempt.min(now);
        }
    }

    /// Recoveries whose next attempt is due.
    pub fn due(&self, now: Instant) -> Vec<(RecoveryKey, Pending)> {
        self.pending
            .iter()
            .filter(|(_, p)| p.next_attempt <= now)
            .map(|(k, p)| (*k, p.clone()))
            .collect()
    }

    /// When the earliest next attempt is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.next_attempt).min()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Every waiting recovery, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&RecoveryKey, &Pending)> {
        self.pending.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_is_capped_and_jittered() {
        assert_eq!(backoff(1, 1.0), BACKOFF_MIN);
        assert_eq!(backoff(2, 1.0), BACKOFF_MIN * 2);
        assert_eq!(backoff(3, 1.0), BACKOFF_MIN * 4);
        assert_eq!(backoff(40, 1.0), BACKOFF_MAX);
        assert_eq!(backoff(40, 0.5), BACKOFF_MAX / 2);
        assert_eq!(backoff(1, 0.0), BACKOFF_MIN / 2, "jitter is clamped");
    }

    #[test]
    fn a_failed_attempt_waits_its_backoff_then_is_due_again() {
        let t0 = Instant::now();
        let mut r = Recoveries::default();
        r.add(RecoveryKey::OwnTail, 1, None, t0);
        assert_eq!(r.due(t0).len(), 1);
        let (n, delay) = r.failed(RecoveryKey::OwnTail, 1, None, "down".into(), t0, 1.0);
        assert_eq!((n, delay), (1, BACKOFF_MIN));
        assert!(r.backing_off(&RecoveryKey::OwnTail, t0));
        assert!(r.due(t0).is_empty());
        assert_eq!(r.next_due(), Some(t0 + BACKOFF_MIN));
        assert_eq!(r.due(t0 + BACKOFF_MIN).len(), 1);
        let (n, delay) = r.failed(RecoveryKey::OwnTail, 1, None, "down".into(), t0, 1.0);
        assert_eq!((n, delay), (2, BACKOFF_MIN * 2));
        assert_eq!(r.get(&RecoveryKey::OwnTail).map(|p| p.attempts), Some(2));
        r.expedite(t0);
        assert_eq!(r.due(t0).len(), 1, "a joining broker makes it due at once");
        assert!(r.done(RecoveryKey::OwnTail).is_some());
        assert!(r.is_empty() && r.next_due().is_none());
    }
}
