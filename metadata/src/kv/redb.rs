//! [`RedbKv`]: the [`Kv`] model on a `redb` file (or redb's in-memory backend), for the
//! single-node embedded backend.
//!
//! Lifecycle: opened by `oxbow serve` at `{data-dir}/metadata.redb` (through
//! [`crate::EmbeddedStore`]); every write is one redb write transaction committed with
//! immediate durability (fsync) before the call returns. Writers are serialized by one
//! process-local lock held from the transaction's start until its events are published, so
//! revisions and watch events follow commit order.
//!
//! Tables (format version 2; version 1 was one table per record kind, migrated on open by
//! [`crate::embedded`]):
//! - `kv`: key → record: `create_revision`, `mod_revision`, `version`, `lease` (each i64
//!   big-endian, 32 bytes) ‖ value.
//! - `kv_leased`: lease id (i64 BE) ‖ key → (): the keys bound to each lease, so a lease's
//!   end deletes them without a scan.
//! - `kv_meta`: `revision` → the store's revision; `next_lease` → the next lease id.
//!
//! Leases live in this process's memory: on one node "the process is gone" is exactly "the
//! lease expired", so at open every key bound to a lease of an earlier process is deleted,
//! and lease ids keep counting from `next_lease` so a stale id never names a live lease.
//! Expiry reads the injected [`Clock`] (paused tokio time expires leases on simulated time):
//! every operation first expires the overdue leases, and a reaper task (started when the
//! store is opened inside a tokio runtime, aborted when the last handle is dropped) does it
//! every [`REAPER_INTERVAL`] so deletions are seen by watchers without a caller's nudge.
//!
//! Watch history is in memory (`redb_watch.rs`): the last
//! [`HISTORY_EVENTS_MAX`](super::redb_watch::HISTORY_EVENTS_MAX) events since open. A watch
//! from an older revision (or one before this process opened the file) ends at once, as an
//! etcd watch from a compacted revision does; its reader re-reads and watches again.
//! [`Kv::compact`] drops the history's events before the revision it is given (etcd's rule,
//! so a watch resumes within the same window on both backends); the file holds no history
//! at all, only current keys, so it stays as large as the live data (redb reuses freed
//! pages; it gives space back to the filesystem only when compacted offline).
//!
//! redb calls block: on a file they run on tokio's blocking pool; in memory they run inline
//! (nothing waits on a disk), which keeps a simulated run on one thread.

use super::redb_records::{bounds, empty, encode_record, leased_key, read_key, read_range};
use super::redb_watch::WatchHub;
use super::{
    ttl_secs, Compare, EventKind, Get, KeyRange, KeyValue, Kv, KvStatus, Op, OpResult,
    RangeResponse, Revision, Txn, TxnResponse, WatchEvent,
};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::store::{Lease, LeaseId};
use crate::watch::Watch;
use redb::{
    Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, Table, TableDefinition,
    WriteTransaction,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::time::Instant;

const KV: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");
const KV_LEASED: TableDefinition<&[u8], ()> = TableDefinition::new("kv_leased");
const KV_META: TableDefinition<&str, i64> = TableDefinition::new("kv_meta");
const META_REVISION: &str = "revision";
const META_NEXT_LEASE: &str = "next_lease";
/// How often the reaper looks for expired leases: well under the shortest TTL.
pub const REAPER_INTERVAL: Duration = Duration::from_millis(100);

pub(super) fn storage<E: std::fmt::Display>(e: E) -> Error {
    Error::Storage(e.to_string())
}

/// Locks a mutex whose data stays consistent even if a holder panicked (every critical
/// section leaves it valid), so poisoning is ignored rather than turned into a panic.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn meta(txn: &WriteTransaction, name: &str) -> Result<i64> {
    let t = txn.open_table(KV_META).map_err(storage)?;
    let value = t.get(name).map_err(storage)?.map(|v| v.value());
    Ok(value.unwrap_or(0))
}

fn set_meta(txn: &WriteTransaction, name: &str, value: i64) -> Result<()> {
    let mut t = txn.open_table(KV_META).map_err(storage)?;
    t.insert(name, value).map_err(storage)?;
    Ok(())
}

/// The writes of one revision, applied inside a redb write transaction.
struct Writer<'t> {
    kv: Table<'t, &'static [u8], &'static [u8]>,
    leased: Table<'t, &'static [u8], ()>,
    revision: Revision,
    events: Vec<WatchEvent>,
}

