//! Record-level views of stored batches, for the few places the broker must look inside
//! them (HTTP reads, consumer polls, ListOffsets by timestamp). The records are walked with
//! the same in-place walker that validated them on produce
//! ([`oxbow_segment_writer::records`]), compressed ones decompressed by the one bounded
//! decompressor within the broker's `--max-decompressed-batch-bytes`; the Kafka produce and
//! fetch paths never come here. Encoding is the client's, over the `kafka-protocol` crate.

use crate::client::records::encode_batch;
use crate::client::{Compression, ConsumedRecord, ProduceRecord};
use bytes::Bytes;
use kafka_protocol::records::TimestampType;
use oxbow_segment_writer::batch::{iter_batches, BatchHeader};
use oxbow_segment_writer::records::{records_section, walk, RecordRef};
use oxbow_segment_writer::Result;
use std::borrow::Cow;

/// Decodes the user records of whole batches (control batches skipped), at or after
/// `from_offset`, materialising no more than `max_bytes` of keys and values (but always the
/// first record, so a reader never gets stuck on a large one). Each compressed batch is
/// decompressed within `max_decompressed_batch_bytes`.
pub fn decode(
    batches: &[Bytes],
    from_offset: i64,
    max_bytes: usize,
    max_decompressed_batch_bytes: usize,
) -> Result<Vec<ConsumedRecord>> {
    let mut out = Vec::new();
    let mut budget = max_bytes;
    for stored in batches {
        for (header, batch) in iter_batches(stored) {
            if header.is_control() || header.last_offset() < from_offset {
                continue;
            }
            let data = section_bytes(&batch, &header, max_decompressed_batch_bytes)?;
            for record in walk(&data, header.record_count) {
                let record = record?;
                let offset = header.base_offset + i64::from(record.offset_delta);
                if offset < from_offset {
                    continue;
                }
                let size = record.key.map_or(0, <[u8]>::len) + record.value.map_or(0, <[u8]>::len);
                if !out.is_empty() && size > budget {
                    return Ok(out);
                }
                budget = budget.saturating_sub(size);
                out.push(consumed(&data, &header, offset, &record));
            }
        }
    }
    Ok(out)
}

/// A batch's records section as `Bytes`: a slice of the stored batch, or the decompressed
/// buffer, so records are slices of it rather than copies.
fn section_bytes(batch: &Bytes, header: &BatchHeader, limit: usize) -> Result<Bytes> {
    Ok(match records_section(batch, header, limit)? {
        Cow::Borrowed(section) => batch.slice_ref(section),
        Cow::Owned(decompressed) => Bytes::from(decompressed),
    })
}

fn timestamp_of(header: &BatchHeader, record: &RecordRef<'_>) -> i64 {
    if header.is_log_append_time() {
        header.max_timestamp
    } else {
        header.base_timestamp.wrapping_add(record.timestamp_delta)
    }
}

