//! Records as the client sees them, and their RecordBatch v2 encoding/decoding (sans-I/O).
//!
//! Produce: [`encode_batch`] turns [`ProduceRecord`]s into exactly one RecordBatch v2 (magic
//! 2) with `kafka-protocol`'s `RecordBatchEncoder`: relative offsets from 0, no producer id
//! (not idempotent), base sequence -1, optional compression. The broker assigns the real
//! offsets.
//!
//! Fetch: [`decode_fetched`] takes a partition's `records` bytes from a Fetch response. A
//! broker may cut the last batch short at the size limit, so only complete batches are
//! decoded (`RecordBatchDecoder`, decompressing with the bounded
//! `oxbow_segment_writer::decompress`); control records (transaction markers) and
//! records before the fetch offset (a batch is returned whole even if the fetch offset
//! lies inside it) are dropped. The offset to fetch next comes from the batch headers, not
//! the last record, so batches emptied by compaction or holding only control records are
//! still stepped over.

use std::str::FromStr;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
    TimestampType, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
};
use oxbow_segment_writer::decompress::{decompress, Codec, DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES};

/// A record to produce.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProduceRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// Header keys must be unique within a record (kafka-protocol keeps them in a map).
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Create time in milliseconds since the epoch; `None` stamps the time of the
    /// produce call.
    pub timestamp_ms: Option<i64>,
}

impl ProduceRecord {
    /// A record with only a value (and optionally a key).
    pub fn new(key: Option<Bytes>, value: impl Into<Bytes>) -> Self {
        Self {
            key,
            value: Some(value.into()),
            headers: Vec::new(),
            timestamp_ms: None,
        }
    }
}

/// A record read from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    pub offset: i64,
    pub timestamp_ms: i64,
    /// Whether `timestamp_ms` is the producer's create time or the broker's append time.
    pub timestamp_type: TimestampType,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// The data records of one partition's fetch response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecodedRecords {
    /// Data records at or after the fetch offset, in offset order.
    pub records: Vec<ConsumedRecord>,
    /// Where the next fetch should start: one past the last complete batch returned, or
    /// the fetch offset if no complete batch came back.
    pub next_offset: i64,
}

/// Why a record batch could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RecordsError(pub String);

/// Parses a compression codec name as Kafka's `compression.type` spells it.
pub fn parse_compression(name: &str) -> Result<Compression, String> {
    match name.to_ascii_lowercase().as_str() {
        "none" | "uncompressed" => Ok(Compression::None),
        "gzip" => Ok(Compression::Gzip),
        "snappy" => Ok(Compression::Snappy),
        "lz4" => Ok(Compression::Lz4),
        "zstd" => Ok(Compression::Zstd),
        other => Err(format!(
            "unknown compression \"{other}\" (expected none, gzip, snappy, lz4 or zstd)"
        )),
    }
}

/// How many replicas must have a produce request before the broker answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// `acks=0`: the broker sends no response at all; fastest, loss goes unnoticed.
    None,
    /// `acks=1`: answered after the leader's local append.
    Leader,
    /// `acks=all` (`-1`): answered once `min.insync.replicas` have it.
    All,
}

impl Acks {
    /// The value of the Produce request's `acks` field.
    pub fn as_i16(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

impl FromStr for Acks {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "all" | "-1" => Ok(Acks::All),
            "1" | "leader" => Ok(Acks::Leader),
            "0" | "none" => Ok(Acks::None),
            other => Err(format!("invalid acks \"{other}\" (expected all, 1 or 0)")),
        }
    }
}

impl std::fmt::Display for Acks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Acks::None => "0",
            Acks::Leader => "1",
            Acks::All => "all",
        })
    }
}

