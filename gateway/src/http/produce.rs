//! v2 produce: `POST /topics/{t}` and `POST /topics/{t}/partitions/{p}`.
//!
//! Body `{"records":[{"key":..,"value":..,"partition":..}]}` in the embedded format named by
//! the `Content-Type` (see [`super::body::produce_format`]):
//! - JSON: a key or value is any JSON value, stored as its compact JSON text
//!   ([`compact_json`]); `null` or absent means no key / a null value.
//! - binary: a key or value is a base64 string (or `null`), stored decoded.
//!
//! Where each record goes: the path's partition if given, else the record's `partition`,
//! else for a keyed record `partition_for_key(key bytes)` (murmur2, as the Java client and
//! the REST Proxy; for the JSON format the key bytes are its JSON text), else one partition
//! for every unkeyed record of the request, rotating between requests (the Java client's
//! sticky partitioner: one batch instead of one per partition).
//!
//! Records are grouped per partition, in request order, into as few RecordBatches as the
//! topic's `max.message.bytes` allows, and appended with `acks=all`: the answer comes once
//! they are durable. Partitions are written concurrently. The response lists one
//! `{partition, offset, error_code, error}` per record in request order; a failed batch
//! marks its records with `error_code` 1 (retriable) or 2 (not), as the REST Proxy does,
//! while the request still answers 200. Whole-request failures (bad body, unknown topic or
//! partition) are errors before anything is written.

use super::body::{compact_json, parse_json, produce_format, v2_ok, EmbeddedFormat};
use super::error::ApiError;
use super::extract::{ApiPath, Body};
use super::topics::existing_partition;
use super::AppState;
use crate::client::partitioner::partition_for_key;
use crate::error::BrokerError;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use base64::prelude::{Engine, BASE64_STANDARD};
use bytes::Bytes;
use oxbow_metadata::TopicMetadata;
use oxbow_segment_writer::Acks;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// Most records in one produce request. Bounds the work (and the response) of one request;
/// the body limit alone would allow millions of tiny records.
pub const RECORDS_PER_REQUEST_MAX: usize = 10_000;

/// Widest encoding of a record besides its key and value bytes: length, attributes,
/// timestamp delta, offset delta, key length, value length, header count (varints).
const RECORD_OVERHEAD_BYTES: usize = 5 + 1 + 10 + 5 + 5 + 5 + 5;
/// The RecordBatch v2 header.
const BATCH_OVERHEAD_BYTES: usize = 61;

#[derive(Debug, Deserialize)]
struct ProduceRequest {
    records: Vec<ProduceRecord>,
}

/// One record as sent. Keys and values stay raw JSON until the format says how to read
/// them; other fields the REST Proxy accepts (schemas, headers) are ignored.
#[derive(Debug, Deserialize)]
struct ProduceRecord {
    #[serde(default)]
    key: Option<Box<RawValue>>,
    #[serde(default)]
    value: Option<Box<RawValue>>,
    #[serde(default)]
    partition: Option<i32>,
}

/// A record with its key and value as they will be stored.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PendingRecord {
    key: Option<Bytes>,
    value: Option<Bytes>,
    partition: Option<i32>,
}

/// The REST Proxy's produce response.
#[derive(Debug, Serialize)]
struct ProduceResponse {
    key_schema_id: Option<i32>,
    value_schema_id: Option<i32>,
    offsets: Vec<OffsetView>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
struct OffsetView {
    partition: Option<i32>,
    offset: Option<i64>,
    /// 1: retriable, 2: not (REST Proxy convention).
    error_code: Option<u32>,
    error: Option<String>,
}

/// Why one batch's records were not appended.
#[derive(Debug)]
struct RecordError {
    retriable: bool,
    message: String,
}

impl From<BrokerError> for RecordError {
    fn from(e: BrokerError) -> Self {
        RecordError {
            retriable: e.mapped().kafka.is_retriable(),
            message: e.to_string(),
        }
    }
}

/// The stored bytes of one key or value.
fn field_bytes(
    format: EmbeddedFormat,
    raw: Option<&RawValue>,
    index: usize,
    field: &str,
) -> Result<Option<Bytes>, ApiError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    match format {
        EmbeddedFormat::Json => Ok(Some(Bytes::from(compact_json(raw.get())))),
        EmbeddedFormat::Binary => {
            let text: String = serde_json::from_str(raw.get()).map_err(|_| {
                ApiError::invalid_body(format!(
                    "records[{index}].{field} must be a base64 string or null in the binary format"
                ))
            })?;
            let bytes = BASE64_STANDARD.decode(text.as_bytes()).map_err(|e| {
                ApiError::invalid_base64(format!(
                    "records[{index}].{field} is not valid base64: {e}"
                ))
            })?;
            Ok(Some(Bytes::from(bytes)))
        }
    }
}

