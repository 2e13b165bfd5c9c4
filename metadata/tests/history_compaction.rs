//! Watches survive history compaction (issue 14): against a real etcd, every watch a broker
//! keeps — the catalogue's (from a revision), the controller's (from a revision), topics'
//! and brokers' (from now) — either goes on through a compaction or ends, and its reader
//! re-reads and ends up with the right state.
//!
//! The race that matters is a compaction landing between a reader's read at revision R and
//! its watch from R + 1 (a first start, or a restart after a lost stream). It is made
//! deterministic by [`CompactingKv`]: an etcd [`Kv`] that, when armed, runs another broker's
//! writes and then compacts to the current revision just before it opens the next watch
//! from a past revision. Without the `etcd` binary these tests fail, unless
//! `OXBOW_SKIP_ETCD=1`.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use futures::future::BoxFuture;
use oxbow_metadata::keys::Root;
use oxbow_metadata::kv::{
    EtcdKv, Get, KeyRange, Kv, KvStatus, Op, RangeResponse, Revision, Txn, TxnResponse, WatchEvent,
};
use oxbow_metadata::testing::{etcd_or_skip, EtcdCluster};
use oxbow_metadata::{
    BrokerEvent, BrokerRegistration, CatalogCommit, CatalogEntry, EntryLayout, EpochFence,
    EtcdSettings, EtcdStore, KvStore, Lease, LeaseId, MetadataStore, Result, TopicEvent,
    TopicPartition, TopicSpec, Watch,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Long enough for any expected event (etcd syncs lagging watchers every 100 ms; the
/// catalogue re-scans 500 ms after a watch ends).
const DEADLINE: Duration = Duration::from_secs(8);
const POLL: Duration = Duration::from_millis(50);

/// What runs, once, right before the next watch from a past revision opens.
type Gap = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

/// [`EtcdKv`] whose next watch from a past revision finds that revision compacted: when
/// armed, it first runs the gap (writes by another broker), writes one more revision
/// (outside the cluster's keys: etcd keeps the compacted revision itself watchable, so the
/// compaction must pass the gap's first write), compacts at the current revision, then
/// opens the watch as asked.
struct CompactingKv {
    inner: EtcdKv,
    armed: Mutex<Option<Gap>>,
    /// Gaps run so far.
    fired: AtomicUsize,
    /// Watches opened from a past revision so far.
    watches_from: AtomicUsize,
}

impl CompactingKv {
    fn arm(&self, gap: Gap) {
        *self.armed.lock().expect("lock") = Some(gap);
    }
}

#[async_trait::async_trait]
impl Kv for CompactingKv {
    async fn range(&self, get: Get) -> Result<RangeResponse> {
        self.inner.range(get).await
    }
    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        self.inner.txn(txn).await
    }
    async fn watch(
        &self,
        range: KeyRange,
        from: Option<Revision>,
    ) -> Result<Watch<Vec<WatchEvent>>> {
        let gap = match from {
            Some(_) => self.armed.lock().expect("lock").take(),
            None => None,
        };
        if let Some(gap) = gap {
            gap().await;
            let now = self
                .inner
                .txn(Txn::new().then([Op::put("/history-test/tick", "1")]))
                .await?
                .revision;
            self.inner.compact(now).await?;
            self.fired.fetch_add(1, Ordering::SeqCst);
        }
        if from.is_some() {
            self.watches_from.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.watch(range, from).await
    }
    async fn grant(&self, ttl: Duration) -> Result<Lease> {
        self.inner.grant(ttl).await
    }
    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration> {
        self.inner.keep_alive(lease).await
    }
    async fn revoke(&self, lease: LeaseId) -> Result<()> {
        self.inner.revoke(lease).await
    }
    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }
    async fn count(&self, range: KeyRange) -> Result<u64> {
        self.inner.count(range).await
    }
    async fn status(&self) -> Result<KvStatus> {
        self.inner.status().await
    }
}

/// Broker A's store over a [`CompactingKv`], and broker B's plain store, on one cluster.
async fn two_brokers(etcd: &EtcdCluster, cluster: &str) -> (KvStore<CompactingKv>, Arc<EtcdStore>) {
    let inner = EtcdKv::connect(&etcd.endpoints(), Duration::from_secs(5))
        .await
        .expect("connect");
    let a = KvStore::new(
        CompactingKv {
            inner,
            armed: Mutex::new(None),
            fired: AtomicUsize::new(0),
            watches_from: AtomicUsize::new(0),
        },
        Root::new(cluster),
    );
    let b = EtcdStore::connect(EtcdSettings::new(etcd.endpoints(), cluster))
        .await
        .expect("connect");
    (a, Arc::new(b))
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + DEADLINE;
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("{what}: not within {DEADLINE:?}");
}

async fn next<T>(w: &mut Watch<T>, what: &str) -> T {
    match tokio::time::timeout(DEADLINE, w.recv()).await {
        Ok(Some(e)) => e,
        Ok(None) => panic!("{what}: watch ended"),
        Err(_) => panic!("{what}: no event within {DEADLINE:?}"),
    }
}

fn spec(name: &str) -> TopicSpec {
    TopicSpec {
        name: name.to_string(),
        partitions: 1,
        replication_factor: 1,
        configs: BTreeMap::new(),
    }
}

fn registration(id: i32) -> BrokerRegistration {
    BrokerRegistration {
        broker_id: id,
        az: None,
        kafka_addr: format!("127.0.0.1:{}", 9000 + id),
        http_addr: format!("127.0.0.1:{}", 8000 + id),
        internal_addr: String::new(),
        listeners: Default::default(),
    }
}

fn commit(tp: TopicPartition, base: i64, last: i64) -> CatalogCommit {
    CatalogCommit {
        entries: vec![CatalogEntry {
            topic_id: tp.topic_id,
            partition: tp.partition,
            base_offset: base,
            last_offset: last,
            max_timestamp_ms: base,
            object_key: format!("obj-{base}"),
            byte_start: 0,
            byte_len: 10,
            crc32c: 7,
            leader_epoch: 0,
            layout: EntryLayout::Batches,
            txn: None,
        }],
        fences: vec![EpochFence {
            topic_partition: tp,
            leader_epoch: 0,
        }],
        writer: None,
    }
}

async fn last_offset(store: &dyn MetadataStore, tp: TopicPartition) -> Option<i64> {
    store
        .catalog_last(tp.topic_id, tp.partition)
        .await
        .expect("catalog_last")
        .map(|e| e.last_offset)
}

/// The in-memory catalogue scans at R and watches from R + 1; another broker commits and
/// the history is compacted in between. The watch ends at once, the catalogue re-scans,
/// holds the commit it would otherwise have missed, and follows later commits again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalogue_recovers_from_a_compacted_start() {
    if !etcd_or_skip() {
        return;
    }
    let etcd = EtcdCluster::start(1).expect("start etcd");
    let (a, b) = two_brokers(&etcd, "cat").await;
    let t = b.create_topic(spec("t"), 2).await.expect("create");
    let tp = TopicPartition::new(t.topic_id, 0);
    b.commit_catalog(commit(tp, 0, 9)).await.expect("commit");
    let writer = b.clone();
    a.kv().arm(Box::new(move || {
        Box::pin(async move {
            writer
                .commit_catalog(commit(tp, 10, 19))
                .await
                .expect("commit in the gap");
        })
    }));
    // Starts A's catalogue: its scan sees 0..=9, its watch from the next revision finds
    // that history compacted.
    let first = last_offset(&a, tp).await;
    assert!(matches!(first, Some(9) | Some(19)), "{first:?}");
    eventually(
        "the catalogue re-scans and holds the gap's commit",
        || async { last_offset(&a, tp).await == Some(19) },
    )
    .await;
    assert_eq!(a.kv().fired.load(Ordering::SeqCst), 1, "the gap ran once");
    // Its two watches (catalog/, topics/) ended and were opened again after the re-scan.
    assert!(a.kv().watches_from.load(Ordering::SeqCst) >= 4);
    // The watch it re-established delivers what follows.
    b.commit_catalog(commit(tp, 20, 29)).await.expect("commit");
    eventually("a commit after the compaction arrives by watch", || async {
        last_offset(&a, tp).await == Some(29)
    })
    .await;
    // And a compaction while it keeps up does not disturb it.
    let now = a
        .metadata_revision()
        .await
        .expect("revision")
        .expect("etcd");
    a.compact_history(now).await.expect("compact");
    b.commit_catalog(commit(tp, 30, 39)).await.expect("commit");
    eventually("a commit after a second compaction arrives", || async {
        last_offset(&a, tp).await == Some(39)
    })
    .await;
}

