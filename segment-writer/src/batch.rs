//! Kafka RecordBatch (magic v2) headers: parse, validate and patch — without decompressing.
//!
//! Batches are stored exactly as the producer sent them (compression untouched). The broker
//! reads only the 61-byte header, checks the CRC-32C over everything after the CRC field, and
//! patches the base offset and partition leader epoch, which lie before the CRC'd range and
//! so leave the producer's CRC valid. `LogAppendTime` rewrites the max timestamp inside the
//! CRC'd range and recomputes the CRC.
//!
//! Layout (big-endian): baseOffset i64 @0, batchLength i32 @8, partitionLeaderEpoch i32 @12,
//! magic i8 @16, crc u32 @17, attributes i16 @21, lastOffsetDelta i32 @23, baseTimestamp i64
//! @27, maxTimestamp i64 @35, producerId i64 @43, producerEpoch i16 @51, baseSequence i32 @53,
//! recordCount i32 @57, records @61.

use crate::error::{Error, Result};
use bytes::{Bytes, BytesMut};

/// Size of the fixed RecordBatch v2 header.
pub const BATCH_HEADER_BYTES: usize = 61;
/// Bytes before `batchLength` counts: baseOffset and batchLength themselves.
pub const BATCH_LOG_OVERHEAD: usize = 12;

const OFFSET_BASE_OFFSET: usize = 0;
const OFFSET_LENGTH: usize = 8;
const OFFSET_LEADER_EPOCH: usize = 12;
const OFFSET_MAGIC: usize = 16;
const OFFSET_CRC: usize = 17;
const OFFSET_ATTRIBUTES: usize = 21;
/// Where the bytes a batch's CRC-32C covers begin (the attributes, to the end).
pub const CRC_START: usize = OFFSET_ATTRIBUTES;
const OFFSET_LAST_OFFSET_DELTA: usize = 23;
const OFFSET_BASE_TIMESTAMP: usize = 27;
const OFFSET_MAX_TIMESTAMP: usize = 35;
const OFFSET_PRODUCER_ID: usize = 43;
const OFFSET_PRODUCER_EPOCH: usize = 51;
const OFFSET_BASE_SEQUENCE: usize = 53;
const OFFSET_RECORD_COUNT: usize = 57;

const ATTR_COMPRESSION_MASK: i16 = 0x07;
const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;
/// KIP-534: the base timestamp holds the batch's delete horizon (set by the log cleaner).
pub const ATTR_DELETE_HORIZON: i16 = 0x40;

/// The header fields of one record batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Whole batch size in bytes, header included.
    pub size: usize,
    pub partition_leader_epoch: i32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl BatchHeader {
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }
    pub fn compression(&self) -> i16 {
        self.attributes & ATTR_COMPRESSION_MASK
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_TIMESTAMP_TYPE != 0
    }
    /// KIP-534's delete horizon, when a cleaning set one: tombstones in the batch may go
    /// once the clock reaches it. It is stored as the base timestamp (record timestamps
    /// stay base + delta, so a stamped batch's deltas were re-encoded against it).
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & ATTR_DELETE_HORIZON != 0).then_some(self.base_timestamp)
    }
    /// Sequence of the last record, wrapping like Kafka's `DefaultRecordBatch`.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return -1;
        }
        let last = i64::from(self.base_sequence) + i64::from(self.last_offset_delta);
        (last % (i64::from(i32::MAX) + 1)) as i32
    }
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// Reads the header of the batch at the start of `buf` without checking its CRC.
/// Returns `None` if `buf` does not hold a whole header and batch.
pub fn peek_header(buf: &[u8]) -> Result<Option<BatchHeader>> {
    if buf.len() < BATCH_HEADER_BYTES {
        return Ok(None);
    }
    let length = i32_at(buf, OFFSET_LENGTH);
    let magic = buf[OFFSET_MAGIC] as i8;
    if magic != 2 {
        return Err(Error::CorruptBatch(format!(
            "record batch magic {magic} is not supported (only v2)"
        )));
    }
    let size = usize::try_from(length)
        .ok()
        .and_then(|l| l.checked_add(BATCH_LOG_OVERHEAD))
        .filter(|s| *s >= BATCH_HEADER_BYTES)
        .ok_or_else(|| Error::CorruptBatch(format!("batch length {length} is invalid")))?;
    if buf.len() < size {
        return Ok(None);
    }
    Ok(Some(BatchHeader {
        base_offset: i64_at(buf, OFFSET_BASE_OFFSET),
        size,
        partition_leader_epoch: i32_at(buf, OFFSET_LEADER_EPOCH),
        attributes: i16_at(buf, OFFSET_ATTRIBUTES),
        last_offset_delta: i32_at(buf, OFFSET_LAST_OFFSET_DELTA),
        base_timestamp: i64_at(buf, OFFSET_BASE_TIMESTAMP),
        max_timestamp: i64_at(buf, OFFSET_MAX_TIMESTAMP),
        producer_id: i64_at(buf, OFFSET_PRODUCER_ID),
        producer_epoch: i16_at(buf, OFFSET_PRODUCER_EPOCH),
        base_sequence: i32_at(buf, OFFSET_BASE_SEQUENCE),
        record_count: i32_at(buf, OFFSET_RECORD_COUNT),
    }))
}

