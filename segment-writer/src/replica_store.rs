//! The replica side's disk: copies of other brokers' WALs, kept until their source says the
//! data is in the object store (`Trim`) — or read back by whoever recovers a dead source's
//! tail (`crate::leadership::recover`).
//!
//! Naming: `{dir}/b{source}/{incarnation:016x}/{first_sequence:020}.wal`, files in the WAL's
//! own entry framing (`crate::wal`), so each entry keeps the CRC its source computed. A file
//! holds contiguous sequences; a stream that restarts after a gap starts a new file.
//! The files are on a [`WalDisk`] (real ones in production, the broker's simulated disk in
//! the simulation, so crashes, injected failures and a lost disk reach the copies too).
//! Blocking I/O on a real disk: call through `run_blocking`.

use crate::error::{Error, Result};
use crate::wal::{parse_file, WalEntry};
use crate::wal_disk::{WalDisk, WalDiskFile};
use bytes::Bytes;
use oxbow_metadata::BrokerId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

struct StoredFile {
    first_sequence: u64,
    name: String,
    bytes: u64,
}

/// One incarnation of one source's WAL, as held here.
pub struct ReplicaLog {
    dir: Arc<dyn WalDisk>,
    file_bytes_max: u64,
    files: Vec<StoredFile>,
    current: Option<Box<dyn WalDiskFile>>,
    /// One past the highest stored sequence (0: nothing stored).
    next: u64,
    /// The store's counter of bytes written.
    written: Arc<std::sync::atomic::AtomicU64>,
    /// The highest sequence at which a stream began past what this copy held (a first
    /// stream into an empty copy, one after this broker lost its disk, or one the source
    /// resumed further on): entries below it may be missing, which matters until the
    /// source's sealed floor reaches it (see [`Self::complete`]).
    gap_at: Option<u64>,
    /// The highest sealed floor the source has sent (`Trim`) in this process's life.
    floor: Option<u64>,
}

fn lock<T>(m: &Mutex<T>) -> Result<std::sync::MutexGuard<'_, T>> {
    m.lock()
        .map_err(|_| Error::Internal("replica store lock poisoned".into()))
}

impl ReplicaLog {
    fn open(
        dir: Arc<dyn WalDisk>,
        file_bytes_max: u64,
        written: Arc<std::sync::atomic::AtomicU64>,
    ) -> Result<ReplicaLog> {
        dir.create_dir()?;
        let mut firsts: Vec<u64> = dir
            .list()?
            .iter()
            .filter_map(|n| n.strip_suffix(".wal").and_then(|n| n.parse().ok()))
            .collect();
        firsts.sort_unstable();
        let mut files = Vec::new();
        let mut next = 0;
        for (i, &first) in firsts.iter().enumerate() {
            let name = file_name(first);
            let data = dir.read(&name)?;
            let (mut entries, mut valid) = parse_file(&data);
            // A file ends where the next one begins: an append whose fsync failed was
            // resent into a new file, and its bytes may have reached this one anyway.
            if let Some(&following) = firsts.get(i + 1) {
                if let Some(cut) = entries.iter().position(|e| e.sequence >= following) {
                    valid = entries[..cut].iter().map(entry_len).sum();
                    entries.truncate(cut);
                }
            }
            if valid < data.len() {
                // A torn append (the replica died mid-write, or an append failed); it was
                // never acknowledged.
                dir.truncate(&name, valid as u64)?;
            }
            if let Some(last) = entries.last() {
                next = next.max(last.sequence + 1);
            }
            files.push(StoredFile {
                first_sequence: first,
                name,
                bytes: valid as u64,
            });
        }
        Ok(ReplicaLog {
            dir,
            file_bytes_max,
            files,
            current: None,
            next,
            written,
            gap_at: None,
            floor: None,
        })
    }

