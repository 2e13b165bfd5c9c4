//! One conformance suite for every [`MetadataStore`] backend: run against the embedded store
//! (in memory and on a file, including reopen for durability) and against a real etcd that
//! each test starts on loopback ports (see `oxbow_metadata::testing`). Without the `etcd`
//! binary the etcd tests fail, unless `OXBOW_SKIP_ETCD=1`.
//!
//! Time: lease expiry uses the shortest TTL (2 s) and polls with a deadline; nothing sleeps
//! longer than a poll interval.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use oxbow_metadata::kv::{Get, Kv};
use oxbow_metadata::testing::{etcd_or_skip, EtcdCluster};
use oxbow_metadata::{AlterOp, ConfigAlteration, ConfigChange};
use oxbow_metadata::{
    BrokerEvent, BrokerRegistration, CatalogCommit, CatalogEntry, CatalogReplace, EmbeddedStore,
    EpochFence, EpochStart, ErrorKind, EtcdSettings, EtcdStore, KvStore, LeaderEpochHistory,
    LeaseGuard, MetadataStore, PartitionState, TopicEvent, TopicPartition, TopicSpec,
    WalReplicaSet, Watch, WriterFence,
};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[path = "conformance/catalog.rs"]
mod catalog;
use catalog::*;
#[path = "conformance/wal_replicas.rs"]
mod wal_replicas;
use wal_replicas::{wal_replica_sets, wal_set};
#[path = "conformance/security.rs"]
mod security;
use security::security_records;
#[path = "conformance/mirror.rs"]
mod mirror;
use mirror::mirror_records;
#[path = "conformance/groups.rs"]
mod groups;
use groups::{committed, consumer_groups, pending_txn_offsets, transactional_ids};
#[path = "conformance/topic_configs.rs"]
mod topic_configs;
use topic_configs::topic_config_alterations;

const TTL: Duration = Duration::from_secs(2);
/// Long enough for any expected event or expiry (TTL plus etcd's expiry sweep).
const DEADLINE: Duration = Duration::from_secs(8);
const POLL: Duration = Duration::from_millis(50);

/// Polls `check` until it holds or `DEADLINE` passes.
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

/// The next event of a watch, within `DEADLINE`.
async fn next<T>(w: &mut Watch<T>, what: &str) -> T {
    match tokio::time::timeout(DEADLINE, w.recv()).await {
        Ok(Some(e)) => e,
        Ok(None) => panic!("{what}: watch ended"),
        Err(_) => panic!("{what}: no event within {DEADLINE:?}"),
    }
}

fn registration(id: i32) -> BrokerRegistration {
    BrokerRegistration {
        broker_id: id,
        az: Some(format!("az{id}")),
        kafka_addr: format!("127.0.0.1:{}", 9000 + id),
        http_addr: format!("127.0.0.1:{}", 8000 + id),
        internal_addr: String::new(),
        listeners: Default::default(),
    }
}

fn spec(name: &str, partitions: i32) -> TopicSpec {
    TopicSpec {
        name: name.to_string(),
        partitions,
        replication_factor: 1,
        configs: BTreeMap::new(),
    }
}

fn entry(tp: TopicPartition, base: i64, last: i64, ts: i64, epoch: i32) -> CatalogEntry {
    CatalogEntry {
        topic_id: tp.topic_id,
        partition: tp.partition,
        base_offset: base,
        last_offset: last,
        max_timestamp_ms: ts,
        // One object per partition and base offset: a sealed object is catalogued once,
        // with all its partitions (see `wide_catalog_commit` for one object of many).
        object_key: format!("obj-{}-{base}", tp.partition),
        byte_start: 0,
        byte_len: 10,
        crc32c: 7,
        leader_epoch: epoch,
        layout: oxbow_metadata::EntryLayout::Batches,
        txn: None,
    }
}

