//! The Oxbow write path: record batches, the broker's WAL with group commit, sealing many
//! partitions' batches into one object in the object store, and reading them back.
//!
//! # Layout
//! - [`batch`]: RecordBatch v2 headers — validate, stamp offsets, never recompress.
//! - [`wal`]: the write-ahead log (group-commit fsync, torn-tail recovery, trimming).
//! - [`partition`]: pure in-memory state of one partition (offsets, watermark, dedup).
//! - [`log`]: [`LogManager`], which drives partitions, the WAL and recovery.
//! - [`seal`]: the sealer task: WAL → object store → catalog → WAL trim.
//! - [`fence`]: coming back after the metadata lease was lost (epoch bump, reopen).
//! - [`object`]: the sealed object format.
//! - [`read`]: reads from memory or from objects through the cache.
//! - [`objects`]: building the object store from a URL.

pub mod batch;
pub mod error;
pub mod fence;
pub mod log;
pub mod object;
pub mod objects;
pub mod partition;
pub mod read;
pub mod seal;
pub mod wal;

pub use error::{Error, ErrorKind, Result};
pub use log::{Acks, Appended, LogManager, LogSettings, Partition, PendingAppend};
pub use read::ReadResult;
pub use seal::run_sealer;
pub use wal::WalSettings;
