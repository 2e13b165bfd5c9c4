use super::testing::*;
use super::*;

const BIG: u64 = 1 << 20;

fn params(dirty_from: Offset, now_ms: i64, delete_retention_ms: i64) -> CleanParams {
    CleanParams {
        dirty_from,
        now_ms,
        delete_retention_ms,
        max_decompressed_batch_bytes: 1 << 20,
    }
}

fn kv<'a>(k: &'a str, v: &'a str) -> (Option<&'a [u8]>, Option<&'a [u8]>) {
    (Some(k.as_bytes()), Some(v.as_bytes()))
}

fn tomb(k: &str) -> (Option<&[u8]>, Option<&[u8]>) {
    (Some(k.as_bytes()), None)
}

fn header(b: &Bytes) -> BatchHeader {
    batch::peek_header(b).expect("header").expect("whole")
}

fn crc_ok(b: &Bytes) -> bool {
    let stored = u32::from_be_bytes([b[17], b[18], b[19], b[20]]);
    crc32c::crc32c(&b[21..]) == stored
}

#[test]
fn keeps_the_latest_per_key_at_its_offset_in_every_codec() {
    for codec in [
        Codec::None,
        Codec::Gzip,
        Codec::Snappy,
        Codec::Lz4,
        Codec::Zstd,
    ] {
        let input = vec![
            keyed_batch(0, 100, &[kv("a", "1"), kv("b", "1"), kv("c", "1")], codec),
            keyed_batch(3, 200, &[kv("a", "2"), kv("b", "2")], codec),
            keyed_batch(5, 300, &[kv("a", "3")], codec),
        ];
        let mut map = OffsetMap::with_budget(BIG);
        let out = clean(&input, params(0, 1_000, 10_000), &mut map).expect("cleans");
        assert_eq!(out.cleaned_to, Some(5));
        let got = decoded_records(&out.batches);
        let want: Vec<(Offset, Vec<u8>, Option<Vec<u8>>)> = vec![
            (2, b"c".to_vec(), Some(b"1".to_vec())),
            (4, b"b".to_vec(), Some(b"2".to_vec())),
            (5, b"a".to_vec(), Some(b"3".to_vec())),
        ];
        assert_eq!(got, want, "{}", codec.name());
        // Headers: base and last offset, codec kept; CRC valid; max timestamp of the kept.
        let h: Vec<BatchHeader> = out.batches.iter().map(header).collect();
        assert_eq!(
            h.iter()
                .map(|h| (h.base_offset, h.last_offset()))
                .collect::<Vec<_>>(),
            vec![(0, 2), (3, 4), (5, 5)]
        );
        assert!(h
            .iter()
            .all(|h| h.compression() == codec as i16 || codec == Codec::None));
        assert_eq!(h[0].record_count, 1);
        assert_eq!(h[0].base_timestamp, 100);
        assert_eq!(h[0].max_timestamp, 102);
        assert_eq!(h[1].max_timestamp, 201);
        assert!(out.batches.iter().all(crc_ok));
        // An unchanged batch is copied as stored.
        assert_eq!(out.batches[2], input[2]);
        assert_eq!((out.records_in, out.records_out), (6, 3));
    }
}

#[test]
fn a_second_cleaning_changes_nothing() {
    let input = vec![
        keyed_batch(0, 0, &[kv("a", "1"), kv("b", "1")], Codec::Zstd),
        keyed_batch(2, 0, &[kv("a", "2")], Codec::Zstd),
    ];
    let once = clean(&input, params(0, 0, -1), &mut OffsetMap::with_budget(BIG)).expect("once");
    let twice = clean(
        &once.batches,
        params(0, 0, -1),
        &mut OffsetMap::with_budget(BIG),
    )
    .expect("twice");
    assert_eq!(once.batches, twice.batches);
}

