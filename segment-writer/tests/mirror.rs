//! The mirror append on one node (issue 20): source batches held at the source's offsets,
//! byte for byte but for the leader epoch; below the log end skipped, gaps covered by empty
//! batches, corrupt or straddling batches refused; producer and transaction state carried,
//! so a promoted topic's idempotent producers and `read_committed` readers work; everything
//! survives a restart (WAL replay) and a seal (reads from the object store).

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use oxbow_metadata::{EmbeddedStore, MetadataStore, TopicSpec};
use oxbow_segment_writer::batch::testing::{make_batch, make_idempotent_batch, make_txn_batch};
use oxbow_segment_writer::batch::{self, BatchHeader};
use oxbow_segment_writer::txn::{marker_batch, Marker};
use oxbow_segment_writer::{Acks, AppendPolicy, ErrorKind, LogManager, Mirrored, Partition};
use std::collections::BTreeMap;
use std::sync::Arc;

mod common;

/// `b` as the source stored it: at `base`, under the source's leader epoch 77.
fn at(b: &[u8], base: i64) -> Vec<u8> {
    let mut b = b.to_vec();
    b[0..8].copy_from_slice(&base.to_be_bytes());
    b[12..16].copy_from_slice(&77i32.to_be_bytes());
    b
}

fn header(b: &[u8]) -> BatchHeader {
    batch::peek_header(b).expect("header").expect("whole")
}

async fn mirror(
    log: &LogManager,
    p: &Arc<Partition>,
    raw: &[u8],
) -> oxbow_segment_writer::Result<usize> {
    match log.enqueue_mirrored(p, raw, 1 << 20, 1).await? {
        Mirrored::Skipped => Ok(0),
        Mirrored::Queued(pending) => {
            let n = pending.len();
            for a in pending {
                a.wait().await?;
            }
            Ok(n)
        }
    }
}

async fn setup(dir: &std::path::Path) -> (Arc<dyn MetadataStore>, oxbow_metadata::TopicMetadata) {
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(EmbeddedStore::open(&dir.join("meta.redb")).expect("meta"));
    let topic = metadata
        .create_topic(
            TopicSpec {
                name: "m".into(),
                partitions: 1,
                replication_factor: 1,
                configs: BTreeMap::new(),
            },
            1,
        )
        .await
        .expect("topic");
    (metadata, topic)
}

/// The source's batch and the mirror's agree on every byte but the leader epoch.
fn assert_same_batch(mirrored: &Bytes, source: &[u8]) {
    assert_eq!(mirrored.len(), source.len());
    assert_eq!(&mirrored[..12], &source[..12], "base offset and length");
    assert_eq!(
        &mirrored[16..],
        &source[16..],
        "magic, CRC and everything it covers"
    );
}

