//! Mirrored batches, pure (issue 20, ARCHITECTURE decision 34): what a mirror partition does
//! with a record batch fetched from its source cluster. No I/O; `log/mirror.rs` drives it
//! under the partition's order lock.
//!
//! A mirror partition holds the source's batches byte for byte at the source's offsets. A
//! source batch is checked as a hostile input ([`check_source_batch`]: one whole v2 batch,
//! bounded size, CRC-32C, sane counts; control batches allowed, compression untouched) and
//! then planned against the mirror's log end ([`plan`]):
//! - wholly below the log end: already held (a leader that took over resumed from its log
//!   end and re-fetched a little): skipped, so nothing is appended twice;
//! - straddling the log end: the source no longer has the log the mirror copied (its log
//!   was truncated or rewritten): refused, nothing appended;
//! - at the log end: appended as is;
//! - above the log end: the source has a gap (a compacted topic, or a source log start past
//!   an empty mirror): the gap is first covered by an empty batch ([`gap_filler`]: zero
//!   records, `lastOffsetDelta` spanning the gap, no producer), the same thing Kafka's log
//!   cleaner leaves behind, which consumers step over. The mirror's own log stays contiguous,
//!   so everything downstream (WAL replay, tail recovery, high watermark, catalog) keeps its
//!   "batches follow each other" invariant.
//!
//! Only `partitionLeaderEpoch` (outside the CRC'd range) is rewritten, to the destination
//! leader's epoch: consumers send it back in OffsetForLeaderEpoch, which the destination
//! answers from its own epoch history; a source epoch there would be meaningless (or ahead).

use crate::batch::{self, BatchHeader, BATCH_HEADER_BYTES, BATCH_LOG_OVERHEAD};
use crate::error::{Error, Result};
use oxbow_metadata::Offset;

/// Most empty batches one gap may take ([`gap_filler`]): about 8.8 × 10¹² offsets, far
/// past any real compaction gap or source log start, and 250 KiB of fillers.
pub const GAP_FILLERS_MAX: i64 = 4096;

/// What to do with one checked source batch ([`plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MirrorStep {
    /// Already held: every offset of the batch is below the log end.
    Skip,
    /// Append it at its own base offset, which is the log end.
    Append,
    /// First cover `from..=to` with an empty batch, then append (`to + 1` is its base).
    FillThenAppend { from: Offset, to: Offset },
}

/// Checks a batch fetched from a source cluster before anything else looks at it: exactly
/// one whole RecordBatch v2 of at most `max_bytes`, a correct CRC-32C, a non-negative base
/// offset, `0 <= recordCount <= lastOffsetDelta + 1` (a compacted batch holds fewer records
/// than its offset span; an empty one none), and a last offset that does not overflow.
pub fn check_source_batch(buf: &[u8], max_bytes: usize) -> Result<BatchHeader> {
    let h = batch::peek_header(buf)?.ok_or_else(|| {
        Error::CorruptBatch(format!(
            "{} bytes from the source do not hold a whole record batch",
            buf.len()
        ))
    })?;
    if h.size != buf.len() {
        return Err(Error::CorruptBatch(format!(
            "expected one source batch of {} bytes, got {} bytes",
            h.size,
            buf.len()
        )));
    }
    if h.size > max_bytes {
        return Err(Error::BatchTooLarge {
            size: h.size,
            max: max_bytes,
        });
    }
    if !batch::crc_matches(buf) {
        return Err(Error::CorruptBatch(format!(
            "source batch at offset {} fails its CRC-32C",
            h.base_offset
        )));
    }
    if h.base_offset < 0
        || h.last_offset_delta < 0
        || h.record_count < 0
        || i64::from(h.record_count) > i64::from(h.last_offset_delta) + 1
        || h.base_offset
            .checked_add(i64::from(h.last_offset_delta))
            .is_none()
    {
        return Err(Error::CorruptBatch(format!(
            "source batch at offset {} has inconsistent counts (lastOffsetDelta {}, {} records)",
            h.base_offset, h.last_offset_delta, h.record_count
        )));
    }
    Ok(h)
}

/// Where a checked source batch goes against a mirror log ending at `log_end`.
pub fn plan(log_end: Offset, h: &BatchHeader) -> Result<MirrorStep> {
    if h.last_offset() < log_end {
        return Ok(MirrorStep::Skip);
    }
    if h.base_offset < log_end {
        return Err(Error::InvalidRecord(format!(
            "source batch {}..={} straddles the mirror's log end {log_end}: the source log \
             no longer matches what was mirrored",
            h.base_offset,
            h.last_offset()
        )));
    }
    if h.base_offset == log_end {
        return Ok(MirrorStep::Append);
    }
    // Each filler spans at most i32::MAX offsets; a hostile source's batch at a huge base
    // offset must not make the broker build (and log) billions of them.
    let fillers = (h.base_offset - log_end) / (i64::from(i32::MAX) - 1) + 1;
    if fillers > GAP_FILLERS_MAX {
        return Err(Error::InvalidRecord(format!(
            "source batch at offset {} leaves a gap of {} offsets after the mirror's log end \
             {log_end}: more than {GAP_FILLERS_MAX} empty batches would cover it",
            h.base_offset,
            h.base_offset - log_end
        )));
    }
    Ok(MirrorStep::FillThenAppend {
        from: log_end,
        to: h.base_offset - 1,
    })
}

/// Empty batches covering `from..=to` (each spans at most `i32::MAX` offsets, the most one
/// `lastOffsetDelta` can), in offset order. Zero records, no producer, timestamps -1, so
/// they carry no data, no producer state and never match a timestamp lookup.
pub fn gap_filler(from: Offset, to: Offset) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut base = from;
    while base <= to {
        let span = (to - base).min(i64::from(i32::MAX) - 1);
        out.push(empty_batch(base, span as i32));
        base += span + 1;
    }
    out
}

