//! Read-ahead (issue 17): a reader catching up on sealed data that misses the cache gets
//! the ranges after it prefetched, so it reads on from the cache instead of one GET per
//! range in turn; and what it scans does not evict what the sealer cached for the tail.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use oxbow_cache::ReadCache;
use oxbow_metadata::MetadataStore;
use oxbow_segment_writer::{objects, LogManager};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

mod common;

use common::{produce, settings, topic, ROUNDS};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_reader_reads_on_from_prefetched_ranges() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::open(&dir.path().join("meta.redb")).expect("meta"));
    let topic = topic(&metadata).await;
    {
        let log = common::open(dir.path(), metadata.clone()).await;
        produce(&log, &topic, 0, ROUNDS).await;
    }
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
