//! [`EtcdKv`]: the [`Kv`] model on an etcd v3 cluster, through `etcd-client`.
//!
//! Lifecycle: [`EtcdKv::connect`] builds a client over every endpoint (etcd-client balances
//! requests and fails over between them); nothing is read at connect, so a broker can start
//! while etcd is still electing a leader.
//!
//! Every call is bounded by `op_timeout` ([`crate::EtcdSettings::op_timeout`]). Within it,
//! transient failures (no leader, leader changed, connection refused or reset, request
//! timed out) are retried with exponential backoff from 20 ms up to 500 ms; when the time is
//! up the call fails with [`Error::Unavailable`] ("metadata unavailable: …", kind
//! `Unavailable`). Requests carry etcd's `require-leader` flag, so a member cut off from the
//! quorum answers at once instead of hanging. A retried write may have landed on its first
//! attempt; the rules above this seam make every write safe to repeat (see
//! [`crate::kv_store`]).
//!
//! [`Kv::compact`] is etcd's compaction, [`Kv::status`] the maintenance status of whichever
//! member the client reached (its database size; etcd's quota is per member).
//!
//! A watch is one etcd watch stream, forwarded into a bounded queue by a task owned by the
//! returned [`Watch`] (aborted when it is dropped). A stream error, a cancellation (a
//! compacted start revision) or a full queue ends the watch.

use super::{
    ttl_secs, CmpOp, Compare, EventKind, Get, KeyRange, KeyValue, Kv, KvStatus, Op, OpResult,
    RangeEnd, RangeResponse, Revision, Target, Txn, TxnResponse, WatchEvent,
};
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::store::{Lease, LeaseId};
use crate::watch::{Watch, WatchQueue, WATCH_CAPACITY};
use etcd_client::{
    Client, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions, PutOptions, SortOrder,
    SortTarget, TxnOp, TxnOpResponse, WatchOptions,
};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Backoff bounds of the retry loop.
const BACKOFF_FIRST: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// One attempt's failure: an etcd error (maybe transient) or a decided outcome.
enum Attempt {
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
                // Cancelled: the client's connection closed under the request (etcd
                // restarting, quorum lost); ours are never cancelled but by a timeout.
                Code::Unavailable
                    | Code::Cancelled
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
fn is_lease_not_found(e: &etcd_client::Error) -> bool {
    e.to_string().contains("lease not found")
}

/// etcd's answer to a compaction at or below the compacted revision: that history is gone
/// already, which is what was asked.
fn is_compacted(e: &etcd_client::Error) -> bool {
    e.to_string()
        .contains("required revision has been compacted")
}

/// etcd's answer to a compaction past the current revision.
fn is_future_revision(e: &etcd_client::Error) -> bool {
    e.to_string()
        .contains("required revision is a future revision")
}

/// etcd's answer for a request it refuses as malformed (a put twice in one transaction, too
/// many operations).
fn is_invalid_argument(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.code() == tonic::Code::InvalidArgument)
}

fn key_value(kv: &etcd_client::KeyValue) -> KeyValue {
    KeyValue {
        key: kv.key().to_vec(),
        value: kv.value().to_vec(),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        version: kv.version(),
        lease: kv.lease(),
    }
}

/// etcd's `range_end` for a range (empty: the single key; `\0`: every key from `start`).
fn range_end(range: &KeyRange) -> Option<Vec<u8>> {
    match &range.end {
        RangeEnd::Single => None,
        RangeEnd::Before(end) => Some(end.clone()),
        RangeEnd::Unbounded => Some(vec![0]),
    }
}

fn get_options(get: &Get) -> GetOptions {
    let mut o = GetOptions::new();
    if let Some(end) = range_end(&get.range) {
        o = o.with_range(end);
    }
    if get.limit > 0 {
        o = o.with_limit(get.limit as i64);
    }
    if get.reverse {
        o = o.with_sort(SortTarget::Key, SortOrder::Descend);
    }
    if get.keys_only {
        o = o.with_keys_only();
    }
    o
}

