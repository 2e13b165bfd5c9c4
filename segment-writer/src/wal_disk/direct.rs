//! A WAL file written with `O_DIRECT` (Linux): a write group goes from the writer's own
//! buffer to the device, not through the page cache (why: `crate::direct_io`). The WAL
//! never reads what it just wrote (a restart or a recovering peer reads files back,
//! rarely), so the cache only cost.
//!
//! How: each write copies the
//! group into an aligned buffer the file keeps (warm memory: a copy at memory speed instead
//! of the kernel's), after the bytes of the block the file's end lies in, pads the last
//! block with zeros and writes whole blocks at the block boundary. So every write rewrites
//! the already-durable head of its first block with the same bytes, and the file holds
//! zeros after its last entry up to the block's end, where a reader sees the end of this
//! file's entries just as after a recycled file's entries (`wal_entry::parse_wal_file`).
//! A write torn by a crash leaves each sector old or new, and the old and new content of the
//! durable head are the same bytes. Durability is unchanged: `sync` is still `fdatasync`
//! (the device's write cache, and the file's size when it grew).

use super::WalDiskFile;
use crate::direct_io::{Aligned, BLOCK};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

/// Where a closed file leaves its buffer for the next file of the same disk (one slot: the
/// WAL writes one file at a time).
pub(crate) type SpareBuffer = Arc<Mutex<Option<Aligned>>>;

/// A WAL file opened with `O_DIRECT`; see the module docs.
pub(crate) struct DirectFile {
    file: File,
    /// The same file opened without `O_DIRECT`: written instead, from then on, once a
    /// direct write was refused with EINVAL (a file system that takes `O_DIRECT` at open
    /// but not these writes), so such a disk costs CPU rather than the WAL.
    buffered: File,
    /// A direct write was refused.
    refused: bool,
    /// Unit tests: direct writes are refused with EINVAL.
    #[cfg(test)]
    refuse_direct: bool,
    /// Where the next byte goes (the logical end: entries end here, zeros follow).
    end: u64,
    /// Its first `end % BLOCK` bytes are the file's bytes from the block boundary before
    /// `end` up to `end`: the head of the next write.
    buf: Aligned,
    /// Gets `buf` when this file is dropped.
    spare: SpareBuffer,
}

impl DirectFile {
    /// Wraps `file`, opened with `O_DIRECT`, whose next write goes at `end` (`buffered`: the
    /// same file without `O_DIRECT`), writing from the buffer in `spare` if a closed file
    /// left one there. `None` when no aligned buffer could be had.
    pub(crate) fn new(
        file: File,
        buffered: File,
        end: u64,
        spare: SpareBuffer,
    ) -> io::Result<Option<DirectFile>> {
        let left = spare.lock().ok().and_then(|mut s| s.take());
        let Some(buf) = left.or_else(|| Aligned::new(BLOCK)) else {
            return Ok(None);
        };
        let mut f = DirectFile {
            file,
            buffered,
            refused: false,
            #[cfg(test)]
            refuse_direct: false,
            end,
            buf,
            spare,
        };
        f.load_head()?;
        Ok(Some(f))
    }

    /// Reads the partial block before `end` into the buffer's head (after a cut-back, or at
    /// the start of a file the writer continues).
    fn load_head(&mut self) -> io::Result<()> {
        let head = (self.end % BLOCK as u64) as usize;
        if head == 0 {
            return Ok(());
        }
        let block_start = self.end - head as u64;
        let block = self.buf.get_mut(BLOCK);
        let mut got = 0;
        while got < head {
            match self
                .file
                .read_at(&mut block[got..], block_start + got as u64)
            {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl WalDiskFile for DirectFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.write_all_vectored(&[buf])
    }

    fn write_all_vectored(&mut self, bufs: &[&[u8]]) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Ok(());
        }
        let head = (self.end % BLOCK as u64) as usize;
        let block_start = self.end - head as u64;
        let len = head + total;
        let padded = len.div_ceil(BLOCK) * BLOCK;
        if padded > self.buf.capacity() {
            // Grown once to the largest group seen, then kept: no fresh pages per write.
            let mut bigger = Aligned::new(padded.max(2 * self.buf.capacity()))
                .ok_or_else(|| io::Error::other("no aligned buffer for a direct WAL write"))?;
            bigger
                .get_mut(head)
                .copy_from_slice(&self.buf.get_mut(head)[..]);
            self.buf = bigger;
        }
        let out = self.buf.get_mut(padded);
        let mut at = head;
        for b in bufs {
            out[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        }
        out[len..].fill(0);
        let direct = if self.refused {
            self.buffered.write_all_at(out, block_start)
        } else {
            #[cfg(test)]
            let injected = self.refuse_direct;
            #[cfg(not(test))]
            let injected = false;
            if injected {
                Err(io::Error::from_raw_os_error(libc::EINVAL))
            } else {
                self.file.write_all_at(out, block_start)
            }
        };
        match direct {
            Err(e) if !self.refused && e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::warn!(error = %e, "the file system refused a direct WAL write: this file is written through the page cache");
                self.refused = true;
                self.buffered.write_all_at(out, block_start)?;
            }
            other => other?,
        }
        self.end += total as u64;
        // The new partial last block becomes the next write's head.
        let next_head = (self.end % BLOCK as u64) as usize;
        out.copy_within(len - next_head..len, 0);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        // One inode: either descriptor's fdatasync covers both kinds of write.
        self.file.sync_data()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)?;
        self.file.sync_all()?;
        self.end = len;
        self.load_head()
    }
}

