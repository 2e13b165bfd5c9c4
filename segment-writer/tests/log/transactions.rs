//! Transactions in one partition across a takeover: the last stable offset, aborts told
//! to `read_committed` readers, fencing markers and transaction verification.

use super::*;

/// Issue 16: transactions in a partition — the last stable offset waits for open ones,
/// `read_committed` reads are told of aborts (from the index, and by walking batches below a
/// new leader's index floor), an open transaction sealed into an object is still open after
/// a takeover, and a marker written by the new leader ends it; older epochs are fenced.
#[tokio::test]
async fn transactions_survive_a_takeover_and_read_committed_is_told_of_aborts() {
    use oxbow_segment_writer::{Error, Isolation};
    let dir = tempfile::tempdir().expect("tmp");
    let metadata = embedded(dir.path());
    let topic = create_topic(&metadata, "txns", 1, &[]).await;
    let policy = AppendPolicy::of(&topic.configs);
    let txn = batch::testing::make_txn_batch;
    let aborts = |r: &oxbow_segment_writer::ReadResult| -> Vec<(i64, i64)> {
        r.aborted
            .as_ref()
            .expect("read_committed carries aborts")
            .iter()
            .map(|a| (a.producer_id, a.first_offset))
            .collect()
    };
    {
        let log = open(dir.path(), metadata.clone()).await;
        let p = log.partition(&topic, 0).await.expect("p0");
        for (raw, at) in [
            (txn(2, 1000, 900, 0, 0), 0),
            (make_batch(1, 1000), 2),
            (txn(2, 1000, 901, 0, 0), 3),
        ] {
            let a = log
                .append(&p, &raw, &policy, Acks::All)
                .await
                .expect("append");
            assert_eq!(a.base_offset, at);
        }
        let marker = log
            .write_marker(&p, 901, 0, false, 3, &policy)
            .await
            .expect("abort 901");
        assert_eq!(marker, 5);
        assert_eq!(p.last_stable_offset().expect("lso"), 0, "900 is open");
        let r = log
            .read_isolated(&p, 0, 1 << 20, true, Isolation::ReadCommitted)
            .await
            .expect("read");
        assert!(r.batches.is_empty(), "nothing stable yet");
        assert_eq!((r.last_stable_offset, r.high_watermark), (0, 6));
        let r = log
            .read_isolated(&p, 0, 1 << 20, true, Isolation::ReadUncommitted)
            .await
            .expect("read");
        assert_eq!(common::offsets(&r.batches), vec![0, 2, 3, 5]);
        assert!(r.aborted.is_none());

        assert_eq!(
            log.write_marker(&p, 900, 0, true, 3, &policy)
                .await
                .expect("commit 900"),
            6
        );
        assert_eq!(p.last_stable_offset().expect("lso"), 7);
        let r = log
            .read_isolated(&p, 0, 1 << 20, true, Isolation::ReadCommitted)
            .await
            .expect("read");
        assert_eq!(common::offsets(&r.batches), vec![0, 2, 3, 5, 6]);
        assert_eq!(aborts(&r), vec![(901, 3)]);
        assert_eq!(common::offsets(&r.committed_batches()), vec![0, 2]);
        log.seal_once().await.expect("seal");
        // A transaction left open in sealed data.
        log.append(&p, &txn(2, 1000, 902, 0, 0), &policy, Acks::All)
            .await
            .expect("902");
        log.seal_once().await.expect("seal");
        assert_eq!(p.last_stable_offset().expect("lso"), 7);
    }
    std::fs::remove_dir_all(dir.path().join("wal")).expect("clear the WAL");
    let log = open(dir.path(), metadata.clone()).await;
    let p = log.partition(&topic, 0).await.expect("reopen");
    assert_eq!(p.offsets().expect("offsets").1, 9);
    assert_eq!(
        p.last_stable_offset().expect("lso"),
        7,
        "902's transaction, open in sealed data, is still open"
    );
    // Below this leader's index floor: the aborts are found by walking the batches.
    let r = log
        .read_isolated(&p, 0, 1 << 20, true, Isolation::ReadCommitted)
        .await
        .expect("read");
    assert_eq!(common::offsets(&r.batches), vec![0, 2, 3, 5, 6]);
    assert_eq!(aborts(&r), vec![(901, 3)]);
    // The new leader ends it, at a bumped epoch; the old epoch is fenced from then on.
    assert_eq!(
        log.write_marker(&p, 902, 1, false, 4, &policy)
            .await
            .expect("abort 902"),
        9
    );
    assert_eq!(p.last_stable_offset().expect("lso"), 10);
    let r = log
        .read_isolated(&p, 7, 1 << 20, true, Isolation::ReadCommitted)
        .await
        .expect("read");
    assert_eq!(common::offsets(&r.batches), vec![7, 9]);
    assert_eq!(aborts(&r), vec![(902, 7)]);
    assert!(matches!(
        log.write_marker(&p, 902, 0, true, 4, &policy).await,
        Err(Error::ProducerFenced { current: 1, .. })
    ));
    assert!(matches!(
        log.append(&p, &txn(1, 1000, 902, 0, 2), &policy, Acks::All)
            .await,
        Err(Error::ProducerFenced { .. })
    ));
}