/// Parses and checks a produce body into records as stored.
fn parse_records(format: EmbeddedFormat, body: &[u8]) -> Result<Vec<PendingRecord>, ApiError> {
    let request: ProduceRequest = parse_json(body)?;
    if request.records.is_empty() {
        return Err(ApiError::invalid_body("records must not be empty"));
    }
    if request.records.len() > RECORDS_PER_REQUEST_MAX {
        return Err(ApiError::over_limit(format!(
            "{} records in one request; at most {RECORDS_PER_REQUEST_MAX} are accepted",
            request.records.len()
        )));
    }
    request
        .records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            Ok(PendingRecord {
                key: field_bytes(format, r.key.as_deref(), i, "key")?,
                value: field_bytes(format, r.value.as_deref(), i, "value")?,
                partition: r.partition,
            })
        })
        .collect()
}

/// The partition of each record. `partitions` > 0; explicit partitions are already
/// checked; `sticky` is where unkeyed records without a partition go.
fn assign_partitions(
    records: &[PendingRecord],
    forced: Option<i32>,
    partitions: i32,
    sticky: i32,
) -> Vec<i32> {
    records
        .iter()
        .map(|r| match (forced.or(r.partition), &r.key) {
            (Some(p), _) => p,
            (None, Some(key)) => partition_for_key(key, partitions),
            (None, None) => sticky,
        })
        .collect()
}

