//! Counters exported on `/metrics` in the Prometheus text format.

use oxbow_metadata::MetadataFootprint;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// The last sampled footprint (`None` until sampled, or for a backend without one).
    metadata_footprint: Mutex<Option<MetadataFootprint>>,
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
            metadata_footprint: Mutex::new(None),
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

    fn metadata_footprint(&self) -> Option<MetadataFootprint> {
        self.metadata_footprint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Appends one metric in Prometheus text format.
pub fn write_metric(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    samples: &[(String, f64)],
) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}

/// Escapes a Prometheus label value.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders every broker metric.
pub fn render(broker: &crate::broker::Broker) -> String {
    let m = &broker.metrics;
    let l = &broker.log.metrics;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
    let one = |v: f64| vec![(String::new(), v)];
    let mut out = String::new();
    write_metric(
        &mut out,
        "oxbow_connections_open",
        "gauge",
        "Open Kafka connections.",
        &one(get(&m.connections_open)),
    );
    write_metric(
        &mut out,
        "oxbow_connections_total",
        "counter",
        "Kafka connections accepted.",
        &one(get(&m.connections_total)),
    );
    write_metric(
        &mut out,
        "oxbow_http_connections_open",
        "gauge",
        "Open HTTP connections (at most --http-connections-max).",
        &one(get(&m.http_connections_open)),
    );
    write_metric(
        &mut out,
        "oxbow_tls_handshake_failures_total",
        "counter",
        "TLS handshakes on SSL/SASL_SSL listeners that failed or timed out.",
        &one(get(&m.tls_handshake_failures)),
    );
    write_metric(
        &mut out,
        "oxbow_http_authentication_failures_total",
        "counter",
        "HTTP requests refused 401 (--http-authentication), by the scheme that failed: \
         none (no credentials, or a header not understood), basic, bearer.",
        &[
            (
                "scheme=\"none\"".to_string(),
                get(&m.http_authentication_failures_none),
            ),
            (
                "scheme=\"basic\"".to_string(),
                get(&m.http_authentication_failures_basic),
            ),
            (
                "scheme=\"bearer\"".to_string(),
                get(&m.http_authentication_failures_bearer),
            ),
        ],
    );
    write_metric(
        &mut out,
        "oxbow_tls_reloads_total",
        "counter",
        "Changes of the TLS certificate files, by whether they loaded (result=ok) or the \
         previous certificate was kept (result=error).",
        &[
            ("result=\"ok\"".to_string(), get(&m.tls_reload.reloads)),
            ("result=\"error\"".to_string(), get(&m.tls_reload.failures)),
        ],
    );
    let timed_out = [
        ("kafka", "idle", &m.connections_idle_closed),
        ("kafka", "read", &m.connections_read_timed_out),
        ("http", "idle", &m.http_connections_idle_closed),
        ("http", "read", &m.http_connections_read_timed_out),
    ];
    write_metric(
        &mut out,
        "oxbow_connections_timed_out_total",
        "counter",
        "Connections closed for being idle or not reading responses too long (reason=idle) \
         or for sending a request too slowly (reason=read).",
        &timed_out
            .iter()
            .map(|(listener, reason, c)| {
                (
                    format!("listener=\"{listener}\",reason=\"{reason}\""),
                    get(c),
                )
            })
            .collect::<Vec<_>>(),
    );
    let per_api: Vec<(String, f64)> = m
        .requests
        .iter()
        .enumerate()
        .filter(|(_, c)| c.load(Ordering::Relaxed) > 0)
        .map(|(k, c)| (format!("api_key=\"{k}\""), get(c)))
        .collect();
    write_metric(
        &mut out,
        "oxbow_kafka_requests_total",
        "counter",
        "Kafka requests by API key.",
        &per_api,
    );
    write_metric(
        &mut out,
        "oxbow_kafka_request_errors_total",
        "counter",
        "Kafka requests that closed the connection.",
        &one(get(&m.request_errors)),
    );
    write_metric(
        &mut out,
        "oxbow_kafka_bytes_in_total",
        "counter",
        "Kafka request bytes received.",
        &one(get(&m.bytes_in)),
    );
    write_metric(
        &mut out,
        "oxbow_kafka_bytes_out_total",
        "counter",
        "Kafka response bytes sent.",
        &one(get(&m.bytes_out)),
    );
    write_metric(
        &mut out,
        "oxbow_http_requests_total",
        "counter",
        "HTTP requests served.",
        &one(get(&m.http_requests)),
    );
    write_metric(
        &mut out,
        "oxbow_appended_batches_total",
        "counter",
        "Record batches appended.",
        &one(get(&l.appended_batches)),
    );
    write_metric(
        &mut out,
        "oxbow_appended_records_total",
        "counter",
        "Records appended.",
        &one(get(&l.appended_records)),
    );
    write_metric(
        &mut out,
        "oxbow_appended_bytes_total",
        "counter",
        "Record batch bytes appended.",
        &one(get(&l.appended_bytes)),
    );
    write_metric(
        &mut out,
        "oxbow_objects_uploaded_total",
        "counter",
        "Sealed objects uploaded.",
        &one(get(&l.objects_uploaded)),
    );
    write_metric(
        &mut out,
        "oxbow_object_bytes_uploaded_total",
        "counter",
        "Bytes of sealed objects uploaded.",
        &one(get(&l.object_bytes_uploaded)),
    );
    write_metric(
        &mut out,
        "oxbow_upload_failures_total",
        "counter",
        "Failed uploads or catalog commits (retried).",
        &one(get(&l.upload_failures)),
    );
    write_metric(
        &mut out,
        "oxbow_uncatalogued_objects_deleted_total",
        "counter",
        "Sealed objects deleted because their catalog commit failed and never landed.",
        &one(get(&l.uncatalogued_objects_deleted)),
    );
    write_metric(
        &mut out,
        "oxbow_object_reads_total",
        "counter",
        "Ranged GETs from the object store.",
        &one(get(&l.object_reads)),
    );
    write_metric(
        &mut out,
        "oxbow_read_committed_aborts_total",
        "counter",
        "read_committed reads below the leader's in-memory aborted index (or on a broker not leading the partition), by how their aborted transactions were found: the catalog's index, or walking batch headers.",
        &[
            ("source=\"catalog\"".to_string(), get(&l.aborts_from_catalog)),
            ("source=\"header_walk\"".to_string(), get(&l.aborts_by_header_walk)),
        ],
    );
    write_metric(
        &mut out,
        "oxbow_read_cache_hits_total",
        "counter",
        "Object reads served by the read cache.",
        &one(get(&l.cache_hits)),
    );
    write_metric(
        &mut out,
        "oxbow_checksum_failures_total",
        "counter",
        "Object ranges that failed their checksum.",
        &one(get(&l.checksum_failures)),
    );
    write_metric(
        &mut out,
        "oxbow_wal_bytes",
        "gauge",
        "Bytes held in the WAL on disk.",
        &one(broker.log.wal_bytes() as f64),
    );
    write_metric(
        &mut out,
        "oxbow_wal_healthy",
        "gauge",
        "1 while the WAL takes writes; 0 after a write or fsync failed (the broker then exits).",
        &one(if broker.log.wal_failure().is_some() {
            0.0
        } else {
            1.0
        }),
    );
    write_metric(
        &mut out,
        "oxbow_storage_errors_total",
        "counter",
        "Produce batches answered KAFKA_STORAGE_ERROR because the WAL failed.",
        &one(broker.log.storage_errors() as f64),
    );
    write_metric(
        &mut out,
        "oxbow_recoveries_pending",
        "gauge",
        "WAL tail recoveries waiting for a WAL replica to answer (see /readyz).",
        &one(broker.log.recoveries_pending() as f64),
    );
    write_metric(
        &mut out,
        "oxbow_wal_written_bytes_total",
        "counter",
        "Bytes this broker's WAL wrote (fsynced) since start.",
        &one(broker.log.wal_written_bytes() as f64),
    );
    write_metric(
        &mut out,
        "oxbow_wal_replica_written_bytes_total",
        "counter",
        "Bytes of other brokers' WALs written (fsynced) here as their replica since start.",
        &one(broker.log.replica_store.written_bytes() as f64),
    );
    write_metric(
        &mut out,
        "oxbow_wal_in_sync_copies",
        "gauge",
        "In-sync copies of this broker's WAL, its own included (acks=all needs min.insync.replicas).",
        &one(broker.log.replicator.in_sync_copies() as f64),
    );
    write_metric(
        &mut out,
        "oxbow_internal_auth_failures_total",
        "counter",
        "Internal-port handshakes that failed, either side (wrong or missing --internal-auth-secret-file, a peer not the broker it claims, a timeout).",
        &one(broker.log.internal_auth().failures() as f64),
    );
    let cm = &broker.log.compact_metrics;
    for (name, help, value) in [
        (
            "oxbow_compaction_rounds_total",
            "Compaction rounds run.",
            &cm.rounds,
        ),
        (
            "oxbow_compaction_segments_written_total",
            "Per-partition segments written by compaction.",
            &cm.segments_written,
        ),
        (
            "oxbow_compaction_segment_bytes_written_total",
            "Bytes of segments written by compaction.",
            &cm.segment_bytes_written,
        ),
        (
            "oxbow_compaction_entries_replaced_total",
            "Catalog entries replaced by segments.",
            &cm.entries_replaced,
        ),
        (
            "oxbow_compaction_objects_deleted_total",
            "Objects deleted once no entry referenced them.",
            &cm.objects_deleted,
        ),
        (
            "oxbow_retention_entries_expired_total",
            "Catalog entries that left partitions by retention (retention.ms / retention.bytes).",
            &cm.entries_expired,
        ),
        (
            "oxbow_key_compaction_cleanings_total",
            "Partitions of compacted topics (cleanup.policy=compact) cleaned up to what the offset map covered.",
            &cm.key_cleanings,
        ),
        (
            "oxbow_key_compaction_records_removed_total",
            "Records key compaction removed: older values of a key, and tombstones past delete.retention.ms.",
            &cm.key_records_removed,
        ),
        (
            "oxbow_compaction_failures_total",
            "Compaction steps that failed (retried next round).",
            &cm.failures,
        ),
    ] {
        write_metric(&mut out, name, "counter", help, &one(get(value)));
    }
    write_metric(
        &mut out,
        "oxbow_unsealed_bytes",
        "gauge",
        "Bytes durable in the WAL, not yet in the object store.",
        &one(broker.log.unsealed_bytes() as f64),
    );
    if let Some(c) = broker.metadata.catalog_footprint() {
        write_metric(
            &mut out,
            "oxbow_catalog_partitions",
            "gauge",
            "Partitions in this broker's in-memory catalogue.",
            &one(c.partitions as f64),
        );
        write_metric(
            &mut out,
            "oxbow_catalog_entries",
            "gauge",
            "Entries held by the in-memory catalogue (stored entries and resolved views).",
            &one(c.entries as f64),
        );
        write_metric(
            &mut out,
            "oxbow_catalog_objects",
            "gauge",
            "Sealed objects' catalog keys held by the in-memory catalogue.",
            &one(c.objects as f64),
        );
        write_metric(
            &mut out,
            "oxbow_catalog_memory_bytes",
            "gauge",
            "Heap held by the in-memory catalogue, estimated from its counts.",
            &one(c.approx_bytes as f64),
        );
    }
    if let Some(f) = m.metadata_footprint() {
        write_metric(
            &mut out,
            "oxbow_metadata_db_bytes",
            "gauge",
            "Size of the metadata service's database file (etcd: of the member that answered; \
             its --quota-backend-bytes applies to it), sampled every 30 s.",
            &one(f.db_bytes as f64),
        );
        if let Some(in_use) = f.db_bytes_in_use {
            write_metric(
                &mut out,
                "oxbow_metadata_db_in_use_bytes",
                "gauge",
                "Bytes of the metadata database holding live data: what a defragmentation \
                 would leave, sampled every 30 s.",
                &one(in_use as f64),
            );
        }
        write_metric(
            &mut out,
            "oxbow_metadata_keys",
            "gauge",
            "Keys under this cluster's root in the metadata service, sampled every 30 s.",
            &one(f.keys as f64),
        );
    }
    write_metric(
        &mut out,
        "oxbow_metadata_revision",
        "gauge",
        "The metadata service's current revision, as last sampled.",
        &one(get(&m.metadata_revision)),
    );
    write_metric(
        &mut out,
        "oxbow_metadata_compacted_revision",
        "gauge",
        "The revision the metadata service's history is known compacted to (by this broker \
         while it is the controller, or as the embedded store reports); 0: not known.",
        &one(get(&m.metadata_compacted_revision)),
    );
    write_metric(
        &mut out,
        "oxbow_metadata_compactions_total",
        "counter",
        "History compactions of the metadata service run by this broker \
         (--metadata-history-retention).",
        &one(get(&m.metadata_compactions)),
    );
    write_metric(
        &mut out,
        "oxbow_metadata_compaction_failures_total",
        "counter",
        "History compactions that failed or timed out (retried at the next sample).",
        &one(get(&m.metadata_compaction_failures)),
    );
    write_metric(
        &mut out,
        "oxbow_orphan_objects_deleted_total",
        "counter",
        "Objects the controller's sweep deleted because no catalog key named them and they \
         were older than --orphan-grace (leaked by a crash, or of deleted topics).",
        &one(get(&m.orphan_objects_deleted)),
    );
    write_metric(
        &mut out,
        "oxbow_wal_copy_sources_dropped_total",
        "counter",
        "Brokers whose WAL copies this broker dropped: unregistered, leading no partition and \
         named by no partition's recovery for --wal-copy-grace.",
        &one(get(&m.wal_copy_sources_dropped)),
    );
    write_metric(
        &mut out,
        "oxbow_read_cache_bytes",
        "gauge",
        "Bytes held in the read cache.",
        &one(broker.log.cache_usage_bytes() as f64),
    );
    let mut hw = Vec::new();
    let mut log_start = Vec::new();
    let mut stored_bytes = Vec::new();
    let mut stored_entries = Vec::new();
    for p in broker.log.open_partitions() {
        if let Ok((start, high, _)) = p.offsets() {
            let labels = format!(
                "topic=\"{}\",partition=\"{}\"",
                escape(&p.topic_name),
                p.topic_partition.partition
            );
            let (bytes, entries) = p.stored();
            hw.push((labels.clone(), high as f64));
            log_start.push((labels.clone(), start as f64));
            stored_bytes.push((labels.clone(), bytes as f64));
            stored_entries.push((labels, entries as f64));
        }
    }
    write_metric(
        &mut out,
        "oxbow_partition_stored_bytes",
        "gauge",
        "Record-batch bytes the object store holds of each partition led here, from its log \
         start (counted every compaction round).",
        &stored_bytes,
    );
    write_metric(
        &mut out,
        "oxbow_partition_stored_entries",
        "gauge",
        "Catalog entries (sealed objects' ranges and segments) of each partition led here, \
         from its log start (counted every compaction round).",
        &stored_entries,
    );
    write_metric(
        &mut out,
        "oxbow_partition_high_watermark",
        "gauge",
        "High watermark per partition.",
        &hw,
    );
    write_metric(
        &mut out,
        "oxbow_partition_log_start_offset",
        "gauge",
        "Log start offset per partition.",
        &log_start,
    );
    let mut lag = Vec::new();
    let mut committed = Vec::new();
    for (group, topic, partition, offset) in broker.coordinator.cached_offsets() {
        let labels = format!(
            "group=\"{}\",topic=\"{}\",partition=\"{partition}\"",
            escape(&group),
            escape(&topic)
        );
        committed.push((labels.clone(), offset as f64));
        let high = broker
            .topic(&topic)
            .and_then(|t| {
                broker
                    .log
                    .get(&oxbow_metadata::TopicPartition::new(t.topic_id, partition))
            })
            .and_then(|p| p.offsets().ok())
            .map(|(_, hw, _)| hw);
        if let Some(high) = high {
            lag.push((labels, (high - offset).max(0) as f64));
        }
    }
    write_metric(
        &mut out,
        "oxbow_consumer_group_committed_offset",
        "gauge",
        "Committed offset per group and partition.",
        &committed,
    );
    write_metric(
        &mut out,
        "oxbow_consumer_group_lag",
        "gauge",
        "High watermark minus committed offset, per group and partition.",
        &lag,
    );
    render_quotas(broker, &mut out);
    render_latency(broker, &mut out);
    out
}