impl<'t> Writer<'t> {
    fn new(txn: &'t WriteTransaction, revision: Revision) -> Result<Self> {
        Ok(Writer {
            kv: txn.open_table(KV).map_err(storage)?,
            leased: txn.open_table(KV_LEASED).map_err(storage)?,
            revision,
            events: Vec::new(),
        })
    }

    fn put(&mut self, key: &[u8], value: &[u8], lease: LeaseId) -> Result<()> {
        let prev = read_key(&self.kv, key)?;
        let kv = KeyValue {
            key: key.to_vec(),
            value: value.to_vec(),
            create_revision: prev.as_ref().map_or(self.revision, |p| p.create_revision),
            mod_revision: self.revision,
            version: prev.as_ref().map_or(0, |p| p.version) + 1,
            lease,
        };
        if let Some(p) = prev.as_ref().filter(|p| p.lease != 0) {
            self.leased
                .remove(leased_key(p.lease, key).as_slice())
                .map_err(storage)?;
        }
        if lease != 0 {
            self.leased
                .insert(leased_key(lease, key).as_slice(), ())
                .map_err(storage)?;
        }
        self.kv
            .insert(key, encode_record(&kv).as_slice())
            .map_err(storage)?;
        self.events.push(WatchEvent {
            kind: EventKind::Put,
            kv,
            prev,
        });
        Ok(())
    }

    fn delete(&mut self, range: &KeyRange) -> Result<usize> {
        let (gone, _) = read_range(&self.kv, &Get::new(range.clone()))?;
        for prev in &gone {
            self.kv.remove(prev.key.as_slice()).map_err(storage)?;
            if prev.lease != 0 {
                self.leased
                    .remove(leased_key(prev.lease, &prev.key).as_slice())
                    .map_err(storage)?;
            }
        }
        let count = gone.len();
        for prev in gone {
            self.events.push(WatchEvent {
                kind: EventKind::Delete,
                kv: KeyValue {
                    key: prev.key.clone(),
                    value: Vec::new(),
                    create_revision: 0,
                    mod_revision: self.revision,
                    version: 0,
                    lease: 0,
                },
                prev: Some(prev),
            });
        }
        Ok(count)
    }

    /// Deletes every key bound to `lease`.
    fn delete_leased(&mut self, lease: LeaseId) -> Result<()> {
        let start = lease.to_be_bytes();
        let keys: Vec<Vec<u8>> = {
            let range = match lease.checked_add(1) {
                Some(next) => self
                    .leased
                    .range::<&[u8]>(start.as_slice()..next.to_be_bytes().as_slice()),
                None => self.leased.range::<&[u8]>(start.as_slice()..),
            }
            .map_err(storage)?;
            let mut keys = Vec::new();
            for item in range {
                let (k, _) = item.map_err(storage)?;
                keys.push(k.value().get(8..).unwrap_or_default().to_vec());
            }
            keys
        };
        for key in keys {
            self.delete(&KeyRange::key(key))?;
        }
        Ok(())
    }
}

struct LeaseState {
    deadline: Instant,
    ttl: Duration,
}

/// Process-local state, behind the writers' lock.
struct State {
    revision: Revision,
    next_lease: LeaseId,
    leases: HashMap<LeaseId, LeaseState>,
    /// Watchers and the recent history they start from.
    watches: WatchHub,
}

struct Inner {
    db: Database,
    /// The file, for its size ([`Kv::status`]); `None` in memory.
    path: Option<PathBuf>,
    clock: Arc<dyn Clock>,
    /// Run redb calls on the blocking pool (a file) rather than inline (memory).
    blocking: bool,
    state: Mutex<State>,
    reaper: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.reaper).take() {
            task.abort();
        }
    }
}

/// What [`RedbKv`] imports on open: `(key, value)` pairs to write as revision 1 of an empty
/// store (a file in an older layout, read and cleared in the same write transaction).
pub(crate) type Upgrade<'a> = &'a dyn Fn(&WriteTransaction) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;

/// [`Kv`] on `redb` (see the module docs).
#[derive(Clone)]
pub struct RedbKv {
    inner: Arc<Inner>,
}

