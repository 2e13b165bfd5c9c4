//! The log end to end on one node: append, seal into the object store, read back from
//! memory and from objects, recover the WAL after a crash, detect corrupt objects.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use oxbow_cache::ReadCache;
use oxbow_metadata::{EmbeddedStore, MetadataStore, TopicSpec};
use oxbow_segment_writer::batch::{self, testing::make_batch};
use oxbow_segment_writer::{objects, Acks, AppendPolicy, LogManager, LogSettings, WalSettings};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[path = "../common/mod.rs"]
mod common;
mod transactions;

fn settings(dir: &Path) -> LogSettings {
    LogSettings {
        broker_id: 1,
        wal: WalSettings {
            dir: dir.join("wal"),
            // Tiny files, so trimming after a seal is visible.
            file_bytes_max: 256,
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
    }
}

async fn open(dir: &Path, metadata: Arc<dyn MetadataStore>) -> Arc<LogManager> {
    let store = objects::local(&dir.join("objects")).expect("object store");
    LogManager::open(settings(dir), metadata, store, ReadCache::new(1 << 20))
        .await
        .expect("open log")
}

fn embedded(dir: &Path) -> Arc<dyn MetadataStore> {
    Arc::new(EmbeddedStore::open(&dir.join("meta.redb")).expect("meta"))
}

async fn create_topic(
    metadata: &Arc<dyn MetadataStore>,
    name: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> oxbow_metadata::TopicMetadata {
    metadata
        .create_topic(
            TopicSpec {
                name: name.into(),
                partitions,
                replication_factor: 1,
                configs: configs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            },
            1,
        )
        .await
        .expect("topic")
}

#[tokio::test]
async fn append_seal_read_and_recover() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata = embedded(dir.path());
    let topic = create_topic(&metadata, "t", 2, &[]).await;
    {
        let log = open(dir.path(), metadata.clone()).await;
        let p0 = log.partition(&topic, 0).await.expect("p0");
        for i in 0..5 {
            let a = log
                .append(
                    &p0,
                    &make_batch(2, 1000 + i),
                    &AppendPolicy::of(&topic.configs),
                    Acks::All,
                )
                .await
                .expect("append");
            assert_eq!(a.base_offset, i * 2);
        }
        // Sealed into an object; with no tail kept in memory, reads go to the object.
        assert!(log.seal_once().await.expect("seal") > 0);
        let r = log.read(&p0, 3, 1 << 20, true).await.expect("read");
        assert_eq!(common::offsets(&r.batches), vec![2, 4, 6, 8]);
        assert_eq!(r.high_watermark, 10);
        // Two more, left in the WAL only (the "crash" comes before the next seal).
        for _ in 0..2 {
            log.append(
                &p0,
                &make_batch(1, 5000),
                &AppendPolicy::of(&topic.configs),
                Acks::All,
            )
            .await
            .expect("append");
        }
        let r = log.read(&p0, 0, 1 << 20, true).await.expect("read");
        assert_eq!(common::offsets(&r.batches), vec![0, 2, 4, 6, 8, 10, 11]);
        let by_ts = log
            .find_batch_by_timestamp(&p0, 4999)
            .await
            .expect("ts")
            .expect("found");
        assert_eq!(common::offsets(&[by_ts]), vec![10]);
    }
    // Restart: the catalog has offsets 0..=9, the WAL replays 10 and 11.
    let log = open(dir.path(), metadata.clone()).await;
    let p0 = log.partition(&topic, 0).await.expect("p0");
    assert_eq!(p0.offsets().expect("offsets"), (0, 12, 12));
    let r = log.read(&p0, 0, 1 << 20, true).await.expect("read");
    assert_eq!(common::offsets(&r.batches), vec![0, 2, 4, 6, 8, 10, 11]);
    let next = log
        .append(
            &p0,
            &make_batch(1, 0),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("append");
    assert_eq!(next.base_offset, 12, "offsets stay dense across restarts");
    let before = log.wal_bytes();
    log.seal_once().await.expect("seal");
    // Only the file being appended to stays; the sealed ones are gone.
    assert!(
        log.wal_bytes() < before && log.wal_bytes() <= 256 + 128,
        "WAL trimmed after sealing: {before} -> {}",
        log.wal_bytes()
    );
}

#[tokio::test]
async fn corrupt_object_is_detected_not_served() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory().expect("meta"));
    let topic = metadata
        .create_topic(
            TopicSpec {
                name: "c".into(),
                partitions: 1,
                replication_factor: 1,
                configs: BTreeMap::new(),
            },
            1,
        )
        .await
        .expect("topic");
    let store_dir = dir.path().join("objects");
    {
        let log = open(dir.path(), metadata.clone()).await;
        let p = log.partition(&topic, 0).await.expect("p");
        log.append(
            &p,
            &make_batch(3, 0),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("append");
        log.seal_once().await.expect("seal");
    }
    let entry = metadata
        .catalog_last(topic.topic_id, 0)
        .await
        .expect("catalog")
        .expect("entry");
    let file = store_dir.join(&entry.object_key);
    let mut body = std::fs::read(&file).expect("object file");
    body[entry.byte_start as usize + 30] ^= 0x04;
    std::fs::write(&file, body).expect("write");
    // A restarted broker (cold cache, nothing in memory) must read the object.
    let log = open(dir.path(), metadata.clone()).await;
    let p = log.partition(&topic, 0).await.expect("p");
    let err = log.read(&p, 0, 1 << 20, true).await.expect_err("checksum");
    assert_eq!(err.kind(), oxbow_segment_writer::ErrorKind::DataCorruption);
}

#[tokio::test]
async fn wrong_leader_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory().expect("meta"));
    let topic = metadata
        .create_topic(
            TopicSpec {
                name: "other".into(),
                partitions: 1,
                replication_factor: 1,
                configs: BTreeMap::new(),
            },
            2,
        )
        .await
        .expect("topic");
    let log = open(dir.path(), metadata).await;
    let err = log.partition(&topic, 0).await.err().expect("not leader");
    assert_eq!(err.kind(), oxbow_segment_writer::ErrorKind::NotLeader);
}

