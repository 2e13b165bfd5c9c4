use super::*;
use crate::batch::{stamp, testing::make_batch};

/// xorshift64*: deterministic, seedable, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn tp() -> TopicPartition {
    TopicPartition::new(TopicId(uuid::Uuid::from_u128(7)), 3)
}

/// `count` batches from `base`, with random sizes and (non-monotonic) timestamps.
fn batches(rng: &mut Rng, base: Offset, count: usize) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut next = base;
    for _ in 0..count {
        let records = 1 + rng.below(40) as i32;
        let ts = 1_000 + rng.below(10_000) as i64;
        out.push(stamp(&make_batch(records, ts), next, 2, None));
        next += i64::from(records);
    }
    out
}

fn build(batches: &[Bytes], interval: u64) -> BuiltSegment {
    let mut b = SegmentBuilder::new(tp(), 2, interval, 0);
    for raw in batches {
        b.push(raw).expect("push");
    }
    b.finish("segments/k.oxs".into()).expect("finish")
}

#[test]
fn round_trip_and_lookups_match_brute_force() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..200 {
        let base = rng.below(1_000_000) as i64;
        let count = 1 + rng.below(60) as usize;
        let all = batches(&mut rng, base, count);
        let interval = 1 + rng.below(3_000);
        let seg = build(&all, interval);
        let (header, index) = verify(&seg.key, &seg.body).expect("verifies");
        assert_eq!(header.topic_partition, tp());
        assert_eq!(header.leader_epoch, 2);
        assert_eq!(index, seg.index);
        let headers: Vec<_> = all
            .iter()
            .map(|b| batch::peek_header(b).expect("ok").expect("whole"))
            .collect();
        let last = headers.last().expect("some").last_offset();
        assert_eq!((seg.entry.base_offset, seg.entry.last_offset), (base, last));
        assert_eq!(
            seg.entry.max_timestamp_ms,
            headers.iter().map(|h| h.max_timestamp).max().expect("some")
        );
        assert_eq!(data_bytes(&seg.entry), index.data_bytes(), "case {case}");
        // The catalog entry names the index: its range and CRC.
        let range =
            seg.entry.byte_start as usize..(seg.entry.byte_start + seg.entry.byte_len) as usize;
        crate::object::verify_range(&seg.entry, &seg.body[range.clone()]).expect("index crc");
        assert_eq!(
            SegmentIndex::decode("k", &seg.body[range]).expect("decode"),
            index
        );
        // Chunks hold whole batches, at most `interval` bytes unless one batch is larger.
        for c in &index.chunks {
            let e = index
                .chunk_entry(&seg.entry, index.chunk_for_offset(c.base_offset))
                .expect("chunk");
            let bytes = seg
                .body
                .slice(e.byte_start as usize..(e.byte_start + e.byte_len) as usize);
            crate::object::verify_range(&e, &bytes).expect("chunk crc");
            let n = batch::iter_batches(&bytes).count();
            assert!(u64::from(c.byte_len) <= interval || n == 1, "case {case}");
        }
        // Every offset maps to the chunk holding it.
        for off in base..=last {
            let c = index.chunks[index.chunk_for_offset(off)];
            assert!(c.base_offset <= off && off <= c.last_offset);
        }
        assert_eq!(index.chunk_for_offset(last + 1), index.chunks.len());
        assert_eq!(index.chunk_for_offset(base - 1), 0);
        // Time lookups: the first chunk whose max timestamp reaches T, by brute force.
        for _ in 0..50 {
            let t = rng.below(12_000) as i64;
            let want = index.chunks.iter().position(|c| c.max_timestamp_ms >= t);
            assert_eq!(index.chunk_for_timestamp(t), want, "case {case} t {t}");
        }
    }
}

#[test]
fn every_flipped_bit_is_detected() {
    let mut rng = Rng(42);
    let all = batches(&mut rng, 100, 12);
    let seg = build(&all, 400);
    for _ in 0..2_000 {
        let mut body = seg.body.to_vec();
        let bit = rng.below(body.len() as u64 * 8);
        body[(bit / 8) as usize] ^= 1 << (bit % 8);
        assert!(verify("k", &body).is_err(), "bit {bit} flipped unnoticed");
    }
    // Exhaustively over the header, index and footer.
    let tail_from = seg.entry.byte_start as usize;
    for byte in (0..HEADER_BYTES as usize).chain(tail_from..seg.body.len()) {
        for bit in 0..8 {
            let mut body = seg.body.to_vec();
            body[byte] ^= 1 << bit;
            assert!(verify("k", &body).is_err(), "byte {byte} bit {bit}");
        }
    }
}

