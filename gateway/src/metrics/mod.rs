//! `/metrics`: the broker's counters (plain atomics, written on the hot paths) and the
//! rendering of everything through `prometheus-client` (the Prometheus project's Rust
//! client: its registry takes collectors read at scrape time, so nothing is copied into a
//! second set of metric objects, and it writes the exposition format and escaping).
//!
//! - [`families`]: the broker's families, read from its state at each scrape.
//! - [`health`]: the signals that page on-call (offline and under-replicated partitions,
//!   the controller, runtime load, free disk).
//! - [`lag`]: consumer lag in seconds, from sampled high watermarks.
//! - [`scrape`]: gauges and counters through the library's encoder.
//!
//! The alerting rules and the dashboard built on these names are in `deploy/monitoring/`.

mod families;
pub mod health;
pub mod lag;
mod scrape;

use oxbow_metadata::MetadataFootprint;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex;

/// Number of Kafka API keys tracked (keys above are counted as the last slot).
const API_KEYS: usize = 100;

/// Broker-level counters. Cheap atomics, written on every request.
pub struct Metrics {
    pub connections_open: AtomicU64,
    pub connections_total: AtomicU64,
    pub requests: [AtomicU64; API_KEYS],
    pub request_errors: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub http_requests: AtomicU64,
    pub produced_records_http: AtomicU64,
    /// Connections closed by a timeout, by listener and reason (`connections_timed_out`).
    pub connections_idle_closed: AtomicU64,
    pub connections_read_timed_out: AtomicU64,
    pub http_connections_open: AtomicU64,
    /// `--connections-max` and `--http-connections-max`: what the open counts are bounded
    /// by (a listener is saturated at its bound).
    pub connections_max: AtomicU64,
    pub http_connections_max: AtomicU64,
    /// Accepts that found every connection slot taken and waited for one to close.
    pub connection_slot_waits: AtomicU64,
    pub http_connection_slot_waits: AtomicU64,
    pub http_connections_idle_closed: AtomicU64,
    pub http_connections_read_timed_out: AtomicU64,
    /// TLS handshakes that failed or timed out (plaintext to a TLS port, an untrusted or
    /// missing client certificate, a client that stalls).
    pub tls_handshake_failures: AtomicU64,
    /// HTTP requests refused 401 (`http::authn`), by the scheme that failed: none (no or
    /// unreadable credentials), basic, bearer.
    pub http_authentication_failures_none: AtomicU64,
    pub http_authentication_failures_basic: AtomicU64,
    pub http_authentication_failures_bearer: AtomicU64,
    /// Reloads of the TLS files (`security::tls::reload`).
    pub tls_reload: std::sync::Arc<crate::security::tls::reload::ReloadCounters>,
    /// The metadata service's revision, as last sampled (`cluster::history`).
    pub metadata_revision: AtomicU64,
    /// The highest revision its history is known to be compacted to (by this broker, or
    /// as the backend reports).
    pub metadata_compacted_revision: AtomicU64,
    /// History compactions this broker ran, and those that failed.
    pub metadata_compactions: AtomicU64,
    pub metadata_compaction_failures: AtomicU64,
    /// Objects the controller's sweep deleted because no catalog key named them.
    pub orphan_objects_deleted: AtomicU64,
    /// Sources whose WAL copies this broker dropped (gone for good).
    pub wal_copy_sources_dropped: AtomicU64,
    /// Produce and Fetch time by stage (`kafka::request_latency`).
    pub request_latency: crate::kafka::request_latency::RequestLatency,
    /// High watermarks over time, for consumer lag in seconds ([`sample`]).
    pub lag_clock: lag::LagClock,
    /// Most live brokers seen at once since start: what the WAL's copies are measured
    /// against ([`health::partition_health`]).
    pub brokers_seen_max: AtomicU64,
    /// The last sampled footprint (`None` until sampled, or for a backend without one).
    metadata_footprint: Mutex<Option<MetadataFootprint>>,
    /// The Kafka listeners' request memory (`--queued-max-request-bytes`), once serving.
    pub request_memory: std::sync::OnceLock<crate::kafka::RequestMemory>,
    /// Requests that waited for room in it before they were dispatched.
    pub requests_waited_for_memory: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            connections_open: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
            request_errors: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            http_requests: AtomicU64::new(0),
            produced_records_http: AtomicU64::new(0),
            connections_idle_closed: AtomicU64::new(0),
            connections_read_timed_out: AtomicU64::new(0),
            http_connections_open: AtomicU64::new(0),
            connections_max: AtomicU64::new(0),
            http_connections_max: AtomicU64::new(0),
            connection_slot_waits: AtomicU64::new(0),
            http_connection_slot_waits: AtomicU64::new(0),
            http_connections_idle_closed: AtomicU64::new(0),
            http_connections_read_timed_out: AtomicU64::new(0),
            tls_handshake_failures: AtomicU64::new(0),
            http_authentication_failures_none: AtomicU64::new(0),
            http_authentication_failures_basic: AtomicU64::new(0),
            http_authentication_failures_bearer: AtomicU64::new(0),
            tls_reload: Default::default(),
            metadata_revision: AtomicU64::new(0),
            metadata_compacted_revision: AtomicU64::new(0),
            metadata_compactions: AtomicU64::new(0),
            metadata_compaction_failures: AtomicU64::new(0),
            orphan_objects_deleted: AtomicU64::new(0),
            wal_copy_sources_dropped: AtomicU64::new(0),
            request_latency: Default::default(),
            lag_clock: Default::default(),
            brokers_seen_max: AtomicU64::new(1),
            metadata_footprint: Mutex::new(None),
            request_memory: std::sync::OnceLock::new(),
            requests_waited_for_memory: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    pub fn count_request(&self, api_key: i16) {
        let slot = usize::try_from(api_key).unwrap_or(0).min(API_KEYS - 1);
        self.requests[slot].fetch_add(1, Ordering::Relaxed);
    }

