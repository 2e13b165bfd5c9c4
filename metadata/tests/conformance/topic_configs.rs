//! Topic configs (`alter_topic_configs`): incremental changes and replacement, refused
//! whole when invalid, concurrent alterations of different keys all landing, seen by
//! watchers — the same on every backend.

use super::*;

fn set(name: &str, value: &str) -> ConfigChange {
    ConfigChange {
        name: name.to_string(),
        op: AlterOp::Set,
        value: Some(value.to_string()),
    }
}

fn overrides(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `alter_topic_configs`: a compare-and-swap on the topic record that watchers see, that
/// stores nothing invalid, and under which concurrent alterations of different keys all land.
pub async fn topic_config_alterations(store: &dyn MetadataStore) {
    let mut with = spec("altered", 2);
    with.configs = overrides(&[("retention.ms", "1000")]);
    let t = store.create_topic(with, 1).await.expect("create");
    let mut watch = store.watch_topics().await.expect("watch");

    let changed = store
        .alter_topic_configs(
            "altered",
            ConfigAlteration::Incremental(vec![set("segment.ms", "60000")]),
        )
        .await
        .expect("set");
    let want = overrides(&[("retention.ms", "1000"), ("segment.ms", "60000")]);
    assert_eq!(changed.configs.overrides, want);
    assert_eq!(changed.partitions, t.partitions, "partition states kept");
    match next(&mut watch, "configs changed").await {
        TopicEvent::Changed(got) => assert_eq!(got.configs.overrides, want),
        other => panic!("expected Changed, got {other:?}"),
    }
    let stored = store.topic("altered").await.expect("read").expect("some");
    assert_eq!(stored.configs.overrides, want);

    // Invalid: refused as a whole, nothing stored.
    for bad in [
        ConfigAlteration::Incremental(vec![set("segment.ms", "60001"), set("retention.ms", "x")]),
        ConfigAlteration::Incremental(vec![set("no.such.config", "1")]),
        ConfigAlteration::Replace(overrides(&[("segment.bytes", "14")])),
    ] {
        let err = store
            .alter_topic_configs("altered", bad)
            .await
            .expect_err("invalid");
        assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    }
    let err = store
        .alter_topic_configs("missing", ConfigAlteration::Replace(BTreeMap::new()))
        .await
        .expect_err("unknown topic");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let stored = store.topic("altered").await.expect("read").expect("some");
    assert_eq!(
        stored.configs.overrides, want,
        "refused changes left no trace"
    );

    // Concurrent alterations of different keys: each re-applied on the other's result.
    let keys = [
        "delete.retention.ms",
        "flush.ms",
        "index.interval.bytes",
        "min.compaction.lag.ms",
    ];
    let runs = keys.iter().map(|k| {
        store.alter_topic_configs("altered", ConfigAlteration::Incremental(vec![set(k, "7")]))
    });
    for r in futures::future::join_all(runs).await {
        r.expect("concurrent alteration");
    }
    let stored = store.topic("altered").await.expect("read").expect("some");
    for k in keys {
        assert_eq!(
            stored.configs.overrides.get(k).map(String::as_str),
            Some("7"),
            "{k}"
        );
    }

    // Replace: the whole set; growing the topic keeps it.
    let replaced = store
        .alter_topic_configs(
            "altered",
            ConfigAlteration::Replace(overrides(&[("cleanup.policy", "compact")])),
        )
        .await
        .expect("replace");
    assert_eq!(
        replaced.configs.overrides,
        overrides(&[("cleanup.policy", "compact")])
    );
    let grown = store
        .create_partitions("altered", 3, 1)
        .await
        .expect("grow");
    assert_eq!(grown.configs, replaced.configs);
    store.delete_topic("altered").await.expect("cleanup");
}
