//! The broker's metric families, read from its state at each scrape: a `prometheus-client`
//! [`Collector`], so the library writes the exposition (names, types, escaping) and the
//! counters stay plain atomics on the hot paths.

use super::scrape::{Labels, Scrape};
use crate::broker::Broker;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Most quota meters shown (one series each per metric).
const QUOTA_SERIES_MAX: usize = 1000;

/// Every family below, for one broker.
pub(super) struct BrokerFamilies(pub(super) Arc<Broker>);

impl fmt::Debug for BrokerFamilies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BrokerFamilies")
    }
}

impl Collector for BrokerFamilies {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        let mut s = Scrape::new(encoder);
        let b = &self.0;
        connections(b, &mut s)?;
        requests(b, &mut s)?;
        storage(b, &mut s)?;
        compaction(b, &mut s)?;
        metadata(b, &mut s)?;
        super::health::cluster(b, &mut s)?;
        super::health::watches(b, &mut s)?;
        super::health::runtime(&mut s)?;
        super::health::disks(b, &mut s)?;
        partitions(b, &mut s)?;
        groups(b, &mut s)?;
        mirrors(b, &mut s)?;
        quotas(b, &mut s)
    }
}

fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

fn label(name: &'static str, value: impl ToString) -> Labels {
    vec![(name, value.to_string())]
}

fn connections(b: &Broker, s: &mut Scrape) -> fmt::Result {
    let m = &b.metrics;
    s.gauge(
        "oxbow_connections_open",
        "Open Kafka connections.",
        get(&m.connections_open),
    )?;
    s.counter(
        "oxbow_connections_total",
        "Kafka connections accepted.",
        get(&m.connections_total),
    )?;
    if let Some(memory) = m.request_memory.get() {
        s.gauge(
            "oxbow_request_queued_bytes",
            "Bytes of Kafka requests read and not yet answered (at most \
             --queued-max-request-bytes, in KiB steps).",
            memory.used_bytes(),
        )?;
    }
    s.counter(
        "oxbow_requests_waited_for_memory_total",
        "Kafka requests that waited for room under --queued-max-request-bytes before \
         they were served (their connection read nothing meanwhile).",
        get(&m.requests_waited_for_memory),
    )?;
    s.gauge(
        "oxbow_http_connections_open",
        "Open HTTP connections (at most --http-connections-max).",
        get(&m.http_connections_open),
    )?;
    s.gauges(
        "oxbow_connections_max",
        "The bound on open connections, by listener kind (--connections-max over all Kafka \
         listeners, --http-connections-max): open / max is the listener's saturation.",
        &[
            (label("listener", "kafka"), get(&m.connections_max)),
            (label("listener", "http"), get(&m.http_connections_max)),
        ],
    )?;
    s.counters(
        "oxbow_connection_slot_waits_total",
        "Accepts that found every connection slot taken (the listener saturated): the \
         connection waited in the kernel's accept backlog until another closed.",
        &[
            (label("listener", "kafka"), get(&m.connection_slot_waits)),
            (
                label("listener", "http"),
                get(&m.http_connection_slot_waits),
            ),
        ],
    )?;
    s.counter(
        "oxbow_tls_handshake_failures_total",
        "TLS handshakes on SSL/SASL_SSL listeners that failed or timed out.",
        get(&m.tls_handshake_failures),
    )?;
    s.counters(
        "oxbow_http_authentication_failures_total",
        "HTTP requests refused 401 (--http-authentication), by the scheme that failed: \
         none (no credentials, or a header not understood), basic, bearer.",
        &[
            (
                label("scheme", "none"),
                get(&m.http_authentication_failures_none),
            ),
            (
                label("scheme", "basic"),
                get(&m.http_authentication_failures_basic),
            ),
            (
                label("scheme", "bearer"),
                get(&m.http_authentication_failures_bearer),
            ),
        ],
    )?;
    s.counters(
        "oxbow_tls_reloads_total",
        "Changes of the TLS certificate files, by whether they loaded (result=ok) or the \
         previous certificate was kept (result=error).",
        &[
            (label("result", "ok"), get(&m.tls_reload.reloads)),
            (label("result", "error"), get(&m.tls_reload.failures)),
        ],
    )?;
    let timed_out = [
        ("kafka", "idle", &m.connections_idle_closed),
        ("kafka", "read", &m.connections_read_timed_out),
        ("http", "idle", &m.http_connections_idle_closed),
        ("http", "read", &m.http_connections_read_timed_out),
    ]
    .map(|(listener, reason, c)| {
        (
            vec![
                ("listener", listener.to_string()),
                ("reason", reason.to_string()),
            ],
            get(c),
        )
    });
    s.counters(
        "oxbow_connections_timed_out_total",
        "Connections closed for being idle or not reading responses too long (reason=idle) \
         or for sending a request too slowly (reason=read).",
        &timed_out,
    )?;
    s.counter(
        "oxbow_internal_auth_failures_total",
        "Internal-port handshakes that failed, either side (wrong or missing \
         --internal-auth-secret-file, a peer not the broker it claims, a timeout).",
        b.log.internal_auth().failures(),
    )
}

