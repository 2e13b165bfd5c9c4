//! [`MemDisk`]: the simulated disk under the WAL (see `crate::wal_disk`): files in memory
//! that keep only what was fsynced (plus a torn part of the rest) across a crash, a disk
//! that can be lost, and injected write and fsync failures.

use super::{WalDisk, WalDiskFile};
use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

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
