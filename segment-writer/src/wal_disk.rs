//! The disk under the WAL: [`WalDisk`], with the production [`FsDisk`] (a directory, real
//! fsyncs) and the simulated [`MemDisk`] (memory, with the failures a real disk has).
//!
//! The WAL ([`crate::wal`]) does all its file I/O through this trait, so the deterministic
//! simulation can run it with no real files and inject what real disks do: a write or
//! fsync that fails (EIO, ENOSPC), a crash that keeps only what was fsynced plus a torn
//! part of what was not, and a disk lost entirely (a replaced instance).
//!
//! Names are plain file names inside one directory (`{first_sequence:020}.wal`,
//! `incarnation`); the WAL has no subdirectories. The replica store keeps other brokers'
//! WAL copies in a tree of them (`b{source}/{incarnation}/…`), through the same trait:
//! [`WalDisk::subdir`] is a directory inside this one (on the same disk, so a crash or a
//! lost disk takes both), [`WalDisk::list_dirs`] and [`WalDisk::remove_dir`] the rest.
//!
//! Recycling ([`WalDisk::recycle`], [`WalDisk::open_recycled`]): a WAL file the sealer no
//! longer needs keeps its blocks for the next file instead of being deleted, up to a few
//! per directory. Appending to a growing file makes every fdatasync commit the file
//! system's journal (the size changed), and on ext4 (data=ordered) that commit first
//! writes out every other file's dirty data in the same transaction — a sealed object, a
//! catalog commit, a compaction — so the WAL's fsync waited for them: p99.9 of tens to
//! hundreds of milliseconds where overwriting a file's existing blocks took 2–4 ms
//! (measured here, issue 17). A recycled file keeps its old bytes after what is written;
//! the WAL tells them apart by its entries' sequences. Until a file has been recycled, a
//! zero-filled one made off the write path ([`WalDisk::preallocate`]) serves.
//!
//! Whether the writer runs on a dedicated thread ([`WalDisk::blocking`]): a real fsync
//! blocks for milliseconds, so production writes on its own thread; the in-memory disk never
//! blocks, so the simulation runs the writer as a task on its single-threaded runtime, where
//! its order is a function of the seed.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A directory of append-only files with explicit durability.
pub trait WalDisk: Send + Sync + 'static {
    /// Creates the directory if it does not exist.
    fn create_dir(&self) -> io::Result<()>;
    /// The names of the files in the directory, in no particular order.
    fn list(&self) -> io::Result<Vec<String>>;
    /// The whole content of a file (`NotFound` if it does not exist).
    fn read(&self, name: &str) -> io::Result<Vec<u8>>;
    /// Opens a file for appending, creating it if needed; the name itself is durable when
    /// this returns (a crash cannot lose the file, only its unsynced bytes).
    fn open_append(&self, name: &str) -> io::Result<Box<dyn WalDiskFile>>;
    /// Creates file `name` (which must not exist) for appending on the blocks of a pooled
    /// file if there is one: writes overwrite its old bytes from the start, and what was
    /// not overwritten stays after them (a reader must tell them apart). Durable name, as
    /// [`WalDisk::open_append`]. Also says whether a pooled file was used.
    fn open_recycled(&self, name: &str) -> io::Result<(Box<dyn WalDiskFile>, bool)>;
    /// Deletes file `name`, or moves it to the pool of files to reuse while the pool holds
    /// fewer than `keep`. Pooled files are not listed.
    fn recycle(&self, name: &str, keep: usize) -> io::Result<()>;
    /// Adds a file of `bytes` zeros to the pool (blocking; paced, so its writes do not
    /// crowd out the WAL's).
    fn preallocate(&self, bytes: u64) -> io::Result<()>;
    /// Files in the pool.
    fn pooled(&self) -> io::Result<usize>;
    /// Deletes every pooled file.
    fn drain_pool(&self) -> io::Result<()>;
    /// Cuts a file to `len` bytes, durably.
    fn truncate(&self, name: &str, len: u64) -> io::Result<()>;
    /// Deletes a file.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Replaces a small file atomically and durably (a crash leaves the old or the new
    /// content, never a mix).
    fn write_atomic(&self, name: &str, data: &[u8]) -> io::Result<()>;
    /// The directory `name` inside this one, on the same disk (created by its
    /// [`WalDisk::create_dir`]). [`WalDisk::list`] does not show it.
    fn subdir(&self, name: &str) -> Arc<dyn WalDisk>;
    /// The names of the directories inside this one, in no particular order (none if this
    /// one does not exist).
    fn list_dirs(&self) -> io::Result<Vec<String>>;
    /// Deletes the directory `name` inside this one with everything in it (nothing to do if
    /// it does not exist).
    fn remove_dir(&self, name: &str) -> io::Result<()>;
    /// Where the files are, for messages.
    fn location(&self) -> String;
    /// Whether calls block the calling thread (then the writer gets a thread of its own).
    fn blocking(&self) -> bool;
}

