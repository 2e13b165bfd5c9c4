//! `oxbow serve`: settings, start-up and graceful shutdown.
//!
//! Start-up: open the metadata store (`--metadata`: embedded under `--data-dir`, or etcd)
//! and the object store (`--object-store`: a local directory under `--data-dir`, or S3),
//! replay the WAL, bind both listeners, then report ready. Shutdown (Ctrl-C or SIGTERM):
//! in a cluster, hand every partition led here to another live broker and deregister
//! (`cluster::handoff`); then stop accepting, let connections finish their in-flight
//! requests, wait until everything acknowledged is durable, seal it into the object
//! store, exit 0.
//!
//! Storage failure (ARCHITECTURE decision 2): once a WAL write or fsync fails, the broker
//! reports not-ready, answers every produce `KAFKA_STORAGE_ERROR` for
//! `--storage-failure-exit-delay`, then stops as above but without the handoff (nothing it
//! holds can become durable here; the lease is revoked, so the controller fails its
//! partitions over with `recover_from`) and exits with [`EXIT_STORAGE_FAILED`] for its
//! supervisor to restart it. Started on a disk that cannot take a write, it exits with the
//! same code at once.
//!
//! Data directory layout: `metadata.redb` (embedded metadata), `wal/` (the WAL),
//! `objects/` (the local object store), `cluster_id`.
//!
//! Metadata: `--metadata embedded` (default) or `--metadata etcd://h1:2379,...[/cluster]`.
//! The broker registers under a lease of `--session-timeout` and keeps it alive from a
//! background task; appends are refused (NOT_LEADER_OR_FOLLOWER) while the lease is not
//! certainly alive, and after a lost lease the broker re-registers and bumps the leader
//! epochs of the partitions it leads before serving them again (`oxbow_metadata::lease`,
//! `oxbow_segment_writer::fence`).

use crate::broker::{Broker, BrokerSettings};
use crate::cluster;
use crate::http::{self, HttpState};
use crate::kafka;
use crate::security::listeners;
use crate::security::tls;
use crate::security::SecurityProtocol;
use anyhow::Context;
use oxbow_cache::ReadCache;
use oxbow_metadata::lease::{register, run_lease_keeper, NewLeaseHook};
use oxbow_metadata::{open_store, BrokerRegistration, LeaseGuard, MetadataLocation};
use oxbow_segment_writer::{
    objects, run_sealer, serve_internal, LogManager, LogSettings, ReplicationSettings, WalSettings,
};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod args;

pub use args::{Durability, LogFormat, ServeArgs};

/// Exit code of a broker whose WAL failed (EX_IOERR): restart it once the disk takes writes.
pub const EXIT_STORAGE_FAILED: u8 = 74;

/// The broker stopped because its WAL could not write; `main` exits with
/// [`EXIT_STORAGE_FAILED`].
#[derive(Debug, thiserror::Error)]
#[error("the WAL cannot write ({0}); exiting for the supervisor to restart the broker once the disk takes writes")]
pub struct StorageFailed(pub String);

