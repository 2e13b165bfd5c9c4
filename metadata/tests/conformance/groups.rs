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
