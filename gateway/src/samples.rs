//! Recent samples the console (`/ui`) and its JSON endpoints show beside the current
//! state: each consumer group's total lag over time ([`LagHistory`]), and rates derived
//! from two successive samples — records/s per partition led here (from high-watermark
//! deltas) and this broker's appended bytes/s (Kafka's `BytesInPerSec`).
//!
//! Why on the server: a chart that starts when the page opens shows nothing about the
//! incident an operator opens it for. One loop ([`run_sampler`]) samples every
//! [`SAMPLE_INTERVAL`] from memory only (the coordinator's cached offsets, the open
//! partitions' high watermarks, a counter) — no metadata or object-store I/O; the one
//! network call is one ListOffsets per other leader for the high watermarks of partitions
//! led elsewhere (`groups::remote_high_watermarks`) — and keeps
//! a bounded amount: [`LAG_SAMPLES_PER_GROUP`] per group for at most [`LAG_GROUPS_MAX`]
//! groups, and one rate per open partition.
//!
//! Lifecycle: the state lives in the broker (`Broker::samples`); `server.rs` runs the loop
//! on its background tracker until the listeners stop. Nothing is persisted.

use crate::broker::Broker;
use crate::groups::lag::{self, LagHistory};
use crate::groups::remote_high_watermarks::{self, RemoteHighWatermarks};
use oxbow_metadata::TopicPartition;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Time between samples: the chart's resolution, and the window the rates average over.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);
/// Lag samples kept per group: 180 × 5 s = the last 15 minutes.
pub const LAG_SAMPLES_PER_GROUP: usize = 180;
/// Groups with a lag history; past it the group sampled longest ago is forgotten. At 180
/// samples of 16 bytes, 1,000 groups hold under 3 MiB.
pub const LAG_GROUPS_MAX: usize = 1000;

/// The high watermarks and counter of the previous sample, to take rates against.
struct Previous {
    at: Instant,
    appended_bytes: u64,
    high_watermarks: HashMap<TopicPartition, i64>,
}

#[derive(Default)]
struct Rates {
    previous: Option<Previous>,
    bytes_in_per_sec: Option<f64>,
    records_per_sec: HashMap<TopicPartition, f64>,
}

/// The samples; one per broker.
pub struct Samples {
    pub lag: LagHistory,
    rates: Mutex<Rates>,
    /// High watermarks of partitions led elsewhere, for the lag of groups coordinated here.
    pub remote: RemoteHighWatermarks,
}

impl Default for Samples {
    fn default() -> Self {
        Samples {
            lag: LagHistory::new(LAG_SAMPLES_PER_GROUP, LAG_GROUPS_MAX),
            rates: Mutex::new(Rates::default()),
            remote: RemoteHighWatermarks::default(),
        }
    }
}

/// Change per second between two readings; `None` without elapsed time or when the value
/// went backwards (a partition re-opened, a counter reset).
pub fn per_second(before: (Instant, i64), after: (Instant, i64)) -> Option<f64> {
    let secs = after.0.checked_duration_since(before.0)?.as_secs_f64();
    if secs <= 0.0 || after.1 < before.1 {
        return None;
    }
    Some((after.1 - before.1) as f64 / secs)
}

impl Samples {
    fn rates(&self) -> std::sync::MutexGuard<'_, Rates> {
        self.rates.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes one sample of `broker` at `at` (monotonic) and `time_ms` (wall clock).
    pub fn sample(&self, broker: &Broker, at: Instant, time_ms: i64) {
        let committed = broker.coordinator.cached_offsets();
        self.lag.record(time_ms, lag::totals(&committed, broker));

        let appended_bytes = broker.log.metrics.appended_bytes.load(Ordering::Relaxed);
        let high_watermarks: HashMap<TopicPartition, i64> = broker
            .log
            .open_partitions()
            .iter()
            .filter_map(|p| Some((p.topic_partition, p.offsets().ok()?.1)))
            .collect();
        let mut rates = self.rates();
        if let Some(prev) = &rates.previous {
            let bytes = per_second(
                (
                    prev.at,
                    i64::try_from(prev.appended_bytes).unwrap_or(i64::MAX),
                ),
                (at, i64::try_from(appended_bytes).unwrap_or(i64::MAX)),
            );
            let records = high_watermarks
                .iter()
                .filter_map(|(tp, hw)| {
                    let before = *prev.high_watermarks.get(tp)?;
                    Some((*tp, per_second((prev.at, before), (at, *hw))?))
                })
                .collect();
            rates.bytes_in_per_sec = bytes;
            rates.records_per_sec = records;
        }
        rates.previous = Some(Previous {
            at,
            appended_bytes,
            high_watermarks,
        });
    }

    /// This broker's appended bytes per second over the last interval (`None` until two
    /// samples were taken).
    pub fn bytes_in_per_sec(&self) -> Option<f64> {
        self.rates().bytes_in_per_sec
    }

    /// Records per second appended to a partition led here over the last interval.
    pub fn records_per_sec(&self, tp: &TopicPartition) -> Option<f64> {
        self.rates().records_per_sec.get(tp).copied()
    }
}

fn now_wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Samples `broker` every [`SAMPLE_INTERVAL`] until `shutdown`.
pub async fn run_sampler(broker: Arc<Broker>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Connections to other leaders, kept between ticks.
    let mut leaders = HashMap::new();
    loop {
        let at = tokio::select! {
            _ = shutdown.cancelled() => return,
            at = tick.tick() => at,
        };
        // Bounded by its timeout, and cut short by shutdown.
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = remote_high_watermarks::refresh(&broker, &mut leaders) => {}
        }
        broker.samples.sample(&broker, at.into_std(), now_wall_ms());
        crate::metrics::sample(&broker);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_need_time_and_growth() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(2);
        assert_eq!(per_second((t0, 10), (t1, 30)), Some(10.0));
        assert_eq!(per_second((t0, 10), (t0, 30)), None);
        assert_eq!(per_second((t1, 10), (t0, 30)), None);
        assert_eq!(per_second((t0, 30), (t1, 10)), None);
    }
}
