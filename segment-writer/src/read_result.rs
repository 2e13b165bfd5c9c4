//! What a read returns ([`ReadResult`]) and how it was asked ([`Isolation`]): whole record
//! batches, refcounted slices of the buffers they were read into, with the partition's
//! offsets; [`ReadResult::spans`] joins adjacent slices of one buffer so a fetch response
//! sends them without copying.

use crate::txn::{self, AbortedTxn};
use bytes::Bytes;
use oxbow_metadata::Offset;

/// Kafka's fetch `isolation_level`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Isolation {
    /// Everything below the high watermark (0).
    #[default]
    ReadUncommitted,
    /// Only below the last stable offset, with the aborted transactions to skip (1).
    ReadCommitted,
}

/// Where a read's batches came from: the slowest tier it touched, in this order (a read of
/// a sealed range that goes on into the in-memory tail is as slow as the range). Reported
/// by `oxbow_fetch_read_seconds{source}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReadSource {
    /// The partition's in-memory recent batches (the leader's unsealed and recently sealed
    /// tail).
    #[default]
    Tail,
    /// The read cache's memory.
    CacheMemory,
    /// The read cache's disk tier (`--cache-dir`).
    CacheDisk,
    /// A ranged GET from the object store.
    ObjectStore,
}

impl ReadSource {
    /// Every source, fastest first.
    pub const ALL: [ReadSource; 4] = [
        ReadSource::Tail,
        ReadSource::CacheMemory,
        ReadSource::CacheDisk,
        ReadSource::ObjectStore,
    ];

    /// The `source` label's value.
    pub fn name(self) -> &'static str {
        match self {
            ReadSource::Tail => "tail",
            ReadSource::CacheMemory => "cache_memory",
            ReadSource::CacheDisk => "cache_disk",
            ReadSource::ObjectStore => "object_store",
        }
    }
}

/// What a read returns.
#[derive(Clone, Debug, Default)]
pub struct ReadResult {
    /// Whole record batches, in offset order; the first may start before the asked offset
    /// (clients skip records below it, as with Kafka).
    pub batches: Vec<Bytes>,
    pub log_start_offset: Offset,
    pub high_watermark: Offset,
    /// Where `read_committed` reads stop (the high watermark when nothing is open).
    pub last_stable_offset: Offset,
    /// `read_committed` only: the aborted transactions overlapping `batches`, in
    /// first-offset order (their records are to be skipped, as Fetch tells a consumer).
    pub aborted: Option<Vec<AbortedTxn>>,
    /// The slowest tier the batches came from.
    pub source: ReadSource,
    /// The buffers batches were cut from (ranges read from the cache or the object store),
    /// so that adjacent batches of one range go out as one slice ([`Self::spans`]).
    pub ranges: Vec<Bytes>,
}

impl ReadResult {
    pub fn bytes(&self) -> usize {
        self.batches.iter().map(|b| b.len()).sum()
    }

    /// The batches in as few slices as possible, without copying: a run of batches that lie
    /// one after the other in one of [`Self::ranges`] becomes one slice of it; a batch
    /// from a partition's tail is its own slice. Concatenated, the same bytes as `batches`.
    pub fn spans(&self) -> Vec<Bytes> {
        // Where `b` lies in one of the ranges: (range, start offset in it).
        let place = |b: &Bytes| {
            let at = b.as_ptr() as usize;
            self.ranges.iter().enumerate().find_map(|(i, r)| {
                let start = r.as_ptr() as usize;
                (at >= start && at + b.len() <= start + r.len()).then(|| (i, at - start))
            })
        };
        let mut out = Vec::new();
        // The run being joined: (range, start, end) in that range.
        let mut run: Option<(usize, usize, usize)> = None;
        for b in &self.batches {
            match (run, place(b)) {
                (Some((i, start, end)), Some((j, at))) if i == j && at == end => {
                    run = Some((i, start, end + b.len()));
                }
                (_, found) => {
                    if let Some((i, start, end)) = run.take() {
                        out.push(self.ranges[i].slice(start..end));
                    }
                    match found {
                        Some((j, at)) => run = Some((j, at, at + b.len())),
                        None => out.push(b.clone()),
                    }
                }
            }
        }
        if let Some((i, start, end)) = run {
            out.push(self.ranges[i].slice(start..end));
        }
        out
    }

