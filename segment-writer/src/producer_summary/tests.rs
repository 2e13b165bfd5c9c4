use super::*;
use oxbow_metadata::TopicId;

fn batch(pid: i64, epoch: i16, seq: i32, records: i32, base: Offset) -> Bytes {
    let b = crate::batch::testing::make_idempotent_batch(records, 1, pid, epoch, seq);
    crate::batch::stamp(&b, base, 0, None)
}

#[test]
fn recent_keeps_the_last_five_per_producer_in_order() {
    let mut batches = Vec::new();
    let mut off = 0;
    for i in 0..8 {
        batches.push(batch(7, 0, i * 2, 2, off));
        off += 2;
        if i % 3 == 0 {
            batches.push(batch(9, 1, i, 1, off));
            off += 1;
        }
    }
    batches.push(batch(-1, -1, -1, 1, off));
    let kept = recent_of(&batches);
    let of7: Vec<i32> = kept
        .iter()
        .filter(|b| b.producer_id == 7)
        .map(|b| b.base_sequence)
        .collect();
    assert_eq!(of7, vec![6, 8, 10, 12, 14]);
    let of9: Vec<i32> = kept
        .iter()
        .filter(|b| b.producer_id == 9)
        .map(|b| b.base_sequence)
        .collect();
    assert_eq!(of9, vec![0, 3, 6]);
    assert!(kept.windows(2).all(|w| w[0].base_offset < w[1].base_offset));
    assert_eq!(
        kept.iter()
            .find(|b| b.producer_id == 7)
            .map(|b| b.last_sequence),
        Some(7)
    );
}

#[test]
fn rows_round_trip_and_hostile_sections_are_refused() {
    let rows = vec![
        (
            0,
            ProducerBatch {
                producer_id: 3,
                producer_epoch: 2,
                base_sequence: 10,
                last_sequence: 14,
                base_offset: 99,
                kind: RowKind::Batch,
            },
            false,
        ),
        (
            1,
            ProducerBatch {
                producer_id: i64::MAX,
                producer_epoch: i16::MAX,
                base_sequence: 0,
                last_sequence: 0,
                base_offset: 0,
                kind: RowKind::Batch,
            },
            true,
        ),
    ];
    let mut out = BytesMut::new();
    encode(&rows, &mut out);
    assert_eq!(out.len(), 2 * ROW_BYTES);
    assert_eq!(decode(&out, 2), Some(rows.clone()));
    assert_eq!(
        decode(&out, 1),
        None,
        "a chunk index past the object's index"
    );
    assert_eq!(decode(&out[..ROW_BYTES + 1], 2), None, "a partial row");
    let mut negative = out.to_vec();
    negative[4] = 0x80; // producer id < 0
    assert_eq!(decode(&negative, 2), None);
    assert_eq!(decode(&[], 0), Some(vec![]));
}

#[test]
fn by_partition() {
    let tp = |p| TopicPartition::new(TopicId(uuid::Uuid::from_u128(5)), p);
    let b = ProducerBatch {
        producer_id: 1,
        producer_epoch: 0,
        base_sequence: 0,
        last_sequence: 0,
        base_offset: 4,
        kind: RowKind::Batch,
    };
    let p = ObjectProducers::new([
        (tp(1), b, false),
        (tp(2), b, false),
        (
            tp(1),
            ProducerBatch {
                base_offset: 5,
                ..b
            },
            false,
        ),
        (
            tp(2),
            ProducerBatch {
                base_offset: 1,
                ..b
            },
            true,
        ),
    ]);
    assert_eq!(p.of(&tp(1)).len(), 2);
    assert_eq!(p.of(&tp(2)), &[b]);
    assert!(p.of(&tp(3)).is_empty());
    assert_eq!(p.carried_of(&tp(2)).len(), 1);
    assert!(p.carried_of(&tp(1)).is_empty());
}

#[test]
fn open_transaction_rows_round_trip_and_only_they_may_lack_sequences() {
    let open = ProducerBatch::open_txn(9, 2, 40);
    let batch = ProducerBatch {
        producer_id: 9,
        producer_epoch: 2,
        base_sequence: 0,
        last_sequence: 1,
        base_offset: 40,
        kind: RowKind::Batch,
    };
    let rows = vec![(0, batch, false), (0, open, true)];
    let mut out = BytesMut::new();
    encode(&rows, &mut out);
    assert_eq!(decode(&out, 1), Some(rows));
    let tp = TopicPartition::new(oxbow_metadata::TopicId(uuid::Uuid::from_u128(5)), 0);
    let o = ObjectProducers::new([(tp, batch, false), (tp, open, true)]);
    assert_eq!(
        (o.of(&tp), o.open_txns_of(&tp)),
        (&[batch][..], &[open][..])
    );
    assert!(o.carried_of(&tp).is_empty());
    // Sequences -1 without the flag: not a section this broker wrote.
    let mut out = BytesMut::new();
    encode(&[(0, open, true)], &mut out);
    out[14..16].copy_from_slice(&1u16.to_be_bytes());
    assert_eq!(decode(&out, 1), None);
}

