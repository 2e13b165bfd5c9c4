//! Catalogued ranges too large for the read cache's *scanned* pool, read as pieces
//! (issue 17).
//!
//! A sealer that lags (a busy broker, a slow store) writes objects of up to 64 MiB, so one
//! partition's range in an object can be ten or more MiB — more than the *scanned* pool
//! takes in one value (half a shard, `oxbow_cache`). Such a range, once fetched whole and
//! checked against its catalogue CRC, is cut at batch boundaries into pieces of about
//! [`PIECE_BYTES`], and the cut is remembered here with each piece's own CRC-32C (summed
//! from the checked bytes). From then on a piece is a range of its own: read from the cache
//! (copied there, so an evicted piece frees its memory), or fetched by a ranged GET (alone,
//! or with its missing neighbours in one run) and checked against its CRC. Only the pieces
//! a reader is about to read are cached: the one holding its offset and those in its
//! read-ahead window (`crate::read_ahead`), which prefetches them.
//!
//! Why not cache every piece of a range on its first read, as at first: six partitions'
//! 11 MiB ranges overfilled the 64 MiB pool, the LRU kept the pieces just read and evicted
//! the unread ones, and every evicted piece sent its reader back to a GET of the whole
//! range (measured on the embedded default: 3.9 GB read from files to serve 256 MiB).
//!
//! Bounded: at most [`PIECE_MAPS_MAX`] ranges' cuts are remembered (the oldest forgotten
//! first; a forgotten cut costs one whole-range GET to learn again); the pieces themselves
//! live in, and are evicted by, the cache.

use crate::batch;
use bytes::Bytes;
use oxbow_cache::ReadCache;
use oxbow_metadata::{CatalogEntry, Offset};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// A piece's size, at most (or the largest range the pool takes, if less; a batch is never
/// split, and one larger than a piece is a piece alone).
pub const PIECE_BYTES: usize = 1 << 20;

/// Ranges whose cuts are remembered, at most.
pub const PIECE_MAPS_MAX: usize = 4096;

/// One piece of a large range: its offsets, where its bytes are in the object, and their
/// CRC-32C (of bytes that passed the range's catalogue CRC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub first_offset: Offset,
    pub last_offset: Offset,
    pub start: u64,
    pub len: u64,
    pub crc32c: u32,
}

impl Piece {
    /// `bytes` against this piece's length and CRC: a piece fetched alone is served only
    /// if it is exactly what the checked range held.
    pub fn verify(&self, object_key: &str, bytes: &[u8]) -> crate::error::Result<()> {
        if bytes.len() as u64 != self.len || crc32c::crc32c(bytes) != self.crc32c {
            return Err(crate::error::Error::ChecksumMismatch {
                key: format!("{object_key} (piece)"),
                start: self.start,
                end: self.start + self.len,
            });
        }
        Ok(())
    }
}

type RangeId = (String, u64);

#[derive(Default)]
struct Maps {
    cuts: HashMap<RangeId, Arc<[Piece]>>,
    order: VecDeque<RangeId>,
}

/// The cuts of the large ranges this broker has cached as pieces.
#[derive(Default)]
pub struct PieceMaps {
    maps: Mutex<Maps>,
}

impl PieceMaps {
    fn lock(&self) -> MutexGuard<'_, Maps> {
        // Nothing under this lock can panic midway, so a poisoned lock is still consistent.
        self.maps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `entry`'s range is too large to be cached whole, so is cached as pieces.
    pub fn wants(cache: &ReadCache, entry: &CatalogEntry) -> bool {
        !cache.scanned_takes(entry.byte_len)
    }

    /// The pieces of `entry`'s range, if it was cut.
    pub fn get(&self, entry: &CatalogEntry) -> Option<Arc<[Piece]>> {
        self.lock()
            .cuts
            .get(&(entry.object_key.clone(), entry.byte_start))
            .cloned()
    }

    /// Cuts `bytes` (all of `entry`'s range, already checked against its CRC) into pieces
    /// and remembers the cut (nothing is cached: see [`cache_pieces`]).
    pub fn remember(&self, cache: &ReadCache, entry: &CatalogEntry, bytes: &Bytes) -> Arc<[Piece]> {
        let pieces: Arc<[Piece]> = cut(
            entry,
            bytes,
            PIECE_BYTES.min(cache.scanned_entry_max_bytes()),
        )
        .into();
        let id = (entry.object_key.clone(), entry.byte_start);
        let mut maps = self.lock();
        if maps.cuts.insert(id.clone(), pieces.clone()).is_none() {
            maps.order.push_back(id);
        }
        while maps.order.len() > PIECE_MAPS_MAX {
            if let Some(old) = maps.order.pop_front() {
                maps.cuts.remove(&old);
            }
        }
        pieces
    }

    /// Forgets `entry`'s cut (a piece failed its CRC: the range is read whole again).
    pub fn forget(&self, entry: &CatalogEntry) {
        let id = (entry.object_key.clone(), entry.byte_start);
        let mut maps = self.lock();
        if maps.cuts.remove(&id).is_some() {
            maps.order.retain(|o| *o != id);
        }
    }
}

/// The index of the piece of `cut` holding `offset` (or the first after it).
pub fn piece_at(cut: &[Piece], offset: Offset) -> usize {
    cut.partition_point(|p| p.last_offset < offset)
}

