//! Simple reads: `GET /topics/{t}/partitions/{p}/records?offset=N&max_bytes=M&timeout=MS`.
//!
//! Returns the records at or after `offset` (required: a reader always knows where it
//! is), as `[{"topic","key","value","partition","offset"}]`, in the embedded format the
//! `Accept` header asks for (see [`super::body::read_format`]):
//! - binary: keys and values as base64 strings;
//! - JSON: a stored key or value that is valid JSON is returned as that JSON value;
//!   anything else (bytes written by a non-JSON producer) as a JSON string of its UTF-8
//!   text, invalid sequences replaced by U+FFFD. Reading never fails on content.
//!
//! `max_bytes` (default 1 MiB, at most [`READ_BYTES_MAX`]) bounds, as in Confluent's REST
//! Proxy, the unencoded key and value bytes returned; the first record is always returned
//! so a reader never gets stuck on a large one. Only that many records are built; a stored
//! batch whose records would decompress past `--max-decompressed-batch-bytes` is not served
//! (500/50002, naming the flag) rather than allocated.
//! `timeout` (default 1 s, at most [`READ_TIMEOUT_MAX`]) is how long to wait at the end of
//! the log for records to arrive (a long poll); an empty array means none came. An offset
//! outside the log is 416/41601.
//!
//! Instead of `offset`, `timestamp=MS` starts at the first record whose timestamp is at or
//! after it (ListOffsets by time; the console's record browser): an empty array if there is
//! none. It needs the partition led by the broker asked, like ListOffsets. With
//! `timestamps=true` each record also carries its `timestamp` (ms): both are Oxbow's
//! additions, off unless asked, so the REST Proxy's shape stays exactly as clients expect.

use super::body::{json_response, read_format, EmbeddedFormat};
use super::error::ApiError;
use super::extract::{ApiPath, ApiQuery};
use super::topics::{existing_partition, existing_topic};
use super::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use base64::prelude::{Engine, BASE64_STANDARD};
use bytes::Bytes;
use oxbow_segment_writer::Isolation;
use serde::Serialize;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::time::Duration;

/// Default `max_bytes`.
pub const READ_BYTES_DEFAULT: usize = 1 << 20;
/// Largest `max_bytes`: bounds the memory and response size of one read.
pub const READ_BYTES_MAX: usize = 64 << 20;
/// Most storage reads one simple read makes to fill its `max_bytes` (each returns a batch
/// or more; see [`read`]).
const STORAGE_READS_MAX: usize = 16;
/// Default `timeout`.
pub const READ_TIMEOUT_DEFAULT: Duration = Duration::from_millis(1000);
/// Longest `timeout`: longer polls hold a connection and a task for little gain.
pub const READ_TIMEOUT_MAX: Duration = Duration::from_secs(30);

#[derive(Debug, Serialize)]
struct RecordView<'a> {
    topic: &'a str,
    key: Option<Box<RawValue>>,
    value: Option<Box<RawValue>>,
    partition: i32,
    offset: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    timestamp: Option<i64>,
}

/// Where a read starts.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum ReadFrom {
    Offset(i64),
    /// The first record at or after this timestamp (ms).
    Timestamp(i64),
}

/// The parsed query of a read.
#[derive(Debug, PartialEq, Eq)]
struct ReadParams {
    from: ReadFrom,
    /// `timestamps=true`: each record's timestamp in the answer.
    timestamps: bool,
    max_bytes: usize,
    timeout: Duration,
}

pub(super) fn parse_u64(
    query: &HashMap<String, String>,
    name: &str,
) -> Result<Option<u64>, ApiError> {
    query
        .get(name)
        .map(|raw| {
            raw.trim().parse::<u64>().map_err(|_| {
                ApiError::invalid_parameter(format!(
                    "query parameter '{name}' must be a non-negative integer, got '{raw}'"
                ))
            })
        })
        .transpose()
}

