//! Where a Produce's or a Fetch's time goes on this broker, stage by stage, as Kafka's
//! `RequestMetrics` splits it: `oxbow_request_stage_seconds{request, stage}` on `/metrics`.
//!
//! Stages of one request on its connection ([`super::conn`]):
//! - `request_queue`: its frame is read → its handler starts (decoding, the SASL gate and
//!   the quota check);
//! - `local`: the handler's ordered part (a produce: validation, offsets, the WAL queue);
//! - `remote`: its waiting part (a produce with `acks=all`: the WAL fsync and the in-sync
//!   replicas, whose own split is `oxbow_wal_*_seconds` and `oxbow_replica_wait_seconds`; a
//!   fetch: its long poll);
//! - `response_queue`: ready → its write begins (responses leave in request order, so it
//!   waits behind earlier requests of the same connection);
//! - `response_send`: writing it to the socket;
//! - `total`: read → written.
//!
//! Requests other than Produce and Fetch are not split: they are not on the data path, and
//! each API would add a few dozen series. Every request's total time, by API, is
//! `oxbow_request_seconds{request}` (a series per API a client actually used).
//!
//! Within a Fetch's `local` and `remote` stages, each partition read that returned data is
//! timed by where the data came from, `oxbow_fetch_read_seconds{source}`: the partition's
//! in-memory tail, the read cache's memory or disk tier, or a GET from the object store
//! (the slowest tier the read touched: [`ReadSource`]). Empty reads (a long poll at the
//! tail) are not counted: they read nothing and would drown the tail's figures.

use kafka_protocol::messages::ApiKey;
use oxbow_segment_writer::latency::{latency_histogram, observe, recording};
use oxbow_segment_writer::ReadSource;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use tokio::time::Instant;

const STAGES: [&str; 6] = [
    "request_queue",
    "local",
    "remote",
    "response_queue",
    "response_send",
    "total",
];
const REQUESTS: [(ApiKey, &str); 2] = [(ApiKey::Produce, "Produce"), (ApiKey::Fetch, "Fetch")];