fn empty_batch(base_offset: Offset, last_offset_delta: i32) -> Vec<u8> {
    let mut b = Vec::with_capacity(BATCH_HEADER_BYTES);
    b.extend_from_slice(&base_offset.to_be_bytes());
    b.extend_from_slice(&((BATCH_HEADER_BYTES - BATCH_LOG_OVERHEAD) as i32).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes()); // partitionLeaderEpoch, stamped on append
    b.push(2); // magic
    b.extend_from_slice(&0u32.to_be_bytes()); // crc, below
    b.extend_from_slice(&0i16.to_be_bytes()); // attributes: CreateTime, no compression
    b.extend_from_slice(&last_offset_delta.to_be_bytes());
    b.extend_from_slice(&(-1i64).to_be_bytes()); // baseTimestamp
    b.extend_from_slice(&(-1i64).to_be_bytes()); // maxTimestamp
    b.extend_from_slice(&(-1i64).to_be_bytes()); // producerId
    b.extend_from_slice(&(-1i16).to_be_bytes()); // producerEpoch
    b.extend_from_slice(&(-1i32).to_be_bytes()); // baseSequence
    b.extend_from_slice(&0i32.to_be_bytes()); // recordCount
    batch::set_crc(&mut b);
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{make_batch, make_idempotent_batch};

    fn at(mut b: Vec<u8>, base: Offset) -> Vec<u8> {
        b[0..8].copy_from_slice(&base.to_be_bytes());
        b
    }

    #[test]
    fn a_good_batch_passes_and_keeps_its_header() {
        let b = at(make_idempotent_batch(3, 1_000, 7, 2, 10), 40);
        let h = check_source_batch(&b, 1 << 20).expect("valid");
        assert_eq!((h.base_offset, h.last_offset(), h.producer_id), (40, 42, 7));
    }

    #[test]
    fn a_flipped_byte_fails_the_crc() {
        let mut b = make_batch(3, 1_000);
        let last = b.len() - 1;
        b[last] ^= 0x01;
        let e = check_source_batch(&b, 1 << 20).expect_err("corrupt");
        assert!(e.to_string().contains("CRC"), "{e}");
    }

    #[test]
    fn lengths_and_counts_are_bounded() {
        let b = make_batch(3, 1_000);
        assert!(matches!(
            check_source_batch(&b, 10),
            Err(Error::BatchTooLarge { .. })
        ));
        // Two batches back to back are not one batch; a truncated one is not whole.
        let two = [b.clone(), b.clone()].concat();
        assert!(check_source_batch(&two, 1 << 20).is_err());
        assert!(check_source_batch(&b[..b.len() - 1], 1 << 20).is_err());
        // More records than offsets.
        let mut lying = make_batch(3, 1_000);
        lying[57..61].copy_from_slice(&9i32.to_be_bytes());
        batch::set_crc(&mut lying);
        assert!(check_source_batch(&lying, 1 << 20).is_err());
        // A negative base offset.
        let mut negative = at(make_batch(1, 1_000), -5);
        batch::set_crc(&mut negative);
        assert!(check_source_batch(&negative, 1 << 20).is_err());
        // A last offset past i64::MAX.
        let mut huge = at(make_batch(2, 1_000), i64::MAX);
        batch::set_crc(&mut huge);
        assert!(check_source_batch(&huge, 1 << 20).is_err());
    }

    #[test]
    fn plan_skips_below_appends_at_fills_above_and_refuses_straddling() {
        let h = |base| {
            batch::peek_header(&at(make_batch(3, 1), base))
                .expect("header")
                .expect("whole")
        };
        assert_eq!(plan(10, &h(4)).expect("plan"), MirrorStep::Skip);
        assert_eq!(plan(10, &h(7)).expect("plan"), MirrorStep::Skip);
        assert!(plan(10, &h(8)).is_err());
        assert_eq!(plan(10, &h(10)).expect("plan"), MirrorStep::Append);
        assert_eq!(
            plan(10, &h(15)).expect("plan"),
            MirrorStep::FillThenAppend { from: 10, to: 14 }
        );
        // A hostile jump (a batch near i64::MAX) is refused, not filled.
        assert!(plan(10, &h(i64::MAX - 10)).is_err());
        let far = 10 + GAP_FILLERS_MAX * (i64::from(i32::MAX) - 1);
        assert!(plan(10, &h(far)).is_err());
        assert!(matches!(
            plan(10, &h(far - i64::from(i32::MAX))),
            Ok(MirrorStep::FillThenAppend { .. })
        ));
    }

    #[test]
    fn fillers_cover_the_gap_exactly_and_are_valid_empty_batches() {
        let fill = gap_filler(10, 14);
        assert_eq!(fill.len(), 1);
        let h = check_source_batch(&fill[0], 1 << 20).expect("valid");
        assert_eq!(
            (h.base_offset, h.last_offset(), h.record_count),
            (10, 14, 0)
        );
        assert_eq!((h.producer_id, h.max_timestamp), (-1, -1));
        // A gap wider than one lastOffsetDelta takes several, back to back.
        let wide = gap_filler(0, 3 * i64::from(i32::MAX));
        let mut next = 0;
        for b in &wide {
            let h = check_source_batch(b, 1 << 20).expect("valid");
            assert_eq!(h.base_offset, next);
            next = h.last_offset() + 1;
        }
        assert_eq!(next, 3 * i64::from(i32::MAX) + 1);
        assert!(gap_filler(5, 4).is_empty());
    }
}