/// Encodes `records` as a single RecordBatch v2. `now_ms` stamps records without a
/// timestamp.
pub fn encode_batch(
    records: &[ProduceRecord],
    compression: Compression,
    now_ms: i64,
) -> Result<Bytes, RecordsError> {
    if records.is_empty() {
        return Err(RecordsError(
            "cannot encode an empty record batch".to_string(),
        ));
    }
    let records = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let offset = i64::try_from(i).map_err(|_| RecordsError("too many records".into()))?;
            let mut headers = kafka_protocol::indexmap::IndexMap::new();
            for (name, value) in &r.headers {
                headers.insert(StrBytes::from_string(name.clone()), value.clone());
            }
            Ok(Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
                producer_id: NO_PRODUCER_ID,
                producer_epoch: NO_PRODUCER_EPOCH,
                timestamp_type: TimestampType::Creation,
                offset,
                // The encoder starts a new batch whenever `offset - sequence` changes, and
                // derives the batch's base sequence from the first record. Keeping
                // `sequence = offset - 1` yields one batch with base sequence -1
                // (NO_SEQUENCE), which is what a non-idempotent producer sends.
                sequence: (offset as i32).wrapping_sub(1),
                timestamp: r.timestamp_ms.unwrap_or(now_ms),
                key: r.key.clone(),
                value: r.value.clone(),
                headers,
            })
        })
        .collect::<Result<Vec<_>, RecordsError>>()?;
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .map_err(|e| RecordsError(format!("cannot encode record batch: {e}")))?;
    Ok(buf.freeze())
}

/// Size of a batch's base offset and length fields (Kafka's `LOG_OVERHEAD`).
const LOG_OVERHEAD: usize = 12;
/// Position of `lastOffsetDelta` inside a v2 batch: base offset (8), length (4),
/// partition leader epoch (4), magic (1), crc (4), attributes (2).
const LAST_OFFSET_DELTA_POS: usize = 23;

/// Decompresses one fetched batch's records with the broker's bounded decompressor (a
/// broker is input like any other: a few KB of zstd must not make the client allocate GBs),
/// within [`DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES`].
fn bounded_decompress(records: &mut Bytes, compression: Compression) -> anyhow::Result<Bytes> {
    let codec = match compression {
        Compression::None => return Ok(records.split_off(0)),
        Compression::Gzip => Codec::Gzip,
        Compression::Snappy => Codec::Snappy,
        Compression::Lz4 => Codec::Lz4,
        Compression::Zstd => Codec::Zstd,
    };
    Ok(decompress(codec, records, DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES)?.into())
}

