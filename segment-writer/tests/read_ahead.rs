//! Read-ahead (issue 17): a reader catching up on sealed data that misses the cache gets
//! the ranges after it prefetched, so it reads on from the cache instead of one GET per
//! range in turn; and what it scans does not evict what the sealer cached for the tail.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use oxbow_cache::ReadCache;
use oxbow_metadata::clock::{OsRng, SystemClock};
use oxbow_metadata::MetadataStore;
use oxbow_segment_writer::batch::testing::make_batch;
use oxbow_segment_writer::faulty_store::{FaultyObjectStore, StoreFaults};
use oxbow_segment_writer::{objects, Acks, AppendPolicy, LogManager};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

mod common;

use common::{produce, settings, topic, ROUNDS};

/// A log of `ROUNDS` sealed objects in `dir`, then its WAL removed: what a broker with a
/// cold cache (another one, or this one restarted) reads from the object store alone.
async fn sealed(dir: &std::path::Path) -> (Arc<dyn MetadataStore>, oxbow_metadata::TopicMetadata) {
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::open(&dir.join("meta.redb")).expect("meta"));
    let topic = topic(&metadata).await;
    {
        let log = common::open(dir, metadata.clone()).await;
        produce(&log, &topic, 0, ROUNDS).await;
    }
    (metadata, topic)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_reader_reads_on_from_prefetched_ranges() {
    let dir = tempfile::tempdir().expect("tmp");
    let (metadata, topic) = sealed(dir.path()).await;
    // A broker with a cold cache (another one, or this one restarted).
    std::fs::remove_dir_all(dir.path().join("wal")).expect("clear the WAL");
    let store = objects::local(&dir.path().join("objects")).expect("store");
    let log = LogManager::open(
        settings(dir.path()),
        metadata,
        store,
        ReadCache::new(64 << 20),
    )
    .await
    .expect("open");
    let p = log.partition(&topic, 0).await.expect("p0");
    let end = p.offsets().expect("offsets").2;
    // One small fetch at a time from the start, as a consumer catching up does.
    let mut next = 0;
    let mut first = true;
    while next < end {
        let r = log.read(&p, next, 1, true).await.expect("read");
        let last = r.batches.last().expect("a batch");
        let h = oxbow_segment_writer::batch::peek_header(last)
            .expect("header")
            .expect("whole");
        next = h.last_offset() + 1;
        if first {
            // The prefetch runs beside the reader: let it land.
            first = false;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    let gets = log.metrics.object_reads.load(Ordering::Relaxed);
    let hits = log.metrics.cache_hits.load(Ordering::Relaxed);
    assert!(
        gets * 4 <= ROUNDS as u64,
        "{ROUNDS} ranges read with {gets} GETs of the reader's own ({hits} cache hits)"
    );
    assert!(log.read_ahead_fetched() > 0);
}

/// Against a store with a round trip per GET (as S3 has), a catch-up reader's ranges are
/// each fetched once — by read-ahead or by the reader, never both — and the reader waits
/// for a prefetch in flight instead of sending its own GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_slow_store_each_range_is_fetched_once() {
    let dir = tempfile::tempdir().expect("tmp");
    let (metadata, topic) = sealed(dir.path()).await;
    std::fs::remove_dir_all(dir.path().join("wal")).expect("clear the WAL");
    let slow = FaultyObjectStore::new(
        objects::local(&dir.path().join("objects")).expect("store"),
        Arc::new(SystemClock),
        Arc::new(OsRng),
    );
    let log = LogManager::open(
        settings(dir.path()),
        metadata,
        slow.clone(),
        ReadCache::new(64 << 20),
    )
    .await
    .expect("open");
    slow.set_faults(StoreFaults {
        latency_max: Duration::from_millis(40),
        ..StoreFaults::default()
    });
    let p = log.partition(&topic, 0).await.expect("p0");
    let end = p.offsets().expect("offsets").2;
    let mut next = 0;
    while next < end {
        let r = log.read(&p, next, 1, true).await.expect("read");
        let last = r.batches.last().expect("a batch");
        let h = oxbow_segment_writer::batch::peek_header(last)
            .expect("header")
            .expect("whole");
        next = h.last_offset() + 1;
    }
    // Prefetches past the reader may still be landing.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let own = log.metrics.object_reads.load(Ordering::Relaxed);
    let prefetched = log.read_ahead_fetched();
    let gets = slow.counts.delayed.load(Ordering::Relaxed);
    assert!(prefetched > 0, "read-ahead fetched nothing");
    assert_eq!(
        own + prefetched,
        gets,
        "every GET is the reader's own or a prefetch ({own} + {prefetched} vs {gets})"
    );
    assert!(
        gets <= ROUNDS as u64,
        "{ROUNDS} ranges, {gets} GETs: some range was fetched twice"
    );
}

/// A range larger than the cache takes whole (a lagging sealer's big object) is fetched
/// once and read on from its cached pieces, not fetched again for every small fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_too_large_to_cache_whole_is_fetched_once_for_many_small_fetches() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::open(&dir.path().join("meta.redb")).expect("meta"));
    let topic = topic(&metadata).await;
    let batches = 550;
    {
        let log = common::open(dir.path(), metadata.clone()).await;
        let part = log.partition(&topic, 0).await.expect("p0");
        for i in 0..batches {
            log.append(
                &part,
                &make_batch(60, 1_000 + i),
                &AppendPolicy::of(&topic.configs),
                Acks::All,
            )
            .await
            .expect("append");
        }
        log.seal_once().await.expect("one object, one range");
    }
    std::fs::remove_dir_all(dir.path().join("wal")).expect("clear the WAL");
    // 2 MiB: a 512 KiB scanned pool, which takes ranges of up to 256 KiB whole.
    let log = LogManager::open(
        settings(dir.path()),
        metadata,
        objects::local(&dir.path().join("objects")).expect("store"),
        ReadCache::new(2 << 20),
    )
    .await
    .expect("open");
    let p = log.partition(&topic, 0).await.expect("p0");
    let end = p.offsets().expect("offsets").2;
    assert_eq!(end, batches * 60);
    let mut next = 0;
    let mut fetches = 0;
    while next < end {
        let r = log.read(&p, next, 16 << 10, true).await.expect("read");
        let last = r.batches.last().expect("a batch");
        let h = oxbow_segment_writer::batch::peek_header(last)
            .expect("header")
            .expect("whole");
        assert_eq!(
            oxbow_segment_writer::batch::peek_header(&r.batches[0])
                .expect("header")
                .expect("whole")
                .base_offset,
            next,
            "reads on where the last one ended"
        );
        next = h.last_offset() + 1;
        fetches += 1;
    }
    let gets = log.metrics.object_reads.load(Ordering::Relaxed);
    assert!(fetches > 10, "{fetches} fetches");
    assert_eq!(
        gets, 1,
        "{fetches} small fetches of one large range took {gets} GETs"
    );
}
