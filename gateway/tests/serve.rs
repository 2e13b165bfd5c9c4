//! The real `oxbow` binary on ephemeral loopback ports: produce and fetch through the Kafka
//! protocol, graceful shutdown (exit 0), restart on the same data dir, `kill -9` recovery.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use oxbow_gateway::client::{Client, ProduceOptions, ProduceRecord};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    oxbow_metadata::testing::free_port().expect("a free port")
}

struct Broker {
    child: Child,
    kafka: String,
}

impl Broker {
    fn start(data_dir: &Path, kafka_port: u16, http_port: u16) -> Broker {
        let log = std::fs::File::create(data_dir.with_extension("log")).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_oxbow"))
            .args(["serve", "--kafka-addr"])
            .arg(format!("127.0.0.1:{kafka_port}"))
            .arg("--http-addr")
            .arg(format!("127.0.0.1:{http_port}"))
            .arg("--data-dir")
            .arg(data_dir)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start oxbow");
        let kafka = format!("127.0.0.1:{kafka_port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&kafka).is_err() {
            assert!(
                Instant::now() < deadline,
                "broker did not start within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Broker { child, kafka }
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "broker did not exit within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn produce_n(client: &mut Client, topic: &str, from: usize, n: usize) {
    for i in from..from + n {
        let record = ProduceRecord::new(None, Bytes::from(format!("v{i}")));
        client
            .produce(topic, 0, &[record], ProduceOptions::default())
            .await
            .expect("produce");
    }
}

async fn read_all(client: &mut Client, topic: &str) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let r = client
            .fetch(topic, 0, offset, Duration::from_millis(100), 1 << 20)
            .await
            .expect("fetch");
        if r.records.is_empty() && offset >= r.high_watermark {
            return out;
        }
        for rec in &r.records {
            let value = rec
                .value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned());
            out.push((rec.offset, value.unwrap_or_default()));
        }
        offset = r.next_offset;
    }
}

#[tokio::test]
async fn survives_graceful_restart_and_kill_9() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let (kp, hp) = (free_port(), free_port());

    let mut broker = Broker::start(&data, kp, hp);
    let mut client = Client::connect(&broker.kafka, Duration::from_secs(10))
        .await
        .expect("connect");
    client.create_topic("t", 1, 1, &[]).await.expect("create");
    produce_n(&mut client, "t", 0, 50).await;
    drop(client);
    broker.signal("-TERM");
    assert!(broker.wait_exit().success(), "SIGTERM exits 0");
    drop(broker);

    // Restart: everything is there, and new offsets continue densely.
    let mut broker = Broker::start(&data, kp, hp);
    let mut client = Client::connect(&broker.kafka, Duration::from_secs(10))
        .await
        .expect("connect");
    produce_n(&mut client, "t", 50, 50).await;
    // kill -9 right after acks=all answers: nothing acknowledged may be lost.
    broker.signal("-KILL");
    broker.wait_exit();
    drop(broker);
    drop(client);

    let _broker = Broker::start(&data, kp, hp);
    let mut client = Client::connect(&format!("127.0.0.1:{kp}"), Duration::from_secs(10))
        .await
        .expect("connect");
    let all = read_all(&mut client, "t").await;
    let expected: Vec<(i64, String)> = (0..100).map(|i| (i as i64, format!("v{i}"))).collect();
    assert_eq!(all, expected);
}
