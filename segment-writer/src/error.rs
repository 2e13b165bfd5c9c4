//! Errors of the write and read paths.
//!
//! [`Error`] carries the detail; [`ErrorKind`] tells the caller what to do, and the gateway
//! maps it to a Kafka error code and an HTTP status in one place.

use oxbow_metadata::ErrorKind as MetadataErrorKind;

/// What the caller should do about an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The batch is malformed or fails its checksum (`CORRUPT_MESSAGE`).
    Corrupt,
    /// The batch is well-formed but not acceptable (`INVALID_RECORD`).
    InvalidRecord,
    /// The batch exceeds `max.message.bytes` (`MESSAGE_TOO_LARGE`).
    TooLarge,
    /// The batch's records decompress past the broker's `--max-decompressed-batch-bytes`.
    DecompressedTooLarge,
    /// A record's timestamp or timestamp type is not acceptable (`INVALID_TIMESTAMP`).
    InvalidTimestamp,
    /// The requested offset is outside the log (`OFFSET_OUT_OF_RANGE`).
    OffsetOutOfRange,
    /// The partition or topic is gone (`UNKNOWN_TOPIC_OR_PARTITION`).
    UnknownPartition,
    /// This broker no longer leads the partition (`NOT_LEADER_OR_FOLLOWER`).
    NotLeader,
    /// An idempotent producer's sequence is out of order (`OUT_OF_ORDER_SEQUENCE_NUMBER`).
    OutOfOrderSequence,
    /// An idempotent producer's epoch is older than the one seen (`INVALID_PRODUCER_EPOCH`).
    ProducerFenced,
    /// A transactional batch outside any verified transaction (KIP-890).
    InvalidTxnState,
    /// Transient: retry (storage busy, WAL budget full, metadata unavailable).
    Retriable,
    /// Fewer in-sync WAL copies than the topic's `min.insync.replicas` (`NOT_ENOUGH_REPLICAS`).
    NotEnoughReplicas,
    /// Written, but the in-sync set shrank below `min.insync.replicas` before the ack
    /// (`NOT_ENOUGH_REPLICAS_AFTER_APPEND`); the producer may retry.
    NotEnoughReplicasAfterAppend,
    /// Written, but whether it will be committed is not known here in time
    /// (`REQUEST_TIMED_OUT`: clients count the write as possibly persisted and retry it
    /// with the same sequence).
    TimedOutAfterAppend,
    /// Stored data failed its checksum on read; it is not served.
    DataCorruption,
    /// The broker is shutting down or its durability is compromised (fsync failed).
    Unavailable,
    /// A bug or unexpected local failure.
    Internal,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("corrupt record batch: {0}")]
    CorruptBatch(String),
    #[error("invalid record batch: {0}")]
    InvalidRecord(String),
    #[error("record batch of {size} bytes exceeds max.message.bytes {max}")]
    BatchTooLarge { size: usize, max: usize },
    #[error(
        "record batch decompresses to more than {limit} bytes (the broker's --max-decompressed-batch-bytes)"
    )]
    DecompressedTooLarge { limit: usize },
    #[error("invalid timestamp: {0}")]
    InvalidTimestamp(String),
    #[error("offset {offset} is out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    #[error("unknown partition {0}")]
    UnknownPartition(String),
    #[error("not the leader of {0}")]
    NotLeader(String),
    /// Led here, but a WAL tail it needs is not recovered yet (a replica is not up); the
    /// recovery is retried in the background.
    #[error("not serving yet: {0}")]
    RecoveryPending(String),
    #[error("this broker's metadata lease expired; it re-registers before serving again")]
    LeaseExpired,
    /// The batch was written, then the lease lapsed and was not renewed in time: another
    /// broker may lead the partition now, so this one cannot say whether it is committed.
    #[error("written, but this broker's metadata lease lapsed before the ack; the outcome is unknown here")]
    LeaseLapsedAfterAppend,
    /// The batch was written but not committed within the wait's bound.
    #[error("offset {last_offset} written but not committed within {waited:?}")]
    NotCommittedInTime {
        last_offset: i64,
        waited: std::time::Duration,
    },
    #[error("out of order sequence for producer {producer_id}: expected {expected}, got {got}")]
    OutOfOrderSequence {
        producer_id: i64,
        expected: i32,
        got: i32,
    },
    #[error("producer {producer_id} epoch {got} is older than {current}")]
    ProducerFenced {
        producer_id: i64,
        current: i16,
        got: i16,
    },
    /// A transactional batch its coordinator did not verify (KIP-890): the partition is
    /// not in the producer's ongoing transaction, or that transaction ended meanwhile.
    #[error("producer {producer_id} has no ongoing transaction that includes this partition")]
    InvalidTxnState { producer_id: i64 },
    #[error("WAL is over its budget of {budget_bytes} bytes; waiting for uploads")]
    WalFull { budget_bytes: u64 },
    #[error(
        "{budget_bytes} bytes await upload (--durability direct); waiting for the object store"
    )]
    UnsealedFull { budget_bytes: u64 },
    #[error("WAL write failed; the broker no longer acknowledges writes: {0}")]
    WalFailed(String),
    #[error("object {key} failed its checksum at bytes {start}..{end}")]
    ChecksumMismatch { key: String, start: u64, end: u64 },
    #[error("object store: {0}")]
    ObjectStore(String),
    /// The object a catalog entry named is gone: compaction replaced the entry and deleted
    /// the object after its grace period. Look the catalog up again.
    #[error("object {0} no longer exists (compacted away); look the catalog up again")]
    ObjectNotFound(String),
    #[error("metadata: {0}")]
    Metadata(#[from] oxbow_metadata::Error),
    #[error("shutting down")]
    ShuttingDown,
    #[error("only {in_sync} in-sync WAL copies, min.insync.replicas is {required}")]
    NotEnoughReplicas { in_sync: usize, required: i32 },
    #[error("written, but only {in_sync} in-sync WAL copies remain (min.insync.replicas {required}); not acknowledged")]
    NotEnoughReplicasAfterAppend { in_sync: usize, required: i32 },
    #[error("replication: {0}")]
    Replication(String),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("internal: {0}")]
    Internal(String),
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::CorruptBatch(_) => ErrorKind::Corrupt,
            Error::InvalidRecord(_) => ErrorKind::InvalidRecord,
            Error::BatchTooLarge { .. } => ErrorKind::TooLarge,
            Error::DecompressedTooLarge { .. } => ErrorKind::DecompressedTooLarge,
            Error::InvalidTimestamp(_) => ErrorKind::InvalidTimestamp,
            Error::OffsetOutOfRange { .. } => ErrorKind::OffsetOutOfRange,
            Error::UnknownPartition(_) => ErrorKind::UnknownPartition,
            // Without a lease the broker may no longer lead anything: the client must look
            // the leader up again, exactly as for a moved partition.
            // A partition waiting for its recovery is offline, as in Kafka: the client looks
            // the leader up again and retries.
            Error::NotLeader(_) | Error::LeaseExpired | Error::RecoveryPending(_) => {
                ErrorKind::NotLeader
            }
            Error::OutOfOrderSequence { .. } => ErrorKind::OutOfOrderSequence,
            Error::ProducerFenced { .. } => ErrorKind::ProducerFenced,
            Error::InvalidTxnState { .. } => ErrorKind::InvalidTxnState,
            Error::WalFull { .. }
            | Error::UnsealedFull { .. }
            | Error::ObjectStore(_)
            | Error::ObjectNotFound(_)
            | Error::Replication(_) => ErrorKind::Retriable,
            Error::NotEnoughReplicas { .. } => ErrorKind::NotEnoughReplicas,
            Error::NotEnoughReplicasAfterAppend { .. } => ErrorKind::NotEnoughReplicasAfterAppend,
            Error::LeaseLapsedAfterAppend | Error::NotCommittedInTime { .. } => {
                ErrorKind::TimedOutAfterAppend
            }
            Error::WalFailed(_) | Error::ShuttingDown => ErrorKind::Unavailable,
            Error::ChecksumMismatch { .. } => ErrorKind::DataCorruption,
            Error::Metadata(e) => match e.kind() {
                MetadataErrorKind::Unavailable | MetadataErrorKind::Conflict => {
                    ErrorKind::Retriable
                }
                MetadataErrorKind::Fenced => ErrorKind::NotLeader,
                MetadataErrorKind::NotFound => ErrorKind::UnknownPartition,
                MetadataErrorKind::Invalid
                | MetadataErrorKind::AlreadyExists
                | MetadataErrorKind::Data
                | MetadataErrorKind::Internal => ErrorKind::Internal,
            },
            Error::Io(_) | Error::Internal(_) => ErrorKind::Internal,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