#[tokio::test]
async fn a_deposed_leader_is_fenced_at_seal_and_stops_serving() {
    // Two brokers share the metadata and the object store; broker 1 leads at epoch 0, then
    // leadership moves to broker 2 at epoch 1 while broker 1 still believes it leads.
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory().expect("meta"));
    let topic = metadata
        .create_topic(
            TopicSpec {
                name: "moved".into(),
                partitions: 1,
                replication_factor: 1,
                configs: BTreeMap::new(),
            },
            1,
        )
        .await
        .expect("topic");
    let old = open(&dir.path().join("b1"), metadata.clone()).await;
    let p_old = old.partition(&topic, 0).await.expect("b1 leads");
    old.append(
        &p_old,
        &make_batch(2, 0),
        &AppendPolicy::of(&topic.configs),
        Acks::All,
    )
    .await
    .expect("append at epoch 0");
    old.seal_once().await.expect("epoch 0 commit lands");

    // Opening recorded epoch 0's start in the stored state, so read it afresh.
    let stored = metadata.topic("moved").await.expect("get").expect("topic");
    let state = stored.partitions[0].clone();
    assert_eq!(state.leader_epochs.latest_epoch(), Some(0));
    let mut moved = state.clone();
    moved.leader = 2;
    moved.leader_epoch = 1;
    metadata
        .update_partition(topic.topic_id, state.version, moved)
        .await
        .expect("leadership moves");
    let topic = metadata.topic("moved").await.expect("get").expect("topic");
    let mut s2 = settings(&dir.path().join("b2"));
    s2.broker_id = 2;
    // The same object store as broker 1 (its `open` roots it at b1/objects).
    let store = objects::local(&dir.path().join("b1").join("objects")).expect("store");
    let new = LogManager::open(s2, metadata.clone(), store, ReadCache::new(1 << 20))
        .await
        .expect("b2");
    let p_new = new.partition(&topic, 0).await.expect("b2 leads");
    assert_eq!(
        p_new.offsets().expect("offsets").2,
        2,
        "b2 continues after the catalog"
    );
    new.append(
        &p_new,
        &make_batch(1, 0),
        &AppendPolicy::of(&topic.configs),
        Acks::All,
    )
    .await
    .expect("append at epoch 1");
    new.seal_once().await.expect("epoch 1 commit lands");
    // The epoch history: epoch 0 ended where broker 2 opened (offset 2), epoch 1 is the
    // current one and ends at the log end; both are stored for any later leader.
    assert_eq!(p_new.end_offset_for(0).expect("lookup"), Some((0, 2)));
    assert_eq!(p_new.end_offset_for(1).expect("lookup"), Some((1, 3)));
    assert_eq!(p_new.end_offset_for(2).expect("lookup"), None);
    let stored = metadata.topic("moved").await.expect("get").expect("topic");
    let starts: Vec<(i32, i64)> = stored.partitions[0]
        .leader_epochs
        .entries()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect();
    assert_eq!(starts, vec![(0, 0), (1, 2)]);

    // The deposed leader still accepts into its WAL, but its catalog commit is fenced…
    old.append(
        &p_old,
        &make_batch(1, 0),
        &AppendPolicy::of(&topic.configs),
        Acks::All,
    )
    .await
    .expect("queued locally");
    let err = old.seal_once().await.expect_err("fenced");
    assert_eq!(
        err.kind(),
        oxbow_segment_writer::ErrorKind::NotLeader,
        "{err}"
    );
    // …and it stops serving the partition: reopening it is refused.
    assert!(
        old.get(&p_old.topic_partition).is_none(),
        "partition forgotten"
    );
    let err = old.partition(&topic, 0).await.err().expect("not leader");
    assert_eq!(err.kind(), oxbow_segment_writer::ErrorKind::NotLeader);
    // The fenced seal's object was PUT but is catalogued nowhere: deleted once the delay
    // has passed (a commit that timed out could have landed until then), not before; the
    // catalogued objects stay.
    let data = dir.path().join("b1").join("objects").join("data");
    let count = || walk_files(&data);
    assert_eq!(
        count(),
        3,
        "epoch 0's, epoch 1's and the fenced seal's objects"
    );
    let now = tokio::time::Instant::now();
    old.delete_uncatalogued(now).await;
    assert_eq!(count(), 3, "kept during the delay");
    old.delete_uncatalogued(now + oxbow_segment_writer::seal::UNCATALOGUED_DELETE_DELAY)
        .await;
    assert_eq!(count(), 2, "the fenced seal's object is deleted");
    assert_eq!(
        old.metrics
            .uncatalogued_objects_deleted
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    let read = new.read(&p_new, 0, 1 << 20, true).await.expect("read");
    assert_eq!(read.batches.len(), 2, "both catalogued batches still read");
    // Only the current epoch's data is in the catalog.
    let last = metadata
        .catalog_last(topic.topic_id, 0)
        .await
        .expect("catalog")
        .expect("entry");
    assert_eq!((last.last_offset, last.leader_epoch), (2, 1));
}

