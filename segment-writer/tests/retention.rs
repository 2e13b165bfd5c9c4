//! Retention end to end on one node: by size and by time the log start moves and what left
//! is deleted after the delete delay; a deposed leader's step is fenced; a round out of time
//! still applies retention; the orphan sweep deletes only old objects nothing names.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use oxbow_metadata::MetadataStore;
use oxbow_segment_writer::batch::testing::make_batch;
use oxbow_segment_writer::{Acks, AppendPolicy, CompactSettings, Compactor, ErrorKind};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

mod common;

use common::*;

/// Retention as the broker configures it: one policy for every topic.
struct Everywhere(oxbow_segment_writer::Retention);

impl oxbow_segment_writer::RetentionPolicies for Everywhere {
    fn retention(&self, _: oxbow_metadata::TopicId) -> Option<oxbow_segment_writer::Retention> {
        Some(self.0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_size_and_time_moves_the_log_start_and_deletes_what_left() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let log = open(dir.path(), metadata.clone()).await;
    produce(&log, &topic, 0, 4).await;
    let before = read_all(&log, &topic).await;
    let entries = metadata
        .catalog_entries(topic.topic_id, 0, 0, 100)
        .await
        .expect("catalog");
    assert_eq!(entries.len(), 4, "one entry per sealed object");
    // By size: keep at least the last entry's bytes: the three before it leave.
    let last = entries[3].clone();
    let keep = i64::try_from(last.byte_len).expect("size");
    let stop = CancellationToken::new();
    let delay = Duration::from_secs(300);
    let mut compactor = Compactor::new(log.clone(), compact_settings(delay)).with_retention(
        Arc::new(Everywhere(oxbow_segment_writer::Retention {
            ms: -1,
            bytes: keep,
        })),
    );
    let t0 = Instant::now();
    compactor.run_once_at(t0, &stop).await.expect("round");
    for p in 0..PARTITIONS {
        let part = log.partition(&topic, p).await.expect("partition");
        let (start, _, end) = part.offsets().expect("offsets");
        let first_kept = metadata
            .catalog_entries(topic.topic_id, p, 0, 100)
            .await
            .expect("catalog");
        assert_eq!(first_kept.len(), 1, "p{p}: only the last entry is left");
        assert_eq!(
            start, first_kept[0].base_offset,
            "p{p}: the log starts there"
        );
        // Below the start: out of range; from it: exactly what was there before.
        let below = log.read(&part, start - 1, 1 << 20, true).await;
        assert_eq!(
            below.expect_err("below the log start").kind(),
            ErrorKind::OffsetOutOfRange
        );
        let from = log.read(&part, start, 1 << 30, true).await.expect("read");
        let kept: Vec<Bytes> = before[p as usize]
            .iter()
            .filter(|b| header(b).base_offset >= start)
            .cloned()
            .collect();
        assert_eq!(
            from.batches, kept,
            "p{p}: what is above the start is untouched"
        );
        assert!(end > start);
        // Stored: a new leader (or a restarted broker) starts there too.
        let (_, state) = metadata
            .partition_state(topic.topic_id, p)
            .await
            .expect("state")
            .expect("some");
        assert_eq!(state.log_start_offset, start);
    }
    // The three objects every partition has left go once the delete delay has passed.
    assert_eq!(count_under(&objects_in(dir.path()), "data/"), 4);
    compactor
        .collect_garbage(t0 + delay - Duration::from_secs(1), &stop)
        .await
        .expect("gc");
    assert_eq!(
        count_under(&objects_in(dir.path()), "data/"),
        4,
        "not before the delay"
    );
    compactor
        .collect_garbage(t0 + delay, &stop)
        .await
        .expect("gc");
    // The round went on to compact what was left into one segment per partition, so the
    // fourth object went too.
    assert_eq!(count_under(&objects_in(dir.path()), "data/"), 0);
    assert_eq!(
        count_under(&objects_in(dir.path()), "segments/"),
        PARTITIONS as usize
    );

    // By time: the records' timestamps are from 1970, a day's retention removes the rest
    // of what is sealed (never what is not: the log end stays).
    let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::ZERO))
        .with_retention(Arc::new(Everywhere(oxbow_segment_writer::Retention {
            ms: 86_400_000,
            bytes: -1,
        })));
    compactor.run_once(&stop).await.expect("round");
    compactor
        .collect_garbage(Instant::now(), &stop)
        .await
        .expect("gc");
    for p in 0..PARTITIONS {
        let part = log.partition(&topic, p).await.expect("partition");
        let (start, _, end) = part.offsets().expect("offsets");
        assert_eq!(start, end, "p{p}: everything sealed has expired");
        let r = log
            .read(&part, start, 1 << 20, true)
            .await
            .expect("read at the end");
        assert!(r.batches.is_empty());
    }
    assert_eq!(count_under(&objects_in(dir.path()), "segments/"), 0);
    // Appends go on at the log end.
    let part = log.partition(&topic, 0).await.expect("partition");
    let (_, _, end) = part.offsets().expect("offsets");
    let appended = log
        .append(
            &part,
            &make_batch(2, 20_000),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("append");
    assert_eq!(appended.base_offset, end);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orphan_sweep_deletes_only_old_objects_nothing_names() {
    use object_store::ObjectStoreExt;
    use oxbow_segment_writer::orphans::OrphanSweeper;
    use std::time::SystemTime;
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let log = open(dir.path(), metadata.clone()).await;
    produce(&log, &topic, 0, 3).await;
    // One round of compaction: segments, and the sealed objects they replaced still there.
    let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::from_secs(3600)));
    compactor
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    let before = read_all(&log, &topic).await;
    // Leaked objects: a sealed object and a segment no catalog key names, and a file of a
    // shape Oxbow does not write.
    let store = log.object_store().clone();
    let leaked = [
        "data/b1/00000000000000099999-0123456789abcdef0123456789abcdef.oxb".to_string(),
        format!(
            "segments/{}/0/00000000000000000000-0-0123456789abcdef0123456789abcdef.oxs",
            topic.topic_id
        ),
    ];
    for key in leaked
        .iter()
        .chain(["data/b1/notes.txt".to_string()].iter())
    {
        store
            .put(
                &object_store::path::Path::from(key.as_str()),
                Bytes::from_static(b"leaked").into(),
            )
            .await
            .expect("put");
    }
    // A grace of an hour: everything is younger, nothing goes.
    let mut sweeper = OrphanSweeper::new(Duration::from_secs(3600));
    let stats = sweeper
        .sweep(store.as_ref(), metadata.as_ref(), SystemTime::now())
        .await
        .expect("sweep");
    assert_eq!((stats.candidates, stats.deleted), (0, 0));
    // Seen two hours later: the leaked two go, and so do the sealed objects compaction
    // replaced (the replace removed their catalog keys; the compactor's ledger would have
    // deleted them after its delay); the segments the catalogue names and the foreign file
    // stay.
    let later = SystemTime::now() + Duration::from_secs(7200);
    let mut deleted = 0;
    for _ in 0..2 {
        deleted += sweeper
            .sweep(store.as_ref(), metadata.as_ref(), later)
            .await
            .expect("sweep")
            .deleted;
    }
    assert_eq!(deleted, 2 + 3);
    let left = objects_in(dir.path());
    for key in &leaked {
        assert!(!left.iter().any(|p| p.ends_with(key)), "{key} deleted");
    }
    assert_eq!(count_under(&left, "segments/"), PARTITIONS as usize);
    assert_eq!(
        count_under(&left, "data/"),
        1,
        "the foreign file stays: {left:?}"
    );
    assert_eq!(
        read_all(&log, &topic).await,
        before,
        "every record still reads"
    );
    // A deleted topic: its catalogue goes, and then its objects with the next sweeps.
    metadata.delete_topic("c").await.expect("delete");
    let mut deleted = 0;
    for _ in 0..2 {
        deleted += sweeper
            .sweep(store.as_ref(), metadata.as_ref(), later)
            .await
            .expect("sweep")
            .deleted;
    }
    assert!(deleted > 0);
    let left = objects_in(dir.path());
    assert_eq!(
        count_under(&left, "data/") + count_under(&left, "segments/"),
        1,
        "only the foreign file is left: {left:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_the_log_start_is_fenced_by_leadership() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let log = open(dir.path(), metadata.clone()).await;
    produce(&log, &topic, 0, 3).await;
    let part = log.partition(&topic, 0).await.expect("partition");
    let (_, _, end) = part.offsets().expect("offsets");
    // Another change of the partition's state that keeps the leader (a version bump) is
    // raced and retried, not refused.
    let (_, state) = metadata
        .partition_state(topic.topic_id, 0)
        .await
        .expect("state")
        .expect("some");
    let bumped = metadata
        .update_partition(topic.topic_id, state.version, state.clone())
        .await
        .expect("bump");
    assert_eq!(log.advance_log_start(&part, 2).await.expect("advance"), 2);
    // Past the sealed end: refused (a new leader's recovery must start at a batch).
    assert_eq!(
        log.advance_log_start(&part, end + 1)
            .await
            .expect_err("past the sealed end")
            .kind(),
        ErrorKind::OffsetOutOfRange
    );
    // Leadership moves (the controller's failover: broker 2 at the next epoch) while this
    // broker still holds the partition open: its step is fenced, and nothing changes.
    let (_, state) = metadata
        .partition_state(topic.topic_id, 0)
        .await
        .expect("state")
        .expect("some");
    assert!(state.version > bumped.version);
    let mut moved = state.clone();
    moved.leader = 2;
    moved.leader_epoch += 1;
    metadata
        .update_partition(topic.topic_id, state.version, moved)
        .await
        .expect("move");
    let refused = log.advance_log_start(&part, 5).await;
    assert_eq!(
        refused.expect_err("a deposed leader").kind(),
        ErrorKind::NotLeader
    );
    let (_, after) = metadata
        .partition_state(topic.topic_id, 0)
        .await
        .expect("state")
        .expect("some");
    assert_eq!(
        after.log_start_offset, 2,
        "the deposed leader's step changed nothing"
    );
    assert_eq!(after.leader, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_out_of_time_still_applies_retention() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let log = open(dir.path(), metadata.clone()).await;
    produce(&log, &topic, 0, 3).await;
    let settings = CompactSettings {
        round_time_max: Duration::ZERO,
        ..compact_settings(Duration::ZERO)
    };
    let mut compactor = Compactor::new(log.clone(), settings).with_retention(Arc::new(Everywhere(
        oxbow_segment_writer::Retention {
            ms: 86_400_000,
            bytes: -1,
        },
    )));
    let stats = compactor
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    assert_eq!(stats.segments_written, 0, "no time to compact");
    for p in 0..PARTITIONS {
        let part = log.partition(&topic, p).await.expect("partition");
        let (start, _, end) = part.offsets().expect("offsets");
        assert_eq!(start, end, "p{p}: retention ran all the same");
    }
}