fn range_response(r: &etcd_client::GetResponse) -> RangeResponse {
    RangeResponse {
        kvs: r.kvs().iter().map(key_value).collect(),
        more: r.more(),
        revision: r.header().map(|h| h.revision()).unwrap_or(0),
    }
}

fn compare(c: &Compare) -> etcd_client::Compare {
    let op = match c.op {
        CmpOp::Equal => CompareOp::Equal,
        CmpOp::NotEqual => CompareOp::NotEqual,
        CmpOp::Less => CompareOp::Less,
        CmpOp::Greater => CompareOp::Greater,
    };
    let key = c.range.start.clone();
    let out = match &c.target {
        Target::Value(v) => etcd_client::Compare::value(key, op, v.clone()),
        Target::Version(v) => etcd_client::Compare::version(key, op, *v),
        Target::CreateRevision(r) => etcd_client::Compare::create_revision(key, op, *r),
        Target::ModRevision(r) => etcd_client::Compare::mod_revision(key, op, *r),
        Target::Lease(l) => etcd_client::Compare::lease(key, op, *l),
    };
    match range_end(&c.range) {
        Some(end) => out.with_range(end),
        None => out,
    }
}

fn txn_op(op: &Op) -> TxnOp {
    match op {
        Op::Get(get) => TxnOp::get(get.range.start.clone(), Some(get_options(get))),
        Op::Put { key, value, lease } => {
            let opts = (*lease != 0).then(|| PutOptions::new().with_lease(*lease));
            TxnOp::put(key.clone(), value.clone(), opts)
        }
        Op::Delete(range) => TxnOp::delete(
            range.start.clone(),
            range_end(range).map(|end| DeleteOptions::new().with_range(end)),
        ),
    }
}

/// [`Kv`] on etcd (see the module docs).
#[derive(Clone)]
pub struct EtcdKv {
    client: Client,
    op_timeout: Duration,
    clock: Arc<dyn Clock>,
    meter: super::KvMeter,
}

