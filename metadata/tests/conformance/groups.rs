//! Consumer groups (committed offsets, coordinator records) and transactional ids'
//! coordinator records: compare-and-swap and deletion, the same on every backend.

use bytes::Bytes;
use oxbow_metadata::{CommittedOffset, ErrorKind, MetadataStore};

pub fn committed(topic: &str, partition: i32, offset: i64) -> CommittedOffset {
    CommittedOffset {
        topic: topic.to_string(),
        partition,
        offset,
        leader_epoch: 3,
        metadata: format!("m{offset}"),
        commit_timestamp_ms: 1000 + offset,
    }
}

pub async fn consumer_groups(store: &dyn MetadataStore) {
    // A group id with separators must not collide with another's keys.
    let g = "team/a%1";
    store
        .commit_offsets(g, (0..200).map(|p| committed("t1", p, 10)).collect())
        .await
        .expect("commit 200");
    store
        .commit_offsets(g, vec![committed("t1", 0, 11), committed("t2", 0, 5)])
        .await
        .expect("commit");
    store
        .commit_offsets("team", vec![committed("t1", 0, 99)])
        .await
        .expect("other group");
    let got = store.fetch_offsets(g).await.expect("fetch");
    assert_eq!(got.len(), 201);
    assert_eq!(got[0], committed("t1", 0, 11), "last write wins");
    assert_eq!(got[200], committed("t2", 0, 5));
    store
        .delete_offsets(g, Some(vec![("t2".to_string(), 0)]))
        .await
        .expect("delete one");
    assert_eq!(store.fetch_offsets(g).await.expect("fetch").len(), 200);
    assert_eq!(store.fetch_offsets("team").await.expect("fetch").len(), 1);

    // The coordinator record: create, CAS, conflicts.
    assert!(store.group(g).await.expect("group").is_none());
    let r1 = store
        .put_group(g, None, Bytes::from_static(b"gen1"))
        .await
        .expect("create");
    assert_eq!(r1.version, 1);
    let err = store
        .put_group(g, None, Bytes::from_static(b"again"))
        .await
        .expect_err("exists");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let r2 = store
        .put_group(g, Some(1), Bytes::from_static(b"gen2\x00\xff"))
        .await
        .expect("cas");
    assert_eq!(r2.version, 2);
    let err = store
        .put_group(g, Some(1), Bytes::from_static(b"stale"))
        .await
        .expect_err("stale");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(store.group(g).await.expect("group"), Some(r2));
    let mut groups = store.list_groups().await.expect("list");
    groups.sort();
    assert_eq!(groups, vec!["team".to_string(), g.to_string()]);
    let err = store.delete_group(g, 1).await.expect_err("stale delete");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    store.delete_group(g, 2).await.expect("delete");
    assert!(store.group(g).await.expect("group").is_none());
    assert!(store.fetch_offsets(g).await.expect("fetch").is_empty());
    let err = store.delete_group(g, 2).await.expect_err("gone");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    store
        .delete_offsets("team", None)
        .await
        .expect("delete all");
    assert!(store.list_groups().await.expect("list").is_empty());
}

pub async fn transactional_ids(store: &dyn MetadataStore) {
    // An id with separators must not collide with another's key.
    let t = "app/tx%1";
    assert!(store.transaction(t).await.expect("read").is_none());
    let r1 = store
        .put_transaction(t, None, Bytes::from_static(b"epoch0"))
        .await
        .expect("create");
    assert_eq!((r1.version, r1.transactional_id.as_str()), (1, t));
    let err = store
        .put_transaction(t, None, Bytes::from_static(b"again"))
        .await
        .expect_err("exists");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let r2 = store
        .put_transaction(t, Some(1), Bytes::from_static(b"prepare\x00\xff"))
        .await
        .expect("cas");
    assert_eq!(r2.version, 2);
    let err = store
        .put_transaction(t, Some(1), Bytes::from_static(b"zombie"))
        .await
        .expect_err("a stale coordinator is refused");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(store.transaction(t).await.expect("read"), Some(r2));
    store
        .put_transaction("app", None, Bytes::from_static(b"other"))
        .await
        .expect("another id");
    let mut ids = store.list_transactions().await.expect("list");
    ids.sort();
    assert_eq!(ids, vec!["app".to_string(), t.to_string()]);
    let err = store
        .put_transaction("", None, Bytes::new())
        .await
        .expect_err("empty id");
    assert_eq!(err.kind(), ErrorKind::Invalid);
    let err = store
        .delete_transaction(t, 1)
        .await
        .expect_err("stale delete");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    store.delete_transaction(t, 2).await.expect("delete");
    assert!(store.transaction(t).await.expect("read").is_none());
    let err = store.delete_transaction(t, 2).await.expect_err("gone");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    store.delete_transaction("app", 1).await.expect("delete");
    assert!(store.list_transactions().await.expect("list").is_empty());
}

