//! The broker's write-ahead log: one per broker, shared by all its partitions, fsynced by
//! group commit.
//!
//! Lifecycle: [`Wal::open`] replays every whole entry on disk (dropping a torn tail of the
//! last file), then a dedicated writer thread appends entries in the order they were queued
//! and fsyncs once per group: every entry that arrived while the previous fsync ran shares
//! the next one. Entries get a sequence number in write order, so "fsynced up to sequence S"
//! is a prefix of the log. [`Wal::trim`] deletes whole files once everything in them is in
//! the object store.
//!
//! All file I/O goes through a [`WalDisk`] (`crate::wal_disk`): real files in production,
//! a simulated disk in the deterministic simulation, where the writer runs as a task instead
//! of a thread.
//!
//! On-disk naming: `{dir}/{first_sequence:020}.wal`. Entry framing (big-endian):
//! `len u32 | crc32c(payload) u32 | payload`, payload = `sequence u64 | topic id [16] |
//! partition i32 | leader epoch i32 | record batch bytes`.
//!
//! A write or fsync error is fatal for acknowledgement (ARCHITECTURE decision 2): after one,
//! every pending and future append fails with [`Error::WalFailed`] at once, the failure is
//! published ([`Wal::failure`], [`Wal::watch_failure`]) so the broker can report not-ready
//! and exit, and nothing is acknowledged again by this process. The writer cuts the file
//! back to what its last successful fsync covered: after a failed fsync the page cache may
//! hold bytes the disk never got (fsyncgate), and a restart must not replay them.
//!
//! Sequences are never reused within an incarnation: a write group is streamed to replicas
//! before its local fsync, so replicas may hold a group this WAL lost (a crash, a failed
//! write). [`Wal::open`] therefore continues [`GROUP_ENTRIES_MAX`] past the last entry on
//! disk, beyond any group that may have been streamed but not kept.

use crate::error::{Error, Result};
use crate::latency::{observe, WalLatency};
use crate::wal_disk::{FsDisk, WalDisk, WalDiskFile};
#[cfg(test)]
pub(crate) use crate::wal_entry::encode_payload_for_test;
pub(crate) use crate::wal_entry::parse_file;
pub use crate::wal_entry::BatchCrc;
pub use crate::wal_entry::WalEntry;
use crate::wal_entry::{
    entry_prefix, file_name, parse_wal_file, seal_prefix, Tail, ENTRY_PREFIX_BYTES,
};
use bytes::Bytes;
use oxbow_metadata::clock::{OsRng, Rng};
use oxbow_metadata::{LeaderEpoch, TopicPartition};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
// tokio's clock: the OS clock in production, the paused one in the simulation.
use tokio::time::Instant;

/// Most queued appends; a full queue makes appenders wait (backpressure, not memory growth).
const QUEUE_DEPTH: usize = 4096;
/// Most bytes queued for the writer: with `acks=1` nobody waits for the fsync, so without a
/// byte bound a fast producer could queue `QUEUE_DEPTH` large batches in memory.
const QUEUE_BYTES_MAX: usize = 64 << 20;
/// Most entries in one write group: bounds the sequences a crash can leave on replicas but
/// not here, so a restart can skip past them (see the module docs).
pub const GROUP_ENTRIES_MAX: u64 = QUEUE_DEPTH as u64;
/// Most bytes in one write group.
const GROUP_BYTES_MAX: usize = 8 << 20;
/// Trimmed files kept for reuse by new ones (see `crate::wal_disk`): the disk beyond the
/// WAL's budget is at most this many files.
pub const SPARE_FILES: usize = 2;
/// Bytes [`Wal::open`] writes and fsyncs to check that the WAL directory takes writes: a
/// broker started on a full disk says so at once instead of failing its first produce.
const PROBE_BYTES: usize = 64 << 10;

