//! What a producer's batch must satisfy before it is acknowledged: the checks of Kafka's
//! `LogValidator` (and `ProduceRequest.validateRecords`) for a client append, on the one
//! batch a produce request carries per partition. Pure: bytes in, verdict out.
//!
//! Order and codes follow Kafka (invariants from `LogValidator.validateBatch` /
//! `validateRecord` and `DefaultRecord.readFrom`):
//! 1. header ([`batch::validate_produced`]): one whole v2 batch, size ≤ `max.message.bytes`,
//!    CRC-32C, `recordCount > 0` and `lastOffsetDelta = recordCount - 1`, no control batch;
//! 2. an idempotent batch (producer id ≥ 0) has a base sequence ≥ 0 (`INVALID_RECORD`);
//! 3. a transactional batch comes from an idempotent producer (producer id ≥ 0, checked in
//!    2 for its sequence; `INVALID_RECORD`). Its transaction is tracked by the partition
//!    (`partition.rs`, [`crate::txn`]); that the producer's transactional id may write and
//!    that the coordinator added the partition is the gateway's to check (Produce);
//! 4. timestamps (`INVALID_TIMESTAMP`): on a `CreateTime` topic a record's timestamp lies
//!    within `message.timestamp.before.max.ms` / `after.max.ms` of the broker's clock;
//!    a producer may not claim `LogAppendTime` on a `LogAppendTime` topic;
//! 5. the codec is one of 0–4, and the records decompress within the broker's budget
//!    (`CORRUPT_MESSAGE`);
//! 6. every record decodes, exactly `recordCount` of them, nothing left over
//!    (`INVALID_RECORD`);
//! 7. offset deltas are 0, 1, … in order (`INVALID_RECORD`). Kafka instead rewrites such a
//!    batch (recompressing it); Oxbow stores batches as sent and never recompresses, so it
//!    refuses what it cannot serve with correct offsets. No real client sends them.
//!
//! 8. on a compacted topic every record has a key (`INVALID_RECORD`).
//!
//! Cost: uncompressed records are walked in place (no allocation); compressed ones are
//! decompressed once into one buffer of at most `max_decompressed_batch_bytes`.

use crate::batch::{self, BatchHeader};
use crate::error::{Error, Result};
use crate::records::{records_section, walk};

/// What the topic and the broker allow.
#[derive(Clone, Copy, Debug)]
pub struct ProduceRules {
    /// The topic's `max.message.bytes` (the batch as sent).
    pub max_message_bytes: usize,
    /// The topic's `message.timestamp.type` is `LogAppendTime`.
    pub log_append_time: bool,
    /// The broker's `--max-decompressed-batch-bytes`.
    pub max_decompressed_batch_bytes: usize,
    /// The broker's clock, for the timestamp bounds.
    pub now_ms: i64,
    /// The topic's `message.timestamp.before.max.ms`: how old a `CreateTime` record may be.
    pub timestamp_before_max_ms: i64,
    /// The topic's `message.timestamp.after.max.ms`: how far in the future.
    pub timestamp_after_max_ms: i64,
    /// The topic's `cleanup.policy` includes `compact`: every record needs a key.
    pub compacted: bool,
}

/// Kafka's `RecordBatch.NO_TIMESTAMP`.
const NO_TIMESTAMP: i64 = -1;

impl ProduceRules {
    /// Kafka's `LogValidator.validateTimestamp` for one record's timestamp (`batch_lat`:
    /// the producer set the batch's timestamp type to `LogAppendTime`).
    fn check_timestamp(&self, timestamp: i64, batch_lat: bool, index: i32) -> Result<()> {
        if !self.log_append_time && timestamp != NO_TIMESTAMP {
            let behind = i128::from(self.now_ms) - i128::from(timestamp);
            if behind > i128::from(self.timestamp_before_max_ms)
                || -behind > i128::from(self.timestamp_after_max_ms)
            {
                return Err(Error::InvalidTimestamp(format!(
                    "record {index} has timestamp {timestamp}, outside [{}, {}] \
                     (message.timestamp.before.max.ms / after.max.ms)",
                    self.now_ms.saturating_sub(self.timestamp_before_max_ms),
                    self.now_ms.saturating_add(self.timestamp_after_max_ms)
                )));
            }
        } else if batch_lat {
            return Err(Error::InvalidTimestamp(
                "a producer may not set the timestamp type to LogAppendTime".into(),
            ));
        }
        Ok(())
    }
}

