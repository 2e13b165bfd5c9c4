//! One conformance suite for every [`Kv`] implementation: [`RedbKv`] in memory (on real
//! and on paused tokio time, its leases expiring on the injected clock) and on a file
//! (including reopen), and [`EtcdKv`] against a real etcd started on loopback (see
//! `oxbow_metadata::testing`). Without the `etcd` binary the etcd tests fail, unless
//! `OXBOW_SKIP_ETCD=1`.
//!
//! Every wait has a deadline; lease expiry waits poll with tokio's sleep, which a paused
//! runtime turns into simulated time.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use oxbow_metadata::kv::{
    CmpOp, Compare, EtcdKv, EventKind, Get, KeyRange, Kv, Op, OpResult, RedbKv, Target, Txn,
    WatchEvent,
};
use oxbow_metadata::testing::{etcd_or_skip, EtcdCluster};
use oxbow_metadata::{Clock, ErrorKind, SimClock, SystemClock, Watch};
use std::sync::Arc;
use std::time::Duration;

const TTL: Duration = Duration::from_secs(2);
/// Long enough for any expected event or expiry (TTL plus etcd's expiry sweep).
const DEADLINE: Duration = Duration::from_secs(8);
const POLL: Duration = Duration::from_millis(50);

fn key(prefix: &str, k: &str) -> Vec<u8> {
    format!("{prefix}{k}").into_bytes()
}

async fn put(kv: &dyn Kv, k: Vec<u8>, v: &str) -> i64 {
    let r = kv.txn(Txn::new().then([Op::put(k, v)])).await.expect("put");
    assert!(r.succeeded);
    r.revision
}

fn keys_of(kvs: &[oxbow_metadata::kv::KeyValue]) -> Vec<String> {
    kvs.iter()
        .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
        .collect()
}

/// The next batch of a watch, within `DEADLINE`.
async fn next(w: &mut Watch<Vec<WatchEvent>>, what: &str) -> Vec<WatchEvent> {
    match tokio::time::timeout(DEADLINE, w.recv()).await {
        Ok(Some(e)) => e,
        Ok(None) => panic!("{what}: watch ended"),
        Err(_) => panic!("{what}: no event within {DEADLINE:?}"),
    }
}

/// The next `n` events of a watch, however they are batched.
async fn next_events(w: &mut Watch<Vec<WatchEvent>>, n: usize, what: &str) -> Vec<WatchEvent> {
    let mut out = Vec::new();
    while out.len() < n {
        out.extend(next(w, what).await);
    }
    assert_eq!(out.len(), n, "{what}: more events than expected: {out:?}");
    out
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("{what}: not within {DEADLINE:?}");
}

async fn range_and_prefix(kv: &dyn Kv, p: &str) {
    for k in ["a/2", "a/1", "a/3", "b/1", "a"] {
        put(kv, key(p, k), k).await;
    }
    let a = kv.range(Get::prefix(key(p, "a/"))).await.expect("prefix");
    assert_eq!(
        keys_of(&a.kvs),
        [key(p, "a/1"), key(p, "a/2"), key(p, "a/3")].map(|k| String::from_utf8(k).expect("utf8"))
    );
    assert_eq!(a.kvs[0].value, b"a/1");
    assert!(!a.more);
    let last = kv
        .range(Get::prefix(key(p, "a/")).reverse().limit(1))
        .await
        .expect("last");
    assert_eq!(keys_of(&last.kvs), vec![format!("{p}a/3")]);
    assert!(last.more, "a limit that cut keys off says so");
    let between = kv
        .range(Get::new(KeyRange::between(key(p, "a/2"), key(p, "b/1"))))
        .await
        .expect("between");
    assert_eq!(
        keys_of(&between.kvs),
        vec![format!("{p}a/2"), format!("{p}a/3")]
    );
    let through = kv
        .range(Get::new(KeyRange::through(key(p, "a/1"), key(p, "a/2"))))
        .await
        .expect("through");
    assert_eq!(through.kvs.len(), 2);
    let one = kv.range(Get::key(key(p, "a"))).await.expect("one");
    assert_eq!(keys_of(&one.kvs), vec![format!("{p}a")]);
    let keys_only = kv
        .range(Get::prefix(key(p, "")).keys_only())
        .await
        .expect("keys only");
    assert_eq!(keys_only.kvs.len(), 5);
    assert!(keys_only.kvs.iter().all(|kv| kv.value.is_empty()));
    assert!(kv
        .range(Get::key(key(p, "absent")))
        .await
        .expect("absent")
        .kvs
        .is_empty());
    let empty = kv
        .range(Get::new(KeyRange::between(key(p, "b"), key(p, "a"))))
        .await
        .expect("empty range");
    assert!(empty.kvs.is_empty());
    let deleted = kv
        .txn(Txn::new().then([Op::delete(KeyRange::prefix(key(p, "a/")))]))
        .await
        .expect("delete prefix");
    assert_eq!(deleted.results, vec![OpResult::Delete { deleted: 3 }]);
    let left = kv.range(Get::prefix(key(p, ""))).await.expect("left");
    assert_eq!(keys_of(&left.kvs), vec![format!("{p}a"), format!("{p}b/1")]);
}

