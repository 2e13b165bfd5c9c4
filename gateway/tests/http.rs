//! The HTTP/JSON API end to end over real sockets: a real `Broker` (embedded metadata, local
//! object store, WAL in a temp dir) behind `http::router`, driven by a minimal HTTP/1.1
//! client (one request per connection), so status lines, headers and bodies are checked
//! exactly as a client sees them.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

mod support;

use support::{parse_response, request, start, Response};

use base64::prelude::{Engine, BASE64_STANDARD};
use oxbow_gateway::client::partitioner::partition_for_key;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const JSON_V2: &str = "application/vnd.kafka.json.v2+json";
const BINARY_V2: &str = "application/vnd.kafka.binary.v2+json";

async fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, &[], b"").await
}

async fn get_accept(addr: SocketAddr, path: &str, accept: &str) -> Response {
    request(addr, "GET", path, &[("Accept", accept)], b"").await
}

async fn post(addr: SocketAddr, path: &str, content_type: &str, body: &Value) -> Response {
    let body = serde_json::to_vec(body).expect("body");
    request(addr, "POST", path, &[("Content-Type", content_type)], &body).await
}

fn b64(s: &str) -> String {
    BASE64_STANDARD.encode(s)
}

/// (partition, offset) of each produced record, asserting none failed.
fn offsets(response: &Response) -> Vec<(i64, i64)> {
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(
        response.header("content-type"),
        Some("application/vnd.kafka.v2+json")
    );
    let body = response.json();
    assert_eq!(body["key_schema_id"], Value::Null);
    body["offsets"]
        .as_array()
        .expect("offsets")
        .iter()
        .map(|o| {
            assert_eq!(o["error_code"], Value::Null, "{o}");
            (
                o["partition"].as_i64().expect("partition"),
                o["offset"].as_i64().expect("offset"),
            )
        })
        .collect()
}

#[tokio::test]
async fn produce_json_and_read_back() {
    let s = start(false).await;
    s.create_topic("j", 1).await;
    let r = post(
        s.addr,
        "/topics/j",
        JSON_V2,
        &json!({"records": [
            {"key": "k1", "value": {"n": 1, "list": [1, 2]}},
            {"value": "plain"},
            {"key": {"id": 7}, "value": null}
        ]}),
    )
    .await;
    assert_eq!(offsets(&r), vec![(0, 0), (0, 1), (0, 2)]);
    assert_eq!(
        s.broker
            .metrics
            .produced_records_http
            .load(Ordering::Relaxed),
        3
    );

    let r = get_accept(s.addr, "/topics/j/partitions/0/records?offset=0", JSON_V2).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("content-type"), Some(JSON_V2));
    assert_eq!(
        r.json(),
        json!([
            {"topic": "j", "key": "k1", "value": {"n": 1, "list": [1, 2]}, "partition": 0, "offset": 0},
            {"topic": "j", "key": null, "value": "plain", "partition": 0, "offset": 1},
            {"topic": "j", "key": {"id": 7}, "value": null, "partition": 0, "offset": 2}
        ])
    );

    // The same records in the binary format are the stored bytes: the compact JSON text.
    let r = get_accept(s.addr, "/topics/j/partitions/0/records?offset=1", BINARY_V2).await;
    assert_eq!(r.header("content-type"), Some(BINARY_V2));
    let body = r.json();
    assert_eq!(body.as_array().map(Vec::len), Some(2));
    assert_eq!(body[0]["value"], json!(b64("\"plain\"")));
    assert_eq!(body[1]["key"], json!(b64("{\"id\":7}")));

    // Plain application/json produces the JSON format too.
    let r = post(
        s.addr,
        "/topics/j",
        "application/json",
        &json!({"records": [{"value": 1}]}),
    )
    .await;
    assert_eq!(offsets(&r), vec![(0, 3)]);
}

