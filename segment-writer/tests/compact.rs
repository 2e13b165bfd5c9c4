//! Compaction end to end on one node: many small multi-partition seals become one segment
//! per partition; every offset reads back identical, by offset and by timestamp, from a
//! cold broker; superseded objects go only once unreferenced and past the delete delay;
//! corrupt data is detected and neither served nor copied; a fenced compactor changes
//! nothing.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use oxbow_cache::ReadCache;
use oxbow_metadata::{EntryLayout, MetadataStore, TopicSpec};
use oxbow_segment_writer::batch::testing::make_batch;
use oxbow_segment_writer::{objects, Acks, AppendPolicy, Compactor, ErrorKind, LogManager};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_seals_become_segments_that_read_back_identical() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::open(&dir.path().join("meta.redb")).expect("meta"));
    let topic = topic(&metadata).await;
    let expected;
    {
        let log = open(dir.path(), metadata.clone()).await;
        produce(&log, &topic, 0, ROUNDS).await;
        expected = read_all(&log, &topic).await;
        let before = objects_in(dir.path());
        assert_eq!(count_under(&before, "data/"), ROUNDS as usize);
        for p in 0..PARTITIONS {
            let entries = metadata
                .catalog_entries(topic.topic_id, p, 0, 1000)
                .await
                .expect("catalog");
            assert_eq!(entries.len(), ROUNDS as usize);
        }

        let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::ZERO));
        let stop = CancellationToken::new();
        let stats = compactor.run_once(&stop).await.expect("round");
        assert_eq!(stats.segments_written, PARTITIONS as u64);
        assert_eq!(stats.entries_replaced, (ROUNDS * PARTITIONS as i64) as u64);
        for p in 0..PARTITIONS {
            let entries = metadata
                .catalog_entries(topic.topic_id, p, 0, 1000)
                .await
                .expect("catalog");
            assert_eq!(entries.len(), 1, "one segment per partition");
            assert_eq!(entries[0].layout, EntryLayout::SegmentIndex);
            assert!(entries[0].object_key.starts_with("segments/"));
        }
        // Reads right after the swap, warm (the index was cached by the compactor).
        check_reads(&log, &topic, &expected).await;
        // With no delete delay, superseded objects go as soon as the index of each has
        // been read (a bounded number per round).
        for _ in 0..5 {
            if compactor.pending_deletions() == 0 {
                break;
            }
            compactor.run_once(&stop).await.expect("round");
        }
        assert_eq!(compactor.pending_deletions(), 0);
        let after = objects_in(dir.path());
        assert_eq!(count_under(&after, "data/"), 0, "{after:?}");
        assert_eq!(count_under(&after, "segments/"), PARTITIONS as usize);
        // Nothing more to do: a round is a no-op.
        assert_eq!(
            compactor
                .run_once(&stop)
                .await
                .expect("round")
                .segments_written,
            0
        );
    }
    // A cold broker (empty cache, nothing in memory) reads everything from segments.
    let log = open(dir.path(), metadata.clone()).await;
    check_reads(&log, &topic, &expected).await;
    assert!(
        log.metrics
            .object_reads
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );

    // More small seals after the segment, then another round: segments and new data merge
    // (comparable sizes) into one segment per partition again, appends continue.
    produce(&log, &topic, ROUNDS, ROUNDS).await;
    let expected = read_all(&log, &topic).await;
    let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::ZERO));
    let stop = CancellationToken::new();
    compactor.run_once(&stop).await.expect("round");
    for p in 0..PARTITIONS {
        let entries = metadata
            .catalog_entries(topic.topic_id, p, 0, 1000)
            .await
            .expect("catalog");
        assert_eq!(entries.len(), 1, "merged: {entries:?}");
    }
    check_reads(&log, &topic, &expected).await;
    for _ in 0..5 {
        compactor.run_once(&stop).await.expect("round");
    }
    let after = objects_in(dir.path());
    assert_eq!(count_under(&after, "data/"), 0, "{after:?}");
    assert_eq!(
        count_under(&after, "segments/"),
        PARTITIONS as usize,
        "the first segments were superseded and deleted too: {after:?}"
    );
    let part = log.partition(&topic, 0).await.expect("p0");
    let end = part.offsets().expect("offsets").2;
    let next = log
        .append(
            &part,
            &make_batch(1, 0),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("append after compaction");
    assert_eq!(next.base_offset, end, "offsets stay dense");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superseded_objects_wait_for_the_delete_delay() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let log = open(dir.path(), metadata.clone()).await;
    produce(&log, &topic, 0, 4).await;
    let delay = Duration::from_secs(300);
    let mut compactor = Compactor::new(log.clone(), compact_settings(delay));
    let stop = CancellationToken::new();
    let t0 = Instant::now();
    let stats = compactor.run_once_at(t0, &stop).await.expect("round");
    assert_eq!(stats.segments_written, PARTITIONS as u64);
    assert_eq!(stats.objects_deleted, 0);
    assert_eq!(count_under(&objects_in(dir.path()), "data/"), 4);
    let deleted = compactor
        .collect_garbage(t0 + delay - Duration::from_secs(1), &stop)
        .await
        .expect("gc");
    assert_eq!(deleted, 0, "not before the delay");
    assert_eq!(count_under(&objects_in(dir.path()), "data/"), 4);
    let deleted = compactor
        .collect_garbage(t0 + delay, &stop)
        .await
        .expect("gc");
    assert_eq!(deleted, 4);
    assert_eq!(count_under(&objects_in(dir.path()), "data/"), 0);
    assert_eq!(compactor.pending_deletions(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_data_is_neither_served_nor_compacted() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    {
        let log = open(dir.path(), metadata.clone()).await;
        produce(&log, &topic, 0, 6).await;
        let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::ZERO));
        compactor
            .run_once(&CancellationToken::new())
            .await
            .expect("round");
    }
    let segment = |p: i32| {
        let metadata = metadata.clone();
        async move {
            metadata
                .catalog_entries(topic.topic_id, p, 0, 10)
                .await
                .expect("catalog")
                .remove(0)
        }
    };
    let store_dir = dir.path().join("objects");
    // A flipped bit in partition 0's segment data, and in partition 1's segment index.
    let s0 = segment(0).await;
    let file = store_dir.join(&s0.object_key);
    let mut body = std::fs::read(&file).expect("segment file");
    body[40] ^= 0x10;
    std::fs::write(&file, body).expect("write");
    let s1 = segment(1).await;
    let file = store_dir.join(&s1.object_key);
    let mut body = std::fs::read(&file).expect("segment file");
    body[s1.byte_start as usize + 9] ^= 0x01;
    std::fs::write(&file, body).expect("write");

    // A cold broker: nothing cached.
    let log = open(dir.path(), metadata.clone()).await;
    for p in [0, 1] {
        let part = log.partition(&topic, p).await.expect("partition");
        let err = log
            .read(&part, 0, 1 << 20, true)
            .await
            .expect_err("checksum");
        assert_eq!(
            err.kind(),
            ErrorKind::DataCorruption,
            "partition {p}: {err}"
        );
    }
    let part = log.partition(&topic, 2).await.expect("partition");
    log.read(&part, 0, 1 << 20, true)
        .await
        .expect("an intact segment still reads");
    assert!(
        log.metrics
            .checksum_failures
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 2
    );

    // The compactor does not copy corrupt data into a new segment: new small seals after
    // the corrupt segment are compacted alone, the corrupt one stays as it is.
    produce(&log, &topic, 6, 12).await;
    let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::ZERO));
    for _ in 0..2 {
        compactor
            .run_once(&CancellationToken::new())
            .await
            .expect("round");
    }
    let entries = metadata
        .catalog_entries(topic.topic_id, 0, 0, 10)
        .await
        .expect("catalog");
    assert_eq!(entries[0], s0, "the corrupt segment is left alone");
    assert!(
        entries
            .iter()
            .all(|e| e.layout == EntryLayout::SegmentIndex),
        "{entries:?}"
    );
    assert!(
        compactor
            .metrics
            .checksum_failures
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_compactor_changes_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let log = open(dir.path(), metadata.clone()).await;
    produce(&log, &topic, 0, 5).await;
    let expected = read_all(&log, &topic).await;
    let catalog_before = metadata
        .catalog_entries(topic.topic_id, 0, 0, 100)
        .await
        .expect("catalog");
    // Leadership of partition 0 moves on (a new epoch) while this broker still has it open.
    let state = metadata
        .topic("c")
        .await
        .expect("topic")
        .expect("some")
        .partitions[0]
        .clone();
    let mut moved = state.clone();
    moved.leader_epoch += 1;
    metadata
        .update_partition(topic.topic_id, state.version, moved)
        .await
        .expect("epoch bump");

    let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::ZERO));
    let stop = CancellationToken::new();
    compactor.run_once(&stop).await.expect("round");
    for _ in 0..3 {
        compactor.run_once(&stop).await.expect("round");
    }
    assert_eq!(
        compactor
            .metrics
            .replace_fenced
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    let catalog_after = metadata
        .catalog_entries(topic.topic_id, 0, 0, 100)
        .await
        .expect("catalog");
    assert_eq!(
        catalog_after, catalog_before,
        "the fenced partition's catalog"
    );
    let objects = objects_in(dir.path());
    // Partition 0 still references every sealed object: none is deleted; its rejected
    // segment was deleted (unreferenced); the other partitions were compacted.
    assert_eq!(count_under(&objects, "data/"), 5, "{objects:?}");
    let p0_segments = format!("segments/{}/0/", topic.topic_id);
    assert_eq!(count_under(&objects, &p0_segments), 0, "{objects:?}");
    assert_eq!(count_under(&objects, "segments/"), 2, "{objects:?}");
    // Everything still reads back (partitions 1 and 2 from segments, 0 from the objects).
    let now = read_all(&log, &topic).await;
    assert_eq!(now, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_racing_compaction_and_deletion_see_every_batch() {
    // With no delete delay, an object can vanish between a reader's catalog lookup and its
    // GET; the reader looks the catalog up again and carries on.
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let log = open(dir.path(), metadata.clone()).await;
    produce(&log, &topic, 0, 3).await;
    let stop = CancellationToken::new();
    let reader = {
        let (log, topic, stop) = (log.clone(), topic.clone(), stop.clone());
        tokio::spawn(async move {
            let mut reads = 0u64;
            while !stop.is_cancelled() {
                for p in 0..PARTITIONS {
                    let part = log.partition(&topic, p).await.expect("partition");
                    let r = log.read(&part, 0, 1 << 30, true).await?;
                    let mut next = 0;
                    for b in &r.batches {
                        let h = header(b);
                        assert_eq!(h.base_offset, next, "dense");
                        next = h.last_offset() + 1;
                    }
                    reads += 1;
                }
            }
            Ok::<u64, oxbow_segment_writer::Error>(reads)
        })
    };
    let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::ZERO));
    for round in 0..15 {
        produce(&log, &topic, 3 + round * 2, 2).await;
        compactor
            .run_once(&CancellationToken::new())
            .await
            .expect("round");
    }
    stop.cancel();
    let reads = tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .expect("the reader stops within a minute")
        .expect("reader task")
        .expect("every read succeeded");
    assert!(reads > 0);
    let expected = read_all(&log, &topic).await;
    check_reads(&log, &topic, &expected).await;
}