async fn revisions_and_versions(kv: &dyn Kv, p: &str) {
    let k = key(p, "k");
    let r1 = put(kv, k.clone(), "1").await;
    let r2 = put(kv, k.clone(), "2").await;
    assert!(r2 > r1, "every write is a new revision: {r1} then {r2}");
    let got = kv.range(Get::key(k.clone())).await.expect("read");
    let stored = got.first().expect("stored").clone();
    assert_eq!(
        (stored.create_revision, stored.mod_revision, stored.version),
        (r1, r2, 2)
    );
    assert!(got.revision >= r2);
    // A read changes nothing; nor does a transaction that writes nothing.
    let again = kv
        .txn(Txn::new().then([Op::Get(Get::key(k.clone()))]))
        .await
        .expect("read txn");
    assert_eq!(again.revision, got.revision);
    assert_eq!(again.get(0).expect("get").kvs, vec![stored.clone()]);
    // Deleted and re-created: a new life, version from 1.
    kv.txn(Txn::new().then([Op::delete(KeyRange::key(k.clone()))]))
        .await
        .expect("delete");
    let r3 = put(kv, k.clone(), "3").await;
    let reborn = kv.range(Get::key(k.clone())).await.expect("read");
    let reborn = reborn.first().expect("stored");
    assert_eq!((reborn.create_revision, reborn.version), (r3, 1));
    assert!(r3 > r2 + 1, "the delete was a revision of its own");
}

