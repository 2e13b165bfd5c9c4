//! Mirror records (cluster links and mirror topics, issue 20): compare-and-swap, listing
//! per kind, deletion and the watch, the same on every backend.

use super::next;
use oxbow_metadata::{
    ErrorKind, Link, LinkSecurity, LinkState, MetadataStore, MirrorEvent, MirrorKind, MirrorState,
    MirrorTopic, MIRROR_RECORD_BYTES_MAX,
};

pub async fn mirror_records(store: &dyn MetadataStore) {
    let mut watch = store.watch_mirror().await.expect("watch");
    let link = Link {
        name: "east".into(),
        bootstrap: "10.0.0.1:9092".into(),
        security: LinkSecurity::default(),
        topics: vec!["orders".into()],
        groups: vec![],
        state: LinkState::Active,
    };
    let v1 = store
        .put_mirror_record(MirrorKind::Link, "east", link.encode().expect("enc"), None)
        .await
        .expect("create");
    let e = store
        .put_mirror_record(MirrorKind::Link, "east", link.encode().expect("enc"), None)
        .await
        .expect_err("exists");
    assert_eq!(e.kind(), ErrorKind::Conflict);
    let paused = Link {
        state: LinkState::Paused,
        ..link.clone()
    };
    let v2 = store
        .put_mirror_record(
            MirrorKind::Link,
            "east",
            paused.encode().expect("enc"),
            Some(v1),
        )
        .await
        .expect("pause");
    let e = store
        .put_mirror_record(
            MirrorKind::Link,
            "east",
            link.encode().expect("enc"),
            Some(v1),
        )
        .await
        .expect_err("stale");
    assert_eq!(e.kind(), ErrorKind::Conflict);
    let topic = MirrorTopic {
        topic: "orders".into(),
        link: "east".into(),
        source_topic: "orders".into(),
        state: MirrorState::Mirroring,
        error: None,
    };
    store
        .put_mirror_record(
            MirrorKind::Topic,
            "orders",
            topic.encode().expect("enc"),
            None,
        )
        .await
        .expect("topic");
    let links = store.mirror_records(MirrorKind::Link).await.expect("list");
    assert_eq!(links.len(), 1);
    assert_eq!(links[0].version, v2);
    assert_eq!(Link::decode(&links[0].value).expect("dec"), paused);
    let topics = store.mirror_records(MirrorKind::Topic).await.expect("list");
    assert_eq!(MirrorTopic::decode(&topics[0].value).expect("dec"), topic);
    for (name, len) in [("a/b", 1), ("big", MIRROR_RECORD_BYTES_MAX + 1)] {
        let e = store
            .put_mirror_record(MirrorKind::Link, name, vec![b'x'; len], None)
            .await
            .expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::Invalid, "{name}");
    }
    store
        .delete_mirror_record(MirrorKind::Topic, "orders", None)
        .await
        .expect("delete");
    store
        .delete_mirror_record(MirrorKind::Link, "east", Some(v2))
        .await
        .expect("delete at version");
    assert!(store
        .mirror_records(MirrorKind::Link)
        .await
        .expect("list")
        .is_empty());
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(match next(&mut watch, "mirror change").await {
            MirrorEvent::Put(r) => format!("put {} {}", r.kind.segment(), r.name),
            MirrorEvent::Deleted { kind, name } => format!("delete {} {name}", kind.segment()),
        });
    }
    assert_eq!(
        seen,
        [
            "put links east",
            "put links east",
            "put topics orders",
            "delete topics orders",
            "delete links east",
        ]
    );
}
