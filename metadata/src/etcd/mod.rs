//! The etcd backend: [`MetadataStore`](crate::MetadataStore) on an etcd v3 cluster.
//!
//! Lifecycle: [`EtcdStore::connect`] builds a client over every endpoint (etcd-client
//! balances requests and fails over between them); nothing is read at connect, so a broker
//! can start while etcd is still electing a leader. Key schema: [`crate::keys`].
//!
//! Every call is bounded by [`EtcdSettings::op_timeout`]. Within it, transient failures (no
//! leader, leader changed, connection refused or reset, request timed out) are retried with
//! exponential backoff from 20 ms up to 500 ms; when the time is up the call fails with
//! [`Error::Unavailable`] ("metadata unavailable: …", kind `Unavailable`). Requests carry
//! etcd's `require-leader` flag, so a member cut off from the quorum answers at once instead
//! of hanging. A retried write may have landed on its first attempt; every write is safe to
//! repeat: catalog commits are idempotent, compare-and-swaps then report a conflict (the
//! caller re-reads), and a producer-id block is skipped, never reused.
//!
//! Watches ([`crate::watch`]) are one etcd watch stream each, forwarded by a task owned by
//! the returned [`Watch`](crate::Watch) (aborted when it is dropped). A stream error ends the
//! watch; the subscriber re-subscribes and re-lists.

mod store;
mod watch;

use crate::error::{Error, Result};
use crate::keys::Root;
use etcd_client::{Client, ConnectOptions};
use std::future::Future;
use std::time::{Duration, Instant};

/// How to reach etcd.
#[derive(Clone, Debug)]
pub struct EtcdSettings {
    /// `host:port` (or `http://host:port`) of each member.
    pub endpoints: Vec<String>,
    /// Cluster name: every key lives under `/oxbow/{cluster}/`.
    pub cluster: String,
    /// Bound on every metadata call, retries included. Longer rides out a longer etcd
    /// leader election; shorter fails produce and sealing sooner when etcd is gone (the
    /// caller's own retries then take over).
    pub op_timeout: Duration,
}

impl EtcdSettings {
    pub fn new(endpoints: Vec<String>, cluster: &str) -> Self {
        EtcdSettings {
            endpoints,
            cluster: cluster.to_string(),
            op_timeout: Duration::from_secs(5),
        }
    }
}

/// [`MetadataStore`](crate::MetadataStore) on etcd.
#[derive(Clone)]
pub struct EtcdStore {
    client: Client,
    root: Root,
    op_timeout: Duration,
}

/// Backoff bounds of the retry loop.
const BACKOFF_FIRST: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// One attempt's failure: an etcd error (maybe transient) or a decided outcome.
pub(crate) enum Attempt {
    Etcd(etcd_client::Error),
    Done(Error),
}

impl From<etcd_client::Error> for Attempt {
    fn from(e: etcd_client::Error) -> Self {
        Attempt::Etcd(e)
    }
}

impl From<Error> for Attempt {
    fn from(e: Error) -> Self {
        Attempt::Done(e)
    }
}

/// Whether an etcd error is worth retrying: the cluster or the connection is in flux.
fn is_transient(e: &etcd_client::Error) -> bool {
    use etcd_client::Error as E;
    match e {
        E::GRpcStatus(s) => {
            use tonic::Code;
            matches!(
                s.code(),
                Code::Unavailable
                    | Code::DeadlineExceeded
                    | Code::Aborted
                    | Code::Unknown
                    | Code::ResourceExhausted
            ) || s.message().contains("leader")
                || s.message().contains("timed out")
        }
        E::TransportError(_) | E::IoError(_) => true,
        E::WatchError(_) | E::LeaseKeepAliveError(_) => {
            // etcd-client reports a stream that closed before answering this way.
            !is_lease_not_found(e)
        }
        _ => false,
    }
}

/// etcd's answer for a lease that expired or never existed.
pub(crate) fn is_lease_not_found(e: &etcd_client::Error) -> bool {
    e.to_string().contains("lease not found")
}

impl EtcdStore {
    /// A client over `settings.endpoints`. Does not wait for etcd to answer.
    pub async fn connect(settings: EtcdSettings) -> Result<Self> {
        if settings.endpoints.is_empty() {
            return Err(Error::InvalidRequest("no etcd endpoints given".into()));
        }
        let options = ConnectOptions::new()
            .with_connect_timeout(settings.op_timeout.min(Duration::from_secs(2)))
            // HTTP/2 pings find a dead member (SIGSTOPped, partitioned) in seconds, so the
            // balancer moves to another one.
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true)
            .with_require_leader(true);
        let client = Client::connect(&settings.endpoints, Some(options))
            .await
            .map_err(|e| Error::Unavailable(format!("connecting to etcd: {e}")))?;
        Ok(EtcdStore {
            client,
            root: Root::new(&settings.cluster),
            op_timeout: settings.op_timeout,
        })
    }

    /// The key root of this store's cluster.
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// The underlying client (tests use it to plant corrupt values).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Runs `attempt` until it succeeds, fails for good, or `op_timeout` passes.
    pub(crate) async fn call<T, F, Fut>(&self, what: &str, mut attempt: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, Attempt>>,
    {
        let deadline = Instant::now() + self.op_timeout;
        let mut backoff = BACKOFF_FIRST;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let last = match tokio::time::timeout(remaining, attempt(self.client.clone())).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(Attempt::Done(e))) => return Err(e),
                Ok(Err(Attempt::Etcd(e))) if is_transient(&e) => e.to_string(),
                Ok(Err(Attempt::Etcd(e))) => {
                    return Err(Error::Storage(format!("etcd {what}: {e}")));
                }
                Err(_) => {
                    return Err(Error::Unavailable(format!(
                        "etcd {what}: no answer within {:?}",
                        self.op_timeout
                    )))
                }
            };
            if Instant::now() + backoff >= deadline {
                return Err(Error::Unavailable(format!(
                    "etcd {what}: {last} (gave up after {:?})",
                    self.op_timeout
                )));
            }
            tracing::debug!(what, error = %last, "transient etcd error; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }
}