/// Settings of the WAL.
#[derive(Clone, Debug)]
pub struct WalSettings {
    pub dir: PathBuf,
    /// A new file starts when the current one passes this size. Smaller files are trimmed
    /// sooner after upload (less disk) at the cost of more files.
    pub file_bytes_max: u64,
    /// Appends fail with a retriable error while the WAL holds more than this: the bound on
    /// local disk (and on data at risk) while object storage is slow or down.
    pub budget_bytes: u64,
    /// The writer's files bypass the page cache (`O_DIRECT`, `wal_disk/direct.rs`) where the
    /// file system takes it, falling back to buffered writes where it does not (tmpfs). On:
    /// the kernel's copy of every WAL byte into the page cache was the largest single CPU
    /// cost of max produce (decision 30), and its dirty pages were written back in bursts
    /// the next fsync could queue behind. Off: each group's write is cheaper for the writer
    /// thread (no padding to 4 KiB blocks, no rewrite of the last partial block).
    pub direct_writes: bool,
}

/// Called by the writer thread, in sequence order, once an entry is durable — before
/// `durable_sequence` is published — so a reader of `durable_sequence` sees every entry up
/// to it already applied.
pub type OnDurable = Box<dyn FnOnce(Result<u64>) + Send>;

/// Sees every write group (first sequence, one past its last, entries in WAL framing) before
/// it is fsynced, so replication overlaps the local fsync. Runs on the writer thread: it
/// must not block.
pub type GroupSink = Arc<dyn Fn(u64, u64, &WalGroup<'_>) + Send + Sync>;

/// A write group's entries in WAL framing, as the pieces the writer gathers (each entry's
/// prefix, then its batch): written with one vectored write, never copied into one buffer
/// unless a [`GroupSink`] asks for the bytes ([`WalGroup::to_bytes`]).
pub struct WalGroup<'a> {
    parts: &'a [&'a [u8]],
    len: usize,
}

impl WalGroup<'_> {
    /// The group's size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The group as one buffer (a copy; replication sends it whole).
    pub fn to_bytes(&self) -> Bytes {
        let mut out = Vec::with_capacity(self.len);
        for p in self.parts {
            out.extend_from_slice(p);
        }
        Bytes::from(out)
    }
}

/// Name of the file holding the WAL's incarnation (see [`Wal::incarnation`]).
const INCARNATION_FILE: &str = "incarnation";

struct Append {
    /// The entry's bytes before its batch (sequence and CRC set by the writer).
    prefix: [u8; ENTRY_PREFIX_BYTES],
    /// The batch itself, written from where it is held (never copied by the writer).
    batch: Bytes,
    batch_crc: BatchCrc,
    on_durable: OnDurable,
    /// When it was queued (its wait is [`WalLatency::queue`]).
    queued_at: Instant,
    /// Released once the entry is written, freeing room in the queue.
    queued: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Append {
    /// The entry's size in the WAL.
    fn len(&self) -> usize {
        ENTRY_PREFIX_BYTES + self.batch.len()
    }
}

struct WalFile {
    first_sequence: u64,
    name: String,
    bytes: u64,
}

struct Shared {
    dir: PathBuf,
    disk: Arc<dyn WalDisk>,
    files: Mutex<Vec<WalFile>>,
    durable_sequence: AtomicU64,
    failed: AtomicBool,
    /// Why the WAL stopped accepting writes (`None` while healthy); watched by the broker.
    failure: tokio::sync::watch::Sender<Option<String>>,
    /// Appends the writer failed because of a write or fsync error (this one or an earlier).
    failed_appends: AtomicU64,
    total_bytes: AtomicU64,
    sink: std::sync::OnceLock<GroupSink>,
    /// Bytes ever written (for write amplification figures).
    written_bytes: AtomicU64,
    incarnation: u64,
    new_incarnation: bool,
    latency: WalLatency,
    /// The sequences this run skipped past what the WAL kept on disk (see the module docs).
    skipped: std::ops::Range<u64>,
    /// A zero-filled spare file is being made (`Writer::preallocate_spare`).
    preallocating: Arc<AtomicBool>,
    /// A trimmed file went to the pool: from then on trimming feeds it, and zero-filling
    /// (a second write of every byte) would only compete with the WAL under load.
    recycling: AtomicBool,
    /// Unit tests: the next write stores half its bytes, then fails with ENOSPC.
    #[cfg(test)]
    fail_next_write: AtomicBool,
}

/// Handle to the WAL; cheap to clone.
#[derive(Clone)]
pub struct Wal {
    tx: mpsc::Sender<Append>,
    queue_bytes: Arc<tokio::sync::Semaphore>,
    shared: Arc<Shared>,
    settings: Arc<WalSettings>,
}

impl Wal {
    /// Opens the WAL in `settings.dir`, returning it with every whole entry found on disk, in
    /// sequence order. A torn tail of the newest file is cut off; damage anywhere else is an
    /// error, because entries after it would be lost silently.
    pub fn open(settings: WalSettings) -> Result<(Wal, Vec<WalEntry>)> {
        let disk = if settings.direct_writes {
            FsDisk::with_direct_writes(settings.dir.clone())
        } else {
            FsDisk::new(settings.dir.clone())
        };
        Wal::open_on(settings, disk, &OsRng)
    }