fn requests(b: &Broker, s: &mut Scrape) -> fmt::Result {
    let m = &b.metrics;
    let per_api: Vec<(Labels, u64)> = m
        .requests
        .iter()
        .enumerate()
        .filter(|(_, c)| get(c) > 0)
        .map(|(k, c)| (label("api_key", k), get(c)))
        .collect();
    s.counters(
        "oxbow_kafka_requests_total",
        "Kafka requests by API key.",
        &per_api,
    )?;
    for (name, help, value) in [
        (
            "oxbow_kafka_request_errors_total",
            "Kafka requests that closed the connection.",
            &m.request_errors,
        ),
        (
            "oxbow_kafka_bytes_in_total",
            "Kafka request bytes received.",
            &m.bytes_in,
        ),
        (
            "oxbow_kafka_bytes_out_total",
            "Kafka response bytes sent.",
            &m.bytes_out,
        ),
        (
            "oxbow_http_requests_total",
            "HTTP requests served.",
            &m.http_requests,
        ),
    ] {
        s.counter(name, help, get(value))?;
    }
    Ok(())
}

fn storage(b: &Broker, s: &mut Scrape) -> fmt::Result {
    let l = &b.log.metrics;
    for (name, help, value) in [
        (
            "oxbow_appended_batches_total",
            "Record batches appended.",
            &l.appended_batches,
        ),
        (
            "oxbow_appended_records_total",
            "Records appended.",
            &l.appended_records,
        ),
        (
            "oxbow_appended_bytes_total",
            "Record batch bytes appended (the per-broker ingest the autoscaler tracks).",
            &l.appended_bytes,
        ),
        (
            "oxbow_objects_uploaded_total",
            "Sealed objects uploaded.",
            &l.objects_uploaded,
        ),
        (
            "oxbow_object_bytes_uploaded_total",
            "Bytes of sealed objects uploaded.",
            &l.object_bytes_uploaded,
        ),
        (
            "oxbow_upload_failures_total",
            "Failed uploads or catalog commits (retried).",
            &l.upload_failures,
        ),
        (
            "oxbow_uncatalogued_objects_deleted_total",
            "Sealed objects deleted because their catalog commit failed and never landed.",
            &l.uncatalogued_objects_deleted,
        ),
        (
            "oxbow_object_reads_total",
            "Ranged GETs from the object store.",
            &l.object_reads,
        ),
        (
            "oxbow_read_cache_hits_total",
            "Object reads served by the read cache.",
            &l.cache_hits,
        ),
        (
            "oxbow_checksum_failures_total",
            "Object ranges that failed their checksum.",
            &l.checksum_failures,
        ),
    ] {
        s.counter(name, help, get(value))?;
    }
    s.counters(
        "oxbow_read_committed_aborts_total",
        "read_committed reads below the leader's in-memory aborted index (or on a broker not \
         leading the partition), by how their aborted transactions were found: the catalog's \
         index, or walking batch headers.",
        &[
            (label("source", "catalog"), get(&l.aborts_from_catalog)),
            (
                label("source", "header_walk"),
                get(&l.aborts_by_header_walk),
            ),
        ],
    )?;
    let log = &b.log;
    s.gauge(
        "oxbow_wal_bytes",
        "Bytes held in the WAL on disk.",
        log.wal_bytes(),
    )?;
    s.gauge(
        "oxbow_wal_healthy",
        "1 while the WAL takes writes; 0 after a write or fsync failed (the broker then exits).",
        if log.wal_failure().is_some() {
            0.0
        } else {
            1.0
        },
    )?;
    s.counter(
        "oxbow_storage_errors_total",
        "Produce batches answered KAFKA_STORAGE_ERROR because the WAL failed.",
        log.storage_errors(),
    )?;
    s.gauge(
        "oxbow_recoveries_pending",
        "WAL tail recoveries waiting for a WAL replica to answer (see /readyz).",
        log.recoveries_pending(),
    )?;
    s.counter(
        "oxbow_wal_written_bytes_total",
        "Bytes this broker's WAL wrote (fsynced) since start.",
        log.wal_written_bytes(),
    )?;
    s.counter(
        "oxbow_wal_replica_written_bytes_total",
        "Bytes of other brokers' WALs written (fsynced) here as their replica since start.",
        log.replica_store.written_bytes(),
    )?;
    s.gauge(
        "oxbow_wal_in_sync_copies",
        "In-sync copies of this broker's WAL, its own included (acks=all needs \
         min.insync.replicas).",
        log.replicator.in_sync_copies(),
    )?;
    let isr = log.replicator.isr_changes();
    s.counter(
        "oxbow_isr_shrinks_total",
        "Replicas that left the recorded in-sync set of this broker's WAL (Kafka's \
         IsrShrinksPerSec): a replica fell behind --replica-lag-max or went away.",
        get(&isr.shrinks),
    )?;
    s.counter(
        "oxbow_isr_expands_total",
        "Replicas that joined the recorded in-sync set of this broker's WAL (Kafka's \
         IsrExpandsPerSec).",
        get(&isr.expands),
    )?;
    s.gauge(
        "oxbow_unsealed_bytes",
        "Bytes durable in the WAL, not yet in the object store.",
        log.unsealed_bytes(),
    )?;
    s.gauge(
        "oxbow_read_cache_bytes",
        "Bytes held in the read cache's memory.",
        log.cache_usage_bytes(),
    )?;
    s.gauge(
        "oxbow_partition_tail_bytes",
        "Already uploaded bytes kept in partitions' memory tails for tail readers \
         (at most --tail-memory-bytes).",
        log.tail_memory_bytes(),
    )?;
    if let Some(rss) = resident_memory_bytes() {
        s.gauge(
            "process_resident_memory_bytes",
            "Resident memory size of the broker process in bytes.",
            rss,
        )?;
    }
    Ok(())
}

