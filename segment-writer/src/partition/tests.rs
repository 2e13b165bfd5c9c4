use super::*;
use crate::batch::{peek_header, stamp, tests::make_batch};

fn add(state: &mut PartitionLogState, count: i32) -> Offset {
    let raw = make_batch(count, 1000);
    let h = peek_header(&raw).expect("ok").expect("whole");
    let bytes = stamp(&raw, state.next_offset(), 0, None);
    state.append(&h, bytes)
}

#[test]
fn offsets_are_dense_and_visibility_follows_durability() {
    let mut s = PartitionLogState::new(0, 0, 0);
    assert_eq!(add(&mut s, 3), 0);
    assert_eq!(add(&mut s, 2), 3);
    assert_eq!(s.log_end_offset, 5);
    assert_eq!(s.high_watermark, 0);
    assert_eq!(
        s.plan_read(0, 1 << 20, true).expect("ok"),
        ReadPlan::Memory(vec![])
    );
    // The second batch becomes durable first: the watermark waits for the first.
    assert!(!s.mark_durable(3, Some(1)));
    assert_eq!(s.high_watermark, 0);
    assert!(s.mark_durable(0, Some(0)));
    assert_eq!(s.high_watermark, 5);
    match s.plan_read(4, 1 << 20, true).expect("ok") {
        ReadPlan::Memory(b) => assert_eq!(b.len(), 1),
        other => panic!("unexpected {other:?}"),
    }
    assert!(matches!(
        s.plan_read(6, 1 << 20, true),
        Err(Error::OffsetOutOfRange { .. })
    ));
}

