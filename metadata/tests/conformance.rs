//! One conformance suite for every [`MetadataStore`] backend: run against the embedded store
//! (in memory and on a file, including reopen for durability) and against a real etcd that
//! each test starts on loopback ports (see `oxbow_metadata::testing`). Without the `etcd`
//! binary the etcd tests fail, unless `OXBOW_SKIP_ETCD=1`.
//!
//! Time: lease expiry uses the shortest TTL (2 s) and polls with a deadline; nothing sleeps
//! longer than a poll interval.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use oxbow_metadata::kv::{Get, Kv};
use oxbow_metadata::testing::{etcd_or_skip, EtcdCluster};
use oxbow_metadata::{
    BrokerEvent, BrokerRegistration, CatalogCommit, CatalogEntry, CatalogReplace, CommittedOffset,
    EmbeddedStore, EpochFence, EpochStart, ErrorKind, EtcdSettings, EtcdStore, KvStore,
    LeaderEpochHistory, LeaseGuard, MetadataStore, PartitionState, TopicEvent, TopicPartition,
    TopicSpec, WalReplicaSet, Watch, WriterFence,
};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

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

async fn catalog_fencing_and_lookup(store: &dyn MetadataStore) {
    let t = store.create_topic(spec("cat", 2), 1).await.expect("create");
    let tp0 = TopicPartition::new(t.topic_id, 0);
    let tp1 = TopicPartition::new(t.topic_id, 1);
    let fences = vec![
        EpochFence {
            topic_partition: tp0,
            leader_epoch: 0,
        },
        EpochFence {
            topic_partition: tp1,
            leader_epoch: 0,
        },
    ];
    let first = CatalogCommit {
        entries: vec![entry(tp0, 0, 9, 100, 0), entry(tp1, 0, 4, 50, 0)],
        fences: fences.clone(),
        writer: None,
    };
    store.commit_catalog(first.clone()).await.expect("commit");
    // Retrying a commit that already landed is a no-op.
    store.commit_catalog(first).await.expect("idempotent retry");
    store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp0, 10, 19, 200, 0)],
            fences: fences.clone(),
            writer: None,
        })
        .await
        .expect("second");
    // A gap or overlap is refused.
    let err = store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp0, 25, 30, 300, 0)],
            fences: fences.clone(),
            writer: None,
        })
        .await
        .expect_err("gap");
    assert_eq!(err.kind(), ErrorKind::Conflict);

    let found = store
        .catalog_entries(t.topic_id, 0, 12, 10)
        .await
        .expect("lookup");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].base_offset, 10);
    let all = store
        .catalog_entries(t.topic_id, 0, 0, 10)
        .await
        .expect("all");
    assert_eq!(all.len(), 2);
    let limited = store
        .catalog_entries(t.topic_id, 0, 0, 1)
        .await
        .expect("limit");
    assert_eq!(limited.len(), 1);
    assert!(store
        .catalog_entries(t.topic_id, 0, 20, 10)
        .await
        .expect("past")
        .is_empty());
    let last = store
        .catalog_last(t.topic_id, 0)
        .await
        .expect("last")
        .expect("some");
    assert_eq!(last.last_offset, 19);
    let by_ts = store
        .catalog_find_timestamp(t.topic_id, 0, 150)
        .await
        .expect("ts")
        .expect("some");
    assert_eq!(by_ts.base_offset, 10);
    assert!(store
        .catalog_find_timestamp(t.topic_id, 0, 201)
        .await
        .expect("ts")
        .is_none());

    // A new leader bumps the epoch: the old leader's commit is fenced, all-or-nothing.
    let mut p0 = t.partitions[0].clone();
    p0.leader_epoch = 1;
    store
        .update_partition(t.topic_id, 0, p0)
        .await
        .expect("bump");
    let err = store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp0, 20, 29, 300, 0), entry(tp1, 5, 9, 300, 0)],
            fences,
            writer: None,
        })
        .await
        .expect_err("fenced");
    assert_eq!(err.kind(), ErrorKind::Fenced);
    let p1 = store
        .catalog_last(t.topic_id, 1)
        .await
        .expect("last")
        .expect("some");
    assert_eq!(p1.last_offset, 4, "a fenced commit wrote nothing");

    // Deleting the topic drops its catalog.
    store.delete_topic("cat").await.expect("delete");
    assert!(store
        .catalog_last(t.topic_id, 0)
        .await
        .expect("last")
        .is_none());
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