#[test]
fn truncation_is_detected() {
    let mut rng = Rng(7);
    let seg = build(&batches(&mut rng, 0, 5), 1 << 20);
    for cut in 1..seg.body.len() {
        assert!(
            verify("k", &seg.body[..seg.body.len() - cut]).is_err(),
            "cut {cut}"
        );
    }
    let mut longer = seg.body.to_vec();
    longer.push(0);
    assert!(verify("k", &longer).is_err(), "trailing garbage");
}

#[test]
fn the_builder_refuses_gaps_and_partial_batches() {
    let mut b = SegmentBuilder::new(tp(), 0, 1 << 20, 0);
    let first = stamp(&make_batch(2, 0), 10, 0, None);
    b.push(&first).expect("first");
    assert_eq!(b.next_offset(), Some(12));
    assert!(
        b.push(&stamp(&make_batch(1, 0), 13, 0, None)).is_err(),
        "gap"
    );
    assert!(
        b.push(&stamp(&make_batch(1, 0), 11, 0, None)).is_err(),
        "overlap"
    );
    let whole = stamp(&make_batch(1, 0), 12, 0, None);
    assert!(b.push(&whole[..whole.len() - 1]).is_err(), "partial");
    let mut two = whole.to_vec();
    two.extend_from_slice(&whole);
    assert!(b.push(&two).is_err(), "two batches");
    b.push(&whole).expect("next");
    assert_eq!(b.data_bytes(), (first.len() + whole.len()) as u64);
    assert!(
        SegmentBuilder::new(tp(), 0, 1, 0)
            .finish("k".into())
            .is_err(),
        "empty"
    );
}

#[test]
fn key_compacted_segments_have_gaps_between_batches_and_dense_chunks() {
    // Offsets 5..=7 and 12..=12 were compacted away; the run still spans 0..=14.
    let batches = [
        stamp(&make_batch(1, 0), 3, 0, None),
        stamp(&make_batch(4, 0), 8, 0, None),
        stamp(&make_batch(2, 0), 13, 0, None),
    ];
    let mut b = SegmentBuilder::new(tp(), 0, 1, 0).with_gaps_from(0);
    for x in &batches {
        b.push(x).expect("a later batch");
    }
    assert!(
        b.push(&stamp(&make_batch(1, 0), 14, 0, None)).is_err(),
        "never back"
    );
    let seg = b.finish("k".into()).expect("built");
    let spans: Vec<_> = seg
        .index
        .chunks
        .iter()
        .map(|c| (c.base_offset, c.last_offset))
        .collect();
    // One chunk per batch (interval 1), each covering from where the previous ended.
    assert_eq!(spans, vec![(0, 3), (4, 11), (12, 14)]);
    assert_eq!((seg.entry.base_offset, seg.entry.last_offset), (0, 14));
    let (_, index) = verify("k", &seg.body).expect("verifies");
    assert_eq!(index.chunk_for_offset(6), 1);
}

fn rows() -> Vec<ProducerBatch> {
    vec![
        ProducerBatch::open_txn(4, 1, 90),
        ProducerBatch {
            producer_id: 3,
            producer_epoch: 2,
            base_sequence: 10,
            last_sequence: 14,
            base_offset: 50,
            kind: producer_summary::RowKind::Batch,
        },
        ProducerBatch::marker(9, 5, 120),
    ]
}

fn idx(seg: &BuiltSegment) -> (u64, u64, u32) {
    (seg.entry.byte_start, seg.entry.byte_len, seg.entry.crc32c)
}

fn tail_of(seg: &BuiltSegment) -> Option<Vec<(ProducerBatch, bool)>> {
    let end = (seg.entry.byte_start + seg.entry.byte_len) as usize;
    decode_tail("k", &seg.body[end..], idx(seg)).expect("tail")
}

