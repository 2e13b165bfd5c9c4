//! Read-ahead for sequential readers of sealed data (issue 17): a reader of catalogued
//! data keeps a window of the ranges that follow the one it reads, in the same partition,
//! fetched or being fetched into the cache's *scanned* pool, so a catch-up consumer reads
//! on from memory instead of waiting for one GET per range in turn.
//!
//! - *A sliding window.* Every catalogued range read (hit or miss) asks for the window
//!   after it ([`ReadAhead::ahead`]); ranges already cached or already being fetched are
//!   skipped, so a reader that keeps up with its prefetches costs a few lookups per read.
//! - *Parallel GETs.* Each range is its own GET, at most [`READ_AHEAD_GETS`] at once per
//!   broker: against S3 a GET is a round trip of tens of milliseconds, so ranges fetched
//!   one after another cap a reader at a range per round trip.
//! - *No GET twice.* A reader whose range is being prefetched waits for that GET
//!   ([`ReadAhead::in_flight`]) instead of sending its own.
//!
//! - *Large ranges.* A range too large for the pool to take whole is cached as pieces
//!   ([`crate::read_pieces`]) when a reader (or a prefetch within the window) fetches it.
//!   One larger than the window is not prefetched: measured on moto with 64 MiB objects
//!   (ranges of ~11 MiB, six partitions read at once), prefetching the next one anyway
//!   overfilled the pool, evicted pieces unread and added a third more GETs.
//!
//! Bounded: the window is at most [`READ_AHEAD_BYTES`] and at most a quarter of the
//! scanned pool (so four readers' windows fit before prefetches evict each other); at most
//! [`READ_AHEAD_GETS`] GETs and [`READ_AHEAD_IN_FLIGHT_BYTES`] in flight per broker; when
//! either is taken nothing more is started (the reader is not held up and the store not
//! flooded). Every prefetched range is
//! checked against its catalogue checksum before it is cached or handed to a waiting
//! reader; a range that fails (or a GET that fails) is dropped, and the reader fetches it
//! itself and reports the error.

use crate::object;
use crate::read_pieces::PieceMaps;
use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use oxbow_cache::ReadCache;
use oxbow_metadata::{CatalogEntry, EntryLayout};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{oneshot, Semaphore};

/// The window prefetched past a read, at most.
pub const READ_AHEAD_BYTES: u64 = 8 << 20;

/// The window's floor when the scanned pool is small.
const READ_AHEAD_BYTES_MIN: u64 = 1 << 20;

/// Prefetch GETs in flight at once per broker, at most.
pub const READ_AHEAD_GETS: usize = 8;

/// Bytes of prefetch GETs in flight at once per broker, at most (a range larger than this
/// takes all of it).
pub const READ_AHEAD_IN_FLIGHT_BYTES: u64 = 64 << 20;

/// The unit of [`READ_AHEAD_IN_FLIGHT_BYTES`]' semaphore.
const KIB: u64 = 1 << 10;

/// A prefetch in flight: its checked bytes, or `None` if it failed.
pub type Pending = Shared<BoxFuture<'static, Option<Bytes>>>;

/// One object byte range, as prefetched.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct RangeKey {
    object_key: String,
    start: u64,
    len: u64,
}

impl RangeKey {
    fn of(e: &CatalogEntry) -> Self {
        RangeKey {
            object_key: e.object_key.clone(),
            start: e.byte_start,
            len: e.byte_len,
        }
    }
}

type InFlight = Arc<Mutex<HashMap<RangeKey, Pending>>>;

fn lock(m: &Mutex<HashMap<RangeKey, Pending>>) -> MutexGuard<'_, HashMap<RangeKey, Pending>> {
    // No code under this lock can panic midway (map inserts and removes), so a poisoned
    // lock still holds a consistent map.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes a finished (or abandoned) prefetch out of the in-flight map, even if its task
/// panicked, so readers never wait on a range nobody fetches.
struct Landed {
    in_flight: InFlight,
    key: RangeKey,
}

impl Drop for Landed {
    fn drop(&mut self) {
        lock(&self.in_flight).remove(&self.key);
    }
}

/// The broker's read-ahead: where to fetch from, where to put it, and its bounds.
pub struct ReadAhead {
    objects: Arc<dyn ObjectStore>,
    cache: ReadCache,
    gets: Arc<Semaphore>,
    /// [`READ_AHEAD_IN_FLIGHT_BYTES`] in KiB.
    in_flight_kib: Arc<Semaphore>,
    in_flight: InFlight,
    window_bytes: u64,
    /// The cuts of large ranges cached as pieces (by prefetches and by readers).
    pub(crate) pieces: Arc<PieceMaps>,
    /// Ranges prefetched and cached.
    pub fetched: Arc<AtomicU64>,
}