/// Resolves with the WAL's failure, once it fails (never with `--durability direct`).
async fn wal_failed(log: &LogManager) -> String {
    match log.watch_wal_failure() {
        Some(mut failure) => match failure.wait_for(Option::is_some).await {
            Ok(f) => f.clone().unwrap_or_default(),
            Err(_) => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// The read cache `--cache-bytes`, `--cache-dir` and `--cache-disk-bytes` ask for.
async fn read_cache(args: &ServeArgs) -> anyhow::Result<ReadCache> {
    let memory = args.cache_bytes.as_usize();
    match &args.cache_dir {
        None => Ok(ReadCache::new(memory)),
        Some(dir) => ReadCache::with_disk(memory, dir, args.cache_disk_bytes.as_u64())
            .await
            .context("--cache-dir"),
    }
}

/// Reads the cluster id from the data dir, creating it on first start.
fn cluster_id(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join("cluster_id");
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => Ok(id.trim().to_string()),
        _ => {
            let id = uuid::Uuid::new_v4().simple().to_string();
            std::fs::write(&path, &id).with_context(|| format!("writing {}", path.display()))?;
            Ok(id)
        }
    }
}

/// `host:port`, bracketing an IPv6 host.
fn join_host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Longest the SIGTERM handoff may take before the broker stops anyway (what is left fails
/// over when its lease ends).
const HANDOFF_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the WAL copies of brokers gone for good are looked for.
const WAL_COPY_GC_EVERY: Duration = Duration::from_secs(60);

/// Waits for Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for SIGTERM; Ctrl-C still works");
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs the broker until a shutdown signal.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating --data-dir {}", args.data_dir.display()))?;
    // Before anything is recorded; per process (see `latency`'s docs).
    oxbow_segment_writer::latency::set_recording(args.latency_histograms);
    if args.max_request_bytes.as_u64() < 1024 {
        anyhow::bail!(
            "--max-request-bytes {} is too small (at least 1024)",
            args.max_request_bytes
        );
    }
    // Before binding anything: a bad secret file stops the broker with the flag named.
    let internal_auth_secrets = args
        .internal_auth_secret_file
        .as_deref()
        .map(crate::config::read_internal_auth_secrets)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let fd_limit = crate::fd_limit::raise_to_hard_limit();
    crate::fd_limit::check_capacity(
        fd_limit,
        u64::from(args.connections_max) + u64::from(args.http_connections_max),
    );
    let plan = listeners::plan(
        &args.listeners,
        args.kafka_addr,
        args.advertised_kafka_addr.as_deref(),
    )
    .map_err(anyhow::Error::msg)?;
    let crate::security::startup::SecurityStartup {
        authorization,
        sasl,
        oauth,
        tls_source,
        sasl_tls_source,
        http_authentication,
    } = crate::security::startup::prepare(&args, &plan).await?;
    // Bind first: a port conflict should fail fast, before any recovery work.
    let mut kafka_listeners = Vec::new();
    let mut advertised_listeners = std::collections::BTreeMap::new();
    for spec in &plan.listeners {
        let socket = TcpListener::bind(spec.bind)
            .await
            .with_context(|| format!("binding listener {} at {}", spec.name, spec.bind))?;
        let bound = socket.local_addr()?;
        let advertised = listeners::advertised(spec, bound).map_err(anyhow::Error::msg)?;
        advertised_listeners.insert(spec.name.clone(), advertised);
        kafka_listeners.push((spec.clone(), socket, bound));
    }
    let (advertised_host, advertised_port) = advertised_listeners
        .get(&plan.inter_broker)
        .cloned()
        .context("the inter-broker listener is not among the listeners")?;
    let http_listener = TcpListener::bind(args.http_addr)
        .await
        .with_context(|| format!("binding --http-addr {}", args.http_addr))?;
    let internal_listener = TcpListener::bind(args.internal_addr)
        .await
        .with_context(|| format!("binding --internal-addr {}", args.internal_addr))?;
    let internal_bound = internal_listener.local_addr()?;
    if internal_auth_secrets.is_none() && !internal_bound.ip().is_loopback() {
        tracing::warn!(internal_addr = %internal_bound,
            "the internal port is reachable beyond this host and unauthenticated: anyone reaching it can read and trim WAL copies; set --internal-auth-secret-file on every broker");
    }
    let http_bound = http_listener.local_addr()?;

    let metadata = open_store(&args.metadata, &args.data_dir)
        .await
        .context("opening the metadata store (--metadata)")?;
    let registration = BrokerRegistration {
        broker_id: args.broker_id,
        az: args.az.clone(),
        kafka_addr: join_host_port(&advertised_host, advertised_port),
        http_addr: http_bound.to_string(),
        internal_addr: args
            .advertised_internal_addr
            .clone()
            .unwrap_or_else(|| internal_bound.to_string()),
        listeners: advertised_listeners
            .iter()
            .map(|(name, (host, port))| (name.clone(), join_host_port(host, *port)))
            .collect(),
    };
    let lease_guard = LeaseGuard::new();
    let lease = register(
        metadata.as_ref(),
        &registration,
        args.session_timeout,
        &lease_guard,
    )
    .await
    .context("registering the broker (--session-timeout)")?;
    let object_store = objects::from_url(&args.object_store, &args.data_dir)?;
    // A WAL file is a small share of the budget: the file being appended to is never
    // trimmed, so a full WAL must still be able to drain.
    let wal_file_bytes_max = (args.wal_max_bytes.as_u64() / 8).clamp(1 << 20, 64 << 20);
    let log = LogManager::open(
        LogSettings {
            broker_id: args.broker_id,
            wal: WalSettings {
                dir: args.data_dir.join("wal"),
                file_bytes_max: wal_file_bytes_max,
                budget_bytes: args.wal_max_bytes.as_u64(),
                direct_writes: args.wal_direct_io,
            },
            flush_interval: args.flush_interval,
            flush_bytes: args.flush_bytes.as_u64(),
            partition_tail_bytes: args.partition_tail_bytes.as_usize(),
            tail_memory_bytes: args.tail_memory_bytes.as_usize(),
            max_decompressed_batch_bytes: args.max_decompressed_batch_bytes.as_usize(),
            producer_id_expiration: args.producer_id_expiration,
            replication: ReplicationSettings {
                az: args.az.clone(),
                replication_factor: args.wal_replication_factor,
                replica_lag_max: args.replica_lag_max,
                internal_auth: internal_auth_secrets,
            },
            durability: match args.durability {
                Durability::Wal => oxbow_segment_writer::Durability::Wal,
                Durability::Direct => oxbow_segment_writer::Durability::Direct,
            },
        },
        metadata.clone(),
        object_store,
        read_cache(&args).await?,
    )
    .await
    .map_err(|e| match e {
        oxbow_segment_writer::Error::WalFailed(why) => anyhow::Error::new(StorageFailed(why)),
        other => anyhow::Error::new(other).context("recovering the log"),
    })?;
    log.set_lease_guard(lease_guard.clone());
    let broker = Broker::new(
        BrokerSettings {
            broker_id: args.broker_id,
            advertised_host,
            advertised_port,
            listeners: advertised_listeners,
            auto_create_topics: args.auto_create_topics,
            default_partitions: args.default_partitions,
            max_request_bytes: args.max_request_bytes.as_usize(),
            cluster_id: match &args.metadata {
                // Every broker of a cluster must report the same id (clients refuse to mix
                // clusters): it is the cluster's name in the metadata service.
                MetadataLocation::Etcd(etcd) => format!("oxbow-{}", etcd.cluster),
                MetadataLocation::Embedded => cluster_id(&args.data_dir)?,
            },
            log_retention_ms: args.log_retention_ms,
            log_retention_bytes: args.log_retention_bytes,
            authorization,
            sasl: Arc::new(sasl),
            oauth: oauth.clone(),
            object_store_location: objects::parse_location(&args.object_store, &args.data_dir)?
                .to_string(),
            transactions: crate::transactions::coordinator::TxnSettings {
                id_expiration: args.transactional_id_expiration,
                abort_check_interval: args.transaction_abort_check_interval,
                max_timeout_ms: i32::try_from(args.transaction_max_timeout.as_millis()).map_err(
                    |_| anyhow::anyhow!("--transaction-max-timeout must be below 24 days"),
                )?,
                transaction_version: args.transaction_version,
                ..Default::default()
            },
        },
        metadata.clone(),
        log.clone(),
    )
    .await?;

    let stop_serving = CancellationToken::new();
    let stop_sealing = CancellationToken::new();
    let connections = TaskTracker::new();
    let background = TaskTracker::new();
    let ready = Arc::new(AtomicBool::new(false));

    let sealer = background.spawn(run_sealer(log.clone(), stop_sealing.clone()));
    // WAL tails that could not be recovered yet (a replica is not up) are retried here.
    background.spawn(log.clone().run_recoveries(stop_sealing.clone()));
    // Compaction of sealed objects into per-partition segments; stops with the sealer.
    background.spawn(oxbow_segment_writer::run_compactor(
        log.clone(),
        oxbow_segment_writer::CompactSettings {
            key_map_bytes: args.compaction_key_map_bytes.as_u64(),
            ..oxbow_segment_writer::CompactSettings::new(
                args.segment_bytes.as_u64(),
                args.compaction_interval,
                args.compaction_delete_delay,
            )
        },
        Some(Arc::new(crate::retention::TopicRetention {
            broker: Arc::downgrade(&broker),
            defaults: oxbow_segment_writer::Retention {
                ms: args.log_retention_ms,
                bytes: args.log_retention_bytes,
            },
        })),
        stop_sealing.clone(),
    ));
    // WAL replication: this broker's WAL to its replicas, other brokers' WALs to this one.
    // Both run until the final seal, so replicas hear the last trim.
    background.spawn(log.replicator.clone().run(stop_sealing.clone()));
    background.spawn(serve_internal(
        internal_listener,
        log.internal_auth().clone(),
        log.replica_store.clone(),
        stop_sealing.clone(),
        background.clone(),
    ));
    // The lease is revoked when the sealer stops (after the last acknowledged write).
    let hook_log = log.clone();
    let on_new_lease: NewLeaseHook = Arc::new(move |_lease| {
        let log = hook_log.clone();
        Box::pin(async move {
            log.resume_after_lease_loss()
                .await
                .map(|_| ())
                .map_err(|e| oxbow_metadata::Error::Unavailable(e.to_string()))
        })
    });
    // The lease outlives the sealer, except after a complete SIGTERM handoff (below).
    let stop_lease = CancellationToken::new();
    background.spawn(run_lease_keeper(
        metadata.clone(),
        registration,
        lease,
        lease_guard.clone(),
        Some(on_new_lease),
        stop_lease.clone(),
    ));
    background.spawn(broker.coordinator.clone().run_ticker(stop_serving.clone()));
    // Lag history and rates for the console (`/ui`), from memory only.
    background.spawn(crate::samples::run_sampler(
        broker.clone(),
        stop_serving.clone(),
    ));
    background.spawn(broker.transactions.clone().run_background(
        crate::transactions::markers::env(&broker),
        stop_serving.clone(),
    ));
    // The cluster (see `cluster`): follow membership and leadership, carry out transfer
    // requests, and campaign for the controller post. The controller stops first on
    // shutdown so it does not act against this broker's own handoff.
    let stop_controller = CancellationToken::new();
    let (handoff_tx, handoff_rx) = tokio::sync::mpsc::channel(cluster::handoff::QUEUE_CAPACITY);
    background.spawn(cluster::follower::run_membership(
        broker.clone(),
        stop_serving.clone(),
    ));
    background.spawn(cluster::follower::run_wal_sets(
        broker.clone(),
        stop_serving.clone(),
    ));
    if let Some(validator) = oauth {
        background.spawn(crate::security::oauth::run_jwks_refresher(
            validator,
            stop_serving.clone(),
        ));
    }
    background.spawn(crate::security::cache::run_security_follower(
        metadata.clone(),
        broker.security.clone(),
        broker.cluster.clone(),
        stop_serving.clone(),
    ));
    // Cluster links (issue 20): follow the mirror records; run mirror tasks where this
    // broker leads mirror partitions (stopped and awaited on shutdown).
    background.spawn(crate::mirror::run_mirror_follower(
        metadata.clone(),
        broker.mirrors.clone(),
        broker.cluster.clone(),
        stop_serving.clone(),
    ));
    background.spawn(crate::mirror::supervisor::run_supervisor(
        broker.clone(),
        stop_serving.clone(),
    ));
    background.spawn(cluster::follower::run_topic_follower(
        broker.clone(),
        handoff_tx,
        stop_serving.clone(),
    ));
    background.spawn(cluster::handoff::run_handoffs(
        broker.clone(),
        handoff_rx,
        stop_serving.clone(),
    ));
    background.spawn(cluster::controller::run_controller(
        metadata.clone(),
        args.broker_id,
        lease_guard.clone(),
        broker.cluster.clone(),
        cluster::controller_state::ControllerSettings::default(),
        stop_controller.clone(),
    ));
    // Objects nothing names any more (leaked, or of deleted topics) are swept away.
    background.spawn(cluster::reclaim::run_orphan_sweep(
        broker.clone(),
        args.orphan_sweep_interval,
        args.orphan_grace,
        stop_serving.clone(),
    ));
    // Objects the catalogue retired (a deleted topic's, compaction's) go within minutes.
    background.spawn(cluster::reclaim::run_retired_reclaim(
        broker.clone(),
        args.compaction_delete_delay,
        stop_serving.clone(),
    ));
    // WAL copies of brokers gone for good are dropped.
    background.spawn(cluster::reclaim::run_wal_copy_gc(
        broker.clone(),
        if args.wal_copy_grace.is_zero() {
            Duration::ZERO
        } else {
            WAL_COPY_GC_EVERY.min(args.wal_copy_grace)
        },
        args.wal_copy_grace,
        stop_serving.clone(),
    ));
    // The metadata service's history stays bounded; its footprint goes to /metrics.
    background.spawn(cluster::history::run_history(
        broker.clone(),
        args.metadata_history_retention,
        stop_serving.clone(),
    ));
    for source in tls_source.iter().chain(sasl_tls_source.iter()) {
        background.spawn(tls::reload::run_reloader(
            source.clone(),
            args.tls.ssl_reload_interval,
            broker.metrics.tls_reload.clone(),
            stop_serving.clone(),
        ));
    }
    // `--connections-max` bounds the connections of all listeners together.
    let connection_slots = Arc::new(tokio::sync::Semaphore::new(
        (args.connections_max as usize).max(1),
    ));
    // `--queued-max-request-bytes` bounds the requests of all listeners together.
    let request_memory = kafka::RequestMemory::new(args.queued_max_request_bytes.as_usize());
    let _ = broker.metrics.request_memory.set(request_memory.clone());
    broker
        .metrics
        .connections_max
        .store(u64::from(args.connections_max.max(1)), Ordering::Relaxed);
    let mut kafka_bound = Vec::new();
    for (spec, socket, bound) in kafka_listeners {
        kafka_bound.push(format!("{}://{bound}", spec.name));
        background.spawn(kafka::serve(
            socket,
            kafka::ListenerContext {
                name: spec.name,
                protocol: spec.protocol,
                tls: match spec.protocol {
                    SecurityProtocol::Ssl => tls_source.clone(),
                    SecurityProtocol::SaslSsl => sasl_tls_source.clone(),
                    SecurityProtocol::Plaintext | SecurityProtocol::SaslPlaintext => None,
                },
            },
            broker.clone(),
            kafka::ConnectionLimits {
                idle_max: args.connections_max_idle,
                request_read_timeout: args.request_read_timeout,
                request_memory: request_memory.clone(),
            },
            connection_slots.clone(),
            stop_serving.clone(),
            connections.clone(),
        ));
    }
    let router = http::router(HttpState {
        broker: broker.clone(),
        ready: ready.clone(),
        authentication: http_authentication,
    });
    background.spawn(http::listener::serve(
        http_listener,
        if args.http_tls {
            tls_source.clone()
        } else {
            None
        },
        router,
        broker.clone(),
        http::listener::HttpLimits {
            connections_max: args.http_connections_max as usize,
            header_timeout: args.http_header_timeout,
            idle_timeout: args.http_idle_timeout,
            body_timeout: args.http_body_timeout,
        },
        stop_serving.clone(),
        connections.clone(),
    ));
    ready.store(true, Ordering::Release);
    tracing::info!(
        kafka = %kafka_bound.join(","), http = %http_bound, data_dir = %args.data_dir.display(),
        broker_id = args.broker_id, "oxbow is serving"
    );

    let storage_failure = tokio::select! {
        _ = shutdown_signal() => None,
        why = wal_failed(&log) => Some(why),
    };
    ready.store(false, Ordering::Release);
    stop_controller.cancel();
    if let Some(why) = &storage_failure {
        tracing::error!(reason = %why, exit_delay = ?args.storage_failure_exit_delay,
            "the WAL failed: not ready, answering produces KAFKA_STORAGE_ERROR, then exiting with code {EXIT_STORAGE_FAILED}");
        tokio::select! {
            _ = shutdown_signal() => {}
            _ = tokio::time::sleep(args.storage_failure_exit_delay) => {}
        }
    }
    // Controlled shutdown: while still serving, hand every partition led here to another
    // live broker (seal, then move leadership). Clients get NOT_LEADER_OR_FOLLOWER and
    // learn the new leader from any broker, this one included, instead of timing out on a
    // closed port. Then deregister at once: nothing is led here, and no balancer should
    // pick a broker that is leaving.
    tracing::info!("shutting down: handing partitions over");
    // After a WAL failure nothing appended since can become durable here, so a handoff
    // (which waits for exactly that) cannot finish: the lease is revoked instead, below.
    let handoff = async {
        match storage_failure {
            None => cluster::handoff::hand_off_all(&broker).await,
            Some(_) => cluster::handoff::ShutdownHandoff::NoPeers,
        }
    };
    match tokio::time::timeout(HANDOFF_TIMEOUT, handoff).await {
        Ok(cluster::handoff::ShutdownHandoff::Done { moved }) => {
            tracing::info!(moved, "handed every partition over; deregistering");
            stop_lease.cancel();
        }
        Ok(cluster::handoff::ShutdownHandoff::NoPeers) => {}
        Ok(cluster::handoff::ShutdownHandoff::Partial { moved, left }) => tracing::warn!(
            moved,
            left,
            "some partitions could not be handed over; they fail over once the lease ends"
        ),
        Err(_) => tracing::warn!(
            "the handoff did not finish in time; the rest fails over once the lease ends"
        ),
    }
    tracing::info!("shutting down: finishing in-flight requests");
    stop_serving.cancel();
    connections.close();
    if tokio::time::timeout(Duration::from_secs(15), connections.wait())
        .await
        .is_err()
    {
        tracing::warn!("some connections did not finish within 15 s; closing them");
    }
    if !log.wait_durable(Duration::from_secs(10)).await {
        tracing::warn!("some acks=1 writes were not durable before shutdown");
    }
    stop_sealing.cancel();
    // The final seal commits under the lease: revoke it only once the sealer has drained
    // (revoked together, the drain was refused as fenced and left the last acknowledged
    // writes in the WAL alone).
    if tokio::time::timeout(Duration::from_secs(30), sealer)
        .await
        .is_err()
    {
        tracing::warn!("the final seal did not finish within 30 s; the WAL keeps unsealed data for the next start");
    }
    stop_lease.cancel();
    background.close();
    if tokio::time::timeout(Duration::from_secs(30), background.wait())
        .await
        .is_err()
    {
        tracing::warn!("background tasks did not stop within 30 s; the WAL keeps unsealed data for the next start");
    }
    tracing::info!("stopped");
    match storage_failure {
        Some(why) => Err(StorageFailed(why).into()),
        None => Ok(()),
    }
}
