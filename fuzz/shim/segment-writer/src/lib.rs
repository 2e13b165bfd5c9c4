//! The produce-side batch checks (`segment-writer/src/{batch,records,decompress,validate}.rs`),
//! compiled from the very same files for the libFuzzer targets, without the WAL, replication
//! and metadata they live with.

/// The variants those files use, with the same shapes as `segment-writer/src/error.rs`'s (a
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
        #[error("decompresses past {limit} bytes")]
        DecompressedTooLarge { limit: usize },
        #[error("invalid timestamp: {0}")]
        InvalidTimestamp(String),
    }
    pub type Result<T> = std::result::Result<T, Error>;
}

#[path = "../../../../segment-writer/src/batch.rs"]
pub mod batch;
#[path = "../../../../segment-writer/src/decompress.rs"]
pub mod decompress;
#[path = "../../../../segment-writer/src/records.rs"]
pub mod records;
#[path = "../../../../segment-writer/src/validate.rs"]
pub mod validate;
