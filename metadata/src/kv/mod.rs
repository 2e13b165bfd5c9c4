//! The key-value seam under every metadata backend: etcd's data model, kept small.
//!
//! The domain rules (fencing, compare-and-swap of versioned records, catalog contiguity and
//! replace, counters, controller election) are written once, in [`crate::kv_store`], over
//! this trait; a backend only has to be a [`Kv`]:
//! - [`EtcdKv`]: etcd v3 through `etcd-client` (connection, retry and timeout policy);
//! - [`RedbKv`]: a `redb` file (or redb's in-memory backend) on one node, with revisions,
//!   leases that expire on an injected [`crate::Clock`], and watches.
//!
//! The model (every implementation honours it; `tests/kv_conformance.rs` checks it):
//! - Keys and values are bytes; keys sort bytewise. A [`KeyRange`] is one key, `[start,
//!   end)`, or every key from `start` on.
//! - Every successful write ([`Kv::txn`] that changed something, lease expiry) is one new
//!   **revision** of the whole store, strictly increasing and never reused, even across
//!   restarts. Each key carries the revision that created it, the one that last changed it
//!   and its version (number of puts since creation); an absent key has all three 0.
//! - [`Kv::txn`] evaluates its [`Compare`]s atomically against the current state, then runs
//!   either the `then` ops or the `otherwise` ops, all in one revision. A compare over a
//!   range holds iff it holds for every key in it; over no key it compares the absent key
//!   (all zeros), except that a value compare on no key fails (etcd's rule). One branch may
//!   not put the same key twice nor put a key it also deletes ([`crate::ErrorKind::Invalid`];
//!   etcd refuses such requests, so the embedded backend does too).
//! - A put bound to a lease vanishes (one delete per key, in one revision) when the lease
//!   expires or is revoked. A put bound to a lease that is gone fails with
//!   [`crate::Error::LeaseExpired`]. Lease TTLs are whole seconds (rounded up).
//! - [`Kv::watch`] streams the puts and deletes of a range in revision order, from a
//!   revision (or from the next one), each with the key's previous state. Each item is the
//!   events of one or more whole revisions (a transaction deleting a thousand keys is one
//!   item, not a thousand). The stream is a bounded [`Watch`]: it **ends** when its reader
//!   falls [`crate::watch::WATCH_CAPACITY`] items behind, when the backend loses it, or at once when the start revision's history
//!   is gone (compacted); the reader then reads the current state and watches again.
//! - History is kept until [`Kv::compact`] discards it (etcd keeps every revision until
//!   compacted, and refuses writes once its database reaches its quota; Oxbow compacts it
//!   itself, keeping a retention window its watches resume within). Compaction changes no
//!   key: it ends the watches whose next revision to deliver is below the compacted one
//!   (one started from an older revision, or an etcd watch whose delivery lags that far),
//!   never one that keeps up.

mod etcd;
mod meter;
mod redb;
mod redb_records;
mod redb_watch;

pub use self::etcd::EtcdKv;
pub use self::meter::KvMeter;
pub use self::redb::RedbKv;

use crate::error::Result;
use crate::store::{Lease, LeaseId};
use crate::watch::Watch;
use std::time::Duration;

/// A revision of the whole store (etcd's `mod_revision`/`header.revision`); 0 = never.
pub type Revision = i64;

/// One key with its value and history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    pub key: Vec<u8>,
    /// Empty for `keys_only` reads and for the key of a delete event.
    pub value: Vec<u8>,
    /// The revision that created the key (since its last deletion).
    pub create_revision: Revision,
    /// The revision that last changed it (for a delete event: the deletion's revision).
    pub mod_revision: Revision,
    /// Puts since creation, from 1.
    pub version: i64,
    /// The lease the key is bound to; 0 = none.
    pub lease: LeaseId,
}

/// Which keys an operation covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRange {
    pub start: Vec<u8>,
    pub end: RangeEnd,
}

/// Where a [`KeyRange`] stops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangeEnd {
    /// Only `start` itself.
    Single,
    /// Every key in `[start, end)`.
    Before(Vec<u8>),
    /// Every key from `start` on.
    Unbounded,
}

impl KeyRange {
    /// Exactly `key`.
    pub fn key(key: impl Into<Vec<u8>>) -> Self {
        KeyRange {
            start: key.into(),
            end: RangeEnd::Single,
        }
    }

