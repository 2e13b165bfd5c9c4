//! The console's read-only JSON (v3 brokers, partitions, consumer groups and their lags)
//! and the console's own files, over real sockets against a real `Broker` (see
//! `support`): shapes, 404s, and ACL refusals.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

mod support;

use oxbow_gateway::security::acl::{AuthorizerKind, AuthorizerSettings};
use oxbow_gateway::security::Principal;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use support::{request, start, start_with_authorization, Response};

const CLUSTER: &str = "/v3/clusters/oxbow-test-cluster";
const JSON_V2: &str = "application/vnd.kafka.json.v2+json";
const V2: &str = "application/vnd.kafka.v2+json";

async fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, &[], b"").await
}

async fn post(addr: SocketAddr, path: &str, content_type: &str, body: &Value) -> Response {
    let body = serde_json::to_vec(body).expect("body");
    request(addr, "POST", path, &[("Content-Type", content_type)], &body).await
}

async fn produce(addr: SocketAddr, topic: &str, partition: i32, n: usize) {
    let records: Vec<Value> = (0..n).map(|i| json!({ "value": { "n": i } })).collect();
    post(
        addr,
        &format!("/topics/{topic}/partitions/{partition}"),
        JSON_V2,
        &json!({ "records": records }),
    )
    .await
    .assert_status(200);
}

#[tokio::test]
async fn brokers_are_listed_with_their_load() {
    let s = start(false).await;
    s.create_topic("t", 3).await;
    let r = get(s.addr, &format!("{CLUSTER}/brokers")).await;
    r.assert_status(200);
    let body = r.json();
    assert_eq!(body["kind"], "KafkaBrokerList");
    let b = &body["data"][0];
    assert_eq!(b["kind"], "KafkaBroker");
    assert_eq!(b["broker_id"], 1);
    assert_eq!(
        (b["host"].as_str(), b["port"].as_i64()),
        (Some("127.0.0.1"), Some(9092))
    );
    assert_eq!(b["is_this_broker"], true);
    assert_eq!(b["lease"], "valid");
    assert_eq!(b["partitions_led"], 3);
    assert_eq!(b["metadata"]["self"], format!("{CLUSTER}/brokers/1"));

    get(s.addr, &format!("{CLUSTER}/brokers/1"))
        .await
        .assert_status(200);
    get(s.addr, &format!("{CLUSTER}/brokers/9"))
        .await
        .assert_error(404, 40407);
    get(s.addr, &format!("{CLUSTER}/brokers/x"))
        .await
        .assert_error(404, 40407);
    get(s.addr, "/v3/clusters/other/brokers")
        .await
        .assert_error(404, 40404);
}

#[tokio::test]
async fn partitions_show_replicas_offsets_and_rates() {
    let s = start(false).await;
    s.create_topic("t", 2).await;
    // Two samples around a produce: the rate is taken between them (of a partition open at
    // both: the first produce opens it).
    produce(s.addr, "t", 1, 1).await;
    let t0 = Instant::now();
    s.broker.samples.sample(&s.broker, t0, 0);
    produce(s.addr, "t", 1, 5).await;
    s.broker
        .samples
        .sample(&s.broker, t0 + Duration::from_secs(5), 5000);

    let r = get(s.addr, &format!("{CLUSTER}/topics/t/partitions")).await;
    r.assert_status(200);
    let body = r.json();
    assert_eq!(body["kind"], "KafkaPartitionList");
    let p1 = &body["data"][1];
    assert_eq!(p1["partition_id"], 1);
    assert_eq!(p1["leader_id"], 1);
    assert_eq!(p1["replica_ids"], json!([1]));
    assert_eq!(p1["isr_ids"], json!([1]));
    assert_eq!(p1["under_replicated"], false);
    assert_eq!(p1["high_watermark"], 6);
    assert_eq!(p1["records_per_sec"], 1.0);
    assert_eq!(
        p1["leader"]["related"],
        format!("{CLUSTER}/topics/t/partitions/1/replicas/1")
    );
    // Led here but never opened (no produce or fetch yet): nothing to report.
    assert_eq!(body["data"][0]["high_watermark"], Value::Null);

    let topic = get(s.addr, &format!("{CLUSTER}/topics/t")).await.json();
    assert_eq!(topic["under_replicated_partitions"], 0);
    assert_eq!(topic["offline_partitions"], 0);
    assert_eq!(topic["records_per_sec"], 1.0);
    assert_eq!(topic["partitions_led_here"], 2);

    get(s.addr, &format!("{CLUSTER}/topics/t/partitions/1"))
        .await
        .assert_status(200);
    get(s.addr, &format!("{CLUSTER}/topics/t/partitions/7"))
        .await
        .assert_error(404, 40402);
    get(s.addr, &format!("{CLUSTER}/topics/nope/partitions"))
        .await
        .assert_error(404, 40401);
}

