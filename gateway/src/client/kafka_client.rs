//! [`Client`]: connections, metadata and request routing for one Kafka cluster.
//!
//! Lifecycle: [`Client::connect`] dials the bootstrap addresses in order and keeps the
//! first that answers (with its ApiVersions handshake done). Metadata is fetched lazily and
//! cached per topic. Metadata and admin requests go to the bootstrap connection;
//! produce, fetch and list-offsets go to the partition leader, over a connection cached by
//! node id (the bootstrap connection is reused when the leader is that broker). A
//! connection that failed mid-request is replaced on next use. Requests are sequential:
//! for concurrency open several clients (the load generator does).
//!
//! The data-plane operations live in `data.rs`, the admin ones in `admin.rs`.

use std::collections::HashMap;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::protocol::Request;

use super::connection::Connection;
use super::error::ClientError;
use super::metadata::{parse_metadata, ClusterMetadata, TopicMetadata};
use super::requests;

/// How often a request that failed with a retriable error (leader moved, topic just
/// created) is retried after refreshing metadata.
pub(super) const RETRIES_MAX: u32 = 5;

/// Settings for a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Bound on every network wait (connect, write, read). Requests in which the broker
    /// waits on purpose (fetch long-poll, produce acks) add that wait on top.
    pub timeout: Duration,
    /// Sent in every request header; shows up in broker logs and quotas.
    pub client_id: String,
    /// Authenticate every connection with SASL (a SASL_PLAINTEXT listener).
    pub sasl: Option<super::sasl::SaslCredentials>,
    /// Speak TLS on every connection (an SSL or SASL_SSL listener), verifying the broker
    /// against this configuration's roots; the server name is the dialled host.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            client_id: "oxbow-cli".to_string(),
            sasl: None,
            tls: None,
        }
    }
}

/// Which connection a request goes over.
#[derive(Debug, Clone, Copy)]
pub(super) enum Target {
    /// The bootstrap connection: any broker can answer.
    Any,
    /// A specific broker, e.g. a partition leader.
    Node(i32),
}

/// Where a partition's requests go, from cached metadata.
#[derive(Debug, Clone, Copy)]
pub(super) struct Route {
    pub leader: i32,
    pub topic_id: uuid::Uuid,
}

/// An async Kafka client for one cluster; see the module docs.
#[derive(Debug)]
pub struct Client {
    pub(super) options: ClientOptions,
    /// The bootstrap list as given, tried in order on (re)connect.
    bootstrap_addrs: Vec<String>,
    bootstrap: Connection,
    /// Connections to other brokers by node id; at most one per broker in the cluster.
    nodes: HashMap<i32, Connection>,
    /// Broker addresses from the latest metadata response.
    brokers: HashMap<i32, String>,
    /// Topic metadata from the latest response that covered each topic.
    topics: HashMap<String, TopicMetadata>,
    pub(super) controller_id: Option<i32>,
}

/// Splits and checks a comma-separated `host:port` list.
pub fn parse_bootstrap(bootstrap: &str) -> Result<Vec<String>, ClientError> {
    let addrs: Vec<String> = bootstrap
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect();
    if addrs.is_empty() {
        return Err(ClientError::Invalid(
            "empty bootstrap address: expected host:port[,host:port...]".to_string(),
        ));
    }
    for addr in &addrs {
        let port = addr
            .rsplit_once(':')
            .map(|(host, port)| (host, port.parse::<u16>()));
        match port {
            Some((host, Ok(_))) if !host.is_empty() => {}
            _ => {
                return Err(ClientError::Invalid(format!(
                    "invalid bootstrap address \"{addr}\": expected host:port"
                )))
            }
        }
    }
    Ok(addrs)
}