/// Decodes a fetched partition's record bytes; see the module docs.
pub fn decode_fetched(data: Bytes, fetch_offset: i64) -> Result<DecodedRecords, RecordsError> {
    let mut next_offset = fetch_offset;
    let mut complete = 0usize;
    // Walk batch headers to find the complete prefix and the offset after it.
    while data.len() - complete >= LOG_OVERHEAD {
        let mut header = &data[complete..];
        let base_offset = header.get_i64();
        let batch_len = header.get_i32();
        let batch_len = usize::try_from(batch_len)
            .map_err(|_| RecordsError(format!("negative batch length {batch_len}")))?;
        let end = complete + LOG_OVERHEAD + batch_len;
        if end > data.len() {
            break; // truncated trailing batch: fetched again next time
        }
        if end < complete + LAST_OFFSET_DELTA_POS + 4 {
            return Err(RecordsError(format!(
                "record batch at offset {base_offset} is only {batch_len} bytes long"
            )));
        }
        let last_offset_delta = (&data[complete + LAST_OFFSET_DELTA_POS..]).get_i32();
        next_offset = next_offset.max(base_offset + i64::from(last_offset_delta) + 1);
        complete = end;
    }
    let mut batches = data.slice(..complete);
    let mut sets = Vec::new();
    while batches.has_remaining() {
        let set = RecordBatchDecoder::decode_with_custom_compression(
            &mut batches,
            Some(bounded_decompress),
        )
        .map_err(|e| RecordsError(format!("cannot decode record batch: {e}")))?;
        sets.push(set);
    }
    let records = sets
        .into_iter()
        .flat_map(|set| set.records)
        .filter(|r| !r.control && r.offset >= fetch_offset)
        .map(|r| ConsumedRecord {
            offset: r.offset,
            timestamp_ms: r.timestamp,
            timestamp_type: r.timestamp_type,
            key: r.key,
            value: r.value,
            headers: r
                .headers
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        })
        .collect();
    Ok(DecodedRecords {
        records,
        next_offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::BatchDecodeInfo;

    /// Rewrites the base offset of a single encoded batch, as a broker does on append.
    fn with_base_offset(batch: &Bytes, base_offset: i64) -> Bytes {
        let mut out = BytesMut::from(&batch[..]);
        out[..8].copy_from_slice(&base_offset.to_be_bytes());
        out.freeze()
    }

    fn sample(n: usize) -> Vec<ProduceRecord> {
        (0..n)
            .map(|i| ProduceRecord {
                key: (i % 2 == 0).then(|| Bytes::from(format!("k{i}"))),
                value: Some(Bytes::from(format!("value-{i}"))),
                headers: vec![("h".to_string(), Some(Bytes::from_static(b"v")))],
                timestamp_ms: Some(1_700_000_000_000 + i as i64),
            })
            .collect()
    }

    #[test]
    fn encodes_exactly_one_non_idempotent_batch() {
        let batch = encode_batch(&sample(5), Compression::None, 0).expect("encodes");
        let infos: Vec<BatchDecodeInfo> =
            RecordBatchDecoder::decode_batch_info(&mut batch.clone()).expect("decodes");
        assert_eq!(infos.len(), 1);
        assert_eq!(infos[0].record_count, 5);
        assert_eq!(infos[0].base_sequence, -1);
        assert_eq!(infos[0].producer_id, -1);
        assert_eq!(infos[0].min_offset, 0);
        assert_eq!(infos[0].version, 2);
    }

    #[test]
    fn batch_round_trips_with_and_without_compression() {
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let input = sample(4);
            let batch = encode_batch(&input, compression, 0).expect("encodes");
            let decoded = decode_fetched(with_base_offset(&batch, 100), 100).expect("decodes");
            assert_eq!(decoded.next_offset, 104);
            let offsets: Vec<i64> = decoded.records.iter().map(|r| r.offset).collect();
            assert_eq!(offsets, vec![100, 101, 102, 103]);
            for (got, want) in decoded.records.iter().zip(&input) {
                assert_eq!(got.key, want.key);
                assert_eq!(got.value, want.value);
                assert_eq!(got.headers, want.headers);
                assert_eq!(Some(got.timestamp_ms), want.timestamp_ms);
            }
        }
    }

    /// A batch that decompresses past the budget is an error, not an allocation.
    #[test]
    fn decompression_is_bounded() {
        let bomb = ProduceRecord::new(None, vec![0u8; DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES + 1]);
        let batch = encode_batch(&[bomb], Compression::Zstd, 0).expect("encodes");
        assert!(batch.len() < 64 << 10, "{} bytes", batch.len());
        let err = decode_fetched(batch, 0).expect_err("over budget");
        assert!(err.0.contains("decompresses to more than"), "{err}");
    }

    #[test]
    fn missing_timestamps_use_now() {
        let batch = encode_batch(&[ProduceRecord::new(None, "x")], Compression::None, 1234)
            .expect("encodes");
        let decoded = decode_fetched(batch, 0).expect("decodes");
        assert_eq!(decoded.records[0].timestamp_ms, 1234);
    }

    #[test]
    fn records_before_fetch_offset_and_partial_batches_are_dropped() {
        let first = with_base_offset(
            &encode_batch(&sample(3), Compression::None, 0).expect("ok"),
            10,
        );
        let second = with_base_offset(
            &encode_batch(&sample(2), Compression::None, 0).expect("ok"),
            13,
        );
        let mut data = BytesMut::new();
        data.extend_from_slice(&first);
        data.extend_from_slice(&second[..second.len() - 5]); // cut short by max_bytes
        let decoded = decode_fetched(data.freeze(), 11).expect("decodes");
        let offsets: Vec<i64> = decoded.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![11, 12]);
        assert_eq!(decoded.next_offset, 13);
    }

    #[test]
    fn empty_fetch_keeps_the_offset() {
        let decoded = decode_fetched(Bytes::new(), 42).expect("decodes");
        assert_eq!(
            decoded,
            DecodedRecords {
                records: vec![],
                next_offset: 42
            }
        );
    }

    #[test]
    fn empty_batch_is_refused() {
        assert!(encode_batch(&[], Compression::None, 0).is_err());
    }

    #[test]
    fn parses_acks_and_compression() {
        assert_eq!("all".parse::<Acks>(), Ok(Acks::All));
        assert_eq!("-1".parse::<Acks>(), Ok(Acks::All));
        assert_eq!("1".parse::<Acks>(), Ok(Acks::Leader));
        assert_eq!("0".parse::<Acks>(), Ok(Acks::None));
        assert!("2".parse::<Acks>().is_err());
        assert_eq!(Acks::All.as_i16(), -1);
        assert_eq!(parse_compression("ZSTD"), Ok(Compression::Zstd));
        assert!(parse_compression("brotli").is_err());
    }
}
