//! The record batch validation (`segment-writer/src/batch.rs`), compiled from the very same
//! file for the libFuzzer targets, without the WAL, replication and metadata it lives with.

/// The variants `batch.rs` uses, with the same shapes as `segment-writer/src/error.rs`'s (a
/// new one there shows up here as a compile error, to be added).
pub mod error {
    #[derive(Debug, thiserror::Error)]
    pub enum Error {
        #[error("corrupt batch: {0}")]
        CorruptBatch(String),
        #[error("invalid record: {0}")]
        InvalidRecord(String),
        #[error("batch of {size} bytes exceeds {max}")]
        BatchTooLarge { size: usize, max: usize },
    }
    pub type Result<T> = std::result::Result<T, Error>;
}

#[path = "../../../../segment-writer/src/batch.rs"]
pub mod batch;