#[tokio::test]
async fn a_forgotten_partition_keeps_its_unsealed_data_in_the_wal_until_reopened() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata = embedded(dir.path());
    let topic = create_topic(&metadata, "held", 1, &[]).await;
    let log = open(dir.path(), metadata.clone()).await;
    let p = log.partition(&topic, 0).await.expect("p0");
    for i in 0..4 {
        log.append(
            &p,
            &make_batch(2, 1000 + i),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("append");
    }
    // As after a lost lease whose seal failed: memory is dropped, nothing was uploaded.
    log.forget_where(|_| true);
    // Seals (and the WAL trim that follows) must not drop the held entries.
    log.seal_once().await.expect("seal");
    log.release_holds().await.expect("release");
    let p = log.partition(&topic, 0).await.expect("reopen");
    let r = log.read(&p, 0, 1 << 20, true).await.expect("read");
    assert_eq!(common::offsets(&r.batches), vec![0, 2, 4, 6]);
    assert!(log.seal_once().await.expect("seal") > 0);
}

#[tokio::test]
async fn direct_durability_acks_after_the_upload_and_keeps_no_wal() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata = embedded(dir.path());
    let topic = create_topic(&metadata, "direct", 1, &[("min.insync.replicas", "2")]).await;
    let mut s = settings(dir.path());
    s.durability = oxbow_segment_writer::Durability::Direct;
    let store = objects::local(&dir.path().join("objects")).expect("object store");
    let log = LogManager::open(s, metadata.clone(), store, ReadCache::new(1 << 20))
        .await
        .expect("open");
    let p = log.partition(&topic, 0).await.expect("p0");
    let pending = log
        .enqueue(
            &p,
            &make_batch(3, 1000),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("enqueue");
    // Not visible, not acknowledged, until sealed.
    assert_eq!(
        p.offsets().expect("offsets").1,
        0,
        "high watermark before the seal"
    );
    let waiter = tokio::spawn(pending.wait());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished(), "acked before the upload");
    assert!(log.seal_once().await.expect("seal") > 0);
    let appended = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("acked after the seal")
        .expect("task")
        .expect("append");
    assert_eq!(appended.base_offset, 0);
    assert_eq!(p.offsets().expect("offsets").1, 3);
    let last = metadata
        .catalog_last(topic.topic_id, 0)
        .await
        .expect("catalog")
        .expect("catalogued");
    assert_eq!(last.next_offset(), 3);
    assert!(
        !dir.path().join("wal").exists(),
        "no WAL directory in direct mode"
    );
}