#[tokio::test]
async fn produce_binary_and_read_back() {
    let s = start(false).await;
    s.create_topic("b", 1).await;
    let r = post(
        s.addr,
        "/topics/b/partitions/0",
        BINARY_V2,
        &json!({"records": [
            {"key": b64("key"), "value": b64("value-0")},
            {"value": b64("value-1")}
        ]}),
    )
    .await;
    assert_eq!(offsets(&r), vec![(0, 0), (0, 1)]);

    // No Accept: binary, the lossless default.
    let r = get(
        s.addr,
        "/topics/b/partitions/0/records?offset=0&max_bytes=1000&timeout=0",
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.json(),
        json!([
            {"topic": "b", "key": b64("key"), "value": b64("value-0"), "partition": 0, "offset": 0},
            {"topic": "b", "key": null, "value": b64("value-1"), "partition": 0, "offset": 1}
        ])
    );

    // JSON format on bytes that are not JSON: their text as a string.
    let r = get_accept(s.addr, "/topics/b/partitions/0/records?offset=1", JSON_V2).await;
    assert_eq!(r.json()[0]["value"], json!("value-1"));

    // At the end of the log with no wait: nothing, at once.
    let r = get(s.addr, "/topics/b/partitions/0/records?offset=2&timeout=0").await;
    assert_eq!((r.status, r.json()), (200, json!([])));
}

#[tokio::test]
async fn read_long_polls_until_a_record_arrives() {
    let s = start(false).await;
    s.create_topic("poll", 1).await;
    let addr = s.addr;
    let read = tokio::spawn(async move {
        get(
            addr,
            "/topics/poll/partitions/0/records?offset=0&timeout=30000",
        )
        .await
    });
    let produced = post(
        s.addr,
        "/topics/poll",
        BINARY_V2,
        &json!({"records": [{"value": b64("late")}]}),
    )
    .await;
    assert_eq!(offsets(&produced), vec![(0, 0)]);
    let r = read.await.expect("read task");
    assert_eq!(r.json()[0]["value"], json!(b64("late")));
}

#[tokio::test]
async fn keyed_records_follow_the_java_partitioner() {
    let s = start(false).await;
    s.create_topic("keyed", 6).await;
    let keys: Vec<String> = (0..40).map(|i| format!("key-{i}")).collect();
    let records: Vec<Value> = keys
        .iter()
        .map(|k| json!({"key": b64(k), "value": b64("v")}))
        .collect();
    let r = post(
        s.addr,
        "/topics/keyed",
        BINARY_V2,
        &json!({ "records": records }),
    )
    .await;
    let got = offsets(&r);
    let mut next_offset = [0i64; 6];
    for (key, (partition, offset)) in keys.iter().zip(&got) {
        assert_eq!(
            *partition,
            i64::from(partition_for_key(key.as_bytes(), 6)),
            "{key}"
        );
        // Offsets are dense per partition, in request order.
        let slot = usize::try_from(*partition).expect("partition");
        assert_eq!(*offset, next_offset[slot]);
        next_offset[slot] += 1;
    }
    assert!(
        next_offset.iter().filter(|&&n| n > 0).count() > 1,
        "keys spread"
    );

    // The JSON format hashes the key's JSON text, quotes included (as the REST Proxy).
    let r = post(
        s.addr,
        "/topics/keyed",
        JSON_V2,
        &json!({"records": [{"key": "key-1", "value": 1}]}),
    )
    .await;
    assert_eq!(
        offsets(&r)[0].0,
        i64::from(partition_for_key(b"\"key-1\"", 6))
    );

    // An explicit partition wins over the key; unkeyed records of one request share one.
    let r = post(
        s.addr,
        "/topics/keyed",
        BINARY_V2,
        &json!({"records": [
            {"key": b64("key-1"), "value": b64("v"), "partition": 5},
            {"value": b64("a")},
            {"value": b64("b")}
        ]}),
    )
    .await;
    let got = offsets(&r);
    assert_eq!(got[0].0, 5);
    assert_eq!(got[1].0, got[2].0);
    assert_eq!(got[2].1, got[1].1 + 1);
}