/// The process's resident set, from `/proc/self/status` (Linux only; `None` elsewhere).
fn resident_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn compaction(b: &Broker, s: &mut Scrape) -> fmt::Result {
    let cm = &b.log.compact_metrics;
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
            "Partitions of compacted topics (cleanup.policy=compact) cleaned up to what the \
             offset map covered.",
            &cm.key_cleanings,
        ),
        (
            "oxbow_key_compaction_records_removed_total",
            "Records key compaction removed: older values of a key, and tombstones past \
             delete.retention.ms.",
            &cm.key_records_removed,
        ),
        (
            "oxbow_compaction_failures_total",
            "Compaction steps that failed (retried next round).",
            &cm.failures,
        ),
    ] {
        s.counter(name, help, get(value))?;
    }
    Ok(())
}

fn metadata(b: &Broker, s: &mut Scrape) -> fmt::Result {
    let m = &b.metrics;
    if let Some(c) = b.metadata.catalog_footprint() {
        s.gauge(
            "oxbow_catalog_partitions",
            "Partitions in this broker's in-memory catalogue.",
            c.partitions,
        )?;
        s.gauge(
            "oxbow_catalog_entries",
            "Entries held by the in-memory catalogue (stored entries and resolved views).",
            c.entries,
        )?;
        s.gauge(
            "oxbow_catalog_objects",
            "Sealed objects' catalog keys held by the in-memory catalogue.",
            c.objects,
        )?;
        s.gauge(
            "oxbow_catalog_memory_bytes",
            "Heap held by the in-memory catalogue, estimated from its counts.",
            c.approx_bytes,
        )?;
    }
    if let Some(f) = m.metadata_footprint() {
        s.gauge(
            "oxbow_metadata_db_bytes",
            "Size of the metadata service's database file (etcd: of the member that answered; \
             its --quota-backend-bytes applies to it), sampled every 30 s.",
            f.db_bytes,
        )?;
        if let Some(in_use) = f.db_bytes_in_use {
            s.gauge(
                "oxbow_metadata_db_in_use_bytes",
                "Bytes of the metadata database holding live data: what a defragmentation \
                 would leave, sampled every 30 s.",
                in_use,
            )?;
        }
        s.gauge(
            "oxbow_metadata_keys",
            "Keys under this cluster's root in the metadata service, sampled every 30 s.",
            f.keys,
        )?;
    }
    s.gauge(
        "oxbow_metadata_revision",
        "The metadata service's current revision, as last sampled.",
        get(&m.metadata_revision),
    )?;
    s.gauge(
        "oxbow_metadata_compacted_revision",
        "The revision the metadata service's history is known compacted to (by this broker \
         while it is the controller, or as the embedded store reports); 0: not known.",
        get(&m.metadata_compacted_revision),
    )?;
    s.counter(
        "oxbow_metadata_compactions_total",
        "History compactions of the metadata service run by this broker \
         (--metadata-history-retention).",
        get(&m.metadata_compactions),
    )?;
    s.counter(
        "oxbow_metadata_compaction_failures_total",
        "History compactions that failed or timed out (retried at the next sample).",
        get(&m.metadata_compaction_failures),
    )?;
    s.counter(
        "oxbow_orphan_objects_deleted_total",
        "Objects the controller's sweep deleted because no catalog key named them and they \
         were older than --orphan-grace (leaked by a crash, or of deleted topics).",
        get(&m.orphan_objects_deleted),
    )?;
    s.counter(
        "oxbow_wal_copy_sources_dropped_total",
        "Brokers whose WAL copies this broker dropped: unregistered, leading no partition and \
         named by no partition's recovery for --wal-copy-grace.",
        get(&m.wal_copy_sources_dropped),
    )
}