/// The controller watch reads the holder at R and watches from R + 1; the post changes
/// hands and the history is compacted in between. The watch gives the holder it read, then
/// ends; subscribing again (what the controller's driver does on an ended watch) gives the
/// holder now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_watch_recovers_from_a_compacted_start() {
    if !etcd_or_skip() {
        return;
    }
    let etcd = EtcdCluster::start(1).expect("start etcd");
    let (a, b) = two_brokers(&etcd, "ctl").await;
    let campaigner = b.clone();
    a.kv().arm(Box::new(move || {
        Box::pin(async move {
            let lease = campaigner
                .register_broker(registration(2), Duration::from_secs(30))
                .await
                .expect("register");
            let won = campaigner.campaign(2, lease.id).await.expect("campaign");
            assert_eq!(won, 2);
        })
    }));
    let mut watch = a.watch_controller().await.expect("watch");
    assert_eq!(next(&mut watch, "holder as read").await, None);
    let ended = tokio::time::timeout(DEADLINE, watch.recv())
        .await
        .expect("the watch ends once etcd finds its start compacted");
    assert_eq!(ended, None, "no event from compacted history");
    assert_eq!(a.kv().fired.load(Ordering::SeqCst), 1);
    let mut again = a.watch_controller().await.expect("watch again");
    assert_eq!(
        next(&mut again, "holder after re-subscribing").await,
        Some(2)
    );
    b.resign(2).await.expect("resign");
    assert_eq!(next(&mut again, "vacancy").await, None);
}