/// Validates a producer's batch: exactly one whole v2 batch, correct CRC, sane counts.
/// `max_bytes` is the topic's `max.message.bytes`.
pub fn validate_produced(buf: &[u8], max_bytes: usize) -> Result<BatchHeader> {
    let header = peek_header(buf)?.ok_or_else(|| {
        Error::CorruptBatch(format!(
            "{} bytes do not hold a whole record batch",
            buf.len()
        ))
    })?;
    if header.size != buf.len() {
        return Err(Error::InvalidRecord(
            "a produce request must carry exactly one record batch per partition".into(),
        ));
    }
    if header.size > max_bytes {
        return Err(Error::BatchTooLarge {
            size: header.size,
            max: max_bytes,
        });
    }
    let stored_crc = u32_at(buf, OFFSET_CRC);
    let computed = crc32c::crc32c(&buf[OFFSET_ATTRIBUTES..]);
    if stored_crc != computed {
        return Err(Error::CorruptBatch(format!(
            "CRC mismatch: batch says {stored_crc:#010x}, content is {computed:#010x}"
        )));
    }
    if header.record_count <= 0 {
        return Err(Error::InvalidRecord(
            "a batch must hold at least one record".into(),
        ));
    }
    if header.last_offset_delta != header.record_count - 1 {
        return Err(Error::InvalidRecord(format!(
            "lastOffsetDelta {} does not match the record count {}",
            header.last_offset_delta, header.record_count
        )));
    }
    if header.is_control() {
        return Err(Error::InvalidRecord(
            "producers may not send control batches".into(),
        ));
    }
    Ok(header)
}

/// Copies a validated batch and stamps the broker's fields: base offset, leader epoch and,
/// for `LogAppendTime` topics, the timestamps (recomputing the CRC those cover).
pub fn stamp(
    buf: &[u8],
    base_offset: i64,
    leader_epoch: i32,
    log_append_time_ms: Option<i64>,
) -> Bytes {
    let mut out = BytesMut::from(buf);
    out[OFFSET_BASE_OFFSET..OFFSET_BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
    out[OFFSET_LEADER_EPOCH..OFFSET_LEADER_EPOCH + 4].copy_from_slice(&leader_epoch.to_be_bytes());
    if let Some(now) = log_append_time_ms {
        let attrs = i16_at(&out, OFFSET_ATTRIBUTES) | ATTR_TIMESTAMP_TYPE;
        out[OFFSET_ATTRIBUTES..OFFSET_ATTRIBUTES + 2].copy_from_slice(&attrs.to_be_bytes());
        out[OFFSET_MAX_TIMESTAMP..OFFSET_MAX_TIMESTAMP + 8].copy_from_slice(&now.to_be_bytes());
        let crc = crc32c::crc32c(&out[OFFSET_ATTRIBUTES..]);
        out[OFFSET_CRC..OFFSET_CRC + 4].copy_from_slice(&crc.to_be_bytes());
    }
    out.freeze()
}

/// A copy of `buf` with its max timestamp set to `max_timestamp` and the CRC recomputed:
/// on `CreateTime` topics Kafka stores the records' real maximum (`LogValidator`), which
/// the time index and ListOffsets by time then trust.
pub fn with_max_timestamp(buf: &[u8], max_timestamp: i64) -> Vec<u8> {
    let mut out = buf.to_vec();
    out[OFFSET_MAX_TIMESTAMP..OFFSET_MAX_TIMESTAMP + 8]
        .copy_from_slice(&max_timestamp.to_be_bytes());
    let crc = crc32c::crc32c(&out[OFFSET_ATTRIBUTES..]);
    out[OFFSET_CRC..OFFSET_CRC + 4].copy_from_slice(&crc.to_be_bytes());
    out
}

/// The CRC-32C a batch says it has (of its bytes from [`CRC_START`] on); 0 for fewer than a
/// header's bytes.
pub fn stored_crc(buf: &[u8]) -> u32 {
    if buf.len() < BATCH_HEADER_BYTES {
        return 0;
    }
    u32_at(buf, OFFSET_CRC)
}

/// Whether the CRC-32C stored in a whole batch matches what it covers (attributes onward).
pub fn crc_matches(buf: &[u8]) -> bool {
    buf.len() >= BATCH_HEADER_BYTES
        && u32_at(buf, OFFSET_CRC) == crc32c::crc32c(&buf[OFFSET_ATTRIBUTES..])
}

/// Recomputes and stores the CRC-32C of a whole batch built or patched in place.
pub fn set_crc(buf: &mut [u8]) {
    if buf.len() < BATCH_HEADER_BYTES {
        return;
    }
    let crc = crc32c::crc32c(&buf[OFFSET_ATTRIBUTES..]);
    buf[OFFSET_CRC..OFFSET_CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Walks the whole batches stored back to back in `buf` (as in a sealed object range).
/// Stops at the first incomplete or malformed header.
pub fn iter_batches(buf: &Bytes) -> impl Iterator<Item = (BatchHeader, Bytes)> + '_ {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        let rest = buf.get(pos..)?;
        let header = peek_header(rest).ok().flatten()?;
        let batch = buf.slice(pos..pos + header.size);
        pos += header.size;
        Some((header, batch))
    })
}