/// A batch that passed, and what the walk learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validated {
    pub header: BatchHeader,
    /// Largest record timestamp (base timestamp + delta); Kafka stores this as the batch's
    /// max timestamp on `CreateTime` topics.
    pub max_timestamp: i64,
}

/// Validates a producer's batch; see the module docs for the rules and their order.
pub fn validate_produced(buf: &[u8], rules: &ProduceRules) -> Result<Validated> {
    let header = batch::validate_produced(buf, rules.max_message_bytes)?;
    if header.producer_id >= 0 && header.base_sequence < 0 {
        return Err(Error::InvalidRecord(format!(
            "invalid base sequence {} in a batch of idempotent producer {}",
            header.base_sequence, header.producer_id
        )));
    }
    if header.is_transactional() && header.producer_id < 0 {
        return Err(Error::InvalidRecord(format!(
            "transactional batch without a producer id (producer id {})",
            header.producer_id
        )));
    }
    let section = records_section(buf, &header, rules.max_decompressed_batch_bytes)?;
    let mut max_timestamp = i64::MIN;
    for (expected, record) in (0i32..).zip(walk(&section, header.record_count)) {
        let record = record?;
        if record.offset_delta != expected {
            return Err(Error::InvalidRecord(format!(
                "record {expected} has offset delta {}; a batch's records must be numbered 0, 1, … in order",
                record.offset_delta
            )));
        }
        // A LogAppendTime batch's records all read as its max timestamp (Kafka's
        // DefaultRecordBatch), whatever their deltas.
        let timestamp = if header.is_log_append_time() {
            header.max_timestamp
        } else {
            header.base_timestamp.wrapping_add(record.timestamp_delta)
        };
        if rules.compacted && record.key.is_none() {
            return Err(Error::InvalidRecord(format!(
                "record {expected} has no key; a compacted topic cannot accept records without one"
            )));
        }
        rules.check_timestamp(timestamp, header.is_log_append_time(), expected)?;
        max_timestamp = max_timestamp.max(timestamp);
    }
    Ok(Validated {
        header,
        max_timestamp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::make_batch;
    use crate::records::testing::record;
    use std::io::Write;

    const RULES: ProduceRules = ProduceRules {
        max_message_bytes: 1 << 20,
        log_append_time: false,
        max_decompressed_batch_bytes: 1 << 20,
        now_ms: 10_000,
        timestamp_before_max_ms: i64::MAX,
        timestamp_after_max_ms: 3_600_000,
        compacted: false,
    };

    /// A v2 batch around `records` (an encoded records section, compressed with
    /// `codec_id`), with the CRC fixed up.
    fn batch_of(
        records: &[u8],
        count: i32,
        codec_id: i16,
        edit: impl FnOnce(&mut Vec<u8>),
    ) -> Vec<u8> {
        let mut b = make_batch(1, 1000);
        b.truncate(61);
        b.extend_from_slice(records);
        let length = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&length.to_be_bytes());
        b[21..23].copy_from_slice(&codec_id.to_be_bytes());
        b[23..27].copy_from_slice(&(count - 1).to_be_bytes());
        b[57..61].copy_from_slice(&count.to_be_bytes());
        edit(&mut b);
        fix_crc(&mut b);
        b
    }

    fn fix_crc(b: &mut [u8]) {
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
    }

    fn section(count: i32) -> Vec<u8> {
        (0..count)
            .flat_map(|i| {
                record(
                    i64::from(i),
                    i,
                    Some(b"k"),
                    Some(&[b'v'; 100]),
                    &[(b"h", None)],
                )
            })
            .collect()
    }

    fn zstd(data: &[u8]) -> Vec<u8> {
        zstd::stream::encode_all(data, 3).expect("zstd")
    }
    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).expect("gzip");
        e.finish().expect("gzip")
    }

    #[test]
    fn good_batches_pass_uncompressed_and_compressed() {
        let v = validate_produced(&make_batch(3, 1000), &RULES).expect("valid");
        assert_eq!((v.header.record_count, v.max_timestamp), (3, 1002));
        let s = section(5);
        for (codec, packed) in [(0, s.clone()), (1, gzip(&s)), (4, zstd(&s))] {
            let v = validate_produced(&batch_of(&packed, 5, codec, |_| {}), &RULES)
                .unwrap_or_else(|e| panic!("codec {codec}: {e}"));
            assert_eq!(v.max_timestamp, 1004);
        }
    }

    fn invalid(b: &[u8]) -> String {
        match validate_produced(b, &RULES) {
            Err(Error::InvalidRecord(why)) => why,
            other => panic!("expected INVALID_RECORD, got {other:?}"),
        }
    }
    fn corrupt(b: &[u8]) -> String {
        match validate_produced(b, &RULES) {
            Err(Error::CorruptBatch(why)) => why,
            other => panic!("expected CORRUPT_MESSAGE, got {other:?}"),
        }
    }

    /// The 70-byte batch of issue 11: 2^31-1 records claimed, one there.
    #[test]
    fn huge_record_count_is_refused() {
        let b = batch_of(&section(1), i32::MAX, 0, |_| {});
        assert!(invalid(&b).contains("record 1"));
        // lastOffsetDelta consistent with a small count but the count lying.
        let b = batch_of(&section(1), 2, 0, |_| {});
        assert!(invalid(&b).contains("record 1"));
        let b = batch_of(&section(3), 2, 0, |_| {});
        assert!(invalid(&b).contains("remain"));
        // lastOffsetDelta not count - 1.
        let b = batch_of(&section(2), 2, 0, |b| {
            b[23..27].copy_from_slice(&5i32.to_be_bytes())
        });
        assert!(invalid(&b).contains("lastOffsetDelta"));
    }

    #[test]
    fn offset_deltas_must_count_from_zero() {
        let mut s = record(0, 0, None, Some(b"a"), &[]);
        s.extend(record(0, 2, None, Some(b"b"), &[]));
        assert!(invalid(&batch_of(&s, 2, 0, |_| {})).contains("offset delta 2"));
        let s = record(0, 1, None, Some(b"a"), &[]);
        assert!(invalid(&batch_of(&s, 1, 0, |_| {})).contains("offset delta 1"));
    }

    #[test]
    fn bad_varints_inside_records_are_invalid() {
        let b = batch_of(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff], 1, 0, |_| {});
        assert!(invalid(&b).contains("varint"));
        // A header whose value length runs past the record.
        let mut s = record(0, 0, None, Some(b"v"), &[(b"h", Some(b"x"))]);
        let last = s.len() - 2;
        s[last] = 0x20;
        assert!(invalid(&batch_of(&s, 1, 0, |_| {})).contains("past"));
    }

    #[test]
    fn garbage_compressed_payloads_are_corrupt() {
        for codec in 1..=4 {
            let b = batch_of(
                b"this is not compressed at all, not in any codec",
                1,
                codec,
                |_| {},
            );
            assert!(corrupt(&b).contains("decompress"), "codec {codec}");
        }
        // Compressed fine, records inside broken.
        let mut s = section(2);
        s.truncate(s.len() - 3);
        assert!(invalid(&batch_of(&zstd(&s), 2, 4, |_| {})).contains("record 1"));
    }

    #[test]
    fn unknown_codec_is_corrupt() {
        for codec in 5..=7 {
            assert!(corrupt(&batch_of(&section(1), 1, codec, |_| {})).contains("codec id"));
        }
    }

    #[test]
    fn decompression_over_the_budget_is_refused() {
        let s = section(2000); // ~220 KB
        let rules = ProduceRules {
            max_decompressed_batch_bytes: 64 << 10,
            ..RULES
        };
        let b = batch_of(&zstd(&s), 2000, 4, |_| {});
        assert!(matches!(
            validate_produced(&b, &rules),
            Err(Error::DecompressedTooLarge { limit }) if limit == 64 << 10
        ));
        assert!(validate_produced(&b, &RULES).is_ok());
    }

    #[test]
    fn control_batches_are_refused_transactional_ones_need_a_producer() {
        let control = batch_of(&section(1), 1, 0x20, |_| {});
        assert!(invalid(&control).contains("control"));
        // A transactional control batch (a marker): only the coordinator writes those.
        let marker = batch_of(&section(1), 1, 0x30, |b| {
            b[43..51].copy_from_slice(&7i64.to_be_bytes());
        });
        assert!(invalid(&marker).contains("control"));
        let txn = batch_of(&section(1), 1, 0x10, |b| {
            b[43..51].copy_from_slice(&7i64.to_be_bytes());
            b[53..57].copy_from_slice(&0i32.to_be_bytes());
        });
        let v = validate_produced(&txn, &RULES).expect("a transactional batch is accepted");
        assert!(v.header.is_transactional());
        let no_sequence = batch_of(&section(1), 1, 0x10, |b| {
            b[43..51].copy_from_slice(&7i64.to_be_bytes());
        });
        assert!(invalid(&no_sequence).contains("base sequence -1"));
        let no_producer = batch_of(&section(1), 1, 0x10, |b| {
            b[43..51].copy_from_slice(&(-1i64).to_be_bytes());
        });
        assert!(invalid(&no_producer).contains("without a producer id"));
    }

    #[test]
    fn idempotent_batch_needs_a_sequence() {
        let b = batch_of(&section(1), 1, 0, |b| {
            b[43..51].copy_from_slice(&7i64.to_be_bytes());
            b[51..53].copy_from_slice(&0i16.to_be_bytes());
        });
        assert!(invalid(&b).contains("base sequence -1"));
        let ok = batch_of(&section(1), 1, 0, |b| {
            b[43..51].copy_from_slice(&7i64.to_be_bytes());
            b[53..57].copy_from_slice(&0i32.to_be_bytes());
        });
        assert!(validate_produced(&ok, &RULES).is_ok());
    }

    #[test]
    fn producer_log_append_time_on_a_log_append_time_topic() {
        let b = batch_of(&section(1), 1, 0x08, |_| {});
        let lat = ProduceRules {
            log_append_time: true,
            ..RULES
        };
        assert!(matches!(
            validate_produced(&b, &lat),
            Err(Error::InvalidTimestamp(_))
        ));
        assert!(validate_produced(&b, &RULES).is_ok());
    }

    #[test]
    fn timestamps_within_the_topic_bounds() {
        let at = |ts: i64| {
            batch_of(&section(2), 2, 0, |b| {
                b[27..35].copy_from_slice(&ts.to_be_bytes());
            })
        };
        let rules = ProduceRules {
            now_ms: 1_000_000,
            timestamp_before_max_ms: 1000,
            timestamp_after_max_ms: 500,
            ..RULES
        };
        // section(2) has deltas 0 and 1.
        assert!(validate_produced(&at(999_000), &rules).is_ok());
        assert!(validate_produced(&at(998_999), &rules).is_err());
        assert!(validate_produced(&at(1_000_499), &rules).is_ok());
        assert!(matches!(
            validate_produced(&at(1_000_500), &rules),
            Err(Error::InvalidTimestamp(_))
        ));
        // NO_TIMESTAMP (-1) is never out of range; extremes do not overflow.
        let none = batch_of(&record(0, 0, None, Some(b"v"), &[]), 1, 0, |b| {
            b[27..35].copy_from_slice(&(-1i64).to_be_bytes());
        });
        assert!(validate_produced(&none, &rules).is_ok());
        assert!(
            validate_produced(&at(0), &RULES).is_ok(),
            "any age by default"
        );
        assert!(validate_produced(&at(i64::MAX - 1), &RULES).is_err());
        // A LogAppendTime topic takes any CreateTime timestamp: the broker restamps it.
        let lat = ProduceRules {
            log_append_time: true,
            ..rules
        };
        assert!(validate_produced(&at(5), &lat).is_ok());
    }

    #[test]
    fn compacted_topics_need_keys() {
        let compacted = ProduceRules {
            compacted: true,
            ..RULES
        };
        let keyless = batch_of(&record(0, 0, None, Some(b"v"), &[]), 1, 0, |_| {});
        assert!(validate_produced(&keyless, &RULES).is_ok());
        assert!(matches!(
            validate_produced(&keyless, &compacted),
            Err(Error::InvalidRecord(why)) if why.contains("no key")
        ));
        assert!(validate_produced(&batch_of(&section(2), 2, 0, |_| {}), &compacted).is_ok());
    }

    #[test]
    fn header_faults_keep_their_codes() {
        let mut b = make_batch(2, 0);
        let last = b.len() - 1;
        b[last] ^= 1;
        assert!(corrupt(&b).contains("CRC"));
        let b = make_batch(2, 0);
        assert!(matches!(
            validate_produced(
                &b,
                &ProduceRules {
                    max_message_bytes: 10,
                    ..RULES
                }
            ),
            Err(Error::BatchTooLarge { .. })
        ));
    }

    /// Seeded mutations of valid batches (uncompressed and zstd) with the CRC recomputed, so
    /// the record walk and the decompressor see hostile bytes: never a panic, and a pass
    /// only when the records really decode as declared.
    #[test]
    fn mutated_batches_never_panic() {
        let s = section(6);
        let bases = [
            batch_of(&s, 6, 0, |_| {}),
            batch_of(&zstd(&s), 6, 4, |_| {}),
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for i in 0..20_000 {
            let mut b = bases[i % 2].clone();
            for _ in 0..(next() % 3 + 1) {
                let at = 57 + (next() as usize) % (b.len() - 57);
                b[at] = next() as u8;
            }
            fix_crc(&mut b);
            if let Ok(v) = validate_produced(&b, &RULES) {
                let section = records_section(&b, &v.header, 1 << 20).expect("decompresses");
                assert_eq!(
                    walk(&section, v.header.record_count)
                        .filter(|r| r.is_ok())
                        .count(),
                    v.header.record_count as usize
                );
            }
        }
    }

    /// `cargo test -p oxbow-segment-writer validate_throughput -- --ignored --nocapture`:
    /// MB/s of validation on 16 KiB batches of 1 KiB records (debug builds are ~10× slower).
    #[test]
    #[ignore]
    fn validate_throughput() {
        // Values of words drawn by an LCG: compressible about 3:1, like JSON-ish payloads.
        const WORDS: [&[u8]; 8] = [
            b"order ",
            b"id=",
            b"4711 ",
            b"status:",
            b"shipped ",
            b"{\"sku\":",
            b"\"a-17\"} ",
            b"2026-12-01 ",
        ];
        let mut seed = 12345u32;
        let s: Vec<u8> = (0..16)
            .flat_map(|i| {
                let mut value = Vec::with_capacity(1000);
                while value.len() < 1000 {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    value.extend_from_slice(WORDS[(seed >> 16) as usize % WORDS.len()]);
                    value.push((seed >> 8) as u8);
                }
                value.truncate(1000);
                record(i64::from(i), i, Some(b"key-0001"), Some(&value), &[])
            })
            .collect();
        let lz4 = {
            let mut e = lz4::EncoderBuilder::new().build(Vec::new()).expect("lz4");
            e.write_all(&s).expect("lz4");
            e.finish().0
        };
        // Reference points already on the produce path: the CRC-32C check and the copy
        // `batch::stamp` makes, on the uncompressed batch.
        let plain = batch_of(&s, 16, 0, |_| {});
        let rounds = 2000;
        let start = std::time::Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(crc32c::crc32c(std::hint::black_box(&plain[21..])));
            std::hint::black_box(crate::batch::stamp(
                std::hint::black_box(&plain),
                1,
                1,
                None,
            ));
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "crc32c + stamp copy (already on the produce path): {:.0} MB/s of batches",
            (plain.len() * rounds) as f64 / secs / 1e6
        );
        for (name, codec, packed) in [
            ("none", 0, s.clone()),
            ("zstd", 4, zstd(&s)),
            ("lz4", 3, lz4),
        ] {
            let b = batch_of(&packed, 16, codec, |_| {});
            let rounds = 2000;
            let start = std::time::Instant::now();
            for _ in 0..rounds {
                validate_produced(std::hint::black_box(&b), &RULES).expect("valid");
            }
            let secs = start.elapsed().as_secs_f64();
            println!(
                "{name}: {} B batch ({} B of records), {:.0} MB/s of batches, {:.0} MB/s of records, {:.1} µs/batch",
                b.len(),
                s.len(),
                (b.len() * rounds) as f64 / secs / 1e6,
                (s.len() * rounds) as f64 / secs / 1e6,
                secs * 1e6 / rounds as f64
            );
        }
    }
}
