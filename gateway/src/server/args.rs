//! The flags of `oxbow serve` ([`ServeArgs`]), each also read from the `OXBOW_*` variable
//! named in its help.

use crate::config::ByteSize;
use crate::security::listeners::ListenerArgs;
use crate::security::tls::TlsArgs;
use crate::{http, kafka};
use oxbow_metadata::MetadataLocation;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Write the WAL with `O_DIRECT` (around the page cache) where the file system allows
    /// it; elsewhere (tmpfs) it is written through the page cache either way. Off costs CPU
    /// at high produce rates (the kernel copies every WAL byte into the page cache, about
    /// a tenth of the broker's CPU at max produce) and leaves dirty pages for writeback.
    #[arg(long, env = "OXBOW_WAL_DIRECT_IO", default_value_t = true, action = clap::ArgAction::Set)]
    pub wal_direct_io: bool,
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
    /// Recent, already uploaded data kept in memory per partition for tail reads. Larger:
    /// consumers further behind the producer still read from memory (a read from the object
    /// store is one to two orders slower, and under fan-out at the maximum produce rate the
    /// groups fall seconds behind: 4 MiB, a sixth of a second of one partition at 150 MiB/s
    /// over six, sent them to the object store; 40 MiB cut their lag 3x, README
    /// Benchmarks), at the cost of memory within --tail-memory-bytes.
    #[arg(long, env = "OXBOW_PARTITION_TAIL_BYTES", default_value = "40MiB")]
    pub partition_tail_bytes: ByteSize,
    /// Most already uploaded data all partitions' memory tails hold together; with more
    /// partitions than it fits at --partition-tail-bytes each, every partition keeps an
    /// equal share (readers of older data go to the read cache).
    #[arg(long, env = "OXBOW_TAIL_MEMORY_BYTES", default_value = "256MiB")]
    pub tail_memory_bytes: ByteSize,
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
    /// Record the latency histograms (`oxbow_request_stage_seconds`, `oxbow_request_seconds`,
    /// `oxbow_fetch_read_seconds`, `oxbow_wal_*_seconds`, `oxbow_replica_wait_seconds`,
    /// `oxbow_seal_*_seconds`, rebalance and controller batch times). `false` saves each
    /// request about ten histogram updates (a mutex and a bucket search each) but the
    /// series stay at zero, so latency dashboards go blank and OxbowProduceLatencyHigh and
    /// OxbowRequestQueueing can never fire. Counters and gauges (and the object store's and
    /// etcd's request histograms, which carry their error counts) are always kept.
    #[arg(long, env = "OXBOW_LATENCY_HISTOGRAMS", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub latency_histograms: bool,
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
    /// Kafka's `queued.max.request.bytes`: request bytes all Kafka connections together
    /// may hold between reading a frame and answering it. Past it, a connection whose
    /// frame finds no room reads nothing more until there is (backpressure, not
    /// errors); so the broker holds at most this plus one --max-request-bytes frame per
    /// connection.
    #[arg(long, env = "OXBOW_QUEUED_MAX_REQUEST_BYTES", default_value = "256MiB")]
    pub queued_max_request_bytes: ByteSize,
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

/// Where an acknowledged write is durable before it is acknowledged (`--durability`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Durability {
    /// In the broker's WAL (fsynced) and, for acks=all, its in-sync WAL replicas.
    Wal,
    /// In the object store and the catalog; the broker keeps no WAL.
    Direct,
}
