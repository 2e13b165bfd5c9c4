//! Errors returned by the Kafka client.
//!
//! Every variant renders as a one-line message a person can act on: it names the broker
//! address or the topic-partition involved, and Kafka error codes are shown by their
//! protocol name (`UNKNOWN_TOPIC_OR_PARTITION`) as derived from
//! [`kafka_protocol::error::ResponseError`], followed by the broker's own message if it sent
//! one. Callers branch on [`ClientError::is_retriable`] and [`ClientError::kafka_error`],
//! never on the text.

use std::fmt;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::VersionRange;

/// What went wrong while talking to a Kafka-compatible broker.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No TCP connection could be opened to `addr` (a single `host:port` or the whole
    /// bootstrap list when every address failed).
    #[error("cannot reach broker at {addr}: {reason}")]
    Unreachable { addr: String, reason: String },

    /// A network wait exceeded its bound; the connection is dropped afterwards because
    /// the frame stream may be out of step.
    #[error("timed out after {} waiting for broker at {addr} to {what}", humantime::format_duration(*.waited))]
    Timeout {
        addr: String,
        what: &'static str,
        waited: Duration,
    },

    /// The connection broke mid-request (reset, closed by the broker, ...).
    /// (The io error is part of the message, not a `source`, so that the error prints as
    /// one line.)
    #[error("connection to broker at {addr} failed: {error}")]
    Io { addr: String, error: std::io::Error },

    /// The broker sent bytes this client cannot make sense of, or a request could not be
    /// encoded. Indicates a bug on one side, not a transient condition.
    #[error("protocol error with broker at {addr}: {detail}")]
    Protocol { addr: String, detail: String },

    /// The broker and `kafka-protocol` share no version of this API.
    #[error("broker at {addr} does not support {api:?} at any version this client speaks (broker: {}, client: {client})", broker.map_or_else(|| "not offered".to_string(), |r| r.to_string()))]
    UnsupportedApi {
        addr: String,
        api: ApiKey,
        broker: Option<VersionRange>,
        client: VersionRange,
    },

    /// The broker answered with a Kafka error code.
    #[error("{op} failed: {}{}", KafkaCode(*.code), .message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kafka {
        /// What was attempted, e.g. `create topic "orders"`.
        op: String,
        code: ResponseError,
        /// The broker's `error_message`, when the response carries one.
        message: Option<String>,
    },

    /// The topic does not exist (according to the broker's metadata).
    #[error("unknown topic \"{0}\": it does not exist on this cluster")]
    UnknownTopic(String),

    /// The topic exists but has fewer partitions than the one asked for.
    #[error("topic \"{topic}\" has no partition {partition} (it has {count} partitions)")]
    UnknownPartition {
        topic: String,
        partition: i32,
        count: usize,
    },

    /// Metadata shows no live leader for the partition (election in progress, or a topic
    /// that was just created).
    #[error("partition {topic}-{partition} has no leader right now")]
    NoLeader { topic: String, partition: i32 },

    /// The caller passed something unusable (bad bootstrap list, out-of-range value).
    #[error("{0}")]
    Invalid(String),
}