async fn topics_lifecycle(store: &dyn MetadataStore) {
    let t = store
        .create_topic(spec("orders", 3), 1)
        .await
        .expect("create");
    assert_eq!(t.partitions.len(), 3);
    assert!(t
        .partitions
        .iter()
        .all(|p| p.leader == 1 && p.leader_epoch == 0));
    let err = store
        .create_topic(spec("orders", 3), 1)
        .await
        .expect_err("dup");
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
    let err = store
        .create_topic(spec("bad/name", 1), 1)
        .await
        .expect_err("name");
    assert_eq!(err.kind(), ErrorKind::Invalid);
    let err = store
        .create_topic(spec("zero", 0), 1)
        .await
        .expect_err("zero");
    assert_eq!(err.kind(), ErrorKind::Invalid);

    let grown = store.create_partitions("orders", 5, 1).await.expect("grow");
    assert_eq!(grown.partitions.len(), 5);
    let err = store
        .create_partitions("orders", 2, 1)
        .await
        .expect_err("shrink");
    assert_eq!(err.kind(), ErrorKind::Invalid);

    let by_id = store
        .topic_by_id(t.topic_id)
        .await
        .expect("by id")
        .expect("some");
    assert_eq!(by_id.name, "orders");
    assert_eq!(store.list_topics().await.expect("list").len(), 1);

    store.delete_topic("orders").await.expect("delete");
    assert!(store.topic("orders").await.expect("get").is_none());
    assert!(store
        .topic_by_id(t.topic_id)
        .await
        .expect("by id")
        .is_none());
    let err = store.delete_topic("orders").await.expect_err("gone");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    // Re-created under the same name: a new identity.
    let again = store
        .create_topic(spec("orders", 1), 1)
        .await
        .expect("recreate");
    assert_ne!(again.topic_id, t.topic_id);
    store.delete_topic("orders").await.expect("cleanup");
}

async fn partition_cas(store: &dyn MetadataStore) {
    let t = store.create_topic(spec("cas", 1), 1).await.expect("create");
    let p0 = t.partitions[0].clone();
    let mut next = p0.clone();
    next.leader = 2;
    next.leader_epoch = 1;
    let updated = store
        .update_partition(t.topic_id, p0.version, next.clone())
        .await
        .expect("cas");
    assert_eq!(updated.version, p0.version + 1);
    let read = store.topic("cas").await.expect("read").expect("topic");
    assert_eq!(read.partitions[0], updated);
    // One partition's state alone reads the same, with its topic.
    let (topic, state) = store
        .partition_state(t.topic_id, 0)
        .await
        .expect("partition state")
        .expect("exists");
    assert_eq!((topic.name.as_str(), &state), ("cas", &updated));
    assert!(store
        .partition_state(t.topic_id, 1)
        .await
        .expect("read")
        .is_none());
    let err = store
        .update_partition(
            t.topic_id,
            0,
            PartitionState {
                partition: 5,
                ..updated.clone()
            },
        )
        .await
        .expect_err("no such partition");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    // The same expected version again loses: someone else already moved it.
    let err = store
        .update_partition(t.topic_id, p0.version, next)
        .await
        .expect_err("stale cas");
    assert_eq!(err.kind(), ErrorKind::Conflict);

    // Racing writers with the same expected version: exactly one wins.
    let racers = (0..8).map(|i| {
        let mut p = updated.clone();
        p.leader = 10 + i;
        p.leader_epoch = 2;
        store.update_partition(t.topic_id, updated.version, p)
    });
    let results = futures::future::join_all(racers).await;
    let won = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(won, 1, "{results:?}");
    assert!(results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .all(|e| e.kind() == ErrorKind::Conflict));
    store.delete_topic("cas").await.expect("cleanup");
}

