//! The one place where errors become Kafka error codes and HTTP statuses.
//!
//! Every lower-layer [`ErrorKind`](oxbow_segment_writer::ErrorKind) is matched exhaustively
//! (no `_ =>` arm), so a new kind forces a decision here. Detail goes in the message; the
//! code is the contract with clients.

use kafka_protocol::error::ResponseError;
use oxbow_metadata::ErrorKind as MetaKind;
use oxbow_segment_writer::ErrorKind as LogKind;

/// An error from handling a client's request.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error(transparent)]
    Metadata(#[from] oxbow_metadata::Error),
    #[error(transparent)]
    Log(#[from] oxbow_segment_writer::Error),
    #[error("topic '{0}' does not exist")]
    UnknownTopic(String),
    #[error("partition {partition} of topic '{topic}' does not exist")]
    UnknownPartition { topic: String, partition: i32 },
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("unsupported compression: {0}")]
    UnsupportedCompression(String),
    /// Produce (or DeleteRecords) to a mirror topic not promoted (issue 20). Kafka's
    /// INVALID_REQUEST, as a linked topic answers: librdkafka and the Java client fail the
    /// batch at once (not retriable) without making the producer fatal, so the
    /// application sees the reason instead of retrying into a topic that stays read-only.
    #[error("{0}")]
    ReadOnlyMirror(String),
    /// Produce to a promoted mirror topic whose partition's mirror task is still stopping
    /// (milliseconds): NOT_LEADER_OR_FOLLOWER, retriable, so clients try again.
    #[error("{0}")]
    MirrorStopping(String),
    #[error("no cluster link named '{0}'")]
    UnknownLink(String),
}

/// A Kafka error code and the HTTP status plus REST Proxy error code for the same failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapped {
    pub kafka: ResponseError,
    pub http_status: u16,
    /// Confluent REST Proxy `error_code` (HTTP status × 100 + detail).
    pub rest_code: u32,
}

const fn mapped(kafka: ResponseError, http_status: u16, rest_code: u32) -> Mapped {
    Mapped {
        kafka,
        http_status,
        rest_code,
    }
}

impl BrokerError {
    /// How this error is reported to Kafka and HTTP clients.
    pub fn mapped(&self) -> Mapped {
        match self {
            BrokerError::Metadata(e) => map_metadata(e),
            BrokerError::Log(e) => map_log(e),
            BrokerError::UnknownTopic(_) => {
                mapped(ResponseError::UnknownTopicOrPartition, 404, 40401)
            }
            BrokerError::UnknownPartition { .. } => {
                mapped(ResponseError::UnknownTopicOrPartition, 404, 40402)
            }
            BrokerError::InvalidRequest(_) => mapped(ResponseError::InvalidRequest, 400, 40000),
            BrokerError::UnsupportedCompression(_) => {
                mapped(ResponseError::UnsupportedCompressionType, 415, 41502)
            }
            BrokerError::ReadOnlyMirror(_) => mapped(ResponseError::InvalidRequest, 422, 42208),
            BrokerError::MirrorStopping(_) => {
                mapped(ResponseError::NotLeaderOrFollower, 503, 50302)
            }
            BrokerError::UnknownLink(_) => mapped(ResponseError::InvalidRequest, 404, 40406),
        }
    }

    /// The Kafka error code.
    pub fn code(&self) -> i16 {
        self.mapped().kafka.code()
    }
}

pub(crate) fn map_metadata(e: &oxbow_metadata::Error) -> Mapped {
    use oxbow_metadata::Error as E;
    match e {
        E::InvalidTopicName { .. } => mapped(ResponseError::InvalidTopicException, 422, 42202),
        E::InvalidConfig { .. } => mapped(ResponseError::InvalidConfig, 422, 42205),
        E::InvalidPartitions { .. } => mapped(ResponseError::InvalidPartitions, 422, 42206),
        E::TopicExists(_) => mapped(ResponseError::TopicAlreadyExists, 409, 40902),
        E::UnknownTopic(_) => mapped(ResponseError::UnknownTopicOrPartition, 404, 40401),
        E::UnknownPartition { .. } => mapped(ResponseError::UnknownTopicOrPartition, 404, 40402),
        E::ProducerFenced { .. } => mapped(ResponseError::InvalidProducerEpoch, 409, 40904),
        _ => match e.kind() {
            MetaKind::Unavailable | MetaKind::Conflict => {
                mapped(ResponseError::RequestTimedOut, 503, 50301)
            }
            MetaKind::Fenced => mapped(ResponseError::NotLeaderOrFollower, 503, 50302),
            MetaKind::NotFound => mapped(ResponseError::UnknownTopicOrPartition, 404, 40401),
            MetaKind::AlreadyExists => mapped(ResponseError::TopicAlreadyExists, 409, 40902),
            MetaKind::Invalid => mapped(ResponseError::InvalidRequest, 422, 42200),
            MetaKind::Data | MetaKind::Internal => {
                mapped(ResponseError::UnknownServerError, 500, 50001)
            }
        },
    }
}

