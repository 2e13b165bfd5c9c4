//! Writing around the page cache (`O_DIRECT`, Linux) where the broker writes bytes it will
//! not read back soon: the WAL (`wal_disk/direct.rs`) and the embedded object store's PUTs
//! (`local_store.rs`).
//!
//! Why (issue 17): on the 2-vCPU VMs this project measures on, the kernel's copy of written
//! bytes into the page cache (`copy_folio_from_iter_atomic`) took half the broker's CPU at
//! max produce throughput — 29% for the WAL's writes, 20% for the sealed objects'. `dd` of
//! 1 GiB took 0.7–1.2 s of system time buffered and 0.14–0.2 s with `oflag=direct`.
//!
//! Direct I/O wants the file offset, the length and the memory aligned to the device's
//! logical block; [`BLOCK`] (4 KiB) is a multiple of every one in use. Where a file system
//! refuses `O_DIRECT` (tmpfs) callers write through the page cache as before.

use std::fs::File;
use std::io;
use std::path::Path;

/// Alignment and granularity of direct writes.
pub(crate) const BLOCK: usize = 4096;

/// A buffer whose usable part starts on a [`BLOCK`] boundary: an offset into a slightly
/// larger `Vec`, fixed once it is allocated (it never grows in place). Safe code only.
/// `Default`: no bytes, no allocation (what a buffer is left as once moved out).
#[derive(Default)]
pub(crate) struct Aligned {
    raw: Vec<u8>,
    start: usize,
    capacity: usize,
}

impl Aligned {
    /// At least `capacity` bytes, rounded up to whole blocks; `None` if the allocator's
    /// address could not be aligned (callers then write through the page cache).
    pub(crate) fn new(capacity: usize) -> Option<Aligned> {
        let capacity = capacity.div_ceil(BLOCK) * BLOCK;
        let raw = vec![0u8; capacity + BLOCK];
        let start = raw.as_ptr().align_offset(BLOCK);
        (start < BLOCK).then_some(Aligned {
            raw,
            start,
            capacity,
        })
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The first `len` bytes (at most the capacity), starting on a block boundary.
    pub(crate) fn get_mut(&mut self, len: usize) -> &mut [u8] {
        &mut self.raw[self.start..self.start + len]
    }
}

/// `path` (which exists) opened for writing with `O_DIRECT` (and reading, for a file's
/// partial last block), or `None` where the file system refuses it.
#[cfg(target_os = "linux")]
pub(crate) fn open(path: &Path) -> io::Result<Option<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path);
    match opened {
        Ok(file) => Ok(Some(file)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            tracing::debug!(path = %path.display(), "no O_DIRECT here: writing through the page cache");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn open(_path: &Path) -> io::Result<Option<File>> {
    Ok(None)
}