    /// [`Wal::open`] on a given disk, drawing a new incarnation from `rng`.
    pub fn open_on(
        settings: WalSettings,
        disk: Arc<dyn WalDisk>,
        rng: &dyn Rng,
    ) -> Result<(Wal, Vec<WalEntry>)> {
        disk.create_dir()?;
        let mut firsts = Vec::new();
        for name in disk.list()? {
            let Some(stem) = name.strip_suffix(".wal") else {
                continue;
            };
            match stem.parse::<u64>() {
                Ok(first) => firsts.push(first),
                Err(_) => {
                    tracing::warn!(file = %name, "ignoring unexpected file in WAL directory")
                }
            }
        }
        firsts.sort_unstable();
        probe_writable(&*disk)?;
        let (incarnation, new_incarnation) = read_or_create_incarnation(&*disk, rng)?;
        let mut entries = Vec::new();
        let mut files = Vec::new();
        let mut next_sequence = 0u64;
        for (i, first) in firsts.iter().copied().enumerate() {
            let name = file_name(first);
            let data = disk.read(&name)?;
            let (found, valid, tail) = parse_wal_file(&data, first);
            match tail {
                Tail::None => {}
                // A recycled file's old bytes, or a torn last write (only the newest file
                // can have one, but nothing tells them apart in an older file).
                Tail::Stale => {
                    if i + 1 == firsts.len() {
                        tracing::debug!(file = %name, dropped_bytes = data.len() - valid,
                            "cutting the newest WAL file after its last whole entry");
                        disk.truncate(&name, valid as u64)?;
                    }
                }
                Tail::Corrupt => {
                    return Err(Error::Internal(format!(
                        "WAL file {name} in {} is corrupt at byte {valid}: entries after it are intact",
                        disk.location()
                    )));
                }
            }
            if let Some(last) = found.last() {
                next_sequence = next_sequence.max(last.sequence + 1);
            }
            next_sequence = next_sequence.max(first);
            entries.extend(found);
            files.push(WalFile {
                first_sequence: first,
                name,
                bytes: valid as u64,
            });
        }
        // What this WAL kept ends here; the sequences up to `next_sequence` are skipped.
        let kept_end = next_sequence;
        if !files.is_empty() {
            // Past any group streamed to replicas but lost here (see the module docs).
            next_sequence += GROUP_ENTRIES_MAX;
        }
        if files.is_empty() || new_incarnation {
            // Sequences start over: a pooled file's old entries could carry the very
            // sequences the new files expect, so none is reused.
            disk.drain_pool()?;
        }
        let total: u64 = files.iter().map(|f| f.bytes).sum();
        let blocking = disk.blocking();
        let shared = Arc::new(Shared {
            dir: settings.dir.clone(),
            disk,
            files: Mutex::new(files),
            durable_sequence: AtomicU64::new(next_sequence),
            failed: AtomicBool::new(false),
            failure: tokio::sync::watch::channel(None).0,
            failed_appends: AtomicU64::new(0),
            total_bytes: AtomicU64::new(total),
            sink: std::sync::OnceLock::new(),
            written_bytes: AtomicU64::new(0),
            incarnation,
            new_incarnation,
            latency: WalLatency::default(),
            skipped: kept_end..next_sequence,
            preallocating: Arc::default(),
            recycling: AtomicBool::new(false),
            #[cfg(test)]
            fail_next_write: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let settings = Arc::new(settings);
        let writer = Writer {
            shared: shared.clone(),
            settings: settings.clone(),
            next_sequence,
            current: None,
            wants_spare: false,
        };
        if blocking {
            std::thread::Builder::new()
                .name("oxbow-wal".into())
                .spawn(move || writer.run(rx))?;
        } else {
            // A disk that never blocks (the simulation's): the writer is a task on the
            // caller's runtime. It ends, like the thread, when every handle is dropped.
            tokio::spawn(writer.run_task(rx));
        }
        Ok((
            Wal {
                tx,
                queue_bytes: Arc::new(tokio::sync::Semaphore::new(QUEUE_BYTES_MAX)),
                shared,
                settings,
            },
            entries,
        ))
    }

    /// Queues a batch for the WAL; `on_durable` runs on the writer thread once it is fsynced
    /// (or with the error if it cannot be). Waits only while the queue is full.
    pub async fn append(
        &self,
        tp: TopicPartition,
        leader_epoch: LeaderEpoch,
        batch: Bytes,
        batch_crc: BatchCrc,
        on_durable: OnDurable,
    ) -> Result<()> {
        self.check_accepting()?;
        // The sequence and CRC are filled in by the writer, which alone knows the order.
        let append = Append {
            prefix: entry_prefix(tp, leader_epoch, batch.len()),
            batch,
            batch_crc,
            on_durable,
            queued_at: Instant::now(),
            queued: None,
        };
        // An entry larger than the whole budget still goes through, alone.
        let want = u32::try_from(append.len().min(QUEUE_BYTES_MAX)).unwrap_or(u32::MAX);
        let queued = self
            .queue_bytes
            .clone()
            .acquire_many_owned(want)
            .await
            .map_err(|_| Error::ShuttingDown)?;
        self.tx
            .send(Append {
                queued: Some(queued),
                ..append
            })
            .await
            .map_err(|_| Error::ShuttingDown)
    }

    /// Whether an append would be accepted now (not failed, within budget).
    pub fn check_accepting(&self) -> Result<()> {
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(Error::WalFailed(self.failure().unwrap_or_default()));
        }
        if self.shared.total_bytes.load(Ordering::Acquire) >= self.settings.budget_bytes {
            return Err(Error::WalFull {
                budget_bytes: self.settings.budget_bytes,
            });
        }
        Ok(())
    }

    /// Why the WAL stopped accepting writes, or `None` while it is healthy.
    pub fn failure(&self) -> Option<String> {
        self.shared.failure.borrow().clone()
    }

    /// The sequences this run of the WAL skipped past the entries it found on disk: it
    /// never holds them (empty if it found none). Replicas are told, so a copy that ends
    /// inside them knows it lacks nothing.
    pub fn skipped(&self) -> std::ops::Range<u64> {
        self.shared.skipped.clone()
    }

    /// The writer's latency histograms.
    pub fn latency(&self) -> &WalLatency {
        &self.shared.latency
    }

    /// Watches [`Self::failure`]: changes once, when the first write or fsync fails.
    pub fn watch_failure(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.shared.failure.subscribe()
    }

    /// Appends the writer failed because a write or fsync failed.
    pub fn failed_appends(&self) -> u64 {
        self.shared.failed_appends.load(Ordering::Relaxed)
    }

    /// One past the highest sequence that is fsynced.
    pub fn durable_sequence(&self) -> u64 {
        self.shared.durable_sequence.load(Ordering::Acquire)
    }

    /// Every whole entry on disk with a sequence at or after `from` (blocking: reads files).
    pub fn read_from(&self, from: u64) -> Result<Vec<WalEntry>> {
        let mut out = Vec::new();
        for (first, data) in self.read_files()? {
            let (entries, _, _) = parse_wal_file(&data, first);
            out.extend(entries.into_iter().filter(|e| e.sequence >= from));
        }
        Ok(out)
    }

    /// The bytes of every WAL file, oldest first (blocking). A file trimmed meanwhile is
    /// skipped: everything in it was sealed.
    fn read_files(&self) -> Result<Vec<(u64, Vec<u8>)>> {
        let names: Vec<(u64, String)> = self
            .shared
            .files
            .lock()
            .map_err(|_| Error::Internal("WAL file list lock poisoned".into()))?
            .iter()
            .map(|f| (f.first_sequence, f.name.clone()))
            .collect();
        let mut out = Vec::with_capacity(names.len());
        for (first, name) in names {
            match self.shared.disk.read(&name) {
                Ok(data) => out.push((first, data)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }

    /// Every whole entry on disk, in WAL framing, one buffer per file (each at most about
    /// `file_bytes_max`, so each fits a frame; blocking: reads files): what this broker
    /// answers for its own WAL when another broker recovers its tail while it is alive.
    pub fn read_raw(&self) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        for (first, mut data) in self.read_files()? {
            let (_, valid, _) = parse_wal_file(&data, first);
            data.truncate(valid);
            out.push(data);
        }
        Ok(out)
    }

    /// Bytes written since the WAL was opened.
    pub fn written_bytes(&self) -> u64 {
        self.shared.written_bytes.load(Ordering::Relaxed)
    }

    /// Bytes the WAL holds on disk.
    pub fn bytes(&self) -> u64 {
        self.shared.total_bytes.load(Ordering::Acquire)
    }

    /// Deletes every file all of whose entries have sequence `< keep_from` (up to
    /// [`SPARE_FILES`] of them are kept for reuse instead: see `crate::wal_disk`).
    pub fn trim(&self, keep_from: u64) -> Result<()> {
        let mut files = self
            .shared
            .files
            .lock()
            .map_err(|_| Error::Internal("WAL file list lock poisoned".into()))?;
        // A file's entries all precede the next file's first sequence; the newest file is
        // never deleted (the writer is appending to it).
        let mut remove = 0;
        while remove + 1 < files.len() && files[remove + 1].first_sequence <= keep_from {
            remove += 1;
        }
        for f in files.drain(..remove) {
            self.shared.disk.recycle(&f.name, SPARE_FILES)?;
            self.shared.recycling.store(true, Ordering::Release);
            self.shared.total_bytes.fetch_sub(f.bytes, Ordering::AcqRel);
            tracing::debug!(file = %f.name, "trimmed WAL file");
        }
        Ok(())
    }

    /// The directory the WAL lives in.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Identifies this life of the WAL directory: created with the directory, so a broker
    /// whose disk was lost comes back with a new one (its sequences restart, and replicas
    /// keep the old incarnation's entries apart).
    pub fn incarnation(&self) -> u64 {
        self.shared.incarnation
    }

    /// Whether this start created the incarnation (an empty or lost WAL directory).
    pub fn is_new_incarnation(&self) -> bool {
        self.shared.new_incarnation
    }

    /// Installs the sink that sees every write group (replication); set once.
    pub fn set_group_sink(&self, sink: GroupSink) {
        let _ = self.shared.sink.set(sink);
    }
}

/// Writes, fsyncs and deletes a small file in `dir`: fails (as [`Error::WalFailed`]) when the
/// WAL could not take a write now, e.g. on a full disk.
fn probe_writable(disk: &dyn WalDisk) -> Result<()> {
    const PROBE: &str = "probe.tmp";
    let written = (|| {
        let mut f = disk.open_append(PROBE)?;
        f.set_len(0)?;
        f.write_all(&[0u8; PROBE_BYTES])?;
        f.sync()
    })();
    let removed = disk.remove(PROBE);
    written.and(removed).map_err(|e| {
        Error::WalFailed(format!(
            "the WAL directory {} cannot take writes: {e}",
            disk.location()
        ))
    })
}

fn read_or_create_incarnation(disk: &dyn WalDisk, rng: &dyn Rng) -> Result<(u64, bool)> {
    match disk.read(INCARNATION_FILE) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            match u64::from_str_radix(text.trim(), 16) {
                Ok(n) => Ok((n, false)),
                Err(_) => Err(Error::Internal(format!(
                    "{INCARNATION_FILE} in {} does not hold a hex incarnation: {text:?}",
                    disk.location()
                ))),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let n = rng.next_u64();
            disk.write_atomic(INCARNATION_FILE, format!("{n:016x}\n").as_bytes())?;
            Ok((n, true))
        }
        Err(e) => Err(e.into()),
    }
}

struct Writer {
    shared: Arc<Shared>,
    settings: Arc<WalSettings>,
    next_sequence: u64,
    current: Option<Box<dyn WalDiskFile>>,
    /// The current file was not a reused one and has not yet asked for a spare
    /// (`Writer::preallocate_spare`, once it is half full).
    wants_spare: bool,
}

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<Append>) {
        // Ends when every `Wal` handle is dropped: the queue drains first, so every queued
        // append is written and answered before the thread exits.
        while let Some(first) = rx.blocking_recv() {
            let group = Self::gather(first, &mut rx);
            self.write_group(group);
        }
        tracing::debug!("WAL writer stopped");
    }