#[tokio::test]
async fn records_can_start_at_a_timestamp() {
    let s = start(false).await;
    s.create_topic("t", 1).await;
    produce(s.addr, "t", 0, 3).await;
    let all = get(
        s.addr,
        "/topics/t/partitions/0/records?offset=0&timeout=0&timestamps=true",
    )
    .await
    .json();
    // The first record at or after the first record's timestamp is the first record.
    let ts = all[0]["timestamp"].as_i64().expect("timestamp");
    let from = get(
        s.addr,
        &format!("/topics/t/partitions/0/records?timestamp={ts}&timeout=0"),
    )
    .await
    .json();
    assert_eq!(from[0]["offset"], 0);
    assert_eq!(from.as_array().map(Vec::len), Some(3));
    let later = get(
        s.addr,
        &format!(
            "/topics/t/partitions/0/records?timestamp={}&timeout=0",
            ts + 60_000
        ),
    )
    .await;
    later.assert_status(200);
    assert_eq!(later.json(), json!([]));
}

#[tokio::test]
async fn a_group_with_committed_offsets_shows_its_lag_and_history() {
    let s = start(false).await;
    s.create_topic("t", 2).await;
    produce(s.addr, "t", 0, 10).await;
    produce(s.addr, "t", 1, 4).await;
    s.broker
        .coordinator
        .commit_offsets(
            "g",
            vec![
                ("t".into(), 0, 3, -1, String::new()),
                ("t".into(), 1, 4, -1, String::new()),
            ],
        )
        .await
        .expect("commit");
    s.broker.samples.sample(&s.broker, Instant::now(), 1_000);

    let list = get(s.addr, &format!("{CLUSTER}/consumer-groups")).await;
    list.assert_status(200);
    let list = list.json();
    assert_eq!(list["kind"], "KafkaConsumerGroupList");
    assert_eq!(list["data"][0]["consumer_group_id"], "g");

    let g = get(s.addr, &format!("{CLUSTER}/consumer-groups/g")).await;
    g.assert_status(200);
    let g = g.json();
    assert_eq!(g["kind"], "KafkaConsumerGroup");
    assert_eq!(g["state"], "EMPTY");
    assert_eq!(g["coordinator_id"], 1);
    assert_eq!(g["coordinated_here"], true);
    assert_eq!(g["members_count"], 0);
    assert_eq!(g["coordinator"]["related"], format!("{CLUSTER}/brokers/1"));

    let consumers = get(s.addr, &format!("{CLUSTER}/consumer-groups/g/consumers")).await;
    consumers.assert_status(200);
    assert_eq!(consumers.json()["data"], json!([]));

    let lags = get(s.addr, &format!("{CLUSTER}/consumer-groups/g/lags"))
        .await
        .json();
    let rows: Vec<(i64, i64, i64, i64)> = lags["data"]
        .as_array()
        .expect("lags")
        .iter()
        .map(|l| {
            let n = |k: &str| l[k].as_i64().expect(k);
            (
                n("partition_id"),
                n("current_offset"),
                n("log_end_offset"),
                n("lag"),
            )
        })
        .collect();
    assert_eq!(rows, vec![(0, 3, 10, 7), (1, 4, 4, 0)]);

    let summary = get(s.addr, &format!("{CLUSTER}/consumer-groups/g/lag-summary"))
        .await
        .json();
    assert_eq!(summary["kind"], "KafkaConsumerGroupLagSummary");
    assert_eq!(summary["total_lag"], 7);
    assert_eq!(summary["max_lag"], 7);
    assert_eq!(summary["max_lag_topic_name"], "t");
    assert_eq!(summary["max_lag_partition_id"], 0);
    assert_eq!(
        summary["lag_history"],
        json!([{ "time_ms": 1000, "total_lag": 7 }])
    );

    for path in ["", "/consumers", "/lags", "/lag-summary"] {
        get(s.addr, &format!("{CLUSTER}/consumer-groups/nope{path}"))
            .await
            .assert_error(404, 40406);
        get(
            s.addr,
            &format!("/v3/clusters/other/consumer-groups/g{path}"),
        )
        .await
        .assert_error(404, 40404);
    }
}

