//! How long the groups a coordinator holds take to rebalance, and how often they do
//! (`oxbow_group_rebalance_seconds`, `oxbow_group_rebalances_total` on `/metrics`). The
//! groups' state machines report their rebalances ([`Rebalances`], from the time they are
//! given); the coordinator hands them here after every call.

use super::group::Rebalances;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::{AtomicU64, Ordering};

/// How long this coordinator's groups take to rebalance, and how often they do
/// (`oxbow_group_rebalance_seconds`, `oxbow_group_rebalances_total`).
pub struct RebalanceMetrics {
    /// From entering PreparingRebalance to Stable, per completed rebalance. Its buckets
    /// are the latency buckets (50 µs × √2ⁿ, to ~13 s) plus 30 s, 1 min and 5 min: a
    /// rebalance waits for every member's rejoin, up to its rebalance timeout.
    seconds: Histogram,
    /// Rebalances begun (completed or not).
    begun: AtomicU64,
}

impl Default for RebalanceMetrics {
    fn default() -> Self {
        RebalanceMetrics {
            seconds: Histogram::new(rebalance_buckets()),
            begun: AtomicU64::new(0),
        }
    }
}

/// The shared latency buckets, then minutes (see [`RebalanceMetrics::seconds`]).
fn rebalance_buckets() -> impl Iterator<Item = f64> {
    oxbow_segment_writer::latency::latency_buckets().chain([30.0, 60.0, 300.0])
}

impl RebalanceMetrics {
    pub(super) fn note(&self, r: Rebalances) {
        self.begun.fetch_add(u64::from(r.begun), Ordering::Relaxed);
        if let Some(ms) = r.completed_ms {
            let took = std::time::Duration::from_millis(ms);
            oxbow_segment_writer::latency::observe(&self.seconds, took);
        }
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "oxbow_group_rebalance",
            "Time consumer groups coordinated here took to rebalance, from PreparingRebalance \
             to Stable (its count: rebalances completed)",
            Unit::Seconds,
            self.seconds.clone(),
        );
        registry.register(
            "oxbow_group_rebalances",
            "Consumer group rebalances begun on this coordinator (a member joined, left, \
             changed its subscription or missed its session timeout)",
            ConstCounter::new(self.begun.load(Ordering::Relaxed)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode_registry;

    #[test]
    fn rebalances_are_counted_when_begun_and_timed_when_completed() {
        let m = RebalanceMetrics::default();
        m.note(Rebalances {
            begun: 2,
            completed_ms: Some(45_000),
        });
        m.note(Rebalances::default());
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut out = String::new();
        encode_registry(&mut out, &registry).expect("encode");
        assert!(out.contains("oxbow_group_rebalances_total 2"), "{out}");
        assert!(
            out.contains("oxbow_group_rebalance_seconds_count 1"),
            "{out}"
        );
        // 45 s is past the latency buckets: it lands in the 1-minute one.
        assert!(
            out.contains("oxbow_group_rebalance_seconds_bucket{le=\"30.0\"} 0"),
            "{out}"
        );
        assert!(
            out.contains("oxbow_group_rebalance_seconds_bucket{le=\"60.0\"} 1"),
            "{out}"
        );
    }
}