/// Builders of valid batches for tests (here and in other crates' tests).
#[doc(hidden)]
pub mod testing {
    use super::*;

    /// Builds a minimal valid uncompressed batch holding `count` (at most 63) records with
    /// value "x", timestamped `timestamp`, `timestamp + 1`, ….
    pub fn make_batch(count: i32, timestamp: i64) -> Vec<u8> {
        let mut records = Vec::new();
        for i in 0..count {
            // length, attributes, timestampDelta, offsetDelta, keyLen(-1), valueLen(1), 'x',
            // headers(0) as varints (zigzag).
            let body = [0u8, (i as u8) << 1, (i as u8) << 1, 1, 2, b'x', 0];
            records.push((body.len() as u8) << 1);
            records.extend_from_slice(&body);
        }
        let mut b = Vec::new();
        b.extend_from_slice(&0i64.to_be_bytes());
        let length = (BATCH_HEADER_BYTES - BATCH_LOG_OVERHEAD + records.len()) as i32;
        b.extend_from_slice(&length.to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.push(2);
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&0i16.to_be_bytes());
        b.extend_from_slice(&(count - 1).to_be_bytes());
        b.extend_from_slice(&timestamp.to_be_bytes());
        b.extend_from_slice(&(timestamp + i64::from(count - 1)).to_be_bytes());
        b.extend_from_slice(&(-1i64).to_be_bytes());
        b.extend_from_slice(&(-1i16).to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&count.to_be_bytes());
        b.extend_from_slice(&records);
        let crc = crc32c::crc32c(&b[OFFSET_ATTRIBUTES..]);
        b[OFFSET_CRC..OFFSET_CRC + 4].copy_from_slice(&crc.to_be_bytes());
        b
    }

