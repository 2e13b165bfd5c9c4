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

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

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
    /// Makes every byte appended so far durable.
    fn sync(&mut self) -> io::Result<()>;
    /// Cuts the file to `len` bytes and makes that durable.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

/// The production disk: a directory of real files.
#[derive(Clone, Debug)]
pub struct FsDisk {
    dir: PathBuf,
    /// Serializes changes to the pool (the writer takes, the sealer's trim gives).
    pool: Arc<Mutex<()>>,
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

struct FsFile(File);

impl WalDiskFile for FsFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)?;
        self.0.sync_all()
    }
}

/// Failures [`MemDisk`] injects into the next calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskFaults {
    /// Writes fail with ENOSPC after storing half their bytes (a full disk).
    pub full: bool,
    /// Fsyncs fail with EIO (the bytes may or may not be on the disk).
    pub sync_fails: bool,
}

#[derive(Default)]
struct MemFile {
    /// What a crash cannot take away.
    durable: Vec<u8>,
    /// Appended since the last fsync: a crash keeps a prefix of it, maybe none.
    pending: Vec<u8>,
    /// A recycled file's old bytes: what `durable` and `pending` have not overwritten yet
    /// is still there.
    stale: Vec<u8>,
}

impl MemFile {
    fn content(&self) -> Vec<u8> {
        let mut all = self.durable.clone();
        all.extend_from_slice(&self.pending);
        if let Some(rest) = self.stale.get(all.len()..) {
            all.extend_from_slice(rest);
        }
        all
    }
}

#[derive(Default)]
struct MemState {
    files: BTreeMap<String, MemFile>,
    /// Directories made by `create_dir` (paths ending in `/`), so an empty one is listed.
    dirs: std::collections::BTreeSet<String>,
    faults: DiskFaults,
    /// Each directory's pooled files' content (by directory prefix).
    pools: BTreeMap<String, Vec<Vec<u8>>>,
    /// Bumped by a crash or a loss: handles opened before it fail, as a dead process's
    /// descriptors would.
    generation: u64,
}

/// A simulated disk in memory; clones share it (the disk outlives the broker process that
/// crashes on it). Its directories are name prefixes (`dir/`), so a crash, a loss or an
/// injected failure applies to every directory of the disk.
#[derive(Clone, Default)]
pub struct MemDisk {
    state: Arc<Mutex<MemState>>,
    name: String,
    /// This directory's path on the disk: empty, or ending in `/`.
    prefix: String,
}

fn lock(m: &Mutex<MemState>) -> MutexGuard<'_, MemState> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(28)
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(5)
}

fn gone() -> io::Error {
    io::Error::other("the process that opened this file has crashed")
}

impl MemDisk {
    pub fn new(name: impl Into<String>) -> MemDisk {
        MemDisk {
            state: Arc::default(),
            name: name.into(),
            prefix: String::new(),
        }
    }

    /// The path on the disk of `name` in this directory.
    fn path(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// What follows this directory's prefix in each path under it.
    fn below<'a>(&self, s: &'a MemState) -> impl Iterator<Item = &'a str> + 'a {
        let prefix = self.prefix.clone();
        s.files
            .keys()
            .filter_map(move |k| k.strip_prefix(prefix.as_str()))
    }

    /// Sets the failures later calls see.
    pub fn set_faults(&self, faults: DiskFaults) {
        lock(&self.state).faults = faults;
    }

    /// The failures injected now.
    pub fn faults(&self) -> DiskFaults {
        lock(&self.state).faults
    }

    /// A crash of the process (or of the machine) using this disk: every file keeps what was
    /// fsynced plus the first `torn(name, pending_len)` bytes of what was not (a torn
    /// write). Handles opened before fail from now on.
    pub fn crash(&self, mut torn: impl FnMut(&str, usize) -> usize) {
        let mut s = lock(&self.state);
        s.generation += 1;
        for (name, f) in s.files.iter_mut() {
            let keep = torn(name, f.pending.len()).min(f.pending.len());
            let kept: Vec<u8> = f.pending.drain(..).take(keep).collect();
            f.durable.extend_from_slice(&kept);
        }
    }

    /// The disk is gone (a replaced instance): every file, durable or not.
    pub fn lose(&self) {
        let mut s = lock(&self.state);
        s.generation += 1;
        s.files.clear();
        s.dirs.clear();
        s.pools.clear();
    }

    /// Bytes held, durable or not.
    pub fn bytes(&self) -> usize {
        lock(&self.state)
            .files
            .values()
            .map(|f| f.durable.len() + f.pending.len())
            .sum()
    }
}