#[test]
fn the_producers_section_round_trips_and_flags_rows_before_the_segment_as_carried() {
    let mut rng = Rng(11);
    let all = batches(&mut rng, 100, 6);
    let mut b = SegmentBuilder::new(tp(), 2, 400, 0);
    for raw in &all {
        b.push(raw).expect("push");
    }
    b.set_producers(rows());
    let seg = b.finish("k".into()).expect("finish");
    let (_, index) = verify("k", &seg.body).expect("verifies");
    assert_eq!(index, seg.index);
    let flags: Vec<bool> = rows()
        .iter()
        .map(|r| r.is_open_txn() || r.base_offset < 100)
        .collect();
    let want: Vec<(ProducerBatch, bool)> = rows().into_iter().zip(flags).collect();
    assert_eq!(tail_of(&seg), Some(want));
    // Every flipped bit of the section is detected.
    let end = (seg.entry.byte_start + seg.entry.byte_len) as usize;
    for byte in end..seg.body.len() {
        for bit in 0..8 {
            let mut body = seg.body.to_vec();
            body[byte] ^= 1 << bit;
            assert!(verify("k", &body).is_err(), "byte {byte} bit {bit}");
            // The header's CRC is checked with the header (by `verify`).
            let header_crc = body.len() - FOOTER_BYTES + 16..body.len() - FOOTER_BYTES + 20;
            assert!(
                header_crc.contains(&byte) || decode_tail("k", &body[end..], idx(&seg)).is_err(),
                "byte {byte} bit {bit}"
            );
        }
    }
    // A tail that names another index is not this entry's.
    assert!(decode_tail(
        "k",
        &seg.body[end..],
        (
            seg.entry.byte_start + 1,
            seg.entry.byte_len,
            seg.entry.crc32c
        )
    )
    .is_err());
}

/// A segment as format version 1 wrote it: no producers section.
fn as_version_1(seg: &BuiltSegment) -> Vec<u8> {
    let end = (seg.entry.byte_start + seg.entry.byte_len) as usize;
    let mut body = seg.body[..end].to_vec();
    body.extend_from_slice(&seg.body[seg.body.len() - FOOTER_BYTES..]);
    body[8..10].copy_from_slice(&FORMAT_VERSION_V1.to_be_bytes());
    let header_crc = crc32c::crc32c(&body[..HEADER_BYTES as usize]);
    let foot = body.len() - FOOTER_BYTES;
    body[foot + 16..foot + 20].copy_from_slice(&header_crc.to_be_bytes());
    body[foot + 20..foot + 22].copy_from_slice(&FORMAT_VERSION_V1.to_be_bytes());
    body
}

#[test]
fn version_1_segments_still_read_without_producers() {
    let mut rng = Rng(5);
    let seg = build(&batches(&mut rng, 0, 8), 500);
    let v1 = as_version_1(&seg);
    let (header, index) = verify("k", &v1).expect("a version 1 segment verifies");
    assert_eq!((header.topic_partition, index), (tp(), seg.index.clone()));
    let end = (seg.entry.byte_start + seg.entry.byte_len) as usize;
    assert_eq!(decode_tail("k", &v1[end..], idx(&seg)).expect("tail"), None);
    // Version 2 without its section, or version 1 with one: refused.
    let mut mixed = v1.clone();
    let foot = mixed.len() - FOOTER_BYTES;
    mixed[foot + 20..foot + 22].copy_from_slice(&FORMAT_VERSION.to_be_bytes());
    assert!(verify("k", &mixed).is_err());
    assert!(decode_tail("k", &mixed[end..], idx(&seg)).is_err());
    // An empty section is a version 2 segment's with no producers.
    assert_eq!(tail_of(&seg), Some(vec![]));
}

#[test]
fn index_decode_refuses_bad_shapes() {
    let mut rng = Rng(3);
    let seg = build(&batches(&mut rng, 0, 20), 300);
    let good = seg.index.encode();
    assert!(SegmentIndex::decode("k", &good).is_ok());
    assert!(SegmentIndex::decode("k", &good[..good.len() - 1]).is_err());
    assert!(SegmentIndex::decode("k", &[]).is_err());
    let mut gap = seg.index.clone();
    gap.chunks[1].base_offset += 1;
    assert!(SegmentIndex::decode("k", &gap.encode()).is_err());
    let mut times = seg.index.clone();
    times.times.reverse();
    if times.times.len() > 1 {
        assert!(SegmentIndex::decode("k", &times.encode()).is_err());
    }
    let empty = SegmentIndex::default();
    assert!(SegmentIndex::decode("k", &empty.encode()).is_err());
}