#[tokio::test]
async fn a_reopened_partition_recognises_retries_of_batches_already_sealed() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata = embedded(dir.path());
    let topic = create_topic(&metadata, "idem", 1, &[]).await;
    let batches: Vec<Vec<u8>> = (0..3)
        .map(|i| batch::testing::make_idempotent_batch(2, 1000, 77, 0, i * 2))
        .collect();
    {
        let log = open(dir.path(), metadata.clone()).await;
        let p = log.partition(&topic, 0).await.expect("p0");
        for b in &batches {
            log.append(&p, b, &AppendPolicy::of(&topic.configs), Acks::All)
                .await
                .expect("append");
        }
        assert!(log.seal_once().await.expect("seal") > 0);
    }
    // A new leader (here: a fresh log whose WAL holds nothing unsealed) opens the partition.
    std::fs::remove_dir_all(dir.path().join("wal")).expect("clear the WAL");
    let log = open(dir.path(), metadata.clone()).await;
    let p = log.partition(&topic, 0).await.expect("reopen");
    assert_eq!(
        log.metrics
            .object_reads
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "the producers' state comes from the object's producers section: no batch read back"
    );
    let retry = log
        .append(
            &p,
            &batches[2],
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("retry");
    assert!(retry.duplicate, "the retry is recognised");
    assert_eq!(retry.base_offset, 4);
    let next = log
        .append(
            &p,
            &batch::testing::make_idempotent_batch(1, 1000, 77, 0, 6),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("next in sequence");
    assert_eq!(next.base_offset, 6);
}

/// Issue 16: a producer idle while others wrote more than the rebuild window (4096
/// records) is still known to the next leader — sealed objects carry its last batches — so
/// its retry after a takeover is recognised, not stored twice.
#[tokio::test]
async fn a_retry_is_recognised_after_a_takeover_behind_more_than_4096_records() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata = embedded(dir.path());
    let topic = create_topic(&metadata, "idle-producer", 1, &[]).await;
    let policy = AppendPolicy::of(&topic.configs);
    let idle = batch::testing::make_idempotent_batch(3, 1000, 501, 0, 0);
    {
        let log = open(dir.path(), metadata.clone()).await;
        let p = log.partition(&topic, 0).await.expect("p0");
        let first = log
            .append(&p, &idle, &policy, Acks::All)
            .await
            .expect("idle");
        assert_eq!(first.base_offset, 0);
        log.seal_once().await.expect("seal");
        // Another producer writes 5,000 records over 50 seals: the idle producer's batch is
        // far outside the window a new leader reads back.
        for i in 0..100 {
            let busy = batch::testing::make_idempotent_batch(50, 1000, 502, 0, i * 50);
            log.append(&p, &busy, &policy, Acks::All)
                .await
                .expect("busy");
            if i % 2 == 1 {
                log.seal_once().await.expect("seal");
            }
        }
    }
    std::fs::remove_dir_all(dir.path().join("wal")).expect("clear the WAL");
    let log = open(dir.path(), metadata.clone()).await;
    let p = log.partition(&topic, 0).await.expect("reopen");
    let retry = log
        .append(&p, &idle, &policy, Acks::All)
        .await
        .expect("retry");
    assert!(retry.duplicate, "the idle producer's retry is recognised");
    assert_eq!(retry.base_offset, 0);
    let next = batch::testing::make_idempotent_batch(1, 1000, 501, 0, 3);
    assert_eq!(
        log.append(&p, &next, &policy, Acks::All)
            .await
            .expect("next")
            .base_offset,
        5003
    );
}