/// `max_bytes` and `timeout` of a read (simple reads and consumer polls alike), defaulted
/// and capped.
pub(super) fn read_limits(query: &HashMap<String, String>) -> Result<(usize, Duration), ApiError> {
    let max_bytes = match parse_u64(query, "max_bytes")? {
        None => READ_BYTES_DEFAULT,
        Some(0) => return Err(ApiError::invalid_parameter("max_bytes must be at least 1")),
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX).min(READ_BYTES_MAX),
    };
    let timeout = parse_u64(query, "timeout")?
        .map_or(READ_TIMEOUT_DEFAULT, Duration::from_millis)
        .min(READ_TIMEOUT_MAX);
    Ok((max_bytes, timeout))
}

fn parse_params(query: &HashMap<String, String>) -> Result<ReadParams, ApiError> {
    let as_i64 = |name: &str, n: u64| {
        i64::try_from(n)
            .map_err(|_| ApiError::invalid_parameter(format!("{name} {n} is too large")))
    };
    let from = match (parse_u64(query, "offset")?, parse_u64(query, "timestamp")?) {
        (Some(offset), None) => ReadFrom::Offset(as_i64("offset", offset)?),
        (None, Some(ts)) => ReadFrom::Timestamp(as_i64("timestamp", ts)?),
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid_parameter(
                "give either 'offset' or 'timestamp', not both",
            ))
        }
        (None, None) => {
            return Err(ApiError::invalid_parameter(
                "query parameter 'offset' is required",
            ))
        }
    };
    let timestamps = match query.get("timestamps").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::invalid_parameter(format!(
                "query parameter 'timestamps' must be true or false, got '{other}'"
            )))
        }
    };
    let (max_bytes, timeout) = read_limits(query)?;
    Ok(ReadParams {
        from,
        timestamps,
        max_bytes,
        timeout,
    })
}

/// One stored key or value as the response embeds it.
pub(super) fn embed(
    format: EmbeddedFormat,
    data: Option<&Bytes>,
) -> Result<Option<Box<RawValue>>, ApiError> {
    let Some(data) = data else {
        return Ok(None);
    };
    let raw = match format {
        EmbeddedFormat::Binary => serde_json::value::to_raw_value(&BASE64_STANDARD.encode(data)),
        EmbeddedFormat::Json => match std::str::from_utf8(data)
            .ok()
            .and_then(|s| serde_json::from_str::<Box<RawValue>>(s).ok())
        {
            // Re-embedded as stored: no re-ordering or re-spelling of what the producer sent.
            Some(raw) => Ok(raw),
            None => serde_json::value::to_raw_value(&String::from_utf8_lossy(data)),
        },
    };
    raw.map(Some)
        .map_err(|e| ApiError::internal(format!("could not embed a record: {e}")))
}