/// The latency histograms (request stages, WAL, replicas, seals), through
/// `prometheus-client`'s encoder.
fn render_latency(broker: &crate::broker::Broker, out: &mut String) {
    let mut registry = prometheus_client::registry::Registry::default();
    broker.metrics.request_latency.register(&mut registry);
    broker.log.register_latency(&mut registry);
    if let Err(e) = prometheus_client::encoding::text::encode_registry(out, &registry) {
        tracing::warn!(error = %e, "cannot render the latency histograms");
    }
}

/// Most quota meters shown in `/metrics` (one series each per metric).
const QUOTA_SERIES_MAX: usize = 1000;

/// Per metered quota entity: its rate, and how often and how long it was throttled.
fn render_quotas(broker: &crate::broker::Broker, out: &mut String) {
    let mut rate = Vec::new();
    let mut throttled = Vec::new();
    let mut throttle_ms = Vec::new();
    for s in broker.quotas.stats(QUOTA_SERIES_MAX) {
        let labels = format!(
            "quota=\"{}\",user=\"{}\",client_id=\"{}\"",
            s.key.name(),
            escape(s.meter.user.as_deref().unwrap_or("")),
            escape(s.meter.client_id.as_deref().unwrap_or(""))
        );
        rate.push((labels.clone(), s.rate));
        throttled.push((labels.clone(), s.throttled as f64));
        throttle_ms.push((labels, s.throttle_ms_total as f64));
    }
    write_metric(
        out,
        "oxbow_quota_rate",
        "gauge",
        "Current rate of a metered quota entity (bytes/s), over Kafka's 11 one-second samples.",
        &rate,
    );
    write_metric(
        out,
        "oxbow_quota_throttled_requests_total",
        "counter",
        "Requests of a quota entity answered with a throttle.",
        &throttled,
    );
    write_metric(
        out,
        "oxbow_quota_throttle_time_ms_total",
        "counter",
        "Throttle time asked of a quota entity, in all (ms).",
        &throttle_ms,
    );
}