    /// Records a sampled footprint of the metadata service.
    pub fn set_metadata_footprint(&self, f: MetadataFootprint) {
        self.metadata_revision
            .store(f.revision.max(0) as u64, Ordering::Relaxed);
        if let Some(c) = f.compacted_revision {
            self.metadata_compacted_revision
                .fetch_max(c.max(0) as u64, Ordering::Relaxed);
        }
        *self
            .metadata_footprint
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(f);
    }

    pub(crate) fn metadata_footprint(&self) -> Option<MetadataFootprint> {
        self.metadata_footprint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// A connection slot from `slots`; counted in `waits` when none is free at once (the
/// listener is saturated: the connection waits in the kernel's accept backlog).
pub async fn connection_slot(
    slots: &Arc<tokio::sync::Semaphore>,
    waits: &AtomicU64,
) -> Result<tokio::sync::OwnedSemaphorePermit, tokio::sync::AcquireError> {
    match slots.clone().try_acquire_owned() {
        Ok(p) => Ok(p),
        Err(tokio::sync::TryAcquireError::Closed) => slots.clone().acquire_owned().await,
        Err(tokio::sync::TryAcquireError::NoPermits) => {
            waits.fetch_add(1, Ordering::Relaxed);
            slots.clone().acquire_owned().await
        }
    }
}

/// Every metric of `broker`, in the Prometheus text format (0.0.4): the families read
/// from its state ([`families`]) and the histograms its parts keep, through one registry.
pub fn render(broker: &Arc<crate::broker::Broker>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(families::BrokerFamilies(broker.clone())));
    broker.metrics.request_latency.register(&mut registry);
    broker.log.register_latency(&mut registry);
    broker.metadata.register_metrics(&mut registry);
    broker
        .coordinator
        .rebalance_metrics()
        .register(&mut registry);
    registry.register_with_unit(
        "oxbow_controller_event_batch",
        "Time the controller took to decide and apply one batch of events (its partition \
         compare-and-swaps included; Kafka's EventQueueProcessingTimeMs); only the \
         controller records any",
        prometheus_client::registry::Unit::Seconds,
        broker.cluster.watch_metrics.controller_batch.clone(),
    );
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry) {
        tracing::warn!(error = %e, "cannot render the metrics");
    }
    out
}

/// Notes every partition led here's high watermark (and those led elsewhere that its
/// groups committed, as their leaders last answered) for consumer lag in seconds
/// ([`lag::LagClock`]) and how many brokers are live; called by the one sampling loop
/// (`crate::samples::run_sampler`, every 5 s).
pub fn sample(broker: &crate::broker::Broker) {
    let mut highs: Vec<_> = broker
        .log
        .open_partitions()
        .into_iter()
        .filter_map(|p| Some((p.topic_partition, p.offsets().ok()?.1)))
        .collect();
    // A partition that moved here keeps its old leader's answer for a while: memory wins.
    let here: std::collections::HashSet<_> = highs.iter().map(|(tp, _)| *tp).collect();
    let remote = broker.samples.remote.fresh();
    highs.extend(remote.into_iter().filter(|(tp, _)| !here.contains(tp)));
    broker.metrics.lag_clock.sample(lag::now_ms(), highs);
    health::note_live_brokers(broker);
}