#[test]
fn marker_rows_round_trip_own_or_carried_and_never_as_open_transactions() {
    let marker = ProducerBatch::marker(9, 3, 41);
    let rows = vec![(0, marker, false), (1, marker, true)];
    let mut out = BytesMut::new();
    encode(&rows, &mut out);
    assert_eq!(decode(&out, 2), Some(rows));
    let tp = TopicPartition::new(oxbow_metadata::TopicId(uuid::Uuid::from_u128(5)), 0);
    let o = ObjectProducers::new([(tp, marker, false), (tp, marker, true)]);
    assert_eq!(
        (o.of(&tp), o.carried_of(&tp)),
        (&[marker][..], &[marker][..])
    );
    assert!(o.open_txns_of(&tp).is_empty());
    // Both kind flags at once, or a marker with sequences: refused.
    let mut both = out.to_vec();
    both[14..16].copy_from_slice(&(FLAG_MARKER | FLAG_OPEN_TXN).to_be_bytes());
    assert_eq!(decode(&both, 2), None);
    let mut sequenced = out.to_vec();
    sequenced[16..20].copy_from_slice(&0i32.to_be_bytes());
    assert_eq!(decode(&sequenced, 2), None);
}

fn row(pid: i64, epoch: i16, seq: i32, base: Offset) -> ProducerBatch {
    ProducerBatch {
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
        last_sequence: seq,
        base_offset: base,
        kind: RowKind::Batch,
    }
}

#[test]
fn segment_rows_keep_each_producers_latest_rows_at_its_newest_epoch() {
    let rows = vec![
        // Producer 1: seven batches from two sources, overlapping; the last five win.
        row(1, 0, 0, 0),
        row(1, 0, 1, 1),
        row(1, 0, 2, 2),
        row(1, 0, 3, 3),
        row(1, 0, 4, 4),
        row(1, 0, 2, 2),
        row(1, 0, 5, 5),
        row(1, 0, 6, 6),
        // Producer 2: fenced by a marker at epoch 1 after its batches at epoch 0.
        row(2, 0, 0, 7),
        ProducerBatch::marker(2, 1, 8),
        // Producer 3: its newer epoch starts over; the older epoch's rows go.
        row(3, 0, 9, 9),
        row(3, 1, 0, 10),
        // Producer 4: a batch after the segment's end is not the segment's.
        row(4, 0, 0, 11),
        row(4, 0, 1, 99),
    ];
    let got = segment_rows(rows, 20);
    let of = |pid: i64| -> Vec<(i16, i32, Offset, RowKind)> {
        got.iter()
            .filter(|b| b.producer_id == pid)
            .map(|b| (b.producer_epoch, b.base_sequence, b.base_offset, b.kind))
            .collect()
    };
    let batch = RowKind::Batch;
    assert_eq!(
        of(1),
        (2..=6)
            .map(|i| (0, i, i64::from(i), batch))
            .collect::<Vec<_>>()
    );
    assert_eq!(of(2), vec![(1, -1, 8, RowKind::Marker)]);
    assert_eq!(of(3), vec![(1, 0, 10, batch)]);
    assert_eq!(of(4), vec![(0, 0, 11, batch)]);
    assert!(got.windows(2).all(|w| w[0].base_offset < w[1].base_offset));
}

#[test]
fn segment_rows_put_open_transactions_first_once_each_from_their_first_offset() {
    let rows = vec![
        row(5, 0, 0, 30),
        ProducerBatch::open_txn(5, 0, 30),
        ProducerBatch::open_txn(5, 0, 12),
        ProducerBatch::open_txn(6, 2, 40),
        // Begun after the segment's end: not open in it.
        ProducerBatch::open_txn(7, 0, 51),
    ];
    let got = segment_rows(rows, 50);
    assert_eq!(
        got,
        vec![
            ProducerBatch::open_txn(5, 0, 12),
            ProducerBatch::open_txn(6, 2, 40),
            row(5, 0, 0, 30),
        ]
    );
}

#[test]
fn segment_rows_keep_the_newest_producers_within_the_bound() {
    let n = SEGMENT_PRODUCERS_MAX as i64 + 10;
    let got = segment_rows((0..n).map(|i| row(i, 0, 0, i)), n);
    assert_eq!(got.len(), SEGMENT_PRODUCERS_MAX);
    assert_eq!(
        got.first().map(|b| b.producer_id),
        Some(10),
        "the oldest go"
    );
    let mut run = RunProducers::default();
    for i in 0..(2 * SEGMENT_PRODUCERS_MAX as i64 + 1) {
        let b = batch(i, 0, 0, 1, i);
        run.observe(&crate::batch::peek_header(&b).expect("ok").expect("whole"));
    }
    let kept: Vec<ProducerBatch> = run.into_rows().collect();
    assert_eq!(kept.len(), SEGMENT_PRODUCERS_MAX);
    assert!(kept
        .iter()
        .all(|b| b.producer_id > SEGMENT_PRODUCERS_MAX as i64));
}