fn committed(topic: &str, partition: i32, offset: i64) -> CommittedOffset {
    CommittedOffset {
        topic: topic.to_string(),
        partition,
        offset,
        leader_epoch: 3,
        metadata: format!("m{offset}"),
        commit_timestamp_ms: 1000 + offset,
    }
}

async fn consumer_groups(store: &dyn MetadataStore) {
    // A group id with separators must not collide with another's keys.
    let g = "team/a%1";
    store
        .commit_offsets(g, (0..200).map(|p| committed("t1", p, 10)).collect())
        .await
        .expect("commit 200");
    store
        .commit_offsets(g, vec![committed("t1", 0, 11), committed("t2", 0, 5)])
        .await
        .expect("commit");
    store
        .commit_offsets("team", vec![committed("t1", 0, 99)])
        .await
        .expect("other group");
    let got = store.fetch_offsets(g).await.expect("fetch");
    assert_eq!(got.len(), 201);
    assert_eq!(got[0], committed("t1", 0, 11), "last write wins");
    assert_eq!(got[200], committed("t2", 0, 5));
    store
        .delete_offsets(g, Some(vec![("t2".to_string(), 0)]))
        .await
        .expect("delete one");
    assert_eq!(store.fetch_offsets(g).await.expect("fetch").len(), 200);
    assert_eq!(store.fetch_offsets("team").await.expect("fetch").len(), 1);

    // The coordinator record: create, CAS, conflicts.
    assert!(store.group(g).await.expect("group").is_none());
    let r1 = store
        .put_group(g, None, Bytes::from_static(b"gen1"))
        .await
        .expect("create");
    assert_eq!(r1.version, 1);
    let err = store
        .put_group(g, None, Bytes::from_static(b"again"))
        .await
        .expect_err("exists");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let r2 = store
        .put_group(g, Some(1), Bytes::from_static(b"gen2\x00\xff"))
        .await
        .expect("cas");
    assert_eq!(r2.version, 2);
    let err = store
        .put_group(g, Some(1), Bytes::from_static(b"stale"))
        .await
        .expect_err("stale");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(store.group(g).await.expect("group"), Some(r2));
    let mut groups = store.list_groups().await.expect("list");
    groups.sort();
    assert_eq!(groups, vec!["team".to_string(), g.to_string()]);
    let err = store.delete_group(g, 1).await.expect_err("stale delete");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    store.delete_group(g, 2).await.expect("delete");
    assert!(store.group(g).await.expect("group").is_none());
    assert!(store.fetch_offsets(g).await.expect("fetch").is_empty());
    let err = store.delete_group(g, 2).await.expect_err("gone");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    store
        .delete_offsets("team", None)
        .await
        .expect("delete all");
    assert!(store.list_groups().await.expect("list").is_empty());
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
}

async fn wide_catalog_commit(store: &dyn MetadataStore) {
    // One object holding 100 partitions: one commit, all or nothing, and a retry is a no-op.
    let t = store
        .create_topic(spec("wide", 100), 1)
        .await
        .expect("create");
    let tps: Vec<TopicPartition> = (0..100)
        .map(|p| TopicPartition::new(t.topic_id, p))
        .collect();
    let commit = CatalogCommit {
        entries: tps
            .iter()
            .map(|tp| CatalogEntry {
                object_key: "wide-object".into(),
                byte_start: 10 * tp.partition as u64,
                ..entry(*tp, 0, 9, 5, 0)
            })
            .collect(),
        fences: tps
            .iter()
            .map(|tp| EpochFence {
                topic_partition: *tp,
                leader_epoch: 0,
            })
            .collect(),
        writer: None,
    };
    store.commit_catalog(commit.clone()).await.expect("commit");
    store.commit_catalog(commit).await.expect("retry");
    for p in [0, 57, 99] {
        let last = store
            .catalog_last(t.topic_id, p)
            .await
            .expect("last")
            .expect("some");
        assert_eq!(last.last_offset, 9);
    }
    store.delete_topic("wide").await.expect("cleanup");
}