#[tokio::test]
async fn unknown_topics_and_partitions() {
    let s = start(false).await;
    s.create_topic("t", 2).await;
    let body = json!({"records": [{"value": b64("v")}]});
    post(s.addr, "/topics/missing", BINARY_V2, &body)
        .await
        .assert_error(404, 40401);
    get(s.addr, "/topics/missing")
        .await
        .assert_error(404, 40401);
    get(s.addr, "/topics/missing/partitions")
        .await
        .assert_error(404, 40401);
    get(s.addr, "/topics/missing/partitions/0/records?offset=0")
        .await
        .assert_error(404, 40401);
    assert!(s.broker.topic("missing").is_none(), "not auto-created");

    post(s.addr, "/topics/t/partitions/2", BINARY_V2, &body)
        .await
        .assert_error(404, 40402);
    post(s.addr, "/topics/t/partitions/x", BINARY_V2, &body)
        .await
        .assert_error(404, 40402);
    post(
        s.addr,
        "/topics/t",
        BINARY_V2,
        &json!({"records": [{"value": b64("v"), "partition": 9}]}),
    )
    .await
    .assert_error(404, 40402);
    get(s.addr, "/topics/t/partitions/7")
        .await
        .assert_error(404, 40402);
    get(s.addr, "/topics/t/partitions/7/records?offset=0")
        .await
        .assert_error(404, 40402);
}

#[tokio::test]
async fn auto_create_on_produce() {
    let s = start(true).await;
    let r = post(
        s.addr,
        "/topics/fresh",
        JSON_V2,
        &json!({"records": [{"value": 1}]}),
    )
    .await;
    assert_eq!(offsets(&r).len(), 1);
    let t = s.broker.topic("fresh").expect("auto-created");
    assert_eq!(t.partitions.len(), 2);
    // Reads never create.
    get(s.addr, "/topics/other").await.assert_error(404, 40401);
    // A bad name is the broker's invalid-topic error.
    post(
        s.addr,
        "/topics/bad%20name",
        JSON_V2,
        &json!({"records": [{"value": 1}]}),
    )
    .await
    .assert_error(422, 42202);
}

#[tokio::test]
async fn topic_metadata() {
    let s = start(false).await;
    s.create_topic("b-topic", 1).await;
    s.create_topic("a-topic", 3).await;
    let r = get(s.addr, "/topics").await;
    assert_eq!(
        r.header("content-type"),
        Some("application/vnd.kafka.v2+json")
    );
    assert_eq!(r.json(), json!(["a-topic", "b-topic"]));

    let t = get(s.addr, "/topics/a-topic").await.json();
    assert_eq!(t["name"], "a-topic");
    assert!(t["configs"]["retention.ms"].is_string(), "{t}");
    assert_eq!(t["partitions"].as_array().map(Vec::len), Some(3));
    assert_eq!(
        t["partitions"][2],
        json!({"partition": 2, "leader": 1, "replicas": [{"broker": 1, "leader": true, "in_sync": true}]})
    );
    let ps = get(s.addr, "/topics/a-topic/partitions").await.json();
    assert_eq!(ps, t["partitions"]);
    let p = get(s.addr, "/topics/a-topic/partitions/1").await.json();
    assert_eq!(p["partition"], 1);
}