#[test]
fn emptied_batches_are_dropped_except_the_last() {
    let input = vec![
        keyed_batch(0, 0, &[kv("a", "1"), kv("b", "1")], Codec::None),
        keyed_batch(2, 0, &[kv("c", "1")], Codec::Gzip),
        keyed_batch(
            3,
            0,
            &[kv("a", "2"), kv("b", "2"), kv("c", "2")],
            Codec::None,
        ),
        keyed_batch(6, 50, &[kv("a", "3"), kv("b", "3")], Codec::Gzip),
    ];
    // Batch 0 goes (both keys later); batch 1 goes; batch 2 keeps c; batch 3 keeps all.
    let out = clean(&input, params(0, 0, -1), &mut OffsetMap::with_budget(BIG)).expect("cleans");
    let spans: Vec<_> = out
        .batches
        .iter()
        .map(header)
        .map(|h| (h.base_offset, h.last_offset()))
        .collect();
    assert_eq!(spans, vec![(3, 5), (6, 7)]);
    // The last batch emptied (its keys shadowed by a later run's records are not
    // possible within one range, so shadow it by a clean part: dirty from 0, keys later).
    let input = vec![
        keyed_batch(0, 0, &[kv("a", "1")], Codec::None),
        keyed_batch(1, 77, &[kv("b", "1"), tomb("b")], Codec::Gzip),
    ];
    // The first cleaning keeps b's tombstone and stamps its horizon (10 001); one at the
    // horizon drops it and empties the batch.
    let stamped = clean(
        &input,
        params(0, 10_000, 1),
        &mut OffsetMap::with_budget(BIG),
    )
    .expect("stamps");
    assert_eq!(
        header(&stamped.batches[1]).delete_horizon_ms(),
        Some(10_001)
    );
    let out = clean(
        &stamped.batches,
        params(0, 10_001, 1),
        &mut OffsetMap::with_budget(BIG),
    )
    .expect("cleans");
    let h: Vec<BatchHeader> = out.batches.iter().map(header).collect();
    assert_eq!(h.len(), 2);
    assert_eq!(
        (h[1].base_offset, h[1].last_offset(), h[1].record_count),
        (1, 2, 0)
    );
    assert_eq!(
        (h[1].compression(), h[1].base_timestamp, h[1].max_timestamp),
        (0, 78, 78)
    );
    assert_eq!(
        h[1].delete_horizon_ms(),
        None,
        "an empty batch has no horizon"
    );
    assert_eq!(out.batches[1].len(), BATCH_HEADER_BYTES);
    assert!(crc_ok(&out.batches[1]));
}

#[test]
fn the_last_batch_of_a_producer_stays_for_its_sequence() {
    let input = vec![
        with_producer(
            &keyed_batch(0, 0, &[kv("a", "1")], Codec::None),
            7,
            2,
            40,
            0,
        ),
        keyed_batch(1, 0, &[kv("a", "2")], Codec::None),
        keyed_batch(2, 0, &[kv("b", "1")], Codec::None),
    ];
    let out = clean(&input, params(0, 0, -1), &mut OffsetMap::with_budget(BIG)).expect("cleans");
    let h: Vec<BatchHeader> = out.batches.iter().map(header).collect();
    assert_eq!(h.len(), 3);
    assert_eq!(
        (
            h[0].producer_id,
            h[0].producer_epoch,
            h[0].base_sequence,
            h[0].record_count
        ),
        (7, 2, 40, 0)
    );
}

/// (offset, timestamp, is a tombstone) of every record of `batches`.
fn timestamps(batches: &[Bytes]) -> Vec<(Offset, i64, bool)> {
    let mut out = Vec::new();
    for raw in batches {
        let d = decode(raw, 1 << 20).expect("decode");
        for r in records::walk(&d.section, d.header.record_count) {
            let r = r.expect("record");
            out.push((
                d.header.base_offset + i64::from(r.offset_delta),
                d.header.base_timestamp + r.timestamp_delta,
                r.value.is_none(),
            ));
        }
    }
    out
}