async fn txn_compares(kv: &dyn Kv, p: &str) {
    let k = key(p, "cas");
    // Create if absent, once.
    let create = || {
        Txn::new()
            .when([Compare::absent(k.clone())])
            .then([Op::put(k.clone(), "first")])
            .otherwise([Op::Get(Get::key(k.clone()))])
    };
    let won = kv.txn(create()).await.expect("create");
    assert!(won.succeeded);
    assert_eq!(won.results, vec![OpResult::Put]);
    let lost = kv.txn(create()).await.expect("create again");
    assert!(!lost.succeeded);
    assert_eq!(
        lost.revision, won.revision,
        "a failed compare writes nothing"
    );
    let current = lost
        .get(0)
        .expect("otherwise ran")
        .first()
        .expect("kv")
        .clone();
    assert_eq!(current.value, b"first");

    // Mod revision: exactly one of two writers holding the same read wins.
    let swap = |v: &str| {
        Txn::new()
            .when([Compare::unchanged(k.clone(), Some(&current))])
            .then([Op::put(k.clone(), v)])
    };
    assert!(kv.txn(swap("second")).await.expect("cas").succeeded);
    assert!(!kv.txn(swap("third")).await.expect("stale cas").succeeded);
    // Value and version compares.
    assert!(
        kv.txn(Txn::new().when([Compare::value(k.clone(), "second")]))
            .await
            .expect("value")
            .succeeded
    );
    assert!(
        !kv.txn(Txn::new().when([Compare::value(k.clone(), "first")]))
            .await
            .expect("value")
            .succeeded
    );
    assert!(
        !kv.txn(Txn::new().when([Compare::value(key(p, "nothing"), "")]))
            .await
            .expect("value of an absent key")
            .succeeded,
        "a value compare on an absent key fails"
    );
    let version = |v: i64, op: CmpOp| {
        Txn::new().when([Compare::new(
            KeyRange::key(k.clone()),
            Target::Version(v),
            op,
        )])
    };
    assert!(kv.txn(version(2, CmpOp::Equal)).await.expect("v").succeeded);
    assert!(
        kv.txn(version(1, CmpOp::Greater))
            .await
            .expect("v")
            .succeeded
    );
    assert!(kv.txn(version(3, CmpOp::Less)).await.expect("v").succeeded);
    assert!(
        !kv.txn(version(2, CmpOp::NotEqual))
            .await
            .expect("v")
            .succeeded
    );

    // A range compare holds only if it holds for every key in the range.
    for i in 0..3 {
        put(kv, key(p, &format!("r/{i}")), "x").await;
    }
    let rev = kv.range(Get::key(k.clone())).await.expect("rev").revision;
    let untouched_since = |rev: i64| {
        Txn::new().when([Compare::new(
            KeyRange::prefix(key(p, "r/")),
            Target::ModRevision(rev + 1),
            CmpOp::Less,
        )])
    };
    assert!(kv.txn(untouched_since(rev)).await.expect("range").succeeded);
    put(kv, key(p, "r/1"), "y").await;
    assert!(!kv.txn(untouched_since(rev)).await.expect("range").succeeded);
    let none_in_range = Txn::new().when([Compare::new(
        KeyRange::prefix(key(p, "empty/")),
        Target::CreateRevision(0),
        CmpOp::Equal,
    )]);
    assert!(
        kv.txn(none_in_range).await.expect("empty range").succeeded,
        "a compare over no key compares the absent key"
    );

    // One branch may not put a key twice, nor put inside a range it deletes.
    let err = kv
        .txn(Txn::new().then([Op::put(key(p, "d"), "1"), Op::put(key(p, "d"), "2")]))
        .await
        .expect_err("put twice");
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    let err = kv
        .txn(Txn::new().then([
            Op::delete(KeyRange::prefix(key(p, "r/"))),
            Op::put(key(p, "r/1"), "z"),
        ]))
        .await
        .expect_err("put inside a deleted range");
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    // Puts beside the deleted ranges are fine (the catalog replace relies on this).
    let gaps = kv
        .txn(Txn::new().then([
            Op::put(key(p, "r/0"), "new"),
            Op::delete(KeyRange::between(key(p, "r/0\0"), key(p, "r/2"))),
            Op::put(key(p, "r/2"), "new"),
        ]))
        .await
        .expect("puts beside deletes");
    assert!(gaps.succeeded);
    let run = kv.range(Get::prefix(key(p, "r/"))).await.expect("run");
    assert_eq!(
        keys_of(&run.kvs),
        vec![format!("{p}r/0"), format!("{p}r/2")]
    );
}