/// The leader-epoch history rides in the partition state: every CAS keeps what it is given,
/// every read and the watch return it, and growing the topic leaves it alone.
async fn partition_leader_epochs(store: &dyn MetadataStore) {
    let mut watch = store.watch_topics().await.expect("watch");
    let t = store
        .create_topic(spec("epochs", 1), 1)
        .await
        .expect("create");
    let _ = next(&mut watch, "created").await;
    assert!(t.partitions[0].leader_epochs.is_empty());
    let mut opened = t.partitions[0].clone();
    assert!(opened.leader_epochs.assign(0, 0));
    let opened = store
        .update_partition(t.topic_id, 0, opened)
        .await
        .expect("record epoch 0");
    let moved = store
        .update_partition(
            t.topic_id,
            opened.version,
            PartitionState {
                leader: 2,
                leader_epoch: 1,
                ..opened.clone()
            },
        )
        .await
        .expect("move");
    let mut reopened = moved.clone();
    assert!(reopened.leader_epochs.assign(1, 42));
    let stored = store
        .update_partition(t.topic_id, moved.version, reopened)
        .await
        .expect("record epoch 1");
    let expect = vec![
        EpochStart {
            epoch: 0,
            start_offset: 0,
        },
        EpochStart {
            epoch: 1,
            start_offset: 42,
        },
    ];
    assert_eq!(stored.leader_epochs.entries(), expect.as_slice());
    let by_name = store.topic("epochs").await.expect("read").expect("topic");
    assert_eq!(by_name.partitions[0], stored);
    let by_id = store
        .topic_by_id(t.topic_id)
        .await
        .expect("read")
        .expect("topic");
    assert_eq!(by_id.partitions[0].leader_epochs, stored.leader_epochs);
    let mut last = None;
    for _ in 0..3 {
        if let TopicEvent::PartitionChanged { state, .. } = next(&mut watch, "changed").await {
            last = Some(state);
        }
    }
    assert_eq!(
        last.expect("partition events").leader_epochs,
        stored.leader_epochs
    );
    let grown = store.create_partitions("epochs", 2, 1).await.expect("grow");
    assert_eq!(grown.partitions[0].leader_epochs, stored.leader_epochs);
    assert!(grown.partitions[1].leader_epochs.is_empty());
    store.delete_topic("epochs").await.expect("cleanup");
}

// ---- placement (cluster) ----

async fn placed_topics_and_transfers(store: &dyn MetadataStore) {
    // Each partition gets its own leader; a shorter list repeats.
    let t = store
        .create_topic_with_leaders(spec("placed", 4), &[3, 1, 2])
        .await
        .expect("create");
    let leaders: Vec<i32> = t.partitions.iter().map(|p| p.leader).collect();
    assert_eq!(leaders, vec![3, 1, 2, 3]);
    assert!(t.partitions.iter().all(|p| p.leader_epoch == 0));
    let err = store
        .create_topic_with_leaders(spec("nobody", 1), &[])
        .await
        .expect_err("no leaders");
    assert_eq!(err.kind(), ErrorKind::Invalid);
    // New partitions are placed by their own index; old ones keep their leaders.
    let grown = store
        .create_partitions_with_leaders("placed", 6, &[7, 8, 9, 7, 8, 9])
        .await
        .expect("grow");
    let leaders: Vec<i32> = grown.partitions.iter().map(|p| p.leader).collect();
    assert_eq!(leaders, vec![3, 1, 2, 3, 8, 9]);
    let read = store.topic("placed").await.expect("read").expect("topic");
    assert_eq!(read.partitions, grown.partitions);

    // A transfer request round-trips and is cleared by the move that answers it.
    let p1 = read.partitions[1].clone();
    let mut asked = p1.clone();
    asked.transfer_to = Some(2);
    let asked = store
        .update_partition(t.topic_id, p1.version, asked)
        .await
        .expect("request transfer");
    let read = store.topic("placed").await.expect("read").expect("topic");
    assert_eq!(read.partitions[1].transfer_to, Some(2));
    let mut moved = asked.clone();
    moved.leader = 2;
    moved.leader_epoch += 1;
    moved.transfer_to = None;
    store
        .update_partition(t.topic_id, asked.version, moved)
        .await
        .expect("move");
    let read = store.topic("placed").await.expect("read").expect("topic");
    assert_eq!(read.partitions[1].leader, 2);
    assert_eq!(read.partitions[1].leader_epoch, 1);
    assert_eq!(read.partitions[1].transfer_to, None);
    store.delete_topic("placed").await.expect("cleanup");
}

