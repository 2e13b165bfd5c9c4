//! WAL replica sets: compare-and-swap, invariants and deletion, the same on every backend.

use oxbow_metadata::{ErrorKind, MetadataStore, WalReplicaSet};

pub fn wal_set(broker_id: i32, replicas: &[i32], isr: &[i32]) -> WalReplicaSet {
    WalReplicaSet {
        broker_id,
        incarnation: 3,
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
        eligible: Vec::new(),
        version: 0,
    }
}

pub async fn wal_replica_sets(store: &dyn MetadataStore) {
    assert!(store.wal_replica_set(1).await.expect("read").is_none());

    // Create at version 1 (the caller's `version` is ignored); a second create conflicts.
    let mut asked = wal_set(1, &[2, 3], &[2, 3]);
    asked.version = 42;
    let v1 = store
        .put_wal_replica_set(asked, None)
        .await
        .expect("create");
    assert_eq!(
        v1,
        WalReplicaSet {
            version: 1,
            ..wal_set(1, &[2, 3], &[2, 3])
        }
    );
    assert_eq!(
        store.wal_replica_set(1).await.expect("read"),
        Some(v1.clone())
    );
    let err = store
        .put_wal_replica_set(wal_set(1, &[4], &[]), None)
        .await
        .expect_err("create twice");
    assert_eq!(err.kind(), ErrorKind::Conflict);

    // Another broker's set is independent.
    let other = store
        .put_wal_replica_set(wal_set(2, &[1], &[1]), None)
        .await
        .expect("create other");
    assert_eq!(other.version, 1);

    // Replace by compare-and-swap; a stale version conflicts and changes nothing.
    let v2 = store
        .put_wal_replica_set(wal_set(1, &[2, 3], &[3]), Some(1))
        .await
        .expect("shrink isr");
    assert_eq!(v2.version, 2);
    assert_eq!(v2.isr, vec![3]);
    let err = store
        .put_wal_replica_set(wal_set(1, &[2, 4], &[2]), Some(1))
        .await
        .expect_err("stale");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let err = store
        .put_wal_replica_set(wal_set(1, &[2], &[]), Some(7))
        .await
        .expect_err("future version");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let err = store
        .put_wal_replica_set(wal_set(5, &[2], &[]), Some(1))
        .await
        .expect_err("replace of an absent set");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(
        store.wal_replica_set(1).await.expect("read"),
        Some(v2.clone())
    );

    // Invalid sets are refused, as a replace (whose version matches) and as a create.
    for (b, expected_version) in [(1, Some(2)), (9, None)] {
        for bad in [
            wal_set(b, &[b, 2], &[]),     // the broker itself
            wal_set(b, &[2, 2], &[2]),    // duplicate replica
            wal_set(b, &[2, 3], &[4]),    // isr not a subset of replicas
            wal_set(b, &[2, 3], &[3, 3]), // duplicate in-sync replica
        ] {
            let err = store
                .put_wal_replica_set(bad.clone(), expected_version)
                .await
                .expect_err("invalid");
            assert_eq!(err.kind(), ErrorKind::Invalid, "{bad:?}: {err}");
        }
    }
    assert!(store.wal_replica_set(9).await.expect("read").is_none());
    assert_eq!(store.wal_replica_set(1).await.expect("read"), Some(v2));

    // Delete by compare-and-swap.
    let err = store
        .delete_wal_replica_set(1, 1)
        .await
        .expect_err("stale delete");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    store.delete_wal_replica_set(1, 2).await.expect("delete");
    assert!(store.wal_replica_set(1).await.expect("read").is_none());
    let err = store.delete_wal_replica_set(1, 2).await.expect_err("gone");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    // Re-created after a delete: version starts again at 1.
    let again = store
        .put_wal_replica_set(wal_set(1, &[], &[]), None)
        .await
        .expect("recreate");
    assert_eq!(again.version, 1);
    store.delete_wal_replica_set(1, 1).await.expect("cleanup");
    store.delete_wal_replica_set(2, 1).await.expect("cleanup");
}
