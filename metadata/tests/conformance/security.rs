//! Security records (ACLs, SCRAM credentials, client quotas): compare-and-swap, listing per
//! kind, deletion and the watch, the same on every backend.

use super::next;
use oxbow_metadata::{
    ErrorKind, MetadataStore, SecurityEvent, SecurityKind, SECURITY_RECORD_BYTES_MAX,
};

pub async fn security_records(store: &dyn MetadataStore) {
    let mut watch = store.watch_security().await.expect("watch");
    let acl = SecurityKind::Acl;
    let scram = SecurityKind::ScramCredential;
    // Create: only if absent.
    let v1 = store
        .put_security_record(acl, "Topic:LITERAL:a/b", b"one".to_vec(), None)
        .await
        .expect("create");
    let e = store
        .put_security_record(acl, "Topic:LITERAL:a/b", b"again".to_vec(), None)
        .await
        .expect_err("exists");
    assert_eq!(e.kind(), ErrorKind::Conflict);
    // Replace: only at the version read.
    let v2 = store
        .put_security_record(acl, "Topic:LITERAL:a/b", b"two".to_vec(), Some(v1))
        .await
        .expect("replace");
    assert!(v2 > v1);
    let e = store
        .put_security_record(acl, "Topic:LITERAL:a/b", b"stale".to_vec(), Some(v1))
        .await
        .expect_err("stale version");
    assert_eq!(e.kind(), ErrorKind::Conflict);
    store
        .put_security_record(scram, "alice", b"creds".to_vec(), None)
        .await
        .expect("another kind");
    // Listing is per kind, with the current value and version.
    let acls = store.security_records(acl).await.expect("list");
    assert_eq!(acls.len(), 1);
    assert_eq!(acls[0].name, "Topic:LITERAL:a/b");
    assert_eq!(acls[0].value, b"two");
    assert_eq!(acls[0].version, v2);
    assert_eq!(store.security_records(scram).await.expect("list").len(), 1);
    assert!(store
        .security_records(SecurityKind::ClientQuota)
        .await
        .expect("list")
        .is_empty());
    // Bad input.
    for (name, len) in [("", 1), ("big", SECURITY_RECORD_BYTES_MAX + 1)] {
        let e = store
            .put_security_record(acl, name, vec![0; len], None)
            .await
            .expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::Invalid, "{name}");
    }
    // Delete: conditional, or not; deleting what is gone is fine.
    let e = store
        .delete_security_record(acl, "Topic:LITERAL:a/b", Some(v1))
        .await
        .expect_err("stale delete");
    assert_eq!(e.kind(), ErrorKind::Conflict);
    store
        .delete_security_record(acl, "Topic:LITERAL:a/b", Some(v2))
        .await
        .expect("delete");
    store
        .delete_security_record(scram, "alice", None)
        .await
        .expect("delete any version");
    store
        .delete_security_record(scram, "nobody", None)
        .await
        .expect("absent");
    assert!(store.security_records(acl).await.expect("list").is_empty());
    // The watch saw every change in order.
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(next(&mut watch, "security change").await);
    }
    let names: Vec<String> = seen
        .iter()
        .map(|e| match e {
            SecurityEvent::Put(r) => {
                format!("put {} {}", r.name, String::from_utf8_lossy(&r.value))
            }
            SecurityEvent::Deleted { name, .. } => format!("delete {name}"),
        })
        .collect();
    assert_eq!(
        names,
        [
            "put Topic:LITERAL:a/b one",
            "put Topic:LITERAL:a/b two",
            "put alice creds",
            "delete Topic:LITERAL:a/b",
            "delete alice",
        ]
    );
    match &seen[1] {
        SecurityEvent::Put(r) => {
            assert_eq!((r.kind, r.version), (acl, v2));
        }
        other => panic!("expected a put, got {other:?}"),
    }
}
