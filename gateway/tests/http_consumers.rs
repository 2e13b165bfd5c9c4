//! REST Proxy v2 consumer instances end to end over real sockets: a real `Broker` behind
//! `http::router`, driven by the minimal HTTP/1.1 client in `tests/support`.
//!
//! Waiting is done by the server: polls long-poll (`timeout=`), so the loops below never
//! sleep; each has a deadline so a failure ends the test instead of hanging it.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

mod support;

use support::{request, start, Response};

use base64::prelude::{Engine, BASE64_STANDARD};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const V2: &str = "application/vnd.kafka.v2+json";
const JSON_V2: &str = "application/vnd.kafka.json.v2+json";
const BINARY_V2: &str = "application/vnd.kafka.binary.v2+json";
/// Longest any loop below waits for the group to settle or records to arrive.
const PATIENCE: Duration = Duration::from_secs(30);

async fn send(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> Response {
    match body {
        Some(b) => {
            let bytes = serde_json::to_vec(b).expect("body");
            request(addr, method, path, &[("Content-Type", V2)], &bytes).await
        }
        None => request(addr, method, path, &[], b"").await,
    }
}

/// Creates an instance; returns its path (`/consumers/{g}/instances/{id}`).
async fn create(addr: SocketAddr, group: &str, config: Value) -> String {
    let r = send(addr, "POST", &format!("/consumers/{group}"), Some(&config)).await;
    r.assert_status(200);
    assert_eq!(r.header("content-type"), Some(V2));
    let body = r.json();
    let id = body["instance_id"]
        .as_str()
        .expect("instance_id")
        .to_string();
    let path = format!("/consumers/{group}/instances/{id}");
    assert_eq!(body["base_uri"], json!(format!("http://{addr}{path}")));
    path
}

async fn produce(addr: SocketAddr, path: &str, content_type: &str, records: Value) {
    let body = serde_json::to_vec(&json!({ "records": records })).expect("body");
    let r = request(addr, "POST", path, &[("Content-Type", content_type)], &body).await;
    r.assert_status(200);
}

async fn poll(addr: SocketAddr, instance: &str, accept: &str, timeout_ms: u64) -> Vec<Value> {
    let r = request(
        addr,
        "GET",
        &format!("{instance}/records?timeout={timeout_ms}"),
        &[("Accept", accept)],
        b"",
    )
    .await;
    r.assert_status(200);
    assert_eq!(r.header("content-type"), Some(accept));
    r.json().as_array().expect("array").clone()
}

/// Polls until `n` records came (or panics after [`PATIENCE`]).
async fn poll_n(addr: SocketAddr, instance: &str, accept: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + PATIENCE;
    let mut out = Vec::new();
    while out.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} records: {out:?}",
            out.len()
        );
        out.extend(poll(addr, instance, accept, 500).await);
    }
    out
}

async fn assignment(addr: SocketAddr, instance: &str) -> BTreeSet<(String, i64)> {
    let r = send(addr, "GET", &format!("{instance}/assignments"), None).await;
    r.assert_status(200);
    r.json()["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| {
            (
                p["topic"].as_str().expect("topic").to_string(),
                p["partition"].as_i64().expect("partition"),
            )
        })
        .collect()
}

/// Polls every instance (keeping their memberships alive) until their assignments
/// together hold `partitions` partitions, each exactly once, with none empty.
async fn settle(addr: SocketAddr, instances: &[&str], accept: &str, partitions: usize) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut all = Vec::new();
        let mut empty = false;
        for i in instances {
            let got = poll(addr, i, accept, 200).await;
            assert!(got.is_empty(), "no records were produced yet: {got:?}");
            let a = assignment(addr, i).await;
            empty |= a.is_empty();
            all.extend(a);
        }
        let distinct: BTreeSet<_> = all.iter().cloned().collect();
        if !empty && all.len() == partitions && distinct.len() == partitions {
            return;
        }
        assert!(Instant::now() < deadline, "group never settled: {all:?}");
    }
}

fn offsets_of(r: &Response) -> BTreeMap<(String, i64), i64> {
    r.assert_status(200);
    r.json()["offsets"]
        .as_array()
        .expect("offsets")
        .iter()
        .map(|o| {
            (
                (
                    o["topic"].as_str().expect("topic").to_string(),
                    o["partition"].as_i64().expect("partition"),
                ),
                o["offset"].as_i64().expect("offset"),
            )
        })
        .collect()
}