#[test]
fn a_tombstone_stays_delete_retention_after_the_cleaning_that_first_kept_it() {
    for codec in [Codec::None, Codec::Zstd, Codec::Gzip] {
        let input = vec![
            keyed_batch(0, 1_000, &[kv("a", "1"), kv("b", "1")], codec),
            keyed_batch(2, 5_000, &[tomb("a"), kv("d", "1")], codec),
            keyed_batch(4, 9_000, &[kv("c", "1")], codec),
        ];
        // Cleaned long after the tombstone was written (its own timestamp is far past
        // delete.retention.ms): it stays, and its batch gets a horizon 2 s from now.
        let first = clean(
            &input,
            params(0, 100_000, 2_000),
            &mut OffsetMap::with_budget(BIG),
        )
        .expect("first");
        assert_eq!(
            decoded_records(&first.batches),
            vec![
                (1, b"b".to_vec(), Some(b"1".to_vec())),
                (2, b"a".to_vec(), None),
                (3, b"d".to_vec(), Some(b"1".to_vec())),
                (4, b"c".to_vec(), Some(b"1".to_vec())),
            ],
            "{codec:?}"
        );
        let stamped = header(&first.batches[1]);
        assert_eq!(stamped.delete_horizon_ms(), Some(102_000));
        assert!(crc_ok(&first.batches[1]));
        assert_eq!(
            header(&first.batches[0]).delete_horizon_ms(),
            None,
            "no tombstone"
        );
        // Every record keeps its timestamp; the stamped batch's max timestamp too.
        assert_eq!(
            timestamps(&first.batches),
            vec![
                (1, 1_001, false),
                (2, 5_000, true),
                (3, 5_001, false),
                (4, 9_000, false)
            ]
        );
        assert_eq!(stamped.max_timestamp, 5_001);

        // Before the horizon: nothing changes, the stamped batch is copied as stored.
        let before = clean(
            &first.batches,
            params(0, 101_999, 2_000),
            &mut OffsetMap::with_budget(BIG),
        )
        .expect("before");
        assert!(!before.changed);
        assert_eq!(before.batches, first.batches);
        // A later cleaning keeps the horizon it was given, whatever the config is now.
        let longer = clean(
            &first.batches,
            params(0, 101_999, 1 << 40),
            &mut OffsetMap::with_budget(BIG),
        )
        .expect("longer");
        assert_eq!(longer.batches, first.batches);

        // At the horizon: the tombstone goes, the batch's value stays.
        let after = clean(
            &first.batches,
            params(0, 102_000, 2_000),
            &mut OffsetMap::with_budget(BIG),
        )
        .expect("after");
        assert_eq!(
            timestamps(&after.batches),
            vec![(1, 1_001, false), (3, 5_001, false), (4, 9_000, false)]
        );
    }
}

#[test]
fn a_negative_delete_retention_keeps_tombstones_forever_and_stamps_nothing() {
    let input = vec![
        keyed_batch(0, 1_000, &[kv("a", "1"), kv("b", "1")], Codec::None),
        keyed_batch(2, 5_000, &[tomb("a")], Codec::None),
        keyed_batch(3, 9_000, &[kv("c", "1")], Codec::None),
    ];
    let forever = clean(
        &input,
        params(0, i64::MAX, -1),
        &mut OffsetMap::with_budget(BIG),
    )
    .expect("forever");
    assert_eq!(decoded_records(&forever.batches).len(), 3);
    assert_eq!(forever.batches[1], input[1], "copied as stored");
    assert_eq!(header(&forever.batches[1]).delete_horizon_ms(), None);
}

#[test]
fn a_horizon_far_in_the_future_saturates() {
    let input = vec![keyed_batch(
        0,
        1_000,
        &[tomb("a"), kv("b", "1")],
        Codec::None,
    )];
    let out = clean(
        &input,
        params(0, 1_000, i64::MAX),
        &mut OffsetMap::with_budget(BIG),
    )
    .expect("clean");
    assert_eq!(header(&out.batches[0]).delete_horizon_ms(), Some(i64::MAX));
    assert_eq!(
        timestamps(&out.batches),
        vec![(0, 1_000, true), (1, 1_001, false)]
    );
}