impl WalDisk for MemDisk {
    fn create_dir(&self) -> io::Result<()> {
        // `a/b/` and its parents, as `mkdir -p`.
        let mut s = lock(&self.state);
        for (i, _) in self.prefix.match_indices('/') {
            s.dirs.insert(self.prefix[..=i].to_owned());
        }
        Ok(())
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let s = lock(&self.state);
        Ok(self
            .below(&s)
            .filter(|rest| !rest.contains('/'))
            .map(str::to_owned)
            .collect())
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        lock(&self.state)
            .files
            .get(&self.path(name))
            .map(MemFile::content)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn open_append(&self, name: &str) -> io::Result<Box<dyn WalDiskFile>> {
        let mut s = lock(&self.state);
        s.files.entry(self.path(name)).or_default();
        Ok(Box::new(MemHandle {
            state: self.state.clone(),
            name: self.path(name),
            generation: s.generation,
        }))
    }

    fn open_recycled(&self, name: &str) -> io::Result<(Box<dyn WalDiskFile>, bool)> {
        let mut s = lock(&self.state);
        let stale = s.pools.get_mut(&self.prefix).and_then(Vec::pop);
        let reused = stale.is_some();
        s.files.insert(
            self.path(name),
            MemFile {
                stale: stale.unwrap_or_default(),
                ..MemFile::default()
            },
        );
        let generation = s.generation;
        Ok((
            Box::new(MemHandle {
                state: self.state.clone(),
                name: self.path(name),
                generation,
            }),
            reused,
        ))
    }

    fn recycle(&self, name: &str, keep: usize) -> io::Result<()> {
        let mut s = lock(&self.state);
        let f = s
            .files
            .remove(&self.path(name))
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let pool = s.pools.entry(self.prefix.clone()).or_default();
        if pool.len() < keep {
            pool.push(f.content());
        }
        Ok(())
    }

    fn preallocate(&self, bytes: u64) -> io::Result<()> {
        let mut s = lock(&self.state);
        if s.faults.full {
            return Err(enospc());
        }
        let zeros = vec![0u8; usize::try_from(bytes).unwrap_or(0)];
        s.pools.entry(self.prefix.clone()).or_default().push(zeros);
        Ok(())
    }

    fn pooled(&self) -> io::Result<usize> {
        Ok(lock(&self.state)
            .pools
            .get(&self.prefix)
            .map_or(0, Vec::len))
    }

    fn drain_pool(&self) -> io::Result<()> {
        lock(&self.state).pools.remove(&self.prefix);
        Ok(())
    }

    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        let mut s = lock(&self.state);
        let f = s
            .files
            .get_mut(&self.path(name))
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        truncate_file(f, len);
        Ok(())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        lock(&self.state)
            .files
            .remove(&self.path(name))
            .map(|_| ())
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn write_atomic(&self, name: &str, data: &[u8]) -> io::Result<()> {
        let mut s = lock(&self.state);
        if s.faults.full {
            return Err(enospc());
        }
        s.files.insert(
            self.path(name),
            MemFile {
                durable: data.to_vec(),
                ..MemFile::default()
            },
        );
        Ok(())
    }

    fn subdir(&self, name: &str) -> Arc<dyn WalDisk> {
        Arc::new(MemDisk {
            state: self.state.clone(),
            name: self.name.clone(),
            prefix: format!("{}{name}/", self.prefix),
        })
    }

    fn list_dirs(&self) -> io::Result<Vec<String>> {
        let s = lock(&self.state);
        let made = s
            .dirs
            .iter()
            .filter_map(|d| d.strip_prefix(self.prefix.as_str()));
        let dirs: std::collections::BTreeSet<&str> = self
            .below(&s)
            .chain(made)
            .filter_map(|rest| rest.split_once('/').map(|(dir, _)| dir))
            .collect();
        Ok(dirs.into_iter().map(str::to_owned).collect())
    }

    fn remove_dir(&self, name: &str) -> io::Result<()> {
        let inside = format!("{}{name}/", self.prefix);
        let mut s = lock(&self.state);
        s.files.retain(|k, _| !k.starts_with(&inside));
        s.dirs.retain(|d| !d.starts_with(&inside));
        Ok(())
    }

    fn location(&self) -> String {
        format!("memory disk {}:/{}", self.name, self.prefix)
    }

    fn blocking(&self) -> bool {
        false
    }
}

fn truncate_file(f: &mut MemFile, len: u64) {
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    let mut all = f.content();
    all.truncate(len);
    f.durable = all;
    f.pending.clear();
    f.stale.clear();
}

struct MemHandle {
    state: Arc<Mutex<MemState>>,
    name: String,
    generation: u64,
}

impl MemHandle {
    fn with<T>(&self, op: impl FnOnce(&mut MemFile, DiskFaults) -> io::Result<T>) -> io::Result<T> {
        let mut s = lock(&self.state);
        if s.generation != self.generation {
            return Err(gone());
        }
        let faults = s.faults;
        let f = s
            .files
            .get_mut(&self.name)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        op(f, faults)
    }
}

impl WalDiskFile for MemHandle {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.with(|f, faults| {
            if faults.full {
                f.pending.extend_from_slice(&buf[..buf.len() / 2]);
                return Err(enospc());
            }
            f.pending.extend_from_slice(buf);
            Ok(())
        })
    }

