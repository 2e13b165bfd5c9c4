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

/// [`sealed`], then opened with a cold cache over a store that takes up to 40 ms per GET
/// (a round trip, as S3 has); the store is returned for its counts.
async fn cold_over_a_slow_store(
    dir: &std::path::Path,
) -> (
    Arc<LogManager>,
    Arc<FaultyObjectStore>,
    oxbow_metadata::TopicMetadata,
) {
    let (metadata, topic) = sealed(dir).await;
    std::fs::remove_dir_all(dir.join("wal")).expect("clear the WAL");
    let slow = FaultyObjectStore::new(
        objects::local(&dir.join("objects")).expect("store"),
        Arc::new(SystemClock),
        Arc::new(OsRng),
    );
    let log = LogManager::open(
        settings(dir),
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
    (log, slow, topic)
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
    let (log, slow, topic) = cold_over_a_slow_store(dir.path()).await;
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

/// Readers of the same cold range at once (consumer groups fanning out over data they all
/// lag behind) send one GET between them: the first claims the range, the others wait for
/// its bytes. Each reader sent its own before (five GETs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_of_the_same_cold_range_at_once_send_one_get() {
    let dir = tempfile::tempdir().expect("tmp");
    let (log, _slow, topic) = cold_over_a_slow_store(dir.path()).await;
    let p = log.partition(&topic, 0).await.expect("p0");
    let reads = (0..5).map(|_| log.read(&p, 0, 1, true));
    let got = futures::future::join_all(reads).await;
    let first = got[0].as_ref().expect("read").batches.clone();
    assert!(!first.is_empty());
    for r in &got {
        assert_eq!(
            r.as_ref().expect("read").batches,
            first,
            "every reader the same batches"
        );
    }
    let own = log.metrics.object_reads.load(Ordering::Relaxed);
    assert_eq!(own, 1, "five readers of one range, {own} GETs of their own");
}

/// A range larger than the cache takes whole (a lagging sealer's big object) is fetched
/// once and read on from its cached pieces, not fetched again for every small fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_too_large_to_cache_whole_is_fetched_once_for_many_small_fetches() {
    let dir = tempfile::tempdir().expect("tmp");
    let batches = 550;
    let (metadata, topic) = one_large_range(dir.path(), batches).await;
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

/// The ranged GETs a store answered: object key, start and length of each.
#[derive(Debug, Default)]
struct Gets(std::sync::Mutex<Vec<(String, u64, u64)>>);

impl Gets {
    fn all(&self) -> Vec<(String, u64, u64)> {
        self.0.lock().expect("not poisoned").clone()
    }
}

#[async_trait::async_trait]
impl common::GetHook for Arc<Gets> {
    async fn before(
        &self,
        location: &object_store::path::Path,
        options: &object_store::GetOptions,
    ) {
        if let Some(object_store::GetRange::Bounded(r)) = &options.range {
            self.0.lock().expect("not poisoned").push((
                location.to_string(),
                r.start,
                r.end - r.start,
            ));
        }
    }
}

/// A log whose partition 0 is one sealed range of `batches` batches of 60 records (about
/// 540 bytes each), its WAL removed.
async fn one_large_range(
    dir: &std::path::Path,
    batches: i64,
) -> (Arc<dyn MetadataStore>, oxbow_metadata::TopicMetadata) {
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::open(&dir.join("meta.redb")).expect("meta"));
    let topic = topic(&metadata).await;
    {
        let log = common::open(dir, metadata.clone()).await;
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
    std::fs::remove_dir_all(dir.join("wal")).expect("clear the WAL");
    (metadata, topic)
}

/// Reads partition 0 from the start to `end`, `bytes` at a time, as a consumer catching up
/// does; each read must go on where the last one ended.
async fn read_through(
    log: &LogManager,
    p: &oxbow_segment_writer::Partition,
    end: i64,
    bytes: usize,
) -> oxbow_segment_writer::Result<usize> {
    let (mut next, mut fetches) = (0, 0);
    while next < end {
        let r = log.read(p, next, bytes, true).await?;
        let first = oxbow_segment_writer::batch::peek_header(&r.batches[0])
            .expect("header")
            .expect("whole");
        assert_eq!(first.base_offset, next, "reads on where the last one ended");
        let last = r.batches.last().expect("a batch");
        let h = oxbow_segment_writer::batch::peek_header(last)
            .expect("header")
            .expect("whole");
        next = h.last_offset() + 1;
        fetches += 1;
    }
    Ok(fetches)
}

/// A large range read by many small fetches through a pool that holds two of its pieces:
/// the range is fetched whole once (to be cut and checked against its catalogue CRC), then
/// every piece past the window alone — never the whole range again, never a piece twice —
/// and the cache stays within its budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_range_is_fetched_whole_once_then_piece_by_piece() {
    let dir = tempfile::tempdir().expect("tmp");
    let batches = 1_800;
    let (metadata, topic) = one_large_range(dir.path(), batches).await;
    let gets = Arc::new(Gets::default());
    // A store that records every ranged GET it passes on.
    let store = Arc::new(common::HookedStore {
        inner: objects::local(&dir.path().join("objects")).expect("store"),
        hook: gets.clone(),
    });
    // 2 MiB: a 512 KiB scanned pool, which takes ranges of up to 256 KiB whole: pieces of
    // 256 KiB, a window of one piece.
    let cache = ReadCache::new(2 << 20);
    let log = LogManager::open(settings(dir.path()), metadata, store, cache.clone())
        .await
        .expect("open");
    let p = log.partition(&topic, 0).await.expect("p0");
    let end = p.offsets().expect("offsets").2;
    assert_eq!(end, batches * 60);
    let fetches = read_through(&log, &p, end, 16 << 10).await.expect("read");
    // Prefetches past the reader may still be landing.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let all = gets.all();
    let range = all.iter().map(|g| g.2).max().expect("some GET");
    assert!(range > 800 << 10, "one range of {range} bytes");
    let whole = all.iter().filter(|g| g.2 == range).count();
    assert_eq!(
        whole, 1,
        "{fetches} fetches: the whole range GET {whole} times: {all:?}"
    );
    let mut pieces: Vec<_> = all.iter().filter(|g| g.2 < range).collect();
    assert!(pieces.len() >= 2, "pieces fetched alone: {all:?}");
    assert!(pieces.iter().all(|g| g.2 <= 256 << 10), "{all:?}");
    let n = pieces.len();
    pieces.sort();
    pieces.dedup();
    assert_eq!(pieces.len(), n, "a piece fetched twice: {all:?}");
    let fetched: u64 = all.iter().map(|g| g.2).sum();
    assert!(
        fetched <= 2 * range,
        "{fetched} bytes fetched for a range of {range}"
    );
    assert!(cache.usage_bytes() <= 2 << 20);
}

