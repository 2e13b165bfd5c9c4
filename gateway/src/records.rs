//! Record-level views of stored batches, for the few places the broker must look inside
//! them (HTTP reads and produces, ListOffsets by timestamp). Encoding and decoding (and
//! decompressing) are the client's, over the `kafka-protocol` crate; the Kafka produce and
//! fetch paths never come here.

use crate::client::records::{decode_fetched, encode_batch};
use crate::client::{Compression, ConsumedRecord, ProduceRecord};
use bytes::{Bytes, BytesMut};

/// Decodes the user records of whole batches (control records skipped), at or after
/// `from_offset`.
pub fn decode(batches: &[Bytes], from_offset: i64) -> anyhow::Result<Vec<ConsumedRecord>> {
    let mut data = BytesMut::with_capacity(batches.iter().map(|b| b.len()).sum());
    for b in batches {
        data.extend_from_slice(b);
    }
    Ok(decode_fetched(data.freeze(), from_offset)?.records)
}

/// Encodes (key, value) records into one uncompressed RecordBatch v2 stamped with
/// `timestamp_ms` (offsets from 0; the log assigns the real ones).
pub fn encode(
    records: &[(Option<Bytes>, Option<Bytes>)],
    timestamp_ms: i64,
) -> anyhow::Result<Bytes> {
    let records: Vec<ProduceRecord> = records
        .iter()
        .map(|(key, value)| ProduceRecord {
            key: key.clone(),
            value: value.clone(),
            headers: Vec::new(),
            timestamp_ms: Some(timestamp_ms),
        })
        .collect();
    Ok(encode_batch(&records, Compression::None, timestamp_ms)?)
}

/// The first record in `batch` with timestamp ≥ `timestamp` and offset ≥ `min_offset`:
/// (offset, timestamp).
pub fn first_at_or_after(batch: &Bytes, timestamp: i64, min_offset: i64) -> Option<(i64, i64)> {
    let records = decode(std::slice::from_ref(batch), min_offset).ok()?;
    records
        .iter()
        .find(|r| r.timestamp_ms >= timestamp)
        .map(|r| (r.offset, r.timestamp_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip() {
        let recs = vec![
            (
                Some(Bytes::from_static(b"k")),
                Some(Bytes::from_static(b"v1")),
            ),
            (None, Some(Bytes::from_static(b"v2"))),
        ];
        let b = encode(&recs, 1234).expect("encode");
        let h = oxbow_segment_writer::batch::validate_produced(&b, 1 << 20).expect("valid v2");
        assert_eq!(h.record_count, 2, "one batch for all records");
        assert_eq!(h.base_sequence, -1);
        let out = decode(std::slice::from_ref(&b), 1).expect("decode");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].value.as_deref(), Some(&b"v2"[..]));
        assert_eq!(first_at_or_after(&b, 1000, 0), Some((0, 1234)));
        assert_eq!(first_at_or_after(&b, 2000, 0), None);
    }
}
