//! Which revision the metadata service's history may be compacted to: pure, no I/O, no
//! clock (the driver, [`super::history`], passes the time and the revisions it read).
//!
//! Rule, as etcd's own `--auto-compaction-mode=periodic`: the driver samples (time, current
//! revision) every [`sample_every`]; the history is compacted to the newest sample at least
//! `retention` old, so every revision of the last `retention` stays watchable (between
//! `retention` and `retention + sample_every` are kept). A watch resumed from a revision
//! read less than `retention` ago is therefore never refused, and one refused anyway (a
//! reader stalled longer) ends and re-reads (ARCHITECTURE.md, decision 24).
//!
//! Samples are bounded: those older than the chosen one are dropped, and at most
//! [`SAMPLES_MAX`] are kept. A revision lower than the previous sample's means the metadata
//! service's history started again (etcd restored from a snapshot, a new cluster under the
//! same address): the older samples are forgotten, so no compaction names a revision the
//! service has not reached.

use std::collections::VecDeque;
use std::time::Duration;

/// Most samples kept (a retention of hours at the slowest sampling rate needs ~60).
pub const SAMPLES_MAX: usize = 1024;

/// How often to sample for a `retention`: a tenth of it (etcd's periodic compactor does the
/// same), at least every second and at most every minute.
pub fn sample_every(retention: Duration) -> Duration {
    (retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// The samples and what has been compacted (see the module docs).
#[derive(Debug)]
pub struct HistoryRetention {
    retention: Duration,
    /// `(time in ms on the driver's clock, revision)`, oldest first, revisions ascending.
    samples: VecDeque<(u64, i64)>,
    /// The highest revision compacted to by this broker (0: none).
    compacted: i64,
}

impl HistoryRetention {
    pub fn new(retention: Duration) -> Self {
        HistoryRetention {
            retention,
            samples: VecDeque::new(),
            compacted: 0,
        }
    }

    /// Records that the current revision was `revision` at `now_ms`.
    pub fn sample(&mut self, now_ms: u64, revision: i64) {
        if self.samples.back().is_some_and(|(_, r)| *r > revision) {
            // The service's revisions went back: its history started again.
            self.samples.clear();
            self.compacted = 0;
        }
        if self.samples.len() == SAMPLES_MAX {
            self.samples.pop_front();
        }
        self.samples.push_back((now_ms, revision));
    }

    /// The revision to compact to at `now_ms`, if one is due: the newest sample at least
    /// `retention` old, if it is past what was compacted already. Drops the samples older
    /// than it (they can never be chosen again).
    pub fn due(&mut self, now_ms: u64) -> Option<i64> {
        let retention_ms = u64::try_from(self.retention.as_millis()).unwrap_or(u64::MAX);
        let cutoff = now_ms.checked_sub(retention_ms)?;
        let newest_old = self.samples.iter().rposition(|(t, _)| *t <= cutoff)?;
        self.samples.drain(..newest_old);
        let (_, revision) = *self.samples.front()?;
        (revision > self.compacted).then_some(revision)
    }

    /// Records a compaction that succeeded (or was found done already).
    pub fn compacted(&mut self, revision: i64) {
        self.compacted = self.compacted.max(revision);
    }

    /// The highest revision this broker compacted to (0: none yet).
    pub fn compacted_revision(&self) -> i64 {
        self.compacted
    }

    /// Samples held (for tests and bounds).
    pub fn samples(&self) -> usize {
        self.samples.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIN: u64 = 60_000;

    #[test]
    fn sampling_follows_the_retention_within_bounds() {
        assert_eq!(
            sample_every(Duration::from_secs(300)),
            Duration::from_secs(30)
        );
        assert_eq!(sample_every(Duration::from_secs(2)), Duration::from_secs(1));
        assert_eq!(
            sample_every(Duration::from_secs(86_400)),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn nothing_is_due_before_a_sample_is_retention_old() {
        let mut h = HistoryRetention::new(Duration::from_secs(300));
        assert_eq!(h.due(0), None, "no sample");
        h.sample(0, 10);
        h.sample(MIN, 20);
        assert_eq!(h.due(4 * MIN), None);
        assert_eq!(h.due(5 * MIN - 1), None);
        assert_eq!(h.due(5 * MIN), Some(10), "exactly retention old");
    }

    #[test]
    fn compacts_to_the_newest_sample_old_enough_and_keeps_the_window() {
        let mut h = HistoryRetention::new(Duration::from_secs(300));
        for m in 0..=10 {
            h.sample(m * MIN, 100 + m as i64 * 10);
        }
        // At 10 min, the newest sample at least 5 min old is the one taken at 5 min.
        assert_eq!(h.due(10 * MIN), Some(150));
        h.compacted(150);
        assert_eq!(h.compacted_revision(), 150);
        // The samples before it are gone; it and the window after it stay.
        assert_eq!(h.samples(), 6);
        // Nothing new is due until a newer sample ages.
        assert_eq!(h.due(10 * MIN + 1), None);
        assert_eq!(h.due(11 * MIN), Some(160));
    }

    #[test]
    fn an_idle_store_is_not_compacted_twice() {
        let mut h = HistoryRetention::new(Duration::from_secs(60));
        h.sample(0, 7);
        assert_eq!(h.due(MIN), Some(7));
        h.compacted(7);
        h.sample(MIN, 7);
        h.sample(2 * MIN, 7);
        assert_eq!(h.due(2 * MIN), None, "the revision did not move");
    }

    #[test]
    fn a_history_that_starts_again_forgets_older_samples() {
        let mut h = HistoryRetention::new(Duration::from_secs(60));
        h.sample(0, 5_000);
        h.compacted(4_000);
        // etcd was replaced: revisions start low again.
        h.sample(MIN, 12);
        assert_eq!(h.samples(), 1);
        assert_eq!(h.compacted_revision(), 0);
        assert_eq!(h.due(MIN), None, "the new sample is not old yet");
        assert_eq!(h.due(2 * MIN), Some(12));
    }

    #[test]
    fn samples_stay_bounded() {
        let mut h = HistoryRetention::new(Duration::from_secs(3600 * 24 * 365));
        for i in 0..(SAMPLES_MAX as u64 * 2) {
            h.sample(i * 1000, i as i64);
        }
        assert_eq!(h.samples(), SAMPLES_MAX);
    }

    proptest! {
        /// Whatever the sampling, a chosen revision was sampled at least `retention` ago,
        /// every revision sampled within the retention is above it, and choices only rise.
        #[test]
        fn never_compacts_inside_the_retention(
            steps in proptest::collection::vec((1u64..120_000, 0i64..50, any::<bool>()), 1..200),
            retention_s in 1u64..600,
        ) {
            let retention = Duration::from_secs(retention_s);
            let mut h = HistoryRetention::new(retention);
            let (mut now, mut revision) = (0u64, 1i64);
            let mut sampled: Vec<(u64, i64)> = Vec::new();
            let mut last = 0;
            for (dt, dr, compact) in steps {
                now += dt;
                revision += dr;
                h.sample(now, revision);
                sampled.push((now, revision));
                if !compact {
                    continue;
                }
                if let Some(r) = h.due(now) {
                    prop_assert!(r > last);
                    let cutoff = now - retention_s * 1000;
                    prop_assert!(sampled.iter().any(|(t, s)| *s == r && *t <= cutoff));
                    for (t, s) in &sampled {
                        if *t > cutoff {
                            prop_assert!(*s >= r, "sample {s} at {t} is inside the retention");
                        }
                    }
                    h.compacted(r);
                    last = r;
                }
            }
        }
    }
}