    /// Keeps the longest run of batches from the first within `max_bytes` (at least the
    /// first batch if `min_one`), and of the aborted transactions only those overlapping
    /// what is kept: what a read asked for `max_bytes` would have returned, since a read
    /// takes whole batches in order and stops at the first that does not fit. A fetch reads
    /// its partitions side by side, each at the most it could be given, then cuts each to
    /// what the partitions before it in the request left of the response's limit.
    pub fn truncate(&mut self, max_bytes: usize, min_one: bool) {
        let mut total = 0usize;
        let mut keep = 0usize;
        for b in &self.batches {
            if total + b.len() > max_bytes && !(min_one && keep == 0) {
                break;
            }
            total += b.len();
            keep += 1;
        }
        if keep == self.batches.len() {
            return;
        }
        self.batches.truncate(keep);
        let end = self.batches.last().and_then(|last| {
            crate::batch::peek_header(last)
                .ok()
                .flatten()
                .map(|h| h.last_offset() + 1)
        });
        if let Some(aborted) = &mut self.aborted {
            match end {
                Some(end) => aborted.retain(|a| a.first_offset < end),
                None => aborted.clear(),
            }
        }
    }

    /// The batches a reader that decodes records itself (HTTP) may show: with `aborted`
    /// set, without aborted transactions' batches and without control batches.
    pub fn committed_batches(&self) -> Vec<Bytes> {
        match &self.aborted {
            Some(aborted) => txn::drop_aborted(&self.batches, aborted),
            None => self.batches.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_of(batches: Vec<Bytes>, ranges: Vec<Bytes>) -> ReadResult {
        ReadResult {
            batches,
            ranges,
            ..ReadResult::default()
        }
    }

    fn joined(parts: &[Bytes]) -> Vec<u8> {
        parts.iter().flat_map(|p| p.iter().copied()).collect()
    }

    #[test]
    fn adjacent_batches_of_one_range_are_one_slice() {
        let range = Bytes::from((0..=255u8).collect::<Vec<u8>>());
        let other = Bytes::from(vec![9u8; 40]);
        let tail = Bytes::from_static(b"tail batch");
        let batches = vec![
            range.slice(10..20),
            range.slice(20..50),
            range.slice(50..51),
            // A gap: a new slice.
            range.slice(60..70),
            other.slice(0..40),
            tail.clone(),
            range.slice(70..80),
        ];
        let r = read_of(batches.clone(), vec![range.clone(), other.clone()]);
        let spans = r.spans();
        assert_eq!(joined(&spans), joined(&batches));
        assert_eq!(spans.len(), 5);
        assert_eq!(spans[0].as_ptr(), range[10..].as_ptr());
        assert_eq!(spans[0].len(), 41);
        assert_eq!(spans[1].len(), 10);
        assert_eq!(spans[2].as_ptr(), other.as_ptr());
        assert_eq!(spans[3].as_ptr(), tail.as_ptr());
    }

    /// A batch of `count` records at `base` (whole, with a valid header).
    fn batch_at(base: i64, count: i32) -> Bytes {
        let mut b = crate::batch::testing::make_batch(count, 0);
        b[..8].copy_from_slice(&base.to_be_bytes());
        Bytes::from(b)
    }

    #[test]
    fn truncating_keeps_what_a_read_of_that_size_would_have_taken() {
        let batches = vec![batch_at(0, 10), batch_at(10, 10), batch_at(20, 10)];
        let one = batches[0].len();
        let abort = |first_offset, last_offset| AbortedTxn {
            producer_id: 7,
            first_offset,
            last_offset,
        };
        let read = ReadResult {
            batches: batches.clone(),
            aborted: Some(vec![abort(0, 5), abort(12, 15), abort(25, 29)]),
            ..ReadResult::default()
        };
        // Room for two batches and a bit: the third does not fit, nor do aborts past 20.
        let mut r = read.clone();
        r.truncate(2 * one + one / 2, false);
        assert_eq!(r.batches, batches[..2]);
        assert_eq!(r.aborted, Some(vec![abort(0, 5), abort(12, 15)]));
        // Room for everything: unchanged.
        let mut r = read.clone();
        r.truncate(3 * one, false);
        assert_eq!(r.batches, batches);
        assert_eq!(r.aborted.as_ref().map(Vec::len), Some(3));
        // No room: nothing, unless it is the response's first data (KIP-74).
        let mut r = read.clone();
        r.truncate(one - 1, false);
        assert!(r.batches.is_empty());
        assert_eq!(r.aborted, Some(Vec::new()));
        let mut r = read.clone();
        r.truncate(0, true);
        assert_eq!(r.batches, batches[..1]);
        assert_eq!(r.aborted, Some(vec![abort(0, 5)]));
        // read_uncommitted has no aborted list to cut.
        let mut r = ReadResult {
            batches: batches.clone(),
            ..ReadResult::default()
        };
        r.truncate(one, false);
        assert_eq!((r.batches.len(), r.aborted), (1, None));
    }

    #[test]
    fn without_ranges_every_batch_is_its_own_slice() {
        let batches = vec![Bytes::from_static(b"one"), Bytes::from_static(b"two")];
        let r = read_of(batches.clone(), Vec::new());
        assert_eq!(r.spans(), batches);
        assert!(read_of(Vec::new(), Vec::new()).spans().is_empty());
    }
}
