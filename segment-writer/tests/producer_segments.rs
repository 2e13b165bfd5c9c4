//! Producer state that survives compaction (issue 16): a partition whose recent data is all
//! in compacted segments still hands its idempotent and transactional producers to its next
//! leader — retries of batches stored long ago are answered with their offsets, not stored
//! twice, and a fenced producer's older epoch is still refused — however many producers sat
//! idle behind more than the rebuild window (4096 records) and the 256 rows a sealed chunk
//! carries.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use oxbow_metadata::{EntryLayout, MetadataStore, TopicMetadata, TopicSpec};
use oxbow_segment_writer::batch::testing::{make_batch, make_idempotent_batch, make_txn_batch};
use oxbow_segment_writer::{Acks, AppendPolicy, Compactor, Error, LogManager, Partition};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

mod common;

use common::{compact_settings, open};

/// More idle producers than a sealed chunk carries rows for.
const IDLE_PRODUCERS: i64 = 300;
/// Records another producer writes after them: more than the rebuild window.
const BUSY_RECORDS: i32 = 5_000;

async fn one_partition_topic(metadata: &Arc<dyn MetadataStore>) -> TopicMetadata {
    metadata
        .create_topic(
            TopicSpec {
                name: "producers".into(),
                partitions: 1,
                replication_factor: 1,
                configs: Default::default(),
            },
            1,
        )
        .await
        .expect("topic")
}

fn policy() -> AppendPolicy {
    AppendPolicy::of(&Default::default())
}

fn idle_batch(i: i64) -> Vec<u8> {
    make_idempotent_batch(2, 1000, 1_000 + i, 0, 0)
}

/// `BUSY_RECORDS` records of producer `pid` from sequence `first_sequence`, sealed in many
/// small objects.
async fn busy(log: &LogManager, p: &Arc<Partition>, pid: i64, first_sequence: i32) {
    busy_for(log, p, pid, first_sequence, BUSY_RECORDS).await
}

/// [`busy`] for `records` records.
async fn busy_for(
    log: &LogManager,
    p: &Arc<Partition>,
    pid: i64,
    first_sequence: i32,
    records: i32,
) {
    let policy = policy();
    for i in 0..records / 50 {
        let b = make_idempotent_batch(50, 1000, pid, 0, first_sequence + i * 50);
        log.append(p, &b, &policy, Acks::All).await.expect("busy");
        if i % 2 == 1 {
            log.seal_once().await.expect("seal");
        }
    }
    log.seal_once().await.expect("seal");
}

/// One compaction round; the partition's catalogue then ends in a segment.
async fn compact(log: &Arc<LogManager>, metadata: &Arc<dyn MetadataStore>, topic: &TopicMetadata) {
    let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::ZERO));
    let stats = compactor
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    assert!(stats.segments_written > 0, "{stats:?}");
    let last = metadata
        .catalog_last(topic.topic_id, 0)
        .await
        .expect("catalog")
        .expect("an entry");
    assert_eq!(last.layout, EntryLayout::SegmentIndex, "{last:?}");
}

/// A new leader: a fresh log over the same stores, with no WAL left to replay.
async fn take_over(dir: &Path, metadata: &Arc<dyn MetadataStore>) -> Arc<LogManager> {
    std::fs::remove_dir_all(dir.join("wal")).expect("clear the WAL");
    open(dir, metadata.clone()).await
}

/// Every idle producer's retry is answered with its original offset and stores nothing.
async fn retries_are_duplicates(log: &LogManager, p: &Arc<Partition>) {
    retries_of_are_duplicates(log, p, IDLE_PRODUCERS).await
}