/// Topic and broker watches start from "now", so a compaction never ends them at their
/// start; established ones keep delivering through compactions, and a store's list after
/// a compaction is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_and_broker_watches_go_on_through_compaction() {
    if !etcd_or_skip() {
        return;
    }
    let etcd = EtcdCluster::start(1).expect("start etcd");
    let (a, b) = two_brokers(&etcd, "tb").await;
    b.create_topic(spec("before"), 2).await.expect("create");
    let mut topics = a.watch_topics().await.expect("topics");
    let mut brokers = a.watch_brokers().await.expect("brokers");
    for _ in 0..3 {
        let now = a
            .metadata_revision()
            .await
            .expect("revision")
            .expect("etcd");
        a.compact_history(now).await.expect("compact");
    }
    b.create_topic(spec("after"), 2).await.expect("create");
    b.register_broker(registration(3), Duration::from_secs(30))
        .await
        .expect("register");
    match next(&mut topics, "topic after compaction").await {
        TopicEvent::Changed(t) => assert_eq!(t.name, "after"),
        other => panic!("unexpected {other:?}"),
    }
    match next(&mut brokers, "broker after compaction").await {
        BrokerEvent::Joined(r) => assert_eq!(r.broker_id, 3),
        other => panic!("unexpected {other:?}"),
    }
    let names: Vec<String> = a
        .list_topics()
        .await
        .expect("list")
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, vec!["after".to_string(), "before".to_string()]);
    // The footprint reflects it: the compacted revision is not reported by etcd, the rest is.
    let f = a
        .metadata_footprint()
        .await
        .expect("footprint")
        .expect("etcd");
    assert!(f.db_bytes > 0 && f.keys > 0 && f.revision > 0, "{f:?}");
}
