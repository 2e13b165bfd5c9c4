//! The aborted-transaction index carried by catalog entries (ARCHITECTURE decision 29), end to
//! end on one node: a transaction aborted and sealed is reported to `read_committed` reads
//! from a new leader (below its index floor) and from a broker that does not lead the
//! partition, from the catalogue alone — no header walk — and still after compaction into a
//! segment and after the log start moves past part of it.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use oxbow_cache::ReadCache;
use oxbow_metadata::{EntryLayout, MetadataStore};
use oxbow_segment_writer::batch::{testing::make_batch, testing::make_txn_batch};
use oxbow_segment_writer::{
    objects, Acks, AppendPolicy, Compactor, Isolation, LogManager, ReadResult,
};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

mod common;

use common::*;

fn aborts(r: &ReadResult) -> Vec<(i64, i64, i64)> {
    r.aborted
        .as_ref()
        .expect("read_committed carries aborts")
        .iter()
        .map(|a| (a.producer_id, a.first_offset, a.last_offset))
        .collect()
}

/// (reads told by the catalogue's index, reads that walked headers).
fn paths(log: &LogManager) -> (u64, u64) {
    (
        log.metrics.aborts_from_catalog.load(Ordering::Relaxed),
        log.metrics.aborts_by_header_walk.load(Ordering::Relaxed),
    )
}