impl RedbKv {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path, clock: Arc<dyn Clock>) -> Result<Self> {
        Self::open_with_upgrade(path, clock, &|_| Ok(Vec::new()))
    }

    /// A store that lives in memory only.
    pub fn in_memory(clock: Arc<dyn Clock>) -> Result<Self> {
        let db = Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(storage)?;
        Self::init(db, None, clock, false, &|_| Ok(Vec::new()))
    }

    pub(crate) fn open_with_upgrade(
        path: &Path,
        clock: Arc<dyn Clock>,
        upgrade: Upgrade<'_>,
    ) -> Result<Self> {
        let db = Database::create(path)
            .map_err(|e| Error::Storage(format!("opening {}: {e}", path.display())))?;
        Self::init(db, Some(path.to_path_buf()), clock, true, upgrade)
    }

    fn init(
        db: Database,
        path: Option<PathBuf>,
        clock: Arc<dyn Clock>,
        blocking: bool,
        upgrade: Upgrade<'_>,
    ) -> Result<Self> {
        let txn = db.begin_write().map_err(storage)?;
        let (revision, next_lease) = {
            let imported = upgrade(&txn)?;
            let mut revision = meta(&txn, META_REVISION)?;
            let mut writer = Writer::new(&txn, revision + 1)?;
            let fresh = writer.kv.is_empty().map_err(storage)?;
            if !imported.is_empty() {
                if !fresh {
                    return Err(Error::Storage(
                        "metadata file holds both the old and the new layout".into(),
                    ));
                }
                for (k, v) in &imported {
                    writer.put(k, v, 0)?;
                }
            }
            // Keys bound to leases of an earlier process: their leases died with it.
            let stale: Vec<LeaseId> = {
                let mut leases = Vec::new();
                for item in writer.leased.iter().map_err(storage)? {
                    let (k, _) = item.map_err(storage)?;
                    let id: [u8; 8] = k
                        .value()
                        .get(..8)
                        .and_then(|b| b.try_into().ok())
                        .ok_or_else(|| Error::Storage("kv_leased key without a lease".into()))?;
                    let id = i64::from_be_bytes(id);
                    if leases.last() != Some(&id) {
                        leases.push(id);
                    }
                }
                leases
            };
            for lease in stale {
                writer.delete_leased(lease)?;
            }
            if !writer.events.is_empty() {
                revision += 1;
            }
            drop(writer);
            set_meta(&txn, META_REVISION, revision)?;
            let next_lease = meta(&txn, META_NEXT_LEASE)?.max(1);
            (revision, next_lease)
        };
        txn.commit().map_err(storage)?;
        let inner = Arc::new(Inner {
            db,
            path,
            clock,
            blocking,
            state: Mutex::new(State {
                revision,
                next_lease,
                leases: HashMap::new(),
                watches: WatchHub::new(revision),
            }),
            reaper: Mutex::new(None),
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let weak: Weak<Inner> = Arc::downgrade(&inner);
            let clock = inner.clock.clone();
            let task = rt.spawn(async move {
                loop {
                    clock.sleep(REAPER_INTERVAL).await;
                    let Some(inner) = weak.upgrade() else { break };
                    // `run` expires overdue leases first (off the runtime's threads for a
                    // file); with none overdue it writes nothing.
                    let kv = RedbKv { inner };
                    if let Err(e) = kv.run(|_, _| Ok(())).await {
                        tracing::warn!(error = %e, "expiring leases failed; retrying");
                    }
                }
            });
            *lock(&inner.reaper) = Some(task);
        }
        Ok(RedbKv { inner })
    }

    /// Runs `f` with the writers' lock held and overdue leases expired first.
    async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner, &mut State) -> Result<T> + Send + 'static,
    {
        // "Now" is read here, on the runtime whose (maybe paused) clock it follows.
        let now = self.inner.clock.now();
        self.dispatch(move |inner| {
            let mut state = lock(&inner.state);
            inner.expire(&mut state, now)?;
            f(inner, &mut state)
        })
        .await
    }

    /// Runs `f` on a read snapshot (and the revision it is at), after expiring overdue
    /// leases; without waiting for the writers' lock, so reads do not wait for a write's
    /// fsync. (If a writer holds the lock, a lease that expired just now may still show its
    /// keys for that long; etcd's expiry is as asynchronous.)
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&redb::ReadTransaction, Revision) -> Result<T> + Send + 'static,
    {
        let now = self.inner.clock.now();
        self.dispatch(move |inner| {
            let state = match inner.state.try_lock() {
                Ok(state) => Some(state),
                Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            };
            if let Some(mut state) = state {
                if state.leases.values().any(|l| l.deadline <= now) {
                    inner.expire(&mut state, now)?;
                }
            }
            let txn = inner.db.begin_read().map_err(storage)?;
            let revision = {
                let meta = txn.open_table(KV_META).map_err(storage)?;
                let value = meta.get(META_REVISION).map_err(storage)?.map(|v| v.value());
                value.unwrap_or(0)
            };
            f(&txn, revision)
        })
        .await
    }

    /// Runs a blocking job: inline in memory, on the blocking pool for a file.
    async fn dispatch<T, F>(&self, job: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T> + Send + 'static,
    {
        if self.inner.blocking {
            let inner = self.inner.clone();
            tokio::task::spawn_blocking(move || job(&inner))
                .await
                .map_err(|e| Error::Storage(format!("metadata task failed: {e}")))?
        } else {
            job(&self.inner)
        }
    }
}