    /// One past the highest stored sequence.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Stores whole entries (skipping any already held) and fsyncs; returns [`Self::next`].
    pub fn append(&mut self, bytes: &[u8]) -> Result<u64> {
        let (entries, valid) = parse_file(bytes);
        if valid != bytes.len() {
            return Err(Error::Replication(format!(
                "an Entries frame failed its checks at byte {valid} of {}",
                bytes.len()
            )));
        }
        // Skip what is already held (a resent prefix after a reconnect).
        let mut skip_bytes = 0usize;
        let mut first_new = None;
        for e in &entries {
            if e.sequence < self.next {
                skip_bytes += entry_len(e);
            } else {
                first_new = Some(e.sequence);
                break;
            }
        }
        let Some(first_new) = first_new else {
            return Ok(self.next);
        };
        let gap = first_new != self.next || self.next == 0;
        let full = self
            .files
            .last()
            .is_none_or(|f| f.bytes >= self.file_bytes_max);
        if self.current.is_none() || gap || full {
            let name = file_name(first_new);
            if self
                .files
                .last()
                .is_some_and(|f| f.first_sequence == first_new)
            {
                // The file a failed append began (it holds no whole entry): start it over.
                self.dir.truncate(&name, 0)?;
                self.files.pop();
            }
            // Its name is durable once opened (WalDisk::open_append).
            let file = self.dir.open_append(&name)?;
            self.current = Some(file);
            self.files.push(StoredFile {
                first_sequence: first_new,
                name,
                bytes: 0,
            });
        }
        let data = &bytes[skip_bytes..];
        let file = self
            .current
            .as_mut()
            .ok_or_else(|| Error::Internal("no open replica file".into()))?;
        if let Err(e) = file.write_all(data).and_then(|()| file.sync()) {
            // What reached the file past its recorded length is unknown (part of it, maybe
            // unsynced): nothing is appended to it again — the next append starts a new
            // file — reads stop at the recorded length, and a reopen cuts it at its last
            // whole entry.
            self.current = None;
            return Err(e.into());
        }
        self.written
            .fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
        if let Some(f) = self.files.last_mut() {
            f.bytes += data.len() as u64;
        }
        if let Some(last) = entries.last() {
            self.next = last.sequence + 1;
        }
        Ok(self.next)
    }

    /// Deletes every file all of whose entries precede `keep_from` (never the open one).
    pub fn trim(&mut self, keep_from: u64) -> Result<()> {
        self.floor = Some(self.floor.map_or(keep_from, |f| f.max(keep_from)));
        let mut remove = 0;
        while remove + 1 < self.files.len() && self.files[remove + 1].first_sequence <= keep_from {
            remove += 1;
        }
        for f in self.files.drain(..remove) {
            self.dir.remove(&f.name)?;
        }
        Ok(())
    }

    /// Whether this copy holds everything the source holds unsealed: no stream began past
    /// what it held, or the source's sealed floor has reached the last such start (what
    /// the source itself requires of a replica it counts as in sync). An incomplete copy is
    /// not answered for a tail: counted as the source's in-sync copy, it would end a
    /// recovery without the entries it lacks (found by the simulation, seed 114: the only
    /// in-sync replica lost its disk, the source streamed to it again from its current end
    /// while its own seals failed, and the new leader recovered nothing).
    pub fn complete(&self) -> bool {
        self.gap_at
            .is_none_or(|gap| self.floor.is_some_and(|floor| floor >= gap))
    }

    /// A stream (`Hello`) begins at `start_sequence`; the source's WAL never holds the
    /// sequences `skipped` (its restart skipped past what it kept). Entries between this
    /// copy's end and the stream's start are missing unless they all lie in `skipped`: a
    /// copy that held everything the source kept before restarting lacks nothing (found by
    /// the simulation, seed 23 with the lifecycle: every replica of a restarted source
    /// counted as incomplete, so when the source then lost its disk, the one surviving copy
    /// of its acknowledged entries was not answered for).
    pub fn stream_begins(&mut self, start_sequence: u64, skipped: std::ops::Range<u64>) {
        let only_skipped = self.next >= skipped.start && start_sequence <= skipped.end;
        if start_sequence > self.next && !only_skipped {
            self.gap_at = Some(
                self.gap_at
                    .map_or(start_sequence, |g| g.max(start_sequence)),
            );
        }
    }

    /// Every stored entry, in file order.
    pub fn read_all(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for f in &self.files {
            let mut data = self.dir.read(&f.name)?;
            data.truncate(f.bytes as usize);
            out.extend_from_slice(&data);
        }
        Ok(out)
    }

    /// Bytes stored.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }
}

fn source_dir_name(source: BrokerId) -> String {
    format!("b{source}")
}

fn file_name(first_sequence: u64) -> String {
    format!("{first_sequence:020}.wal")
}