#[test]
fn run_producers_keep_the_last_five_batches_of_each() {
    let mut run = RunProducers::default();
    for i in 0..8 {
        let b = batch(3, 0, i, 1, i64::from(i));
        run.observe(&crate::batch::peek_header(&b).expect("ok").expect("whole"));
    }
    let plain = crate::batch::stamp(&crate::batch::testing::make_batch(1, 0), 9, 0, None);
    run.observe(
        &crate::batch::peek_header(&plain)
            .expect("ok")
            .expect("whole"),
    );
    let mut seqs: Vec<i32> = run.into_rows().map(|b| b.base_sequence).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, vec![3, 4, 5, 6, 7]);
}

#[test]
fn a_marker_is_a_row_of_its_producer() {
    let marker = crate::txn::marker_batch(
        7,
        4,
        crate::txn::Marker {
            commit: false,
            coordinator_epoch: 0,
        },
        1000,
    );
    let h = batch::peek_header(&marker).expect("header").expect("whole");
    assert_eq!(
        ProducerBatch::of(&h),
        Some(ProducerBatch::marker(7, 4, h.base_offset))
    );
    assert_eq!(recent_of(&[Bytes::from(marker)]).len(), 1);
}

#[test]
fn checkpoint_rows_round_trip_carried_only_and_never_as_producers() {
    let checkpoint = ProducerBatch::checkpoint(4_000);
    let batch = row(9, 0, 0, 4_100);
    let rows = vec![(0, batch, false), (0, checkpoint, true)];
    let mut out = BytesMut::new();
    encode(&rows, &mut out);
    assert_eq!(decode(&out, 1), Some(rows));
    let tp = TopicPartition::new(oxbow_metadata::TopicId(uuid::Uuid::from_u128(5)), 0);
    let o = ObjectProducers::new([(tp, batch, false), (tp, checkpoint, true)]);
    assert_eq!(o.checkpoint_of(&tp), Some(4_000));
    assert_eq!(o.of(&tp), &[batch][..]);
    assert!(o.carried_of(&tp).is_empty(), "not a producer to restore");
    // Not carried, a real producer id, sequences, a negative offset, or with another kind
    // flag: refused.
    let second = ROW_BYTES..2 * ROW_BYTES;
    let refused = |edit: &dyn Fn(&mut [u8])| {
        let mut bad = out.to_vec();
        edit(&mut bad[second.clone()]);
        decode(&bad, 1)
    };
    assert_eq!(
        refused(&|r| r[14..16].copy_from_slice(&FLAG_CHECKPOINT.to_be_bytes())),
        None
    );
    assert_eq!(
        refused(&|r| r[4..12].copy_from_slice(&3i64.to_be_bytes())),
        None
    );
    assert_eq!(
        refused(&|r| r[16..20].copy_from_slice(&0i32.to_be_bytes())),
        None
    );
    assert_eq!(
        refused(&|r| r[24..32].copy_from_slice(&(-5i64).to_be_bytes())),
        None
    );
    assert_eq!(
        refused(&|r| r[14..16]
            .copy_from_slice(&(FLAG_CARRIED | FLAG_CHECKPOINT | FLAG_MARKER).to_be_bytes())),
        None
    );
}

#[test]
fn a_checkpoint_is_due_when_none_is_known_rows_are_few_or_enough_went_by() {
    assert!(
        checkpoint_due(None, 0, 10, 10_000),
        "none since the takeover"
    );
    assert!(
        checkpoint_due(Some(0), 0, 10, CARRIED_ROWS_MAX),
        "rows fit a chunk anyway"
    );
    let rows = 2_000;
    let spacing = CHECKPOINT_RECORDS_PER_ROW * rows as i64;
    assert!(!checkpoint_due(Some(100), 3, 100 + spacing - 1, rows));
    assert!(checkpoint_due(Some(100), 3, 100 + spacing, rows));
    assert!(checkpoint_due(
        Some(100),
        CHECKPOINT_EVERY_CHUNKS,
        101,
        rows
    ));
    // Few rows but more than a chunk carries: the spacing floor.
    assert!(!checkpoint_due(
        Some(0),
        1,
        CHECKPOINT_RECORDS_MIN - 1,
        CARRIED_ROWS_MAX + 1
    ));
    assert!(checkpoint_due(
        Some(0),
        1,
        CHECKPOINT_RECORDS_MIN,
        CARRIED_ROWS_MAX + 1
    ));
}
