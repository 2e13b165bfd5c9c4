//! A read in progress ([`Collect`]): the batches gathered so far and where the read
//! stands, filled range by range by `crate::read`.

use super::ReadSource;
use crate::batch;
use crate::error::{Error, Result};
use bytes::Bytes;
use oxbow_metadata::{CatalogEntry, Offset};

/// A read in progress: what it has collected and where it stands.
pub(super) struct Collect {
    pub(super) out: Vec<Bytes>,
    pub(super) total: usize,
    /// The next offset wanted.
    pub(super) next: Offset,
    pub(super) max_bytes: usize,
    pub(super) min_one: bool,
    /// A batch did not fit: the read is complete.
    pub(super) stopped: bool,
    /// The slowest tier read so far.
    pub(super) source: ReadSource,
    /// The ranges `out`'s batches were cut from (so a response can send them as slices of
    /// these, `ReadResult::spans`).
    pub(super) ranges: Vec<Bytes>,
}

impl Collect {
    pub(super) fn new(next: Offset, max_bytes: usize, min_one: bool) -> Self {
        Collect {
            out: Vec::new(),
            total: 0,
            next,
            max_bytes,
            min_one,
            stopped: false,
            source: ReadSource::Tail,
            ranges: Vec::new(),
        }
    }

    /// Takes the batches of `range` (all of `entry`'s bytes) from `self.next` on, then
    /// checks the range reached the entry's last offset.
    pub(super) fn take_range(&mut self, entry: &CatalogEntry, range: &Bytes) -> Result<()> {
        if self.take_batches(entry, range) {
            return Ok(());
        }
        self.check_reached(entry)
    }

    /// Takes the batches of `bytes` (part or all of `entry`'s range) from `self.next` on,
    /// up to `max_bytes`, remembering `bytes` among the ranges if any were taken; `true`
    /// when the read is complete (a batch did not fit).
    pub(super) fn take_batches(&mut self, entry: &CatalogEntry, bytes: &Bytes) -> bool {
        let taken = self.out.len();
        let stopped = self.take_from(entry, bytes);
        if self.out.len() > taken {
            self.ranges.push(bytes.clone());
        }
        stopped
    }

    fn take_from(&mut self, entry: &CatalogEntry, bytes: &Bytes) -> bool {
        for (h, b) in batch::iter_batches(bytes) {
            if h.last_offset() < self.next {
                continue;
            }
            if h.base_offset > entry.last_offset {
                // Past what the entry serves (a clipped entry: the rest of its range is
                // another entry's, or a deposed leader's tail that is never served).
                break;
            }
            if self.total + b.len() > self.max_bytes && !(self.min_one && self.out.is_empty()) {
                self.stopped = true;
                return true;
            }
            self.total += b.len();
            self.next = h.last_offset() + 1;
            self.out.push(b);
        }
        false
    }

    /// An error if the read has not reached `entry`'s last offset after all its bytes.
    pub(super) fn check_reached(&self, entry: &CatalogEntry) -> Result<()> {
        if self.next <= entry.last_offset {
            return Err(Error::Internal(format!(
                "object {} ends before offset {} its catalog entry promises",
                entry.object_key, entry.last_offset
            )));
        }
        Ok(())
    }
}