    /// [`Writer::run`] as a task, for a disk that never blocks.
    async fn run_task(mut self, mut rx: mpsc::Receiver<Append>) {
        while let Some(first) = rx.recv().await {
            let group = Self::gather(first, &mut rx);
            self.write_group(group);
        }
        tracing::debug!("WAL writer stopped");
    }

    /// `first` and whatever else is queued now, within the group bounds.
    fn gather(first: Append, rx: &mut mpsc::Receiver<Append>) -> Vec<Append> {
        let mut group_bytes = first.len();
        let mut group = vec![first];
        while group_bytes < GROUP_BYTES_MAX && (group.len() as u64) < GROUP_ENTRIES_MAX {
            match rx.try_recv() {
                Ok(a) => {
                    group_bytes += a.len();
                    group.push(a);
                }
                Err(_) => break,
            }
        }
        group
    }

    fn write_group(&mut self, group: Vec<Append>) {
        if self.shared.failed.load(Ordering::Acquire) {
            let reason = self.shared.failure.borrow().clone().unwrap_or_default();
            self.shared
                .failed_appends
                .fetch_add(group.len() as u64, Ordering::Relaxed);
            for a in group {
                (a.on_durable)(Err(Error::WalFailed(reason.clone())));
            }
            return;
        }
        let first_sequence = self.next_sequence;
        let started = Instant::now();
        for a in &group {
            observe(&self.shared.latency.queue, started - a.queued_at);
        }
        let mut group = group;
        for a in &mut group {
            seal_prefix(&mut a.prefix, self.next_sequence, &a.batch, a.batch_crc);
            self.next_sequence += 1;
        }
        // The batches are written from where they are held (refcounted), not copied into a
        // group buffer first: one user-space pass over every byte fewer.
        let parts: Vec<&[u8]> = group
            .iter()
            .flat_map(|a| [&a.prefix[..], &a.batch[..]])
            .collect();
        let wal_group = WalGroup {
            parts: &parts,
            len: group.iter().map(Append::len).sum(),
        };
        if let Some(sink) = self.shared.sink.get() {
            sink(first_sequence, self.next_sequence, &wal_group);
        }
        let written = self.write_and_sync(first_sequence, &wal_group);
        drop(parts);
        let mut callbacks = Vec::with_capacity(group.len());
        for (sequence, a) in (first_sequence..).zip(group) {
            // Frees room in the queue; the batch itself lives on in its partition.
            drop(a.queued);
            callbacks.push((sequence, a.on_durable));
        }
        match written {
            Ok(()) => {
                for (sequence, cb) in callbacks {
                    cb(Ok(sequence));
                }
                self.shared
                    .durable_sequence
                    .store(self.next_sequence, Ordering::Release);
            }
            Err(e) => {
                let reason = format!("WAL write or fsync failed: {e}");
                self.shared.failed.store(true, Ordering::Release);
                tracing::error!(error = %e, first_sequence, "WAL write or fsync failed: this broker acknowledges no more writes");
                self.cut_back_failed_file();
                self.shared
                    .failed_appends
                    .fetch_add(callbacks.len() as u64, Ordering::Relaxed);
                for (_, cb) in callbacks {
                    cb(Err(Error::WalFailed(reason.clone())));
                }
                self.shared.failure.send_replace(Some(reason));
            }
        }
    }