#[tokio::test]
async fn malformed_requests_get_json_errors() {
    let s = start(true).await;
    s.create_topic("t", 1).await;
    let raw = |ct: &'static str, body: &'static [u8]| {
        let addr = s.addr;
        async move { request(addr, "POST", "/topics/t", &[("Content-Type", ct)], body).await }
    };
    raw(JSON_V2, b"{\"records\": [")
        .await
        .assert_error(400, 40001);
    raw(JSON_V2, b"").await.assert_error(400, 40001);
    raw(JSON_V2, b"{\"records\": 5}")
        .await
        .assert_error(422, 42201);
    raw(JSON_V2, b"{\"records\": []}")
        .await
        .assert_error(422, 42201);
    raw(BINARY_V2, b"{\"records\": [{\"value\": \"%%%\"}]}")
        .await
        .assert_error(422, 42203);
    raw("text/plain", b"{\"records\": [{\"value\": 1}]}")
        .await
        .assert_error(415, 41501);
    raw(
        "application/vnd.kafka.avro.v2+json",
        b"{\"records\": [{\"value\": 1}]}",
    )
    .await
    .assert_error(415, 41501);
    request(
        s.addr,
        "POST",
        "/topics/t",
        &[],
        b"{\"records\": [{\"value\": 1}]}",
    )
    .await
    .assert_error(415, 41501);
    // Nothing was written, and a malformed produce never auto-creates.
    raw(JSON_V2, b"{\"records\": [")
        .await
        .assert_error(400, 40001);
    let r = request(
        s.addr,
        "POST",
        "/topics/new-topic",
        &[("Content-Type", JSON_V2)],
        b"{",
    )
    .await;
    r.assert_error(400, 40001);
    assert!(s.broker.topic("new-topic").is_none());
    let r = get(s.addr, "/topics/t/partitions/0/records?offset=0&timeout=0").await;
    assert_eq!(r.json(), json!([]));

    // Query parameters.
    get(s.addr, "/topics/t/partitions/0/records")
        .await
        .assert_error(422, 42204);
    get(s.addr, "/topics/t/partitions/0/records?offset=-1")
        .await
        .assert_error(422, 42204);
    get_accept(
        s.addr,
        "/topics/t/partitions/0/records?offset=0",
        "text/html",
    )
    .await
    .assert_error(406, 40601);

    // Routing errors are JSON too.
    get(s.addr, "/nope").await.assert_error(404, 40400);
    let r = request(s.addr, "DELETE", "/topics", &[], b"").await;
    r.assert_error(405, 40500);
    assert!(r.header("allow").is_some(), "{r:?}");
}