async fn catalog_writer_fence_and_epoch_cut(store: &dyn MetadataStore) {
    let t = store
        .create_topic(spec("fenced", 1), 7)
        .await
        .expect("create");
    let tp = TopicPartition::new(t.topic_id, 0);
    let lease = store
        .register_broker(registration(7), Duration::from_secs(60))
        .await
        .expect("register");
    let writer = Some(WriterFence {
        broker_id: 7,
        lease_id: lease.id,
    });
    let fences = vec![EpochFence {
        topic_partition: tp,
        leader_epoch: 0,
    }];
    // Epoch 0 writes 0..=9, then 10..=19.
    for (base, last) in [(0, 9), (10, 19)] {
        store
            .commit_catalog(CatalogCommit {
                entries: vec![entry(tp, base, last, base, 0)],
                fences: fences.clone(),
                writer,
            })
            .await
            .expect("commit under the lease");
    }
    // A writer holding another lease (a previous registration) commits nothing.
    let err = store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp, 20, 29, 20, 0)],
            fences: fences.clone(),
            writer: Some(WriterFence {
                broker_id: 7,
                lease_id: lease.id + 1,
            }),
        })
        .await
        .expect_err("stale lease");
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");

    // A new leader at epoch 1 recovered up to 15 and starts there: what epoch 0 holds past
    // 14 is a deposed leader's tail and is never served, however it was committed.
    let mut p = t.partitions[0].clone();
    p.leader = 8;
    p.leader_epoch = 1;
    p.leader_epochs = LeaderEpochHistory::from_entries(vec![
        EpochStart {
            epoch: 0,
            start_offset: 0,
        },
        EpochStart {
            epoch: 1,
            start_offset: 15,
        },
    ]);
    store
        .update_partition(t.topic_id, 0, p)
        .await
        .expect("new leader");
    let served = store
        .catalog_entries(t.topic_id, 0, 0, 10)
        .await
        .expect("read");
    assert_eq!(
        served
            .iter()
            .map(|e| (e.base_offset, e.last_offset, e.leader_epoch))
            .collect::<Vec<_>>(),
        vec![(0, 9, 0), (10, 14, 0)],
        "the second entry is clipped at epoch 1's start"
    );
    // The old leader's late commit is refused (its epoch is known to have moved) ...
    let err = store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp, 20, 29, 20, 0)],
            fences: fences.clone(),
            writer,
        })
        .await
        .expect_err("deposed");
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    // ... and the new leader's data continues at 15, served after the clipped entry.
    store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp, 15, 24, 15, 1)],
            fences: vec![EpochFence {
                topic_partition: tp,
                leader_epoch: 1,
            }],
            writer: None,
        })
        .await
        .expect("new leader commits");
    let last = store
        .catalog_last(t.topic_id, 0)
        .await
        .expect("last")
        .expect("some");
    assert_eq!(
        (last.base_offset, last.last_offset, last.leader_epoch),
        (15, 24, 1)
    );
    // Once the lease is gone, so is the broker's right to commit.
    store.revoke_lease(lease.id).await.expect("revoke");
    let err = store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp, 25, 29, 25, 1)],
            fences: vec![EpochFence {
                topic_partition: tp,
                leader_epoch: 1,
            }],
            writer,
        })
        .await
        .expect_err("lease gone");
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    store.delete_topic("fenced").await.expect("cleanup");
}

/// A seal of thousands of partitions is one metadata revision (issue 13): the commit's
/// cost does not grow with the partitions it catalogues.
async fn wide_commit_is_one_revision<K: Kv>(store: &KvStore<K>, partitions: i32) {
    let t = store
        .create_topic(spec("huge", partitions), 1)
        .await
        .expect("create");
    let entries: Vec<CatalogEntry> = (0..partitions)
        .map(|p| CatalogEntry {
            object_key: "data/b1/huge.oxb".into(),
            byte_start: 100 * p as u64,
            byte_len: 100,
            ..entry(TopicPartition::new(t.topic_id, p), 0, 4, 1, 0)
        })
        .collect();
    let fences = entries
        .iter()
        .map(|e| EpochFence {
            topic_partition: e.topic_partition(),
            leader_epoch: 0,
        })
        .collect();
    let revision = |resp: oxbow_metadata::kv::RangeResponse| resp.revision;
    let before = revision(store.kv().range(Get::key("/")).await.expect("rev"));
    store
        .commit_catalog(CatalogCommit {
            entries,
            fences,
            writer: None,
        })
        .await
        .expect("one commit of every partition");
    let after = revision(store.kv().range(Get::key("/")).await.expect("rev"));
    assert_eq!(after - before, 1, "{partitions} partitions in one revision");
    for p in [0, partitions / 2, partitions - 1] {
        let last = store
            .catalog_last(t.topic_id, p)
            .await
            .expect("last")
            .expect("catalogued");
        assert_eq!(last.last_offset, 4);
    }
    store.delete_topic("huge").await.expect("cleanup");
}

// ---- catalog replace (compaction) ----