/// Another broker over the same metadata and object store (it leads nothing).
async fn other_broker(dir: &Path, metadata: Arc<dyn MetadataStore>) -> Arc<LogManager> {
    let mut s = settings(&dir.join("b2"));
    s.broker_id = 2;
    let store = objects::local(&dir.join("objects")).expect("object store");
    LogManager::open(s, metadata, store, ReadCache::new(1 << 20))
        .await
        .expect("open broker 2")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborts_are_read_from_the_catalogue_by_new_leaders_and_other_brokers() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::open(&dir.path().join("meta.redb")).expect("meta"));
    let topic = topic(&metadata).await;
    let tp = oxbow_metadata::TopicPartition::new(topic.topic_id, 0);
    let policy = AppendPolicy::of(&topic.configs);
    {
        let log = open(dir.path(), metadata.clone()).await;
        let p = log.partition(&topic, 0).await.expect("p0");
        // 0: 900's data; 2: plain; 3: 901's data; 5: 901 aborts; 6: 902's data; 7: 900
        // commits | seal | 8: 902's data; 9: 902 aborts; 10: plain | seal | 11: plain | seal.
        for raw in [
            make_txn_batch(2, 1000, 900, 0, 0),
            make_batch(1, 1000),
            make_txn_batch(2, 1000, 901, 0, 0),
        ] {
            log.append(&p, &raw, &policy, Acks::All)
                .await
                .expect("append");
        }
        log.write_marker(&p, 901, 0, false, 0, &policy)
            .await
            .expect("abort 901");
        // 902 begins before the seal and aborts after it: open across the seal.
        log.append(&p, &make_txn_batch(1, 1000, 902, 0, 0), &policy, Acks::All)
            .await
            .expect("902's first batch");
        log.write_marker(&p, 900, 0, true, 0, &policy)
            .await
            .expect("commit 900");
        log.seal_once().await.expect("seal");
        log.append(&p, &make_txn_batch(1, 1000, 902, 0, 1), &policy, Acks::All)
            .await
            .expect("902's second batch");
        log.write_marker(&p, 902, 0, false, 0, &policy)
            .await
            .expect("abort 902");
        log.append(&p, &make_batch(1, 1000), &policy, Acks::All)
            .await
            .expect("plain");
        log.seal_once().await.expect("seal");
        log.append(&p, &make_batch(1, 1000), &policy, Acks::All)
            .await
            .expect("plain");
        log.seal_once().await.expect("seal");
    }
    // Each chunk's index: its aborts, and where the oldest transaction open after it began.
    let entries = metadata
        .catalog_entries(topic.topic_id, 0, 0, 100)
        .await
        .expect("catalog");
    let spans: Vec<(i64, i64, Option<i64>, usize)> = entries
        .iter()
        .map(|e| {
            let t = e.txn.as_ref().expect("every entry is indexed");
            (e.base_offset, e.last_offset, t.stable_end, t.aborts.len())
        })
        .collect();
    assert_eq!(
        spans,
        vec![
            (0, 7, Some(6), 1),
            (8, 10, Some(11), 1),
            (11, 11, Some(12), 0)
        ],
        "902 is open after the first chunk, from 6"
    );
    // A new leader: its index floor is the catalogue's end, everything is below it.
    std::fs::remove_dir_all(dir.path().join("wal")).expect("clear the WAL");
    let log = open(dir.path(), metadata.clone()).await;
    let p = log.partition(&topic, 0).await.expect("reopen");
    let read = |log: Arc<LogManager>, from: i64| {
        let p = p.clone();
        async move {
            log.read_isolated(&p, from, 1 << 20, true, Isolation::ReadCommitted)
                .await
                .expect("read")
        }
    };
    let r = read(log.clone(), 0).await;
    assert_eq!(offsets(&r.batches), vec![0, 2, 3, 5, 6, 7, 8, 9, 10, 11]);
    assert_eq!(
        aborts(&r),
        vec![(901, 3, 5), (902, 6, 9)],
        "told of both aborts"
    );
    assert_eq!(offsets(&r.committed_batches()), vec![0, 2, 10, 11]);
    // From inside the first chunk: 902, open after it, sends the walk on to the entry whose
    // stop hint passes the read's end.
    let r = read(log.clone(), 4).await;
    assert_eq!(aborts(&r), vec![(901, 3, 5), (902, 6, 9)]);
    assert_eq!(paths(&log), (2, 0), "no header walk");

    // A broker that does not lead the partition.
    let b2 = other_broker(dir.path(), metadata.clone()).await;
    let r = b2
        .read_catalogued_isolated(tp, 0, 0, 1 << 20, true, Isolation::ReadCommitted)
        .await
        .expect("read on broker 2");
    assert_eq!(aborts(&r), vec![(901, 3, 5), (902, 6, 9)]);
    assert_eq!(r.last_stable_offset, 12);
    assert_eq!(paths(&b2), (1, 0), "no header walk");

    // Compaction into one segment keeps the index (the union, the last stop hint).
    let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::ZERO));
    let stats = compactor
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    assert!(stats.segments_written >= 1);
    let entries = metadata
        .catalog_entries(topic.topic_id, 0, 0, 100)
        .await
        .expect("catalog");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].layout, EntryLayout::SegmentIndex);
    let index = entries[0].txn.as_ref().expect("segment indexed");
    assert_eq!((index.stable_end, index.aborts.len()), (Some(12), 2));
    let b3 = other_broker(dir.path(), metadata.clone()).await;
    let r = b3
        .read_catalogued_isolated(tp, 0, 1, 1 << 20, true, Isolation::ReadCommitted)
        .await
        .expect("read the segment on another broker");
    assert_eq!(aborts(&r), vec![(901, 3, 5), (902, 6, 9)]);
    assert_eq!(paths(&b3), (1, 0), "no header walk after compaction");

    // A leader after the compaction, and after the log start moved into 902's transaction:
    // its abort (marker retained) is still reported; 901's (wholly below) is not.
    drop(compactor);
    drop(log);
    std::fs::remove_dir_all(dir.path().join("wal")).expect("clear the WAL");
    let log = open(dir.path(), metadata.clone()).await;
    let p = log
        .partition(&topic, 0)
        .await
        .expect("reopen after compaction");
    log.advance_log_start(&p, 8).await.expect("log start to 8");
    let r = log
        .read_isolated(&p, 8, 1 << 20, true, Isolation::ReadCommitted)
        .await
        .expect("read");
    assert_eq!(offsets(&r.batches), vec![8, 9, 10, 11]);
    assert_eq!(aborts(&r), vec![(902, 6, 9)]);
    assert_eq!(offsets(&r.committed_batches()), vec![10, 11]);
    assert_eq!(paths(&log), (1, 0), "no header walk after retention");
}