/// Issue 16: a fencing abort marker's bumped epoch is part of the producer state a new
/// leader rebuilds — from the object holding the marker, and from rows carried forward once
/// the producer is idle — so a zombie's batch at the old epoch is refused after a takeover
/// (else it opens a transaction the new producer's next commit marker would make visible).
#[tokio::test]
async fn a_fencing_markers_epoch_survives_a_takeover() {
    use oxbow_segment_writer::Error;
    let dir = tempfile::tempdir().expect("tmp");
    let metadata = embedded(dir.path());
    let topic = create_topic(&metadata, "fenced", 1, &[]).await;
    let policy = AppendPolicy::of(&topic.configs);
    let txn = batch::testing::make_txn_batch;
    for idle_after_marker in [false, true] {
        let pid = if idle_after_marker { 911 } else { 910 };
        {
            let log = open(dir.path(), metadata.clone()).await;
            let p = log.partition(&topic, 0).await.expect("p0");
            log.append(&p, &txn(1, 1000, pid, 0, 0), &policy, Acks::All)
                .await
                .expect("zombie's first batch");
            log.write_marker(&p, pid, 1, false, 0, &policy)
                .await
                .expect("the fence's abort, epoch 1");
            log.seal_once().await.expect("seal");
            if idle_after_marker {
                // Later objects hold only another producer's batches.
                log.append(&p, &make_batch(1, 1000), &policy, Acks::All)
                    .await
                    .expect("other data");
                log.seal_once().await.expect("seal");
            }
        }
        std::fs::remove_dir_all(dir.path().join("wal")).expect("clear the WAL");
        let log = open(dir.path(), metadata.clone()).await;
        let p = log.partition(&topic, 0).await.expect("reopen");
        let zombie = log
            .append(&p, &txn(1, 1000, pid, 0, 1), &policy, Acks::All)
            .await;
        assert!(
            matches!(zombie, Err(Error::ProducerFenced { current: 1, .. })),
            "idle after the marker: {idle_after_marker}: {zombie:?}"
        );
        log.seal_once().await.expect("seal");
    }
}

/// Issue 16, KIP-890 part 1: the first transactional batch of a producer with no
/// transaction open in the partition needs the guard its verification handed out; a marker
/// landing between the coordinator's answer and the append makes the guard stale; once the
/// transaction is open its later batches need none; a retry of an appended batch is still
/// answered with its offset.
#[tokio::test]
async fn a_transactions_first_batch_needs_a_standing_verification() {
    use oxbow_segment_writer::txn_verify::VerificationGuard;
    use oxbow_segment_writer::Error;
    let dir = tempfile::tempdir().expect("tmp");
    let metadata = embedded(dir.path());
    let topic = create_topic(&metadata, "verified", 1, &[]).await;
    let policy = AppendPolicy::of(&topic.configs);
    let txn = batch::testing::make_txn_batch;
    let log = open(dir.path(), metadata.clone()).await;
    let p = log.partition(&topic, 0).await.expect("p0");
    let put = |raw: Vec<u8>, guard: VerificationGuard| {
        let (log, p) = (log.clone(), p.clone());
        async move {
            log.enqueue_verified(&p, &raw, &policy, Acks::All, guard)
                .await?
                .wait()
                .await
        }
    };
    let refused = |r: &oxbow_segment_writer::Result<_>| {
        matches!(r, Err(Error::InvalidTxnState { producer_id: 920 }))
    };
    // Never verified: refused, nothing stored.
    let r = put(txn(2, 1000, 920, 0, 0), VerificationGuard::SENTINEL).await;
    assert!(refused(&r), "{r:?}");
    assert_eq!(p.offsets().expect("offsets").1, 0);
    // Verified, then a marker lands before the append: the answer is stale.
    let stale = log.start_txn_verification(&p, 920, 0).expect("guard");
    assert_ne!(stale, VerificationGuard::SENTINEL);
    log.write_marker(&p, 920, 0, false, 1, &policy)
        .await
        .expect("abort marker");
    let r = put(txn(2, 1000, 920, 0, 0), stale).await;
    assert!(refused(&r), "{r:?}");
    // Verified and appended: the transaction is open; its next batch needs no guard.
    let guard = log.start_txn_verification(&p, 920, 0).expect("guard");
    let first = put(txn(2, 1000, 920, 0, 0), guard).await.expect("verified");
    assert_eq!(
        log.start_txn_verification(&p, 920, 0).expect("open"),
        VerificationGuard::SENTINEL
    );
    let second = put(txn(2, 1000, 920, 0, 2), VerificationGuard::SENTINEL)
        .await
        .expect("open transaction");
    assert_eq!(second.base_offset, first.base_offset + 2);
    // Protocol 2: the next transaction's first batch (one epoch up) arriving before this
    // one's marker is not part of the open transaction; it needs its own verification.
    let r = put(txn(2, 1000, 920, 1, 0), VerificationGuard::SENTINEL).await;
    assert!(refused(&r), "{r:?}");
    assert_ne!(
        log.start_txn_verification(&p, 920, 1).expect("guard"),
        VerificationGuard::SENTINEL
    );
    // A retry of the first batch is a duplicate, whatever guard it carries.
    let retry = put(txn(2, 1000, 920, 0, 0), VerificationGuard::SENTINEL)
        .await
        .expect("retry");
    assert!(retry.duplicate);
    assert_eq!(retry.base_offset, first.base_offset);
    // Its commit ends the transaction: the next one is verified again.
    log.write_marker(&p, 920, 0, true, 1, &policy)
        .await
        .expect("commit");
    let r = put(txn(2, 1000, 920, 0, 4), VerificationGuard::SENTINEL).await;
    assert!(refused(&r), "{r:?}");
    // Non-transactional data is never asked about.
    put(make_batch(1, 1000), VerificationGuard::SENTINEL)
        .await
        .expect("plain batch");
}