fn partitions(b: &Broker, s: &mut Scrape) -> fmt::Result {
    let mut hw = Vec::new();
    let mut log_start = Vec::new();
    let mut stored_bytes = Vec::new();
    let mut stored_entries = Vec::new();
    for p in b.log.open_partitions() {
        if let Ok((start, high, _)) = p.offsets() {
            let labels = vec![
                ("topic", p.topic_name.clone()),
                ("partition", p.topic_partition.partition.to_string()),
            ];
            let (bytes, entries) = p.stored();
            hw.push((labels.clone(), high));
            log_start.push((labels.clone(), start));
            stored_bytes.push((labels.clone(), bytes));
            stored_entries.push((labels, entries));
        }
    }
    s.gauges(
        "oxbow_partition_stored_bytes",
        "Record-batch bytes the object store holds of each partition led here, from its log \
         start (counted every compaction round).",
        &stored_bytes,
    )?;
    s.gauges(
        "oxbow_partition_stored_entries",
        "Catalog entries (sealed objects' ranges and segments) of each partition led here, \
         from its log start (counted every compaction round).",
        &stored_entries,
    )?;
    s.gauges(
        "oxbow_partition_high_watermark",
        "High watermark per partition.",
        &hw,
    )?;
    s.gauges(
        "oxbow_partition_log_start_offset",
        "Log start offset per partition.",
        &log_start,
    )
}

fn groups(b: &Broker, s: &mut Scrape) -> fmt::Result {
    let now_ms = super::lag::now_ms();
    let mut lag = Vec::new();
    let mut lag_seconds = Vec::new();
    let mut committed = Vec::new();
    for (group, topic, partition, offset) in b.coordinator.cached_offsets() {
        let labels = vec![
            ("group", group),
            ("topic", topic.clone()),
            ("partition", partition.to_string()),
        ];
        committed.push((labels.clone(), offset));
        let high = crate::groups::lag::high_watermark(b, &topic, partition);
        let tp = b
            .topic(&topic)
            .map(|t| oxbow_metadata::TopicPartition::new(t.topic_id, partition));
        if let (Some(tp), Some(high)) = (tp, high) {
            lag.push((labels.clone(), (high - offset).max(0)));
            let seconds = b.metrics.lag_clock.lag_seconds(&tp, offset, high, now_ms);
            lag_seconds.push((labels, seconds));
        }
    }
    s.gauges(
        "oxbow_consumer_group_committed_offset",
        "Committed offset per group and partition.",
        &committed,
    )?;
    s.gauges(
        "oxbow_consumer_group_lag",
        "High watermark minus committed offset, per group and partition.",
        &lag,
    )?;
    s.gauges(
        "oxbow_consumer_group_lag_seconds",
        "How long ago the first record a group has not committed was appended, per group and \
         partition (0 when caught up): from the partition's offset-to-append-time samples \
         (every 5 s, older ones thinned), so a lower bound past the oldest sample kept.",
        &lag_seconds,
    )
}