async fn watches(kv: &dyn Kv, p: &str) {
    let range = KeyRange::prefix(key(p, ""));
    let r1 = put(kv, key(p, "w1"), "a").await;
    let r2 = put(kv, key(p, "w2"), "b").await;
    let r3 = kv
        .txn(Txn::new().then([Op::delete(KeyRange::key(key(p, "w1")))]))
        .await
        .expect("delete")
        .revision;
    put(kv, key("other/", p), "elsewhere").await;
    // From a past revision: every later change of the range, in order, with previous states.
    let mut from_r2 = kv.watch(range.clone(), Some(r2)).await.expect("watch");
    let events = next_events(&mut from_r2, 2, "history").await;
    assert_eq!(events[0].kind, EventKind::Put);
    assert_eq!(events[0].kv.key, key(p, "w2"));
    assert_eq!(events[0].kv.mod_revision, r2);
    assert!(events[0].prev.is_none());
    assert_eq!(events[1].kind, EventKind::Delete);
    assert_eq!(events[1].kv.key, key(p, "w1"));
    assert_eq!(events[1].kv.mod_revision, r3);
    let prev = events[1].prev.as_ref().expect("prev of a delete");
    assert_eq!((prev.value.as_slice(), prev.mod_revision), (&b"a"[..], r1));
    // From now: only what comes next.
    let mut from_now = kv.watch(range.clone(), None).await.expect("watch now");
    let r4 = put(kv, key(p, "w2"), "c").await;
    let deleted = kv
        .txn(Txn::new().then([Op::delete(KeyRange::prefix(key(p, "")))]))
        .await
        .expect("delete all");
    for w in [&mut from_r2, &mut from_now] {
        let put = next_events(w, 1, "put").await;
        assert_eq!(put[0].kind, EventKind::Put);
        assert_eq!(put[0].kv.value, b"c");
        assert_eq!(put[0].kv.mod_revision, r4);
        assert_eq!(
            put[0].prev.as_ref().map(|p| p.value.clone()),
            Some(b"b".to_vec())
        );
        // A transaction deleting keys is one batch.
        let batch = next(w, "delete all").await;
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].kind, EventKind::Delete);
        assert_eq!(batch[0].kv.mod_revision, deleted.revision);
        assert!(w.try_recv().is_none(), "nothing of other ranges");
    }
    // Deliveries not taken yet are counted (`oxbow_metadata_watch_queued_events`): each
    // revision is one (or fewer, if the service batches revisions), and taking it uncounts it.
    let queue = from_now.queue();
    assert_eq!(queue.queued(), 0);
    put(kv, key(p, "q1"), "x").await;
    put(kv, key(p, "q2"), "y").await;
    eventually("deliveries counted", || {
        let q = queue.clone();
        async move { q.queued() >= 1 }
    })
    .await;
    assert!(
        queue.queued() <= 2,
        "{} queued for 2 revisions",
        queue.queued()
    );
    next_events(&mut from_now, 2, "queued").await;
    assert_eq!(queue.queued(), 0, "all taken");
    // Dropping a watch is how a reader leaves; nothing else notices.
    drop(from_r2);
    put(kv, key(p, "w3"), "d").await;
    assert_eq!(
        next_events(&mut from_now, 1, "after a drop").await[0]
            .kv
            .value,
        b"d"
    );
}

