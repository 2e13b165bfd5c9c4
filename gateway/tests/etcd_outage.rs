//! Issue 3, failure case "etcd loses quorum": `oxbow serve` on a 3-member etcd, two members
//! killed. Metadata operations must fail with "metadata unavailable" within their timeout,
//! the broker must keep serving the reads it can (records still in the partition's memory
//! tail), refuse acks=all produces once its lease has lapsed, and recover when etcd returns:
//! produces succeed again and every acknowledged record is readable at dense offsets.
//! Starts its own etcd (see `oxbow_metadata::testing`); fails without the `etcd` binary
//! unless `OXBOW_SKIP_ETCD=1`.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use oxbow_gateway::client::{Client, ConsumedRecord, ProduceOptions, ProduceRecord};
use oxbow_metadata::testing::{etcd_or_skip, EtcdCluster};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The broker's `--session-timeout` (its lease TTL).
const SESSION_TIMEOUT: Duration = Duration::from_secs(3);
/// A metadata call without quorum must fail within this (etcd op timeout 5 s + slack).
const METADATA_FAILS_WITHIN: Duration = Duration::from_secs(15);
/// Starting up, and recovering after etcd returns, must each finish within this.
const DEADLINE: Duration = Duration::from_secs(30);
/// The whole test.
const TEST_BOUND: Duration = Duration::from_secs(90);
const TOPIC: &str = "outage";

fn free_port() -> u16 {
    oxbow_metadata::testing::free_port().expect("a free port")
}

/// The `oxbow` process; killed and reaped on drop (also when the test panics).
struct Broker {
    child: Child,
    log: PathBuf,
}