/// Opens a connection to the first address in `addrs` that answers.
async fn open_first(addrs: &[String], options: &ClientOptions) -> Result<Connection, ClientError> {
    let mut failures = Vec::new();
    for addr in addrs {
        match Connection::open_with(
            addr,
            options.timeout,
            &options.client_id,
            options.sasl.as_ref(),
            options.tls.as_ref(),
        )
        .await
        {
            Ok(conn) => return Ok(conn),
            // Only unreachable brokers are skipped; a broker that answers nonsense is a
            // problem worth reporting as is.
            Err(ClientError::Unreachable { addr, reason }) => failures.push((addr, reason)),
            Err(other) => return Err(other),
        }
    }
    match failures.as_slice() {
        [(addr, reason)] => Err(ClientError::Unreachable {
            addr: addr.clone(),
            reason: reason.clone(),
        }),
        _ => Err(ClientError::Unreachable {
            addr: format!("any of {}", addrs.join(",")),
            reason: failures
                .iter()
                .map(|(a, r)| format!("{a} ({r})"))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// Sends a request over `conn` at the best common version (at most `max_version`).
async fn send_on<R: Request>(
    conn: &mut Connection,
    max_version: Option<i16>,
    server_wait: Duration,
    build: impl FnOnce(i16) -> R,
) -> Result<(i16, R::Response), ClientError> {
    let version = conn.pick_version::<R>(max_version)?;
    let request = build(version);
    let response = conn.send(version, &request, server_wait).await?;
    Ok((version, response))
}

/// Sleep before retry `attempt` (1-based): 100 ms doubling, at most 1 s. Only the network
/// edge sleeps like this; a broker needs a moment to elect a leader or register a topic.
pub(super) async fn backoff(attempt: u32) {
    let ms = 100u64
        .saturating_mul(1 << attempt.saturating_sub(1).min(4))
        .min(1000);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

impl Client {
    /// Connects to the first reachable address of a comma-separated `host:port` list,
    /// with `timeout` bounding every network wait.
    pub async fn connect(bootstrap: &str, timeout: Duration) -> Result<Self, ClientError> {
        Self::connect_with(
            bootstrap,
            ClientOptions {
                timeout,
                ..ClientOptions::default()
            },
        )
        .await
    }

    /// [`Client::connect`] with all options.
    pub async fn connect_with(
        bootstrap: &str,
        options: ClientOptions,
    ) -> Result<Self, ClientError> {
        let bootstrap_addrs = parse_bootstrap(bootstrap)?;
        let bootstrap = open_first(&bootstrap_addrs, &options).await?;
        Ok(Client {
            options,
            bootstrap_addrs,
            bootstrap,
            nodes: HashMap::new(),
            brokers: HashMap::new(),
            topics: HashMap::new(),
            controller_id: None,
        })
    }

    /// The bound on network waits this client was created with.
    pub fn timeout(&self) -> Duration {
        self.options.timeout
    }

    /// The address of the broker the bootstrap connection is open to.
    pub fn bootstrap_addr(&self) -> &str {
        self.bootstrap.addr()
    }

    /// Fetches metadata for `topics` (all topics when `None`) and refreshes the cache.
    /// Topic-level errors (e.g. unknown topic) are reported in [`TopicMetadata::error`].
    pub async fn metadata(
        &mut self,
        topics: Option<Vec<String>>,
    ) -> Result<ClusterMetadata, ClientError> {
        self.refresh_metadata(topics.as_deref()).await
    }

    /// Metadata for one topic, from the cache if present. Fails with
    /// [`ClientError::UnknownTopic`] if the topic does not exist.
    pub async fn topic_metadata(&mut self, topic: &str) -> Result<TopicMetadata, ClientError> {
        if let Some(cached) = self.topics.get(topic) {
            return Ok(cached.clone());
        }
        let metadata = self.refresh_metadata(Some(&[topic.to_string()])).await?;
        let found = metadata
            .topics
            .into_iter()
            .find(|t| t.name == topic)
            .ok_or_else(|| ClientError::UnknownTopic(topic.to_string()))?;
        match found.error {
            None => Ok(found),
            Some(ResponseError::UnknownTopicOrPartition) => {
                Err(ClientError::UnknownTopic(topic.to_string()))
            }
            Some(code) => Err(ClientError::Kafka {
                op: format!("look up topic \"{topic}\""),
                code,
                message: None,
            }),
        }
    }

    /// Forgets cached metadata for `topic`, so the next request refreshes it.
    pub fn invalidate_topic(&mut self, topic: &str) {
        self.topics.remove(topic);
    }

    async fn refresh_metadata(
        &mut self,
        topics: Option<&[String]>,
    ) -> Result<ClusterMetadata, ClientError> {
        // Straight to the bootstrap connection, not through `call`: `call` may need
        // metadata to find a node, and that recursion would never end.
        let conn = self.bootstrap_connection().await?;
        let (_, response) = send_on(conn, None, Duration::ZERO, |v| {
            requests::metadata(v, topics)
        })
        .await?;
        let metadata = parse_metadata(&response);
        self.brokers = metadata
            .brokers
            .iter()
            .map(|b| (b.node_id, b.addr()))
            .collect();
        self.controller_id = metadata.controller_id;
        for topic in &metadata.topics {
            // Only cache topics that are fully usable; anything else is asked again.
            let usable = topic.error.is_none()
                && topic
                    .partitions
                    .iter()
                    .all(|p| p.error.is_none() && p.leader.is_some());
            if usable {
                self.topics.insert(topic.name.clone(), topic.clone());
            } else {
                self.topics.remove(&topic.name);
            }
        }
        Ok(metadata)
    }

    /// The leader and topic id for a partition, from cached metadata.
    pub(super) async fn route(
        &mut self,
        topic: &str,
        partition: i32,
    ) -> Result<Route, ClientError> {
        let metadata = self.topic_metadata(topic).await?;
        let found = metadata
            .partitions
            .iter()
            .find(|p| p.partition == partition)
            .ok_or(ClientError::UnknownPartition {
                topic: topic.to_string(),
                partition,
                count: metadata.partitions.len(),
            })?;
        let leader = found.leader.ok_or_else(|| ClientError::NoLeader {
            topic: topic.to_string(),
            partition,
        })?;
        Ok(Route {
            leader,
            topic_id: metadata.topic_id,
        })
    }

    /// Sends a request over `target` at the best common version (at most `max_version`)
    /// and returns the version used with the response.
    pub(super) async fn call<R: Request>(
        &mut self,
        target: Target,
        max_version: Option<i16>,
        server_wait: Duration,
        build: impl FnOnce(i16) -> R,
    ) -> Result<(i16, R::Response), ClientError> {
        let conn = self.connection(target).await?;
        send_on(conn, max_version, server_wait, build).await
    }

    /// Like [`Client::call`] for requests the broker does not answer (produce, acks=0).
    pub(super) async fn call_without_response<R: Request>(
        &mut self,
        target: Target,
        max_version: Option<i16>,
        build: impl FnOnce(i16) -> R,
    ) -> Result<(), ClientError> {
        let conn = self.connection(target).await?;
        let version = conn.pick_version::<R>(max_version)?;
        let request = build(version);
        conn.send_without_response(version, &request).await
    }

    /// The highest version of `R` the given target supports (after connecting to it).
    pub(super) async fn version_for<R: Request>(
        &mut self,
        target: Target,
    ) -> Result<i16, ClientError> {
        self.connection(target).await?.pick_version::<R>(None)
    }

    async fn connection(&mut self, target: Target) -> Result<&mut Connection, ClientError> {
        match target {
            Target::Any => self.bootstrap_connection().await,
            Target::Node(node_id) => self.node_connection(node_id).await,
        }
    }

    async fn bootstrap_connection(&mut self) -> Result<&mut Connection, ClientError> {
        if self.bootstrap.is_broken() {
            self.bootstrap = open_first(&self.bootstrap_addrs, &self.options).await?;
        }
        Ok(&mut self.bootstrap)
    }

    async fn node_connection(&mut self, node_id: i32) -> Result<&mut Connection, ClientError> {
        if !self.brokers.contains_key(&node_id) {
            // Brokers only: an empty topic list (v1+) returns no topics.
            self.refresh_metadata(Some(&[][..])).await?;
        }
        let addr = self.brokers.get(&node_id).cloned().ok_or_else(|| {
            ClientError::Invalid(format!("broker {node_id} is not in the cluster metadata"))
        })?;
        if addr == self.bootstrap.addr() && !self.bootstrap.is_broken() {
            return Ok(&mut self.bootstrap);
        }
        let usable = self
            .nodes
            .get(&node_id)
            .is_some_and(|c| !c.is_broken() && c.addr() == addr);
        if !usable {
            let conn = Connection::open_with(
                &addr,
                self.options.timeout,
                &self.options.client_id,
                self.options.sasl.as_ref(),
                self.options.tls.as_ref(),
            )
            .await?;
            self.nodes.insert(node_id, conn);
        }
        Ok(self
            .nodes
            .get_mut(&node_id)
            .expect("connection was inserted just above"))
    }

    /// Retriable failures are followed by a metadata refresh for `topic` and a backoff.
    /// Returns whether to try again.
    pub(super) async fn should_retry(
        &mut self,
        topic: &str,
        err: &ClientError,
        attempt: u32,
    ) -> bool {
        if !err.is_retriable() || attempt >= RETRIES_MAX {
            return false;
        }
        self.invalidate_topic(topic);
        backoff(attempt + 1).await;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_lists_are_split_and_checked() {
        assert_eq!(
            parse_bootstrap(" a:1, b:2 ,").expect("valid"),
            vec!["a:1".to_string(), "b:2".to_string()]
        );
        assert_eq!(
            parse_bootstrap("[::1]:9092").expect("valid"),
            vec!["[::1]:9092".to_string()]
        );
        for bad in ["", ",", "localhost", "localhost:x", ":9092", "h:70000"] {
            assert!(parse_bootstrap(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[tokio::test]
    async fn unreachable_broker_error_names_the_address() {
        // Bind then drop a listener to get a local port that refuses connections.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        drop(listener);
        let err = Client::connect(&addr, Duration::from_secs(2))
            .await
            .expect_err("nothing listens there");
        assert_eq!(
            err.to_string(),
            format!("cannot reach broker at {addr}: connection refused")
        );
    }
}