    /// Every key starting with `prefix`.
    pub fn prefix(prefix: impl Into<Vec<u8>>) -> Self {
        let start = prefix.into();
        let end = match crate::keys::prefix_end(&start) {
            Some(end) => RangeEnd::Before(end),
            None => RangeEnd::Unbounded,
        };
        KeyRange { start, end }
    }

    /// Every key in `[start, end)`.
    pub fn between(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> Self {
        KeyRange {
            start: start.into(),
            end: RangeEnd::Before(end.into()),
        }
    }

    /// Every key in `[start, last]`.
    pub fn through(start: impl Into<Vec<u8>>, last: impl Into<Vec<u8>>) -> Self {
        let mut end = last.into();
        end.push(0);
        Self::between(start, end)
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        match &self.end {
            RangeEnd::Single => key == self.start.as_slice(),
            RangeEnd::Before(end) => key >= self.start.as_slice() && key < end.as_slice(),
            RangeEnd::Unbounded => key >= self.start.as_slice(),
        }
    }

    /// Whether two ranges share a key.
    pub fn overlaps(&self, other: &KeyRange) -> bool {
        let below_end = |r: &KeyRange, key: &[u8]| match &r.end {
            RangeEnd::Single => key <= r.start.as_slice(),
            RangeEnd::Before(end) => key < end.as_slice(),
            RangeEnd::Unbounded => true,
        };
        // Empty ranges (end <= start) share nothing.
        self.contains(&self.start)
            && other.contains(&other.start)
            && below_end(self, &other.start)
            && below_end(other, &self.start)
    }
}

/// A read of a range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Get {
    pub range: KeyRange,
    /// Most keys returned; 0 = all.
    pub limit: usize,
    /// Descending key order (the last entry of a range: `reverse` with `limit` 1).
    pub reverse: bool,
    /// Keys and revisions without values.
    pub keys_only: bool,
}

impl Get {
    pub fn new(range: KeyRange) -> Self {
        Get {
            range,
            limit: 0,
            reverse: false,
            keys_only: false,
        }
    }

    pub fn key(key: impl Into<Vec<u8>>) -> Self {
        Self::new(KeyRange::key(key))
    }

    pub fn prefix(prefix: impl Into<Vec<u8>>) -> Self {
        Self::new(KeyRange::prefix(prefix))
    }

    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    pub fn reverse(mut self) -> Self {
        self.reverse = true;
        self
    }

    pub fn keys_only(mut self) -> Self {
        self.keys_only = true;
        self
    }
}

/// What a [`Get`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeResponse {
    pub kvs: Vec<KeyValue>,
    /// Whether `limit` cut off more keys.
    pub more: bool,
    /// The store's revision the read saw.
    pub revision: Revision,
}

impl RangeResponse {
    pub fn first(&self) -> Option<&KeyValue> {
        self.kvs.first()
    }
}

/// What a compare looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Value(Vec<u8>),
    Version(i64),
    CreateRevision(Revision),
    ModRevision(Revision),
    /// The lease the key is bound to (0: none, or the key is absent).
    Lease(LeaseId),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Equal,
    NotEqual,
    Less,
    Greater,
}

/// A condition of a [`Txn`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compare {
    pub range: KeyRange,
    pub target: Target,
    pub op: CmpOp,
}

impl Compare {
    pub fn new(range: KeyRange, target: Target, op: CmpOp) -> Self {
        Compare { range, target, op }
    }

    /// Holds iff `key` does not exist.
    pub fn absent(key: impl Into<Vec<u8>>) -> Self {
        Self::new(KeyRange::key(key), Target::CreateRevision(0), CmpOp::Equal)
    }

    /// Holds iff `key` is as it was read: the same mod revision, or (read absent) still
    /// absent.
    pub fn unchanged(key: impl Into<Vec<u8>>, read: Option<&KeyValue>) -> Self {
        match read {
            Some(kv) => Self::new(
                KeyRange::key(key),
                Target::ModRevision(kv.mod_revision),
                CmpOp::Equal,
            ),
            None => Self::absent(key),
        }
    }

    /// Holds iff `key` holds exactly `value`.
    pub fn value(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        Self::new(
            KeyRange::key(key),
            Target::Value(value.into()),
            CmpOp::Equal,
        )
    }