/// [`retries_are_duplicates`] for the first `idle` producers.
async fn retries_of_are_duplicates(log: &LogManager, p: &Arc<Partition>, idle: i64) {
    let policy = policy();
    let end = p.offsets().expect("offsets").2;
    for i in 0..idle {
        let retry = log
            .append(p, &idle_batch(i), &policy, Acks::All)
            .await
            .expect("retry");
        assert!(retry.duplicate, "producer {i}'s retry is recognised");
        assert_eq!(retry.base_offset, 2 * i, "producer {i}");
    }
    assert_eq!(p.offsets().expect("offsets").2, end, "nothing stored twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_producers_behind_a_compacted_segment_are_known_to_the_next_leader() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::open(&dir.path().join("meta.redb")).expect("meta"));
    let topic = one_partition_topic(&metadata).await;
    let policy = policy();
    let zombie = 7;
    {
        let log = open(dir.path(), metadata.clone()).await;
        let p = log.partition(&topic, 0).await.expect("p0");
        for i in 0..IDLE_PRODUCERS {
            let at = log
                .append(&p, &idle_batch(i), &policy, Acks::All)
                .await
                .expect("idle producer");
            assert_eq!(at.base_offset, 2 * i);
        }
        // Producer 7 at epoch 0, then at epoch 1 (a new InitProducerId): epoch 0 is fenced.
        for epoch in [0, 1] {
            let b = make_idempotent_batch(1, 1000, zombie, epoch, 0);
            log.append(&p, &b, &policy, Acks::All)
                .await
                .expect("producer 7");
        }
        log.seal_once().await.expect("seal");
        busy(&log, &p, 9, 0).await;
        compact(&log, &metadata, &topic).await;
    }
    let log = take_over(dir.path(), &metadata).await;
    let p = log.partition(&topic, 0).await.expect("reopen");
    retries_are_duplicates(&log, &p).await;
    let stale = log
        .append(
            &p,
            &make_idempotent_batch(1, 1000, zombie, 0, 1),
            &policy,
            Acks::All,
        )
        .await;
    assert!(
        matches!(stale, Err(Error::ProducerFenced { current: 1, .. })),
        "{stale:?}"
    );
    let end = p.offsets().expect("offsets").2;
    let next = log
        .append(
            &p,
            &make_idempotent_batch(1, 1000, 1_000, 0, 2),
            &policy,
            Acks::All,
        )
        .await
        .expect("the next batch in sequence");
    assert!(!next.duplicate);
    assert_eq!(next.base_offset, end);
}

/// Producer state is handed on through a chain of leaders, each compacting what the
/// previous one left with what it wrote itself: segments built by a leader that learned
/// the producers from a segment carry them on. A fencing marker's epoch survives too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_state_survives_compactions_across_leaders() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::open(&dir.path().join("meta.redb")).expect("meta"));
    let topic = one_partition_topic(&metadata).await;
    let policy = policy();
    let fenced = 910;
    {
        let log = open(dir.path(), metadata.clone()).await;
        let p = log.partition(&topic, 0).await.expect("p0");
        for i in 0..IDLE_PRODUCERS {
            log.append(&p, &idle_batch(i), &policy, Acks::All)
                .await
                .expect("idle producer");
        }
        log.append(
            &p,
            &make_txn_batch(1, 1000, fenced, 0, 0),
            &policy,
            Acks::All,
        )
        .await
        .expect("the zombie's transaction");
        log.write_marker(&p, fenced, 1, false, 0, &policy)
            .await
            .expect("the fence's abort, epoch 1");
        log.seal_once().await.expect("seal");
        busy(&log, &p, 9, 0).await;
        compact(&log, &metadata, &topic).await;
    }
    for leader in 0..2 {
        let log = take_over(dir.path(), &metadata).await;
        let p = log.partition(&topic, 0).await.expect("reopen");
        retries_are_duplicates(&log, &p).await;
        let zombie = log
            .append(
                &p,
                &make_txn_batch(1, 1000, fenced, 0, 1),
                &policy,
                Acks::All,
            )
            .await;
        assert!(
            matches!(zombie, Err(Error::ProducerFenced { current: 1, .. })),
            "leader {leader}: {zombie:?}"
        );
        // This leader writes more than the window again, and compacts it with what the
        // previous one left (one segment's worth at most: the runs merge).
        log.append(&p, &make_batch(1, 1000), &policy, Acks::All)
            .await
            .expect("other data");
        busy(&log, &p, 20 + leader, 0).await;
        compact(&log, &metadata, &topic).await;
    }
    let log = take_over(dir.path(), &metadata).await;
    let p = log.partition(&topic, 0).await.expect("reopen");
    retries_are_duplicates(&log, &p).await;
}

/// A compacted topic's policies: key compaction whenever anything is dirty.
struct KeyCompacted;

impl oxbow_segment_writer::RetentionPolicies for KeyCompacted {
    fn retention(&self, _: oxbow_metadata::TopicId) -> Option<oxbow_segment_writer::Retention> {
        Some(oxbow_segment_writer::Retention { ms: -1, bytes: -1 })
    }

    fn key_compaction(
        &self,
        _: oxbow_metadata::TopicId,
    ) -> Option<oxbow_segment_writer::key_compact::KeyCompaction> {
        Some(oxbow_segment_writer::key_compact::KeyCompaction {
            delete_retention_ms: 0,
            min_lag_ms: 0,
            max_lag_ms: i64::MAX,
            min_dirty_ratio: 0.0,
        })
    }
}