#[test]
fn the_clean_part_loses_keys_the_dirty_part_overwrites_but_does_not_shadow() {
    let input = vec![
        keyed_batch(0, 0, &[kv("a", "1"), kv("b", "1")], Codec::None),
        keyed_batch(2, 0, &[kv("a", "2")], Codec::None),
    ];
    // Dirty from 2: b (clean part only) stays, a@0 goes.
    let out = clean(&input, params(2, 0, -1), &mut OffsetMap::with_budget(BIG)).expect("cleans");
    assert_eq!(
        decoded_records(&out.batches),
        vec![
            (1, b"b".to_vec(), Some(b"1".to_vec())),
            (2, b"a".to_vec(), Some(b"2".to_vec()))
        ]
    );
}

#[test]
fn a_full_map_cleans_only_up_to_what_it_covers() {
    let input = vec![
        keyed_batch(0, 0, &[kv("a", "1"), kv("b", "1")], Codec::None),
        keyed_batch(2, 0, &[kv("a", "2"), kv("c", "1")], Codec::None),
        keyed_batch(4, 0, &[kv("a", "3"), kv("b", "3")], Codec::None),
    ];
    // Room for 4 keys: the first two batches (a, b, c) fit, the third might not.
    let mut map = OffsetMap::with_budget(4 * KEY_MAP_ENTRY_BYTES);
    let out = clean(&input, params(0, 0, -1), &mut map).expect("cleans");
    assert_eq!(out.cleaned_to, Some(3));
    assert_eq!(
        decoded_records(&out.batches),
        vec![
            (1, b"b".to_vec(), Some(b"1".to_vec())),
            (2, b"a".to_vec(), Some(b"2".to_vec())),
            (3, b"c".to_vec(), Some(b"1".to_vec())),
            (4, b"a".to_vec(), Some(b"3".to_vec())),
            (5, b"b".to_vec(), Some(b"3".to_vec())),
        ]
    );
    assert_eq!(out.batches[2], input[2]);
    // A map too small for the first dirty batch cleans nothing.
    let mut tiny = OffsetMap::with_budget(KEY_MAP_ENTRY_BYTES);
    let none = clean(&input, params(0, 0, -1), &mut tiny).expect("nothing");
    assert_eq!(none.cleaned_to, None);
    assert_eq!(none.batches, input);
}

#[test]
fn transactional_and_control_batches_are_copied_and_do_not_shadow() {
    let txn = with_producer(
        &keyed_batch(1, 0, &[kv("a", "t")], Codec::None),
        9,
        0,
        0,
        0x10,
    );
    let control = with_producer(
        &keyed_batch(2, 0, &[kv("x", "m")], Codec::None),
        9,
        0,
        1,
        0x30,
    );
    let input = vec![
        keyed_batch(0, 0, &[kv("a", "1")], Codec::None),
        txn.clone(),
        control.clone(),
        keyed_batch(3, 0, &[kv("b", "1")], Codec::None),
    ];
    let out = clean(&input, params(0, 0, -1), &mut OffsetMap::with_budget(BIG)).expect("cleans");
    assert_eq!(
        out.batches, input,
        "a@0 is not shadowed by a transactional record"
    );
}

fn entry(last: Offset, ts: i64, bytes: u64) -> CleanableEntry {
    CleanableEntry {
        last_offset: last,
        max_timestamp_ms: ts,
        bytes,
    }
}

const KC: KeyCompaction = KeyCompaction {
    delete_retention_ms: 0,
    min_lag_ms: 1_000,
    max_lag_ms: 60_000,
    min_dirty_ratio: 0.5,
};

