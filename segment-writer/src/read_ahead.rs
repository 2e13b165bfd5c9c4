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
//! - *Large ranges.* A range too large for the pool to take whole is read as pieces
//!   ([`crate::read_pieces`]): once cut (by its first whole GET, the reader's or a
//!   prefetch's), the window counts its pieces; missing ones are prefetched in runs of
//!   consecutive pieces, one ranged GET each, every piece checked against its own CRC —
//!   at once when the reader's next piece is missing or the run ends the range, else once
//!   the run is half the window's pieces (a window refilled a piece per GET cost moto, at
//!   ~12.5 GETs/s whatever their size, most of its catch-up rate). Of a whole GET only the
//!   window's pieces are cached. A large range not cut yet at the window's end is
//!   prefetched whole (so its reader does not wait for that GET in turn), and the walk
//!   stops there.
//!
//! Bounded: the window is at most [`READ_AHEAD_BYTES`] and at most a quarter of the
//! scanned pool (so four readers' windows fit before prefetches evict each other; in a
//! pool under 4 MiB, 1 MiB or half the pool); at most
//! [`READ_AHEAD_GETS`] GETs and [`READ_AHEAD_IN_FLIGHT_BYTES`] in flight per broker; when
//! either is taken nothing more is started (the reader is not held up and the store not
//! flooded). Every prefetched range is
//! checked against its catalogue checksum before it is cached or handed to a waiting
//! reader; a range that fails (or a GET that fails) is dropped, and the reader fetches it
//! itself and reports the error.

use crate::object;
use crate::read_pieces::{self, Piece, PieceMaps};
use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use oxbow_cache::ReadCache;
use oxbow_metadata::{CatalogEntry, EntryLayout, Offset};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{oneshot, Semaphore};

/// The window prefetched past a read, at most.
pub const READ_AHEAD_BYTES: u64 = 8 << 20;

/// The window's floor when the scanned pool is small (but at most half the pool).
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

    fn piece(e: &CatalogEntry, p: &Piece) -> Self {
        RangeKey {
            object_key: e.object_key.clone(),
            start: p.start,
            len: p.len,
        }
    }
}

/// What one prefetch fetches, how it is checked and what of it is cached.
enum Fetch {
    /// A range the pool takes whole: checked against its catalogue CRC, cached whole.
    Whole(CatalogEntry),
    /// A large range not cut yet: fetched whole, checked against its catalogue CRC, cut;
    /// its pieces within `keep` bytes of its start cached.
    Cut { entry: CatalogEntry, keep: u64 },
    /// Consecutive pieces of a cut large range, by one GET: each checked against its own
    /// CRC and cached.
    Run {
        entry: CatalogEntry,
        pieces: Vec<Piece>,
    },
}

impl Fetch {
    /// The byte range GET.
    fn key(&self) -> RangeKey {
        match self {
            Fetch::Whole(e) | Fetch::Cut { entry: e, .. } => RangeKey::of(e),
            Fetch::Run { entry, pieces } => RangeKey {
                object_key: entry.object_key.clone(),
                start: pieces.first().map_or(0, |p| p.start),
                len: pieces.iter().map(|p| p.len).sum(),
            },
        }
    }
}

/// Whether a window walk goes on after a range.
enum Walk {
    On,
    Stop,
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
    keys: Vec<RangeKey>,
}

impl Drop for Landed {
    fn drop(&mut self) {
        let mut in_flight = lock(&self.in_flight);
        for k in &self.keys {
            in_flight.remove(k);
        }
    }
}

/// What [`ReadAhead::join_or_claim`] found.
pub enum Joined {
    /// A fetch of the range is in flight: its checked bytes, or `None` if it failed.
    Wait(Pending),
    /// The range is this reader's to fetch.
    Claimed(Claim),
}

impl Joined {
    /// The checked bytes of the fetch waited for, or else what this reader fetches them
    /// under: its claim, or none when the fetch it waited for failed.
    pub async fn settle(self) -> Result<Bytes, Option<Claim>> {
        match self {
            Joined::Wait(pending) => pending.await.ok_or(None),
            Joined::Claimed(claim) => Err(Some(claim)),
        }
    }
}