impl Drop for DirectFile {
    fn drop(&mut self) {
        if let Ok(mut spare) = self.spare.lock() {
            let buf = std::mem::take(&mut self.buf);
            // The larger of the two stays (each is as large as some write group was).
            if spare.as_ref().is_none_or(|s| s.capacity() < buf.capacity()) {
                *spare = Some(buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffered(path: &std::path::Path) -> File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("open buffered")
    }

    #[test]
    fn a_refused_direct_write_goes_through_the_page_cache_from_then_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let Some((mut f, path)) = direct_file(dir.path()) else {
            eprintln!("no O_DIRECT on this file system; skipped");
            return;
        };
        f.write_all(b"direct ").expect("write");
        f.refuse_direct = true;
        f.write_all(b"then refused ").expect("falls back");
        f.write_all(b"then buffered").expect("write");
        f.sync().expect("sync");
        let got = std::fs::read(&path).expect("read");
        assert_eq!(&got[..33], b"direct then refused then buffered");
        assert!(got[33..].iter().all(|b| *b == 0));
    }

    /// A file opened with `O_DIRECT` in a temporary directory, or `None` where the file
    /// system refuses direct I/O (tmpfs).
    fn direct_file(dir: &std::path::Path) -> Option<(DirectFile, std::path::PathBuf)> {
        let path = dir.join("d.wal");
        std::fs::File::create(&path).expect("create");
        let file = crate::direct_io::open(&path).expect("open")?;
        Some((
            DirectFile::new(file, buffered(&path), 0, SpareBuffer::default())
                .expect("direct file")?,
            path,
        ))
    }

    #[test]
    fn a_closed_files_buffer_starts_the_next_one_and_its_old_bytes_stay_out() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spare = SpareBuffer::default();
        let open = |name: &str| {
            let path = dir.path().join(name);
            std::fs::File::create(&path).expect("create");
            let file = crate::direct_io::open(&path).expect("open")?;
            Some((
                DirectFile::new(file, buffered(&path), 0, spare.clone()).expect("direct file")?,
                path,
            ))
        };
        let Some((mut a, _)) = open("a.wal") else {
            eprintln!("no O_DIRECT on this file system; skipped");
            return;
        };
        a.write_all(&vec![0xAB; 3 * BLOCK + 1]).expect("write");
        let grown = a.buf.capacity();
        assert!(grown >= 4 * BLOCK, "{grown}");
        drop(a);
        let (mut b, path) = open("b.wal").expect("direct again");
        assert_eq!(b.buf.capacity(), grown, "the grown buffer is reused");
        b.write_all(b"xy").expect("write");
        b.sync().expect("sync");
        let got = std::fs::read(&path).expect("read");
        assert_eq!(&got[..2], b"xy");
        assert!(got[2..].iter().all(|x| *x == 0), "old buffer bytes written");
    }

    #[test]
    fn writes_land_back_to_back_with_zeros_to_the_block_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let Some((mut f, path)) = direct_file(dir.path()) else {
            eprintln!("no O_DIRECT on this file system; skipped");
            return;
        };
        let mut want = Vec::new();
        // Across block boundaries, a part larger than a block, empty parts, a grown buffer.
        let big: Vec<u8> = (0..3 * BLOCK + 17).map(|i| (i % 251) as u8).collect();
        let groups: Vec<Vec<&[u8]>> = vec![
            vec![b"hello ", b"world"],
            vec![&big[..], b""],
            vec![b"", b"x"],
            vec![&big[..BLOCK - 3]],
        ];
        for g in &groups {
            f.write_all_vectored(g).expect("write");
            f.sync().expect("sync");
            for p in g {
                want.extend_from_slice(p);
            }
            let got = std::fs::read(&path).expect("read");
            assert_eq!(&got[..want.len()], &want[..]);
            assert_eq!(got.len() % BLOCK, 0);
            assert!(got[want.len()..].iter().all(|b| *b == 0));
        }
        // A cut-back continues from the cut.
        f.set_len(5).expect("cut");
        f.write_all(b"!").expect("write");
        f.sync().expect("sync");
        let got = std::fs::read(&path).expect("read");
        assert_eq!(&got[..6], b"hello!");
        assert!(got[6..].iter().all(|b| *b == 0));
    }
}
