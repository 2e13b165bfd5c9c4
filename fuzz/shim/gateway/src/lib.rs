//! The gateway's request decode path (`gateway/src/kafka/{frame,versions}.rs`), compiled
//! from the very same files for the libFuzzer targets, without the rest of the broker.

pub mod kafka;
