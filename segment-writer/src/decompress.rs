//! The one bounded decompressor of record batches: every codec Kafka knows (attributes bits
//! 0–2: none, gzip, snappy, lz4, zstd), each stopped as soon as its output would pass a
//! budget.
//!
//! A batch is stored as the producer compressed it; the broker decompresses only to look
//! inside (produce validation, HTTP reads, ListOffsets by time). A few kilobytes of zstd
//! can expand to gigabytes, so no decompression here produces more than `limit` bytes or
//! reserves memory for more: output grows in steps capped at what is left of the budget,
//! and zstd's window (its other allocation) is capped at the budget too. Past the budget
//! the answer is [`Error::DecompressedTooLarge`], never a partial result.
//!
//! Framing, as Kafka's clients write it:
//! - gzip: RFC 1952, members may be concatenated (Java's `GZIPInputStream` accepts that).
//! - snappy: xerial's `SnappyOutputStream` framing (16-byte magic header, then blocks of a
//!   big-endian u32 length and one raw snappy block); raw snappy without the header is
//!   accepted too, as the Java client does.
//! - lz4: the LZ4 frame format (Kafka's `Lz4BlockInputStream` reads standard frames).
//! - zstd: one or more zstd frames, decoded as a stream (never `decode_all`), in one
//!   context per thread reused across batches.

use crate::error::{Error, Result};
use std::cell::RefCell;
use std::io::Read;
use zstd::zstd_safe::{DCtx, DParameter, ResetDirective};

