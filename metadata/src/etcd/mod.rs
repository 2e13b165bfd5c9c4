//! The etcd backend: [`MetadataStore`](crate::MetadataStore) on an etcd v3 cluster, as the
//! shared rules ([`crate::kv_store::KvStore`]) over [`EtcdKv`].
//!
//! Lifecycle: [`EtcdStore::connect`] builds a client over every endpoint; nothing is read at
//! connect, so a broker can start while etcd is still electing a leader. Key schema:
//! [`crate::keys`]. Timeouts, retries and watch streams: [`crate::kv::EtcdKv`].

use crate::error::Result;
use crate::keys::Root;
use crate::kv::EtcdKv;
use crate::kv_store::KvStore;
use std::time::Duration;

/// How to reach etcd.
#[derive(Clone, Debug)]
pub struct EtcdSettings {
    /// `host:port` (or `http://host:port`) of each member.
    pub endpoints: Vec<String>,
    /// Cluster name: every key lives under `/oxbow/{cluster}/`.
    pub cluster: String,
    /// Bound on every etcd call, retries included. Longer rides out a longer etcd leader
    /// election; shorter fails produce and sealing sooner when etcd is gone (the caller's
    /// own retries then take over).
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
pub type EtcdStore = KvStore<EtcdKv>;

impl KvStore<EtcdKv> {
    /// A client over `settings.endpoints`. Does not wait for etcd to answer.
    pub async fn connect(settings: EtcdSettings) -> Result<Self> {
        let kv = EtcdKv::connect(&settings.endpoints, settings.op_timeout).await?;
        Ok(KvStore::new(kv, Root::new(&settings.cluster)))
    }

    /// The underlying client (tests use it to plant corrupt values).
    pub fn client(&self) -> etcd_client::Client {
        self.kv().client()
    }
}