#[test]
fn only_entries_older_than_the_min_lag_are_cleanable() {
    let entries = [
        entry(9, 1_000, 10),
        entry(19, 5_000, 10),
        entry(29, 1_000, 10),
    ];
    assert_eq!(cleanable_len(&entries, 2_000, &KC), 1);
    assert_eq!(cleanable_len(&entries, 6_000, &KC), 3);
    assert_eq!(cleanable_len(&entries, 1_500, &KC), 0);
}

#[test]
fn cleaning_is_due_by_dirty_ratio_or_max_lag() {
    let entries = [
        entry(9, 1_000, 60),
        entry(19, 2_000, 30),
        entry(29, 3_000, 10),
    ];
    // Never cleaned: everything is dirty.
    assert!(due(&entries, Offset::MIN, 4_000, &KC));
    // Cleaned up to 20: 10 of 100 bytes dirty, under 0.5, and young.
    assert!(!due(&entries, 20, 4_000, &KC));
    // ... until the first dirty entry is older than the max lag.
    assert!(due(&entries, 20, 63_001, &KC));
    // Cleaned up to 10: 40 of 100 dirty; a ratio of 0.4 is enough.
    assert!(due(
        &entries,
        10,
        4_000,
        &KeyCompaction {
            min_dirty_ratio: 0.4,
            ..KC
        }
    ));
    // Nothing dirty: never due.
    assert!(!due(&entries, 30, i64::MAX, &KC));
}

#[test]
fn keyless_records_are_dropped() {
    let input = vec![keyed_batch(
        0,
        0,
        &[(None, Some(b"v")), kv("a", "1")],
        Codec::None,
    )];
    let out = clean(&input, params(0, 0, -1), &mut OffsetMap::with_budget(BIG)).expect("cleans");
    assert_eq!(
        decoded_records(&out.batches),
        vec![(1, b"a".to_vec(), Some(b"1".to_vec()))]
    );
}

#[test]
fn hostile_batches_are_refused_never_panic() {
    let good = keyed_batch(0, 0, &[kv("a", "1"), kv("a", "2")], Codec::None);
    let mut flipped = good.to_vec();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    let p = params(0, 0, -1);
    assert!(clean(&[Bytes::from(flipped)], p, &mut OffsetMap::with_budget(BIG)).is_err());
    // A zstd bomb: 8 MiB of zeros against a 1 MiB budget.
    let bomb = {
        let big = vec![(Some(&b"k"[..]), Some(&[0u8; 1 << 16][..])); 128];
        keyed_batch(0, 0, &big, Codec::Zstd)
    };
    assert!(matches!(
        clean(&[bomb], p, &mut OffsetMap::with_budget(BIG)),
        Err(Error::DecompressedTooLarge { .. })
    ));
    // Offset deltas out of order (a valid CRC over a lie): two records both at delta 0.
    let mut rec = Vec::new();
    for _ in 0..2 {
        rec.extend_from_slice(&[14, 0, 0, 0, 2, b'a', 2, b'v', 0]);
    }
    let mut b = good[..BATCH_HEADER_BYTES].to_vec();
    b.extend_from_slice(&rec);
    let length = (b.len() - BATCH_LOG_OVERHEAD) as i32;
    b[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    assert!(clean(&[Bytes::from(b)], p, &mut OffsetMap::with_budget(BIG)).is_err());
    // Seeded mutations (CRC fixed up so the walker is reached): never a panic.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for codec in [
        Codec::None,
        Codec::Gzip,
        Codec::Snappy,
        Codec::Lz4,
        Codec::Zstd,
    ] {
        let base = keyed_batch(0, 0, &[kv("a", "1"), kv("b", "2"), tomb("a")], codec);
        for _ in 0..2_000 {
            let mut m = base.to_vec();
            let at = 21 + (next() as usize) % (m.len() - 21);
            m[at] = next() as u8;
            let crc = crc32c::crc32c(&m[21..]);
            m[17..21].copy_from_slice(&crc.to_be_bytes());
            let _ = clean(&[Bytes::from(m)], p, &mut OffsetMap::with_budget(BIG));
        }
    }
}