#[tokio::test]
async fn subscribe_poll_commit_and_delete_json() {
    let s = start(false).await;
    s.create_topic("orders", 2).await;
    let c = create(
        s.addr,
        "g1",
        json!({"name": "c1", "format": "json", "auto.offset.reset": "earliest", "auto.commit.enable": "false"}),
    )
    .await;
    assert_eq!(c, "/consumers/g1/instances/c1");
    send(
        s.addr,
        "POST",
        &format!("{c}/subscription"),
        Some(&json!({"topics": ["orders"]})),
    )
    .await
    .assert_status(204);
    let r = send(s.addr, "GET", &format!("{c}/subscription"), None).await;
    assert_eq!(r.json(), json!({"topics": ["orders"]}));

    produce(
        s.addr,
        "/topics/orders/partitions/0",
        JSON_V2,
        json!([{"key": "a", "value": {"n": 1}}, {"value": [1, 2]}]),
    )
    .await;
    produce(
        s.addr,
        "/topics/orders/partitions/1",
        JSON_V2,
        json!([{"value": "x"}]),
    )
    .await;
    let mut got = poll_n(s.addr, &c, JSON_V2, 3).await;
    got.sort_by_key(|r| (r["partition"].as_i64(), r["offset"].as_i64()));
    assert_eq!(
        got,
        vec![
            json!({"topic": "orders", "key": "a", "value": {"n": 1}, "partition": 0, "offset": 0}),
            json!({"topic": "orders", "key": null, "value": [1, 2], "partition": 0, "offset": 1}),
            json!({"topic": "orders", "key": null, "value": "x", "partition": 1, "offset": 0}),
        ]
    );
    assert!(poll(s.addr, &c, JSON_V2, 100).await.is_empty());

    // Nothing committed yet (auto-commit is off).
    let r = send(s.addr, "GET", &format!("{c}/offsets"), None).await;
    assert!(offsets_of(&r).is_empty(), "{r:?}");
    // Commit without a body: every position (the next offset to read).
    send(s.addr, "POST", &format!("{c}/offsets"), None)
        .await
        .assert_status(200);
    let r = send(s.addr, "GET", &format!("{c}/offsets"), None).await;
    assert_eq!(
        offsets_of(&r),
        BTreeMap::from([(("orders".into(), 0), 2), (("orders".into(), 1), 1)])
    );
    // An explicit offset names the last record consumed: N + 1 is stored.
    send(
        s.addr,
        "POST",
        &format!("{c}/offsets"),
        Some(&json!({"offsets": [{"topic": "orders", "partition": 0, "offset": 0, "metadata": "m"}]})),
    )
    .await
    .assert_status(200);
    let r = send(
        s.addr,
        "GET",
        &format!("{c}/offsets"),
        Some(&json!({"partitions": [{"topic": "orders", "partition": 0}]})),
    )
    .await;
    assert_eq!(
        r.json(),
        json!({"offsets": [{"topic": "orders", "partition": 0, "offset": 1, "metadata": "m"}]})
    );

    // The wrong embedded format is refused.
    let r = request(
        s.addr,
        "GET",
        &format!("{c}/records"),
        &[("Accept", BINARY_V2)],
        b"",
    )
    .await;
    r.assert_error(406, 40601);

    send(s.addr, "DELETE", &c, None).await.assert_status(204);
    send(s.addr, "DELETE", &c, None)
        .await
        .assert_error(404, 40403);
    let r = request(
        s.addr,
        "GET",
        &format!("{c}/records"),
        &[("Accept", JSON_V2)],
        b"",
    )
    .await;
    r.assert_error(404, 40403);

    // A new member of the group resumes from what was committed.
    let c2 = create(
        s.addr,
        "g1",
        json!({"format": "json", "auto.offset.reset": "earliest"}),
    )
    .await;
    send(
        s.addr,
        "POST",
        &format!("{c2}/subscription"),
        Some(&json!({"topics": ["orders"]})),
    )
    .await
    .assert_status(204);
    let got = poll_n(s.addr, &c2, JSON_V2, 1).await;
    assert_eq!(got[0]["partition"], 0);
    assert_eq!(got[0]["offset"], 1);
    // Auto-commit (the default) stored the position after the poll.
    let r = send(s.addr, "GET", &format!("{c2}/offsets"), None).await;
    assert_eq!(offsets_of(&r)[&("orders".to_string(), 0)], 2);
    send(s.addr, "DELETE", &c2, None).await.assert_status(204);
}

