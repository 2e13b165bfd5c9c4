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
use crate::config::ByteSize;
use crate::http::{self, HttpState};
use crate::kafka;
use crate::security::listeners::{self, ListenerArgs};
use crate::security::tls::{self, TlsArgs};
use crate::security::SecurityProtocol;
use anyhow::Context;
use oxbow_cache::ReadCache;
use oxbow_metadata::lease::{register, run_lease_keeper, NewLeaseHook};
use oxbow_metadata::{open_store, BrokerRegistration, LeaseGuard, MetadataLocation};
use oxbow_segment_writer::{
    objects, run_sealer, serve_internal, LogManager, LogSettings, ReplicationSettings, WalSettings,
};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (colored on a terminal).
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Flags of `oxbow serve`; each also reads from the `OXBOW_*` variable named in its help.
#[derive(Clone, Debug, clap::Args)]
pub struct ServeArgs {
    /// Address the Kafka protocol listens on (one PLAINTEXT listener; --listeners replaces it).
    #[arg(long, env = "OXBOW_KAFKA_ADDR", default_value = "127.0.0.1:9092")]
    pub kafka_addr: SocketAddr,
    #[command(flatten)]
    pub listeners: ListenerArgs,
    #[command(flatten)]
    pub authorization: crate::security::acl::AuthorizationArgs,
    #[command(flatten)]
    pub sasl: crate::security::sasl::SaslArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub oauth: crate::security::oauth::OauthArgs,
    #[command(flatten)]
    pub http_authentication: crate::http::authn::HttpAuthArgs,
    /// Address the HTTP/JSON API (REST Proxy v2, /metrics, /healthz, /readyz) listens on.
    #[arg(long, env = "OXBOW_HTTP_ADDR", default_value = "127.0.0.1:8080")]
    pub http_addr: SocketAddr,
    /// Serve the HTTP API over TLS (HTTPS) with the --ssl-* certificate, key, client
    /// authentication and reload. With --ssl-client-auth required, health probes and
    /// scrapers need a client certificate too.
    #[arg(long, env = "OXBOW_HTTP_TLS", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub http_tls: bool,
    /// Directory for the embedded metadata, the WAL and the local object store.
    #[arg(long, env = "OXBOW_DATA_DIR", default_value = "./oxbow-data")]
    pub data_dir: PathBuf,
    /// host:port clients are told to connect to (default: the Kafka listen address).
    #[arg(long, env = "OXBOW_ADVERTISED_KAFKA_ADDR")]
    pub advertised_kafka_addr: Option<String>,
    /// This broker's id (Kafka's node.id).
    #[arg(long, env = "OXBOW_BROKER_ID", default_value_t = 1)]
    pub broker_id: i32,
    /// Create unknown topics on first use by a producer's or consumer's metadata request.
    #[arg(long, env = "OXBOW_AUTO_CREATE_TOPICS", default_value_t = true, action = clap::ArgAction::Set)]
    pub auto_create_topics: bool,
    /// Partitions of an auto-created topic (and of CreateTopics asking for -1).
    #[arg(long, env = "OXBOW_DEFAULT_PARTITIONS", default_value_t = 1,
          value_parser = clap::value_parser!(i32).range(1..=10_000))]
    pub default_partitions: i32,
    /// Largest request frame accepted; larger ones close the connection.
    #[arg(long, env = "OXBOW_MAX_REQUEST_BYTES", default_value = "100MiB")]
    pub max_request_bytes: ByteSize,
    /// Seal and upload at least this often: shorter means smaller WAL and fresher objects,
    /// but more PUT requests (billed per request) and smaller objects.
    #[arg(long, env = "OXBOW_FLUSH_INTERVAL", default_value = "250ms", value_parser = humantime::parse_duration)]
    pub flush_interval: Duration,
    /// Seal early once this much unsealed data is held (bounds memory and object size).
    #[arg(long, env = "OXBOW_FLUSH_BYTES", default_value = "16MiB")]
    pub flush_bytes: ByteSize,
    /// Most bytes the WAL may hold while uploads lag; producers get retriable errors past it.
    /// Two spare WAL files of an eighth of it (at most 64 MiB each) are kept on top, so new
    /// files overwrite old blocks instead of growing (no journal commit per fsync).
    #[arg(long, env = "OXBOW_WAL_MAX_BYTES", default_value = "2GiB")]
    pub wal_max_bytes: ByteSize,
    /// Memory for cached object ranges (reads of data no longer in a partition's tail).
    #[arg(long, env = "OXBOW_CACHE_BYTES", default_value = "256MiB")]
    pub cache_bytes: ByteSize,
    /// Directory of the read cache's disk tier: ranges evicted from memory are kept there,
    /// so readers minutes behind read a local file instead of the object store. Not durable
    /// state (safe to lose; what is read back is checksummed). Without it, memory only.
    #[arg(long, env = "OXBOW_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Size of the disk tier in `--cache-dir`.
    #[arg(long, env = "OXBOW_CACHE_DISK_BYTES", default_value = "4GiB")]
    pub cache_disk_bytes: ByteSize,
    /// Recent, already uploaded data kept in memory per partition for tail reads.
    #[arg(long, env = "OXBOW_PARTITION_TAIL_BYTES", default_value = "4MiB")]
    pub partition_tail_bytes: ByteSize,
    /// Most bytes one batch may decompress to when the broker looks inside it (produce
    /// validation, HTTP reads, ListOffsets by time); each look holds up to this much memory
    /// while it runs. Larger admits producers that pack more records per compressed batch;
    /// a batch past it is refused with MESSAGE_TOO_LARGE (Java producers then split it).
    #[arg(
        long,
        env = "OXBOW_MAX_DECOMPRESSED_BATCH_BYTES",
        default_value = "32MiB"
    )]
    pub max_decompressed_batch_bytes: ByteSize,
    /// Largest per-partition segment compaction writes. Larger: fewer objects and catalog
    /// entries and longer sequential reads, at the cost of memory while one is built (one
    /// at a time) and more bytes re-written as small segments merge.
    #[arg(long, env = "OXBOW_SEGMENT_BYTES", default_value = "512MiB")]
    pub segment_bytes: ByteSize,
    /// How often compaction rewrites small sealed objects into per-partition segments (`0s`
    /// disables it). Shorter frees sealed objects and shrinks the catalog sooner, at the
    /// cost of more PUTs (about one per partition with new data per round).
    #[arg(long, env = "OXBOW_COMPACTION_INTERVAL", default_value = "60s", value_parser = humantime::parse_duration)]
    pub compaction_interval: Duration,
    /// How long an object replaced by compaction stays once nothing references it, so reads
    /// that looked it up just before finish. Longer costs storage for that long; shorter
    /// makes slow readers look the catalog up again.
    #[arg(long, env = "OXBOW_COMPACTION_DELETE_DELAY", default_value = "5m", value_parser = humantime::parse_duration)]
    pub compaction_delete_delay: Duration,
    /// Memory for key compaction's offset map (Kafka's `log.cleaner.dedupe.buffer.size`):
    /// 24 bytes per distinct key of a compacted partition's uncompacted part (plus the hash
    /// table's overhead, up to about 2×), while one partition is cleaned. Larger cleans
    /// more keys per round; a partition with more dirty keys is cleaned over several rounds.
    #[arg(long, env = "OXBOW_COMPACTION_KEY_MAP_BYTES", default_value = "64MiB")]
    pub compaction_key_map_bytes: ByteSize,
    /// Retention by age for topics that set no `retention.ms` (Kafka's `log.retention.ms`):
    /// sealed data whose newest record is older leaves the log, a sealed object or segment
    /// at a time, checked every compaction round. `-1` keeps data forever.
    #[arg(long, env = "OXBOW_LOG_RETENTION_MS", default_value_t = 604_800_000,
        allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(-1..))]
    pub log_retention_ms: i64,
    /// How often open transactions are checked against their timeout (Kafka's
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`): a transaction whose
    /// producer vanished holds `read_committed` consumers at its first offset until then.
    #[arg(long, env = "OXBOW_TRANSACTION_ABORT_CHECK_INTERVAL", default_value = "10s",
        value_parser = humantime::parse_duration)]
    pub transaction_abort_check_interval: std::time::Duration,
    /// A transactional id with nothing open and no request for this long is forgotten
    /// (Kafka's `transactional.id.expiration.ms`, 7 days).
    #[arg(long, env = "OXBOW_TRANSACTIONAL_ID_EXPIRATION", default_value = "7days",
        value_parser = humantime::parse_duration)]
    pub transactional_id_expiration: std::time::Duration,
    /// A producer id with no batch for this long (by its records' timestamps) and no
    /// transaction open is forgotten by the partitions it wrote (Kafka's
    /// `producer.id.expiration.ms`, 1 day): a retry from it after that is no longer
    /// recognised as a duplicate. Longer keeps idempotence for producers idle longer, at
    /// the cost of memory per producer id per partition (each partition also keeps at
    /// most 20,000, dropping those whose last write lies furthest back).
    #[arg(long, env = "OXBOW_PRODUCER_ID_EXPIRATION", default_value = "1day",
        value_parser = humantime::parse_duration)]
    pub producer_id_expiration: std::time::Duration,
    /// The `transaction.version` feature finalized for clients (Kafka's, set there with
    /// `kafka-features.sh upgrade`): 2, KIP-890's protocol 2, which Kafka 4 clients then
    /// use (no AddPartitionsToTxn or AddOffsetsToTxn round trips, the producer epoch bumped
    /// by every commit or abort); 1 keeps every client on protocol 1.
    #[arg(long, env = "OXBOW_TRANSACTION_VERSION", default_value_t = 2,
        value_parser = clap::value_parser!(i16).range(1..=2))]
    pub transaction_version: i16,
    /// The longest `transaction.timeout.ms` a producer may ask for (Kafka's
    /// `transaction.max.timeout.ms`, 15 minutes; Flink's exactly-once sink asks for 1 hour).
    /// Longer lets an abandoned transaction hold `read_committed` consumers longer.
    #[arg(long, env = "OXBOW_TRANSACTION_MAX_TIMEOUT", default_value = "15m",
        value_parser = humantime::parse_duration)]
    pub transaction_max_timeout: std::time::Duration,
    /// Retention by size per partition for topics that set no `retention.bytes` (Kafka's
    /// `log.retention.bytes`). `-1` keeps any size.
    #[arg(long, env = "OXBOW_LOG_RETENTION_BYTES", default_value_t = -1,
        allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(-1..))]
    pub log_retention_bytes: i64,
    /// Log line format.
    #[arg(long, env = "OXBOW_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Where cluster metadata lives: `embedded` (a file in --data-dir; one node) or
    /// `etcd://host:2379,host:2379,...[/cluster-name]` (keys under /oxbow/{cluster-name}/).
    #[arg(long, env = "OXBOW_METADATA", default_value = "embedded")]
    pub metadata: MetadataLocation,
    /// The broker's lease TTL: how long it stays registered (and may acknowledge writes)
    /// without reaching the metadata service. Shorter moves a dead broker's partitions
    /// sooner; longer rides out longer pauses and etcd elections without fencing (min 2s).
    #[arg(long, env = "OXBOW_SESSION_TIMEOUT", default_value = "6s", value_parser = humantime::parse_duration)]
    pub session_timeout: Duration,
    /// Where sealed objects go: `local` (`{data-dir}/objects`) or `s3://bucket/prefix`
    /// (configured by the standard AWS env vars: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    /// AWS_REGION, AWS_ENDPOINT_URL for an S3-compatible server, AWS_ALLOW_HTTP=true).
    #[arg(long, env = "OXBOW_OBJECT_STORE", default_value = "local")]
    pub object_store: String,
    /// This broker's availability zone. WAL replicas are placed on brokers in other zones,
    /// so an acknowledged write survives the loss of a zone; brokers without a zone are
    /// each treated as a zone of their own.
    #[arg(long, env = "OXBOW_AZ")]
    pub az: Option<String>,
    /// Address other brokers use to stream WAL replication to this one (and to fetch a dead
    /// broker's tail from it). Keep it off the client network. Peers find it through the
    /// metadata service, so the default (a free loopback port) suits one machine.
    #[arg(long, env = "OXBOW_INTERNAL_ADDR", default_value = "127.0.0.1:0")]
    pub internal_addr: SocketAddr,
    /// host:port other brokers are told to use for --internal-addr (default: the bound address).
    #[arg(long, env = "OXBOW_ADVERTISED_INTERNAL_ADDR")]
    pub advertised_internal_addr: Option<String>,
    /// File holding the cluster's internal-port secret: brokers prove it to each other
    /// (mutual HMAC-SHA256 challenge–response) before any WAL copy, trim or tail crosses
    /// --internal-addr. First line: the secret (at least 32 bytes, e.g. `openssl rand -hex
    /// 32`); an optional second line: one more secret to accept while rotating. Unset: the
    /// internal port serves whoever reaches it. Every broker of a cluster needs it: a broker
    /// with it and one without refuse each other.
    #[arg(long, env = "OXBOW_INTERNAL_AUTH_SECRET_FILE")]
    pub internal_auth_secret_file: Option<PathBuf>,
    /// Copies of the WAL, this broker's included, each in a different zone (capped by the
    /// zones with live brokers). More copies survive more zone losses; each copy costs a
    /// cross-zone transfer of every produced byte and a replica's disk.
    #[arg(long, env = "OXBOW_WAL_REPLICATION_FACTOR", default_value_t = 3,
          value_parser = clap::value_parser!(u16).range(1..=16))]
    pub wal_replication_factor: u16,
    /// A WAL replica that has not acknowledged for this long leaves the in-sync set (so
    /// acks=all stops waiting for it). Shorter bounds the produce stall when a zone goes
    /// away; longer tolerates slower replicas without shrinking durability.
    #[arg(long, env = "OXBOW_REPLICA_LAG_MAX", default_value = "3s", value_parser = humantime::parse_duration)]
    pub replica_lag_max: Duration,
    /// `wal`: acknowledge after the WAL fsync (and replica acks for acks=all); low latency.
    /// `direct`: no WAL, acknowledge after the object PUT and catalog commit (WarpStream
    /// style); nothing on the broker's disk, latency of a flush interval plus a PUT.
    #[arg(long, env = "OXBOW_DURABILITY", value_enum, default_value_t = Durability::Wal)]
    pub durability: Durability,
    /// Most concurrent Kafka connections; past it, new ones wait in the kernel's accept
    /// backlog until one closes. Each costs a file descriptor and a few KiB.
    #[arg(long, env = "OXBOW_CONNECTIONS_MAX", default_value_t = kafka::CONNECTIONS_MAX,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub connections_max: u32,
    /// Kafka's `connections.max.idle.ms`: close a Kafka connection with no request in
    /// flight for this long (a long-poll fetch or an acks=all wait is not idle). Shorter
    /// frees descriptors of abandoned clients sooner; clients reconnect transparently.
    #[arg(long, env = "OXBOW_CONNECTIONS_MAX_IDLE", default_value = "10m", value_parser = humantime::parse_duration)]
    pub connections_max_idle: Duration,
    /// A Kafka request frame must arrive whole this long after its first byte (a client
    /// that sends a length and stalls is cut off). Must cover a --max-request-bytes frame
    /// on the slowest link served. A TLS handshake must finish within it too (at most 10 s).
    #[arg(long, env = "OXBOW_REQUEST_READ_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub request_read_timeout: Duration,
    /// Most concurrent HTTP connections; past it, new ones wait in the accept backlog.
    #[arg(long, env = "OXBOW_HTTP_CONNECTIONS_MAX", default_value_t = http::listener::CONNECTIONS_MAX,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub http_connections_max: u32,
    /// An HTTP request's head (request line and headers) must arrive within this long of
    /// its first byte, or of accept (slow-loris bound).
    #[arg(long, env = "OXBOW_HTTP_HEADER_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub http_header_timeout: Duration,
    /// Close an HTTP keep-alive connection with no request for this long. Longer saves
    /// clients a reconnect; shorter frees descriptors sooner.
    #[arg(long, env = "OXBOW_HTTP_IDLE_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub http_idle_timeout: Duration,
    /// An HTTP request body must be read whole within this long of its head (408 past it).
    #[arg(long, env = "OXBOW_HTTP_BODY_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub http_body_timeout: Duration,
    /// After a WAL write or fsync fails (disk full, I/O error), how long the broker stays up,
    /// not ready and answering produces KAFKA_STORAGE_ERROR, before it exits with code 74
    /// for its supervisor to restart it. Longer lets probes and scrapes see why; shorter
    /// hands its partitions to healthy brokers sooner.
    #[arg(long, env = "OXBOW_STORAGE_FAILURE_EXIT_DELAY", default_value = "5s", value_parser = humantime::parse_duration)]
    pub storage_failure_exit_delay: Duration,
    /// How much of the metadata service's revision history to keep (`0s`: never compact;
    /// then run etcd with `--auto-compaction-*`, or its database grows until its quota
    /// stops every write). The controller compacts older revisions; a reader whose watch
    /// falls further behind re-reads instead of resuming. Longer costs etcd space (every
    /// superseded value and deleted key of that long is kept); shorter makes readers that
    /// stall re-read more often.
    #[arg(long, env = "OXBOW_METADATA_HISTORY_RETENTION", default_value = "5m", value_parser = humantime::parse_duration)]
    pub metadata_history_retention: Duration,
    /// How often the controller sweeps the object store for objects no catalog key names
    /// (leaked by a crash between a PUT and its commit, or of deleted topics) and deletes
    /// those older than --orphan-grace (`0s` disables). Each sweep lists a bounded page
    /// (50,000 objects), resuming where the last stopped.
    #[arg(long, env = "OXBOW_ORPHAN_SWEEP_INTERVAL", default_value = "10m", value_parser = humantime::parse_duration)]
    pub orphan_sweep_interval: Duration,
    /// How old an unreferenced object must be before the sweep deletes it. Must stay well
    /// above the time from an object's PUT to its catalog commit (seconds for a seal, at
    /// most 10 minutes for a compaction swap): shorter risks deleting an object a commit
    /// still in flight is about to name.
    #[arg(long, env = "OXBOW_ORPHAN_GRACE", default_value = "1h", value_parser = humantime::parse_duration)]
    pub orphan_grace: Duration,
    /// How long a broker must have been gone — unregistered, leading no partition, and no
    /// partition recovering its tail — before the WAL copies other brokers hold of it are
    /// dropped (checked every minute; `0s` disables). Every partition it led has been taken
    /// over by then, so nothing can ask for its tail.
    #[arg(long, env = "OXBOW_WAL_COPY_GRACE", default_value = "10m", value_parser = humantime::parse_duration)]
    pub wal_copy_grace: Duration,
}

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

/// Where an acknowledged write is durable before it is acknowledged (`--durability`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Durability {
    /// In the broker's WAL (fsynced) and, for acks=all, its in-sync WAL replicas.
    Wal,
    /// In the object store and the catalog; the broker keeps no WAL.
    Direct,
}

/// Reads the cluster id from the data dir, creating it on first start.
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
            },
            flush_interval: args.flush_interval,
            flush_bytes: args.flush_bytes.as_u64(),
            partition_tail_bytes: args.partition_tail_bytes.as_usize(),
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