    /// Whether the compare holds for one key's state (`None`: absent). For a whole range,
    /// see the module docs.
    pub fn holds_for(&self, kv: Option<&KeyValue>) -> bool {
        use std::cmp::Ordering;
        let ordering = match (&self.target, kv) {
            (Target::Value(_), None) => return false,
            (Target::Value(v), Some(kv)) => kv.value.as_slice().cmp(v.as_slice()),
            (Target::Version(v), kv) => kv.map_or(0, |kv| kv.version).cmp(v),
            (Target::CreateRevision(r), kv) => kv.map_or(0, |kv| kv.create_revision).cmp(r),
            (Target::ModRevision(r), kv) => kv.map_or(0, |kv| kv.mod_revision).cmp(r),
            (Target::Lease(l), kv) => kv.map_or(0, |kv| kv.lease).cmp(l),
        };
        match self.op {
            CmpOp::Equal => ordering == Ordering::Equal,
            CmpOp::NotEqual => ordering != Ordering::Equal,
            CmpOp::Less => ordering == Ordering::Less,
            CmpOp::Greater => ordering == Ordering::Greater,
        }
    }
}

/// One operation of a [`Txn`] branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Get(Get),
    /// `lease` 0: not bound to a lease.
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        lease: LeaseId,
    },
    Delete(KeyRange),
}

impl Op {
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        Op::Put {
            key: key.into(),
            value: value.into(),
            lease: 0,
        }
    }

    pub fn put_with_lease(
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        lease: LeaseId,
    ) -> Self {
        Op::Put {
            key: key.into(),
            value: value.into(),
            lease,
        }
    }

    pub fn delete(range: KeyRange) -> Self {
        Op::Delete(range)
    }
}

/// The result of one [`Op`], in the order of the branch that ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpResult {
    Get(RangeResponse),
    Put,
    Delete { deleted: usize },
}

/// Compares, then one of two branches, atomically.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Txn {
    pub when: Vec<Compare>,
    pub then: Vec<Op>,
    pub otherwise: Vec<Op>,
}

impl Txn {
    pub fn new() -> Self {
        Txn::default()
    }

    pub fn when(mut self, compares: impl IntoIterator<Item = Compare>) -> Self {
        self.when.extend(compares);
        self
    }

    pub fn then(mut self, ops: impl IntoIterator<Item = Op>) -> Self {
        self.then.extend(ops);
        self
    }

    pub fn otherwise(mut self, ops: impl IntoIterator<Item = Op>) -> Self {
        self.otherwise.extend(ops);
        self
    }

    /// Whether a branch puts a key twice or puts a key it also deletes (see module docs).
    pub(crate) fn branch_conflict(ops: &[Op]) -> Option<String> {
        let mut puts: Vec<&[u8]> = Vec::new();
        let mut deletes: Vec<&KeyRange> = Vec::new();
        for op in ops {
            match op {
                Op::Put { key, .. } => puts.push(key),
                Op::Delete(r) => deletes.push(r),
                Op::Get(_) => {}
            }
        }
        let mut sorted = puts.clone();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Some(format!(
                "a transaction puts {} twice",
                crate::keys::key_name(w[0])
            ));
        }
        for key in puts {
            if deletes.iter().any(|r| r.contains(key)) {
                return Some(format!(
                    "a transaction puts {} inside a range it deletes",
                    crate::keys::key_name(key)
                ));
            }
        }
        None
    }
}

/// What a [`Txn`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnResponse {
    /// Whether every compare held (so `then` ran, else `otherwise`).
    pub succeeded: bool,
    /// The store's revision after the transaction (unchanged if it wrote nothing).
    pub revision: Revision,
    pub results: Vec<OpResult>,
}