    fn sync(&mut self) -> io::Result<()> {
        self.with(|f, faults| {
            if faults.sync_fails {
                return Err(eio());
            }
            let pending = std::mem::take(&mut f.pending);
            f.durable.extend_from_slice(&pending);
            Ok(())
        })
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.with(|f, _| {
            truncate_file(f, len);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    //! One conformance suite, run against both disks; then what only the simulated disk
    //! does (crashes, torn writes, loss, injected failures).
    use super::*;

    fn conformance(disk: &dyn WalDisk) {
        disk.create_dir().expect("mkdir");
        assert!(disk.list().expect("ls").is_empty());
        assert_eq!(
            disk.read("a.wal").expect_err("absent").kind(),
            io::ErrorKind::NotFound
        );
        let mut f = disk.open_append("a.wal").expect("open");
        f.write_all(b"hello ").expect("write");
        f.write_all(b"world").expect("write");
        f.sync().expect("sync");
        assert_eq!(disk.read("a.wal").expect("read"), b"hello world");
        // Reopening appends after what is there.
        let mut g = disk.open_append("a.wal").expect("reopen");
        g.write_all(b"!").expect("write");
        g.sync().expect("sync");
        assert_eq!(disk.read("a.wal").expect("read"), b"hello world!");
        f.set_len(5).expect("set_len");
        assert_eq!(disk.read("a.wal").expect("read"), b"hello");
        disk.truncate("a.wal", 2).expect("truncate");
        assert_eq!(disk.read("a.wal").expect("read"), b"he");
        disk.write_atomic("incarnation", b"1\n").expect("atomic");
        disk.write_atomic("incarnation", b"2\n")
            .expect("atomic again");
        assert_eq!(disk.read("incarnation").expect("read"), b"2\n");
        let mut names = disk.list().expect("ls");
        names.sort();
        assert_eq!(names, vec!["a.wal".to_string(), "incarnation".to_string()]);
        disk.remove("a.wal").expect("rm");
        assert_eq!(disk.list().expect("ls"), vec!["incarnation".to_string()]);
        assert!(disk.remove("a.wal").is_err(), "removing twice fails");
        assert!(!disk.location().is_empty());

        // Directories: files inside them are not this directory's, and go with them.
        assert!(disk.list_dirs().expect("ls -d").is_empty());
        let sub = disk.subdir("b2");
        assert!(sub.list_dirs().expect("absent dir").is_empty());
        let inner = sub.subdir("0001");
        inner.create_dir().expect("mkdir -p");
        let mut h = inner.open_append("1.wal").expect("open inside");
        h.write_all(b"copy").expect("write");
        h.sync().expect("sync");
        // An empty directory is listed too.
        sub.subdir("0002").create_dir().expect("mkdir");
        assert_eq!(inner.read("1.wal").expect("read"), b"copy");
        assert_eq!(inner.list().expect("ls"), vec!["1.wal".to_string()]);
        assert_eq!(disk.list().expect("ls"), vec!["incarnation".to_string()]);
        assert_eq!(disk.list_dirs().expect("ls -d"), vec!["b2".to_string()]);
        assert!(sub.list().expect("ls").is_empty());
        let mut incs = sub.list_dirs().expect("ls -d");
        incs.sort();
        assert_eq!(incs, vec!["0001".to_string(), "0002".to_string()]);
        sub.remove_dir("0001").expect("rm -r");
        sub.remove_dir("0001").expect("rm -r of nothing");
        assert_eq!(sub.list_dirs().expect("ls -d"), vec!["0002".to_string()]);
        assert!(inner.read("1.wal").is_err());
        disk.remove_dir("b2").expect("rm -r");
        assert!(disk.list_dirs().expect("ls -d").is_empty());
        assert_eq!(disk.read("incarnation").expect("kept"), b"2\n");

        // Recycling: a file's blocks go to the pool (not listed), up to `keep`, and come
        // back under a new name with their old bytes after what is written.
        for name in ["r1.wal", "r2.wal"] {
            let mut f = disk.open_append(name).expect("open");
            f.write_all(b"hello world").expect("write");
            f.sync().expect("sync");
        }
        disk.recycle("r1.wal", 1).expect("recycle");
        disk.recycle("r2.wal", 1)
            .expect("recycle past keep deletes");
        assert_eq!(disk.pooled().expect("pool"), 1);
        assert_eq!(disk.list().expect("ls"), vec!["incarnation".to_string()]);
        assert!(disk.read("r1.wal").is_err());
        let (mut f, reused) = disk.open_recycled("r3.wal").expect("open recycled");
        assert!(reused);
        assert_eq!(disk.pooled().expect("pool"), 0);
        f.write_all(b"HE").expect("write");
        f.sync().expect("sync");
        assert_eq!(disk.read("r3.wal").expect("read"), b"HEllo world");
        f.write_all(b"LLO").expect("write");
        f.sync().expect("sync");
        assert_eq!(disk.read("r3.wal").expect("read"), b"HELLO world");
        f.set_len(4).expect("cut back");
        assert_eq!(disk.read("r3.wal").expect("read"), b"HELL");
        let (mut g, reused) = disk.open_recycled("r4.wal").expect("open, pool empty");
        assert!(!reused);
        g.write_all(b"new").expect("write");
        g.sync().expect("sync");
        assert_eq!(disk.read("r4.wal").expect("read"), b"new");
        disk.preallocate(10).expect("zero-fill");
        assert_eq!(disk.pooled().expect("pool"), 1);
        disk.drain_pool().expect("drain");
        disk.preallocate(10).expect("zero-fill");
        disk.drain_pool().expect("drain");
        assert_eq!(disk.pooled().expect("pool"), 0);
        disk.preallocate(10).expect("zero-fill");
        let (mut h, reused) = disk.open_recycled("r5.wal").expect("open zero-filled");
        assert!(reused);
        h.write_all(b"ab").expect("write");
        h.sync().expect("sync");
        assert_eq!(disk.read("r5.wal").expect("read"), b"ab\0\0\0\0\0\0\0\0");
        let mut names = disk.list().expect("ls");
        names.sort();
        assert_eq!(names, vec!["incarnation", "r3.wal", "r4.wal", "r5.wal"]);
        for name in ["r3.wal", "r4.wal", "r5.wal"] {
            disk.remove(name).expect("rm");
        }
    }

    #[test]
    fn fs_disk_conforms() {
        let dir = tempfile::tempdir().expect("tempdir");
        let disk = FsDisk::new(dir.path().join("wal"));
        conformance(&*disk);
        assert!(disk.blocking());
    }

    #[test]
    fn mem_disk_conforms() {
        let disk = MemDisk::new("test");
        conformance(&disk);
        assert!(!disk.blocking());
    }

    #[test]
    fn a_crash_keeps_what_was_fsynced_and_a_torn_prefix_of_the_rest() {
        let disk = MemDisk::new("crash");
        let mut f = disk.open_append("a").expect("open");
        f.write_all(b"durable").expect("write");
        f.sync().expect("sync");
        f.write_all(b"pending").expect("write");
        disk.crash(|name, pending| {
            assert_eq!((name, pending), ("a", 7));
            3
        });
        assert_eq!(disk.read("a").expect("read"), b"durablepen");
        // The crashed process's handle is dead.
        assert!(f.write_all(b"x").is_err());
        assert!(f.sync().is_err());
        // A directory is on the same disk: the crash tears its files too, a loss takes them.
        let sub = disk.subdir("replicas");
        let mut g = sub.open_append("c").expect("open");
        g.write_all(b"copy").expect("write");
        disk.crash(|_, pending| pending / 2);
        assert_eq!(sub.read("c").expect("read"), b"co");
        disk.lose();
        assert!(disk.list().expect("ls").is_empty());
        assert!(sub.read("c").is_err());
    }

    #[test]
    fn injected_failures_fail_writes_and_fsyncs() {
        let disk = MemDisk::new("faults");
        let mut f = disk.open_append("a").expect("open");
        disk.set_faults(DiskFaults {
            full: true,
            sync_fails: false,
        });
        let e = f.write_all(b"abcd").expect_err("full");
        assert_eq!(e.raw_os_error(), Some(28));
        assert!(disk.write_atomic("b", b"x").is_err());
        disk.set_faults(DiskFaults {
            full: false,
            sync_fails: true,
        });
        f.write_all(b"ef").expect("write");
        assert_eq!(f.sync().expect_err("eio").raw_os_error(), Some(5));
        // Unsynced: a crash may drop it all.
        disk.crash(|_, _| 0);
        assert!(disk.read("a").expect("read").is_empty());
    }
}
