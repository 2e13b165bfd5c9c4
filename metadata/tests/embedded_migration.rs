//! Opening an embedded metadata file written in the first table layout migrates it to the
//! key-value layout without losing or changing anything a reader can see.
//!
//! `fixtures/embedded-v1.redb` was written by the code that still used that layout
//! (`examples/make_embedded_fixture.rs` at commit ff218fc), and
//! `fixtures/embedded-v1.expected.txt` is what that code read back from it after a reopen.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use oxbow_metadata::{
    CatalogCommit, CatalogEntry, EmbeddedStore, EntryLayout, EpochFence, ErrorKind, MetadataStore,
    TopicPartition,
};
use redb::{ReadableDatabase, TableHandle};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Everything a reader can see of the fixture, as text: the same walk the generator made.
async fn describe(store: &dyn MetadataStore) -> String {
    let mut out = String::new();
    for t in store.list_topics().await.expect("topics") {
        out.push_str(&format!("{t:?}\n"));
        for p in 0..t.partitions.len() as i32 {
            for e in store
                .catalog_entries(t.topic_id, p, 0, 100)
                .await
                .expect("catalog")
            {
                out.push_str(&format!("{e:?}\n"));
            }
        }
    }
    for g in store.list_groups().await.expect("groups") {
        let record = store.group(&g).await.expect("group");
        out.push_str(&format!("{g:?} {record:?}\n"));
        for o in store.fetch_offsets(&g).await.expect("offsets") {
            out.push_str(&format!("{o:?}\n"));
        }
    }
    let set = store.wal_replica_set(4).await.expect("WAL replica set");
    out.push_str(&format!("{set:?}\n"));
    let brokers = store.list_brokers().await.expect("brokers");
    out.push_str(&format!("{brokers:?}\n"));
    let controller = store.controller().await.expect("controller");
    out.push_str(&format!("{controller:?}\n"));
    out
}

fn table_names(path: &Path) -> Vec<String> {
    // A dropped store's background tasks (its watch-fed catalogue) end asynchronously and
    // hold the file until they do: wait for them, within a bound.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let db = loop {
        match redb::Database::open(path) {
            Err(redb::DatabaseError::DatabaseAlreadyOpen)
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => break other.expect("open"),
        }
    };
    let txn = db.begin_read().expect("read");
    let names = txn
        .list_tables()
        .expect("tables")
        .map(|t| t.name().to_string())
        .collect();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_layout_file_is_migrated_on_open() {
    let expected = std::fs::read_to_string(fixture("embedded-v1.expected.txt")).expect("expected");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("metadata.redb");
    std::fs::copy(fixture("embedded-v1.redb"), &path).expect("copy the fixture");
    assert!(table_names(&path).contains(&"topics".to_string()));

    {
        let store = EmbeddedStore::open(&path).expect("open and migrate");
        assert_eq!(describe(&store).await, expected);
    }
    let mut names = table_names(&path);
    names.sort();
    assert_eq!(names, vec!["kv", "kv_leased", "kv_meta"], "old tables gone");

    // Reopened: nothing to migrate, the same view, and the store carries on from it.
    let store = EmbeddedStore::open(&path).expect("reopen");
    assert_eq!(describe(&store).await, expected);
    let next = store.allocate_producer_ids(1).await.expect("producer ids");
    assert!(next >= 1000, "the old counter carries on: {next}");
    let orders = store.topic("orders").await.expect("read").expect("orders");
    // Partition 1 moved once (version 1): compare-and-swap goes on from there.
    let mut p1 = orders.partitions[1].clone();
    p1.leader_epoch = 2;
    let err = store
        .update_partition(orders.topic_id, 0, p1.clone())
        .await
        .expect_err("stale");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let p1 = store
        .update_partition(orders.topic_id, 1, p1)
        .await
        .expect("cas");
    assert_eq!(p1.version, 2);
    // Partition 0's catalog continues after its last migrated entry, fenced at epoch 0.
    let tp0 = TopicPartition::new(orders.topic_id, 0);
    let entry = CatalogEntry {
        topic_id: orders.topic_id,
        partition: 0,
        base_offset: 26,
        last_offset: 30,
        max_timestamp_ms: 2_000,
        object_key: "segments/obj-26".into(),
        byte_start: 0,
        byte_len: 64,
        crc32c: 1,
        leader_epoch: 0,
        layout: EntryLayout::Batches,
        txn: None,
    };
    let fence = EpochFence {
        topic_partition: tp0,
        leader_epoch: 0,
    };
    store
        .commit_catalog(CatalogCommit {
            entries: vec![entry.clone()],
            fences: vec![fence],
            writer: None,
        })
        .await
        .expect("append");
    let gap = CatalogEntry {
        base_offset: 40,
        last_offset: 41,
        ..entry
    };
    let err = store
        .commit_catalog(CatalogCommit {
            entries: vec![gap],
            fences: vec![fence],
            writer: None,
        })
        .await
        .expect_err("gap");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(
        store
            .catalog_last(orders.topic_id, 0)
            .await
            .expect("last")
            .map(|e| e.last_offset),
        Some(30)
    );
}
