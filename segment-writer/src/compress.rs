//! Compression of a record batch's records section, for the one place the broker writes
//! records itself: key compaction ([`crate::key_compact`]) re-encodes a batch that lost
//! records in the codec the producer chose, as Kafka's log cleaner does. Everywhere else
//! batches are stored as sent (ARCHITECTURE.md decision 1).
//!
//! Framing is what Kafka's own clients write, and what [`crate::decompress`] reads:
//! - gzip: one RFC 1952 member.
//! - snappy: xerial's `SnappyOutputStream` framing (16-byte header, then blocks of a
//!   big-endian u32 length and one raw snappy block of at most 32 KiB of input).
//! - lz4: an LZ4 frame of independent 64 KiB blocks without checksums, as Kafka's
//!   `Lz4BlockOutputStream` writes (its reader decodes each block on its own).
//! - zstd: one frame at the default level.

use crate::decompress::Codec;
use crate::error::{Error, Result};
use std::io::Write;

/// Input bytes per xerial snappy block (xerial's default block size).
const SNAPPY_BLOCK_BYTES: usize = 32 << 10;
/// Snappy's xerial framing header: magic, version 1, compatible version 1.
const SNAPPY_XERIAL_HEADER: [u8; 16] = *b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
const ZSTD_LEVEL: i32 = 3;

/// Compresses `input` (a records section) with `codec`; `Codec::None` copies.
pub fn compress(codec: Codec, input: &[u8]) -> Result<Vec<u8>> {
    let failed =
        |e: std::io::Error| Error::Internal(format!("compressing {} records: {e}", codec.name()));
    match codec {
        Codec::None => Ok(input.to_vec()),
        Codec::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(
                Vec::with_capacity(input.len() / 2),
                flate2::Compression::default(),
            );
            enc.write_all(input).map_err(failed)?;
            enc.finish().map_err(failed)
        }
        Codec::Snappy => {
            let mut out = Vec::with_capacity(input.len() / 2 + SNAPPY_XERIAL_HEADER.len());
            out.extend_from_slice(&SNAPPY_XERIAL_HEADER);
            let mut enc = snap::raw::Encoder::new();
            for block in input.chunks(SNAPPY_BLOCK_BYTES) {
                let compressed = enc
                    .compress_vec(block)
                    .map_err(|e| Error::Internal(format!("compressing snappy records: {e}")))?;
                let len = u32::try_from(compressed.len())
                    .map_err(|_| Error::Internal("snappy block over 4 GiB".into()))?;
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(&compressed);
            }
            Ok(out)
        }
        Codec::Lz4 => {
            let mut enc = lz4::EncoderBuilder::new()
                .block_size(lz4::BlockSize::Max64KB)
                .block_mode(lz4::BlockMode::Independent)
                .checksum(lz4::ContentChecksum::NoChecksum)
                .build(Vec::with_capacity(input.len() / 2))
                .map_err(failed)?;
            enc.write_all(input).map_err(failed)?;
            let (out, result) = enc.finish();
            result.map_err(failed)?;
            Ok(out)
        }
        Codec::Zstd => zstd::bulk::compress(input, ZSTD_LEVEL).map_err(failed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decompress::decompress;

    #[test]
    fn every_codec_round_trips_through_the_bounded_decompressor() {
        let input: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        for codec in [
            Codec::None,
            Codec::Gzip,
            Codec::Snappy,
            Codec::Lz4,
            Codec::Zstd,
        ] {
            let packed = compress(codec, &input).expect("compresses");
            let back = decompress(codec, &packed, 1 << 20).expect("decompresses");
            assert_eq!(back, input, "{}", codec.name());
            let empty = compress(codec, &[]).expect("compresses nothing");
            assert!(decompress(codec, &empty, 1 << 20)
                .expect("decompresses nothing")
                .is_empty());
        }
    }
}