/// A file opened by [`WalDisk::open_append`].
pub trait WalDiskFile: Send {
    /// Appends `buf` (not durable until [`WalDiskFile::sync`]).
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Appends `bufs` back to back, as few writes as the disk allows (a write group's entry
    /// prefixes and batches, gathered without first copying them into one buffer).
    fn write_all_vectored(&mut self, bufs: &[&[u8]]) -> io::Result<()> {
        for buf in bufs {
            self.write_all(buf)?;
        }
        Ok(())
    }
    /// Makes every byte appended so far durable.
    fn sync(&mut self) -> io::Result<()>;
    /// Cuts the file to `len` bytes and makes that durable.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

/// The production disk: a directory of real files.
#[derive(Clone)]
pub struct FsDisk {
    dir: PathBuf,
    /// Serializes changes to the pool (the writer takes, the sealer's trim gives).
    pool: Arc<Mutex<()>>,
    /// Files from [`WalDisk::open_recycled`] (the WAL writer's) are written with `O_DIRECT`
    /// where the file system takes it (`wal_disk/direct.rs`: whole blocks, zeros after the
    /// last byte written up to its block's end).
    direct: bool,
    /// The aligned write buffer of the last direct file closed, for the next one to start
    /// with: a fresh buffer grows by doubling up to the largest write group (8 MiB), and
    /// every new allocation's pages are faulted in and zeroed by the kernel on first write,
    /// once per WAL file (every 64 MiB written) — a few percent of the broker's CPU at max
    /// produce.
    #[cfg(target_os = "linux")]
    spare_buffer: direct::SpareBuffer,
}

impl std::fmt::Debug for FsDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsDisk")
            .field("dir", &self.dir)
            .field("direct", &self.direct)
            .finish_non_exhaustive()
    }
}

/// Suffix of a pooled file: `{n}.free` (`{n}.free.tmp` while being zero-filled).
const POOLED: &str = ".free";

/// Zero-filling writes this much between fsyncs and pauses after each, so it never holds
/// a large dirty backlog for the WAL's fsync to queue behind.
const ZERO_FILL_STEP: usize = 4 << 20;
const ZERO_FILL_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

impl FsDisk {
    pub fn new(dir: impl Into<PathBuf>) -> Arc<FsDisk> {
        Arc::new(FsDisk {
            dir: dir.into(),
            pool: Arc::default(),
            direct: false,
            #[cfg(target_os = "linux")]
            spare_buffer: Default::default(),
        })
    }

    /// [`FsDisk::new`] for the WAL writer: files it opens with [`WalDisk::open_recycled`]
    /// bypass the page cache where the file system allows (`wal_disk/direct.rs`), and are
    /// written in whole 4 KiB blocks, so zeros follow what was written up to a block's end.
    pub fn with_direct_writes(dir: impl Into<PathBuf>) -> Arc<FsDisk> {
        Arc::new(FsDisk {
            dir: dir.into(),
            pool: Arc::default(),
            direct: true,
            #[cfg(target_os = "linux")]
            spare_buffer: Default::default(),
        })
    }

    /// The pooled files' names, in order.
    fn pool_names(&self) -> io::Result<Vec<String>> {
        let mut names: Vec<String> = self
            .all_entries(false)?
            .into_iter()
            .filter(|n| n.ends_with(POOLED))
            .collect();
        names.sort();
        Ok(names)
    }

    /// A name for a new pooled file.
    fn next_pool_name(&self) -> io::Result<String> {
        let next = self
            .pool_names()?
            .iter()
            .filter_map(|n| n.strip_suffix(POOLED)?.parse::<u64>().ok())
            .max()
            .map_or(0, |n| n + 1);
        Ok(format!("{next:020}{POOLED}"))
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }

    /// The names of the files (or of the directories) in the directory, without pooled
    /// files.
    fn entries(&self, dirs: bool) -> io::Result<Vec<String>> {
        let mut names = self.all_entries(dirs)?;
        names.retain(|n| !n.ends_with(POOLED) && !n.ends_with(".free.tmp"));
        Ok(names)
    }

    fn all_entries(&self, dirs: bool) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for dirent in std::fs::read_dir(&self.dir)? {
            let dirent = dirent?;
            if dirent.file_type()?.is_dir() != dirs {
                continue;
            }
            if let Some(name) = dirent.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }
}

impl WalDisk for FsDisk {
    fn create_dir(&self) -> io::Result<()> {
        std::fs::create_dir_all(&self.dir)
    }

    fn list(&self) -> io::Result<Vec<String>> {
        self.entries(false)
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        let mut data = Vec::new();
        File::open(self.dir.join(name))?.read_to_end(&mut data)?;
        Ok(data)
    }