fn consumed(data: &Bytes, header: &BatchHeader, offset: i64, r: &RecordRef<'_>) -> ConsumedRecord {
    ConsumedRecord {
        offset,
        timestamp_ms: timestamp_of(header, r),
        timestamp_type: if header.is_log_append_time() {
            TimestampType::LogAppend
        } else {
            TimestampType::Creation
        },
        key: r.key.map(|k| data.slice_ref(k)),
        value: r.value.map(|v| data.slice_ref(v)),
        // Kafka does not require header keys to be UTF-8; show what is there.
        headers: r
            .headers()
            .map(|(k, v)| {
                (
                    String::from_utf8_lossy(k).into_owned(),
                    v.map(|v| data.slice_ref(v)),
                )
            })
            .collect(),
    }
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
/// (offset, timestamp). Walks records without building them.
pub fn first_at_or_after(
    batch: &Bytes,
    timestamp: i64,
    min_offset: i64,
    max_decompressed_batch_bytes: usize,
) -> Result<Option<(i64, i64)>> {
    for (header, batch) in iter_batches(batch) {
        if header.is_control() || header.last_offset() < min_offset {
            continue;
        }
        let data = records_section(&batch, &header, max_decompressed_batch_bytes)?;
        for record in walk(&data, header.record_count) {
            let record = record?;
            let offset = header.base_offset + i64::from(record.offset_delta);
            let ts = timestamp_of(&header, &record);
            if offset >= min_offset && ts >= timestamp {
                return Ok(Some((offset, ts)));
            }
        }
    }
    Ok(None)
}

/// The offset after the last batch of a read, from the RecordBatch v2 header (base offset
/// at 0, last offset delta at 23): where to go on when a read held no user records
/// (transaction markers only).
pub fn batches_end(batches: &[Bytes]) -> Option<i64> {
    let last = batches.last()?;
    if last.len() < 27 {
        return None;
    }
    let base = i64::from_be_bytes(last[0..8].try_into().ok()?);
    let delta = i32::from_be_bytes(last[23..27].try_into().ok()?);
    Some(base + i64::from(delta) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_end_from_header() {
        let mut batch = vec![0u8; 61];
        batch[0..8].copy_from_slice(&40i64.to_be_bytes());
        batch[23..27].copy_from_slice(&2i32.to_be_bytes());
        assert_eq!(batches_end(&[Bytes::from(batch)]), Some(43));
        assert_eq!(batches_end(&[Bytes::from_static(b"short")]), None);
        assert_eq!(batches_end(&[]), None);
    }

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
        let out = decode(std::slice::from_ref(&b), 1, 1 << 20, 1 << 20).expect("decode");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].value.as_deref(), Some(&b"v2"[..]));
        assert_eq!(
            first_at_or_after(&b, 1000, 0, 1 << 20).expect("walks"),
            Some((0, 1234))
        );
        assert_eq!(
            first_at_or_after(&b, 2000, 0, 1 << 20).expect("walks"),
            None
        );
    }

    fn records(n: usize, value_bytes: usize) -> Vec<ProduceRecord> {
        (0..n)
            .map(|i| ProduceRecord {
                key: Some(Bytes::from(format!("k{i}"))),
                value: Some(Bytes::from(vec![b'a' + (i % 26) as u8; value_bytes])),
                headers: vec![("h".to_string(), Some(Bytes::from_static(b"x")))],
                timestamp_ms: Some(1000 + i as i64),
            })
            .collect()
    }

    /// Every codec kafka-protocol writes is read by the walker and the bounded decompressor
    /// (and passes produce validation).
    #[test]
    fn every_codec_decodes_through_the_walker() {
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let b = encode_batch(&records(10, 50), compression, 0).expect("encode");
            let rules = oxbow_segment_writer::validate::ProduceRules {
                max_message_bytes: 1 << 20,
                log_append_time: false,
                max_decompressed_batch_bytes: 1 << 20,
                now_ms: 0,
                timestamp_before_max_ms: i64::MAX,
                timestamp_after_max_ms: i64::MAX,
                compacted: false,
            };
            oxbow_segment_writer::validate::validate_produced(&b, &rules)
                .unwrap_or_else(|e| panic!("{compression:?}: {e}"));
            let out = decode(std::slice::from_ref(&b), 3, 1 << 20, 1 << 20).expect("decode");
            let offsets: Vec<i64> = out.iter().map(|r| r.offset).collect();
            assert_eq!(offsets, (3..10).collect::<Vec<_>>(), "{compression:?}");
            assert_eq!(out[0].key.as_deref(), Some(&b"k3"[..]));
            assert_eq!(
                out[0].headers,
                vec![("h".to_string(), Some(Bytes::from_static(b"x")))]
            );
            assert_eq!(out[0].timestamp_ms, 1003);
            assert_eq!(
                first_at_or_after(&b, 1005, 0, 1 << 20).expect("walks"),
                Some((5, 1005))
            );
        }
    }

    /// A read materialises at most `max_bytes` of keys and values (at least one record),
    /// and a batch that decompresses past the budget is an error, not an allocation.
    #[test]
    fn reads_are_bounded() {
        let b = encode_batch(&records(100, 1000), Compression::Zstd, 0).expect("encode");
        let out = decode(std::slice::from_ref(&b), 0, 2500, 1 << 20).expect("decode");
        assert_eq!(out.len(), 2, "two 1002-byte records fit in 2500 bytes");
        let out = decode(std::slice::from_ref(&b), 0, 1, 1 << 20).expect("decode");
        assert_eq!(out.len(), 1, "the first record always comes back");
        let err = decode(std::slice::from_ref(&b), 0, 1024, 10_000).expect_err("over budget");
        assert!(matches!(
            err,
            oxbow_segment_writer::Error::DecompressedTooLarge { limit: 10_000 }
        ));
        assert!(first_at_or_after(&b, 0, 0, 10_000).is_err());
    }
}