impl EtcdKv {
    /// A client over `endpoints`. Does not wait for etcd to answer.
    pub async fn connect(endpoints: &[String], op_timeout: Duration) -> Result<Self> {
        if endpoints.is_empty() {
            return Err(Error::InvalidRequest("no etcd endpoints given".into()));
        }
        let options = ConnectOptions::new()
            .with_connect_timeout(op_timeout.min(Duration::from_secs(2)))
            // HTTP/2 pings find a dead member (SIGSTOPped, partitioned) in seconds, so the
            // balancer moves to another one.
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true)
            .with_require_leader(true);
        let client = Client::connect(endpoints, Some(options))
            .await
            .map_err(|e| Error::Unavailable(format!("connecting to etcd: {e}")))?;
        Ok(EtcdKv {
            client,
            op_timeout,
            clock: Arc::new(SystemClock),
            meter: super::KvMeter::default(),
        })
    }

    /// The same client, timing its retries on `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The underlying client (tests use it to plant corrupt values).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Runs `attempt` until it succeeds, fails for good, or `op_timeout` passes.
    async fn call<T, F, Fut>(&self, what: &'static str, attempt: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, Attempt>>,
    {
        let started = self.clock.now();
        let result = self.call_until_done(what, attempt).await;
        let took = self.clock.now().saturating_duration_since(started);
        self.meter.observe(what, result.is_ok(), took);
        result
    }

    async fn call_until_done<T, F, Fut>(&self, what: &str, mut attempt: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, Attempt>>,
    {
        let deadline = self.clock.now() + self.op_timeout;
        let mut backoff = BACKOFF_FIRST;
        loop {
            let remaining = deadline.saturating_duration_since(self.clock.now());
            let outcome = tokio::select! {
                r = attempt(self.client.clone()) => Some(r),
                _ = self.clock.sleep(remaining) => None,
            };
            let last = match outcome {
                Some(Ok(v)) => return Ok(v),
                Some(Err(Attempt::Done(e))) => return Err(e),
                Some(Err(Attempt::Etcd(e))) if is_transient(&e) => e.to_string(),
                Some(Err(Attempt::Etcd(e))) if is_invalid_argument(&e) => {
                    return Err(Error::InvalidRequest(format!("etcd {what}: {e}")));
                }
                Some(Err(Attempt::Etcd(e))) => {
                    return Err(Error::Storage(format!("etcd {what}: {e}")));
                }
                None => {
                    return Err(Error::Unavailable(format!(
                        "etcd {what}: no answer within {:?}",
                        self.op_timeout
                    )))
                }
            };
            if self.clock.now() + backoff >= deadline {
                return Err(Error::Unavailable(format!(
                    "etcd {what}: {last} (gave up after {:?})",
                    self.op_timeout
                )));
            }
            tracing::debug!(what, error = %last, "transient etcd error; retrying");
            self.clock.sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }
}

/// Forwards the events of an established etcd watch until the reader goes away, the stream
/// fails or etcd cancels it.
/// Feeds `tx` from `stream`, counting each delivery in `queued` until the reader takes it.
async fn forward(
    mut stream: etcd_client::WatchStream,
    tx: mpsc::Sender<Vec<WatchEvent>>,
    queued: WatchQueue,
) {
    loop {
        let msg = tokio::select! {
            _ = tx.closed() => return,
            msg = stream.message() => msg,
        };
        let resp = match msg {
            Ok(Some(r)) => r,
            Ok(None) => {
                tracing::warn!("etcd watch stream closed; the watch ends");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "etcd watch failed; the watch ends");
                return;
            }
        };
        if resp.canceled() {
            tracing::warn!(
                reason = resp.cancel_reason(),
                compact_revision = resp.compact_revision(),
                "etcd canceled a watch; it ends"
            );
            return;
        }
        let batch: Vec<WatchEvent> = resp
            .events()
            .iter()
            .filter_map(|event| {
                Some(WatchEvent {
                    kind: match event.event_type() {
                        EventType::Put => EventKind::Put,
                        EventType::Delete => EventKind::Delete,
                    },
                    kv: key_value(event.kv()?),
                    prev: event.prev_kv().map(key_value),
                })
            })
            .collect();
        // Bounded: a reader that falls behind ends its watch (see crate::watch).
        if batch.is_empty() {
            continue;
        }
        // Counted before it is queued, so the reader's receipt never comes first.
        queued.add();
        if tx.try_send(batch).is_err() {
            queued.taken();
            return;
        }
    }
}

#[async_trait::async_trait]
impl Kv for EtcdKv {
    async fn range(&self, get: Get) -> Result<RangeResponse> {
        let get = &get;
        self.call("range", |mut c| async move {
            let resp = c
                .get(get.range.start.clone(), Some(get_options(get)))
                .await?;
            Ok(range_response(&resp))
        })
        .await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        let request = etcd_client::Txn::new()
            .when(txn.when.iter().map(compare).collect::<Vec<_>>())
            .and_then(txn.then.iter().map(txn_op).collect::<Vec<_>>())
            .or_else(txn.otherwise.iter().map(txn_op).collect::<Vec<_>>());
        let lease = txn
            .then
            .iter()
            .chain(&txn.otherwise)
            .find_map(|op| match op {
                Op::Put { lease, .. } if *lease != 0 => Some(*lease),
                _ => None,
            })
            .unwrap_or(0);
        let request = &request;
        self.call("txn", |mut c| async move {
            let resp = match c.txn(request.clone()).await {
                Ok(r) => r,
                Err(e) if is_lease_not_found(&e) => return Err(Error::LeaseExpired(lease).into()),
                Err(e) => return Err(e.into()),
            };
            let results = resp
                .op_responses()
                .into_iter()
                .map(|op| match op {
                    TxnOpResponse::Get(g) => OpResult::Get(range_response(&g)),
                    TxnOpResponse::Put(_) => OpResult::Put,
                    TxnOpResponse::Delete(d) => OpResult::Delete {
                        deleted: d.deleted().max(0) as usize,
                    },
                    // Nested transactions are not part of the model.
                    TxnOpResponse::Txn(_) => OpResult::Put,
                })
                .collect();
            Ok(TxnResponse {
                succeeded: resp.succeeded(),
                revision: resp.header().map(|h| h.revision()).unwrap_or(0),
                results,
            })
        })
        .await
    }

    async fn watch(
        &self,
        range: KeyRange,
        from: Option<Revision>,
    ) -> Result<Watch<Vec<WatchEvent>>> {
        let mut options = WatchOptions::new().with_prev_key();
        if let Some(end) = range_end(&range) {
            options = options.with_range(end);
        }
        if let Some(from) = from {
            options = options.with_start_revision(from);
        }
        let (options, start) = (&options, &range.start);
        // Established (etcd confirmed it) before this returns, so no later change is missed.
        let stream = self
            .call("open watch", |mut c| async move {
                let mut stream = c.watch(start.clone(), Some(options.clone())).await?;
                match stream.message().await? {
                    Some(r) if r.created() => Ok(stream),
                    _ => Err(Error::Unavailable("etcd did not confirm the watch".into()).into()),
                }
            })
            .await?;
        let (tx, rx) = mpsc::channel(WATCH_CAPACITY);
        let queued = WatchQueue::default();
        let task = tokio::spawn(forward(stream, tx, queued.clone()));
        Ok(Watch::counted(rx, Some(task), queued))
    }

    async fn grant(&self, ttl: Duration) -> Result<Lease> {
        let secs = ttl_secs(ttl).max(1);
        let id = self
            .call("lease_grant", |mut c| async move {
                Ok(c.lease_grant(secs, None).await?.id())
            })
            .await?;
        Ok(Lease {
            id,
            ttl: Duration::from_secs(secs as u64),
        })
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration> {
        self.call("lease_keep_alive", |mut c| async move {
            let (mut keeper, mut stream) = match c.lease_keep_alive(lease).await {
                Ok(k) => k,
                Err(e) if is_lease_not_found(&e) => return Err(Error::LeaseExpired(lease).into()),
                Err(e) => return Err(e.into()),
            };
            // The first keep-alive went out with the stream and was answered; this second
            // one reads the TTL etcd now holds (0 if the lease just expired).
            keeper.keep_alive().await?;
            match stream.message().await? {
                Some(r) if r.ttl() > 0 => Ok(Duration::from_secs(r.ttl() as u64)),
                _ => Err(Error::LeaseExpired(lease).into()),
            }
        })
        .await
    }

    async fn revoke(&self, lease: LeaseId) -> Result<()> {
        self.call("lease_revoke", |mut c| async move {
            match c.lease_revoke(lease).await {
                Ok(_) => Ok(()),
                Err(e) if is_lease_not_found(&e) => Ok(()),
                Err(e) => Err(e.into()),
            }
        })
        .await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        // Not `physical`: etcd answers once the compaction is applied to its index and
        // removes the old revisions from its file in the background, so a large history
        // does not hold the call past `op_timeout`.
        self.call("compact", |mut c| async move {
            match c.compact(revision, None).await {
                Ok(_) => Ok(()),
                Err(e) if is_compacted(&e) => Ok(()),
                Err(e) if is_future_revision(&e) => Err(Error::InvalidRequest(format!(
                    "cannot compact etcd at revision {revision}: it is a future revision"
                ))
                .into()),
                Err(e) => Err(e.into()),
            }
        })
        .await
    }

    async fn count(&self, range: KeyRange) -> Result<u64> {
        let range = &range;
        self.call("count", |mut c| async move {
            let mut options = GetOptions::new().with_count_only();
            if let Some(end) = range_end(range) {
                options = options.with_range(end);
            }
            let resp = c.get(range.start.clone(), Some(options)).await?;
            Ok(resp.count().max(0) as u64)
        })
        .await
    }

    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.meter.register(registry);
    }

    async fn status(&self) -> Result<KvStatus> {
        self.call("status", |mut c| async move {
            let s = c.status().await?;
            Ok(KvStatus {
                revision: s.header().map(|h| h.revision()).unwrap_or(0),
                compacted_revision: None,
                db_bytes: s.db_size().max(0) as u64,
                // etcd before 3.4 leaves it 0.
                db_bytes_in_use: (s.raft_used_db_size() > 0).then(|| s.raft_used_db_size() as u64),
            })
        })
        .await
    }
}