    /// After a failed write or fsync: cuts the current file back to what its last
    /// successful fsync covered and stops appending to it. What the failed group left in the
    /// page cache may never reach the disk (a later fsync can succeed without writing it),
    /// so a restart must not replay it; truncating drops it from the cache and, once the
    /// truncation is fsynced, from the disk. Best effort: a restart also drops a torn tail.
    fn cut_back_failed_file(&mut self) {
        let Some(file) = self.current.take() else {
            return;
        };
        let good = match self.shared.files.lock() {
            Ok(files) => files.last().map_or(0, |f| f.bytes),
            Err(_) => return,
        };
        let mut file = file;
        match file.set_len(good) {
            Ok(()) => tracing::warn!(
                kept_bytes = good,
                "cut the WAL file back to what its last successful fsync covered"
            ),
            Err(e) => {
                tracing::error!(error = %e, "could not cut back the failed WAL file; the restart drops its torn tail")
            }
        }
    }

    /// A file that had no recycled one to reuse (a young WAL: nothing trimmed yet) is half
    /// full: zero-fill one for the next roll, off the write path — on a thread of its own
    /// for a real disk. Not at the roll itself: an idle broker (and every short-lived one a
    /// test suite starts) would hold a file of zeros it never writes.
    /// Once trimming feeds the pool, never again: a roll that finds it empty then is one
    /// that outran the sealer, and zero-filling would double the disk's writes just then.
    /// Best effort: without it the next file is appended to, as this one is.
    fn preallocate_spare(&self) {
        let (disk, bytes) = (self.shared.disk.clone(), self.settings.file_bytes_max);
        if self.shared.recycling.load(Ordering::Acquire)
            || disk.pooled().unwrap_or(SPARE_FILES) >= SPARE_FILES
            || self.shared.preallocating.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let busy = self.shared.preallocating.clone();
        let fill = move || {
            if let Err(e) = disk.preallocate(bytes) {
                tracing::warn!(error = %e, "could not zero-fill a spare WAL file; new files are appended to");
            }
            busy.store(false, Ordering::Release);
        };
        if !self.shared.disk.blocking() {
            fill();
        } else if let Err(e) = std::thread::Builder::new()
            .name("oxbow-wal-spare".into())
            .spawn(fill)
        {
            self.shared.preallocating.store(false, Ordering::Release);
            tracing::warn!(error = %e, "could not start zero-filling a spare WAL file");
        }
    }