impl TxnResponse {
    /// The result of the `i`-th op as a read.
    pub fn get(&self, i: usize) -> Result<&RangeResponse> {
        match self.results.get(i) {
            Some(OpResult::Get(r)) => Ok(r),
            _ => Err(crate::Error::Storage(format!(
                "transaction result {i} is not a read"
            ))),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change seen by a watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    pub kind: EventKind,
    /// The key's new state (for a delete: the key, empty value, `mod_revision` of the
    /// deletion).
    pub kv: KeyValue,
    /// The key's state before the change, if it existed.
    pub prev: Option<KeyValue>,
}

/// What [`Kv::status`] reports: where the store's revisions and history stand, and how big
/// it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvStatus {
    /// The current revision.
    pub revision: Revision,
    /// History before this revision is gone: a watch from an earlier one ends at once.
    /// `None` when the backend does not say (etcd reports it to no status call).
    pub compacted_revision: Option<Revision>,
    /// Bytes of the database file (etcd: of the member that answered, `etcdctl endpoint
    /// status`'s DB SIZE; the quota applies to it). 0 for a store in memory.
    pub db_bytes: u64,
    /// Bytes of it holding live data: what a defragmentation would leave. `None` when the
    /// backend does not say.
    pub db_bytes_in_use: Option<u64>,
}

/// etcd's data model: reads, transactions, watches and leases (see the module docs).
#[async_trait::async_trait]
pub trait Kv: Send + Sync + 'static {
    /// Reads a range at the current revision.
    async fn range(&self, get: Get) -> Result<RangeResponse>;
    /// Compares, then runs one branch, atomically.
    async fn txn(&self, txn: Txn) -> Result<TxnResponse>;
    /// The changes of `range` from revision `from` (inclusive; `None`: from the next
    /// revision), with each key's previous state. Returns once the watch is established: no
    /// later change is missed.
    async fn watch(
        &self,
        range: KeyRange,
        from: Option<Revision>,
    ) -> Result<Watch<Vec<WatchEvent>>>;
    /// Grants a lease of `ttl` (rounded up to whole seconds).
    async fn grant(&self, ttl: Duration) -> Result<Lease>;
    /// Renews a lease; returns its TTL, or [`crate::Error::LeaseExpired`] if it is gone.
    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration>;
    /// Ends a lease now, deleting its keys; a lease already gone is not an error.
    async fn revoke(&self, lease: LeaseId) -> Result<()>;
    /// Discards the history of every revision before `revision` (etcd's compaction): a
    /// watch from an earlier revision ends at once, one from `revision` on is served;
    /// current state is unchanged. Compacting at or below a revision already compacted is
    /// success (two compactors racing, a retry whose first attempt landed); a revision
    /// past the current one is [`crate::ErrorKind::Invalid`].
    async fn compact(&self, revision: Revision) -> Result<()>;
    /// How many keys `range` holds now (counted by the store; no key or value is sent).
    async fn count(&self, range: KeyRange) -> Result<u64>;
    /// The current revision, the compacted revision and the database's size.
    async fn status(&self) -> Result<KvStatus>;
    /// Adds this backend's own metrics (request latency) to `registry`; none by default.
    fn register_metrics(&self, _registry: &mut prometheus_client::registry::Registry) {}
}

/// A lease TTL in whole seconds, rounded up so a lease never lives shorter than asked.
pub(crate) fn ttl_secs(ttl: Duration) -> i64 {
    ttl.as_secs() as i64 + i64::from(ttl.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_contain_and_overlap() {
        let p = KeyRange::prefix("a/");
        assert!(p.contains(b"a/"));
        assert!(p.contains(b"a/zz"));
        assert!(!p.contains(b"a0"));
        let k = KeyRange::key("a/b");
        assert!(p.overlaps(&k) && k.overlaps(&p));
        assert!(!KeyRange::key("b").overlaps(&p));
        let t = KeyRange::through("a/1", "a/3");
        assert!(t.contains(b"a/3") && !t.contains(b"a/30"));
        assert!(t.contains(b"a/2") && !t.contains(b"a/4"));
        assert!(!KeyRange::between("b", "a").overlaps(&p), "empty range");
        assert!(KeyRange::prefix(vec![0xff]).end == RangeEnd::Unbounded);
    }

    #[test]
    fn compares_follow_etcd_on_absent_keys() {
        assert!(Compare::absent("k").holds_for(None));
        assert!(!Compare::value("k", "v").holds_for(None));
        let kv = KeyValue {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            create_revision: 3,
            mod_revision: 5,
            version: 2,
            lease: 0,
        };
        assert!(Compare::unchanged("k", Some(&kv)).holds_for(Some(&kv)));
        assert!(!Compare::absent("k").holds_for(Some(&kv)));
        let older = Compare::new(KeyRange::key("k"), Target::ModRevision(6), CmpOp::Less);
        assert!(older.holds_for(Some(&kv)) && older.holds_for(None));
    }

    #[test]
    fn a_branch_may_not_put_twice_or_inside_its_deletes() {
        assert!(Txn::branch_conflict(&[Op::put("a", "1"), Op::put("b", "1")]).is_none());
        assert!(Txn::branch_conflict(&[Op::put("a", "1"), Op::put("a", "2")]).is_some());
        let del = Op::delete(KeyRange::prefix("p/"));
        assert!(Txn::branch_conflict(&[del.clone(), Op::put("p/x", "1")]).is_some());
        assert!(Txn::branch_conflict(&[del, Op::put("q", "1")]).is_none());
    }
}