    fn open_append(&self, name: &str) -> io::Result<Box<dyn WalDiskFile>> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(name))?;
        // The new name must be durable too, or a crash could lose the whole file.
        self.sync_dir()?;
        Ok(Box::new(FsFile(file)))
    }

    fn open_recycled(&self, name: &str) -> io::Result<(Box<dyn WalDiskFile>, bool)> {
        let path = self.dir.join(name);
        let reused = {
            let _pool = self
                .pool
                .lock()
                .map_err(|_| io::Error::other("WAL pool lock poisoned"))?;
            match self.pool_names()?.first() {
                Some(free) => {
                    std::fs::rename(self.dir.join(free), &path)?;
                    true
                }
                None => false,
            }
        };
        // Not `append`: writes start at 0, over the old bytes.
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(&path)?;
        self.sync_dir()?;
        if self.direct {
            if let Some(direct) = self.open_direct(&path, &file)? {
                return Ok((Box::new(direct), reused));
            }
        }
        Ok((Box::new(FsFile(file)), reused))
    }

    fn recycle(&self, name: &str, keep: usize) -> io::Result<()> {
        let _pool = self
            .pool
            .lock()
            .map_err(|_| io::Error::other("WAL pool lock poisoned"))?;
        if self.pool_names()?.len() >= keep {
            return std::fs::remove_file(self.dir.join(name));
        }
        std::fs::rename(self.dir.join(name), self.dir.join(self.next_pool_name()?))
    }

    fn preallocate(&self, bytes: u64) -> io::Result<()> {
        let tmp = {
            let _pool = self
                .pool
                .lock()
                .map_err(|_| io::Error::other("WAL pool lock poisoned"))?;
            // One left by a crash mid-fill.
            for n in self.all_entries(false)? {
                if n.ends_with(".free.tmp") {
                    std::fs::remove_file(self.dir.join(n))?;
                }
            }
            format!("{}.tmp", self.next_pool_name()?)
        };
        let zeros = vec![0u8; ZERO_FILL_STEP];
        let mut f = File::create(self.dir.join(&tmp))?;
        let mut left = bytes;
        while left > 0 {
            let n = left.min(ZERO_FILL_STEP as u64) as usize;
            f.write_all(&zeros[..n])?;
            f.sync_data()?;
            left -= n as u64;
            std::thread::sleep(ZERO_FILL_PAUSE);
        }
        f.sync_all()?;
        let _pool = self
            .pool
            .lock()
            .map_err(|_| io::Error::other("WAL pool lock poisoned"))?;
        std::fs::rename(self.dir.join(&tmp), self.dir.join(self.next_pool_name()?))
    }

    fn pooled(&self) -> io::Result<usize> {
        Ok(self.pool_names()?.len())
    }

    fn drain_pool(&self) -> io::Result<()> {
        let _pool = self
            .pool
            .lock()
            .map_err(|_| io::Error::other("WAL pool lock poisoned"))?;
        for n in self.pool_names()? {
            std::fs::remove_file(self.dir.join(n))?;
        }
        Ok(())
    }

    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        let f = OpenOptions::new().write(true).open(self.dir.join(name))?;
        f.set_len(len)?;
        f.sync_all()
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        std::fs::remove_file(self.dir.join(name))
    }

    fn write_atomic(&self, name: &str, data: &[u8]) -> io::Result<()> {
        let tmp = self.dir.join(format!("{name}.tmp"));
        let mut f = File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, self.dir.join(name))?;
        self.sync_dir()
    }

    fn subdir(&self, name: &str) -> Arc<dyn WalDisk> {
        FsDisk::new(self.dir.join(name))
    }

    fn list_dirs(&self) -> io::Result<Vec<String>> {
        match self.entries(true) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            other => other,
        }
    }

    fn remove_dir(&self, name: &str) -> io::Result<()> {
        match std::fs::remove_dir_all(self.dir.join(name)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    fn location(&self) -> String {
        self.dir.display().to_string()
    }

    fn blocking(&self) -> bool {
        true
    }
}

impl FsDisk {
    /// `path` (existing) opened for direct writes from its start, or `None` where direct I/O
    /// is not to be had: then the caller writes through the page cache as before.
    #[cfg(target_os = "linux")]
    fn open_direct(
        &self,
        path: &std::path::Path,
        buffered: &File,
    ) -> io::Result<Option<direct::DirectFile>> {
        match crate::direct_io::open(path)? {
            Some(file) => {
                direct::DirectFile::new(file, buffered.try_clone()?, 0, self.spare_buffer.clone())
            }
            None => Ok(None),
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn open_direct(&self, _path: &std::path::Path, _buffered: &File) -> io::Result<Option<FsFile>> {
        Ok(None)
    }
}

struct FsFile(File);

/// Most slices one `writev` takes (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

impl WalDiskFile for FsFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf)
    }

    fn write_all_vectored(&mut self, bufs: &[&[u8]]) -> io::Result<()> {
        for some in bufs.chunks(IOV_MAX) {
            let mut slices: Vec<io::IoSlice<'_>> =
                some.iter().map(|b| io::IoSlice::new(b)).collect();
            let mut rest = &mut slices[..];
            // Skips leading empty slices, so an empty group is no write at all.
            io::IoSlice::advance_slices(&mut rest, 0);
            while !rest.is_empty() {
                match self.0.write_vectored(rest) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => io::IoSlice::advance_slices(&mut rest, n),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)?;
        self.0.sync_all()
    }
}

#[cfg(target_os = "linux")]
mod direct;
mod mem;
pub use mem::{DiskFaults, MemDisk};

#[cfg(test)]
mod tests;