#[tokio::test]
async fn a_live_member_shows_its_assignment() {
    let s = start(false).await;
    s.create_topic("t", 2).await;
    let r = post(
        s.addr,
        "/consumers/live",
        V2,
        &json!({ "name": "i1", "format": "json" }),
    )
    .await;
    r.assert_status(200);
    let instance = "/consumers/live/instances/i1";
    post(
        s.addr,
        &format!("{instance}/subscription"),
        V2,
        &json!({ "topics": ["t"] }),
    )
    .await
    .assert_status(204);
    // Polls join the group; wait until the member holds both partitions.
    let deadline = Instant::now() + Duration::from_secs(30);
    let member = loop {
        request(
            s.addr,
            "GET",
            &format!("{instance}/records?timeout=200"),
            &[("Accept", JSON_V2)],
            b"",
        )
        .await
        .assert_status(200);
        let c = get(s.addr, &format!("{CLUSTER}/consumer-groups/live/consumers"))
            .await
            .json();
        let m = c["data"][0].clone();
        if m["assigned_partitions"].as_array().map_or(0, Vec::len) == 2 {
            break m;
        }
        assert!(Instant::now() < deadline, "never assigned: {c}");
    };
    assert_eq!(member["kind"], "KafkaConsumer");
    assert!(!member["client_id"].as_str().expect("client id").is_empty());
    assert!(!member["client_host"].as_str().expect("host").is_empty());
    assert_eq!(
        member["assigned_partitions"],
        json!([
            { "topic_name": "t", "partition_id": 0 },
            { "topic_name": "t", "partition_id": 1 }
        ])
    );
    let g = get(s.addr, &format!("{CLUSTER}/consumer-groups/live"))
        .await
        .json();
    assert_eq!(g["state"], "STABLE");
    assert_eq!(g["partition_assignor"], "range");
    assert_eq!(g["members_count"], 1);
}

fn acl_settings(super_users: &[Principal]) -> AuthorizerSettings {
    AuthorizerSettings {
        kind: AuthorizerKind::Acl,
        super_users: super_users.iter().cloned().collect(),
        allow_everyone_if_no_acl_found: false,
    }
}

#[tokio::test]
async fn acls_deny_the_console_data_but_not_its_page() {
    let s = start_with_authorization(false, acl_settings(&[])).await;
    s.create_topic("t", 1).await;
    s.broker
        .coordinator
        .commit_offsets("g", vec![("t".into(), 0, 0, -1, String::new())])
        .await
        .expect("commit");
    get(s.addr, &format!("{CLUSTER}/brokers"))
        .await
        .assert_error(403, 40301);
    get(s.addr, &format!("{CLUSTER}/brokers/1"))
        .await
        .assert_error(403, 40301);
    for path in ["", "/consumers", "/lags", "/lag-summary"] {
        get(s.addr, &format!("{CLUSTER}/consumer-groups/g{path}"))
            .await
            .assert_error(403, 40301);
    }
    get(s.addr, &format!("{CLUSTER}/topics/t/partitions"))
        .await
        .assert_error(403, 40301);
    // Lists leave out what may not be described.
    let list = get(s.addr, &format!("{CLUSTER}/consumer-groups")).await;
    list.assert_status(200);
    assert_eq!(list.json()["data"], json!([]));
    // The page holds no data and stays reachable; what it shows is what the API allows.
    get(s.addr, "/ui").await.assert_status(200);

    // Allowed (a super user): the same routes answer.
    let s = start_with_authorization(false, acl_settings(&[Principal::anonymous()])).await;
    s.create_topic("t", 1).await;
    s.broker
        .coordinator
        .commit_offsets("g", vec![("t".into(), 0, 0, -1, String::new())])
        .await
        .expect("commit");
    get(s.addr, &format!("{CLUSTER}/brokers"))
        .await
        .assert_status(200);
    get(s.addr, &format!("{CLUSTER}/consumer-groups/g/lags"))
        .await
        .assert_status(200);
}

#[tokio::test]
async fn the_console_is_served_with_a_strict_policy() {
    let s = start(false).await;
    for (path, content_type, marker) in [
        (
            "/ui",
            "text/html; charset=utf-8",
            "<title>Oxbow console</title>",
        ),
        ("/ui/", "text/html; charset=utf-8", "/ui/console.js"),
        (
            "/ui/console.js",
            "text/javascript; charset=utf-8",
            "\"use strict\"",
        ),
        ("/ui/console.css", "text/css; charset=utf-8", "--accent"),
    ] {
        let r = get(s.addr, path).await;
        r.assert_status(200);
        assert_eq!(r.header("content-type"), Some(content_type), "{path}");
        let csp = r.header("content-security-policy").expect("csp");
        assert!(csp.contains("default-src 'none'"), "{csp}");
        assert!(csp.contains("script-src 'self'"), "{csp}");
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        let body = String::from_utf8_lossy(&r.body);
        assert!(body.contains(marker), "{path}: no {marker}");
        // Nothing from another origin.
        assert!(!body.contains("https://"), "{path} names another origin");
    }
    let page = String::from_utf8_lossy(&get(s.addr, "/ui").await.body).to_string();
    assert!(
        !page.contains("<script>") && !page.contains("style="),
        "inline code"
    );
    get(s.addr, "/ui/nope.js").await.assert_error(404, 40400);
}
