//! Catalogued ranges too large for the read cache's *scanned* pool, cached as pieces
//! (issue 17).
//!
//! A sealer that lags (a busy broker, a slow store) writes objects of up to 64 MiB, so one
//! partition's range in an object can be ten or more MiB — more than the *scanned* pool
//! takes in one value (half a shard, `oxbow_cache`). Such a range used to be read whole on
//! every fetch and never cached: a consumer fetching 1 MiB at a time read it ten times
//! over. Now a large range, once fetched and checked against its catalogue CRC, is cut at
//! batch boundaries into pieces of about [`PIECE_BYTES`], each cached on its own (copied,
//! so an evicted piece frees its memory), and the cut is remembered here: the next fetch
//! finds the piece holding its offset and reads on from memory; a piece evicted in between
//! sends the reader back to the whole range.
//!
//! Bounded: at most [`PIECE_MAPS_MAX`] ranges' cuts are remembered (the oldest forgotten
//! first); the pieces themselves live in, and are evicted by, the cache.

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

/// One piece of a large range: its offsets and where its bytes are in the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub first_offset: Offset,
    pub last_offset: Offset,
    pub start: u64,
    pub len: u64,
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

    /// Cuts `bytes` (all of `entry`'s range, already checked against its CRC) into pieces,
    /// caches each in the *scanned* pool and remembers the cut.
    pub fn cache(&self, cache: &ReadCache, entry: &CatalogEntry, bytes: &Bytes) {
        let pieces = cut(
            entry,
            bytes,
            PIECE_BYTES.min(cache.scanned_entry_max_bytes()),
        );
        for p in &pieces {
            let at = (p.start - entry.byte_start) as usize;
            let piece = Bytes::copy_from_slice(&bytes[at..at + p.len as usize]);
            cache.insert_scanned(&entry.object_key, p.start, p.len, piece);
        }
        let id = (entry.object_key.clone(), entry.byte_start);
        let mut maps = self.lock();
        if maps.cuts.insert(id.clone(), pieces.into()).is_none() {
            maps.order.push_back(id);
        }
        while maps.order.len() > PIECE_MAPS_MAX {
            if let Some(old) = maps.order.pop_front() {
                maps.cuts.remove(&old);
            }
        }
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
            }
            _ => pieces.push(Piece {
                first_offset: h.base_offset,
                last_offset: h.last_offset(),
                start: at,
                len,
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
    fn cached_pieces_hold_the_range_bytes_and_the_cuts_are_bounded() {
        let (entry, bytes) = range(6000);
        let cache = ReadCache::new(256 << 20);
        let maps = PieceMaps::default();
        maps.cache(&cache, &entry, &bytes);
        let pieces = maps.get(&entry).expect("cut remembered");
        for p in pieces.iter() {
            assert!(cache.contains("o", p.start, p.len));
        }
        for i in 0..PIECE_MAPS_MAX as u64 + 10 {
            let mut other = entry.clone();
            other.byte_start = 1_000_000 + i;
            maps.cache(&ReadCache::new(1 << 20), &other, &Bytes::new());
        }
        assert!(maps.get(&entry).is_none(), "the oldest cut is forgotten");
        assert_eq!(maps.lock().cuts.len(), PIECE_MAPS_MAX);
    }
}