async fn brokers_and_leases(store: &dyn MetadataStore) {
    let mut watch = store.watch_brokers().await.expect("watch brokers");
    let b7 = registration(7);
    let guard = LeaseGuard::new();
    let lease = oxbow_metadata::lease::register(store, &b7, TTL, &guard)
        .await
        .expect("register");
    assert!(guard.is_valid());
    assert_eq!(
        next(&mut watch, "join").await,
        BrokerEvent::Joined(b7.clone())
    );
    assert_eq!(store.list_brokers().await.expect("list"), vec![b7.clone()]);
    // Too short a TTL is refused the same way by every backend.
    let err = store
        .register_broker(registration(8), Duration::from_millis(500))
        .await
        .expect_err("short ttl");
    assert_eq!(err.kind(), ErrorKind::Invalid);

    // Kept alive past its TTL: still registered.
    let until = Instant::now() + TTL + Duration::from_millis(500);
    while Instant::now() < until {
        let sent = Instant::now();
        let ttl = store.keep_alive(lease.id).await.expect("keep alive");
        guard.renewed(lease.id, sent, ttl);
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    assert_eq!(store.list_brokers().await.expect("list").len(), 1);
    assert!(guard.is_valid());

    // Left alone: the guard lapses first (margin), then the registration disappears.
    eventually("guard lapses", || {
        let g = guard.clone();
        async move { !g.is_valid() }
    })
    .await;
    eventually("registration expires", || async {
        store.list_brokers().await.expect("list").is_empty()
    })
    .await;
    assert_eq!(next(&mut watch, "leave").await, BrokerEvent::Left(7));
    let err = store.keep_alive(lease.id).await.expect_err("expired");
    assert_eq!(err.kind(), ErrorKind::Fenced);

    // Revoke: gone at once.
    let lease = store
        .register_broker(b7.clone(), TTL)
        .await
        .expect("register again");
    assert_eq!(
        next(&mut watch, "join again").await,
        BrokerEvent::Joined(b7)
    );
    store.revoke_lease(lease.id).await.expect("revoke");
    assert_eq!(next(&mut watch, "revoked").await, BrokerEvent::Left(7));
    assert!(store.list_brokers().await.expect("list").is_empty());
    store.revoke_lease(lease.id).await.expect("revoke twice");
}

async fn controller_election(store: &dyn MetadataStore) {
    let l1 = store
        .register_broker(registration(1), TTL)
        .await
        .expect("b1");
    let l2 = store
        .register_broker(registration(2), TTL)
        .await
        .expect("b2");
    let mut watch = store.watch_controller().await.expect("watch");
    assert_eq!(next(&mut watch, "initial").await, None);
    assert_eq!(store.campaign(1, l1.id).await.expect("campaign"), 1);
    assert_eq!(next(&mut watch, "elected").await, Some(1));
    assert_eq!(store.campaign(2, l2.id).await.expect("campaign"), 1);
    assert_eq!(store.controller().await.expect("controller"), Some(1));
    // Resigning is only for the holder.
    store.resign(2).await.expect("resign other");
    assert_eq!(store.controller().await.expect("controller"), Some(1));
    // The holder's lease ends: the post is vacated and another can take it.
    store.revoke_lease(l1.id).await.expect("revoke");
    assert_eq!(next(&mut watch, "vacated").await, None);
    assert_eq!(store.campaign(2, l2.id).await.expect("campaign"), 2);
    assert_eq!(next(&mut watch, "second").await, Some(2));
    store.resign(2).await.expect("resign");
    assert_eq!(next(&mut watch, "resigned").await, None);
    let err = store.campaign(1, l1.id).await.expect_err("dead lease");
    assert_eq!(err.kind(), ErrorKind::Fenced);
    store.revoke_lease(l2.id).await.expect("revoke");
}

async fn topic_watch(store: &dyn MetadataStore) {
    let mut watch = store.watch_topics().await.expect("watch");
    let t = store
        .create_topic(spec("watched", 2), 1)
        .await
        .expect("create");
    match next(&mut watch, "created").await {
        TopicEvent::Changed(got) => assert_eq!(got, t),
        other => panic!("expected Changed, got {other:?}"),
    }
    let mut p1 = t.partitions[1].clone();
    p1.leader = 2;
    p1.leader_epoch = 1;
    let updated = store
        .update_partition(t.topic_id, 0, p1)
        .await
        .expect("cas");
    assert_eq!(
        next(&mut watch, "partition").await,
        TopicEvent::PartitionChanged {
            topic_id: t.topic_id,
            state: updated.clone()
        }
    );
    let grown = store
        .create_partitions("watched", 3, 1)
        .await
        .expect("grow");
    assert_eq!(grown.partitions[1], updated, "growing keeps changed states");
    match next(&mut watch, "grown").await {
        TopicEvent::Changed(got) => assert_eq!(got.partitions.len(), 3),
        other => panic!("expected Changed, got {other:?}"),
    }
    store.delete_topic("watched").await.expect("delete");
    assert_eq!(
        next(&mut watch, "deleted").await,
        TopicEvent::Deleted {
            name: "watched".into(),
            topic_id: t.topic_id
        }
    );
    // Changes delivered but not taken yet are counted (how far behind the subscriber is),
    // and read 0 once taken, or once the watch is gone. (No deletes meanwhile: a created
    // topic's event is read whole when it is forwarded, and one deleted by then is skipped.)
    let queue = watch.queue();
    assert_eq!(queue.queued(), 0);
    for (name, queued) in [("queued-1", 1), ("queued-2", 2)] {
        store.create_topic(spec(name, 1), 1).await.expect("create");
        eventually("changes queued", || {
            let q = queue.clone();
            async move { q.queued() == queued }
        })
        .await;
    }
    let _ = next(&mut watch, "queued-1 created").await;
    assert_eq!(queue.queued(), 1);
    drop(watch);
    assert_eq!(queue.queued(), 0);
    for name in ["queued-1", "queued-2"] {
        store.delete_topic(name).await.expect("delete");
    }
}

async fn producer_ids(store: &dyn MetadataStore) {
    let a = store.allocate_producer_ids(100).await.expect("alloc");
    let b = store.allocate_producer_ids(100).await.expect("alloc");
    assert!(b >= a + 100, "blocks never overlap: {a} then {b}");
}

async fn run_all(store: &dyn MetadataStore) {
    producer_ids(store).await;
    topics_lifecycle(store).await;
    partition_cas(store).await;
    partition_leader_epochs(store).await;
    placed_topics_and_transfers(store).await;
    catalog_fencing_and_lookup(store).await;
    wide_catalog_commit(store).await;
    catalog_writer_fence_and_epoch_cut(store).await;
    catalog_replace(store).await;
    sealed_object_lookup(store).await;
    catalog_log_start(store).await;
    topic_watch(store).await;
    topic_config_alterations(store).await;
    consumer_groups(store).await;
    transactional_ids(store).await;
    pending_txn_offsets(store).await;
    controller_election(store).await;
    brokers_and_leases(store).await;
    wal_replica_sets(store).await;
    security_records(store).await;
    mirror_records(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_in_memory() {
    let store = EmbeddedStore::in_memory().expect("open");
    run_all(&store).await;
    wide_commit_is_one_revision(&store, 4000).await;
    catalog_replace_many(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_on_file_survives_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("metadata.redb");
    let old_lease;
    {
        let store = EmbeddedStore::open(&path).expect("open");
        run_all(&store).await;
        store
            .create_topic(spec("kept", 2), 1)
            .await
            .expect("create");
        store
            .commit_offsets("g", vec![committed("kept", 0, 4)])
            .await
            .expect("offsets");
        store
            .put_txn_offsets("g", 3, 0, vec![committed("kept", 1, 8)])
            .await
            .expect("pending offsets");
        store
            .put_wal_replica_set(wal_set(4, &[5, 6], &[5]), None)
            .await
            .expect("WAL replica set");
        old_lease = store
            .register_broker(registration(1), Duration::from_secs(60))
            .await
            .expect("register")
            .id;
    }
    // The catalogue's task may hold the file a moment longer, through a sweep's transaction
    // in flight when the last handle went (one every 10 s; this test takes longer than that
    // on a busy machine): retry the open for a little while.
    let mut opened = EmbeddedStore::open(&path);
    for _ in 0..50 {
        match &opened {
            Err(e) if e.to_string().contains("already open") => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                opened = EmbeddedStore::open(&path);
            }
            _ => break,
        }
    }
    let store = opened.expect("reopen");
    let kept = store.topic("kept").await.expect("get").expect("kept");
    assert_eq!(kept.partitions.len(), 2);
    assert_eq!(store.fetch_offsets("g").await.expect("fetch").len(), 1);
    // Pending transactional offsets survive a restart, and commit after it.
    store
        .complete_txn_offsets("g", 3, 0, true)
        .await
        .expect("commit")
        .expect("kept across the restart");
    assert_eq!(store.fetch_offsets("g").await.expect("fetch").len(), 2);
    assert_eq!(
        store.wal_replica_set(4).await.expect("read"),
        Some(WalReplicaSet {
            version: 1,
            ..wal_set(4, &[5, 6], &[5])
        })
    );
    // A lease of the previous process is expired at open, with what was bound to it.
    assert!(store.list_brokers().await.expect("list").is_empty());
    let err = store.keep_alive(old_lease).await.expect_err("old lease");
    assert_eq!(err.kind(), ErrorKind::Fenced);
}

async fn etcd_store(etcd: &EtcdCluster, cluster: &str) -> EtcdStore {
    EtcdStore::connect(EtcdSettings::new(etcd.endpoints(), cluster))
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_single_member() {
    if !etcd_or_skip() {
        return;
    }
    let etcd = EtcdCluster::start(1).expect("start etcd");
    let store = etcd_store(&etcd, "conformance").await;
    run_all(&store).await;
    wide_commit_is_one_revision(&store, 4000).await;
    catalog_replace_many(&store).await;
    // Another cluster name shares the etcd but sees nothing of this one.
    let other = etcd_store(&etcd, "other").await;
    assert!(other.list_topics().await.expect("list").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_corrupt_values_name_the_key() {
    if !etcd_or_skip() {
        return;
    }
    let etcd = EtcdCluster::start(1).expect("start etcd");
    let store = etcd_store(&etcd, "corrupt").await;
    let mut client = store.client();
    let key = oxbow_metadata::keys::topic::ser_key(store.root(), "bad");
    client
        .put(key.clone(), br#"{"v":9,"name":"bad"}"#.to_vec(), None)
        .await
        .expect("plant");
    let err = store.topic("bad").await.expect_err("unknown version");
    assert_eq!(err.kind(), ErrorKind::Data);
    assert!(err.to_string().contains(&key), "{err}");
    assert!(err.to_string().contains("version 9"), "{err}");
    let err = store.list_topics().await.expect_err("list reads it too");
    assert_eq!(err.kind(), ErrorKind::Data);
    let counter = oxbow_metadata::keys::counter::ser_key(store.root(), "producer_id");
    client
        .put(counter.clone(), b"\x00not json".to_vec(), None)
        .await
        .expect("plant");
    let err = store.allocate_producer_ids(1).await.expect_err("garbage");
    assert_eq!(err.kind(), ErrorKind::Data);
    assert!(err.to_string().contains(&counter), "{err}");
}

/// Two brokers' stores over one etcd: each serves lookups from its own in-memory catalogue,
/// fed by watches; one that syncs a partition sees everything the other committed before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_brokers_share_the_catalog_through_watches() {
    if !etcd_or_skip() {
        return;
    }
    let etcd = EtcdCluster::start(1).expect("start etcd");
    let a = etcd_store(&etcd, "shared").await;
    let b = etcd_store(&etcd, "shared").await;
    let t = a.create_topic(spec("s", 2), 1).await.expect("create");
    let tp = TopicPartition::new(t.topic_id, 0);
    // B's catalogue is running before A commits.
    assert!(b.catalog_last(t.topic_id, 0).await.expect("b").is_none());
    let fences = vec![EpochFence {
        topic_partition: tp,
        leader_epoch: 0,
    }];
    a.commit_catalog(CatalogCommit {
        entries: vec![entry(tp, 0, 9, 1, 0)],
        fences: fences.clone(),
        writer: None,
    })
    .await
    .expect("commit");
    // A sync makes it visible at once; without one, the watch brings it shortly.
    b.sync_catalog(t.topic_id, 0).await.expect("sync");
    assert_eq!(
        b.catalog_last(t.topic_id, 0)
            .await
            .expect("b")
            .map(|e| e.last_offset),
        Some(9)
    );
    a.commit_catalog(CatalogCommit {
        entries: vec![entry(tp, 10, 19, 2, 0)],
        fences,
        writer: None,
    })
    .await
    .expect("commit");
    eventually("the watch delivers A's commit to B", || async {
        b.catalog_last(t.topic_id, 0)
            .await
            .expect("b")
            .map(|e| e.last_offset)
            == Some(19)
    })
    .await;
    // A topic deleted by A is gone from B's catalogue too.
    a.delete_topic("s").await.expect("delete");
    eventually("the deletion reaches B", || async {
        b.catalog_last(t.topic_id, 0).await.expect("b").is_none()
    })
    .await;
}