/// What a [`common::HookedStore`] does so a test can hold one GET of one key until
/// released (deleting the object between a reader's catalog lookup and its GET), and count
/// the GETs that found nothing.
#[derive(Debug)]
struct Gate {
    trap: std::sync::Mutex<Option<Trap>>,
    not_found: std::sync::atomic::AtomicU64,
}

#[derive(Debug)]
struct Trap {
    key: String,
    arrived: tokio::sync::oneshot::Sender<()>,
    release: tokio::sync::oneshot::Receiver<()>,
}

#[async_trait::async_trait]
impl common::GetHook for Gate {
    async fn before(
        &self,
        location: &object_store::path::Path,
        _options: &object_store::GetOptions,
    ) {
        let trap = {
            let mut t = self.trap.lock().expect("trap lock");
            if t.as_ref().is_some_and(|t| t.key == location.as_ref()) {
                t.take()
            } else {
                None
            }
        };
        if let Some(t) = trap {
            let _ = t.arrived.send(());
            let _ = t.release.await;
        }
    }

    fn after(&self, result: &object_store::Result<object_store::GetResult>) {
        if matches!(result, Err(object_store::Error::NotFound { .. })) {
            self.not_found
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_whose_object_was_compacted_away_looks_the_catalog_up_again() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let store = Arc::new(common::HookedStore {
        inner: objects::local(&dir.path().join("objects")).expect("object store"),
        hook: Gate {
            trap: std::sync::Mutex::new(None),
            not_found: std::sync::atomic::AtomicU64::new(0),
        },
    });
    // A tiny cache (it keeps about one range), shared with the test to pick a range it
    // does not hold: that read must GET.
    let cache = ReadCache::new(1);
    let log = LogManager::open(
        settings(dir.path()),
        metadata.clone(),
        store.clone(),
        cache.clone(),
    )
    .await
    .expect("open log");
    produce(&log, &topic, 0, 4).await;
    let expected = read_all(&log, &topic).await;
    let first = metadata
        .catalog_entries(topic.topic_id, 0, 0, 10)
        .await
        .expect("catalog")
        .into_iter()
        .find(|e| !cache.contains(&e.object_key, e.byte_start, e.byte_len))
        .expect("a range not in the cache");
    let from = first.base_offset;
    let (arrived_tx, arrived) = tokio::sync::oneshot::channel();
    let (release, release_rx) = tokio::sync::oneshot::channel();
    *store.hook.trap.lock().expect("trap lock") = Some(Trap {
        key: first.object_key.clone(),
        arrived: arrived_tx,
        release: release_rx,
    });
    // The reader looks up the old entries, then its GET waits at the gate…
    let reader = {
        let (log, topic) = (log.clone(), topic.clone());
        tokio::spawn(async move {
            let part = log.partition(&topic, 0).await.expect("partition");
            log.read(&part, from, 1 << 30, true).await
        })
    };
    // (Bounded: a reader that never reaches the object fails the test instead of hanging.)
    tokio::time::timeout(Duration::from_secs(60), arrived)
        .await
        .expect("the reader reached the object within a minute")
        .expect("the reader reached the object");
    // …while compaction swaps the catalog and deletes the object (no delete delay).
    let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::ZERO));
    compactor
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    assert_eq!(compactor.pending_deletions(), 0);
    assert_eq!(count_under(&objects_in(dir.path()), "data/"), 0);
    let _ = release.send(());
    let read = reader
        .await
        .expect("reader task")
        .expect("read after re-lookup");
    let want: Vec<Bytes> = expected[0]
        .iter()
        .filter(|b| header(b).last_offset() >= from)
        .cloned()
        .collect();
    assert_eq!(read.batches, want);
    assert!(
        store
            .hook
            .not_found
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1,
        "the reader did hit the deleted object"
    );
}

