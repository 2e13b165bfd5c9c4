//! `gateway/src/kafka/`'s sans-I/O files, and nothing else of it.

#[path = "../../../../../gateway/src/kafka/frame.rs"]
pub mod frame;
#[path = "../../../../../gateway/src/kafka/request_reader.rs"]
pub mod request_reader;
#[path = "../../../../../gateway/src/kafka/versions.rs"]
pub mod versions;