async fn leases(kv: &dyn Kv, p: &str) {
    let lease = kv.grant(TTL).await.expect("grant");
    assert_eq!(lease.ttl, TTL);
    let rounded = kv
        .grant(Duration::from_millis(2500))
        .await
        .expect("grant 2.5 s");
    assert_eq!(
        rounded.ttl,
        Duration::from_secs(3),
        "TTLs are whole seconds"
    );
    kv.revoke(rounded.id).await.expect("revoke");
    let mut watch = kv
        .watch(KeyRange::prefix(key(p, "")), None)
        .await
        .expect("watch");
    let bound = key(p, "bound");
    kv.txn(Txn::new().then([
        Op::put_with_lease(bound.clone(), "alive", lease.id),
        Op::put(key(p, "free"), "stays"),
    ]))
    .await
    .expect("put with lease");
    let stored = kv.range(Get::key(bound.clone())).await.expect("read");
    assert_eq!(stored.first().expect("stored").lease, lease.id);
    assert_eq!(next_events(&mut watch, 2, "puts").await.len(), 2);
    // A compare on the lease a key is bound to (0 for a free or absent key): the fence of a
    // writer whose right to write is its lease.
    for (k, l, holds) in [
        (bound.clone(), lease.id, true),
        (bound.clone(), lease.id + 1, false),
        (key(p, "free"), 0, true),
        (key(p, "absent"), 0, true),
        (key(p, "absent"), lease.id, false),
    ] {
        let resp = kv
            .txn(Txn::new().when([Compare::new(
                KeyRange::key(k.clone()),
                Target::Lease(l),
                CmpOp::Equal,
            )]))
            .await
            .expect("lease compare");
        assert_eq!(resp.succeeded, holds, "lease of {k:?} == {l}");
    }

    // Kept alive past its TTL: still there.
    let until = tokio::time::Instant::now() + TTL + Duration::from_millis(500);
    while tokio::time::Instant::now() < until {
        assert_eq!(kv.keep_alive(lease.id).await.expect("keep alive"), TTL);
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    assert_eq!(
        kv.range(Get::key(bound.clone()))
            .await
            .expect("read")
            .kvs
            .len(),
        1
    );

    // Left alone: the bound key goes, the free one stays, and the watch sees the delete.
    eventually("lease expires", || async {
        kv.range(Get::key(bound.clone()))
            .await
            .expect("read")
            .kvs
            .is_empty()
    })
    .await;
    let gone = next_events(&mut watch, 1, "expiry").await;
    assert_eq!(
        (gone[0].kind, gone[0].kv.key.clone()),
        (EventKind::Delete, bound.clone())
    );
    assert_eq!(
        kv.range(Get::key(key(p, "free")))
            .await
            .expect("read")
            .kvs
            .len(),
        1
    );
    let err = kv.keep_alive(lease.id).await.expect_err("expired");
    assert_eq!(err.kind(), ErrorKind::Fenced);
    let err = kv
        .txn(Txn::new().then([Op::put_with_lease(bound.clone(), "late", lease.id)]))
        .await
        .expect_err("put with a dead lease");
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");

    // Revoked: gone at once; revoking again is not an error.
    let lease = kv.grant(TTL).await.expect("grant");
    kv.txn(Txn::new().then([Op::put_with_lease(bound.clone(), "again", lease.id)]))
        .await
        .expect("put");
    kv.revoke(lease.id).await.expect("revoke");
    assert!(kv
        .range(Get::key(bound.clone()))
        .await
        .expect("read")
        .kvs
        .is_empty());
    kv.revoke(lease.id).await.expect("revoke twice");
}

/// History compaction: what it ends, what it keeps, and that repeating it is harmless.
async fn compaction(kv: &dyn Kv, p: &str) {
    let range = KeyRange::prefix(key(p, ""));
    let r1 = put(kv, key(p, "c1"), "a").await;
    let r2 = put(kv, key(p, "c2"), "b").await;
    let r3 = put(kv, key(p, "c1"), "c").await;
    // A watch that keeps up is not ended by a compaction.
    let mut live = kv.watch(range.clone(), None).await.expect("watch now");
    kv.compact(r2).await.expect("compact");
    // At or below what is compacted already: success (a racing compactor, a retry).
    kv.compact(r2).await.expect("compact again");
    kv.compact(r1).await.expect("compact below");
    let status = kv.status().await.expect("status");
    assert!(status.revision >= r3, "{status:?}");
    if let Some(c) = status.compacted_revision {
        assert!(c >= r2, "{status:?}");
    }
    // From before the compacted revision: the watch ends at once.
    let mut old = kv
        .watch(range.clone(), Some(r1))
        .await
        .expect("watch from a compacted revision");
    assert!(tokio::time::timeout(DEADLINE, old.recv())
        .await
        .expect("a watch from compacted history ends at once")
        .is_none());
    // From the compacted revision itself: every change from it on.
    let mut from = kv.watch(range.clone(), Some(r2)).await.expect("watch");
    let events = next_events(&mut from, 2, "from the compacted revision").await;
    assert_eq!(
        events.iter().map(|e| e.kv.mod_revision).collect::<Vec<_>>(),
        vec![r2, r3]
    );
    // Current state is untouched.
    let now = kv.range(Get::prefix(key(p, ""))).await.expect("read");
    assert_eq!(
        now.kvs
            .iter()
            .map(|kv| kv.value.clone())
            .collect::<Vec<_>>(),
        vec![b"c".to_vec(), b"b".to_vec()]
    );
    let r4 = put(kv, key(p, "c3"), "d").await;
    for w in [&mut live, &mut from] {
        assert_eq!(
            next_events(w, 1, "after compaction").await[0]
                .kv
                .mod_revision,
            r4
        );
    }
    let err = kv.compact(r4 + 1000).await.expect_err("a future revision");
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    // Counting keys.
    assert_eq!(kv.count(range).await.expect("count"), 3);
    assert_eq!(kv.count(KeyRange::key(key(p, "c1"))).await.expect("one"), 1);
    assert_eq!(
        kv.count(KeyRange::key(key(p, "none"))).await.expect("none"),
        0
    );
    assert_eq!(
        kv.count(KeyRange::between(key(p, "c2"), key(p, "c1")))
            .await
            .expect("empty range"),
        0
    );
}

async fn run_all(kv: &dyn Kv, p: &str) {
    range_and_prefix(kv, &format!("{p}range/")).await;
    revisions_and_versions(kv, &format!("{p}rev/")).await;
    txn_compares(kv, &format!("{p}txn/")).await;
    watches(kv, &format!("{p}watch/")).await;
    leases(kv, &format!("{p}lease/")).await;
    compaction(kv, &format!("{p}compact/")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_in_memory() {
    let kv = RedbKv::in_memory(Arc::new(SystemClock)).expect("open");
    run_all(&kv, "/t/").await;
}

#[tokio::test(start_paused = true)]
async fn redb_in_memory_on_paused_time() {
    let clock: Arc<dyn Clock> = SimClock::new(1_700_000_000_000);
    let kv = RedbKv::in_memory(clock.clone()).expect("open");
    let started = clock.now();
    run_all(&kv, "/t/").await;
    assert!(
        clock.now() - started >= TTL,
        "the lease tests ran on simulated time"
    );

    // Expiry follows the injected clock exactly: alive just before the deadline, gone at it.
    let lease = kv.grant(TTL).await.expect("grant");
    kv.txn(Txn::new().then([Op::put_with_lease("/t/x", "1", lease.id)]))
        .await
        .expect("put");
    tokio::time::advance(TTL - Duration::from_millis(1)).await;
    assert_eq!(kv.range(Get::key("/t/x")).await.expect("read").kvs.len(), 1);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(kv
        .range(Get::key("/t/x"))
        .await
        .expect("read")
        .kvs
        .is_empty());
    assert_eq!(
        kv.keep_alive(lease.id).await.expect_err("expired").kind(),
        ErrorKind::Fenced
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_on_file_survives_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let (revision, old_lease) = {
        let kv = RedbKv::open(&path, Arc::new(SystemClock)).expect("open");
        run_all(&kv, "/t/").await;
        put(&kv, b"/kept".to_vec(), "yes").await;
        let lease = kv.grant(Duration::from_secs(60)).await.expect("grant");
        let r = kv
            .txn(Txn::new().then([Op::put_with_lease("/bound", "no", lease.id)]))
            .await
            .expect("put");
        (r.revision, lease.id)
    };
    let kv = RedbKv::open(&path, Arc::new(SystemClock)).expect("reopen");
    let on_disk = std::fs::metadata(&path).expect("stat").len();
    assert_eq!(kv.status().await.expect("status").db_bytes, on_disk);
    let kept = kv.range(Get::key("/kept")).await.expect("read");
    assert_eq!(kept.first().expect("kept").value, b"yes");
    // The previous process's lease died with it, and so did its key (one more revision).
    assert!(kv
        .range(Get::key("/bound"))
        .await
        .expect("read")
        .kvs
        .is_empty());
    assert_eq!(
        kept.revision,
        revision + 1,
        "revisions continue across reopen"
    );
    assert_eq!(
        kv.keep_alive(old_lease)
            .await
            .expect_err("old lease")
            .kind(),
        ErrorKind::Fenced
    );
    let fresh = kv.grant(TTL).await.expect("grant");
    assert!(fresh.id > old_lease, "lease ids are never reused");
    let r = put(&kv, b"/after".to_vec(), "1").await;
    assert!(r > revision + 1);
    // History from before the reopen is gone: such a watch ends at once.
    let mut old = kv
        .watch(KeyRange::prefix("/"), Some(revision))
        .await
        .expect("watch");
    assert!(tokio::time::timeout(DEADLINE, old.recv())
        .await
        .expect("ends at once")
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_single_member() {
    if !etcd_or_skip() {
        return;
    }
    let etcd = EtcdCluster::start(1).expect("start etcd");
    let kv = EtcdKv::connect(&etcd.endpoints(), Duration::from_secs(5))
        .await
        .expect("connect");
    run_all(&kv, "/t/").await;
    let status = kv.status().await.expect("status");
    assert!(status.db_bytes > 0, "{status:?}");
    let in_use = status
        .db_bytes_in_use
        .expect("etcd 3.4 reports the bytes in use");
    assert!(in_use > 0 && in_use <= status.db_bytes, "{status:?}");
}
