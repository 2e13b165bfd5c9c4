//! Graceful handoff (ARCHITECTURE.md decision 15) between two brokers in one process: two
//! `LogManager`s, each with its own WAL, sharing one embedded metadata store and one
//! in-memory object store. The old leader holds acknowledged data that is only in its WAL
//! (seals are held back by an hour-long flush interval and no sealer task runs); after the
//! handoff the new leader serves every acknowledged batch at its offset, from the catalog.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use oxbow_cache::ReadCache;
use oxbow_metadata::{EmbeddedStore, MetadataStore, Offset, TopicMetadata, TopicSpec};
use oxbow_segment_writer::batch::{self, testing::make_batch};
use oxbow_segment_writer::{
    Acks, AppendPolicy, ErrorKind, Handoff, Leadership, LogManager, LogSettings, WalSettings,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

struct Cluster {
    root: tempfile::TempDir,
    metadata: Arc<dyn MetadataStore>,
    objects: Arc<dyn object_store::ObjectStore>,
}

impl Cluster {
    fn new() -> Cluster {
        let root = tempfile::tempdir().expect("tmp");
        let metadata: Arc<dyn MetadataStore> =
            Arc::new(EmbeddedStore::open(&root.path().join("meta.redb")).expect("metadata"));
        Cluster {
            root,
            metadata,
            objects: Arc::new(object_store::memory::InMemory::new()),
        }
    }

    async fn broker(&self, id: i32) -> Arc<LogManager> {
        let dir = self.root.path().join(format!("b{id}"));
        LogManager::open(
            settings(id, &dir),
            self.metadata.clone(),
            self.objects.clone(),
            ReadCache::new(1 << 20),
        )
        .await
        .expect("open log")
    }

    async fn topic(&self, name: &str, leader: i32) -> TopicMetadata {
        let spec = TopicSpec {
            name: name.into(),
            partitions: 1,
            replication_factor: 1,
            configs: BTreeMap::new(),
        };
        self.metadata
            .create_topic(spec, leader)
            .await
            .expect("topic")
    }

    async fn stored(&self, topic: &TopicMetadata) -> oxbow_metadata::PartitionState {
        self.metadata
            .topic_by_id(topic.topic_id)
            .await
            .expect("read")
            .expect("topic")
            .partition(0)
            .expect("partition 0")
            .clone()
    }

    /// Asks for the transfer of partition 0 to `to`, as the controller's balancer does.
    async fn request_transfer(&self, topic: &TopicMetadata, to: i32) {
        let state = self.stored(topic).await;
        let mut asked = state.clone();
        asked.transfer_to = Some(to);
        self.metadata
            .update_partition(topic.topic_id, state.version, asked)
            .await
            .expect("request transfer");
    }
}

fn settings(id: i32, dir: &Path) -> LogSettings {
    LogSettings {
        broker_id: id,
        wal: WalSettings {
            dir: dir.join("wal"),
            file_bytes_max: 1 << 20,
            budget_bytes: 1 << 30,
            direct_writes: true,
        },
        // No seal but the handoff's own.
        flush_interval: Duration::from_secs(3600),
        flush_bytes: 1 << 30,
        partition_tail_bytes: 0,
        tail_memory_bytes: usize::MAX,
        producer_id_expiration: oxbow_segment_writer::PRODUCER_ID_EXPIRATION_DEFAULT,
        max_decompressed_batch_bytes:
            oxbow_segment_writer::decompress::DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES,
        durability: Default::default(),
        replication: Default::default(),
    }
}

fn base_offset(b: &[u8]) -> Offset {
    batch::peek_header(b)
        .expect("header")
        .expect("whole")
        .base_offset
}

#[tokio::test]
async fn acknowledged_unsealed_data_is_read_from_the_new_leader() {
    let cluster = Cluster::new();
    let topic = cluster.topic("moving", 1).await;
    let old = cluster.broker(1).await;
    let new = cluster.broker(2).await;
    let leadership = Leadership::new(old.clone());
    let tp = oxbow_metadata::TopicPartition::new(topic.topic_id, 0);

    let p = old
        .partition(&topic, 0)
        .await
        .expect("open on the old leader");
    let mut acknowledged = Vec::new();
    // Sealed before the handoff: in the catalog already.
    for i in 0..2 {
        let a = old
            .append(
                &p,
                &make_batch(3, 1000 + i),
                &AppendPolicy::of(&topic.configs),
                Acks::All,
            )
            .await
            .expect("append");
        acknowledged.push(a.base_offset);
    }
    old.seal_once().await.expect("seal");
    // Acknowledged once durable, never sealed: only in the old leader's WAL.
    for i in 0..3 {
        let a = old
            .append(
                &p,
                &make_batch(2, 2000 + i),
                &AppendPolicy::of(&topic.configs),
                Acks::All,
            )
            .await
            .expect("append");
        acknowledged.push(a.base_offset);
    }
    // acks=1: acknowledged when queued, so the handoff must wait for them to be durable.
    for i in 0..3 {
        let _permit = leadership
            .append_permit(tp, &topic.name)
            .await
            .expect("gate open");
        let pending = old
            .enqueue(
                &p,
                &make_batch(1, 3000 + i),
                &AppendPolicy::of(&topic.configs),
                Acks::Leader,
            )
            .await
            .expect("enqueue");
        acknowledged.push(pending.wait().await.expect("acks=1").base_offset);
    }
    let (_, _, log_end) = p.offsets().expect("offsets");
    assert_eq!(log_end, 15);
    let before = cluster.stored(&topic).await;

    cluster.request_transfer(&topic, 2).await;
    let moved = leadership
        .hand_off(&[Handoff {
            topic_id: topic.topic_id,
            partition: 0,
            to: 2,
            requested: true,
        }])
        .await;

    assert_eq!(moved.len(), 1, "the partition moved");
    let stored = cluster.stored(&topic).await;
    assert_eq!(moved[0].state, stored, "reported as stored");
    assert_eq!(stored.leader, 2);
    assert_eq!(stored.leader_epoch, before.leader_epoch + 1);
    assert_eq!((stored.transfer_to, stored.recover_from), (None, None));
    assert!(old.get(&tp).is_none(), "the old leader forgot it");
    assert_eq!(
        old.catalog_end(tp, 0).await.expect("catalog"),
        log_end,
        "everything sealed"
    );
    let refused = old
        .partition(&topic, 0)
        .await
        .err()
        .expect("the old leader no longer opens it");
    assert_eq!(refused.kind(), ErrorKind::NotLeader);

    let p = new
        .partition(&topic, 0)
        .await
        .expect("open on the new leader");
    assert_eq!(p.offsets().expect("offsets"), (0, log_end, log_end));
    assert_eq!(p.leader_epoch().expect("epoch"), stored.leader_epoch);
    for offset in acknowledged {
        let r = new.read(&p, offset, 1, true).await.expect("read");
        let first = r.batches.first().expect("a batch");
        assert_eq!(base_offset(first), offset, "batch at its offset");
    }
    let next = new
        .append(
            &p,
            &make_batch(1, 4000),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("append on the new leader");
    assert_eq!(
        next.base_offset, log_end,
        "offsets stay dense across the move"
    );
}

#[tokio::test]
async fn a_withdrawn_request_leaves_the_partition_served_here() {
    let cluster = Cluster::new();
    let topic = cluster.topic("staying", 1).await;
    let old = cluster.broker(1).await;
    let leadership = Leadership::new(old.clone());
    let tp = oxbow_metadata::TopicPartition::new(topic.topic_id, 0);
    let p = old.partition(&topic, 0).await.expect("open");
    old.append(
        &p,
        &make_batch(2, 1000),
        &AppendPolicy::of(&topic.configs),
        Acks::All,
    )
    .await
    .expect("append");
    // Requested through `transfer_to`, which is not (or no longer) set.
    let moved = leadership
        .hand_off(&[Handoff {
            topic_id: topic.topic_id,
            partition: 0,
            to: 2,
            requested: true,
        }])
        .await;
    assert!(moved.is_empty());
    assert_eq!(cluster.stored(&topic).await.leader, 1);
    assert!(old.get(&tp).is_some(), "still served here");
    let _permit = leadership
        .append_permit(tp, &topic.name)
        .await
        .expect("the gate reopened");
    let a = old
        .append(
            &p,
            &make_batch(1, 2000),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("append after the handoff that did not happen");
    assert_eq!(a.base_offset, 2);
}
