//! Lease fencing of the write path: a broker whose metadata lease is not certainly alive
//! acknowledges nothing, and on a new lease it bumps its partitions' epochs so that a commit
//! from its previous incarnation is fenced.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use oxbow_cache::ReadCache;
use oxbow_metadata::{EmbeddedStore, ErrorKind as MetaKind, LeaseGuard, MetadataStore, TopicSpec};
use oxbow_segment_writer::batch::testing::make_batch;
use oxbow_segment_writer::{
    objects, Acks, AppendPolicy, ErrorKind, LogManager, LogSettings, WalSettings,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

async fn setup() -> (
    tempfile::TempDir,
    Arc<dyn MetadataStore>,
    Arc<LogManager>,
    oxbow_metadata::TopicMetadata,
) {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory().expect("meta"));
    let topic = metadata
        .create_topic(
            TopicSpec {
                name: "t".into(),
                partitions: 1,
                replication_factor: 1,
                configs: BTreeMap::new(),
            },
            1,
        )
        .await
        .expect("topic");
    let log = LogManager::open(
        LogSettings {
            broker_id: 1,
            wal: WalSettings {
                dir: dir.path().join("wal"),
                file_bytes_max: 1 << 20,
                budget_bytes: 1 << 30,
                direct_writes: true,
            },
            flush_interval: Duration::from_secs(3600),
            flush_bytes: 1 << 30,
            partition_tail_bytes: 0,
            tail_memory_bytes: usize::MAX,
            producer_id_expiration: oxbow_segment_writer::PRODUCER_ID_EXPIRATION_DEFAULT,
            max_decompressed_batch_bytes:
                oxbow_segment_writer::decompress::DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES,
            durability: Default::default(),
            replication: Default::default(),
        },
        metadata.clone(),
        objects::local(&dir.path().join("objects")).expect("objects"),
        ReadCache::new(1 << 20),
    )
    .await
    .expect("open log");
    (dir, metadata, log, topic)
}

#[tokio::test]
async fn no_ack_without_a_valid_lease() {
    let (_dir, _metadata, log, topic) = setup().await;
    let guard = LeaseGuard::new();
    guard.renewed(1, Instant::now(), Duration::from_secs(60));
    log.set_lease_guard(guard.clone());
    let p0 = log.partition(&topic, 0).await.expect("p0");
    log.append(
        &p0,
        &make_batch(1, 0),
        &AppendPolicy::of(&topic.configs),
        Acks::All,
    )
    .await
    .expect("valid lease: acked");

    // Queued while valid, lease lost before the ack: not acknowledged.
    let pending = log
        .enqueue(
            &p0,
            &make_batch(1, 0),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("enqueued");
    guard.invalidate();
    let err = pending.wait().await.expect_err("lapsed before the ack");
    assert_eq!(err.kind(), ErrorKind::NotLeader, "{err}");
    // And nothing new is accepted.
    let err = log
        .append(
            &p0,
            &make_batch(1, 0),
            &AppendPolicy::of(&topic.configs),
            Acks::Leader,
        )
        .await
        .expect_err("no lease");
    assert_eq!(err.kind(), ErrorKind::NotLeader, "{err}");

    // A guard lapses by the clock alone (a paused process), without anyone invalidating it.
    let stale = LeaseGuard::new();
    let (_d2, _m2, log2, topic2) = setup().await;
    stale.renewed(1, Instant::now(), Duration::from_secs(2));
    log2.set_lease_guard(stale.clone());
    let q0 = log2.partition(&topic2, 0).await.expect("p0");
    let deadline = Instant::now() + Duration::from_secs(5);
    while stale.is_valid() {
        assert!(Instant::now() < deadline, "guard never lapsed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let err = log2
        .append(
            &q0,
            &make_batch(1, 0),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect_err("lapsed");
    assert_eq!(err.kind(), ErrorKind::NotLeader, "{err}");
}

#[tokio::test]
async fn a_new_lease_bumps_epochs_and_fences_the_old_incarnation() {
    let (_dir, metadata, log, topic) = setup().await;
    let p0 = log.partition(&topic, 0).await.expect("p0");
    log.append(
        &p0,
        &make_batch(2, 0),
        &AppendPolicy::of(&topic.configs),
        Acks::All,
    )
    .await
    .expect("append");
    assert_eq!(p0.leader_epoch().expect("epoch"), 0);

    let bumped = log.resume_after_lease_loss().await.expect("resume");
    assert_eq!(bumped, 1);
    // What was held under the old epoch was sealed first, not lost.
    let last = metadata
        .catalog_last(topic.topic_id, 0)
        .await
        .expect("catalog")
        .expect("sealed before the bump");
    assert_eq!((last.last_offset, last.leader_epoch), (1, 0));
    let now = metadata
        .topic_by_id(topic.topic_id)
        .await
        .expect("read")
        .expect("topic");
    assert_eq!(now.partitions[0].leader_epoch, 1);

    // The old incarnation's view of the epoch is fenced from now on.
    let err = metadata
        .commit_catalog(oxbow_metadata::CatalogCommit {
            entries: vec![],
            fences: vec![oxbow_metadata::EpochFence {
                topic_partition: p0.topic_partition,
                leader_epoch: 0,
            }],
            writer: None,
        })
        .await
        .expect_err("old epoch");
    assert_eq!(err.kind(), MetaKind::Fenced);

    // Reopened from a stale cached topic, the partition still takes the current epoch and
    // continues the log; its next seal commits.
    let p0 = log.partition(&topic, 0).await.expect("reopen");
    assert_eq!(p0.leader_epoch().expect("epoch"), 1);
    let a = log
        .append(
            &p0,
            &make_batch(1, 0),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("append at the new epoch");
    assert_eq!(a.base_offset, 2);
    assert!(log.seal_once().await.expect("seal") > 0);
    let last = metadata
        .catalog_last(topic.topic_id, 0)
        .await
        .expect("catalog")
        .expect("some");
    assert_eq!((last.last_offset, last.leader_epoch), (2, 1));
}
