//! Latency histograms of the write path (issue 17): where an append's time goes between its
//! queueing for the WAL and its commit, and what a seal costs, exported on `/metrics`.
//!
//! Through `prometheus-client` (the Prometheus project's own Rust client): its histograms
//! are plain values registered in a [`Registry`] the caller owns, not a process-wide
//! recorder, so several brokers in one process (tests, the simulation) keep theirs apart.
//!
//! Buckets are the same for every latency ([`latency_histogram`]): 50 µs × √2ⁿ up to about
//! 13 s, 37 of them, so a quantile read from them is within a factor √2 of the truth — fine
//! enough to tell a 6 ms p99 from a 9 ms one, coarse enough to keep a series small.
//!
//! Every latency observed on a hot path goes through [`observe`], which is also the one
//! off switch ([`set_recording`], the broker's `--latency-histograms false`): an observation
//! takes the histogram's mutex and scans its buckets, and a produce records about ten of
//! them. Off, the histograms stay registered and read zero, so dashboards show no data
//! rather than an error. The switch is per process: it is a tuning knob of the broker
//! process, set once by `oxbow serve` before anything is recorded; brokers sharing a
//! process (tests) share it.

use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Whether [`observe`] records (see the module docs).
static RECORDING: AtomicBool = AtomicBool::new(true);

/// Turns recording of every latency histogram on or off for this process.
pub fn set_recording(on: bool) {
    RECORDING.store(on, Ordering::Relaxed);
}

/// Whether latency histograms are being recorded: a caller that would do work only to
/// feed one (take timestamps, look up a labelled series) skips it when they are not.
pub fn recording() -> bool {
    RECORDING.load(Ordering::Relaxed)
}

/// Number of finite buckets of [`latency_histogram`].
const LATENCY_BUCKETS: u16 = 37;

/// A histogram of durations in seconds with the shared buckets (see the module docs).
pub fn latency_histogram() -> Histogram {
    Histogram::new(latency_buckets())
}

/// The shared buckets' upper bounds (see the module docs), for a histogram that extends
/// them.
pub fn latency_buckets() -> impl Iterator<Item = f64> {
    // Rounded to three significant digits, so bounds read as 0.000141, not 0.00014142135….
    exponential_buckets(50e-6, std::f64::consts::SQRT_2, LATENCY_BUCKETS).map(|b| {
        let scale = 10f64.powi(2 - b.log10().floor() as i32);
        (b * scale).round() / scale
    })
}

/// Records `d` in seconds, unless recording is off ([`set_recording`]).
pub fn observe(h: &Histogram, d: Duration) {
    if recording() {
        h.observe(d.as_secs_f64());
    }
}

/// The WAL's stages, recorded by its writer.
#[derive(Clone)]
pub struct WalLatency {
    /// An append from being queued until its group's write begins (the writer was busy
    /// with the groups before it).
    pub queue: Histogram,
    /// A group's write into the file (page cache), including opening a new file.
    pub write: Histogram,
    /// A group's fsync.
    pub fsync: Histogram,
}

impl Default for WalLatency {
    fn default() -> Self {
        WalLatency {
            queue: latency_histogram(),
            write: latency_histogram(),
            fsync: latency_histogram(),
        }
    }
}

/// The sealer's steps.
#[derive(Clone)]
pub struct SealLatency {
    /// Building a sealed object from the partitions' batches (copy and checksums).
    pub seal_build: Histogram,
    /// Its create-only PUT.
    pub seal_upload: Histogram,
    /// Its catalog commit.
    pub seal_commit: Histogram,
}

impl Default for SealLatency {
    fn default() -> Self {
        SealLatency {
            seal_build: latency_histogram(),
            seal_upload: latency_histogram(),
            seal_commit: latency_histogram(),
        }
    }
}

/// Registers the write path's histograms (`oxbow_wal_*_seconds`, `oxbow_replica_wait_seconds`,
/// `oxbow_seal_*_seconds`); `replica_wait` is the commit tracker's.
pub fn register(
    registry: &mut Registry,
    wal: Option<&WalLatency>,
    replica_wait: &Histogram,
    seal: &SealLatency,
) {
    let mut series: Vec<(&str, &str, &Histogram)> = Vec::new();
    if let Some(w) = wal {
        series.extend([
            (
                "oxbow_wal_queue",
                "Time an append waits in the WAL queue before its group is written",
                &w.queue,
            ),
            (
                "oxbow_wal_write",
                "Time to write one WAL group into its file (before the fsync)",
                &w.write,
            ),
            ("oxbow_wal_fsync", "Time of one WAL group's fsync", &w.fsync),
        ]);
    }
    series.extend([
        (
            "oxbow_replica_wait",
            "Time from an entry's local fsync until every in-sync WAL replica has it",
            replica_wait,
        ),
        (
            "oxbow_seal_build",
            "Time to build one sealed object from the partitions' batches",
            &seal.seal_build,
        ),
        (
            "oxbow_seal_upload",
            "Time of one sealed object's PUT",
            &seal.seal_upload,
        ),
        (
            "oxbow_seal_commit",
            "Time of one sealed object's catalog commit",
            &seal.seal_commit,
        ),
    ]);
    for (name, help, h) in series {
        registry.register_with_unit(name, help, Unit::Seconds, h.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode_registry;

    #[test]
    fn buckets_span_50us_to_seconds_and_render_as_prometheus_text() {
        let h = latency_histogram();
        observe(&h, Duration::from_micros(30));
        observe(&h, Duration::from_millis(7));
        observe(&h, Duration::from_secs(60));
        let mut registry = Registry::default();
        registry.register_with_unit("t", "test", Unit::Seconds, h);
        let mut out = String::new();
        encode_registry(&mut out, &registry).expect("encode");
        assert!(out.contains("# TYPE t_seconds histogram"), "{out}");
        assert!(out.contains("t_seconds_bucket{le=\"0.00005\"} 1"), "{out}");
        // 7 ms lands in (6.4 ms, 9.05 ms]; the 60 s one only in +Inf.
        assert!(out.contains("t_seconds_bucket{le=\"0.0064\"} 1"), "{out}");
        assert!(out.contains("t_seconds_bucket{le=\"0.00905\"} 2"), "{out}");
        assert!(out.contains("t_seconds_bucket{le=\"+Inf\"} 3"), "{out}");
        assert!(out.contains("t_seconds_count 3"), "{out}");
    }
}