/// `GET /topics/{t}/partitions/{p}/records`.
pub(crate) async fn read(
    State(app): State<AppState>,
    ApiPath((topic, partition)): ApiPath<(String, String)>,
    ApiQuery(query): ApiQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let format = read_format(&headers)?;
    let params = parse_params(&query)?;
    let topic = existing_topic(&app, &topic)?;
    let partition = existing_partition(&topic, &partition)?.partition;
    let broker = &app.http.broker;
    let start = match params.from {
        ReadFrom::Offset(offset) => offset,
        ReadFrom::Timestamp(ts) => match broker.list_offset(&topic, partition, ts).await?.0 {
            -1 => {
                return Ok(json_response(
                    StatusCode::OK,
                    format.content_type(),
                    &[(); 0],
                ))
            }
            offset => offset,
        },
    };
    // The storage read's budget is stored (compressed) bytes, this one's unencoded keys and
    // values: a small batch followed by a larger compressed one would stop a single read
    // short, so read on (without waiting) until the budget is spent or the data is.
    let mut records = Vec::new();
    let mut budget = params.max_bytes;
    let mut next = start;
    let mut wait = params.timeout;
    'reads: for _ in 0..STORAGE_READS_MAX {
        let result = broker
            .read(
                &topic,
                partition,
                next,
                budget.max(1),
                true,
                wait,
                // REST Proxy reads committed data: aborted transactions are never shown.
                Isolation::ReadCommitted,
            )
            .await?;
        wait = Duration::ZERO;
        let Some(end) = crate::records::batches_end(&result.batches) else {
            break;
        };
        let decoded = crate::records::decode(
            &result.committed_batches(),
            next,
            budget,
            broker.log.max_decompressed_batch_bytes(),
        )
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                50002,
                format!(
                    "could not decode stored records of {}-{partition}: {e}",
                    topic.name
                ),
            )
        })?;
        for r in decoded {
            let size =
                r.key.as_ref().map_or(0, Bytes::len) + r.value.as_ref().map_or(0, Bytes::len);
            if !records.is_empty() && size > budget {
                break 'reads;
            }
            budget = budget.saturating_sub(size);
            records.push(r);
        }
        next = end.max(next);
        if budget == 0 || next >= result.last_stable_offset {
            break;
        }
    }
    let views = records
        .iter()
        .map(|r| {
            Ok(RecordView {
                topic: &topic.name,
                key: embed(format, r.key.as_ref())?,
                value: embed(format, r.value.as_ref())?,
                partition,
                offset: r.offset,
                timestamp: params.timestamps.then_some(r.timestamp_ms),
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(json_response(StatusCode::OK, format.content_type(), &views))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn params_defaults_and_caps() {
        assert_eq!(
            parse_params(&query(&[("offset", "5")])),
            Ok(ReadParams {
                from: ReadFrom::Offset(5),
                timestamps: false,
                max_bytes: READ_BYTES_DEFAULT,
                timeout: READ_TIMEOUT_DEFAULT
            })
        );
        let p = parse_params(&query(&[
            ("offset", "0"),
            ("max_bytes", "999999999999"),
            ("timeout", "99999999"),
        ]))
        .expect("params");
        assert_eq!((p.max_bytes, p.timeout), (READ_BYTES_MAX, READ_TIMEOUT_MAX));
        let p = parse_params(&query(&[("timestamp", "1700000000000")])).expect("params");
        assert_eq!(p.from, ReadFrom::Timestamp(1_700_000_000_000));
        for bad in [
            query(&[]),
            query(&[("offset", "-1")]),
            query(&[("offset", "x")]),
            query(&[("offset", "0"), ("max_bytes", "0")]),
            query(&[("offset", "0"), ("timeout", "soon")]),
            query(&[("offset", "0"), ("timestamp", "5")]),
            query(&[("timestamp", "-5")]),
            query(&[("offset", "0"), ("timestamps", "yes")]),
        ] {
            let e = parse_params(&bad).expect_err("invalid");
            assert_eq!(
                (e.status(), e.error_code()),
                (StatusCode::UNPROCESSABLE_ENTITY, 42204)
            );
        }
    }

    #[test]
    fn embedding() {
        let b = |s: &[u8]| Bytes::from(s.to_vec());
        let get = |f, d: &[u8]| {
            embed(f, Some(&b(d)))
                .expect("embed")
                .map(|r| r.get().to_string())
        };
        assert_eq!(get(EmbeddedFormat::Binary, b"key"), Some("\"a2V5\"".into()));
        assert_eq!(
            get(EmbeddedFormat::Json, br#"{"b":1,"a":2}"#),
            Some(r#"{"b":1,"a":2}"#.into())
        );
        assert_eq!(
            get(EmbeddedFormat::Json, b"plain text"),
            Some("\"plain text\"".into())
        );
        assert_eq!(
            get(EmbeddedFormat::Json, b"\xff"),
            Some("\"\u{fffd}\"".into())
        );
        assert!(embed(EmbeddedFormat::Json, None).expect("null").is_none());
    }
}
