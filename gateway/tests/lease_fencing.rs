//! `oxbow serve --metadata etcd://…` paused with SIGSTOP past `--session-timeout`: on SIGCONT
//! it must refuse the produce waiting for it (its lease expired, so another broker could
//! lead the partition), then re-register, bump the partition's leader epoch and serve again.
//! Starts its own etcd (see `oxbow_metadata::testing`); fails without the `etcd` binary
//! unless `OXBOW_SKIP_ETCD=1`.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use oxbow_gateway::client::{Client, ProduceOptions, ProduceRecord};
use oxbow_metadata::testing::{etcd_or_skip, EtcdCluster};
use oxbow_metadata::{EtcdSettings, EtcdStore, MetadataStore};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const DEADLINE: Duration = Duration::from_secs(20);

fn free_port() -> u16 {
    oxbow_metadata::testing::free_port().expect("a free port")
}

struct Broker(Child);

impl Broker {
    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.0.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {sig}");
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // A stopped process must be continued to die promptly on SIGKILL's reaping.
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.id().to_string()])
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_past_the_session_timeout_refuses_then_recovers() {
    if !etcd_or_skip() {
        return;
    }
    let etcd = EtcdCluster::start(1).expect("start etcd");
    let dir = tempfile::tempdir().expect("tmp");
    let (kp, hp) = (free_port(), free_port());
    let log = std::fs::File::create(dir.path().join("oxbow.log")).expect("log");
    let broker = Broker(
        Command::new(env!("CARGO_BIN_EXE_oxbow"))
            .args(["serve", "--kafka-addr", &format!("127.0.0.1:{kp}")])
            .args(["--http-addr", &format!("127.0.0.1:{hp}")])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--metadata", &etcd.url("sigstop")])
            .args(["--session-timeout", "2s"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start oxbow"),
    );
    let kafka = format!("127.0.0.1:{kp}");
    let started = Instant::now();
    while std::net::TcpStream::connect(&kafka).is_err() {
        assert!(started.elapsed() < DEADLINE, "broker did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let meta = EtcdStore::connect(EtcdSettings::new(etcd.endpoints(), "sigstop"))
        .await
        .expect("etcd");
    let mut client = Client::connect(&kafka, Duration::from_secs(10))
        .await
        .expect("connect");
    client.create_topic("t", 1, 1, &[]).await.expect("create");
    let record = || [ProduceRecord::new(None, Bytes::from_static(b"v"))];
    client
        .produce("t", 0, &record(), ProduceOptions::default())
        .await
        .expect("produce before the pause");

    // Paused past the session timeout: etcd drops the registration.
    let mut http = tokio::net::TcpStream::connect(("127.0.0.1", hp))
        .await
        .expect("http");
    broker.signal("-STOP");
    let paused = Instant::now();
    loop {
        let brokers = meta.list_brokers().await.expect("list");
        if brokers.is_empty() {
            break;
        }
        assert!(paused.elapsed() < DEADLINE, "lease never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A produce waits in the socket; the broker sees it first thing after SIGCONT.
    let body = r#"{"records":[{"value":"after-pause"}]}"#;
    let request = format!(
        "POST /topics/t/partitions/0 HTTP/1.1\r\nHost: oxbow\r\nContent-Type: application/vnd.kafka.json.v2+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    http.write_all(request.as_bytes()).await.expect("send");
    broker.signal("-CONT");
    let mut response = String::new();
    tokio::time::timeout(DEADLINE, http.read_to_string(&mut response))
        .await
        .expect("answered")
        .expect("read");
    assert!(
        response.contains("\"error_code\":1") && response.contains("lease"),
        "a produce after the lease expired must not be acknowledged: {response}"
    );

    // Then it comes back: registered again, the partition's epoch bumped, produce works.
    let back = Instant::now();
    loop {
        let registered = !meta.list_brokers().await.expect("list").is_empty();
        let epoch = meta
            .topic("t")
            .await
            .expect("topic")
            .map(|t| t.partitions[0].leader_epoch);
        if registered && epoch == Some(1) {
            break;
        }
        assert!(
            back.elapsed() < DEADLINE,
            "broker did not come back (epoch {epoch:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let offset = client
        .produce("t", 0, &record(), ProduceOptions::default())
        .await
        .expect("produce after recovery");
    assert_eq!(offset, Some(1), "the refused produce took no offset");
}