/// Transactions' pending offsets (TxnOffsetCommit): merged per (group, producer id) and
/// epoch, listed per group and in all, and completed — commit turns them into committed
/// offsets, abort drops them — idempotently.
pub async fn pending_txn_offsets(store: &dyn MetadataStore) {
    let g = "tx/group%1";
    store
        .commit_offsets(g, vec![committed("t", 0, 1), committed("t", 1, 1)])
        .await
        .expect("plain commit");
    let first = store
        .put_txn_offsets(g, 7, 2, vec![committed("t", 0, 10), committed("t", 1, 10)])
        .await
        .expect("pending");
    assert_eq!((first.producer_id, first.producer_epoch), (7, 2));
    // A later TxnOffsetCommit of the same transaction: one partition overwritten, one added.
    let merged = store
        .put_txn_offsets(g, 7, 2, vec![committed("t", 1, 11), committed("u", 0, 3)])
        .await
        .expect("merge");
    assert_eq!(
        merged.offsets,
        vec![
            committed("t", 0, 10),
            committed("t", 1, 11),
            committed("u", 0, 3)
        ]
    );
    let err = store
        .put_txn_offsets(g, 7, 1, vec![committed("t", 0, 99)])
        .await
        .expect_err("an older epoch is a zombie");
    assert_eq!(err.kind(), ErrorKind::Fenced);
    let err = store
        .put_txn_offsets(g, 7, 3, vec![committed("t", 0, 99)])
        .await
        .expect_err("the next transaction waits for this one's marker");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let err = store
        .put_txn_offsets(g, -1, 0, vec![committed("t", 0, 99)])
        .await
        .expect_err("negative producer id");
    assert_eq!(err.kind(), ErrorKind::Invalid);
    store
        .put_txn_offsets(g, 8, 0, vec![committed("t", 0, 50)])
        .await
        .expect("another producer");
    store
        .put_txn_offsets("tx", 7, 2, vec![committed("t", 0, 70)])
        .await
        .expect("another group");

    // Pending offsets are not committed ones.
    assert_eq!(
        store.fetch_offsets(g).await.expect("fetch"),
        vec![committed("t", 0, 1), committed("t", 1, 1)]
    );
    let mine = store.txn_offsets(g).await.expect("by group");
    assert_eq!(
        mine.iter().map(|r| r.producer_id).collect::<Vec<_>>(),
        vec![7, 8]
    );
    assert_eq!(mine[0], merged);
    let all = store.all_txn_offsets().await.expect("all");
    let mut ids: Vec<_> = all
        .iter()
        .map(|r| (r.group_id.clone(), r.producer_id))
        .collect();
    ids.sort();
    assert_eq!(
        ids,
        vec![
            ("tx".to_string(), 7),
            (g.to_string(), 7),
            (g.to_string(), 8)
        ]
    );

    let mut of_7 = store.txn_offsets_groups(7).await.expect("groups of 7");
    of_7.sort();
    assert_eq!(of_7, vec!["tx".to_string(), g.to_string()]);
    assert_eq!(
        store.txn_offsets_groups(8).await.expect("groups of 8"),
        vec![g.to_string()]
    );
    assert!(store.txn_offsets_groups(1).await.expect("none").is_empty());

    // A marker of an older epoch leaves a newer transaction's offsets alone.
    assert_eq!(
        store
            .complete_txn_offsets(g, 7, 1, true)
            .await
            .expect("late marker"),
        None
    );
    // Commit: committed offsets and the record gone, together; a retry is a no-op.
    let done = store
        .complete_txn_offsets(g, 7, 2, true)
        .await
        .expect("commit")
        .expect("a record");
    assert_eq!(done, merged);
    assert_eq!(
        store.fetch_offsets(g).await.expect("fetch"),
        vec![
            committed("t", 0, 10),
            committed("t", 1, 11),
            committed("u", 0, 3)
        ]
    );
    assert_eq!(
        store
            .complete_txn_offsets(g, 7, 2, true)
            .await
            .expect("retry"),
        None
    );
    // Abort: dropped, nothing committed.
    store
        .complete_txn_offsets(g, 8, 0, false)
        .await
        .expect("abort")
        .expect("a record");
    assert_eq!(store.fetch_offsets(g).await.expect("fetch")[0].offset, 10);
    assert!(store.txn_offsets(g).await.expect("by group").is_empty());

    // More partitions than one etcd transaction holds still all land.
    let wide: Vec<_> = (0..300).map(|p| committed("wide", p, 42)).collect();
    store
        .put_txn_offsets("tx", 9, 0, wide.clone())
        .await
        .expect("wide pending");
    store
        .complete_txn_offsets("tx", 9, 0, true)
        .await
        .expect("wide commit")
        .expect("a record");
    let stored = store.fetch_offsets("tx").await.expect("fetch");
    assert_eq!(stored, wide);
    store
        .complete_txn_offsets("tx", 7, 2, false)
        .await
        .expect("abort")
        .expect("a record");
    assert!(store.all_txn_offsets().await.expect("all").is_empty());
    store.delete_offsets(g, None).await.expect("cleanup");
    store.delete_offsets("tx", None).await.expect("cleanup");
}