fn segment_entry(tp: TopicPartition, base: i64, last: i64, ts: i64) -> CatalogEntry {
    CatalogEntry {
        object_key: format!("segments/{base}-{last}.oxs"),
        byte_start: 1000,
        byte_len: 80,
        crc32c: 9,
        layout: oxbow_metadata::EntryLayout::SegmentIndex,
        ..entry(tp, base, last, ts, 0)
    }
}

async fn catalog_replace(store: &dyn MetadataStore) {
    let t = store
        .create_topic(spec("compact", 2), 1)
        .await
        .expect("create");
    let tp0 = TopicPartition::new(t.topic_id, 0);
    let tp1 = TopicPartition::new(t.topic_id, 1);
    let fence = |tp, leader_epoch| EpochFence {
        topic_partition: tp,
        leader_epoch,
    };
    // Partition 0: 200 entries of 10 offsets (more than etcd's 128 operations per
    // transaction), committed 50 at a time; partition 1: one entry.
    let all: Vec<i64> = (0..200).collect();
    for chunk in all.chunks(50) {
        store
            .commit_catalog(CatalogCommit {
                entries: chunk
                    .iter()
                    .map(|i| entry(tp0, i * 10, i * 10 + 9, *i, 0))
                    .collect(),
                fences: vec![fence(tp0, 0)],
                writer: None,
            })
            .await
            .expect("commit");
    }
    store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp1, 0, 9, 5, 0)],
            fences: vec![fence(tp1, 0)],
            writer: None,
        })
        .await
        .expect("commit p1");
    let stored = store
        .catalog_entries(t.topic_id, 0, 0, 1000)
        .await
        .expect("read");
    assert_eq!(stored.len(), 200);

    // The first 150 entries become two segments, in one step.
    let segments = vec![
        segment_entry(tp0, 0, 999, 99),
        segment_entry(tp0, 1000, 1499, 149),
    ];
    let replace = CatalogReplace {
        fence: fence(tp0, 0),
        old: stored[..150].to_vec(),
        new: segments.clone(),
    };
    store
        .replace_catalog_entries(replace.clone())
        .await
        .expect("replace");
    let after = store
        .catalog_entries(t.topic_id, 0, 0, 1000)
        .await
        .expect("read");
    assert_eq!(after.len(), 52);
    assert_eq!(after[..2], segments[..]);
    assert_eq!(after[2], stored[150]);
    let inside = store
        .catalog_entries(t.topic_id, 0, 1234, 1)
        .await
        .expect("lookup");
    assert_eq!(inside, vec![segments[1].clone()]);
    let by_ts = store
        .catalog_find_timestamp(t.topic_id, 0, 120)
        .await
        .expect("ts")
        .expect("some");
    assert_eq!(by_ts, segments[1]);
    // A retry whose first attempt landed is a no-op.
    store
        .replace_catalog_entries(replace)
        .await
        .expect("idempotent retry");

    // The old run is gone: replacing it some other way is a conflict.
    let err = store
        .replace_catalog_entries(CatalogReplace {
            fence: fence(tp0, 0),
            old: stored[..150].to_vec(),
            new: vec![segment_entry(tp0, 0, 1499, 149)],
        })
        .await
        .expect_err("stale run");
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    // Entries that differ from the stored ones (another compactor's view): a conflict.
    let mut changed = stored[150].clone();
    changed.crc32c += 1;
    let err = store
        .replace_catalog_entries(CatalogReplace {
            fence: fence(tp0, 0),
            old: vec![changed, stored[151].clone()],
            new: vec![segment_entry(tp0, 1500, 1519, 151)],
        })
        .await
        .expect_err("different entry");
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    // A run missing a stored entry in its middle: not contiguous, so invalid.
    let err = store
        .replace_catalog_entries(CatalogReplace {
            fence: fence(tp0, 0),
            old: vec![stored[150].clone(), stored[152].clone()],
            new: vec![segment_entry(tp0, 1500, 1529, 152)],
        })
        .await
        .expect_err("gap");
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    // New entries that do not cover exactly the old offsets: invalid.
    let err = store
        .replace_catalog_entries(CatalogReplace {
            fence: fence(tp0, 0),
            old: stored[150..152].to_vec(),
            new: vec![segment_entry(tp0, 1500, 1518, 151)],
        })
        .await
        .expect_err("short");
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    // More new entries than one etcd transaction can put: invalid on every backend.
    let mut many: Vec<CatalogEntry> = (1500..1564).map(|o| entry(tp0, o, o, 0, 0)).collect();
    many.push(entry(tp0, 1564, 1569, 0, 0));
    let err = store
        .replace_catalog_entries(CatalogReplace {
            fence: fence(tp0, 0),
            old: stored[150..157].to_vec(),
            new: many,
        })
        .await
        .expect_err("too many");
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    let unchanged = store
        .catalog_entries(t.topic_id, 0, 0, 1000)
        .await
        .expect("read");
    assert_eq!(unchanged, after, "failed replaces wrote nothing");

    // The tail, including the partition's last entry: appends continue after it.
    let tail = segment_entry(tp0, 1500, 1999, 199);
    store
        .replace_catalog_entries(CatalogReplace {
            fence: fence(tp0, 0),
            old: stored[150..].to_vec(),
            new: vec![tail.clone()],
        })
        .await
        .expect("replace tail");
    let last = store
        .catalog_last(t.topic_id, 0)
        .await
        .expect("last")
        .expect("some");
    assert_eq!(last, tail);
    store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp0, 2000, 2009, 300, 0)],
            fences: vec![fence(tp0, 0)],
            writer: None,
        })
        .await
        .expect("append after a segment");
    let err = store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp0, 1990, 2019, 300, 0)],
            fences: vec![fence(tp0, 0)],
            writer: None,
        })
        .await
        .expect_err("overlap with the segment");
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert_eq!(
        store
            .catalog_entries(t.topic_id, 1, 0, 10)
            .await
            .expect("p1"),
        vec![entry(tp1, 0, 9, 5, 0)],
        "another partition is untouched"
    );

    // A compactor whose epoch moved is fenced and changes nothing.
    let mut p0 = t.partitions[0].clone();
    p0.leader_epoch = 1;
    store
        .update_partition(t.topic_id, p0.version, p0)
        .await
        .expect("bump");
    let before = store
        .catalog_entries(t.topic_id, 0, 0, 1000)
        .await
        .expect("read");
    assert_eq!(before.len(), 4);
    let err = store
        .replace_catalog_entries(CatalogReplace {
            fence: fence(tp0, 0),
            old: before[..2].to_vec(),
            new: vec![segment_entry(tp0, 0, 1499, 149)],
        })
        .await
        .expect_err("fenced");
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    assert_eq!(
        store
            .catalog_entries(t.topic_id, 0, 0, 1000)
            .await
            .expect("read"),
        before
    );

    // Two compactors racing over overlapping runs: exactly one wins.
    let r1 = CatalogReplace {
        fence: fence(tp0, 1),
        old: before[..2].to_vec(),
        new: vec![segment_entry(tp0, 0, 1499, 149)],
    };
    let r2 = CatalogReplace {
        fence: fence(tp0, 1),
        old: before[1..3].to_vec(),
        new: vec![segment_entry(tp0, 1000, 1999, 199)],
    };
    let (a, b) = futures::join!(
        store.replace_catalog_entries(r1),
        store.replace_catalog_entries(r2)
    );
    assert!(a.is_ok() != b.is_ok(), "exactly one wins: {a:?} {b:?}");
    let loser = a.err().or(b.err()).expect("one lost");
    assert_eq!(loser.kind(), ErrorKind::Conflict, "{loser}");
    let raced = store
        .catalog_entries(t.topic_id, 0, 0, 1000)
        .await
        .expect("read");
    assert_eq!(raced.len(), 3);
    let mut next = 0;
    for e in &raced {
        assert_eq!(e.base_offset, next, "still contiguous: {raced:?}");
        next = e.last_offset + 1;
    }
    assert_eq!(next, 2010);

    store.delete_topic("compact").await.expect("cleanup");
    let err = store
        .replace_catalog_entries(CatalogReplace {
            fence: fence(tp0, 1),
            old: raced.clone(),
            new: vec![segment_entry(tp0, 0, 2009, 300)],
        })
        .await
        .expect_err("topic gone");
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
}