/// Whether every compare holds against `table` (see the module docs of [`super`]).
fn compares_hold(
    table: &impl ReadableTable<&'static [u8], &'static [u8]>,
    when: &[Compare],
) -> Result<bool> {
    for c in when {
        let holds = if empty(&c.range) {
            c.holds_for(None)
        } else {
            let (kvs, _) = read_range(table, &Get::new(c.range.clone()))?;
            if kvs.is_empty() {
                c.holds_for(None)
            } else {
                kvs.iter().all(|kv| c.holds_for(Some(kv)))
            }
        };
        if !holds {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A transaction that only reads, on a snapshot.
fn read_only_txn(txn: &redb::ReadTransaction, revision: Revision, t: &Txn) -> Result<TxnResponse> {
    let table = txn.open_table(KV).map_err(storage)?;
    let succeeded = compares_hold(&table, &t.when)?;
    let ops = if succeeded { &t.then } else { &t.otherwise };
    let mut results = Vec::with_capacity(ops.len());
    for op in ops {
        let Op::Get(get) = op else {
            return Err(Error::Storage("a read-only transaction writes".into()));
        };
        let (kvs, more) = read_range(&table, get)?;
        results.push(OpResult::Get(RangeResponse {
            kvs,
            more,
            revision,
        }));
    }
    Ok(TxnResponse {
        succeeded,
        revision,
        results,
    })
}

impl Inner {
    /// One revision's writes: `f` applies them; committed (and published) only if it wrote
    /// something.
    fn write<T>(
        &self,
        state: &mut State,
        f: impl FnOnce(&mut Writer<'_>) -> Result<T>,
    ) -> Result<T> {
        let txn = self.db.begin_write().map_err(storage)?;
        let (out, events) = {
            let mut writer = Writer::new(&txn, state.revision + 1)?;
            let out = f(&mut writer)?;
            (out, std::mem::take(&mut writer.events))
        };
        if events.is_empty() {
            txn.abort().map_err(storage)?;
            return Ok(out);
        }
        set_meta(&txn, META_REVISION, state.revision + 1)?;
        txn.commit().map_err(storage)?;
        state.revision += 1;
        state.watches.publish(events);
        Ok(out)
    }

    /// Ends every lease past its deadline, one revision each.
    fn expire(&self, state: &mut State, now: Instant) -> Result<()> {
        let mut overdue: Vec<LeaseId> = state
            .leases
            .iter()
            .filter(|(_, l)| l.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        overdue.sort_unstable();
        for id in overdue {
            self.write(state, |w| w.delete_leased(id))?;
            state.leases.remove(&id);
        }
        Ok(())
    }

    fn txn(&self, state: &mut State, txn: Txn) -> Result<TxnResponse> {
        let wtxn = self.db.begin_write().map_err(storage)?;
        let mut writer = Writer::new(&wtxn, state.revision + 1)?;
        let succeeded = compares_hold(&writer.kv, &txn.when)?;
        let ops = if succeeded { &txn.then } else { &txn.otherwise };
        if let Some(why) = Txn::branch_conflict(ops) {
            return Err(Error::InvalidRequest(why));
        }
        for op in ops {
            if let Op::Put { lease, .. } = op {
                if *lease != 0 && !state.leases.contains_key(lease) {
                    return Err(Error::LeaseExpired(*lease));
                }
            }
        }
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            results.push(match op {
                Op::Get(get) => {
                    let (kvs, more) = read_range(&writer.kv, get)?;
                    OpResult::Get(RangeResponse {
                        kvs,
                        more,
                        revision: state.revision,
                    })
                }
                Op::Put { key, value, lease } => {
                    writer.put(key, value, *lease)?;
                    OpResult::Put
                }
                Op::Delete(range) => OpResult::Delete {
                    deleted: writer.delete(range)?,
                },
            });
        }
        let events = std::mem::take(&mut writer.events);
        drop(writer);
        if events.is_empty() {
            wtxn.abort().map_err(storage)?;
        } else {
            set_meta(&wtxn, META_REVISION, state.revision + 1)?;
            wtxn.commit().map_err(storage)?;
            state.revision += 1;
            state.watches.publish(events);
        }
        Ok(TxnResponse {
            succeeded,
            revision: state.revision,
            results,
        })
    }
}

impl State {
    /// Forgets the history before `revision` (see [`Kv::compact`]).
    fn compact(&mut self, revision: Revision) -> Result<()> {
        if revision > self.revision {
            return Err(Error::InvalidRequest(format!(
                "cannot compact at revision {revision}: the store is at {}",
                self.revision
            )));
        }
        self.watches.compact(revision);
        Ok(())
    }
}

#[async_trait::async_trait]
impl Kv for RedbKv {
    async fn range(&self, get: Get) -> Result<RangeResponse> {
        self.read(move |txn, revision| {
            let table = txn.open_table(KV).map_err(storage)?;
            let (kvs, more) = read_range(&table, &get)?;
            Ok(RangeResponse {
                kvs,
                more,
                revision,
            })
        })
        .await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        let reads_only = txn
            .then
            .iter()
            .chain(&txn.otherwise)
            .all(|op| matches!(op, Op::Get(_)));
        if reads_only {
            return self
                .read(move |snapshot, revision| read_only_txn(snapshot, revision, &txn))
                .await;
        }
        self.run(move |inner, state| inner.txn(state, txn)).await
    }

    async fn watch(
        &self,
        range: KeyRange,
        from: Option<Revision>,
    ) -> Result<Watch<Vec<WatchEvent>>> {
        self.run(move |_, state| Ok(state.watches.watch(range, from, state.revision)))
            .await
    }

    async fn grant(&self, ttl: Duration) -> Result<Lease> {
        let ttl = Duration::from_secs(ttl_secs(ttl).max(1) as u64);
        let now = self.inner.clock.now();
        self.run(move |inner, state| {
            let id = state.next_lease;
            // Persisted before use, so no later process hands the same id out again.
            let txn = inner.db.begin_write().map_err(storage)?;
            set_meta(&txn, META_NEXT_LEASE, id + 1)?;
            txn.commit().map_err(storage)?;
            state.next_lease = id + 1;
            state.leases.insert(
                id,
                LeaseState {
                    deadline: now + ttl,
                    ttl,
                },
            );
            Ok(Lease { id, ttl })
        })
        .await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration> {
        let now = self.inner.clock.now();
        self.run(move |_, state| {
            let l = state
                .leases
                .get_mut(&lease)
                .ok_or(Error::LeaseExpired(lease))?;
            l.deadline = now + l.ttl;
            Ok(l.ttl)
        })
        .await
    }

    async fn revoke(&self, lease: LeaseId) -> Result<()> {
        self.run(move |inner, state| {
            if state.leases.remove(&lease).is_some() {
                inner.write(state, |w| w.delete_leased(lease))?;
            }
            Ok(())
        })
        .await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.run(move |_, state| state.compact(revision)).await
    }

    async fn count(&self, range: KeyRange) -> Result<u64> {
        self.read(move |txn, _| {
            if empty(&range) {
                return Ok(0);
            }
            let table = txn.open_table(KV).map_err(storage)?;
            let mut n = 0u64;
            for item in table.range::<&[u8]>(bounds(&range)).map_err(storage)? {
                item.map_err(storage)?;
                n += 1;
            }
            Ok(n)
        })
        .await
    }

    async fn status(&self) -> Result<KvStatus> {
        let (revision, floor) = {
            let state = lock(&self.inner.state);
            (state.revision, state.watches.floor())
        };
        let path = self.inner.path.clone();
        let db_bytes = self
            .dispatch(move |_| match &path {
                Some(p) => std::fs::metadata(p).map(|m| m.len()).map_err(|e| {
                    Error::Storage(format!("reading the size of {}: {e}", p.display()))
                }),
                None => Ok(0),
            })
            .await?;
        Ok(KvStatus {
            revision,
            compacted_revision: Some(floor + 1),
            db_bytes,
            db_bytes_in_use: None,
        })
    }
}