/// Framed length of an entry (header + payload), as written by the WAL.
fn entry_len(e: &WalEntry) -> usize {
    8 + 8 + 16 + 4 + 4 + e.batch.len()
}

/// Open copies by (source broker, incarnation).
type Logs = HashMap<(BrokerId, u64), Arc<Mutex<ReplicaLog>>>;

/// Every source's WAL copies on this broker.
pub struct ReplicaStore {
    /// This broker's own WAL, for tail requests about this broker itself.
    own_wal: std::sync::OnceLock<crate::wal::Wal>,
    root: Arc<dyn WalDisk>,
    file_bytes_max: u64,
    logs: Mutex<Logs>,
    written: Arc<std::sync::atomic::AtomicU64>,
}

impl ReplicaStore {
    /// The copies under `root` (`crate::wal_disk::FsDisk` on the directory in production).
    pub fn new(root: Arc<dyn WalDisk>, file_bytes_max: u64) -> ReplicaStore {
        ReplicaStore {
            own_wal: std::sync::OnceLock::new(),
            root,
            file_bytes_max,
            logs: Mutex::new(HashMap::new()),
            written: Arc::default(),
        }
    }

    fn source_dir(&self, source: BrokerId) -> Arc<dyn WalDisk> {
        self.root.subdir(&source_dir_name(source))
    }

    /// The copy of `source`'s WAL incarnation, opened (or created) on first use.
    pub fn log(&self, source: BrokerId, incarnation: u64) -> Result<Arc<Mutex<ReplicaLog>>> {
        let mut logs = lock(&self.logs)?;
        if let Some(l) = logs.get(&(source, incarnation)) {
            return Ok(l.clone());
        }
        let dir = self
            .source_dir(source)
            .subdir(&format!("{incarnation:016x}"));
        let log = Arc::new(Mutex::new(ReplicaLog::open(
            dir,
            self.file_bytes_max,
            self.written.clone(),
        )?));
        logs.insert((source, incarnation), log.clone());
        Ok(log)
    }

    /// Everything held of `source`'s WAL: (incarnation, entries in WAL framing).
    pub fn tail(&self, source: BrokerId) -> Result<Vec<(u64, Bytes)>> {
        let mut incarnations: Vec<u64> = self
            .source_dir(source)
            .list_dirs()?
            .iter()
            .filter_map(|n| u64::from_str_radix(n, 16).ok())
            .collect();
        incarnations.sort_unstable();
        let mut out = Vec::new();
        for inc in incarnations {
            let log = self.log(source, inc)?;
            let log = lock(&log)?;
            if !log.complete() {
                tracing::info!(
                    source,
                    incarnation = inc,
                    "not answering for a WAL copy that began after entries it lacks"
                );
                continue;
            }
            out.push((inc, Bytes::from(log.read_all()?)));
        }
        Ok(out)
    }

    /// Sets this broker's own WAL (once), answered by [`Self::own_tail`].
    pub fn set_own_wal(&self, wal: crate::wal::Wal) {
        let _ = self.own_wal.set(wal);
    }

    /// This broker's own WAL: (incarnation, entries in WAL framing). A broker recovering a
    /// partition from this one while it is alive (it restarted after the partition moved)
    /// needs it: its replicas may not be up, and its replica-set record no longer names
    /// them once it restarted.
    pub fn own_tail(&self) -> Result<Vec<(u64, Bytes)>> {
        match self.own_wal.get() {
            Some(wal) => {
                let mut chunks: Vec<(u64, Bytes)> = wal
                    .read_raw()?
                    .into_iter()
                    .map(|file| (wal.incarnation(), Bytes::from(file)))
                    .collect();
                if chunks.is_empty() {
                    // Still say which incarnation answers: a recovery waiting for this
                    // broker's older one learns it is gone.
                    chunks.push((wal.incarnation(), Bytes::new()));
                }
                Ok(chunks)
            }
            None => Ok(Vec::new()),
        }
    }

    /// Drops every incarnation of `source` except `keep` (the source lost its disk and has
    /// recovered what the older ones held).
    pub fn drop_other_incarnations(&self, source: BrokerId, keep: u64) -> Result<()> {
        let dir = self.source_dir(source);
        let mut logs = lock(&self.logs)?;
        for name in dir.list_dirs()? {
            let Ok(inc) = u64::from_str_radix(&name, 16) else {
                continue;
            };
            if inc != keep {
                logs.remove(&(source, inc));
                dir.remove_dir(&name)?;
            }
        }
        Ok(())
    }

