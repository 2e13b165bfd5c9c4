//! The metadata service: the one place where everything the cluster must agree on lives.
//!
//! Brokers are stateless; topics, partition leadership and leader epochs, the segment catalog
//! (which offsets of which partition live at which byte range of which object) and broker
//! registrations are kept behind the [`MetadataStore`] trait.
//!
//! # Layout
//! - [`types`]: the shared vocabulary (`TopicId`, `PartitionId`, `Offset`, `LeaderEpoch`, ...).
//! - [`topic`]: topic specs, configs and their validation.
//! - [`catalog`]: segment catalog entries and the epoch-fenced commit.
//! - [`store`]: the [`MetadataStore`] trait every backend implements.
//! - [`embedded`]: the single-node backend on `redb` (the default; durable local file).
//! - [`error`]: the crate's error type and the [`ErrorKind`] callers branch on.
//!
//! The trait is object-safe (`Arc<dyn MetadataStore>`) because the backend is chosen at run
//! time from `--metadata`, and the per-call cost of dynamic dispatch is nothing next to a
//! durable write or an etcd round trip.

pub mod catalog;
pub mod embedded;
pub mod error;
pub mod store;
pub mod topic;
pub mod types;

pub use catalog::{CatalogCommit, CatalogEntry, EpochFence};
pub use embedded::EmbeddedStore;
pub use error::{Error, ErrorKind, Result};
pub use store::{BrokerRegistration, MetadataStore};
pub use topic::{PartitionState, TopicConfigs, TopicMetadata, TopicSpec};
pub use types::{BrokerId, LeaderEpoch, Offset, PartitionId, TopicId, TopicPartition};