    fn write_and_sync(&mut self, first_sequence: u64, group: &WalGroup<'_>) -> std::io::Result<()> {
        let started = Instant::now();
        let roll = {
            let files = self
                .shared
                .files
                .lock()
                .map_err(|_| std::io::Error::other("WAL file list lock poisoned"))?;
            self.current.is_none()
                || files
                    .last()
                    .is_none_or(|f| f.bytes >= self.settings.file_bytes_max)
        };
        if roll {
            let name = file_name(first_sequence);
            // Durable name included (WalDisk::open_recycled).
            let (file, reused) = self.shared.disk.open_recycled(&name)?;
            self.wants_spare = !reused;
            self.current = Some(file);
            let mut files = self
                .shared
                .files
                .lock()
                .map_err(|_| std::io::Error::other("WAL file list lock poisoned"))?;
            files.push(WalFile {
                first_sequence,
                name,
                bytes: 0,
            });
        }
        let file = self
            .current
            .as_mut()
            .ok_or_else(|| std::io::Error::other("no open WAL file"))?;
        #[cfg(test)]
        if self.shared.fail_next_write.swap(false, Ordering::AcqRel) {
            let buf = group.to_bytes();
            file.write_all(&buf[..buf.len() / 2])?;
            return Err(std::io::Error::from_raw_os_error(28));
        }
        file.write_all_vectored(group.parts)?;
        let written = Instant::now();
        observe(&self.shared.latency.write, written - started);
        file.sync()?;
        observe(&self.shared.latency.fsync, written.elapsed());
        let mut files = self
            .shared
            .files
            .lock()
            .map_err(|_| std::io::Error::other("WAL file list lock poisoned"))?;
        let mut half_full = false;
        if let Some(last) = files.last_mut() {
            last.bytes += group.len() as u64;
            half_full = last.bytes >= self.settings.file_bytes_max / 2;
        }
        drop(files);
        if half_full && std::mem::take(&mut self.wants_spare) {
            self.preallocate_spare();
        }
        self.shared
            .total_bytes
            .fetch_add(group.len() as u64, Ordering::AcqRel);
        self.shared
            .written_bytes
            .fetch_add(group.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod mem_disk_tests;