impl ReadAhead {
    pub fn new(objects: Arc<dyn ObjectStore>, cache: ReadCache) -> Self {
        let quarter = u64::try_from(cache.scanned_capacity_bytes() / 4).unwrap_or(u64::MAX);
        ReadAhead {
            objects,
            cache,
            gets: Arc::new(Semaphore::new(READ_AHEAD_GETS)),
            in_flight_kib: Arc::new(Semaphore::new((READ_AHEAD_IN_FLIGHT_BYTES / KIB) as usize)),
            in_flight: Arc::default(),
            window_bytes: quarter.clamp(READ_AHEAD_BYTES_MIN, READ_AHEAD_BYTES),
            pieces: Arc::default(),
            fetched: Arc::default(),
        }
    }

    /// Caches a range a reader fetched itself (checked): whole, or as pieces when it is
    /// too large for the pool.
    pub fn cache_read(&self, entry: &CatalogEntry, bytes: &Bytes) {
        cache_range(&self.cache, &self.pieces, entry, bytes);
    }

    /// Whether `entry`'s range is cached: whole, or as pieces that are all still there.
    fn cached(&self, e: &CatalogEntry) -> bool {
        if large(&self.cache, e) {
            return self.pieces.get(e).is_some_and(|cut| {
                cut.iter()
                    .all(|p| self.cache.contains(&e.object_key, p.start, p.len))
            });
        }
        self.cache.contains(&e.object_key, e.byte_start, e.byte_len)
    }

    /// A reader read the range before `next` (one partition's ranges, in offset order):
    /// start fetching those within the window that are neither cached nor being fetched.
    pub fn ahead(&self, next: impl IntoIterator<Item = CatalogEntry>) {
        let mut budget = self.window_bytes;
        for e in next {
            if e.byte_len > budget {
                return;
            }
            budget = budget.saturating_sub(e.byte_len);
            if self.cached(&e) {
                continue;
            }
            let key = RangeKey::of(&e);
            let mut in_flight = lock(&self.in_flight);
            if in_flight.contains_key(&key) {
                continue;
            }
            let Ok(permit) = self.gets.clone().try_acquire_owned() else {
                return;
            };
            let kib = e
                .byte_len
                .div_ceil(KIB)
                .min(READ_AHEAD_IN_FLIGHT_BYTES / KIB) as u32;
            let Ok(room) = self.in_flight_kib.clone().try_acquire_many_owned(kib) else {
                return;
            };
            let (tx, rx) = oneshot::channel::<Bytes>();
            in_flight.insert(key.clone(), rx.map(Result::ok).boxed().shared());
            drop(in_flight);
            let landed = Landed {
                in_flight: self.in_flight.clone(),
                key,
            };
            let (objects, cache, pieces, fetched) = (
                self.objects.clone(),
                self.cache.clone(),
                self.pieces.clone(),
                self.fetched.clone(),
            );
            tokio::spawn(async move {
                let _permits = (permit, room);
                let path = ObjectPath::from(e.object_key.as_str());
                let bytes = match objects
                    .get_range(&path, e.byte_start..e.byte_start + e.byte_len)
                    .await
                {
                    Ok(b) => b,
                    Err(err) => {
                        tracing::debug!(object = %e.object_key, error = %err, "read-ahead GET failed");
                        return;
                    }
                };
                if object::verify_range(&e, &bytes).is_err() {
                    tracing::debug!(object = %e.object_key, "read-ahead range failed its checksum; dropped");
                    return;
                }
                // Cached before the waiters are answered and the range leaves the in-flight
                // map, so a reader finds it in one place or the other.
                cache_range(&cache, &pieces, &e, &bytes);
                fetched.fetch_add(1, Ordering::Relaxed);
                let _ = tx.send(bytes);
                drop(landed);
            });
        }
    }

    /// The prefetch of `entry`'s range, if one is in flight: await it for the checked
    /// bytes (`None`: it failed, read the range yourself).
    pub fn in_flight(&self, entry: &CatalogEntry) -> Option<Pending> {
        lock(&self.in_flight).get(&RangeKey::of(entry)).cloned()
    }
}

/// Whether `e` is a range of batches too large for the *scanned* pool whole.
fn large(cache: &ReadCache, e: &CatalogEntry) -> bool {
    e.layout == EntryLayout::Batches && PieceMaps::wants(cache, e)
}