#[test]
fn max_bytes_returns_at_least_one_batch() {
    let mut s = PartitionLogState::new(0, 0, 0);
    for _ in 0..3 {
        let b = add(&mut s, 1);
        s.mark_durable(b, Some(b as u64));
    }
    match s.plan_read(0, 1, true).expect("ok") {
        ReadPlan::Memory(b) => assert_eq!(b.len(), 1),
        other => panic!("unexpected {other:?}"),
    }
    match s.plan_read(0, 1, false).expect("ok") {
        ReadPlan::Memory(b) => assert!(b.is_empty()),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn sealing_and_eviction_move_reads_to_objects() {
    let mut s = PartitionLogState::new(0, 0, 0);
    for _ in 0..4 {
        let b = add(&mut s, 2);
        s.mark_durable(b, Some(b as u64));
    }
    assert_eq!(s.unsealed().len(), 4);
    assert_eq!(s.min_unsealed_wal_sequence(), Some(0));
    s.mark_sealed(3);
    assert_eq!(s.sealed_end, 4);
    assert_eq!(s.unsealed().len(), 2);
    assert_eq!(s.min_unsealed_wal_sequence(), Some(4));
    s.evict(0);
    assert_eq!(
        s.plan_read(0, 1 << 20, true).expect("ok"),
        ReadPlan::Objects
    );
    assert!(matches!(s.plan_read(4, 1 << 20, true), Ok(ReadPlan::Memory(b)) if b.len() == 2));
    assert!(s.read_memory_from(2, 1 << 20).is_empty());
}

/// The tail kept for readers is `keep_bytes` of sealed batches whatever the unsealed ones
/// hold: under a high produce rate more than that awaits the next seal, and the sealed
/// tail must not be dropped for it.
#[test]
fn eviction_keeps_the_sealed_tail_beside_a_large_unsealed_one() {
    let mut s = PartitionLogState::new(0, 0, 0);
    for _ in 0..8 {
        let b = add(&mut s, 2);
        s.mark_durable(b, Some(b as u64));
    }
    let one = s.memory_bytes() / 8;
    // Four batches sealed, four awaiting the next seal.
    s.mark_sealed(7);
    assert_eq!(s.sealed_memory_bytes(), 4 * one);
    s.evict(2 * one);
    assert_eq!(s.sealed_memory_bytes(), 2 * one, "two sealed batches kept");
    assert_eq!(s.unsealed_bytes(), 4 * one);
    assert!(matches!(s.plan_read(4, 1 << 20, true), Ok(ReadPlan::Memory(b)) if b.len() == 6));
    assert_eq!(
        s.plan_read(3, 1 << 20, true).expect("ok"),
        ReadPlan::Objects
    );
}

#[test]
fn carried_producers_are_the_newest_idle_ones_before_the_chunk_within_the_cap() {
    let mut s = PartitionLogState::new(0, 0, 0);
    let h0 = peek_header(&make_batch(1, 0)).expect("ok").expect("whole");
    // Producers 1, 2, 3 write one batch each at offsets 0, 1, 2; producer 1 again at 3.
    for (pid, seq) in [(1, 0), (2, 0), (3, 0), (1, 1)] {
        let mut h = h0;
        h.producer_id = pid;
        h.producer_epoch = 0;
        h.base_sequence = seq;
        s.append(&h, Bytes::from_static(b"x"));
    }
    let ids = |rows: Vec<ProducerBatch>| -> Vec<(i64, i64)> {
        rows.iter()
            .map(|b| (b.producer_id, b.base_offset))
            .collect()
    };
    // Newest producer first, each with its remembered batches in order.
    assert_eq!(
        ids(s.carried_producers(10, 10)),
        vec![(1, 0), (1, 3), (3, 2), (2, 1)]
    );
    // A chunk starting at 3 holds producer 1's last batch: producer 1 is left out (the
    // chunk carries it as its own), the others are carried.
    assert_eq!(ids(s.carried_producers(3, 10)), vec![(3, 2), (2, 1)]);
    // Whole producers within the cap.
    assert_eq!(
        ids(s.carried_producers(10, 3)),
        vec![(1, 0), (1, 3), (3, 2)]
    );
}

#[test]
fn chunks_carry_every_producer_when_a_checkpoint_is_due_and_fits_else_point_to_the_last() {
    let mut s = PartitionLogState::new(0, 0, 0);
    let h0 = peek_header(&make_batch(1, 0)).expect("ok").expect("whole");
    let many = producer_summary::CARRIED_ROWS_MAX as i64 + 44;
    for pid in 0..many {
        let mut h = h0;
        h.producer_id = pid;
        h.producer_epoch = 0;
        h.base_sequence = 0;
        s.append(&h, Bytes::from_static(b"x"));
    }
    let end = many;
    let kinds = |c: &CarriedRows| {
        let checkpoints: Vec<Offset> = c
            .rows
            .iter()
            .filter(|b| b.kind == producer_summary::RowKind::Checkpoint)
            .map(|b| b.base_offset)
            .collect();
        (c.rows.len() - checkpoints.len(), checkpoints, c.complete)
    };
    // None since this leadership began: due, but only if it fits the object's room.
    let rows = many as usize;
    assert_eq!(kinds(&s.carried_rows(end, end, rows)), (rows, vec![], true));
    let capped = producer_summary::CARRIED_ROWS_MAX;
    assert_eq!(
        kinds(&s.carried_rows(end, end, rows - 1)),
        (capped, vec![], false)
    );
    s.note_chunk_sealed(end, true);
    // Soon after: not due, the newest rows and where the complete one began.
    assert_eq!(
        kinds(&s.carried_rows(end + 10, end + 10, usize::MAX)),
        (capped, vec![end], false)
    );
    s.note_chunk_sealed(end + 10, false);
    // Far enough on: due again.
    let far = end + producer_summary::CHECKPOINT_RECORDS_MIN;
    assert_eq!(
        kinds(&s.carried_rows(far, far, usize::MAX)),
        (rows, vec![], true)
    );
}

#[test]
fn idempotent_producer_dedup_and_ordering() {
    let mut s = PartitionLogState::new(0, 0, 0);
    let mut h = peek_header(&make_batch(2, 0)).expect("ok").expect("whole");
    h.producer_id = 9;
    h.producer_epoch = 0;
    h.base_sequence = 0;
    assert_eq!(s.check_sequence(&h).expect("ok"), SequenceCheck::Append);
    let base = s.append(&h, Bytes::from_static(b"x"));
    assert_eq!(
        s.check_sequence(&h).expect("ok"),
        SequenceCheck::Duplicate(base)
    );
    let mut next = h;
    next.base_sequence = 2;
    assert_eq!(s.check_sequence(&next).expect("ok"), SequenceCheck::Append);
    let mut gap = h;
    gap.base_sequence = 5;
    assert!(matches!(
        s.check_sequence(&gap),
        Err(Error::OutOfOrderSequence { .. })
    ));
    let mut old = h;
    old.producer_epoch = -1;
    old.base_sequence = 2;
    assert!(matches!(
        s.check_sequence(&old),
        Err(Error::ProducerFenced { .. })
    ));
    let mut bumped = h;
    bumped.producer_epoch = 1;
    assert_eq!(
        s.check_sequence(&bumped).expect("ok"),
        SequenceCheck::Append
    );
}

#[test]
fn replay_skips_catalogued_and_refuses_gaps() {
    let mut s = PartitionLogState::new(0, 0, 2);
    let raw = make_batch(2, 0);
    let at0 = stamp(&raw, 0, 0, None);
    let h0 = peek_header(&at0).expect("ok").expect("whole");
    assert!(!s.replay(&h0, at0.clone(), 0).expect("skip"));
    let at2 = stamp(&raw, 2, 0, None);
    let h2 = peek_header(&at2).expect("ok").expect("whole");
    assert!(s.replay(&h2, at2, 1).expect("applied"));
    assert_eq!(s.high_watermark, 4);
    let at9 = stamp(&raw, 9, 0, None);
    let h9 = peek_header(&at9).expect("ok").expect("whole");
    assert!(s.replay(&h9, at9, 2).is_err());
}

#[test]
fn transactions_hold_the_last_stable_offset_and_markers_fence_older_epochs() {
    use crate::batch::testing::make_txn_batch;
    use crate::txn::{marker_batch, Marker};
    let mut s = PartitionLogState::new(0, 0, 0);
    let append = |s: &mut PartitionLogState, raw: &[u8]| -> Offset {
        let h = peek_header(raw).expect("ok").expect("whole");
        let bytes = stamp(raw, s.next_offset(), 0, None);
        let base = s.append(&h, bytes);
        s.mark_durable(base, Some(base as u64));
        base
    };
    add(&mut s, 1);
    s.mark_durable(0, Some(0));
    let first = append(&mut s, &make_txn_batch(2, 1000, 7, 0, 0));
    assert_eq!(first, 1);
    add(&mut s, 1);
    s.mark_durable(3, Some(3));
    assert_eq!((s.high_watermark, s.last_stable_offset()), (4, 1));
    let abort = Marker {
        commit: false,
        coordinator_epoch: 0,
    };
    let h = peek_header(&marker_batch(7, 1, abort, 0))
        .expect("ok")
        .expect("whole");
    let marker = s.append(&h, stamp(&marker_batch(7, 1, abort, 0), 4, 0, None));
    assert_eq!(s.last_stable_offset(), 1, "the marker is not durable yet");
    s.mark_durable(marker, Some(9));
    assert_eq!(s.last_stable_offset(), 5);
    assert_eq!(s.aborted_in(0, 5).len(), 1);
    assert_eq!(s.producer_epoch(7), Some(1));
    // The marker's epoch fences the producer's older one.
    let old = peek_header(&make_txn_batch(1, 1000, 7, 0, 2))
        .expect("ok")
        .expect("whole");
    assert!(matches!(
        s.check_sequence(&old),
        Err(Error::ProducerFenced { current: 1, .. })
    ));
    let next = peek_header(&make_txn_batch(1, 1000, 7, 1, 0))
        .expect("ok")
        .expect("whole");
    assert_eq!(s.check_sequence(&next).expect("ok"), SequenceCheck::Append);
    // An append the WAL could not take is undone, its transaction with it.
    let raw = make_txn_batch(1, 1000, 8, 0, 0);
    let h = peek_header(&raw).expect("ok").expect("whole");
    let base = s.append(&h, stamp(&raw, 5, 0, None));
    s.undo_last_append(base);
    assert!(s.open_txns().is_empty());
}