    /// [`make_idempotent_batch`] whose records carry one-byte keys, one record per
    /// `(key, tombstone)` (at most 63 records: every varint stays one byte); a tombstone's
    /// value is null, the others' is `x`.
    pub fn make_keyed_idempotent_batch(
        records: &[(u8, bool)],
        timestamp: i64,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
    ) -> Vec<u8> {
        let count = records.len().min(63) as i32;
        let mut b =
            make_idempotent_batch(count, timestamp, producer_id, producer_epoch, base_sequence);
        b.truncate(BATCH_HEADER_BYTES);
        for (i, &(key, tombstone)) in records.iter().take(63).enumerate() {
            // attributes, timestampDelta, offsetDelta, keyLen(1), key, valueLen (1, or -1
            // for a tombstone) and its value, headers(0), as zigzag varints.
            let mut body = vec![0u8, (i as u8) << 1, (i as u8) << 1, 2, key];
            if tombstone {
                body.push(1);
            } else {
                body.extend_from_slice(&[2, b'x']);
            }
            body.push(0);
            b.push((body.len() as u8) << 1);
            b.extend_from_slice(&body);
        }
        let length = (b.len() - BATCH_LOG_OVERHEAD) as i32;
        b[OFFSET_LENGTH..OFFSET_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
        let crc = crc32c::crc32c(&b[OFFSET_ATTRIBUTES..]);
        b[OFFSET_CRC..OFFSET_CRC + 4].copy_from_slice(&crc.to_be_bytes());
        b
    }

    /// [`make_batch`] from an idempotent producer: id, epoch and first sequence set.
    pub fn make_idempotent_batch(
        count: i32,
        timestamp: i64,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
    ) -> Vec<u8> {
        let mut b = make_batch(count, timestamp);
        // producerId at 43, producerEpoch at 51, baseSequence at 53 (RecordBatch v2).
        b[43..51].copy_from_slice(&producer_id.to_be_bytes());
        b[51..53].copy_from_slice(&producer_epoch.to_be_bytes());
        b[53..57].copy_from_slice(&base_sequence.to_be_bytes());
        let crc = crc32c::crc32c(&b[OFFSET_ATTRIBUTES..]);
        b[OFFSET_CRC..OFFSET_CRC + 4].copy_from_slice(&crc.to_be_bytes());
        b
    }

    /// [`make_idempotent_batch`] of a transaction (attribute bit 4).
    pub fn make_txn_batch(
        count: i32,
        timestamp: i64,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
    ) -> Vec<u8> {
        let mut b =
            make_idempotent_batch(count, timestamp, producer_id, producer_epoch, base_sequence);
        b[OFFSET_ATTRIBUTES..OFFSET_ATTRIBUTES + 2]
            .copy_from_slice(&ATTR_TRANSACTIONAL.to_be_bytes());
        let crc = crc32c::crc32c(&b[OFFSET_ATTRIBUTES..]);
        b[OFFSET_CRC..OFFSET_CRC + 4].copy_from_slice(&crc.to_be_bytes());
        b
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    pub(crate) use testing::make_batch;

    #[test]
    fn valid_batch_passes_and_is_stamped() {
        let b = make_batch(3, 1000);
        let h = validate_produced(&b, 1 << 20).expect("valid");
        assert_eq!(h.record_count, 3);
        assert_eq!(h.max_timestamp, 1002);
        let stamped = stamp(&b, 42, 7, None);
        let h2 = validate_produced(&stamped, 1 << 20).expect("still valid");
        assert_eq!(h2.base_offset, 42);
        assert_eq!(h2.last_offset(), 44);
        assert_eq!(h2.partition_leader_epoch, 7);
        let appended = stamp(&b, 0, 0, Some(5555));
        let h3 = validate_produced(&appended, 1 << 20).expect("crc recomputed");
        assert!(h3.is_log_append_time());
        assert_eq!(h3.max_timestamp, 5555);
    }

    #[test]
    fn flipped_bit_fails_crc() {
        let mut b = make_batch(2, 0);
        let last = b.len() - 1;
        b[last] ^= 0x01;
        let err = validate_produced(&b, 1 << 20).expect_err("crc");
        assert!(matches!(err, Error::CorruptBatch(_)));
    }

    #[test]
    fn bad_shapes_are_rejected() {
        let b = make_batch(2, 0);
        assert!(matches!(
            validate_produced(&b[..b.len() - 1], 1 << 20),
            Err(Error::CorruptBatch(_))
        ));
        assert!(matches!(
            validate_produced(&b, 10),
            Err(Error::BatchTooLarge { .. })
        ));
        let mut two = b.clone();
        two.extend_from_slice(&b);
        assert!(matches!(
            validate_produced(&two, 1 << 20),
            Err(Error::InvalidRecord(_))
        ));
        let mut magic = b.clone();
        magic[OFFSET_MAGIC] = 1;
        assert!(matches!(
            validate_produced(&magic, 1 << 20),
            Err(Error::CorruptBatch(_))
        ));
        let mut neg = b;
        neg[OFFSET_LENGTH..OFFSET_LENGTH + 4].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(validate_produced(&neg, 1 << 20).is_err());
    }

    #[test]
    fn iterates_back_to_back_batches() {
        let a = stamp(&make_batch(2, 0), 0, 0, None);
        let b = stamp(&make_batch(3, 0), 2, 0, None);
        let mut all = BytesMut::new();
        all.extend_from_slice(&a);
        all.extend_from_slice(&b);
        all.extend_from_slice(&[1, 2, 3]); // a torn tail is ignored
        let all = all.freeze();
        let offsets: Vec<_> = iter_batches(&all).map(|(h, _)| h.base_offset).collect();
        assert_eq!(offsets, vec![0, 2]);
    }
}