    /// The sources this broker holds copies of (directories `b{source}`).
    pub fn sources(&self) -> Result<Vec<BrokerId>> {
        let mut out: Vec<BrokerId> = self
            .root
            .list_dirs()?
            .iter()
            .filter_map(|n| n.strip_prefix('b')?.parse().ok())
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// Drops every copy of `source`'s WAL (it is gone for good: see
    /// [`gone_sources`]). Returns the bytes freed.
    pub fn drop_source(&self, source: BrokerId) -> Result<u64> {
        let mut logs = lock(&self.logs)?;
        let freed = logs
            .iter()
            .filter(|((s, _), _)| *s == source)
            .filter_map(|(_, l)| l.lock().ok().map(|l| l.bytes()))
            .sum();
        logs.retain(|(s, _), _| *s != source);
        self.root.remove_dir(&source_dir_name(source))?;
        Ok(freed)
    }

    /// Bytes written for other brokers since start (for write amplification figures).
    pub fn written_bytes(&self) -> u64 {
        self.written.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Bytes held for every source.
    pub fn bytes(&self) -> u64 {
        lock(&self.logs)
            .map(|logs| {
                logs.values()
                    .filter_map(|l| l.lock().ok().map(|l| l.bytes()))
                    .sum()
            })
            .unwrap_or(0)
    }

    /// Where the copies are, for messages.
    pub fn location(&self) -> String {
        self.root.location()
    }
}

/// What decides whether a source's WAL copies are still needed (pure; the gateway feeds it).
#[derive(Clone, Debug, Default)]
pub struct SourceUse {
    /// Registered (alive) brokers.
    pub registered: std::collections::BTreeSet<BrokerId>,
    /// Brokers named by any partition's state as its leader or its `recover_from`.
    pub named: std::collections::BTreeSet<BrokerId>,
}

/// Of the `sources` held here, those whose copies nothing can need any more: not
/// registered, leading no partition, and no partition recovering from them — so every
/// partition they led has moved, and its new leader has taken their tail over (recovered
/// it, `recover_from` cleared, or received it sealed in a handoff). If such a source comes
/// back, it has its own WAL, or (disk lost) leads nothing to recover a tail for.
/// `gone_since` remembers since when each source has been seen so; a source is returned
/// once that has held for `grace` (covering the lag of the caller's view of the metadata).
pub fn gone_sources(
    sources: &[BrokerId],
    used: &SourceUse,
    gone_since: &mut std::collections::BTreeMap<BrokerId, std::time::Instant>,
    now: std::time::Instant,
    grace: std::time::Duration,
) -> Vec<BrokerId> {
    gone_since.retain(|s, _| sources.contains(s));
    let mut out = Vec::new();
    for &s in sources {
        if used.registered.contains(&s) || used.named.contains(&s) {
            gone_since.remove(&s);
            continue;
        }
        let since = *gone_since.entry(s).or_insert(now);
        if now.saturating_duration_since(since) >= grace {
            out.push(s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::encode_payload_for_test as entry;
    use oxbow_metadata::{TopicId, TopicPartition};

    fn tp() -> TopicPartition {
        TopicPartition::new(TopicId(uuid::Uuid::from_u128(7)), 0)
    }

    /// The store's behaviour on either disk (the conformance of the seam it runs on is
    /// `wal_disk`'s; this is the store's own, run on both).
    fn on_both_disks(test: impl Fn(Arc<dyn WalDisk>)) {
        let dir = tempfile::tempdir().expect("tmp");
        test(crate::wal_disk::FsDisk::new(dir.path().join("replicas")));
        test(Arc::new(crate::wal_disk::MemDisk::new("replicas")));
    }

    #[test]
    fn a_restarted_sources_skip_is_no_gap_but_missing_entries_are() {
        let disk: Arc<dyn WalDisk> = Arc::new(crate::wal_disk::MemDisk::new("replicas"));
        let store = ReplicaStore::new(disk, 1 << 20);
        let log = store.log(2, 9).expect("log");
        let mut log = log.lock().expect("lock");
        let buf: Vec<u8> = (0..5).flat_map(|s| entry(s, tp(), 1, b"batch")).collect();
        assert_eq!(log.append(&buf).expect("append"), 5);
        // The source restarted having kept 0..5 and skipped 5..4101: nothing is missing.
        log.stream_begins(4101, 5..4101);
        assert!(log.complete());
        // It kept 0..7 (two entries this copy never got), then skipped 7..4103: missing.
        log.stream_begins(4103, 7..4103);
        assert!(!log.complete());
        let store = ReplicaStore::new(Arc::new(crate::wal_disk::MemDisk::new("replicas")), 1 << 20);
        let fresh = store.log(2, 9).expect("log");
        let mut fresh = fresh.lock().expect("lock");
        assert_eq!(fresh.append(&buf).expect("append"), 5);
        // An older source tells no skip; a stream past the copy's end is a gap, as before.
        fresh.stream_begins(4101, 0..0);
        assert!(!fresh.complete());
    }

    #[test]
    fn stores_skips_resent_entries_and_survives_reopen() {
        on_both_disks(stores_skips_resent_entries_and_survives_reopen_on);
    }

    fn stores_skips_resent_entries_and_survives_reopen_on(disk: Arc<dyn WalDisk>) {
        let store = ReplicaStore::new(disk.clone(), 1 << 20);
        let log = store.log(2, 9).expect("log");
        let mut buf = Vec::new();
        for s in 0..3 {
            buf.extend(entry(s, tp(), 1, b"batch"));
        }
        assert_eq!(log.lock().expect("lock").append(&buf).expect("append"), 3);
        // A resend overlapping what is held stores only the new entry.
        let mut again = entry(2, tp(), 1, b"batch");
        again.extend(entry(3, tp(), 1, b"batch"));
        assert_eq!(log.lock().expect("lock").append(&again).expect("append"), 4);
        drop(log);
        let reopened = ReplicaStore::new(disk, 1 << 20);
        let tail = reopened.tail(2).expect("tail");
        assert_eq!(tail.len(), 1);
        let (entries, valid) = parse_file(&tail[0].1);
        assert_eq!(valid, tail[0].1.len());
        let seqs: Vec<u64> = entries.iter().map(|e| e.sequence).collect();
        assert_eq!(seqs, vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_corrupt_frame_is_refused_and_trim_deletes_old_files() {
        on_both_disks(a_corrupt_frame_is_refused_and_trim_deletes_old_files_on);
    }

    fn a_corrupt_frame_is_refused_and_trim_deletes_old_files_on(disk: Arc<dyn WalDisk>) {
        let store = ReplicaStore::new(disk, 1);
        let log = store.log(2, 1).expect("log");
        let mut bad = entry(0, tp(), 1, b"batch");
        let n = bad.len();
        bad[n - 1] ^= 1;
        assert!(log.lock().expect("lock").append(&bad).is_err());
        for s in 0..4 {
            log.lock()
                .expect("lock")
                .append(&entry(s, tp(), 1, b"b"))
                .expect("append");
        }
        log.lock().expect("lock").trim(3).expect("trim");
        let (entries, _) = parse_file(&log.lock().expect("lock").read_all().expect("read"));
        assert_eq!(entries.first().map(|e| e.sequence), Some(3));
        store.drop_other_incarnations(2, 99).expect("drop");
        assert!(store.tail(2).expect("tail").is_empty());
    }

    #[test]
    fn a_source_is_gone_only_after_the_grace_with_nothing_naming_it() {
        use std::collections::{BTreeMap, BTreeSet};
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let grace = Duration::from_secs(600);
        let mut since = BTreeMap::new();
        let mut used = SourceUse {
            registered: BTreeSet::from([1]),
            named: BTreeSet::from([2]),
        };
        // 1 alive, 2 still named (a partition recovers from it), 3 gone: only 3, after grace.
        assert!(gone_sources(&[1, 2, 3], &used, &mut since, t0, grace).is_empty());
        assert_eq!(
            gone_sources(&[1, 2, 3], &used, &mut since, t0 + grace, grace),
            vec![3]
        );
        // 2's partitions are taken over: its own grace starts now.
        used.named.clear();
        assert_eq!(
            gone_sources(&[1, 2, 3], &used, &mut since, t0 + grace, grace),
            vec![3]
        );
        assert_eq!(
            gone_sources(&[1, 2, 3], &used, &mut since, t0 + grace * 2, grace),
            vec![2, 3]
        );
        // Seen again (registered) resets it.
        used.registered.insert(3);
        assert_eq!(
            gone_sources(&[2, 3], &used, &mut since, t0 + grace * 3, grace),
            vec![2]
        );
        assert!(!since.contains_key(&3));
    }

    #[test]
    fn dropping_a_source_removes_its_copies() {
        on_both_disks(dropping_a_source_removes_its_copies_on);
    }

    fn dropping_a_source_removes_its_copies_on(disk: Arc<dyn WalDisk>) {
        let store = ReplicaStore::new(disk, 1 << 20);
        for (source, inc) in [(2, 7), (2, 8), (3, 1)] {
            store.log(source, inc).expect("log");
        }
        assert_eq!(store.sources().expect("sources"), vec![2, 3]);
        store.drop_source(2).expect("drop");
        assert_eq!(store.sources().expect("sources"), vec![3]);
        assert!(store.tail(2).expect("tail").is_empty());
    }

    #[test]
    fn a_failed_append_is_never_half_read_and_the_next_one_starts_a_new_file() {
        use crate::wal_disk::{DiskFaults, MemDisk};
        let disk = MemDisk::new("b3");
        let store = ReplicaStore::new(Arc::new(disk.clone()), 1 << 20);
        let log = store.log(2, 1).expect("log");
        let append = |seqs: std::ops::Range<u64>| {
            let buf: Vec<u8> = seqs.flat_map(|s| entry(s, tp(), 1, b"batch")).collect();
            log.lock().expect("lock").append(&buf)
        };
        assert_eq!(append(0..2).expect("append"), 2);
        // A full disk stores half of the next frame, an fsync failure leaves it unsynced:
        // either way the copy answers for what it held before, and the source's resend
        // lands whole in a new file.
        for faults in [
            DiskFaults {
                full: true,
                sync_fails: false,
            },
            DiskFaults {
                full: false,
                sync_fails: true,
            },
        ] {
            disk.set_faults(faults);
            let before = log.lock().expect("lock").next();
            assert!(append(before..before + 2).is_err(), "{faults:?}");
            let (entries, valid) = parse_file(&log.lock().expect("lock").read_all().expect("read"));
            assert_eq!(entries.len() as u64, before, "{faults:?}");
            assert_eq!(entries.last().map(|e| e.sequence), Some(before - 1));
            assert!(valid > 0);
            disk.set_faults(DiskFaults::default());
            assert_eq!(append(before..before + 2).expect("resend"), before + 2);
        }
        let seqs = |bytes: &[u8]| -> Vec<u64> {
            let (entries, valid) = parse_file(bytes);
            assert_eq!(valid, bytes.len());
            entries.iter().map(|e| e.sequence).collect()
        };
        assert_eq!(
            seqs(&log.lock().expect("lock").read_all().expect("read")),
            (0..6).collect::<Vec<_>>()
        );
        // A crash keeps the synced files; a reopen cuts each at its last whole entry and
        // answers the same entries.
        drop(log);
        disk.crash(|_, pending| pending / 2);
        let reopened = ReplicaStore::new(Arc::new(disk.clone()), 1 << 20);
        let tail = reopened.tail(2).expect("tail");
        assert_eq!(tail.len(), 1);
        assert_eq!(seqs(&tail[0].1), (0..6).collect::<Vec<_>>());
    }

    #[test]
    fn a_failure_on_a_fresh_file_starts_that_file_over() {
        use crate::wal_disk::{DiskFaults, MemDisk};
        let disk = MemDisk::new("b3");
        let store = ReplicaStore::new(Arc::new(disk.clone()), 1 << 20);
        let log = store.log(2, 1).expect("log");
        disk.set_faults(DiskFaults {
            full: true,
            sync_fails: false,
        });
        let first = entry(0, tp(), 1, b"batch");
        assert!(log.lock().expect("lock").append(&first).is_err());
        disk.set_faults(DiskFaults::default());
        assert_eq!(log.lock().expect("lock").append(&first).expect("again"), 1);
        let all = log.lock().expect("lock").read_all().expect("read");
        assert_eq!(
            all, first,
            "the half frame is gone, the whole one is there once"
        );
    }
}