#[tokio::test]
async fn oversized_body_is_413_json() {
    let s = start(false).await;
    s.create_topic("t", 1).await;
    // Announce a body over the limit and send a little of it: the server answers from the
    // declared length, without waiting for (or buffering) the rest.
    let mut stream = TcpStream::connect(s.addr).await.expect("connect");
    let head = format!(
        "POST /topics/t HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {JSON_V2}\r\nContent-Length: {}\r\n\r\n{{\"records\":[",
        (32 << 20) + 1
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    parse_response(&raw).assert_error(413, 41301);
}

#[tokio::test]
async fn large_requests_split_into_batches_and_fail_per_record() {
    let s = start(false).await;
    s.create_topic("big", 1).await;
    // Three 600 KB values: more than one 1 MiB batch (max.message.bytes), so the request is
    // split, and the offsets stay dense and in request order.
    let value = b64(&"x".repeat(600_000));
    let records: Vec<Value> = (0..3).map(|_| json!({ "value": value })).collect();
    let r = post(
        s.addr,
        "/topics/big",
        BINARY_V2,
        &json!({ "records": records }),
    )
    .await;
    assert_eq!(offsets(&r), vec![(0, 0), (0, 1), (0, 2)]);

    // A record over max.message.bytes on its own: only it fails (non-retriable), the
    // request still answers 200 and the others are appended.
    let huge = b64(&"y".repeat(1_100_000));
    let r = post(
        s.addr,
        "/topics/big",
        BINARY_V2,
        &json!({"records": [{"value": b64("a")}, {"value": huge}, {"value": b64("b")}]}),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let body = r.json();
    let o = &body["offsets"];
    assert_eq!(
        (o[0]["offset"].as_i64(), o[0]["error_code"].as_i64()),
        (Some(3), None)
    );
    assert_eq!(o[1]["offset"], Value::Null);
    assert_eq!(o[1]["error_code"], 2);
    assert!(o[1]["error"].is_string());
    assert_eq!(o[2]["offset"], 4);
}

#[tokio::test]
async fn offset_out_of_range_is_416() {
    let s = start(false).await;
    s.create_topic("t", 1).await;
    let r = post(
        s.addr,
        "/topics/t",
        BINARY_V2,
        &json!({"records": [{"value": b64("v")}]}),
    )
    .await;
    assert_eq!(offsets(&r), vec![(0, 0)]);
    get(s.addr, "/topics/t/partitions/0/records?offset=5&timeout=0")
        .await
        .assert_error(416, 41601);
}

#[tokio::test]
async fn v3_topic_admin() {
    let s = start(false).await;
    let c = "oxbow-test-cluster";
    let r = get(s.addr, "/v3/clusters").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["data"][0]["cluster_id"], c);
    assert_eq!(
        get(s.addr, &format!("/v3/clusters/{c}")).await.json()["cluster_id"],
        c
    );

    let create = json!({"topic_name": "admin-t", "partitions_count": 3, "replication_factor": 1,
        "configs": [{"name": "retention.ms", "value": "60000"}]});
    let path = format!("/v3/clusters/{c}/topics");
    let r = post(s.addr, &path, "application/json", &create).await;
    assert_eq!(r.status, 201, "{r:?}");
    let t = r.json();
    assert_eq!(
        (t["topic_name"].as_str(), t["partitions_count"].as_i64()),
        (Some("admin-t"), Some(3))
    );
    assert_eq!(t["kind"], "KafkaTopic");
    let meta = s.broker.topic("admin-t").expect("created");
    assert_eq!(meta.configs.retention_ms(), 60_000);

    post(s.addr, &path, "application/json", &create)
        .await
        .assert_error(409, 40902);
    post(
        s.addr,
        &path,
        "application/json",
        &json!({"topic_name": "bad name"}),
    )
    .await
    .assert_error(422, 42202);
    post(
        s.addr,
        &path,
        "application/json",
        &json!({"topic_name": "x", "configs": [{"name": "nope", "value": "1"}]}),
    )
    .await
    .assert_error(422, 42205);
    post(s.addr, &path, "text/plain", &create)
        .await
        .assert_error(415, 41501);
    post(
        s.addr,
        &path,
        "application/json",
        &json!({"partitions_count": 1}),
    )
    .await
    .assert_error(422, 42201);

    let list = get(s.addr, &path).await.json();
    assert_eq!(list["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        get(s.addr, &format!("{path}/admin-t")).await.json()["partitions_count"],
        3
    );

    let r = request(s.addr, "DELETE", &format!("{path}/admin-t"), &[], b"").await;
    assert_eq!(r.status, 204, "{r:?}");
    assert!(s.broker.topic("admin-t").is_none());
    request(s.addr, "DELETE", &format!("{path}/admin-t"), &[], b"")
        .await
        .assert_error(404, 40401);
    assert_eq!(get(s.addr, "/topics").await.json(), json!([]));

    get(s.addr, "/v3/clusters/other/topics")
        .await
        .assert_error(404, 40404);
    post(
        s.addr,
        "/v3/clusters/other/topics",
        "application/json",
        &create,
    )
    .await
    .assert_error(404, 40404);
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let s = start(false).await;
    let r = get(s.addr, "/healthz").await;
    assert_eq!((r.status, r.json()), (200, json!({"status": "ok"})));

    let r = get(s.addr, "/readyz").await;
    assert_eq!(r.status, 503);
    assert!(r.json()["status"].is_string());
    s.ready.store(true, Ordering::Release);
    assert_eq!(get(s.addr, "/readyz").await.status, 200);

    let r = get(s.addr, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")));
    let text = String::from_utf8_lossy(&r.body).to_string();
    let requests: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("oxbow_http_requests_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("http request counter");
    // healthz, readyz twice, and this request.
    assert_eq!(requests, 4.0);

    // The metadata footprint appears once sampled (cluster::history does every 30 s).
    s.broker
        .metrics
        .set_metadata_footprint(oxbow_metadata::MetadataFootprint {
            revision: 41,
            compacted_revision: Some(30),
            db_bytes: 65_536,
            db_bytes_in_use: Some(32_768),
            keys: 7,
        });
    let text = String::from_utf8_lossy(&get(s.addr, "/metrics").await.body).to_string();
    for line in [
        "oxbow_metadata_db_bytes 65536",
        "oxbow_metadata_db_in_use_bytes 32768",
        "oxbow_metadata_keys 7",
        "oxbow_metadata_revision 41",
        "oxbow_metadata_compacted_revision 30",
        "oxbow_metadata_compactions_total 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
}