/// A round that rewrites many partitions commits their swaps together: a few metadata
/// writes, not one per partition; every partition reads back identical.
#[tokio::test]
async fn a_round_over_many_partitions_costs_few_metadata_writes() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let metadata: Arc<dyn MetadataStore> = store.clone();
    let partitions = 100;
    let topic = metadata
        .create_topic(
            TopicSpec {
                name: "wide".into(),
                partitions,
                replication_factor: 1,
                configs: BTreeMap::new(),
            },
            1,
        )
        .await
        .expect("topic");
    let log = open(dir.path(), metadata.clone()).await;
    for _ in 0..3 {
        for p in 0..partitions {
            let part = log.partition(&topic, p).await.expect("partition");
            log.append(
                &part,
                &make_batch(2, 1000),
                &AppendPolicy::of(&topic.configs),
                Acks::All,
            )
            .await
            .expect("append");
        }
        log.seal_once().await.expect("seal");
    }
    let mut before_read = Vec::new();
    for p in 0..partitions {
        let part = log.partition(&topic, p).await.expect("partition");
        before_read.push(
            log.read(&part, 0, 1 << 20, true)
                .await
                .expect("read")
                .batches,
        );
    }
    let revision = || async {
        use oxbow_metadata::kv::Kv;
        store
            .kv()
            .range(oxbow_metadata::kv::Get::key("/"))
            .await
            .expect("revision")
            .revision
    };
    let before = revision().await;
    let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::from_secs(3600)));
    let stats = compactor
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    let writes = revision().await - before;
    assert_eq!(stats.segments_written, partitions as u64);
    let most = (partitions as usize).div_ceil(oxbow_segment_writer::compact::SWAPS_PER_COMMIT);
    assert!(
        writes as usize <= most,
        "{writes} metadata writes for {partitions} partitions' swaps (at most {most})"
    );
    for p in 0..partitions {
        let entries = metadata
            .catalog_entries(topic.topic_id, p, 0, 10)
            .await
            .expect("catalog");
        assert_eq!(entries.len(), 1, "partition {p}: one segment");
        assert_eq!(entries[0].layout, EntryLayout::SegmentIndex);
        let part = log.partition(&topic, p).await.expect("partition");
        let after = log
            .read(&part, 0, 1 << 20, true)
            .await
            .expect("read")
            .batches;
        assert_eq!(
            after, before_read[p as usize],
            "partition {p} reads back identical"
        );
    }
}
