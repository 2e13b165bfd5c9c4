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

    #[test]
    fn without_ranges_every_batch_is_its_own_slice() {
        let batches = vec![Bytes::from_static(b"one"), Bytes::from_static(b"two")];
        let r = read_of(batches.clone(), Vec::new());
        assert_eq!(r.spans(), batches);
        assert!(read_of(Vec::new(), Vec::new()).spans().is_empty());
    }
}
