//! How long the metadata service takes to answer, by request kind and outcome, for
//! `/metrics` (`oxbow_metadata_request_seconds`): etcd's latency as a broker sees it,
//! retries and backoff included, which is what holds up a seal's catalog commit.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::time::Duration;

type Labels = [(&'static str, &'static str); 2];

/// Request latency by `op` and `outcome` (ok, error). Cheap to clone (shared counters).
#[derive(Clone)]
pub struct KvMeter {
    family: Family<Labels, Histogram, fn() -> Histogram>,
}

/// 0.5 ms to ~16 s: a local etcd answers in about a millisecond, a call that retries until
/// `--etcd-op-timeout` lands in the last buckets.
fn histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl Default for KvMeter {
    fn default() -> Self {
        KvMeter {
            family: Family::new_with_constructor(histogram),
        }
    }
}

impl KvMeter {
    /// Records one request. `op` is one of a fixed set of names, so the series stay few.
    pub fn observe(&self, op: &'static str, ok: bool, took: Duration) {
        let outcome = if ok { "ok" } else { "error" };
        self.family
            .get_or_create(&[("op", op), ("outcome", outcome)])
            .observe(took.as_secs_f64());
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "oxbow_metadata_request",
            "Time the metadata service (etcd) took to answer this broker, retries included, by request kind and outcome",
            Unit::Seconds,
            self.family.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode_registry;

    #[test]
    fn requests_are_counted_by_op_and_outcome() {
        let m = KvMeter::default();
        m.observe("read", true, Duration::from_millis(2));
        m.observe("read", true, Duration::from_millis(3));
        m.observe("transaction", false, Duration::from_secs(5));
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut out = String::new();
        encode_registry(&mut out, &registry).expect("encode");
        assert!(out.contains("oxbow_metadata_request_seconds_count{op=\"read\",outcome=\"ok\"} 2"));
        assert!(out.contains(
            "oxbow_metadata_request_seconds_count{op=\"transaction\",outcome=\"error\"} 1"
        ));
    }
}
