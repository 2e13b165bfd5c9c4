//! The code under fuzz, one function per input kind, shared by the bounded run in
//! `cargo test` (`main.rs`) and the on-demand libFuzzer targets (`fuzz/fuzz_targets/`).
//!
//! Each function takes arbitrary bytes and must return without panicking, whatever they
//! hold; the allocation guard installed by the caller turns an over-reservation into a
//! failure too.

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, RequestKind,
};
use kafka_protocol::protocol::Decodable;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use oxbow_gateway::kafka::frame::{self, Request};
use oxbow_gateway::kafka::request_reader::FrameCodec;
use std::io::Read;
use tokio_util::codec::Decoder as _;

/// The frame limit the fuzzed codec enforces (the broker's is `--max-request-bytes`).
pub const FRAME_BYTES_MAX: usize = 1 << 20;
/// The most one fuzzed batch may decompress to. Production bounds decompression by its own
/// budget (issue 11, defect 4); here it only keeps a compression bomb from being mistaken
/// for a decoder fault.
pub const DECOMPRESSED_BYTES_MAX: u64 = 1 << 20;

/// A client's byte stream, exactly as the broker reads it from a socket: split into frames
/// by the broker's codec, then each frame through [`request_frame`]. Returns how many whole
/// frames the stream held.
pub fn request_stream(data: &[u8]) -> usize {
    let mut codec = FrameCodec::new(FRAME_BYTES_MAX);
    let mut src = BytesMut::from(data);
    let mut frames = 0;
    while let Ok(Some(f)) = codec.decode(&mut src) {
        frames += 1;
        request_frame(f.freeze());
    }
    frames
}

/// One frame (without its length prefix) through the broker's decode path: prelude, the
/// supported-version check, header, body; a Produce request's record batches then go
/// through the batch path as the produce handler would, and a JoinGroup's subscriptions
/// or a SyncGroup's assignments through the consumer protocol decoders.
pub fn request_frame(frame: Bytes) {
    let Ok(p) = frame::prelude(&frame) else {
        return;
    };
    let Ok(Request::Decoded { body, .. }) = frame::decode_request(p, frame) else {
        return;
    };
    match body {
        RequestKind::Produce(req) => {
            for topic in &req.topic_data {
                for partition in &topic.partition_data {
                    if let Some(records) = &partition.records {
                        record_batch(records);
                    }
                }
            }
        }
        // The consumer protocol's embedded formats, which the coordinator decodes as
        // `groups/protocol.rs` does (version prefix, then the body at that version).
        RequestKind::JoinGroup(req) => {
            for protocol in &req.protocols {
                embedded::<ConsumerProtocolSubscription>(&protocol.metadata);
            }
        }
        RequestKind::SyncGroup(req) => {
            for assignment in &req.assignments {
                embedded::<ConsumerProtocolAssignment>(&assignment.assignment);
            }
        }
        _ => {}
    }
}

fn embedded<T: Decodable>(data: &Bytes) {
    let mut body = data.clone();
    if body.len() >= 2 {
        let version = body.get_i16();
        let _ = T::decode(&mut body, version.clamp(0, 3));
    }
}

/// One produced record batch: the broker's header validation, then a full decode of its
/// records (decompressed within [`DECOMPRESSED_BYTES_MAX`]).
pub fn record_batch(data: &[u8]) {
    let _ = oxbow_segment_writer::batch::validate_produced(data, FRAME_BYTES_MAX);
    // The produce path's full validation (every record walked, decompressed within the
    // budget), under both timestamp rules and both cleanup policies.
    for (log_append_time, compacted) in [(false, false), (true, true)] {
        let rules = oxbow_segment_writer::validate::ProduceRules {
            max_message_bytes: FRAME_BYTES_MAX,
            log_append_time,
            max_decompressed_batch_bytes: DECOMPRESSED_BYTES_MAX as usize,
            now_ms: 1_700_000_000_000,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: 3_600_000,
            compacted,
        };
        let _ = oxbow_segment_writer::validate::validate_produced(data, &rules);
    }
    let mut buf = Bytes::copy_from_slice(data);
    let _ = RecordBatchDecoder::decode_with_custom_compression(&mut buf, Some(decompress));
}

fn decompress(buf: &mut Bytes, compression: Compression) -> anyhow::Result<Bytes> {
    use kafka_protocol::compression::{Decompressor, Snappy};
    let compressed = std::mem::take(buf);
    let limited = |reader: &mut dyn Read| -> anyhow::Result<Bytes> {
        let mut out = Vec::new();
        reader.take(DECOMPRESSED_BYTES_MAX).read_to_end(&mut out)?;
        Ok(Bytes::from(out))
    };
    match compression {
        Compression::None => Ok(compressed),
        Compression::Gzip => limited(&mut flate2::read::GzDecoder::new(&compressed[..])),
        Compression::Lz4 => limited(&mut lz4::Decoder::new(&compressed[..])?),
        Compression::Zstd => limited(&mut zstd::stream::read::Decoder::new(&compressed[..])?),
        // Snappy sizes its output from its header, which the vendored crate now checks.
        Compression::Snappy => {
            let mut compressed = compressed;
            Snappy::decompress(&mut compressed, |out: &mut Bytes| Ok(out.clone()))
        }
    }
}