/// The compression codec of a batch (RecordBatch v2 attributes, bits 0–2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    /// The codec of a batch's attributes; ids 5–7 are not codecs (`CORRUPT_MESSAGE`).
    pub fn from_attributes(attributes: i16) -> Result<Codec> {
        match attributes & 0x07 {
            0 => Ok(Codec::None),
            1 => Ok(Codec::Gzip),
            2 => Ok(Codec::Snappy),
            3 => Ok(Codec::Lz4),
            4 => Ok(Codec::Zstd),
            id => Err(Error::CorruptBatch(format!(
                "unknown compression codec id {id} (Kafka knows 0-4)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

/// Default budget for one batch's decompressed records (`--max-decompressed-batch-bytes`):
/// 32 × Kafka's default `message.max.bytes` (1 MiB). See the flag's docs for the trade-off.
pub const DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES: usize = 32 << 20;

/// First output reservation: most batches are small, and a lying input must not buy more.
const FIRST_RESERVATION_BYTES: usize = 64 << 10;

/// Snappy's xerial framing header: magic, version 1, compatible version 1.
const SNAPPY_XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const SNAPPY_XERIAL_HEADER_BYTES: usize = 16;

/// Decompresses `input` (a batch's records section) with `codec`, producing at most
/// `limit` bytes. `Codec::None` copies; callers that only read uncompressed records
/// should borrow them instead (see [`crate::records`]).
pub fn decompress(codec: Codec, input: &[u8], limit: usize) -> Result<Vec<u8>> {
    let corrupt = |e: std::io::Error| {
        Error::CorruptBatch(format!("cannot decompress {} records: {e}", codec.name()))
    };
    match codec {
        Codec::None => {
            if input.len() > limit {
                return Err(Error::DecompressedTooLarge { limit });
            }
            Ok(input.to_vec())
        }
        Codec::Gzip => read_bounded(flate2::read::MultiGzDecoder::new(input), limit, codec),
        Codec::Lz4 => {
            let decoder = lz4::Decoder::new(input).map_err(corrupt)?;
            read_bounded(decoder, limit, codec)
        }
        Codec::Zstd => zstd(input, limit),
        Codec::Snappy => snappy(input, limit),
    }
}

thread_local! {
    /// One zstd decompression context per thread, reused: creating a context and its
    /// window buffer for every batch cost several times the decompression of a 16 KiB
    /// batch.
    static ZSTD_DCTX: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
}

/// A reused zstd context keeps the buffers of the largest window it decoded; one that grew
/// past this (a frame with a window over 8 MiB) is dropped rather than kept per thread.
const ZSTD_DCTX_KEEP_BYTES: usize = 9 << 20;

/// zstd frames as a stream (never `decode_all`), in a reused context.
fn zstd(input: &[u8], limit: usize) -> Result<Vec<u8>> {
    let corrupt =
        |what: &str| Error::CorruptBatch(format!("cannot decompress zstd records: {what}"));
    let reused = ZSTD_DCTX.with(|cell| cell.borrow_mut().take());
    let mut dctx = match reused {
        Some(dctx) => dctx,
        None => DCtx::try_create().ok_or_else(|| corrupt("no memory for a context"))?,
    };
    // A previous batch may have stopped mid-frame (over its budget, corrupt): parameters
    // can only be set between sessions. Resetting only the session cannot fail.
    let _ = dctx.reset(ResetDirective::SessionOnly);
    // The window is the decoder's own allocation, sized by the frame header: a frame may
    // not make it reserve more than the output may hold.
    dctx.set_parameter(DParameter::WindowLogMax(zstd_window_log_max(limit)))
        .map_err(|code| corrupt(zstd::zstd_safe::get_error_name(code)))?;
    let out = read_bounded(
        zstd::stream::read::Decoder::with_context(input, &mut dctx),
        limit,
        Codec::Zstd,
    );
    if dctx.sizeof() <= ZSTD_DCTX_KEEP_BYTES {
        ZSTD_DCTX.with(|cell| *cell.borrow_mut() = Some(dctx));
    }
    out
}

/// The largest zstd window (log2) a frame may ask for: the budget, but at least 8 MiB
/// (log 23, what zstd's levels up to 19 use when streaming, so no real producer's frame is
/// refused under a small budget) and at most 128 MiB (log 27, zstd's default cap). The
/// window is allocated before any output, so this bounds the decoder's own memory.
fn zstd_window_log_max(limit: usize) -> u32 {
    let log = usize::BITS - limit.max(1).saturating_sub(1).leading_zeros();
    log.clamp(23, 27)
}

/// Past this much output, the rest of the budget is reserved at once (see [`grow_to`]).
const RESERVE_ALL_PAST_BYTES: usize = 1 << 20;

/// Makes `out` `new_len` bytes long (zeroed). Up to [`RESERVE_ALL_PAST_BYTES`] it grows as a
/// `Vec` does; past that, capacity for the whole budget (`limit`) is reserved in one move
/// and later growth stays inside it. A buffer that doubles its way to the budget moves
/// several times, and every buffer it leaves behind stays resident in the allocator for a
/// while: the peak was the budget plus all of them (jemalloc: a 32 MiB budget grew the
/// broker's peak RSS by 72 MiB). Reserving does not touch the pages: only what is zeroed
/// and filled becomes resident.
fn grow_to(out: &mut Vec<u8>, new_len: usize, limit: usize) {
    if new_len > out.capacity() && new_len > RESERVE_ALL_PAST_BYTES {
        out.reserve_exact(limit.max(new_len) - out.len());
    }
    out.resize(new_len, 0);
}

/// Reads `r` to its end into a buffer that never grows past `limit` bytes.
fn read_bounded(mut r: impl Read, limit: usize, codec: Codec) -> Result<Vec<u8>> {
    let failed = |e: std::io::Error| {
        Error::CorruptBatch(format!("cannot decompress {} records: {e}", codec.name()))
    };
    let mut out = Vec::new();
    let mut filled = 0usize;
    loop {
        if filled == out.len() {
            if filled >= limit {
                // The budget is full: one more byte means the stream goes on past it.
                let mut probe = [0u8; 1];
                loop {
                    match r.read(&mut probe) {
                        Ok(0) => {
                            out.truncate(filled);
                            return Ok(out);
                        }
                        Ok(_) => return Err(Error::DecompressedTooLarge { limit }),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(failed(e)),
                    }
                }
            }
            // Doubling while small, then a step of the same size at a time (inside the
            // capacity `grow_to` reserved): never past the budget.
            let step = out
                .len()
                .clamp(FIRST_RESERVATION_BYTES, RESERVE_ALL_PAST_BYTES);
            let next = (out.len() + step).min(limit);
            grow_to(&mut out, next, limit);
        }
        match r.read(&mut out[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(failed(e)),
        }
    }
    out.truncate(filled);
    Ok(out)
}

/// Kafka's snappy: xerial blocks, or one raw snappy block if the magic is absent.
fn snappy(input: &[u8], limit: usize) -> Result<Vec<u8>> {
    let corrupt =
        |what: String| Error::CorruptBatch(format!("cannot decompress snappy records: {what}"));
    if !input.starts_with(SNAPPY_XERIAL_MAGIC) {
        let mut out = Vec::new();
        snappy_block(input, limit, &mut out)?;
        return Ok(out);
    }
    let mut rest = input
        .get(SNAPPY_XERIAL_HEADER_BYTES..)
        .ok_or_else(|| corrupt("truncated xerial header".into()))?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (len, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| corrupt("truncated block length".into()))?;
        let len = u32::from_be_bytes(*len) as usize;
        let block = tail
            .get(..len)
            .ok_or_else(|| corrupt(format!("block of {len} bytes, {} left", tail.len())))?;
        snappy_block(block, limit, &mut out)?;
        rest = &tail[len..];
    }
    Ok(out)
}

/// Appends one raw snappy block to `out`, checking its declared length against what is
/// left of the budget before reserving anything.
fn snappy_block(block: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<()> {
    let corrupt =
        |e: snap::Error| Error::CorruptBatch(format!("cannot decompress snappy records: {e}"));
    let len = snap::raw::decompress_len(block).map_err(corrupt)?;
    let start = out.len();
    if len > limit - start {
        return Err(Error::DecompressedTooLarge { limit });
    }
    grow_to(out, start + len, limit);
    let n = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(corrupt)?;
    out.truncate(start + n);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const MIB: usize = 1 << 20;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).expect("gzip");
        e.finish().expect("gzip")
    }
    fn lz4(data: &[u8]) -> Vec<u8> {
        let mut e = lz4::EncoderBuilder::new().build(Vec::new()).expect("lz4");
        e.write_all(data).expect("lz4");
        let (out, r) = e.finish();
        r.expect("lz4");
        out
    }
    fn zstd(data: &[u8]) -> Vec<u8> {
        zstd::stream::encode_all(data, 3).expect("zstd")
    }
    /// xerial framing as the Java client writes it (32 KiB blocks).
    fn snappy_xerial(data: &[u8]) -> Vec<u8> {
        let mut out = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
        for chunk in data.chunks(32 << 10) {
            let block = snap::raw::Encoder::new()
                .compress_vec(chunk)
                .expect("snappy");
            out.extend_from_slice(&(block.len() as u32).to_be_bytes());
            out.extend_from_slice(&block);
        }
        out
    }

    fn compress(codec: Codec, data: &[u8]) -> Vec<u8> {
        match codec {
            Codec::None => data.to_vec(),
            Codec::Gzip => gzip(data),
            Codec::Snappy => snappy_xerial(data),
            Codec::Lz4 => lz4(data),
            Codec::Zstd => zstd(data),
        }
    }

    const ALL: [Codec; 5] = [
        Codec::None,
        Codec::Gzip,
        Codec::Snappy,
        Codec::Lz4,
        Codec::Zstd,
    ];

    #[test]
    fn every_codec_round_trips_within_the_budget() {
        let data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        for codec in ALL {
            let packed = compress(codec, &data);
            assert_eq!(
                decompress(codec, &packed, data.len()).expect("fits"),
                data,
                "{codec:?}"
            );
            assert!(
                matches!(
                    decompress(codec, &packed, data.len() - 1),
                    Err(Error::DecompressedTooLarge { .. })
                ),
                "{codec:?}: one byte over the budget"
            );
            // A batch stopped mid-frame leaves nothing behind in a reused context.
            assert_eq!(
                decompress(codec, &packed, data.len()).expect("again"),
                data,
                "{codec:?}"
            );
        }
        let raw = snap::raw::Encoder::new()
            .compress_vec(&data)
            .expect("snappy");
        assert_eq!(
            decompress(Codec::Snappy, &raw, data.len()).expect("raw"),
            data
        );
    }

    /// Bombs: a small input that expands far past the budget fails cleanly. The zstd and
    /// gzip bombs repeat one frame / member until they would expand to 32 GiB: anything
    /// that decompressed before checking would take this test down.
    #[test]
    fn bombs_stop_at_the_budget() {
        let zeros = vec![0u8; 32 * MIB];
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let bomb = compress(codec, &zeros);
            assert!(bomb.len() < 4 * MIB, "{codec:?}: {} bytes", bomb.len());
            let err = decompress(codec, &bomb, MIB).expect_err("over budget");
            assert!(
                matches!(err, Error::DecompressedTooLarge { limit } if limit == MIB),
                "{codec:?}: {err}"
            );
        }
        for codec in [Codec::Gzip, Codec::Zstd] {
            let one = compress(codec, &zeros);
            let bomb = one.repeat(1024);
            let err = decompress(codec, &bomb, 8 * MIB).expect_err("over budget");
            assert!(
                matches!(err, Error::DecompressedTooLarge { .. }),
                "{codec:?}: {err}"
            );
        }
        // A snappy block that claims a huge length is refused before any reservation.
        let mut lying = Vec::new();
        let mut n = u64::from(u32::MAX);
        while n >= 0x80 {
            lying.push((n as u8) | 0x80);
            n >>= 7;
        }
        lying.push(n as u8);
        assert!(matches!(
            decompress(Codec::Snappy, &lying, MIB),
            Err(Error::DecompressedTooLarge { .. })
        ));
    }

    #[test]
    fn zstd_window_is_capped_by_the_budget() {
        assert_eq!(zstd_window_log_max(1), 23);
        assert_eq!(zstd_window_log_max(32 * MIB), 25);
        assert_eq!(zstd_window_log_max(32 * MIB + 1), 26);
        assert_eq!(zstd_window_log_max(usize::MAX), 27);
        // A frame compressed with a 64 MiB window (long-distance mode) cannot make a
        // decoder with a 1 MiB budget reserve it.
        let mut e = zstd::stream::write::Encoder::new(Vec::new(), 3).expect("zstd");
        e.window_log(26).expect("window");
        e.long_distance_matching(true).expect("ldm");
        e.write_all(&vec![7u8; 2 * MIB]).expect("zstd");
        let framed = e.finish().expect("zstd");
        assert!(decompress(Codec::Zstd, &framed, MIB).is_err());
    }

    #[test]
    fn garbage_is_corrupt_not_a_crash() {
        let garbage: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            for len in [0, 1, 7, 16, 17, 100, garbage.len()] {
                match decompress(codec, &garbage[..len], MIB) {
                    Err(Error::CorruptBatch(_)) => {}
                    // Garbage that happens to decode (raw snappy of length 0) is fine, as
                    // long as it is bounded.
                    Ok(out) => assert!(out.len() <= MIB),
                    Err(e) => panic!("{codec:?} {len}: {e}"),
                }
            }
        }
        let mut truncated = snappy_xerial(&[1u8; 100]);
        truncated.truncate(truncated.len() - 3);
        assert!(matches!(
            decompress(Codec::Snappy, &truncated, MIB),
            Err(Error::CorruptBatch(_))
        ));
    }

    #[test]
    fn codec_ids() {
        for (id, codec) in ALL.iter().enumerate() {
            assert_eq!(
                Codec::from_attributes(id as i16 | 0x18).expect("known"),
                *codec
            );
        }
        for id in 5..8 {
            assert!(matches!(
                Codec::from_attributes(id),
                Err(Error::CorruptBatch(_))
            ));
        }
    }
}
