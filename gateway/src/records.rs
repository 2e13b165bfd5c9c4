//! Record-level views of stored batches, for the few places the broker must look inside
//! them (HTTP reads and produces, ListOffsets by timestamp). Decoding (and decompressing) is
//! done by the `kafka-protocol` crate; the Kafka produce and fetch paths never come here.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// A record as the HTTP API sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimpleRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// Decodes the user records of whole batches (control records skipped), at or after
/// `from_offset`.
pub fn decode(batches: &[Bytes], from_offset: i64) -> anyhow::Result<Vec<SimpleRecord>> {
    let mut out = Vec::new();
    for b in batches {
        let mut buf = b.clone();
        let sets = RecordBatchDecoder::decode_all(&mut buf)?;
        for set in sets {
            for r in set.records {
                if r.control || r.offset < from_offset {
                    continue;
                }
                out.push(SimpleRecord {
                    offset: r.offset,
                    timestamp: r.timestamp,
                    key: r.key,
                    value: r.value,
                    headers: r
                        .headers
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                });
            }
        }
    }
    Ok(out)
}

/// Encodes records into one uncompressed RecordBatch v2 (offsets from 0; the log assigns
/// the real ones).
pub fn encode(
    records: &[(Option<Bytes>, Option<Bytes>)],
    timestamp_ms: i64,
) -> anyhow::Result<Bytes> {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch whenever offset − sequence changes; i − 1 keeps
            // one batch with base sequence −1 (no idempotent producer).
            sequence: i as i32 - 1,
            timestamp: timestamp_ms,
            key: key.clone(),
            value: value.clone(),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )?;
    Ok(buf.freeze())
}

/// The first record in `batch` with timestamp ≥ `timestamp` and offset ≥ `min_offset`:
/// (offset, timestamp).
pub fn first_at_or_after(batch: &Bytes, timestamp: i64, min_offset: i64) -> Option<(i64, i64)> {
    let records = decode(std::slice::from_ref(batch), min_offset).ok()?;
    records
        .iter()
        .find(|r| r.timestamp >= timestamp)
        .map(|r| (r.offset, r.timestamp))
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