#[tokio::test]
async fn a_new_epoch_starts_after_what_the_wal_replays() {
    // Broker 1 writes 4 records at epoch 0, seals 2 of them and "crashes"; while it is down
    // its epoch is raised (as a new lease does, `fence.rs`) and the stored history is lost
    // (as for a partition from before histories existed). On restart the WAL replays the
    // other 2: epoch 1 must start after them (offset 4), not at the catalog's end (2), or a
    // consumer at offset 3 of epoch 0 would be told epoch 0 ended at 2 (a false truncation).
    let dir = tempfile::tempdir().expect("tmp");
    let metadata = embedded(dir.path());
    let topic = create_topic(&metadata, "replayed", 1, &[]).await;
    {
        let log = open(dir.path(), metadata.clone()).await;
        let p = log.partition(&topic, 0).await.expect("leads");
        log.append(
            &p,
            &make_batch(2, 0),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("append");
        log.seal_once().await.expect("seal");
        log.append(
            &p,
            &make_batch(2, 0),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("append, WAL only");
    }
    let state = metadata
        .topic("replayed")
        .await
        .expect("get")
        .expect("topic")
        .partitions[0]
        .clone();
    let mut bumped = state.clone();
    bumped.leader_epoch = 1;
    bumped.leader_epochs = Default::default();
    metadata
        .update_partition(topic.topic_id, state.version, bumped)
        .await
        .expect("epoch 1");
    let log = open(dir.path(), metadata.clone()).await;
    let p = log.partition(&topic, 0).await.expect("leads");
    assert_eq!(p.offsets().expect("offsets").2, 4, "the WAL replayed 2..4");
    assert_eq!(p.end_offset_for(0).expect("lookup"), Some((0, 4)));
    assert_eq!(p.end_offset_for(1).expect("lookup"), Some((1, 4)));
    let stored = metadata
        .topic("replayed")
        .await
        .expect("get")
        .expect("topic");
    assert_eq!(
        stored.partitions[0].leader_epochs.latest_epoch(),
        Some(1),
        "recorded for the next leader"
    );
    assert_eq!(
        stored.partitions[0].leader_epochs.entries()[0].start_offset,
        4
    );
}

/// What the log refuses it does not store, and a batch's max timestamp is the records' own
/// (Kafka's LogValidator), whatever the producer's header claimed.
#[tokio::test]
async fn refused_batches_store_nothing_and_max_timestamp_is_the_records() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata = embedded(dir.path());
    let topic = create_topic(&metadata, "t", 1, &[]).await;
    let log = open(dir.path(), metadata.clone()).await;
    let p = log.partition(&topic, 0).await.expect("p");
    // Claims 2^31-1 records, holds one: the 70-byte batch of issue 11.
    let mut lying = make_batch(1, 1000);
    lying[23..27].copy_from_slice(&(i32::MAX - 1).to_be_bytes());
    lying[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
    let crc = crc32c::crc32c(&lying[21..]);
    lying[17..21].copy_from_slice(&crc.to_be_bytes());
    let err = log
        .append(&p, &lying, &AppendPolicy::of(&topic.configs), Acks::All)
        .await
        .expect_err("refused");
    assert_eq!(
        err.kind(),
        oxbow_segment_writer::ErrorKind::InvalidRecord,
        "{err}"
    );
    assert_eq!(
        p.offsets().expect("offsets").2,
        0,
        "the log end did not move"
    );
    // A header max timestamp lower than its records' is corrected on append.
    let mut low = make_batch(3, 1000);
    low[35..43].copy_from_slice(&5i64.to_be_bytes());
    let crc = crc32c::crc32c(&low[21..]);
    low[17..21].copy_from_slice(&crc.to_be_bytes());
    let a = log
        .append(&p, &low, &AppendPolicy::of(&topic.configs), Acks::All)
        .await
        .expect("append");
    assert_eq!(a.base_offset, 0);
    let read = log.read(&p, 0, 1 << 20, true).await.expect("read");
    let stored = batch::validate_produced(&read.batches[0], 1 << 20).expect("CRC still valid");
    assert_eq!(stored.max_timestamp, 1002);
}

/// Files under `dir`, recursively.
fn walk_files(dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| {
            let path = e.path();
            if path.is_dir() {
                walk_files(&path)
            } else {
                1
            }
        })
        .sum()
}

#[tokio::test]
async fn partition_tails_together_stay_within_the_tail_memory_budget() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata = embedded(dir.path());
    let topic = create_topic(&metadata, "t", 8, &[]).await;
    let store = objects::local(&dir.path().join("objects")).expect("object store");
    let batch = make_batch(4, 0);
    let settings = LogSettings {
        // Each partition alone could keep 64 batches; together they may keep 16.
        partition_tail_bytes: 64 * batch.len(),
        tail_memory_bytes: 16 * batch.len(),
        ..settings(dir.path())
    };
    let log = LogManager::open(settings, metadata, store, ReadCache::new(1 << 20))
        .await
        .expect("open log");
    // One partition open: it keeps up to its own bound, well past its later share.
    let p0 = log.partition(&topic, 0).await.expect("p0");
    let policy = AppendPolicy::of(&topic.configs);
    for _ in 0..12 {
        log.append(&p0, &batch, &policy, Acks::All)
            .await
            .expect("append");
    }
    log.seal_once().await.expect("seal");
    assert_eq!(log.tail_memory_bytes(), 12 * batch.len());
    // Seven more partitions, each written and sealed: every tail is trimmed to an equal
    // share, the idle first one included.
    for i in 1..8 {
        let p = log.partition(&topic, i).await.expect("partition");
        for _ in 0..12 {
            log.append(&p, &batch, &policy, Acks::All)
                .await
                .expect("append");
        }
        log.seal_once().await.expect("seal");
        assert!(
            log.tail_memory_bytes() <= 16 * batch.len(),
            "{} partitions hold {} bytes, budget {}",
            i + 1,
            log.tail_memory_bytes(),
            16 * batch.len()
        );
    }
    assert!(
        log.tail_memory_bytes() >= 8 * batch.len(),
        "each keeps its share"
    );
    // What left memory is read from the object store, in full.
    let r = log.read(&p0, 0, 1 << 20, true).await.expect("read");
    assert_eq!(r.batches.len(), 12);
}