#[tokio::test]
async fn mirrored_batches_keep_offsets_bytes_and_gaps_and_survive_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let (metadata, topic) = setup(dir.path()).await;
    // Source log: starts at 5 (its log start), 5..=7, 8..=9, a compacted gap 10..=19, 20..=22.
    let s1 = at(&make_idempotent_batch(3, 1_000, 42, 3, 0), 5);
    let s2 = at(&make_idempotent_batch(2, 2_000, 42, 3, 3), 8);
    let s3 = at(&make_batch(3, 500), 20);
    {
        let log = common::open(dir.path(), metadata.clone()).await;
        let p = log.partition(&topic, 0).await.expect("p");
        assert_eq!(
            mirror(&log, &p, &s1).await.expect("s1"),
            2,
            "filler 0..=4 then s1"
        );
        assert_eq!(mirror(&log, &p, &s2).await.expect("s2"), 1);
        // A new leader re-fetching from a little earlier: skipped, not appended twice.
        assert_eq!(mirror(&log, &p, &s1).await.expect("again"), 0);
        assert_eq!(
            mirror(&log, &p, &s3).await.expect("s3"),
            2,
            "filler 10..=19 then s3"
        );
        assert_eq!(p.offsets().expect("offsets"), (0, 23, 23));
        let r = log.read(&p, 5, 1 << 20, true).await.expect("read");
        assert_eq!(common::offsets(&r.batches), vec![5, 8, 10, 20]);
        assert_same_batch(&r.batches[0], &s1);
        assert_same_batch(&r.batches[1], &s2);
        assert_same_batch(&r.batches[3], &s3);
        let filler = header(&r.batches[2]);
        assert_eq!((filler.last_offset(), filler.record_count), (19, 0));
        // The destination's epoch, not the source's, so OffsetForLeaderEpoch is answered
        // from the destination's own history.
        assert_eq!(
            header(&r.batches[0]).partition_leader_epoch,
            p.leader_epoch().expect("epoch")
        );
        // A read inside the gap gets the filler, which consumers step over.
        let r = log.read(&p, 12, 1 << 20, true).await.expect("read gap");
        assert_eq!(common::offsets(&r.batches), vec![10, 20]);
        // Producer 42's state came with its batches.
        let producers = p.active_producers().expect("producers");
        assert!(
            producers.iter().any(|a| a.producer_id == 42),
            "{producers:?}"
        );
    }
    // Restart: the WAL replays the mirrored batches at their offsets.
    let log = common::open(dir.path(), metadata.clone()).await;
    let p = log.partition(&topic, 0).await.expect("p");
    assert_eq!(p.offsets().expect("offsets").1, 23);
    // Sealed, then read back from the object store (no tail in memory).
    log.seal_once().await.expect("seal");
    let r = log.read(&p, 0, 1 << 20, true).await.expect("read");
    assert_eq!(common::offsets(&r.batches), vec![0, 5, 8, 10, 20]);
    assert_same_batch(&r.batches[1], &s1);
    assert_same_batch(&r.batches[4], &s3);
    // Promoted: producer 42 goes on with its next sequence at the next offset, and its
    // retry of the last mirrored batch is recognised as a duplicate, not written again.
    let policy = AppendPolicy::of(&topic.configs);
    let dup = log
        .append(
            &p,
            &make_idempotent_batch(2, 2_000, 42, 3, 3),
            &policy,
            Acks::All,
        )
        .await
        .expect("retry");
    assert!(dup.duplicate);
    assert_eq!(dup.base_offset, 8);
    let next = log
        .append(
            &p,
            &make_idempotent_batch(1, 3_000, 42, 3, 5),
            &policy,
            Acks::All,
        )
        .await
        .expect("next");
    assert_eq!((next.base_offset, next.duplicate), (23, false));
}

#[tokio::test]
async fn corrupt_and_straddling_source_batches_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let (metadata, topic) = setup(dir.path()).await;
    let log = common::open(dir.path(), metadata.clone()).await;
    let p = log.partition(&topic, 0).await.expect("p");
    mirror(&log, &p, &at(&make_batch(4, 1), 0))
        .await
        .expect("0..=3");
    let mut corrupt = at(&make_batch(2, 1), 4);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0x10;
    let e = mirror(&log, &p, &corrupt).await.expect_err("corrupt");
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    // The source rewrote its log: a batch 2..=5 over what was mirrored as 0..=3.
    let e = mirror(&log, &p, &at(&make_batch(4, 1), 2))
        .await
        .expect_err("straddles");
    assert!(e.to_string().contains("straddles"), "{e}");
    // Too large for the link's bound.
    let big = at(&make_batch(60, 1), 4);
    assert!(log.enqueue_mirrored(&p, &big, 100, 1).await.is_err());
    assert_eq!(p.offsets().expect("offsets"), (0, 4, 4));
}

#[tokio::test]
async fn mirrored_transactions_keep_markers_and_the_last_stable_offset() {
    let dir = tempfile::tempdir().expect("tmp");
    let (metadata, topic) = setup(dir.path()).await;
    let log = common::open(dir.path(), metadata.clone()).await;
    let p = log.partition(&topic, 0).await.expect("p");
    mirror(&log, &p, &at(&make_txn_batch(2, 1, 9, 0, 0), 0))
        .await
        .expect("txn data");
    mirror(&log, &p, &at(&make_batch(1, 1), 2))
        .await
        .expect("plain");
    // Open transaction from 0: read_committed stops there.
    assert_eq!(p.last_stable_offset().expect("lso"), 0);
    assert_eq!(p.open_txns().expect("open"), vec![(9, 0, 0)]);
    let commit = marker_batch(
        9,
        0,
        Marker {
            commit: true,
            coordinator_epoch: 4,
        },
        5,
    );
    mirror(&log, &p, &at(&commit, 3)).await.expect("marker");
    assert_eq!(p.last_stable_offset().expect("lso"), 4);
    assert!(p.open_txns().expect("open").is_empty());
    let r = log.read(&p, 3, 1 << 20, true).await.expect("read");
    assert!(header(&r.batches[0]).is_control());
}