impl Broker {
    fn start(dir: &Path, metadata_url: &str, kafka: &str, http: &str) -> Broker {
        let log = dir.join("oxbow.log");
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_oxbow"))
            .args(["serve", "--kafka-addr", kafka, "--http-addr", http])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--metadata", metadata_url])
            .args(["--session-timeout", "3s"])
            .args(["--log-format", "json"])
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start oxbow");
        Broker { child, log }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn record(value: &str) -> [ProduceRecord; 1] {
    [ProduceRecord::new(None, Bytes::from(value.to_string()))]
}

/// (offset, value) of fetched records.
fn values(records: &[ConsumedRecord]) -> Vec<(i64, String)> {
    records
        .iter()
        .map(|r| {
            let value = r.value.as_deref().map(String::from_utf8_lossy);
            (r.offset, value.unwrap_or_default().into_owned())
        })
        .collect()
}

/// Connects once the broker answers (it binds its ports before registering in etcd).
async fn connect(kafka: &str) -> Client {
    let started = Instant::now();
    loop {
        match Client::connect(kafka, Duration::from_secs(10)).await {
            Ok(c) => return c,
            Err(e) => {
                assert!(
                    started.elapsed() < DEADLINE,
                    "broker did not answer within {DEADLINE:?}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Every record of the partition from offset 0, as (offset, value).
async fn read_all(client: &mut Client) -> Vec<(i64, String)> {
    let hw = client
        .list_offsets(TOPIC, 0, oxbow_gateway::client::LATEST_TIMESTAMP)
        .await
        .expect("high watermark");
    let mut out = Vec::new();
    let mut next = 0;
    let started = Instant::now();
    while next < hw {
        assert!(
            started.elapsed() < DEADLINE,
            "reading back stalled at {next}"
        );
        let r = client
            .fetch(TOPIC, 0, next, Duration::from_millis(500), 1 << 20)
            .await
            .expect("fetch");
        out.extend(values(&r.records));
        next = r.next_offset;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_etcd_quorum_fails_metadata_keeps_reads_refuses_acks_then_recovers() {
    if !etcd_or_skip() {
        return;
    }
    tokio::time::timeout(TEST_BOUND, scenario())
        .await
        .unwrap_or_else(|_| panic!("the test did not finish within {TEST_BOUND:?}"));
}

async fn scenario() {
    // Declared before the broker, so the broker is dropped (killed) first.
    let mut etcd = EtcdCluster::start(3).expect("start etcd");
    let dir = tempfile::tempdir().expect("tmp");
    let kafka = format!("127.0.0.1:{}", free_port());
    let http = format!("127.0.0.1:{}", free_port());
    let broker = Broker::start(dir.path(), &etcd.url("outage"), &kafka, &http);
    let mut client = connect(&kafka).await;

    // Healthy: a topic, records acknowledged with acks=all, read back.
    client.create_topic(TOPIC, 1, 1, &[]).await.expect("create");
    // (offset, value) of every acknowledged record.
    let mut acked: Vec<(i64, String)> = Vec::new();
    for i in 0..5 {
        let value = format!("before-{i}");
        let offset = client
            .produce(TOPIC, 0, &record(&value), ProduceOptions::default())
            .await
            .expect("produce while healthy")
            .expect("acks=all answers");
        acked.push((offset, value));
    }
    assert_eq!(read_all(&mut client).await, acked);

    // Two of three members down: etcd has no quorum.
    etcd.kill(0);
    etcd.kill(1);
    let outage = Instant::now();

    // (a) An operation that needs metadata fails, within its timeout.
    let started = Instant::now();
    let err = client
        .create_topic("during-outage", 1, 1, &[])
        .await
        .expect_err("creating a topic needs etcd");
    let took = started.elapsed();
    eprintln!("create_topic without quorum failed after {took:?}: {err}");
    assert!(
        took < METADATA_FAILS_WITHIN,
        "create_topic took {took:?} to fail: {err}"
    );
    // The broker says why, in its log (lease keep-alive) and to the client.
    let waited = Instant::now();
    while !broker.log_text().contains("metadata unavailable") {
        assert!(
            waited.elapsed() < METADATA_FAILS_WITHIN,
            "the broker log never said \"metadata unavailable\" (client error: {err}):\n{}",
            broker.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        err.to_string().contains("metadata unavailable"),
        "the client's error should carry the reason: {err}"
    );

    // (b) Records produced before the outage are still served from the partition's tail.
    let started = Instant::now();
    let r = client
        .fetch(TOPIC, 0, 0, Duration::from_millis(100), 1 << 20)
        .await
        .expect("fetch during the outage");
    let took = started.elapsed();
    eprintln!("fetch during the outage took {took:?}");
    assert_eq!(
        values(&r.records),
        acked,
        "reads of data the broker holds need no etcd"
    );
    assert!(took < Duration::from_secs(5), "fetch took {took:?}");

    // (c) Once the lease has certainly lapsed, acks=all produces are refused.
    let lapsed = outage + SESSION_TIMEOUT + Duration::from_millis(500);
    tokio::time::sleep_until(lapsed.into()).await;
    let started = Instant::now();
    let err = client
        .produce(TOPIC, 0, &record("refused"), ProduceOptions::default())
        .await
        .expect_err("no acks=all while the broker cannot renew its lease");
    eprintln!(
        "produce after the lease lapsed refused after {:?}: {err}",
        started.elapsed()
    );
    assert!(err.to_string().contains("lease"), "{err}");

    // etcd returns: produces succeed again within the deadline.
    etcd.restart(0).expect("restart member 0");
    etcd.restart(1).expect("restart member 1");
    let back = Instant::now();
    eprintln!("etcd back {:?} after the outage began", outage.elapsed());
    let offset = loop {
        match client
            .produce(TOPIC, 0, &record("after-0"), ProduceOptions::default())
            .await
        {
            Ok(offset) => break offset.expect("acks=all answers"),
            Err(e) => {
                assert!(
                    back.elapsed() < DEADLINE,
                    "produce still refused {DEADLINE:?} after etcd returned: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    eprintln!(
        "produce succeeded {:?} after etcd returned ({})",
        back.elapsed(),
        if broker.log_text().contains("registered again") {
            "re-registered with a new lease"
        } else {
            "the old lease survived the outage"
        }
    );
    acked.push((offset, "after-0".to_string()));
    for i in 1..3 {
        let value = format!("after-{i}");
        let offset = client
            .produce(TOPIC, 0, &record(&value), ProduceOptions::default())
            .await
            .expect("produce after recovery")
            .expect("acks=all answers");
        acked.push((offset, value));
    }
    // Metadata operations work again too.
    client
        .create_topic("after-outage", 1, 1, &[])
        .await
        .expect("create a topic after recovery");

    // Everything acknowledged, before and after, at dense offsets; the refused produce
    // took no offset.
    let all = read_all(&mut client).await;
    assert_eq!(all, acked);
    let offsets: Vec<i64> = all.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, (0..8).collect::<Vec<i64>>(), "offsets are dense");
}