// ---- end of catalog replace ----

async fn producer_ids(store: &dyn MetadataStore) {
    let a = store.allocate_producer_ids(100).await.expect("alloc");
    let b = store.allocate_producer_ids(100).await.expect("alloc");
    assert!(b >= a + 100, "blocks never overlap: {a} then {b}");
}

// ---- WAL replica sets ----

fn wal_set(broker_id: i32, replicas: &[i32], isr: &[i32]) -> WalReplicaSet {
    WalReplicaSet {
        broker_id,
        incarnation: 3,
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
        eligible: Vec::new(),
        version: 0,
    }
}

async fn wal_replica_sets(store: &dyn MetadataStore) {
    assert!(store.wal_replica_set(1).await.expect("read").is_none());

    // Create at version 1 (the caller's `version` is ignored); a second create conflicts.
    let mut asked = wal_set(1, &[2, 3], &[2, 3]);
    asked.version = 42;
    let v1 = store
        .put_wal_replica_set(asked, None)
        .await
        .expect("create");
    assert_eq!(
        v1,
        WalReplicaSet {
            version: 1,
            ..wal_set(1, &[2, 3], &[2, 3])
        }
    );
    assert_eq!(
        store.wal_replica_set(1).await.expect("read"),
        Some(v1.clone())
    );
    let err = store
        .put_wal_replica_set(wal_set(1, &[4], &[]), None)
        .await
        .expect_err("create twice");
    assert_eq!(err.kind(), ErrorKind::Conflict);

    // Another broker's set is independent.
    let other = store
        .put_wal_replica_set(wal_set(2, &[1], &[1]), None)
        .await
        .expect("create other");
    assert_eq!(other.version, 1);

    // Replace by compare-and-swap; a stale version conflicts and changes nothing.
    let v2 = store
        .put_wal_replica_set(wal_set(1, &[2, 3], &[3]), Some(1))
        .await
        .expect("shrink isr");
    assert_eq!(v2.version, 2);
    assert_eq!(v2.isr, vec![3]);
    let err = store
        .put_wal_replica_set(wal_set(1, &[2, 4], &[2]), Some(1))
        .await
        .expect_err("stale");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let err = store
        .put_wal_replica_set(wal_set(1, &[2], &[]), Some(7))
        .await
        .expect_err("future version");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let err = store
        .put_wal_replica_set(wal_set(5, &[2], &[]), Some(1))
        .await
        .expect_err("replace of an absent set");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(
        store.wal_replica_set(1).await.expect("read"),
        Some(v2.clone())
    );

    // Invalid sets are refused, as a replace (whose version matches) and as a create.
    for (b, expected_version) in [(1, Some(2)), (9, None)] {
        for bad in [
            wal_set(b, &[b, 2], &[]),     // the broker itself
            wal_set(b, &[2, 2], &[2]),    // duplicate replica
            wal_set(b, &[2, 3], &[4]),    // isr not a subset of replicas
            wal_set(b, &[2, 3], &[3, 3]), // duplicate in-sync replica
        ] {
            let err = store
                .put_wal_replica_set(bad.clone(), expected_version)
                .await
                .expect_err("invalid");
            assert_eq!(err.kind(), ErrorKind::Invalid, "{bad:?}: {err}");
        }
    }
    assert!(store.wal_replica_set(9).await.expect("read").is_none());
    assert_eq!(store.wal_replica_set(1).await.expect("read"), Some(v2));

    // Delete by compare-and-swap.
    let err = store
        .delete_wal_replica_set(1, 1)
        .await
        .expect_err("stale delete");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    store.delete_wal_replica_set(1, 2).await.expect("delete");
    assert!(store.wal_replica_set(1).await.expect("read").is_none());
    let err = store.delete_wal_replica_set(1, 2).await.expect_err("gone");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    // Re-created after a delete: version starts again at 1.
    let again = store
        .put_wal_replica_set(wal_set(1, &[], &[]), None)
        .await
        .expect("recreate");
    assert_eq!(again.version, 1);
    store.delete_wal_replica_set(1, 1).await.expect("cleanup");
    store.delete_wal_replica_set(2, 1).await.expect("cleanup");
}

// ---- end WAL replica sets ----

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
    topic_watch(store).await;
    consumer_groups(store).await;
    controller_election(store).await;
    brokers_and_leases(store).await;
    wal_replica_sets(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_in_memory() {
    let store = EmbeddedStore::in_memory().expect("open");
    run_all(&store).await;
    wide_commit_is_one_revision(&store, 4000).await;
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
            .put_wal_replica_set(wal_set(4, &[5, 6], &[5]), None)
            .await
            .expect("WAL replica set");
        old_lease = store
            .register_broker(registration(1), Duration::from_secs(60))
            .await
            .expect("register")
            .id;
    }
    let store = EmbeddedStore::open(&path).expect("reopen");
    let kept = store.topic("kept").await.expect("get").expect("kept");
    assert_eq!(kept.partitions.len(), 2);
    assert_eq!(store.fetch_offsets("g").await.expect("fetch").len(), 1);
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