/// A piece that fails its CRC (the object changed under the cut) is never served: the
/// reader reads its range whole again, checked against the catalogue's CRC, which fails
/// too, so the read is an error; once the object is whole again, reads go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piece_failing_its_crc_is_never_served() {
    let dir = tempfile::tempdir().expect("tmp");
    let batches = 1_800;
    let (metadata, topic) = one_large_range(dir.path(), batches).await;
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
    // The first read cuts the range.
    log.read(&p, 0, 16 << 10, true).await.expect("first read");
    // Flip one byte of every later piece in the object file (same length, same key).
    let file = walk_files(&dir.path().join("objects"))
        .into_iter()
        .find(|f| f.extension().is_some_and(|e| e == "oxb"))
        .expect("the sealed object");
    let good = std::fs::read(&file).expect("read object");
    let mut bad = good.clone();
    for at in (good.len() / 2..good.len() - 64).step_by(64 << 10) {
        bad[at] ^= 0xff;
    }
    std::fs::write(&file, &bad).expect("corrupt");
    let failures = log.metrics.checksum_failures.load(Ordering::Relaxed);
    let err = read_through(&log, &p, end, 16 << 10)
        .await
        .expect_err("corrupt bytes are not served");
    assert!(
        matches!(err, oxbow_segment_writer::Error::ChecksumMismatch { .. }),
        "{err}"
    );
    assert!(log.metrics.checksum_failures.load(Ordering::Relaxed) > failures);
    std::fs::write(&file, &good).expect("restore");
    read_through(&log, &p, end, 16 << 10)
        .await
        .expect("reads go on from the restored object");
}

fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("dir").flatten() {
        let path = e.path();
        if path.is_dir() {
            out.extend(walk_files(&path));
        } else {
            out.push(path);
        }
    }
    out
}
