//! Compaction end to end on one node: many small multi-partition seals become one segment
//! per partition; every offset reads back identical, by offset and by timestamp, from a
//! cold broker; superseded objects go only once unreferenced and past the delete delay;
//! corrupt data is detected and neither served nor copied; a fenced compactor changes
//! nothing.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use oxbow_cache::ReadCache;
use oxbow_metadata::{EntryLayout, MetadataStore, TopicMetadata, TopicSpec};
use oxbow_segment_writer::batch::{self, testing::make_batch};
use oxbow_segment_writer::{
    objects, Acks, CompactSettings, Compactor, ErrorKind, LogManager, LogSettings, WalSettings,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const PARTITIONS: i32 = 3;
const ROUNDS: i64 = 20;

fn settings(dir: &Path) -> LogSettings {
    LogSettings {
        broker_id: 1,
        wal: WalSettings {
            dir: dir.join("wal"),
            file_bytes_max: 1 << 20,
            budget_bytes: 1 << 30,
        },
        flush_interval: Duration::from_secs(3600),
        flush_bytes: 1 << 30,
        // Nothing kept in memory after a seal: reads go to the object store.
        partition_tail_bytes: 0,
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

fn compact_settings(delete_delay: Duration) -> CompactSettings {
    CompactSettings {
        // Small chunks, so segments have many index rows.
        index_interval_bytes: 700,
        ..CompactSettings::new(1 << 20, Duration::from_secs(3600), delete_delay)
    }
}

async fn topic(metadata: &Arc<dyn MetadataStore>) -> TopicMetadata {
    metadata
        .create_topic(
            TopicSpec {
                name: "c".into(),
                partitions: PARTITIONS,
                replication_factor: 1,
                configs: BTreeMap::new(),
            },
            1,
        )
        .await
        .expect("topic")
}

/// Appends a few batches to every partition and seals them into one object, `rounds`
/// times: each object holds every partition. Timestamps jump around (not monotonic).
async fn produce(log: &LogManager, topic: &TopicMetadata, first_round: i64, rounds: i64) {
    for round in first_round..first_round + rounds {
        for p in 0..PARTITIONS {
            let part = log.partition(topic, p).await.expect("partition");
            for i in 0..3 {
                let ts = 10_000 + ((round * 7 + i * 3) % 13) * 100 + i64::from(p);
                let count = 1 + ((round + i) % 4) as i32;
                log.append(&part, &make_batch(count, ts), 1 << 20, false, Acks::All)
                    .await
                    .expect("append");
            }
        }
        log.seal_once().await.expect("seal");
    }
}

/// Every batch of every partition, read from the start.
async fn read_all(log: &LogManager, topic: &TopicMetadata) -> Vec<Vec<Bytes>> {
    let mut out = Vec::new();
    for p in 0..PARTITIONS {
        let part = log.partition(topic, p).await.expect("partition");
        let r = log.read(&part, 0, 1 << 30, true).await.expect("read");
        out.push(r.batches);
    }
    out
}

/// Every file in the object store.
fn objects_in(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let path = e.path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&dir.join("objects"), &mut out);
    out.sort();
    out
}

fn count_under(objects: &[PathBuf], prefix: &str) -> usize {
    objects
        .iter()
        .filter(|p| p.to_string_lossy().contains(prefix))
        .count()
}

fn header(b: &Bytes) -> batch::BatchHeader {
    batch::peek_header(b).expect("header").expect("whole")
}

/// Reads every offset alone and by timestamp, checking against `expected`.
async fn check_reads(log: &LogManager, topic: &TopicMetadata, expected: &[Vec<Bytes>]) {
    for (p, batches) in expected.iter().enumerate() {
        let part = log.partition(topic, p as i32).await.expect("partition");
        let all = log.read(&part, 0, 1 << 30, true).await.expect("read all");
        assert_eq!(
            &all.batches, batches,
            "partition {p}: every batch identical"
        );
        for b in batches {
            let h = header(b);
            for offset in h.base_offset..=h.last_offset() {
                let r = log.read(&part, offset, 1, true).await.expect("read");
                assert_eq!(r.batches.first(), Some(b), "partition {p} offset {offset}");
            }
            // By time: the first batch whose max timestamp reaches T.
            for t in [h.max_timestamp, h.max_timestamp - 1, h.base_timestamp] {
                let want = batches.iter().find(|x| header(x).max_timestamp >= t);
                let got = log
                    .find_batch_by_timestamp(&part, t)
                    .await
                    .expect("by time");
                assert_eq!(got.as_ref(), want, "partition {p} timestamp {t}");
            }
        }
        let past = batches.iter().map(|b| header(b).max_timestamp).max();
        let none = log
            .find_batch_by_timestamp(&part, past.unwrap_or(0) + 1)
            .await
            .expect("by time");
        assert!(none.is_none(), "no batch after the last timestamp");
    }
}

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
        .append(&part, &make_batch(1, 0), 1 << 20, false, Acks::All)
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

/// An object store that can hold one GET of one key until released, so a test can delete
/// the object between a reader's catalog lookup and its GET.
#[derive(Debug)]
struct GatedStore {
    inner: Arc<dyn object_store::ObjectStore>,
    trap: std::sync::Mutex<Option<Trap>>,
    not_found: std::sync::atomic::AtomicU64,
}

#[derive(Debug)]
struct Trap {
    key: String,
    arrived: tokio::sync::oneshot::Sender<()>,
    release: tokio::sync::oneshot::Receiver<()>,
}

impl std::fmt::Display for GatedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GatedStore({})", self.inner)
    }
}