/// Splits one partition's records (indices, in order) into batches whose encoded size stays
/// within `batch_bytes_max`. A record too large on its own gets a batch of its own, so
/// that only it is refused (`MESSAGE_TOO_LARGE`), as a Kafka producer would.
fn split_batches(
    records: &[PendingRecord],
    indices: &[usize],
    batch_bytes_max: usize,
) -> Vec<Vec<usize>> {
    let size = |i: usize| {
        let r = &records[i];
        RECORD_OVERHEAD_BYTES
            + r.key.as_ref().map_or(0, |k| k.len())
            + r.value.as_ref().map_or(0, |v| v.len())
    };
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut current_bytes = BATCH_OVERHEAD_BYTES;
    for &i in indices {
        let s = size(i);
        if !current.is_empty() && current_bytes + s > batch_bytes_max {
            batches.push(std::mem::take(&mut current));
            current_bytes = BATCH_OVERHEAD_BYTES;
        }
        current.push(i);
        current_bytes += s;
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// Milliseconds since the epoch: the records' CreateTime is when the proxy produced them,
/// as with the REST Proxy's own producer.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Appends one partition's batches in order and waits until all are durable. Every batch
/// is enqueued before the first wait, so they share group commits instead of paying one
/// fsync each. Returns each batch's indices with its base offset or error.
async fn produce_partition(
    app: &AppState,
    topic: &TopicMetadata,
    partition: i32,
    records: &[PendingRecord],
    batches: Vec<Vec<usize>>,
    timestamp_ms: i64,
) -> Vec<(Vec<usize>, Result<i64, RecordError>)> {
    let broker = &app.http.broker;
    let tp = oxbow_metadata::TopicPartition::new(topic.topic_id, partition);
    let led_elsewhere = topic
        .partition(partition)
        .map(|p| p.leader)
        .filter(|l| *l != broker.settings.broker_id && broker.log.get(&tp).is_none());
    if let Some(leader) = led_elsewhere {
        // Another broker leads it: produce there, as a Kafka client would.
        let mut out = Vec::with_capacity(batches.len());
        for indices in batches {
            let forwarded: Vec<crate::client::ProduceRecord> = indices
                .iter()
                .map(|&i| crate::client::ProduceRecord {
                    key: records[i].key.clone(),
                    value: records[i].value.clone(),
                    headers: Vec::new(),
                    timestamp_ms: Some(timestamp_ms),
                })
                .collect();
            let result = broker
                .forward_produce(leader, &topic.name, partition, &forwarded)
                .await
                .map_err(RecordError::from);
            if let Err(e) = &result {
                tracing::warn!(topic = %topic.name, partition, leader, error = %e.message, "forwarded http produce failed");
            }
            out.push((indices, result));
        }
        return out;
    }
    let mut enqueued = Vec::with_capacity(batches.len());
    for indices in batches {
        let kv: Vec<(Option<Bytes>, Option<Bytes>)> = indices
            .iter()
            .map(|&i| (records[i].key.clone(), records[i].value.clone()))
            .collect();
        let pending = match crate::records::encode(&kv, timestamp_ms) {
            Ok(batch) => broker
                .produce_pending(topic, partition, &batch, Acks::All)
                .await
                .map_err(RecordError::from),
            Err(e) => Err(RecordError {
                retriable: false,
                message: format!("could not encode the record batch: {e}"),
            }),
        };
        enqueued.push((indices, pending));
    }
    let mut out = Vec::with_capacity(enqueued.len());
    for (indices, pending) in enqueued {
        let result = match pending {
            Ok(p) => p
                .wait()
                .await
                .map(|a| a.base_offset)
                .map_err(|e| RecordError::from(BrokerError::from(e))),
            Err(e) => Err(e),
        };
        if let Err(e) = &result {
            tracing::warn!(topic = %topic.name, partition, records = indices.len(), error = %e.message, "http produce failed");
        }
        out.push((indices, result));
    }
    out
}

async fn produce(
    app: &AppState,
    topic_name: &str,
    path_partition: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    // Everything about the body is checked before the topic is looked up, so a malformed
    // request never auto-creates a topic.
    let format = produce_format(headers)?;
    let records = parse_records(format, body)?;
    let broker = &app.http.broker;
    let topic = broker.topic_or_create(topic_name, true).await?;
    let partitions = i32::try_from(topic.partitions.len())
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| ApiError::internal(format!("topic '{topic_name}' has no partitions")))?;
    let forced = match path_partition {
        Some(raw) => Some(existing_partition(&topic, raw)?.partition),
        None => {
            for r in &records {
                if let Some(p) = r.partition {
                    if topic.partition(p).is_none() {
                        return Err(BrokerError::UnknownPartition {
                            topic: topic.name.clone(),
                            partition: p,
                        }
                        .into());
                    }
                }
            }
            None
        }
    };
    let needs_sticky = forced.is_none()
        && records
            .iter()
            .any(|r| r.partition.is_none() && r.key.is_none());
    let sticky = if needs_sticky {
        let n = app.next_partition.fetch_add(1, Ordering::Relaxed);
        // `partitions` > 0, so the remainder fits in i32.
        (n % partitions.unsigned_abs()) as i32
    } else {
        0
    };
    let assigned = assign_partitions(&records, forced, partitions, sticky);
    let mut by_partition: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for (i, &p) in assigned.iter().enumerate() {
        by_partition.entry(p).or_default().push(i);
    }
    let timestamp_ms = now_ms();
    let batch_bytes_max = topic.configs.max_message_bytes();
    let results = futures::future::join_all(by_partition.iter().map(|(&p, indices)| {
        let batches = split_batches(&records, indices, batch_bytes_max);
        produce_partition(app, &topic, p, &records, batches, timestamp_ms)
    }))
    .await;

    let mut offsets = vec![OffsetView::default(); records.len()];
    let mut appended = 0u64;
    for (indices, result) in results.into_iter().flatten() {
        for (n, &i) in indices.iter().enumerate() {
            offsets[i] = match &result {
                Ok(base) => {
                    appended += 1;
                    OffsetView {
                        partition: Some(assigned[i]),
                        offset: Some(base + n as i64),
                        error_code: None,
                        error: None,
                    }
                }
                Err(e) => OffsetView {
                    partition: Some(assigned[i]),
                    offset: None,
                    error_code: Some(if e.retriable { 1 } else { 2 }),
                    error: Some(e.message.clone()),
                },
            };
        }
    }
    broker
        .metrics
        .produced_records_http
        .fetch_add(appended, Ordering::Relaxed);
    Ok(v2_ok(&ProduceResponse {
        key_schema_id: None,
        value_schema_id: None,
        offsets,
    }))
}

/// `POST /topics/{t}`.
pub(crate) async fn to_topic(
    State(app): State<AppState>,
    ApiPath(topic): ApiPath<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    produce(&app, &topic, None, &headers, &body).await
}

/// `POST /topics/{t}/partitions/{p}`: every record goes to `p` (their own `partition`
/// fields are ignored).
pub(crate) async fn to_partition(
    State(app): State<AppState>,
    ApiPath((topic, partition)): ApiPath<(String, String)>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    produce(&app, &topic, Some(&partition), &headers, &body).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    fn bytes(s: &str) -> Option<Bytes> {
        Some(Bytes::from(s.to_string()))
    }

    #[test]
    fn json_keys_are_their_compact_json_text() {
        let body = br#"{"records":[
            {"key": {"b": 1, "a": [1, 2]}, "value": "v"},
            {"key": null, "value": null},
            {"value": 12.50, "partition": 3}
        ]}"#;
        let recs = parse_records(EmbeddedFormat::Json, body).expect("parse");
        assert_eq!(recs[0].key, bytes(r#"{"b":1,"a":[1,2]}"#));
        assert_eq!(recs[0].value, bytes(r#""v""#));
        assert_eq!(
            recs[1],
            PendingRecord {
                key: None,
                value: None,
                partition: None
            }
        );
        assert_eq!(recs[2].value, bytes("12.50"));
        assert_eq!(recs[2].partition, Some(3));
    }

    #[test]
    fn binary_keys_are_base64_decoded() {
        let body = br#"{"records":[{"key":"a2V5","value":"dmFsdWU="},{"value":null}]}"#;
        let recs = parse_records(EmbeddedFormat::Binary, body).expect("parse");
        assert_eq!(recs[0].key, bytes("key"));
        assert_eq!(recs[0].value, bytes("value"));
        assert_eq!(recs[1].value, None);

        let e = parse_records(EmbeddedFormat::Binary, br#"{"records":[{"value":"!!"}]}"#)
            .expect_err("bad base64");
        assert_eq!(
            (e.status(), e.error_code()),
            (StatusCode::UNPROCESSABLE_ENTITY, 42203)
        );
        let e = parse_records(
            EmbeddedFormat::Binary,
            br#"{"records":[{"value":{"x":1}}]}"#,
        )
        .expect_err("not a string");
        assert_eq!(e.error_code(), 42201);
    }

    #[test]
    fn bad_bodies() {
        let code = |b: &[u8]| {
            parse_records(EmbeddedFormat::Json, b)
                .expect_err("invalid")
                .error_code()
        };
        assert_eq!(code(br#"{"records":[]}"#), 42201);
        assert_eq!(code(br#"{"records":{}}"#), 42201);
        assert_eq!(code(br#"{"values":[]}"#), 42201);
        assert_eq!(code(br#"{"records":[{"value":1,"partition":"0"}]}"#), 42201);
        assert_eq!(code(br#"{"records":[{"value":1}"#), 40001);
        let many = format!(
            "{{\"records\":[{}]}}",
            vec!["{\"value\":1}"; RECORDS_PER_REQUEST_MAX + 1].join(",")
        );
        assert_eq!(code(many.as_bytes()), 42209);
    }

    #[test]
    fn partitions_by_path_then_record_then_key_then_sticky() {
        let r = |key: Option<&str>, partition| PendingRecord {
            key: key.map(|k| Bytes::from(k.to_string())),
            value: None,
            partition,
        };
        let recs = vec![
            r(Some("k1"), None),
            r(Some("k2"), Some(2)),
            r(None, None),
            r(None, Some(0)),
        ];
        let got = assign_partitions(&recs, None, 4, 3);
        assert_eq!(got, vec![partition_for_key(b"k1", 4), 2, 3, 0]);
        assert_eq!(assign_partitions(&recs, Some(1), 4, 3), vec![1, 1, 1, 1]);
    }

    #[test]
    fn batches_respect_the_size_limit() {
        let r = |n: usize| PendingRecord {
            key: None,
            value: Some(Bytes::from(vec![0u8; n])),
            partition: None,
        };
        let recs = vec![r(100), r(100), r(1000), r(100)];
        let all = [0, 1, 2, 3];
        assert_eq!(split_batches(&recs, &all, 1 << 20), vec![vec![0, 1, 2, 3]]);
        let limit = BATCH_OVERHEAD_BYTES + 2 * (RECORD_OVERHEAD_BYTES + 100);
        assert_eq!(
            split_batches(&recs, &all, limit),
            vec![vec![0, 1], vec![2], vec![3]]
        );
    }
}
