//! Shared by the in-process HTTP tests (`tests/http.rs`, `tests/http_consumers.rs`): a
//! real `Broker` behind `http::router` on an ephemeral port, and a minimal HTTP/1.1 client
//! (no reqwest: it would add a build for a few requests).
// Each test crate uses a different subset of these helpers.
#![allow(dead_code)]

use oxbow_cache::ReadCache;
use oxbow_gateway::broker::{Broker, BrokerSettings};
use oxbow_gateway::http::{router, HttpState};
use oxbow_metadata::{EmbeddedStore, MetadataStore, TopicSpec};
use oxbow_segment_writer::{objects, LogManager, LogSettings, WalSettings};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A broker serving the HTTP API on an ephemeral port; stops when dropped.
pub struct Server {
    pub addr: SocketAddr,
    pub broker: Arc<Broker>,
    /// Drives `/readyz`; starts false.
    pub ready: Arc<AtomicBool>,
    serve: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.serve.abort();
    }
}

pub async fn start(auto_create_topics: bool) -> Server {
    start_with_authorization(auto_create_topics, Default::default()).await
}

/// [`start`] with `--authorizer` and friends (ACL tests).
pub async fn start_with_authorization(
    auto_create_topics: bool,
    authorization: oxbow_gateway::security::acl::AuthorizerSettings,
) -> Server {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(EmbeddedStore::open(&dir.path().join("meta.redb")).expect("metadata"));
    let log_settings = LogSettings {
        broker_id: 1,
        wal: WalSettings {
            dir: dir.path().join("wal"),
            file_bytes_max: 1 << 20,
            budget_bytes: 1 << 30,
            direct_writes: true,
        },
        flush_interval: Duration::from_secs(3600),
        flush_bytes: 1 << 30,
        partition_tail_bytes: 1 << 20,
        tail_memory_bytes: usize::MAX,
        producer_id_expiration: oxbow_segment_writer::PRODUCER_ID_EXPIRATION_DEFAULT,
        max_decompressed_batch_bytes:
            oxbow_segment_writer::decompress::DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES,
        durability: Default::default(),
        replication: Default::default(),
    };
    let store = objects::local(&dir.path().join("objects")).expect("object store");
    let log = LogManager::open(
        log_settings,
        metadata.clone(),
        store,
        ReadCache::new(1 << 20),
    )
    .await
    .expect("log");
    let settings = BrokerSettings {
        broker_id: 1,
        advertised_host: "127.0.0.1".into(),
        advertised_port: 9092,
        listeners: [("PLAINTEXT".to_string(), ("127.0.0.1".to_string(), 9092))].into(),
        auto_create_topics,
        default_partitions: 2,
        max_request_bytes: 100 << 20,
        cluster_id: "oxbow-test-cluster".into(),
        log_retention_ms: 604_800_000,
        log_retention_bytes: -1,
        authorization,
        sasl: Default::default(),
        oauth: None,
        object_store_location: "memory".into(),
        transactions: Default::default(),
    };
    let broker = Broker::new(settings, metadata, log).await.expect("broker");
    let ready = Arc::new(AtomicBool::new(false));
    let app = router(HttpState {
        broker: broker.clone(),
        ready: ready.clone(),
        authentication: Default::default(),
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    // The coordinator's timers (initial rebalance delay, session expiry), as `oxbow serve`
    // runs them; they stop with the server task.
    let ticker = broker
        .coordinator
        .clone()
        .run_ticker(tokio_util::sync::CancellationToken::new());
    let serve = tokio::spawn(async move {
        tokio::select! {
            r = axum::serve(listener, app) => r.expect("serve"),
            () = ticker => {}
        }
    });
    Server {
        addr,
        broker,
        ready,
        serve,
        _dir: dir,
    }
}

impl Server {
    pub async fn create_topic(&self, name: &str, partitions: i32) {
        self.broker
            .create_topic(TopicSpec {
                name: name.into(),
                partitions,
                replication_factor: 1,
                configs: BTreeMap::new(),
            })
            .await
            .expect("create topic");
    }
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// Asserts an error response in the REST Proxy shape.
    pub fn assert_error(&self, status: u16, error_code: u64) {
        assert_eq!(self.status, status, "{self:?}");
        assert!(
            self.header("content-type")
                .is_some_and(|t| t.contains("json")),
            "error without a JSON content type: {self:?}"
        );
        let body = self.json();
        assert_eq!(body["error_code"], error_code, "{body}");
        assert!(body["message"].is_string(), "{body}");
    }

    pub fn assert_status(&self, status: u16) {
        assert_eq!(
            self.status,
            status,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
    }
}

/// One HTTP/1.1 request on its own connection (`Connection: close`, so the response ends
/// at EOF).
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.expect("write head");
    stream.write_all(body).await.expect("write body");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read response");
    parse_response(&raw)
}

pub fn parse_response(raw: &[u8]) -> Response {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    if chunked {
        body = dechunk(&body);
    }
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size line");
        let size_text = String::from_utf8_lossy(&data[..line_end]).to_string();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .expect("chunk size");
        data = &data[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}
