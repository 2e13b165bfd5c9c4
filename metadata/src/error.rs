//! Errors of the metadata service.
//!
//! [`Error`] carries the detail; [`ErrorKind`] is the contract that tells the caller what to
//! do. The gateway maps kinds to Kafka error codes and HTTP statuses in one place.

/// What the caller should do about an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Transient: the metadata service is unreachable or busy; retry later.
    Unavailable,
    /// This writer's leader epoch or lease is stale; stop serving the partition.
    Fenced,
    /// A compare-and-swap lost to a concurrent writer; re-read and decide again.
    Conflict,
    /// The named thing does not exist.
    NotFound,
    /// The thing to create exists already.
    AlreadyExists,
    /// The request is invalid; retrying it unchanged cannot succeed.
    Invalid,
    /// Stored data could not be decoded (corrupt or from an unknown version).
    Data,
    /// A bug or an unexpected local failure.
    Internal,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("topic '{0}' already exists")]
    TopicExists(String),
    #[error("topic '{0}' does not exist")]
    UnknownTopic(String),
    #[error("partition {partition} of topic '{topic}' does not exist")]
    UnknownPartition { topic: String, partition: i32 },
    #[error("invalid topic name '{name}': {reason}")]
    InvalidTopicName { name: String, reason: String },
    #[error("invalid config {key}={value}: {reason}")]
    InvalidConfig {
        key: String,
        value: String,
        reason: String,
    },
    #[error("invalid partition count {count}: {reason}")]
    InvalidPartitions { count: i32, reason: String },
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error(
        "fenced: partition {topic_partition} is at leader epoch {current}, writer holds {held}"
    )]
    Fenced {
        topic_partition: String,
        current: i32,
        held: i32,
    },
    #[error("lease {0:x} expired or unknown; register again")]
    LeaseExpired(i64),
    #[error("group '{0}' does not exist")]
    UnknownGroup(String),
    #[error("transactional id '{0}' has no record")]
    UnknownTransactionalId(String),
    #[error("producer {producer_id} is at epoch {current}, the request holds {held}")]
    ProducerFenced {
        producer_id: i64,
        current: i16,
        held: i16,
    },
    #[error("broker {0} has no WAL replica set")]
    UnknownWalReplicaSet(crate::types::BrokerId),
    #[error("concurrent update of {0}; re-read and retry")]
    Conflict(String),
    #[error("value under key '{key}' cannot be decoded: {reason}")]
    CorruptValue { key: String, reason: String },
    #[error("metadata storage failed: {0}")]
    Storage(String),
    #[error("metadata unavailable: {0}")]
    Unavailable(String),
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::TopicExists(_) => ErrorKind::AlreadyExists,
            Error::UnknownTopic(_) | Error::UnknownPartition { .. } => ErrorKind::NotFound,
            Error::InvalidTopicName { .. }
            | Error::InvalidConfig { .. }
            | Error::InvalidPartitions { .. }
            | Error::InvalidRequest(_) => ErrorKind::Invalid,
            Error::Fenced { .. } | Error::LeaseExpired(_) | Error::ProducerFenced { .. } => {
                ErrorKind::Fenced
            }
            Error::UnknownGroup(_) | Error::UnknownTransactionalId(_) => ErrorKind::NotFound,
            Error::UnknownWalReplicaSet(_) => ErrorKind::NotFound,
            Error::Conflict(_) => ErrorKind::Conflict,
            Error::CorruptValue { .. } => ErrorKind::Data,
            Error::Storage(_) => ErrorKind::Internal,
            Error::Unavailable(_) => ErrorKind::Unavailable,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