#[tokio::test]
async fn manual_assignment_binary_and_seek() {
    let s = start(false).await;
    s.create_topic("bin", 2).await;
    produce(
        s.addr,
        "/topics/bin/partitions/1",
        BINARY_V2,
        json!([
            {"key": BASE64_STANDARD.encode("k"), "value": BASE64_STANDARD.encode([0u8, 255])},
            {"value": BASE64_STANDARD.encode("two")},
            {"value": BASE64_STANDARD.encode("three")}
        ]),
    )
    .await;
    let c = create(
        s.addr,
        "g2",
        json!({"auto.offset.reset": "earliest", "auto.commit.enable": false}),
    )
    .await;
    send(
        s.addr,
        "POST",
        &format!("{c}/assignments"),
        Some(&json!({"partitions": [{"topic": "bin", "partition": 1}]})),
    )
    .await
    .assert_status(204);
    assert_eq!(
        assignment(s.addr, &c).await,
        BTreeSet::from([("bin".to_string(), 1)])
    );
    // No Accept header: the instance's own format.
    let r = request(s.addr, "GET", &format!("{c}/records?timeout=100"), &[], b"").await;
    r.assert_status(200);
    assert_eq!(r.header("content-type"), Some(BINARY_V2));
    let got = r.json();
    assert_eq!(got.as_array().map(Vec::len), Some(3), "{got}");
    assert_eq!(got[0]["key"], json!(BASE64_STANDARD.encode("k")));
    assert_eq!(got[0]["value"], json!(BASE64_STANDARD.encode([0u8, 255])));
    assert_eq!(got[2]["offset"], 2);
    let r = request(
        s.addr,
        "GET",
        &format!("{c}/records"),
        &[("Accept", JSON_V2)],
        b"",
    )
    .await;
    r.assert_error(406, 40601);

    // Seek back to the beginning, then to offset 2, then to the end.
    let partitions = json!({"partitions": [{"topic": "bin", "partition": 1}]});
    send(
        s.addr,
        "POST",
        &format!("{c}/positions/beginning"),
        Some(&partitions),
    )
    .await
    .assert_status(204);
    let got = poll(s.addr, &c, BINARY_V2, 100).await;
    assert_eq!(got.len(), 3);
    send(
        s.addr,
        "POST",
        &format!("{c}/positions"),
        Some(&json!({"offsets": [{"topic": "bin", "partition": 1, "offset": 2}]})),
    )
    .await
    .assert_status(204);
    let got = poll(s.addr, &c, BINARY_V2, 100).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["value"], json!(BASE64_STANDARD.encode("three")));
    send(
        s.addr,
        "POST",
        &format!("{c}/positions/end"),
        Some(&partitions),
    )
    .await
    .assert_status(204);
    assert!(poll(s.addr, &c, BINARY_V2, 100).await.is_empty());
    // Seeking a partition that is not assigned is refused.
    let r = send(
        s.addr,
        "POST",
        &format!("{c}/positions/beginning"),
        Some(&json!({"partitions": [{"topic": "bin", "partition": 0}]})),
    )
    .await;
    r.assert_error(409, 40903);
    // A manual assignment excludes a subscription.
    let r = send(
        s.addr,
        "POST",
        &format!("{c}/subscription"),
        Some(&json!({"topics": ["bin"]})),
    )
    .await;
    r.assert_error(409, 40903);
    // A simple consumer (no members in its group) may commit.
    send(
        s.addr,
        "POST",
        &format!("{c}/offsets"),
        Some(&json!({"offsets": [{"topic": "bin", "partition": 1, "offset": 2}]})),
    )
    .await
    .assert_status(200);
    let r = send(s.addr, "GET", &format!("{c}/offsets"), None).await;
    assert_eq!(
        offsets_of(&r),
        BTreeMap::from([(("bin".to_string(), 1), 3)])
    );
    send(s.addr, "DELETE", &c, None).await.assert_status(204);
}

