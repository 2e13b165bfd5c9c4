//! Writes `tests/fixtures/embedded-v1.redb`: a small metadata file in the embedded backend's
//! first table layout (one redb table per record kind), for the migration test in
//! `tests/embedded_migration.rs`. Run once, with the code that still wrote that layout:
//! `cargo run -p oxbow-metadata --example make_embedded_fixture`.

use bytes::Bytes;
use oxbow_metadata::{
    BrokerRegistration, CatalogCommit, CatalogEntry, CommittedOffset, EmbeddedStore, EntryLayout,
    EpochFence, MetadataStore, TopicPartition, TopicSpec, WalReplicaSet,
};
use std::collections::BTreeMap;
use std::time::Duration;

fn entry(tp: TopicPartition, base: i64, last: i64) -> CatalogEntry {
    CatalogEntry {
        topic_id: tp.topic_id,
        partition: tp.partition,
        base_offset: base,
        last_offset: last,
        max_timestamp_ms: 1_000 + base,
        object_key: format!("segments/obj-{base}"),
        byte_start: 64 * base as u64,
        byte_len: 64,
        crc32c: 0xC0FFEE,
        leader_epoch: 0,
        layout: EntryLayout::Batches,
    }
}

/// Everything a reader can see of the fixture, as text (Debug forms).
async fn describe(store: &dyn MetadataStore) -> Result<String, Box<dyn std::error::Error>> {
    let mut out = String::new();
    for t in store.list_topics().await? {
        out.push_str(&format!("{t:?}\n"));
        for p in 0..t.partitions.len() as i32 {
            for e in store.catalog_entries(t.topic_id, p, 0, 100).await? {
                out.push_str(&format!("{e:?}\n"));
            }
        }
    }
    for g in store.list_groups().await? {
        out.push_str(&format!("{g:?} {:?}\n", store.group(&g).await?));
        for o in store.fetch_offsets(&g).await? {
            out.push_str(&format!("{o:?}\n"));
        }
    }
    out.push_str(&format!("{:?}\n", store.wal_replica_set(4).await?));
    out.push_str(&format!("{:?}\n", store.list_brokers().await?));
    out.push_str(&format!("{:?}\n", store.controller().await?));
    Ok(out)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/embedded-v1.redb");
    let _ = std::fs::remove_file(&path);
    {
        let store = EmbeddedStore::open(&path)?;
        let mut configs = BTreeMap::new();
        configs.insert("retention.ms".to_string(), "3600000".to_string());
        let orders = store
            .create_topic_with_leaders(
                TopicSpec {
                    name: "orders".into(),
                    partitions: 3,
                    replication_factor: 1,
                    configs,
                },
                &[1, 2],
            )
            .await?;
        store
            .create_topic(
                TopicSpec {
                    name: "audit".into(),
                    partitions: 1,
                    replication_factor: 1,
                    configs: BTreeMap::new(),
                },
                1,
            )
            .await?;
        // Partition 1 moved to broker 3 at epoch 1, with its epoch history and a transfer.
        let mut p1 = orders.partitions[1].clone();
        p1.leader = 3;
        p1.leader_epoch = 1;
        p1.leader_epochs.assign(0, 0);
        p1.leader_epochs.assign(1, 20);
        p1.transfer_to = Some(2);
        store.update_partition(orders.topic_id, 0, p1).await?;
        let tp0 = TopicPartition::new(orders.topic_id, 0);
        store
            .commit_catalog(CatalogCommit {
                entries: vec![entry(tp0, 0, 9), entry(tp0, 10, 24), entry(tp0, 25, 25)],
                fences: vec![EpochFence {
                    topic_partition: tp0,
                    leader_epoch: 0,
                }],
            })
            .await?;
        store.allocate_producer_ids(1000).await?;
        let offset = |topic: &str, partition: i32, offset: i64| CommittedOffset {
            topic: topic.into(),
            partition,
            offset,
            leader_epoch: 0,
            metadata: format!("m{offset}"),
            commit_timestamp_ms: 5_000 + offset,
        };
        store
            .commit_offsets(
                "team/a%1",
                vec![offset("orders", 0, 7), offset("orders", 2, 3)],
            )
            .await?;
        store
            .commit_offsets("solo", vec![offset("audit", 0, 1)])
            .await?;
        store
            .put_group("team/a%1", None, Bytes::from_static(b"gen1\x00\xff"))
            .await?;
        store
            .put_wal_replica_set(
                WalReplicaSet {
                    broker_id: 4,
                    incarnation: 9,
                    replicas: vec![5, 6],
                    isr: vec![5],
                    version: 0,
                },
                None,
            )
            .await?;
        store
            .register_broker(
                BrokerRegistration {
                    broker_id: 1,
                    az: None,
                    kafka_addr: "127.0.0.1:9092".into(),
                    http_addr: "127.0.0.1:8080".into(),
                    internal_addr: String::new(),
                },
                Duration::from_secs(60),
            )
            .await?;
        println!("topic orders id {}", orders.topic_id);
    }
    // What the old code reads back after a reopen: the migration test expects exactly this.
    let store = EmbeddedStore::open(&path)?;
    let dump = describe(&store).await?;
    drop(store);
    std::fs::write(path.with_extension("expected.txt"), dump)?;
    println!("wrote {}", path.display());
    Ok(())
}