impl ClientError {
    /// The Kafka error code carried by this error, if the broker sent one.
    pub fn kafka_error(&self) -> Option<ResponseError> {
        match self {
            ClientError::Kafka { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether repeating the request after refreshing metadata can succeed **and** the
    /// failed attempt certainly had no effect on the broker.
    ///
    /// Why the second half: produce requests are retried through this check, and this
    /// client has no idempotent producer, so an ambiguous failure (timeout, connection
    /// cut after the request was written, `REQUEST_TIMED_OUT`) must not be retried or
    /// records could be written twice.
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Unreachable { .. } | ClientError::NoLeader { .. } => true,
            ClientError::Kafka { code, .. } => {
                code.is_retriable()
                    && !matches!(
                        code,
                        ResponseError::RequestTimedOut
                            | ResponseError::NetworkException
                            | ResponseError::NotEnoughReplicasAfterAppend
                            | ResponseError::KafkaStorageError
                    )
            }
            ClientError::Timeout { .. }
            | ClientError::Io { .. }
            | ClientError::Protocol { .. }
            | ClientError::UnsupportedApi { .. }
            | ClientError::UnknownTopic(_)
            | ClientError::UnknownPartition { .. }
            | ClientError::Invalid(_) => false,
        }
    }

    /// Whether the connection this error happened on should be thrown away.
    pub(crate) fn breaks_connection(&self) -> bool {
        matches!(
            self,
            ClientError::Timeout { .. } | ClientError::Io { .. } | ClientError::Protocol { .. }
        )
    }

    /// Turns a non-zero Kafka error code into an error; `0` is success.
    pub(crate) fn check(
        code: i16,
        message: Option<&str>,
        op: impl FnOnce() -> String,
    ) -> Result<(), ClientError> {
        match ResponseError::try_from_code(code) {
            None => Ok(()),
            Some(code) => Err(ClientError::Kafka {
                op: op(),
                code,
                message: message.filter(|m| !m.is_empty()).map(str::to_string),
            }),
        }
    }
}

/// Renders a [`ResponseError`] the way Kafka's docs and logs spell it:
/// `UnknownTopicOrPartition` becomes `UNKNOWN_TOPIC_OR_PARTITION`.
pub struct KafkaCode(pub ResponseError);

impl fmt::Display for KafkaCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let ResponseError::Unknown(code) = self.0 {
            return write!(f, "UNKNOWN_ERROR_CODE({code})");
        }
        // `ResponseError`'s Display is the variant name in CamelCase.
        let camel = self.0.to_string();
        let mut out = String::with_capacity(camel.len() + 8);
        for (i, ch) in camel.chars().enumerate() {
            if ch.is_ascii_uppercase() && i > 0 {
                out.push('_');
            }
            out.push(ch.to_ascii_uppercase());
        }
        f.write_str(&out)
    }
}

/// A readable reason for a failed TCP connect: `connection refused` rather than
/// `Connection refused (os error 111)`.
pub(crate) fn connect_reason(err: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match err.kind() {
        ErrorKind::ConnectionRefused => "connection refused".to_string(),
        ErrorKind::TimedOut => "connection timed out".to_string(),
        ErrorKind::AddrNotAvailable => "address not available".to_string(),
        ErrorKind::PermissionDenied => "permission denied".to_string(),
        _ => err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_codes_render_in_screaming_snake_case() {
        assert_eq!(
            KafkaCode(ResponseError::UnknownTopicOrPartition).to_string(),
            "UNKNOWN_TOPIC_OR_PARTITION"
        );
        assert_eq!(
            KafkaCode(ResponseError::TopicAlreadyExists).to_string(),
            "TOPIC_ALREADY_EXISTS"
        );
        assert_eq!(
            KafkaCode(ResponseError::Unknown(999)).to_string(),
            "UNKNOWN_ERROR_CODE(999)"
        );
    }

    #[test]
    fn kafka_error_message_includes_broker_text() {
        let err = ClientError::check(36, Some("Topic 'a' already exists."), || {
            "create topic \"a\"".to_string()
        })
        .expect_err("36 is an error code");
        assert_eq!(
            err.to_string(),
            "create topic \"a\" failed: TOPIC_ALREADY_EXISTS: Topic 'a' already exists."
        );
        assert!(ClientError::check(0, None, String::new).is_ok());
    }

    #[test]
    fn ambiguous_failures_are_not_retriable() {
        let timed_out = ClientError::Kafka {
            op: "produce".into(),
            code: ResponseError::RequestTimedOut,
            message: None,
        };
        assert!(!timed_out.is_retriable());
        let not_leader = ClientError::Kafka {
            op: "produce".into(),
            code: ResponseError::NotLeaderOrFollower,
            message: None,
        };
        assert!(not_leader.is_retriable());
    }

    #[test]
    fn unreachable_names_the_address() {
        let err = ClientError::Unreachable {
            addr: "127.0.0.1:9092".into(),
            reason: connect_reason(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
        };
        assert_eq!(
            err.to_string(),
            "cannot reach broker at 127.0.0.1:9092: connection refused"
        );
    }
}