/// A batch of `count` records all of key `key`, from an idempotent producer.
fn keyed_idempotent(key: &[u8], count: usize, pid: i64, sequence: i32) -> Vec<u8> {
    use oxbow_segment_writer::key_compact::testing::{keyed_batch, KeyValue};
    let records: Vec<KeyValue> = (0..count).map(|_| (Some(key), Some(&b"v"[..]))).collect();
    let mut b = keyed_batch(
        0,
        1000,
        &records,
        oxbow_segment_writer::decompress::Codec::None,
    )
    .to_vec();
    // producerId at 43, producerEpoch at 51, baseSequence at 53; the CRC (at 17) covers
    // everything from the attributes (at 21) on.
    b[43..51].copy_from_slice(&pid.to_be_bytes());
    b[51..53].copy_from_slice(&0i16.to_be_bytes());
    b[53..57].copy_from_slice(&sequence.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// Key compaction removes a producer's only batch (a later record has its key), yet the
/// segment it writes still names the producer: its retry after a takeover is answered as a
/// duplicate, as Kafka keeps producer state apart from the cleaned log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_compaction_keeps_the_producers_of_the_batches_it_removes() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::open(&dir.path().join("meta.redb")).expect("meta"));
    let topic = one_partition_topic(&metadata).await;
    let policy = policy();
    let idle = keyed_idempotent(b"k", 1, 501, 0);
    {
        let log = open(dir.path(), metadata.clone()).await;
        let p = log.partition(&topic, 0).await.expect("p0");
        log.append(&p, &idle, &policy, Acks::All)
            .await
            .expect("idle producer");
        log.seal_once().await.expect("seal");
        for i in 0..BUSY_RECORDS / 50 {
            let b = keyed_idempotent(b"k", 50, 502, i * 50);
            log.append(&p, &b, &policy, Acks::All).await.expect("busy");
            if i % 10 == 9 {
                log.seal_once().await.expect("seal");
            }
        }
        log.seal_once().await.expect("seal");
        let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::ZERO))
            .with_retention(Arc::new(KeyCompacted));
        compactor
            .run_once(&CancellationToken::new())
            .await
            .expect("round");
        assert!(
            compactor
                .metrics
                .key_records_removed
                .load(std::sync::atomic::Ordering::Relaxed)
                > 0,
            "key compaction ran"
        );
        let last = metadata
            .catalog_last(topic.topic_id, 0)
            .await
            .expect("catalog")
            .expect("an entry");
        assert_eq!(last.layout, EntryLayout::SegmentIndex);
    }
    let log = take_over(dir.path(), &metadata).await;
    let p = log.partition(&topic, 0).await.expect("reopen");
    let end = p.offsets().expect("offsets").2;
    let retry = log
        .append(&p, &idle, &policy, Acks::All)
        .await
        .expect("retry");
    assert!(retry.duplicate, "the retry is recognised");
    assert_eq!(retry.base_offset, 0);
    assert_eq!(p.offsets().expect("offsets").2, end, "nothing stored twice");
}

/// Idle producers behind sealed chunks only (no compaction), too many for the rows a chunk
/// carries and idle for longer than the records between two complete chunks reach back
/// into the rebuild window: the last chunk's checkpoint row leads the next leader to the
/// last complete chunk, and every retry is still a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_producers_behind_many_sealed_chunks_are_found_through_the_checkpoint() {
    // 2,000 producers carry 2,000 rows: complete chunks 8,000 records apart, so the last
    // one lies before the window of a partition that ends 14,000 records in.
    const IDLE: i64 = 2_000;
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::open(&dir.path().join("meta.redb")).expect("meta"));
    let topic = one_partition_topic(&metadata).await;
    let policy = policy();
    {
        let log = open(dir.path(), metadata.clone()).await;
        let p = log.partition(&topic, 0).await.expect("p0");
        for i in 0..IDLE {
            let at = log
                .append(&p, &idle_batch(i), &policy, Acks::All)
                .await
                .expect("idle producer");
            assert_eq!(at.base_offset, 2 * i);
        }
        log.seal_once().await.expect("seal");
        busy_for(&log, &p, 9, 0, 10_000).await;
        let end = p.offsets().expect("offsets").2;
        assert_eq!(end, 2 * IDLE + 10_000);
    }
    let log = take_over(dir.path(), &metadata).await;
    let p = log.partition(&topic, 0).await.expect("reopen");
    retries_of_are_duplicates(&log, &p, IDLE).await;
    // And the busy producer goes on where it was.
    let next = make_idempotent_batch(50, 1000, 9, 0, 10_000);
    let at = log
        .append(&p, &next, &policy, Acks::All)
        .await
        .expect("busy goes on");
    assert!(!at.duplicate);
    assert_eq!(at.base_offset, 2 * IDLE + 10_000);
}
