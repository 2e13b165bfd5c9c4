//! A small Kafka protocol client used by the CLI and the load generator.
//!
//! It speaks the Kafka wire protocol over tokio TCP using `kafka-protocol`'s generated
//! messages and record-batch codec; nothing here hand-encodes a message. Scope: what the
//! `oxbow` admin and console subcommands and the load generator need (metadata, create,
//! delete and describe topics, produce, fetch, list offsets), not a full consumer-group
//! client.
//!
//! # Layout
//! - [`kafka_client`]: [`Client`], connections per broker, metadata cache, routing to
//!   partition leaders; `admin.rs` and `data.rs` add the operations.
//! - [`connection`]: one TCP connection (TLS over it if asked), ApiVersions handshake,
//!   timeouts.
//! - [`frame`], [`versions`], [`requests`], [`records`], [`metadata`]: sans-I/O pieces
//!   (framing, version negotiation, request builders, record batches, typed metadata).
//! - [`partitioner`]: the Java client's murmur2 key partitioner, shared with the HTTP API.
//! - [`cluster`]: partition reassignment (steering leadership) for `oxbow partitions`.
//! - [`groups`]: consumer-group admin (find coordinator, list, describe, delete groups,
//!   fetch and commit a group's offsets) for `oxbow groups`.
//! - [`scram_users`]: SCRAM credential admin for `oxbow users`.
//! - [`sasl`]: SASL client authentication (SCRAM, PLAIN) of each connection.
//! - `acls.rs`: CreateAcls, DescribeAcls, DeleteAcls for `oxbow acls`.
//! - [`error`]: the [`ClientError`] type.
//!
//! # Example
//! ```no_run
//! # async fn demo() -> Result<(), oxbow_gateway::client::ClientError> {
//! use std::time::Duration;
//! use oxbow_gateway::client::{Client, ProduceOptions, ProduceRecord, EARLIEST_TIMESTAMP};
//!
//! let mut client = Client::connect("127.0.0.1:9092", Duration::from_secs(10)).await?;
//! client.create_topic("orders", 3, 1, &[]).await?;
//! let base = client
//!     .produce("orders", 0, &[ProduceRecord::new(None, "hello")], ProduceOptions::default())
//!     .await?;
//! let start = client.list_offsets("orders", 0, EARLIEST_TIMESTAMP).await?;
//! let fetched = client
//!     .fetch("orders", 0, start, Duration::from_millis(500), 1 << 20)
//!     .await?;
//! # let _ = (base, fetched);
//! # Ok(())
//! # }
//! ```

mod acls;
mod admin;
pub mod cluster;
pub mod connection;
mod data;
pub mod error;
pub mod frame;
pub mod groups;
pub mod kafka_client;
pub mod metadata;
pub mod partitioner;
pub mod records;
pub mod requests;
pub mod sasl;
pub mod scram_users;
pub mod versions;

pub use admin::BROKER_DEFAULT;
pub use data::{
    FetchResult, PartitionFetch, PartitionRawFetch, ProduceOptions, RawFetch, EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
};
pub use error::{ClientError, KafkaCode};
pub use groups::{GroupDescription, GroupListing, GroupMember, GroupOffset};
pub use kafka_client::{parse_bootstrap, Client, ClientOptions};
pub use metadata::{
    BrokerMetadata, ClusterMetadata, ConfigEntry, ConfigSource, PartitionMetadata, TopicMetadata,
};
pub use partitioner::{murmur2, partition_for_key};
pub use records::{parse_compression, Acks, ConsumedRecord, ProduceRecord};

/// Re-exported so callers can match on Kafka error codes.
pub use kafka_protocol::error::ResponseError;
/// Re-exported so callers can pick a codec without depending on `kafka-protocol`.
pub use kafka_protocol::records::Compression;
