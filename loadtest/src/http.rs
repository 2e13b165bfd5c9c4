//! REST Proxy v2 produce: `POST /topics/{t}` with `application/vnd.kafka.binary.v2+json`
//! (values base64), as `gateway/src/http/produce.rs` serves it. The answer comes once the
//! records are durable (acks=all); each answer lists one offset or error per record.
//!
//! `http_concurrency` lanes each keep one request in flight; in open loop each lane's
//! requests are due on its own schedule and latency counts from that due time, so a slow
//! answer delays (and is charged to) the requests queued behind it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::prelude::{Engine, BASE64_STANDARD};
use hdrhistogram::Histogram;
use serde::Deserialize;

use crate::clock::now_ns;
use crate::counters::ProduceCounters;
use crate::payload::Payloads;
use crate::schedule::OpenLoop;
use crate::stats::{new_histogram, record_ns};

pub const CONTENT_TYPE: &str = "application/vnd.kafka.binary.v2+json";

#[derive(Clone, Copy, Debug)]
pub struct HttpLanePlan {
    /// Open loop in requests per second for this lane; `None`: back to back.
    pub schedule: Option<OpenLoop>,
    pub end_ns: u64,
    pub records_per_request: u32,
    pub first_index: u64,
}

#[derive(Debug, Deserialize)]
struct ProduceResponse {
    offsets: Vec<OffsetView>,
}

#[derive(Debug, Deserialize)]
struct OffsetView {
    #[serde(default)]
    error_code: Option<u32>,
    #[serde(default)]
    error: Option<String>,
}

/// The request body for `records` values.
pub fn body(values: &[Vec<u8>]) -> String {
    let mut s =
        String::with_capacity(16 + values.iter().map(|v| v.len() * 4 / 3 + 16).sum::<usize>());
    s.push_str(r#"{"records":["#);
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(r#"{"value":""#);
        BASE64_STANDARD.encode_string(v, &mut s);
        s.push_str(r#""}"#);
    }
    s.push_str("]}");
    s
}

/// Records the answer acknowledged and the first per-record error, from a 200 body.
fn count_acked(body: &[u8], sent: u32) -> Result<(u64, Option<String>), String> {
    let resp: ProduceResponse =
        serde_json::from_slice(body).map_err(|e| format!("unreadable produce answer: {e}"))?;
    if resp.offsets.len() != sent as usize {
        return Err(format!("{} offsets for {sent} records", resp.offsets.len()));
    }
    let failed: Vec<&OffsetView> = resp
        .offsets
        .iter()
        .filter(|o| o.error_code.is_some())
        .collect();
    let first = failed
        .first()
        .map(|o| o.error.clone().unwrap_or_else(|| "record error".into()));
    Ok((u64::from(sent) - failed.len() as u64, first))
}

/// Runs one HTTP lane until its end or `stop`; returns per-request latencies.
pub async fn run_lane(
    client: reqwest::Client,
    url: String,
    plan: HttpLanePlan,
    payloads: Arc<Payloads>,
    counters: Arc<ProduceCounters>,
    stop: Arc<AtomicBool>,
) -> Histogram<u64> {
    let mut latency = new_histogram();
    let per_request = plan.records_per_request;
    let mut values = vec![Vec::new(); per_request as usize];
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let now = now_ns();
        let sent = match plan.schedule {
            Some(schedule) => {
                let due = schedule.intended_ns(i);
                if due >= plan.end_ns {
                    break;
                }
                if due > now {
                    tokio::time::sleep(Duration::from_nanos(due - now)).await;
                }
                due
            }
            None => now,
        };
        if sent >= plan.end_ns {
            break;
        }
        for (j, v) in values.iter_mut().enumerate() {
            payloads.fill(
                v,
                plan.first_index + i * u64::from(per_request) + j as u64,
                sent,
            );
        }
        let result = client
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, CONTENT_TYPE)
            .header(reqwest::header::ACCEPT, "application/vnd.kafka.v2+json")
            .body(body(&values))
            .send()
            .await;
        let outcome = match result {
            Ok(resp) => {
                let status = resp.status();
                match resp.bytes().await {
                    Ok(bytes) if status.is_success() => count_acked(&bytes, per_request),
                    Ok(bytes) => Err(format!(
                        "HTTP {status}: {}",
                        String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
                    )),
                    Err(e) => Err(format!("reading answer: {e}")),
                }
            }
            Err(e) => Err(format!("request: {e}")),
        };
        let done = now_ns();
        match outcome {
            Ok((acked, first_error)) => {
                let bytes = acked * payloads.record_size() as u64;
                counters.acked(acked, bytes, sent, done);
                if let Some(e) = first_error {
                    counters.failed(u64::from(per_request) - acked, e);
                }
                if counters.window.contains(sent) {
                    record_ns(&mut latency, done.saturating_sub(sent));
                }
            }
            Err(e) => {
                counters.failed(u64::from(per_request), e);
                // Do not spin on a dead endpoint.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        i += 1;
    }
    latency
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_is_rest_proxy_binary_json() {
        let b = body(&[b"hi".to_vec(), vec![0, 255]]);
        assert_eq!(b, r#"{"records":[{"value":"aGk="},{"value":"AP8="}]}"#);
        let parsed: serde_json::Value = serde_json::from_str(&b).expect("valid JSON");
        assert_eq!(parsed["records"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn answers_are_counted_per_record() {
        let ok = br#"{"key_schema_id":null,"value_schema_id":null,"offsets":[{"partition":0,"offset":5,"error_code":null,"error":null},{"partition":0,"offset":6}]}"#;
        assert_eq!(count_acked(ok, 2), Ok((2, None)));
        let partial = br#"{"offsets":[{"partition":0,"offset":5},{"partition":null,"offset":null,"error_code":1,"error":"retriable"}]}"#;
        assert_eq!(count_acked(partial, 2), Ok((1, Some("retriable".into()))));
        assert!(count_acked(ok, 3).is_err());
        assert!(count_acked(b"nope", 1).is_err());
    }
}