/// A reader's claim on fetching a range: those waiting for it are answered by
/// [`Claim::land`], or told to read the range themselves if it is dropped unlanded (the
/// GET failed or the reader went away); either way the range leaves the in-flight map.
pub struct Claim {
    tx: Option<oneshot::Sender<Bytes>>,
    _landed: Landed,
}

impl Claim {
    /// Hands the range's checked bytes to the readers waiting for them. Cache them first,
    /// so a reader finds the range in one place or the other.
    pub fn land(mut self, bytes: &Bytes) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(bytes.clone());
        }
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
        let pool = u64::try_from(cache.scanned_capacity_bytes()).unwrap_or(u64::MAX);
        ReadAhead {
            objects,
            cache,
            gets: Arc::new(Semaphore::new(READ_AHEAD_GETS)),
            in_flight_kib: Arc::new(Semaphore::new((READ_AHEAD_IN_FLIGHT_BYTES / KIB) as usize)),
            in_flight: Arc::default(),
            // Never more than half the pool: the window's pieces and the reader's own
            // must fit beside each other.
            window_bytes: (pool / 4)
                .clamp(READ_AHEAD_BYTES_MIN, READ_AHEAD_BYTES)
                .min(pool / 2),
            pieces: Arc::default(),
            fetched: Arc::default(),
        }
    }

    /// Caches a range a reader fetched itself (checked): whole, or, when it is too large
    /// for the pool, cut into pieces of which those from the one holding `from` on, up to
    /// the window, are cached.
    pub fn cache_read(&self, entry: &CatalogEntry, bytes: &Bytes, from: Offset) {
        if large(&self.cache, entry) {
            let cut = self.pieces.remember(&self.cache, entry, bytes);
            read_pieces::cache_pieces(&self.cache, entry, &cut, bytes, from, self.window_bytes);
        } else {
            self.cache.insert_scanned(
                &entry.object_key,
                entry.byte_start,
                entry.byte_len,
                bytes.clone(),
            );
        }
    }

    /// The window's bytes (what a whole GET of a large range leaves cached past the
    /// reader's piece).
    pub fn window_bytes(&self) -> u64 {
        self.window_bytes
    }

    /// A reader is at offset `at` of `current` (one partition's range), and `next` are the
    /// ranges after it, in offset order: start fetching what of them lies within the window
    /// and is neither cached nor being fetched — the pieces of `current` after the reader's
    /// when it is a large range already cut, then the following ranges (a cut large one as
    /// its pieces; one not cut yet is fetched whole and ends the walk).
    pub fn ahead(
        &self,
        at: Offset,
        current: &CatalogEntry,
        next: impl IntoIterator<Item = CatalogEntry>,
    ) {
        let mut budget = self.window_bytes;
        if large(&self.cache, current) {
            // Not cut yet: its reader fetches it whole now and caches the window's pieces.
            let Some(cut) = self.pieces.get(current) else {
                return;
            };
            let mine = read_pieces::piece_at(&cut, at);
            let after = cut.get(mine + 1..).unwrap_or_default();
            if let Walk::Stop = self.want_pieces(current, after, true, &mut budget) {
                return;
            }
        }
        for e in next {
            if !large(&self.cache, &e) {
                if let Walk::Stop = self.want(e, &mut budget) {
                    return;
                }
                continue;
            }
            let Some(cut) = self.pieces.get(&e) else {
                if budget > 0 && !self.busy(&RangeKey::of(&e)) {
                    let _ = self.start(Fetch::Cut {
                        entry: e,
                        keep: budget,
                    });
                }
                return;
            };
            // Nothing counted yet: this range's first piece is the reader's next.
            let next_up = budget == self.window_bytes;
            if let Walk::Stop = self.want_pieces(&e, &cut, next_up, &mut budget) {
                return;
            }
        }
    }

    /// A range the pool takes whole, in a window walk with `budget` bytes left: counted,
    /// and fetched unless it is cached or in flight. Stops the walk when it does not fit
    /// the window or no GET can be started.
    fn want(&self, e: CatalogEntry, budget: &mut u64) -> Walk {
        if e.byte_len > *budget {
            return Walk::Stop;
        }
        *budget -= e.byte_len;
        let key = RangeKey::of(&e);
        if self.busy(&key) || self.start(Fetch::Whole(e)) {
            Walk::On
        } else {
            Walk::Stop
        }
    }

    /// `pieces` (consecutive pieces of `entry`'s cut, in order) in a window walk with
    /// `budget` bytes left: those that fit are counted, and the runs of them neither cached
    /// nor in flight are fetched, a run per GET — at once if it holds the reader's next
    /// piece (`next_up` and the run starts at the first) or ends the range, else once it
    /// is half the window's pieces: a window refilled a piece at a time would cost a GET per piece,
    /// and against a store that charges per request (S3's price, moto's fixed cost per
    /// GET) fewer, larger GETs go further. Stops the walk where the window ends.
    fn want_pieces(
        &self,
        entry: &CatalogEntry,
        pieces: &[Piece],
        next_up: bool,
        budget: &mut u64,
    ) -> Walk {
        let mut fit = 0;
        for p in pieces {
            if p.len > *budget {
                break;
            }
            *budget -= p.len;
            fit += 1;
        }
        let mut i = 0;
        while i < fit {
            let busy = |p: &Piece| self.busy(&RangeKey::piece(entry, p));
            if busy(&pieces[i]) {
                i += 1;
                continue;
            }
            let run_start = i;
            while i < fit && !busy(&pieces[i]) {
                i += 1;
            }
            let run = &pieces[run_start..i];
            let now = (next_up && run_start == 0) || i == pieces.len() || run.len() * 2 >= fit;
            if now
                && !self.start(Fetch::Run {
                    entry: entry.clone(),
                    pieces: run.to_vec(),
                })
            {
                return Walk::Stop;
            }
        }
        if fit < pieces.len() {
            Walk::Stop
        } else {
            Walk::On
        }
    }

    /// Whether a range is cached or being fetched.
    fn busy(&self, key: &RangeKey) -> bool {
        self.cache.contains(&key.object_key, key.start, key.len)
            || lock(&self.in_flight).contains_key(key)
    }

    /// Starts `fetch` if a GET slot and room for its bytes are free (`false` if not): its
    /// ranges (a run's pieces each) are in flight until it lands.
    fn start(&self, fetch: Fetch) -> bool {
        let key = fetch.key();
        let Ok(permit) = self.gets.clone().try_acquire_owned() else {
            return false;
        };
        let kib = key.len.div_ceil(KIB).min(READ_AHEAD_IN_FLIGHT_BYTES / KIB) as u32;
        let Ok(room) = self.in_flight_kib.clone().try_acquire_many_owned(kib) else {
            return false;
        };
        let (tx, rx) = oneshot::channel::<Bytes>();
        let got: Pending = rx.map(Result::ok).boxed().shared();
        let keys: Vec<(RangeKey, Pending)> = match &fetch {
            Fetch::Whole(_) | Fetch::Cut { .. } => vec![(key.clone(), got)],
            Fetch::Run { entry, pieces } => pieces
                .iter()
                .map(|p| {
                    let at = (p.start - key.start) as usize;
                    let len = p.len as usize;
                    let piece: Pending = got
                        .clone()
                        .map(move |b| b.map(|b| b.slice(at..at + len)))
                        .boxed()
                        .shared();
                    (RangeKey::piece(entry, p), piece)
                })
                .collect(),
        };
        let landed = Landed {
            in_flight: self.in_flight.clone(),
            keys: keys.iter().map(|(k, _)| k.clone()).collect(),
        };
        lock(&self.in_flight).extend(keys);
        let (objects, cache, pieces, fetched) = (
            self.objects.clone(),
            self.cache.clone(),
            self.pieces.clone(),
            self.fetched.clone(),
        );
        tokio::spawn(async move {
            let _permits = (permit, room);
            let path = ObjectPath::from(key.object_key.as_str());
            let bytes = match objects
                .get_range(&path, key.start..key.start + key.len)
                .await
            {
                Ok(b) => b,
                Err(err) => {
                    tracing::debug!(object = %key.object_key, error = %err, "read-ahead GET failed");
                    return;
                }
            };
            // Checked, then cached before the waiters are answered and the range leaves the
            // in-flight map, so a reader finds it in one place or the other.
            let checked = match &fetch {
                Fetch::Whole(e) => object::verify_range(e, &bytes).map(|()| {
                    cache.insert_scanned(&key.object_key, key.start, key.len, bytes.clone());
                }),
                Fetch::Cut { entry, keep } => object::verify_range(entry, &bytes).map(|()| {
                    let cut = pieces.remember(&cache, entry, &bytes);
                    read_pieces::cache_pieces(
                        &cache,
                        entry,
                        &cut,
                        &bytes,
                        entry.base_offset,
                        *keep,
                    );
                }),
                Fetch::Run { pieces: run, .. } => {
                    let slice = |p: &Piece| {
                        let at = (p.start - key.start) as usize;
                        bytes.slice(at..at + p.len as usize)
                    };
                    run.iter()
                        .try_for_each(|p| p.verify(&key.object_key, &slice(p)))
                        .map(|()| {
                            // Copied, so an evicted piece frees its memory rather
                            // than pinning the run's buffer.
                            for p in run {
                                let piece = Bytes::copy_from_slice(&slice(p));
                                cache.insert_scanned(&key.object_key, p.start, p.len, piece);
                            }
                        })
                }
            };
            if checked.is_err() {
                tracing::debug!(object = %key.object_key, "read-ahead range failed its checksum; dropped");
                return;
            }
            fetched.fetch_add(1, Ordering::Relaxed);
            let _ = tx.send(bytes);
            drop(landed);
        });
        true
    }

    /// A reader about to GET `entry`'s range itself: waits for a fetch of it in flight
    /// (a prefetch or another reader's), or claims the range so readers coming after wait
    /// for this one's GET instead of sending their own (groups reading the same cold
    /// range at once, as under fan-out, send one GET).
    pub fn join_or_claim(&self, entry: &CatalogEntry) -> Joined {
        self.join_or_claim_key(RangeKey::of(entry))
    }

    /// [`Self::join_or_claim`] for piece `p` of `entry`'s range.
    pub fn join_or_claim_piece(&self, entry: &CatalogEntry, p: &Piece) -> Joined {
        self.join_or_claim_key(RangeKey::piece(entry, p))
    }

    fn join_or_claim_key(&self, key: RangeKey) -> Joined {
        let mut in_flight = lock(&self.in_flight);
        if let Some(pending) = in_flight.get(&key) {
            return Joined::Wait(pending.clone());
        }
        let (tx, rx) = oneshot::channel::<Bytes>();
        in_flight.insert(key.clone(), rx.map(Result::ok).boxed().shared());
        Joined::Claimed(Claim {
            tx: Some(tx),
            _landed: Landed {
                in_flight: self.in_flight.clone(),
                keys: vec![key],
            },
        })
    }

    /// The prefetch of `entry`'s range, if one is in flight: await it for the checked
    /// bytes (`None`: it failed, read the range yourself).
    pub fn in_flight(&self, entry: &CatalogEntry) -> Option<Pending> {
        lock(&self.in_flight).get(&RangeKey::of(entry)).cloned()
    }

    /// The prefetch of piece `p` of `entry`'s range, if one is in flight (as
    /// [`Self::in_flight`]).
    pub fn piece_in_flight(&self, entry: &CatalogEntry, p: &Piece) -> Option<Pending> {
        lock(&self.in_flight)
            .get(&RangeKey::piece(entry, p))
            .cloned()
    }
}

/// Whether `e` is a range of batches too large for the *scanned* pool whole.
fn large(cache: &ReadCache, e: &CatalogEntry) -> bool {
    e.layout == EntryLayout::Batches && PieceMaps::wants(cache, e)
}

#[cfg(test)]
mod tests;