#[tokio::test]
async fn two_instances_split_the_partitions() {
    let s = start(false).await;
    s.create_topic("shared", 4).await;
    let config = json!({"format": "binary", "auto.offset.reset": "earliest"});
    let a = create(s.addr, "g3", config.clone()).await;
    let b = create(s.addr, "g3", config).await;
    for c in [&a, &b] {
        send(
            s.addr,
            "POST",
            &format!("{c}/subscription"),
            Some(&json!({"topics": ["shared"]})),
        )
        .await
        .assert_status(204);
    }
    settle(s.addr, &[&a, &b], BINARY_V2, 4).await;
    let (assigned_a, assigned_b) = (assignment(s.addr, &a).await, assignment(s.addr, &b).await);
    assert_eq!((assigned_a.len(), assigned_b.len()), (2, 2));

    for p in 0..4 {
        let records: Vec<Value> = (0..5)
            .map(|i| json!({"value": BASE64_STANDARD.encode(format!("{p}-{i}"))}))
            .collect();
        produce(
            s.addr,
            &format!("/topics/shared/partitions/{p}"),
            BINARY_V2,
            json!(records),
        )
        .await;
    }
    let deadline = Instant::now() + PATIENCE;
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    while got_a.len() + got_b.len() < 20 {
        assert!(Instant::now() < deadline, "{got_a:?} {got_b:?}");
        got_a.extend(poll(s.addr, &a, BINARY_V2, 200).await);
        got_b.extend(poll(s.addr, &b, BINARY_V2, 200).await);
    }
    let partitions = |got: &[Value]| -> BTreeSet<(String, i64)> {
        got.iter()
            .map(|r| ("shared".to_string(), r["partition"].as_i64().expect("p")))
            .collect()
    };
    // Each partition was read by exactly its owner, each record once.
    assert_eq!(partitions(&got_a), assigned_a);
    assert_eq!(partitions(&got_b), assigned_b);
    assert_eq!(got_a.len() + got_b.len(), 20);

    // One unsubscribes (it leaves the group): the other takes over every partition, from
    // the committed offsets.
    send(s.addr, "DELETE", &format!("{a}/subscription"), None)
        .await
        .assert_status(204);
    let r = send(s.addr, "GET", &format!("{a}/subscription"), None).await;
    assert_eq!(r.json(), json!({"topics": []}));
    assert!(assignment(s.addr, &a).await.is_empty());
    settle(s.addr, &[&b], BINARY_V2, 4).await;
    send(s.addr, "DELETE", &a, None).await.assert_status(204);
    produce(
        s.addr,
        "/topics/shared/partitions/0",
        BINARY_V2,
        json!([{"value": BASE64_STANDARD.encode("late")}]),
    )
    .await;
    let got = poll_n(s.addr, &b, BINARY_V2, 1).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["value"], json!(BASE64_STANDARD.encode("late")));
    send(s.addr, "DELETE", &b, None).await.assert_status(204);
}

#[tokio::test]
async fn subscription_to_a_topic_created_later() {
    let s = start(false).await;
    let c = create(
        s.addr,
        "g4",
        json!({"format": "json", "auto.offset.reset": "earliest"}),
    )
    .await;
    send(
        s.addr,
        "POST",
        &format!("{c}/subscription"),
        Some(&json!({"topics": ["later"]})),
    )
    .await
    .assert_status(204);
    assert!(poll(s.addr, &c, JSON_V2, 1500).await.is_empty());
    assert!(assignment(s.addr, &c).await.is_empty());
    // The instance leads its group: it notices the new topic and assigns it to itself.
    s.create_topic("later", 2).await;
    produce(
        s.addr,
        "/topics/later/partitions/1",
        JSON_V2,
        json!([{"value": 42}]),
    )
    .await;
    let got = poll_n(s.addr, &c, JSON_V2, 1).await;
    assert_eq!(got[0]["value"], 42);
    assert_eq!(assignment(s.addr, &c).await.len(), 2);
}

#[tokio::test]
async fn a_pattern_subscription_follows_matching_topics_as_they_appear() {
    let s = start(false).await;
    s.create_topic("orders-eu", 1).await;
    s.create_topic("payments", 1).await;
    let c = create(
        s.addr,
        "g-pattern",
        json!({"format": "json", "auto.offset.reset": "earliest"}),
    )
    .await;
    send(
        s.addr,
        "POST",
        &format!("{c}/subscription"),
        Some(&json!({"topic_pattern": "orders-.*"})),
    )
    .await
    .assert_status(204);
    let sub = send(s.addr, "GET", &format!("{c}/subscription"), None).await;
    sub.assert_status(200);
    assert_eq!(sub.json()["topics"], json!(["orders-eu"]));
    produce(s.addr, "/topics/payments", JSON_V2, json!([{"value": "p"}])).await;
    produce(
        s.addr,
        "/topics/orders-eu",
        JSON_V2,
        json!([{"value": "eu"}]),
    )
    .await;
    let got = poll_n(s.addr, &c, JSON_V2, 1).await;
    assert_eq!(got[0]["topic"], "orders-eu");
    // A topic created later that matches joins the subscription (a rebalance).
    s.create_topic("orders-us", 1).await;
    produce(
        s.addr,
        "/topics/orders-us",
        JSON_V2,
        json!([{"value": "us"}]),
    )
    .await;
    let got = poll_n(s.addr, &c, JSON_V2, 1).await;
    assert_eq!(got[0]["topic"], "orders-us");
    assert_eq!(
        assignment(s.addr, &c).await,
        BTreeSet::from([("orders-eu".to_string(), 0), ("orders-us".to_string(), 0)])
    );
    // A bad pattern is refused.
    let r = send(
        s.addr,
        "POST",
        &format!("{c}/subscription"),
        Some(&json!({"topic_pattern": "orders-("})),
    )
    .await;
    r.assert_status(422);
}

