//! One conformance suite for every [`MetadataStore`] backend: run against the embedded store
//! (in memory and on a file, including reopen for durability). The etcd backend joins here.

use oxbow_metadata::{
    CatalogCommit, CatalogEntry, EmbeddedStore, EpochFence, ErrorKind, MetadataStore,
    TopicPartition, TopicSpec,
};
use std::collections::BTreeMap;

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
        object_key: format!("obj-{base}"),
        byte_start: 0,
        byte_len: 10,
        crc32c: 7,
        leader_epoch: epoch,
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
    // The same expected version again loses: someone else already moved it.
    let err = store
        .update_partition(t.topic_id, p0.version, next)
        .await
        .expect_err("stale cas");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    store.delete_topic("cas").await.expect("cleanup");
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
    };
    store.commit_catalog(first.clone()).await.expect("commit");
    // Retrying a commit that already landed is a no-op.
    store.commit_catalog(first).await.expect("idempotent retry");
    store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp0, 10, 19, 200, 0)],
            fences: fences.clone(),
        })
        .await
        .expect("second");
    // A gap or overlap is refused.
    let err = store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp0, 25, 30, 300, 0)],
            fences: fences.clone(),
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

async fn brokers(store: &dyn MetadataStore) {
    let b = oxbow_metadata::BrokerRegistration {
        broker_id: 7,
        az: Some("az1".into()),
        kafka_addr: "127.0.0.1:9092".into(),
        http_addr: "127.0.0.1:8080".into(),
    };
    store.register_broker(b.clone()).await.expect("register");
    store.register_broker(b.clone()).await.expect("re-register");
    assert_eq!(store.list_brokers().await.expect("list"), vec![b]);
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
    catalog_fencing_and_lookup(store).await;
    brokers(store).await;
}

#[tokio::test]
async fn embedded_in_memory() {
    let store = EmbeddedStore::in_memory().expect("open");
    run_all(&store).await;
}

#[tokio::test]
async fn embedded_on_file_survives_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("metadata.redb");
    {
        let store = EmbeddedStore::open(&path).expect("open");
        run_all(&store).await;
        store
            .create_topic(spec("kept", 2), 1)
            .await
            .expect("create");
    }
    let store = EmbeddedStore::open(&path).expect("reopen");
    let kept = store.topic("kept").await.expect("get").expect("kept");
    assert_eq!(kept.partitions.len(), 2);
}