/// Most mirror partitions shown per scrape (3 series each), as for partitions.
const MIRROR_SERIES_MAX: usize = 1000;

/// Mirror topics (issue 20): lag of the partitions whose mirror task runs here, bytes
/// mirrored per link, and each link's state as this broker sees it.
fn mirrors(b: &Broker, s: &mut Scrape) -> fmt::Result {
    let mut records = Vec::new();
    let mut seconds = Vec::new();
    for ((topic, partition), lag) in b.mirrors.running().into_iter().take(MIRROR_SERIES_MAX) {
        let labels = vec![("topic", topic), ("partition", partition.to_string())];
        records.push((labels.clone(), lag.records.load(Ordering::Relaxed)));
        seconds.push((labels, lag.ms.load(Ordering::Relaxed) as f64 / 1000.0));
    }
    s.gauges(
        "oxbow_mirror_lag_records",
        "Records the source held past the mirror's log end when it answered the last fetch, \
         per mirror partition led here (0 only when fully caught up).",
        &records,
    )?;
    s.gauges(
        "oxbow_mirror_lag_seconds",
        "Age, by the source's timestamps, of the oldest record the last fetch brought when it \
         was mirrored (0 when it brought nothing), per mirror partition led here.",
        &seconds,
    )?;
    let bytes: Vec<(super::scrape::Labels, u64)> = b
        .mirrors
        .bytes_by_link()
        .into_iter()
        .map(|(link, n)| (label("link", link), n))
        .collect();
    s.counters(
        "oxbow_mirror_bytes_total",
        "Bytes of source batches appended by this broker's mirror tasks, per link.",
        &bytes,
    )?;
    let mut states = Vec::new();
    for l in b.mirrors.links() {
        let failing = b.mirrors.link_error(&l.value.name).is_some();
        for (state, on) in [
            (
                "active",
                l.value.state == oxbow_metadata::LinkState::Active && !failing,
            ),
            ("paused", l.value.state == oxbow_metadata::LinkState::Paused),
            (
                "error",
                l.value.state == oxbow_metadata::LinkState::Active && failing,
            ),
        ] {
            states.push((
                vec![("link", l.value.name.clone()), ("state", state.to_string())],
                i64::from(on),
            ));
        }
    }
    s.gauges(
        "oxbow_mirror_link_state",
        "1 for a link's current state (active, paused, or error: active but its last attempt \
         here failed), else 0.",
        &states,
    )
}

fn quotas(b: &Broker, s: &mut Scrape) -> fmt::Result {
    let mut rate = Vec::new();
    let mut throttled = Vec::new();
    let mut throttle_ms = Vec::new();
    for q in b.quotas.stats(QUOTA_SERIES_MAX) {
        let labels = vec![
            ("quota", q.key.name().to_string()),
            ("user", q.meter.user.clone().unwrap_or_default()),
            ("client_id", q.meter.client_id.clone().unwrap_or_default()),
        ];
        rate.push((labels.clone(), q.rate));
        throttled.push((labels.clone(), q.throttled));
        throttle_ms.push((labels, q.throttle_ms_total));
    }
    s.gauges(
        "oxbow_quota_rate",
        "Current rate of a metered quota entity (bytes/s), over Kafka's 11 one-second samples.",
        &rate,
    )?;
    s.counters(
        "oxbow_quota_throttled_requests_total",
        "Requests of a quota entity answered with a throttle.",
        &throttled,
    )?;
    s.counters(
        "oxbow_quota_throttle_time_ms_total",
        "Throttle time asked of a quota entity, in all (ms).",
        &throttle_ms,
    )
}