/// Caches a checked range in the *scanned* pool: whole, or as pieces when too large.
fn cache_range(cache: &ReadCache, pieces: &PieceMaps, e: &CatalogEntry, bytes: &Bytes) {
    if large(cache, e) {
        pieces.cache(cache, e, bytes);
    } else {
        cache.insert_scanned(&e.object_key, e.byte_start, e.byte_len, bytes.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::PutPayload;
    use oxbow_metadata::TopicId;

    fn entry(key: &str, start: u64, bytes: &[u8]) -> CatalogEntry {
        CatalogEntry {
            topic_id: TopicId(uuid::Uuid::from_u128(1)),
            partition: 0,
            base_offset: i64::try_from(start).expect("small"),
            last_offset: i64::try_from(start).expect("small"),
            max_timestamp_ms: 0,
            object_key: key.into(),
            byte_start: start,
            byte_len: bytes.len() as u64,
            crc32c: crc32c::crc32c(bytes),
            leader_epoch: 0,
            layout: EntryLayout::Batches,
            txn: None,
        }
    }

    async fn store_with(data: &[u8]) -> Arc<dyn ObjectStore> {
        let store = InMemory::new();
        store
            .put(&ObjectPath::from("o"), PutPayload::from(data.to_vec()))
            .await
            .expect("put");
        Arc::new(store)
    }

    #[tokio::test]
    async fn the_window_is_fetched_once_and_a_waiting_reader_gets_the_same_bytes() {
        let data: Vec<u8> = (0..64u32 << 10).map(|i| (i % 251) as u8).collect();
        let entries: Vec<CatalogEntry> = (0..8u64)
            .map(|i| {
                entry(
                    "o",
                    i * 8192,
                    &data[(i * 8192) as usize..((i + 1) * 8192) as usize],
                )
            })
            .collect();
        let ahead = ReadAhead::new(store_with(&data).await, ReadCache::new(64 << 20));
        ahead.ahead(entries.iter().cloned());
        let started = entries
            .iter()
            .filter(|e| ahead.in_flight(e).is_some())
            .count();
        assert_eq!(started, 8, "the window's ranges are fetched side by side");
        // Asking again while the GETs run starts nothing new.
        ahead.ahead(entries.iter().cloned());
        for e in &entries {
            if let Some(pending) = ahead.in_flight(e) {
                let got = pending.await.expect("prefetched");
                assert_eq!(
                    &got[..],
                    &data[e.byte_start as usize..][..e.byte_len as usize]
                );
            }
        }
        // Let the tasks finish.
        while entries.iter().any(|e| ahead.in_flight(e).is_some()) {
            tokio::task::yield_now().await;
        }
        assert_eq!(ahead.fetched.load(Ordering::Relaxed), 8, "each range once");
        for e in &entries {
            assert!(ahead.cache.contains("o", e.byte_start, e.byte_len));
        }
        ahead.ahead(entries.iter().cloned());
        assert!(entries.iter().all(|e| ahead.in_flight(e).is_none()));
        assert_eq!(
            ahead.fetched.load(Ordering::Relaxed),
            8,
            "cached ranges are not fetched again"
        );
    }

    #[tokio::test]
    async fn a_range_failing_its_checksum_is_neither_cached_nor_handed_out() {
        let data = vec![7u8; 4096];
        let mut bad = entry("o", 0, &data);
        bad.crc32c ^= 1;
        let ahead = ReadAhead::new(store_with(&data).await, ReadCache::new(64 << 20));
        ahead.ahead([bad.clone()]);
        if let Some(pending) = ahead.in_flight(&bad) {
            assert!(pending.await.is_none());
        }
        while ahead.in_flight(&bad).is_some() {
            tokio::task::yield_now().await;
        }
        assert!(!ahead.cache.contains("o", 0, 4096));
        assert_eq!(ahead.fetched.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn the_window_and_the_get_slots_bound_what_is_started() {
        let data = vec![1u8; 4 << 20];
        // 1 MiB window (a 16 MiB cache: 4 MiB scanned pool, a quarter of it).
        let ahead = ReadAhead::new(store_with(&data).await, ReadCache::new(16 << 20));
        assert_eq!(ahead.window_bytes, 1 << 20);
        let entries: Vec<CatalogEntry> = (0..16u64)
            .map(|i| entry("o", i * (256 << 10), &data[..256 << 10]))
            .collect();
        ahead.ahead(entries.iter().cloned());
        let started = entries
            .iter()
            .filter(|e| ahead.in_flight(e).is_some())
            .count();
        assert!(
            started <= 4,
            "{started} ranges of 256 KiB started in a 1 MiB window"
        );
        let big = ReadAhead::new(store_with(&data).await, ReadCache::new(1 << 30));
        big.ahead(entries.iter().cloned());
        let started = entries
            .iter()
            .filter(|e| big.in_flight(e).is_some())
            .count();
        assert!(started <= READ_AHEAD_GETS, "{started} GETs at once");
    }

    #[tokio::test]
    async fn a_range_too_large_to_cache_whole_is_cached_as_pieces_but_not_prefetched() {
        let mut data = Vec::new();
        while data.len() < 3 << 20 {
            let mut b = crate::batch::testing::make_batch(60, 1_000);
            let base = (data.len() as i64) * 1000;
            b[..8].copy_from_slice(&base.to_be_bytes());
            data.extend_from_slice(&b);
        }
        let e = entry("o", 0, &data);
        // 16 MiB: a 4 MiB scanned pool, which takes ranges of up to 2 MiB whole; a 1 MiB
        // window.
        let cache = ReadCache::new(16 << 20);
        assert!(large(&cache, &e));
        let ahead = ReadAhead::new(store_with(&data).await, cache);
        ahead.ahead([e.clone()]);
        assert!(ahead.in_flight(&e).is_none(), "larger than the window");
        // A reader's own read of it is cached as pieces.
        ahead.cache_read(&e, &Bytes::from(data.clone()));
        let cut = ahead.pieces.get(&e).expect("cut");
        assert!(cut.len() >= 3);
        assert!(ahead.cached(&e));
    }
}