/// Caches, in the *scanned* pool, the pieces of `cut` (of `entry`, whose checked bytes are
/// `bytes`): the one holding `from` and, after it, up to `window_bytes` of them — what a
/// reader at `from` reads next. Each is copied, so an evicted piece frees its
/// memory rather than pinning the whole range.
pub fn cache_pieces(
    cache: &ReadCache,
    entry: &CatalogEntry,
    cut: &[Piece],
    bytes: &Bytes,
    from: Offset,
    window_bytes: u64,
) {
    let mut left = window_bytes;
    for (i, p) in cut[piece_at(cut, from)..].iter().enumerate() {
        // The window is what follows the reader's own piece (as read-ahead counts it).
        if i > 0 {
            if p.len > left {
                break;
            }
            left -= p.len;
        }
        let at = (p.start - entry.byte_start) as usize;
        let piece = Bytes::copy_from_slice(&bytes[at..at + p.len as usize]);
        cache.insert_scanned(&entry.object_key, p.start, p.len, piece);
    }
}

/// `bytes` (`entry`'s range) cut at batch boundaries into pieces of at most `piece_bytes`
/// (but whole batches). Bytes after the last whole batch (there are none in a range that
/// passed its CRC) are left out.
fn cut(entry: &CatalogEntry, bytes: &Bytes, piece_bytes: usize) -> Vec<Piece> {
    let mut pieces: Vec<Piece> = Vec::new();
    let mut at = entry.byte_start;
    for (h, b) in batch::iter_batches(bytes) {
        let len = b.len() as u64;
        match pieces.last_mut() {
            Some(p) if p.len + len <= piece_bytes as u64 => {
                p.len += len;
                p.last_offset = h.last_offset();
                p.crc32c = crc32c::crc32c_append(p.crc32c, &b);
            }
            _ => pieces.push(Piece {
                first_offset: h.base_offset,
                last_offset: h.last_offset(),
                start: at,
                len,
                crc32c: crc32c::crc32c(&b),
            }),
        }
        at += len;
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::make_batch;
    use oxbow_metadata::{EntryLayout, TopicId};

    /// `n` batches of 40 records each, offsets from 0, and the entry naming them.
    fn range(n: usize) -> (CatalogEntry, Bytes) {
        let mut buf = Vec::new();
        for i in 0..n {
            let mut b = make_batch(40, 1_000);
            b[..8].copy_from_slice(&(i as i64 * 40).to_be_bytes());
            buf.extend_from_slice(&b);
        }
        let bytes = Bytes::from(buf);
        let entry = CatalogEntry {
            topic_id: TopicId(uuid::Uuid::from_u128(1)),
            partition: 0,
            base_offset: 0,
            last_offset: n as i64 * 40 - 1,
            max_timestamp_ms: 0,
            object_key: "o".into(),
            byte_start: 100,
            byte_len: bytes.len() as u64,
            crc32c: crc32c::crc32c(&bytes),
            leader_epoch: 0,
            layout: EntryLayout::Batches,
            txn: None,
        };
        (entry, bytes)
    }

    #[test]
    fn pieces_cover_the_range_at_batch_boundaries_in_order() {
        let (entry, bytes) = range(6000);
        let pieces = cut(&entry, &bytes, PIECE_BYTES);
        assert!(pieces.len() > 1, "{} bytes in one piece", bytes.len());
        assert_eq!(pieces[0].start, entry.byte_start);
        assert_eq!(pieces[0].first_offset, 0);
        for w in pieces.windows(2) {
            assert_eq!(w[0].start + w[0].len, w[1].start, "contiguous");
            assert_eq!(w[0].last_offset + 1, w[1].first_offset, "no offset lost");
        }
        let last = pieces.last().expect("a piece");
        assert_eq!(last.start + last.len, entry.byte_start + entry.byte_len);
        assert_eq!(last.last_offset, entry.last_offset);
        assert!(pieces.iter().all(|p| p.len as usize <= PIECE_BYTES));
    }

    #[test]
    fn pieces_carry_their_own_crc() {
        let (entry, bytes) = range(6000);
        let pieces = cut(&entry, &bytes, PIECE_BYTES);
        for p in &pieces {
            let at = (p.start - entry.byte_start) as usize;
            let piece = &bytes[at..at + p.len as usize];
            p.verify("o", piece).expect("its own bytes pass");
            let mut bad = piece.to_vec();
            bad[7] ^= 1;
            assert!(p.verify("o", &bad).is_err(), "a flipped bit fails");
            assert!(p.verify("o", &piece[1..]).is_err(), "a short piece fails");
        }
    }

    #[test]
    fn only_the_window_of_pieces_is_cached_and_the_cuts_are_bounded() {
        let (entry, bytes) = range(9000);
        let cache = ReadCache::new(256 << 20);
        let maps = PieceMaps::default();
        let pieces = maps.remember(&cache, &entry, &bytes);
        assert!(pieces.len() >= 4, "{} pieces", pieces.len());
        assert!(pieces.iter().all(|p| !cache.contains("o", p.start, p.len)));
        // A reader in the second piece, a window of one more piece.
        let from = pieces[1].first_offset + 1;
        cache_pieces(&cache, &entry, &pieces, &bytes, from, pieces[2].len);
        let cached: Vec<bool> = pieces
            .iter()
            .map(|p| cache.contains("o", p.start, p.len))
            .collect();
        assert!(
            !cached[0] && cached[1] && cached[2] && !cached[3],
            "{cached:?}"
        );
        assert_eq!(maps.get(&entry).as_deref(), Some(&pieces[..]));
        maps.forget(&entry);
        assert!(maps.get(&entry).is_none());
        maps.remember(&cache, &entry, &bytes);
        for i in 0..PIECE_MAPS_MAX as u64 + 10 {
            let mut other = entry.clone();
            other.byte_start = 1_000_000 + i;
            maps.remember(&cache, &other, &Bytes::new());
        }
        assert!(maps.get(&entry).is_none(), "the oldest cut is forgotten");
        assert_eq!(maps.lock().cuts.len(), PIECE_MAPS_MAX);
        assert_eq!(maps.lock().order.len(), PIECE_MAPS_MAX);
    }
}
