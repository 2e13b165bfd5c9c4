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
    // Written, so not NOT_LEADER (which tells a client it was not): the outcome is unknown.
    assert_eq!(err.kind(), ErrorKind::TimedOutAfterAppend, "{err}");
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

/// The metadata service unreachable for longer than the lease's TTL, then back with the same
/// lease (etcd re-grants every lease a full TTL when it restarts): a batch written before
/// the lapse is acknowledged once the lease is renewed; one refused during it was refused
/// before it was written; and a producer's next batch, which its pipeline sent before
/// learning of that refusal, is refused too (not written) rather than answered
/// OUT_OF_ORDER_SEQUENCE_NUMBER — on which librdkafka renumbers its unacknowledged messages
/// under a new epoch and writes again those whose outcome it did not know.
#[tokio::test]
async fn a_lapse_that_ends_in_a_renewal_of_the_same_lease_loses_nothing() {
    use oxbow_segment_writer::batch::testing::make_idempotent_batch;
    let (_dir, _metadata, log, topic) = setup().await;
    let ttl = Duration::from_secs(1);
    let guard = LeaseGuard::new();
    guard.renewed(7, Instant::now(), ttl);
    log.set_lease_guard(guard.clone());
    let p0 = log.partition(&topic, 0).await.expect("p0");
    let policy = AppendPolicy::of(&topic.configs);
    let (producer, epoch) = (99, 0);
    let batch = |seq| make_idempotent_batch(2, 1000 + i64::from(seq), producer, epoch, seq);
    log.append(&p0, &batch(0), &policy, Acks::All)
        .await
        .expect("acked while valid");

    // Written while valid; the lease then lapses by the clock (keep-alives unanswered).
    let written = log
        .enqueue(&p0, &batch(2), &policy, Acks::All)
        .await
        .expect("written");
    let deadline = Instant::now() + Duration::from_secs(5);
    while guard.is_valid() {
        assert!(Instant::now() < deadline, "guard never lapsed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ack = tokio::spawn(written.wait());
    // The pipeline's next batches meanwhile: the first is refused (not written)...
    let err = log
        .append(&p0, &batch(4), &policy, Acks::All)
        .await
        .expect_err("refused while lapsed");
    assert_eq!(err.kind(), ErrorKind::NotLeader, "{err}");
    // ...the lease is renewed (the same one)...
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !ack.is_finished(),
        "acknowledged while the lease had lapsed"
    );
    guard.renewed(7, Instant::now(), ttl);
    let acked = ack
        .await
        .expect("task")
        .expect("acknowledged after the renewal");
    assert!(!acked.duplicate);
    // ...and the one sent after the refused one finds a gap: refused as well, not written.
    let err = log
        .append(&p0, &batch(6), &policy, Acks::All)
        .await
        .expect_err("a gap right after a refusal");
    assert_eq!(err.kind(), ErrorKind::NotLeader, "{err}");
    // Sent again in order, both are written once.
    let a = log
        .append(&p0, &batch(4), &policy, Acks::All)
        .await
        .expect("retry");
    let b = log
        .append(&p0, &batch(6), &policy, Acks::All)
        .await
        .expect("next");
    assert_eq!((a.base_offset, b.base_offset), (4, 6));
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