#[tokio::test]
async fn a_read_reports_the_slowest_tier_it_came_from() {
    use oxbow_segment_writer::ReadSource;
    let dir = tempfile::tempdir().expect("tmp");
    let metadata = embedded(dir.path());
    let topic = create_topic(&metadata, "tiers", 1, &[]).await;
    {
        let log = open(dir.path(), metadata.clone()).await;
        let p = log.partition(&topic, 0).await.expect("p0");
        log.append(
            &p,
            &make_batch(3, 1000),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("append");
        let r = log.read(&p, 0, 1 << 20, true).await.expect("read");
        assert_eq!((r.batches.len(), r.source), (1, ReadSource::Tail));
        assert!(log.seal_once().await.expect("seal") > 0);
    }
    // A new leader holds nothing in memory: the first read is a GET, the next a cache hit.
    std::fs::remove_dir_all(dir.path().join("wal")).expect("clear the WAL");
    let log = open(dir.path(), metadata.clone()).await;
    let p = log.partition(&topic, 0).await.expect("reopen");
    let first = log.read(&p, 0, 1 << 20, true).await.expect("read");
    assert_eq!(
        (first.batches.len(), first.source),
        (1, ReadSource::ObjectStore)
    );
    let again = log.read(&p, 0, 1 << 20, true).await.expect("read");
    assert_eq!(
        (again.batches.len(), again.source),
        (1, ReadSource::CacheMemory)
    );
}