#[async_trait::async_trait]
impl object_store::ObjectStore for GatedStore {
    async fn put_opts(
        &self,
        location: &object_store::path::Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &object_store::path::Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &object_store::path::Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
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
        let r = self.inner.get_opts(location, options).await;
        if matches!(r, Err(object_store::Error::NotFound { .. })) {
            self.not_found
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        r
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<
            'static,
            object_store::Result<object_store::path::Path>,
        >,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &object_store::path::Path,
        to: &object_store::path::Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_whose_object_was_compacted_away_looks_the_catalog_up_again() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let store = Arc::new(GatedStore {
        inner: objects::local(&dir.path().join("objects")).expect("object store"),
        trap: std::sync::Mutex::new(None),
        not_found: std::sync::atomic::AtomicU64::new(0),
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
        .find(|e| cache.get(&e.object_key, e.byte_start, e.byte_len).is_none())
        .expect("a range not in the cache");
    let from = first.base_offset;
    let (arrived_tx, arrived) = tokio::sync::oneshot::channel();
    let (release, release_rx) = tokio::sync::oneshot::channel();
    *store.trap.lock().expect("trap lock") = Some(Trap {
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
        store.not_found.load(std::sync::atomic::Ordering::Relaxed) >= 1,
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
            log.append(&part, &make_batch(2, 1000), 1 << 20, false, Acks::All)
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

/// Retention as the broker configures it: one policy for every topic.
struct Everywhere(oxbow_segment_writer::Retention);

impl oxbow_segment_writer::RetentionPolicies for Everywhere {
    fn retention(&self, _: oxbow_metadata::TopicId) -> Option<oxbow_segment_writer::Retention> {
        Some(self.0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_size_and_time_moves_the_log_start_and_deletes_what_left() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let log = open(dir.path(), metadata.clone()).await;
    produce(&log, &topic, 0, 4).await;
    let before = read_all(&log, &topic).await;
    let entries = metadata
        .catalog_entries(topic.topic_id, 0, 0, 100)
        .await
        .expect("catalog");
    assert_eq!(entries.len(), 4, "one entry per sealed object");
    // By size: keep at least the last entry's bytes: the three before it leave.
    let last = entries[3].clone();
    let keep = i64::try_from(last.byte_len).expect("size");
    let stop = CancellationToken::new();
    let delay = Duration::from_secs(300);
    let mut compactor = Compactor::new(log.clone(), compact_settings(delay)).with_retention(
        Arc::new(Everywhere(oxbow_segment_writer::Retention {
            ms: -1,
            bytes: keep,
        })),
    );
    let t0 = Instant::now();
    compactor.run_once_at(t0, &stop).await.expect("round");
    for p in 0..PARTITIONS {
        let part = log.partition(&topic, p).await.expect("partition");
        let (start, _, end) = part.offsets().expect("offsets");
        let first_kept = metadata
            .catalog_entries(topic.topic_id, p, 0, 100)
            .await
            .expect("catalog");
        assert_eq!(first_kept.len(), 1, "p{p}: only the last entry is left");
        assert_eq!(
            start, first_kept[0].base_offset,
            "p{p}: the log starts there"
        );
        // Below the start: out of range; from it: exactly what was there before.
        let below = log.read(&part, start - 1, 1 << 20, true).await;
        assert_eq!(
            below.expect_err("below the log start").kind(),
            ErrorKind::OffsetOutOfRange
        );
        let from = log.read(&part, start, 1 << 30, true).await.expect("read");
        let kept: Vec<Bytes> = before[p as usize]
            .iter()
            .filter(|b| header(b).base_offset >= start)
            .cloned()
            .collect();
        assert_eq!(
            from.batches, kept,
            "p{p}: what is above the start is untouched"
        );
        assert!(end > start);
        // Stored: a new leader (or a restarted broker) starts there too.
        let (_, state) = metadata
            .partition_state(topic.topic_id, p)
            .await
            .expect("state")
            .expect("some");
        assert_eq!(state.log_start_offset, start);
    }
    // The three objects every partition has left go once the delete delay has passed.
    assert_eq!(count_under(&objects_in(dir.path()), "data/"), 4);
    compactor
        .collect_garbage(t0 + delay - Duration::from_secs(1), &stop)
        .await
        .expect("gc");
    assert_eq!(
        count_under(&objects_in(dir.path()), "data/"),
        4,
        "not before the delay"
    );
    compactor
        .collect_garbage(t0 + delay, &stop)
        .await
        .expect("gc");
    // The round went on to compact what was left into one segment per partition, so the
    // fourth object went too.
    assert_eq!(count_under(&objects_in(dir.path()), "data/"), 0);
    assert_eq!(
        count_under(&objects_in(dir.path()), "segments/"),
        PARTITIONS as usize
    );

    // By time: the records' timestamps are from 1970, a day's retention removes the rest
    // of what is sealed (never what is not: the log end stays).
    let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::ZERO))
        .with_retention(Arc::new(Everywhere(oxbow_segment_writer::Retention {
            ms: 86_400_000,
            bytes: -1,
        })));
    compactor.run_once(&stop).await.expect("round");
    compactor
        .collect_garbage(Instant::now(), &stop)
        .await
        .expect("gc");
    for p in 0..PARTITIONS {
        let part = log.partition(&topic, p).await.expect("partition");
        let (start, _, end) = part.offsets().expect("offsets");
        assert_eq!(start, end, "p{p}: everything sealed has expired");
        let r = log
            .read(&part, start, 1 << 20, true)
            .await
            .expect("read at the end");
        assert!(r.batches.is_empty());
    }
    assert_eq!(count_under(&objects_in(dir.path()), "segments/"), 0);
    // Appends go on at the log end.
    let part = log.partition(&topic, 0).await.expect("partition");
    let (_, _, end) = part.offsets().expect("offsets");
    let appended = log
        .append(&part, &make_batch(2, 20_000), 1 << 20, false, Acks::All)
        .await
        .expect("append");
    assert_eq!(appended.base_offset, end);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orphan_sweep_deletes_only_old_objects_nothing_names() {
    use object_store::ObjectStoreExt;
    use oxbow_segment_writer::orphans::OrphanSweeper;
    use std::time::SystemTime;
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let log = open(dir.path(), metadata.clone()).await;
    produce(&log, &topic, 0, 3).await;
    // One round of compaction: segments, and the sealed objects they replaced still there.
    let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::from_secs(3600)));
    compactor
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    let before = read_all(&log, &topic).await;
    // Leaked objects: a sealed object and a segment no catalog key names, and a file of a
    // shape Oxbow does not write.
    let store = log.object_store().clone();
    let leaked = [
        "data/b1/00000000000000099999-0123456789abcdef0123456789abcdef.oxb".to_string(),
        format!(
            "segments/{}/0/00000000000000000000-0-0123456789abcdef0123456789abcdef.oxs",
            topic.topic_id
        ),
    ];
    for key in leaked
        .iter()
        .chain(["data/b1/notes.txt".to_string()].iter())
    {
        store
            .put(
                &object_store::path::Path::from(key.as_str()),
                Bytes::from_static(b"leaked").into(),
            )
            .await
            .expect("put");
    }
    // A grace of an hour: everything is younger, nothing goes.
    let mut sweeper = OrphanSweeper::new(Duration::from_secs(3600));
    let stats = sweeper
        .sweep(store.as_ref(), metadata.as_ref(), SystemTime::now())
        .await
        .expect("sweep");
    assert_eq!((stats.candidates, stats.deleted), (0, 0));
    // Seen two hours later: the leaked two go, and so do the sealed objects compaction
    // replaced (the replace removed their catalog keys; the compactor's ledger would have
    // deleted them after its delay); the segments the catalogue names and the foreign file
    // stay.
    let later = SystemTime::now() + Duration::from_secs(7200);
    let mut deleted = 0;
    for _ in 0..2 {
        deleted += sweeper
            .sweep(store.as_ref(), metadata.as_ref(), later)
            .await
            .expect("sweep")
            .deleted;
    }
    assert_eq!(deleted, 2 + 3);
    let left = objects_in(dir.path());
    for key in &leaked {
        assert!(!left.iter().any(|p| p.ends_with(key)), "{key} deleted");
    }
    assert_eq!(count_under(&left, "segments/"), PARTITIONS as usize);
    assert_eq!(
        count_under(&left, "data/"),
        1,
        "the foreign file stays: {left:?}"
    );
    assert_eq!(
        read_all(&log, &topic).await,
        before,
        "every record still reads"
    );
    // A deleted topic: its catalogue goes, and then its objects with the next sweeps.
    metadata.delete_topic("c").await.expect("delete");
    let mut deleted = 0;
    for _ in 0..2 {
        deleted += sweeper
            .sweep(store.as_ref(), metadata.as_ref(), later)
            .await
            .expect("sweep")
            .deleted;
    }
    assert!(deleted > 0);
    let left = objects_in(dir.path());
    assert_eq!(
        count_under(&left, "data/") + count_under(&left, "segments/"),
        1,
        "only the foreign file is left: {left:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_the_log_start_is_fenced_by_leadership() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let log = open(dir.path(), metadata.clone()).await;
    produce(&log, &topic, 0, 3).await;
    let part = log.partition(&topic, 0).await.expect("partition");
    let (_, _, end) = part.offsets().expect("offsets");
    // Another change of the partition's state that keeps the leader (a version bump) is
    // raced and retried, not refused.
    let (_, state) = metadata
        .partition_state(topic.topic_id, 0)
        .await
        .expect("state")
        .expect("some");
    let bumped = metadata
        .update_partition(topic.topic_id, state.version, state.clone())
        .await
        .expect("bump");
    assert_eq!(log.advance_log_start(&part, 2).await.expect("advance"), 2);
    // Past the sealed end: refused (a new leader's recovery must start at a batch).
    assert_eq!(
        log.advance_log_start(&part, end + 1)
            .await
            .expect_err("past the sealed end")
            .kind(),
        ErrorKind::OffsetOutOfRange
    );
    // Leadership moves (the controller's failover: broker 2 at the next epoch) while this
    // broker still holds the partition open: its step is fenced, and nothing changes.
    let (_, state) = metadata
        .partition_state(topic.topic_id, 0)
        .await
        .expect("state")
        .expect("some");
    assert!(state.version > bumped.version);
    let mut moved = state.clone();
    moved.leader = 2;
    moved.leader_epoch += 1;
    metadata
        .update_partition(topic.topic_id, state.version, moved)
        .await
        .expect("move");
    let refused = log.advance_log_start(&part, 5).await;
    assert_eq!(
        refused.expect_err("a deposed leader").kind(),
        ErrorKind::NotLeader
    );
    let (_, after) = metadata
        .partition_state(topic.topic_id, 0)
        .await
        .expect("state")
        .expect("some");
    assert_eq!(
        after.log_start_offset, 2,
        "the deposed leader's step changed nothing"
    );
    assert_eq!(after.leader, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_out_of_time_still_applies_retention() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let log = open(dir.path(), metadata.clone()).await;
    produce(&log, &topic, 0, 3).await;
    let settings = CompactSettings {
        round_time_max: Duration::ZERO,
        ..compact_settings(Duration::ZERO)
    };
    let mut compactor = Compactor::new(log.clone(), settings).with_retention(Arc::new(Everywhere(
        oxbow_segment_writer::Retention {
            ms: 86_400_000,
            bytes: -1,
        },
    )));
    let stats = compactor
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    assert_eq!(stats.segments_written, 0, "no time to compact");
    for p in 0..PARTITIONS {
        let part = log.partition(&topic, p).await.expect("partition");
        let (start, _, end) = part.offsets().expect("offsets");
        assert_eq!(start, end, "p{p}: retention ran all the same");
    }
}

/// A compacted topic's policies: key compaction whenever anything is dirty.
struct Compacted {
    delete_retention_ms: i64,
}

impl oxbow_segment_writer::RetentionPolicies for Compacted {
    fn retention(&self, _: oxbow_metadata::TopicId) -> Option<oxbow_segment_writer::Retention> {
        Some(oxbow_segment_writer::Retention { ms: -1, bytes: -1 })
    }

    fn key_compaction(
        &self,
        _: oxbow_metadata::TopicId,
    ) -> Option<oxbow_segment_writer::key_compact::KeyCompaction> {
        Some(oxbow_segment_writer::key_compact::KeyCompaction {
            delete_retention_ms: self.delete_retention_ms,
            min_lag_ms: 0,
            max_lag_ms: i64::MAX,
            min_dirty_ratio: 0.0,
        })
    }
}

const ALL_CODECS: &[oxbow_segment_writer::decompress::Codec] = {
    use oxbow_segment_writer::decompress::Codec;
    &[
        Codec::None,
        Codec::Zstd,
        Codec::Gzip,
        Codec::Lz4,
        Codec::Snappy,
    ]
};

/// Latest (offset, value) per key, as a Kafka consumer of a compacted topic should end up.
type Latest = BTreeMap<Vec<u8>, (i64, Option<Vec<u8>>)>;
/// A record read or written: offset, key, value (`None`: a tombstone).
type Written = (i64, Vec<u8>, Option<Vec<u8>>);

/// Writes `rounds` rounds to partition 0, each overwriting every key of `keys` (some as
/// tombstones in odd rounds), `per_batch` records a batch, in `codecs` by turns, sealing
/// after each; returns every record written as (offset, key, value).
async fn produce_keyed(
    log: &LogManager,
    topic: &TopicMetadata,
    first_round: u32,
    rounds: u32,
    keys: u32,
    per_batch: usize,
    codecs: &[oxbow_segment_writer::decompress::Codec],
) -> Vec<Written> {
    use oxbow_segment_writer::key_compact::testing::keyed_batch;
    let part = log.partition(topic, 0).await.expect("partition");
    let mut written = Vec::new();
    for round in first_round..first_round + rounds {
        let codec = codecs[round as usize % codecs.len()];
        for chunk in (0..keys).collect::<Vec<_>>().chunks(per_batch) {
            let recs: Vec<(Vec<u8>, Option<Vec<u8>>)> = chunk
                .iter()
                .map(|k| {
                    let key = format!("key-{k}").into_bytes();
                    let tombstone = round % 2 == 1 && k % 5 == 0;
                    let value = (!tombstone).then(|| format!("{k}@{round}").into_bytes());
                    (key, value)
                })
                .collect();
            let refs: Vec<oxbow_segment_writer::key_compact::testing::KeyValue> = recs
                .iter()
                .map(|(k, v)| (Some(k.as_slice()), v.as_deref()))
                .collect();
            let b = keyed_batch(0, 10_000 + i64::from(round) * 100, &refs, codec);
            let appended = log
                .append(&part, &b, 1 << 20, false, Acks::All)
                .await
                .expect("append");
            for (i, (k, v)) in recs.into_iter().enumerate() {
                written.push((appended.base_offset + i as i64, k, v));
            }
        }
        log.seal_once().await.expect("seal");
    }
    written
}

fn latest_of(written: &[Written]) -> Latest {
    let mut latest = Latest::new();
    for (o, k, v) in written {
        latest.insert(k.clone(), (*o, v.clone()));
    }
    latest
}

/// Reads partition 0 from `from`, decoding every record.
async fn read_records(log: &LogManager, topic: &TopicMetadata, from: i64) -> Vec<Written> {
    let part = log.partition(topic, 0).await.expect("partition");
    let r = log.read(&part, from, 1 << 30, true).await.expect("read");
    oxbow_segment_writer::key_compact::testing::decoded_records(&r.batches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_compaction_keeps_the_latest_value_per_key_at_its_offset() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let log = open(dir.path(), metadata.clone()).await;
    let mut written = produce_keyed(&log, &topic, 0, 6, 40, 7, ALL_CODECS).await;
    let part = log.partition(&topic, 0).await.expect("partition");
    let (_, _, end) = part.offsets().expect("offsets");
    assert_eq!(end, 240);
    let stop = CancellationToken::new();
    let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::ZERO))
        .with_retention(Arc::new(Compacted {
            delete_retention_ms: i64::MAX,
        }));
    let stats = compactor.run_once(&stop).await.expect("round");
    assert!(stats.segments_written >= 1, "{stats:?}");

    let check = |got: Vec<Written>, latest: &Latest| {
        let want: Vec<Written> = {
            let mut v: Vec<_> = latest
                .iter()
                .map(|(k, (o, v))| (*o, k.clone(), v.clone()))
                .collect();
            v.sort();
            v
        };
        assert_eq!(
            got, want,
            "exactly the latest record per key, at its offset"
        );
    };
    let latest = latest_of(&written);
    check(read_records(&log, &topic, 0).await, &latest);
    // Tombstones younger than delete.retention.ms stay as their key's latest.
    assert!(latest.values().any(|(_, v)| v.is_none()));
    // Every offset reads (a fetch in a gap gets the next batch), and the span is unchanged.
    for offset in 0..end {
        let r = log.read(&part, offset, 1, true).await.expect("read");
        let first = r.batches.first().expect("a batch at or after every offset");
        assert!(header(first).last_offset() >= offset);
    }
    let entries = metadata
        .catalog_entries(topic.topic_id, 0, 0, 100)
        .await
        .expect("catalog");
    assert_eq!(entries.first().map(|e| e.base_offset), Some(0));
    assert_eq!(entries.last().map(|e| e.last_offset), Some(end - 1));
    assert!(entries
        .iter()
        .all(|e| e.layout == EntryLayout::SegmentIndex));
    // The segments verify (batches in order, chunks ending where they say).
    for o in objects_in(dir.path()) {
        if o.to_string_lossy().contains("segments/") {
            let body = std::fs::read(&o).expect("segment");
            oxbow_segment_writer::segment::verify(&o.to_string_lossy(), &body).expect("verifies");
        }
    }

    // A second round changes nothing.
    let again = compactor.run_once(&stop).await.expect("round");
    assert_eq!(again.segments_written, 0, "stable: {again:?}");
    check(read_records(&log, &topic, 0).await, &latest);

    // More writes (a producer going on): the newer values replace the older at the next
    // round; data written since is cleaned against the whole log.
    written.extend(produce_keyed(&log, &topic, 6, 2, 25, 7, ALL_CODECS).await);
    compactor.run_once(&stop).await.expect("round");
    let latest = latest_of(&written);
    check(read_records(&log, &topic, 0).await, &latest);

    // Past delete.retention.ms tombstones go too (from 1970 timestamps: at once).
    let mut expiring = Compactor::new(log.clone(), compact_settings(Duration::ZERO))
        .with_retention(Arc::new(Compacted {
            delete_retention_ms: 1,
        }));
    expiring.run_once(&stop).await.expect("round");
    let live: Latest = latest
        .into_iter()
        .filter(|(_, (_, v))| v.is_some())
        .collect();
    check(read_records(&log, &topic, 0).await, &live);
    // The log end never moves; appends go on there.
    let (_, _, end_after) = part.offsets().expect("offsets");
    assert_eq!(end_after, 240 + 50);
}

/// Figure: key compaction's throughput (MB/s rewritten) and read amplification (bytes read
/// / bytes written) on a changelog of `OXBOW_FIGURE_KEYS` keys (default 1 M), 100-byte
/// values in batches of 100 records, uncompressed. Two cleanings through the pure core (in
/// memory, the compactor's two passes: the map from the dirty part, then every run of
/// 64 MiB rewritten): the first of a log where each key was written twice, and a steady
/// state one at Kafka's default `min.cleanable.dirty.ratio` (0.5: as many random updates as
/// the clean log holds). Then one end-to-end round through the compactor (local object
/// store) with `OXBOW_FIGURE_E2E_KEYS` (default 100 k) keys written three times.
/// `cargo test -p oxbow-segment-writer --test compact figure -- --ignored --nocapture`
/// (a debug build: an optimized one is several times faster).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a figure, not a check: run with --ignored --nocapture"]
async fn figure_key_compaction_throughput_and_read_amplification() {
    use oxbow_segment_writer::decompress::Codec;
    use oxbow_segment_writer::key_compact::{
        clean_run, testing::keyed_batch, OffsetMap, RunParams,
    };
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let keys = env("OXBOW_FIGURE_KEYS", 1_000_000);
    let mb = |b: u64| b as f64 / 1e6;
    let value = [b'v'; 100];
    // xorshift: updates of random keys.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let batches_of = |ks: &[u64], first_offset: i64| -> Vec<Bytes> {
        ks.chunks(100)
            .enumerate()
            .map(|(i, c)| {
                let key_bytes: Vec<Vec<u8>> = c
                    .iter()
                    .map(|k| format!("key-{k:010}").into_bytes())
                    .collect();
                let recs: Vec<oxbow_segment_writer::key_compact::testing::KeyValue> = key_bytes
                    .iter()
                    .map(|k| (Some(k.as_slice()), Some(&value[..])))
                    .collect();
                keyed_batch(first_offset + (i as i64) * 100, 0, &recs, Codec::None)
            })
            .collect()
    };
    let clean = |log: &[Bytes], dirty_from: i64, what: &str| -> Vec<Bytes> {
        let t = Instant::now();
        let mut map = OffsetMap::with_budget(64 << 20);
        let mut read: u64 = 0;
        let mut covered = None;
        for b in log.iter().filter(|b| header(b).last_offset() >= dirty_from) {
            read += b.len() as u64;
            let p = map
                .add(std::slice::from_ref(b), dirty_from, 1 << 20)
                .expect("map");
            assert!(!p.full, "64 MiB holds the keys");
            covered = p.covered_to.or(covered);
        }
        let params = RunParams {
            cleaned_to: covered.expect("dirty data"),
            now_ms: 0,
            delete_retention_ms: -1,
            max_decompressed_batch_bytes: 1 << 20,
        };
        let mut out = Vec::new();
        let mut run = Vec::new();
        let mut run_bytes = 0usize;
        let flush = |run: &mut Vec<Bytes>, out: &mut Vec<Bytes>| {
            let c = clean_run(run, &map, params).expect("clean");
            out.extend(c.batches);
            run.clear();
        };
        for b in log {
            read += b.len() as u64;
            run_bytes += b.len();
            run.push(b.clone());
            if run_bytes >= 64 << 20 {
                flush(&mut run, &mut out);
                run_bytes = 0;
            }
        }
        flush(&mut run, &mut out);
        let secs = t.elapsed().as_secs_f64();
        let input: u64 = log.iter().map(|b| b.len() as u64).sum();
        let written: u64 = out.iter().map(|b| b.len() as u64).sum();
        println!(
            "figure key-compaction core, {what}: {} keys, {:.1} MB log → {:.1} MB in {secs:.2} s: \
             {:.1} MB/s rewritten ({:.1} MB/s of log read), read amplification {:.2} \
             ({:.1} MB read / {:.1} MB written), map {} keys",
            keys,
            mb(input),
            mb(written),
            mb(written) / secs,
            mb(read) / secs,
            read as f64 / written as f64,
            mb(read),
            mb(written),
            map.len()
        );
        out
    };
    // First cleaning: every key written twice (in order, then shuffled by stride).
    let mut ks: Vec<u64> = (0..keys).collect();
    ks.extend((0..keys).map(|i| (i * 7_919) % keys));
    let log = batches_of(&ks, 0);
    let compacted = clean(&log, i64::MIN, "first cleaning (2 writes per key)");
    drop(log);
    // Steady state: as many random updates as the clean log holds (dirty ratio 0.5).
    let end = 2 * keys as i64;
    let updates: Vec<u64> = (0..keys).map(|_| rand() % keys).collect();
    let mut log = compacted;
    log.extend(batches_of(&updates, end));
    clean(&log, end, "steady state at dirty ratio 0.5");
    drop(log);

    // One end-to-end round: produce through the log, seal, compact into segments.
    let e2e_keys = env("OXBOW_FIGURE_E2E_KEYS", 100_000) as u32;
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let log = open(dir.path(), metadata.clone()).await;
    produce_keyed(&log, &topic, 0, 3, e2e_keys, 100, &[Codec::None]).await;
    let mut compactor = Compactor::new(
        log.clone(),
        CompactSettings::new(512 << 20, Duration::from_secs(3600), Duration::ZERO),
    )
    .with_retention(Arc::new(Compacted {
        delete_retention_ms: i64::MAX,
    }));
    let t = Instant::now();
    let stats = compactor
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    let secs = t.elapsed().as_secs_f64();
    let written = log
        .compact_metrics
        .segment_bytes_written
        .load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "figure key-compaction end to end (local store, one round): {e2e_keys} keys × 3 writes, \
         {:.1} MB read, {:.1} MB written in {secs:.2} s: {:.1} MB/s rewritten, read \
         amplification {:.2} ({} segments)",
        mb(stats.bytes_read),
        mb(written),
        mb(written) / secs,
        stats.bytes_read as f64 / written.max(1) as f64,
        stats.segments_written
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_racing_key_compaction_never_see_an_older_value_after_a_newer_one() {
    // No delete delay (objects vanish under readers, who look the catalog up again) and a
    // memory tail holding the whole log (swaps drop the originals from it while readers
    // read it; without that, reads from 0 would never see the compaction).
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let store = objects::local(&dir.path().join("objects")).expect("object store");
    let log = LogManager::open(
        LogSettings {
            partition_tail_bytes: 1 << 20,
            ..settings(dir.path())
        },
        metadata.clone(),
        store,
        ReadCache::new(1 << 20),
    )
    .await
    .expect("open log");
    let mut written = produce_keyed(&log, &topic, 0, 2, 30, 7, ALL_CODECS).await;
    let stop = CancellationToken::new();
    let reader = {
        let (log, topic, stop) = (log.clone(), topic.clone(), stop.clone());
        tokio::spawn(async move {
            let mut reads = 0u64;
            while !stop.is_cancelled() {
                let records = read_records(&log, &topic, 0).await;
                let mut newest: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
                let mut previous = -1;
                for (offset, key, _) in records {
                    assert!(offset > previous, "offsets increase");
                    previous = offset;
                    // Offsets order a key's values: the one read must be newer than any
                    // read before it.
                    let seen = newest.insert(key.clone(), offset);
                    assert!(seen.is_none_or(|s| s < offset), "key {key:?} went back");
                }
                reads += 1;
                tokio::task::yield_now().await;
            }
            reads
        })
    };
    let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::ZERO))
        .with_retention(Arc::new(Compacted {
            delete_retention_ms: i64::MAX,
        }));
    for round in 0..10 {
        written.extend(produce_keyed(&log, &topic, 2 + round, 1, 30, 7, ALL_CODECS).await);
        compactor
            .run_once(&CancellationToken::new())
            .await
            .expect("round");
    }
    stop.cancel();
    let reads = tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .expect("the reader stops within a minute")
        .expect("every read was in order");
    assert!(reads > 0);
    // And the result is the latest per key, at its offset.
    let latest = latest_of(&written);
    let mut want: Vec<Written> = latest.into_iter().map(|(k, (o, v))| (o, k, v)).collect();
    want.sort();
    assert_eq!(read_records(&log, &topic, 0).await, want);
}