type Labels = [(&'static str, &'static str); 2];
/// `source`: where a fetch read's data came from ([`ReadSource::name`]).
type SourceLabel = [(&'static str, &'static str); 1];
/// `request`: the API's name.
type ApiLabel = [(&'static str, String); 1];

/// The stage histograms of the tracked requests.
pub struct RequestLatency {
    family: Family<Labels, Histogram, fn() -> Histogram>,
    /// Every request's total time, by API.
    totals: Family<ApiLabel, Histogram, fn() -> Histogram>,
    /// `[request][stage]`, handles into `family`.
    stages: Vec<[Histogram; STAGES.len()]>,
    /// A fetch's partition reads by source.
    fetch_read: Family<SourceLabel, Histogram, fn() -> Histogram>,
    /// Handles into `fetch_read`, in [`ReadSource::ALL`]'s order.
    fetch_read_by_source: [Histogram; ReadSource::ALL.len()],
}

impl Default for RequestLatency {
    fn default() -> Self {
        let family: Family<Labels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        let stages = REQUESTS
            .iter()
            .map(|(_, request)| {
                STAGES.map(|stage| {
                    family.get_or_create_owned(&[("request", request), ("stage", stage)])
                })
            })
            .collect();
        let fetch_read: Family<_, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        let fetch_read_by_source =
            ReadSource::ALL.map(|s| fetch_read.get_or_create_owned(&[("source", s.name())]));
        RequestLatency {
            family,
            stages,
            totals: Family::new_with_constructor(latency_histogram),
            fetch_read,
            fetch_read_by_source,
        }
    }
}

impl RequestLatency {
    /// Starts timing a request of `key` whose frame was read at `read_at`; `None` when
    /// latency histograms are off (`--latency-histograms false`): nothing is timed then,
    /// and the per-API series is not looked up.
    pub fn start(&self, key: ApiKey, read_at: Instant, handler_at: Instant) -> Option<Timing> {
        if !recording() {
            return None;
        }
        let request = REQUESTS
            .iter()
            .position(|(k, _)| *k == key)
            .unwrap_or(usize::MAX);
        Some(Timing {
            key,
            request,
            read_at,
            handler_at,
            handled_at: handler_at,
            ready_at: handler_at,
        })
    }

    /// Records a request written at `sent_at`, its write having begun at `send_at`.
    pub fn finish(&self, t: &Timing, send_at: Instant, sent_at: Instant) {
        observe(
            &self
                .totals
                .get_or_create(&[("request", format!("{:?}", t.key))]),
            sent_at.saturating_duration_since(t.read_at),
        );
        let Some(h) = self.stages.get(t.request) else {
            return;
        };
        let spans = [
            t.handler_at.saturating_duration_since(t.read_at),
            t.handled_at.saturating_duration_since(t.handler_at),
            t.ready_at.saturating_duration_since(t.handled_at),
            send_at.saturating_duration_since(t.ready_at),
            sent_at.saturating_duration_since(send_at),
            sent_at.saturating_duration_since(t.read_at),
        ];
        for (h, d) in h.iter().zip(spans) {
            observe(h, d);
        }
    }

    /// Records one fetch read of data that came from `source` and took `took`.
    pub fn fetch_read(&self, source: ReadSource, took: std::time::Duration) {
        if let Some(i) = ReadSource::ALL.iter().position(|s| *s == source) {
            observe(&self.fetch_read_by_source[i], took);
        }
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "oxbow_request_stage",
            "Time Produce and Fetch requests spend in each stage on this broker",
            Unit::Seconds,
            self.family.clone(),
        );
        registry.register_with_unit(
            "oxbow_request",
            "Time every Kafka request took on this broker, frame read to response written, by API",
            Unit::Seconds,
            self.totals.clone(),
        );
        registry.register_with_unit(
            "oxbow_fetch_read",
            "Time a Fetch took to read one partition's data, by where it came from: the \
             in-memory tail, the read cache's memory or disk tier, or the object store",
            Unit::Seconds,
            self.fetch_read.clone(),
        );
    }
}

/// The instants of one tracked request (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    key: ApiKey,
    /// Its row of stage histograms (`usize::MAX`: not split by stage).
    request: usize,
    read_at: Instant,
    handler_at: Instant,
    /// The ordered part returned.
    pub handled_at: Instant,
    /// The response is encoded and may go out.
    pub ready_at: Instant,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode_registry;
    use std::time::Duration;

    #[test]
    fn fetch_reads_are_split_by_source_with_every_source_declared() {
        let l = RequestLatency::default();
        l.fetch_read(ReadSource::ObjectStore, Duration::from_millis(20));
        let mut registry = Registry::default();
        l.register(&mut registry);
        let mut out = String::new();
        encode_registry(&mut out, &registry).expect("encode");
        for s in ReadSource::ALL {
            let count = format!("oxbow_fetch_read_seconds_count{{source=\"{}\"}} ", s.name());
            let want = if s == ReadSource::ObjectStore {
                "1"
            } else {
                "0"
            };
            assert!(out.contains(&format!("{count}{want}")), "{out}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn stages_add_up_to_the_total() {
        let l = RequestLatency::default();
        let read = Instant::now();
        let ms = |n| read + Duration::from_millis(n);
        let mut t = l.start(ApiKey::Produce, read, ms(1)).expect("tracked");
        t.handled_at = ms(3);
        t.ready_at = ms(10);
        l.finish(&t, ms(12), ms(13));
        let other = l.start(ApiKey::Metadata, read, read).expect("timed");
        l.finish(&other, ms(2), ms(4));
        let mut registry = Registry::default();
        l.register(&mut registry);
        let mut out = String::new();
        encode_registry(&mut out, &registry).expect("encode");
        let sum = |stage: &str| -> f64 {
            let prefix = format!(
                "oxbow_request_stage_seconds_sum{{request=\"Produce\",stage=\"{stage}\"}} "
            );
            out.lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {stage} in {out}"))
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(sum("request_queue"), 0.001));
        assert!(close(sum("local"), 0.002));
        assert!(close(sum("remote"), 0.007));
        assert!(close(sum("response_queue"), 0.002));
        assert!(close(sum("response_send"), 0.001));
        assert!(close(sum("total"), 0.013));
        assert!(
            out.contains("request=\"Fetch\",stage=\"total\"} 0"),
            "{out}"
        );
        // Every API's total, Metadata's included, without a stage split.
        assert!(
            out.contains("oxbow_request_seconds_count{request=\"Metadata\"} 1"),
            "{out}"
        );
        assert!(!out.contains("request=\"Metadata\",stage"), "{out}");
    }
}