#[tokio::test]
async fn a_group_without_the_range_assignor_refuses_the_instance() {
    let s = start(false).await;
    s.create_topic("t", 1).await;
    // A member that only speaks cooperative-sticky holds the group.
    let joined = s
        .broker
        .coordinator
        .join(
            "g5",
            oxbow_gateway::groups::group::JoinRequest {
                member_id: String::new(),
                instance_id: None,
                client_id: "other".into(),
                client_host: "test".into(),
                session_timeout_ms: 30_000,
                rebalance_timeout_ms: 30_000,
                protocol_type: "consumer".into(),
                protocols: vec![("cooperative-sticky".into(), bytes::Bytes::new())],
                require_known_member_id: false,
            },
        )
        .await;
    assert_eq!(joined.error, 0, "{joined:?}");
    let c = create(s.addr, "g5", json!({})).await;
    send(
        s.addr,
        "POST",
        &format!("{c}/subscription"),
        Some(&json!({"topics": ["t"]})),
    )
    .await
    .assert_status(204);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = request(s.addr, "GET", &format!("{c}/records?timeout=200"), &[], b"").await;
        if r.status == 409 {
            r.assert_error(409, 40903);
            let message = r.json()["message"].as_str().unwrap_or_default().to_string();
            assert!(message.contains("InconsistentGroupProtocol"), "{message}");
            break;
        }
        r.assert_status(200);
        assert!(Instant::now() < deadline, "the refusal was never reported");
    }
}

#[tokio::test]
async fn request_errors() {
    let s = start(false).await;
    s.create_topic("t", 1).await;
    let missing = "/consumers/g/instances/nobody";
    for (method, path) in [
        ("DELETE", missing.to_string()),
        ("GET", format!("{missing}/subscription")),
        ("GET", format!("{missing}/assignments")),
        ("GET", format!("{missing}/records")),
        ("GET", format!("{missing}/offsets")),
        ("POST", format!("{missing}/offsets")),
    ] {
        send(s.addr, method, &path, None)
            .await
            .assert_error(404, 40403);
    }
    let c = create(s.addr, "g", json!({"name": "dup"})).await;
    let r = send(
        s.addr,
        "POST",
        "/consumers/g",
        Some(&json!({"name": "dup"})),
    )
    .await;
    r.assert_error(409, 40902);
    // The same name in another group is another instance.
    create(s.addr, "other", json!({"name": "dup"})).await;
    let r = send(
        s.addr,
        "POST",
        "/consumers/g",
        Some(&json!({"format": "avro"})),
    )
    .await;
    r.assert_error(422, 42201);
    let r = send(
        s.addr,
        "POST",
        &format!("{c}/subscription"),
        Some(&json!({"topic_pattern": "t.*("})),
    )
    .await;
    r.assert_error(422, 42201);
    let r = request(
        s.addr,
        "POST",
        &format!("{c}/subscription"),
        &[("Content-Type", V2)],
        b"{",
    )
    .await;
    r.assert_error(400, 40001);
    let r = send(
        s.addr,
        "POST",
        &format!("{c}/assignments"),
        Some(&json!({"partitions": [{"topic": "nope", "partition": 0}]})),
    )
    .await;
    r.assert_error(404, 40401);
    let r = send(
        s.addr,
        "POST",
        &format!("{c}/assignments"),
        Some(&json!({"partitions": [{"topic": "t", "partition": 5}]})),
    )
    .await;
    r.assert_error(404, 40402);
    let r = send(s.addr, "PUT", &c, None).await;
    r.assert_error(405, 40500);
    // Polling before subscribing or assigning anything is a client bug, reported as such.
    let r = send(s.addr, "GET", &format!("{c}/records"), None).await;
    r.assert_error(409, 40903);
}