/// What a group coordinator's write (TxnOffsetCommit) answers when the metadata service
/// fails or refuses it: retriable COORDINATOR_NOT_AVAILABLE for a service that is down or
/// busy (the client looks the coordinator up again and retries, as for OffsetCommit), the
/// producer's own errors for a fenced producer epoch or an invalid request.
pub(crate) fn group_write_error(e: &oxbow_metadata::Error) -> ResponseError {
    match e.kind() {
        MetaKind::Unavailable | MetaKind::Conflict => ResponseError::CoordinatorNotAvailable,
        MetaKind::Fenced => ResponseError::InvalidProducerEpoch,
        MetaKind::Invalid => ResponseError::InvalidRequest,
        MetaKind::NotFound | MetaKind::AlreadyExists | MetaKind::Data | MetaKind::Internal => {
            ResponseError::UnknownServerError
        }
    }
}

fn map_log(e: &oxbow_segment_writer::Error) -> Mapped {
    match e.kind() {
        LogKind::Corrupt => mapped(ResponseError::CorruptMessage, 422, 42207),
        LogKind::InvalidRecord => mapped(ResponseError::InvalidRecord, 422, 42208),
        LogKind::TooLarge => mapped(ResponseError::MessageTooLarge, 413, 41301),
        // Produce: a Java producer splits the batch and retries, others report the size.
        // HTTP reads of a stored batch past the budget: the broker's limit, not the client's.
        LogKind::DecompressedTooLarge => mapped(ResponseError::MessageTooLarge, 500, 50003),
        LogKind::InvalidTimestamp => mapped(ResponseError::InvalidTimestamp, 422, 42210),
        LogKind::OffsetOutOfRange => mapped(ResponseError::OffsetOutOfRange, 416, 41601),
        LogKind::UnknownPartition => mapped(ResponseError::UnknownTopicOrPartition, 404, 40402),
        LogKind::NotLeader => mapped(ResponseError::NotLeaderOrFollower, 503, 50302),
        LogKind::OutOfOrderSequence => mapped(ResponseError::OutOfOrderSequenceNumber, 409, 40903),
        LogKind::ProducerFenced => mapped(ResponseError::InvalidProducerEpoch, 409, 40904),
        LogKind::InvalidTxnState => mapped(ResponseError::InvalidTxnState, 409, 40906),
        LogKind::Retriable => mapped(ResponseError::KafkaStorageError, 503, 50303),
        LogKind::NotEnoughReplicas => mapped(ResponseError::NotEnoughReplicas, 503, 50305),
        LogKind::NotEnoughReplicasAfterAppend => {
            mapped(ResponseError::NotEnoughReplicasAfterAppend, 503, 50306)
        }
        LogKind::TimedOutAfterAppend => mapped(ResponseError::RequestTimedOut, 504, 50401),
        LogKind::DataCorruption => mapped(ResponseError::KafkaStorageError, 500, 50002),
        LogKind::Unavailable => mapped(ResponseError::KafkaStorageError, 503, 50304),
        LogKind::Internal => mapped(ResponseError::UnknownServerError, 500, 50001),
    }
}

/// A request refused by the authorizer, by the type of the resource it was refused on
/// (Kafka's `*_AUTHORIZATION_FAILED`; REST Proxy's 403 40301).
pub fn authorization_failed(resource_type: crate::security::acl::ResourceType) -> Mapped {
    use crate::security::acl::ResourceType as R;
    let kafka = match resource_type {
        R::Topic => ResponseError::TopicAuthorizationFailed,
        R::Group => ResponseError::GroupAuthorizationFailed,
        R::Cluster => ResponseError::ClusterAuthorizationFailed,
        R::TransactionalId => ResponseError::TransactionalIdAuthorizationFailed,
        R::DelegationToken => ResponseError::DelegationTokenAuthorizationFailed,
        R::User | R::Unknown | R::Any => ResponseError::ClusterAuthorizationFailed,
    };
    mapped(kafka, 403, 40301)
}

pub type Result<T, E = BrokerError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_kafka() {
        let corrupt = BrokerError::Log(oxbow_segment_writer::Error::CorruptBatch("x".into()));
        assert_eq!(corrupt.code(), 2);
        let large =
            BrokerError::Log(oxbow_segment_writer::Error::BatchTooLarge { size: 2, max: 1 });
        assert_eq!(large.code(), 10);
        assert_eq!(BrokerError::UnknownTopic("t".into()).code(), 3);
        let name = BrokerError::Metadata(oxbow_metadata::Error::InvalidTopicName {
            name: "a/b".into(),
            reason: "r".into(),
        });
        assert_eq!(name.code(), 17);
        assert_eq!(name.mapped().http_status, 422);
        let exists = BrokerError::Metadata(oxbow_metadata::Error::TopicExists("t".into()));
        assert_eq!(exists.code(), 36);
        let isr = BrokerError::Log(oxbow_segment_writer::Error::NotEnoughReplicas {
            in_sync: 1,
            required: 2,
        });
        assert_eq!(isr.code(), 19);
        use oxbow_segment_writer::Error as LogError;
        let bomb = BrokerError::Log(LogError::DecompressedTooLarge { limit: 1 });
        assert_eq!((bomb.code(), bomb.mapped().http_status), (10, 500));
        let fenced = BrokerError::Log(LogError::ProducerFenced {
            producer_id: 1,
            current: 2,
            got: 1,
        });
        assert_eq!(fenced.code(), 47);
        let ts = BrokerError::Log(LogError::InvalidTimestamp("t".into()));
        assert_eq!(ts.code(), 32);
        assert_eq!(BrokerError::UnsupportedCompression("z".into()).code(), 76);
    }
}
