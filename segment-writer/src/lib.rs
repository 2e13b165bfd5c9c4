//! The Oxbow write path: record batches, the broker's WAL with group commit, sealing many
//! partitions' batches into one object in the object store, and reading them back.
//!
//! # Layout
//! - [`batch`]: RecordBatch v2 headers — validate, stamp offsets, never recompress.
//! - [`records`]: the records inside a batch, walked in place; [`decompress`]: the one
//!   bounded decompressor; [`validate`]: Kafka's checks of a producer's batch.
//! - [`wal`]: the write-ahead log (group-commit fsync, torn-tail recovery, trimming), on a
//!   [`wal_disk::WalDisk`] (real files, or the simulation's disk with its failures).
//! - [`commit`]: the commit point (local fsync + in-sync WAL replicas; pure).
//! - [`latency`]: histograms of the write path's stages (WAL queue, write, fsync, replica
//!   wait, seal steps) for `/metrics`.
//! - [`replicate`]: streaming the WAL to replicas in other zones, the in-sync set.
//! - [`replica`], [`replica_store`], [`replica_proto`]: the replica side and the internal
//!   protocol between brokers; [`transport`]: how brokers dial each other (TCP, or the
//!   simulation's network of zones).
//! - [`internal_auth`]: the brokers' mutual authentication on the internal port (a pure
//!   handshake core, and [`internal_auth::InternalAuth`], which runs it on every connection).
//! - [`partition`]: pure in-memory state of one partition (offsets, watermark, dedup).
//! - [`log`]: [`LogManager`], which drives partitions, the WAL and recovery; under `log/`
//!   the [`Partition`] handle, opening a partition, the produce path ([`PendingAppend`])
//!   and the tail recoveries owed before serving (the driver of
//!   [`leadership::recovery_state`]).
//! - [`seal`]: the sealer task: WAL → object store → catalog → WAL trim; [`seal_state`]:
//!   its pure core (what an object holds, what follows from each outcome).
//! - [`leadership`]: everything about leading a partition, each decision a pure core
//!   beside its driver: [`Leadership`], giving partitions up on purpose — the per-partition
//!   append gate and the graceful handoff of a batch to other brokers (decision 15; core
//!   [`leadership::handoff_state`]); lease fencing, coming back after the metadata lease
//!   was lost ([`leadership::fence`], core [`leadership::fence_state`]); tail recovery from
//!   WAL replicas ([`leadership::recover`]) and the recoveries waiting for a replica to
//!   answer ([`leadership::recovery_state`]). The gateway decides what moves and to whom.
//! - [`txn`]: the partition side of transactions, pure: commit/abort markers, the open
//!   transactions, the last stable offset and the aborted-transaction index (not wired yet).
//! - [`object`]: the sealed object format.
//! - [`segment`]: the per-partition segment format (offset and time index).
//! - [`compact`]: the compactor task: sealed objects → segments → catalog swap → deletion;
//!   [`compact_state`]: its pure planning and deletion ledger; [`key_compact`]: the pure
//!   core of `cleanup.policy=compact` (latest record per key), with [`compress`].
//! - [`read`]: reads from memory or from objects through the cache; [`read_result`]: what
//!   a read returns, its batches joined into slices for a fetch response.
//! - [`mirror`]: a mirror partition's source batches, pure: checked, skipped below the log
//!   end, gaps covered by empty batches (issue 20); `log/mirror.rs` appends them.
//! - [`objects`]: building the object store from a URL ([`local_store`]: the embedded
//!   default's directory, written out a step at a time); [`faulty_store`]: one that fails
//!   as S3 does (the simulation's and tests').

// Tests may wait on the real clock; production code of this crate may not (clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod batch;
pub mod commit;
pub mod compact;
pub mod compact_state;
pub mod compress;
pub mod crc;
pub mod decompress;
mod direct_io;
pub mod error;
pub mod faulty_store;
pub mod internal_auth;
pub mod key_compact;
pub mod latency;
pub mod leadership;
pub mod local_store;
pub mod log;
pub mod metered_store;
pub mod mirror;
pub mod object;
pub mod objects;
pub mod orphans;
pub mod partition;
pub mod producer_state;
pub mod producer_summary;
pub mod read;
pub mod read_ahead;
pub mod read_pieces;
pub mod read_result;
pub mod records;
pub mod replica;
pub mod replica_proto;
pub mod replica_store;
pub mod replicate;
pub mod retention;
pub mod seal;
pub mod seal_state;
pub mod segment;
pub mod transport;
pub mod txn;
pub mod txn_verify;
pub mod validate;
pub mod wal;
pub mod wal_disk;
pub mod wal_entry;

pub use compact::{run_compactor, CompactSettings, Compactor};
pub use error::{Error, ErrorKind, Result};
pub use leadership::handoff_state::{Handoff, Moved};
pub use leadership::{AppendPermit, Leadership};
pub use log::{
    Acks, AppendPolicy, Appended, Durability, LogComponents, LogManager, LogSettings, Mirrored,
    Partition, PendingAppend, PRODUCER_EXPIRATION_CHECK, PRODUCER_ID_EXPIRATION_DEFAULT,
};
pub use read::{Isolation, ReadResult, ReadSource};
pub use replica::serve_internal;
pub use replica_store::ReplicaStore;
pub use replicate::{ReplicationSettings, Replicator};
pub use retention::{Retention, RetentionPolicies};
pub use seal::run_sealer;
pub use wal::WalSettings;
