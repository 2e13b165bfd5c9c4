use super::*;
use object_store::memory::InMemory;
use object_store::PutPayload;
use oxbow_metadata::TopicId;

fn entry(key: &str, start: u64, bytes: &[u8]) -> CatalogEntry {
    CatalogEntry {
        topic_id: TopicId(uuid::Uuid::from_u128(1)),
        partition: 0,
        base_offset: i64::try_from(start).expect("small"),
        last_offset: i64::try_from(start).expect("small"),
        max_timestamp_ms: 0,
        object_key: key.into(),
        byte_start: start,
        byte_len: bytes.len() as u64,
        crc32c: crc32c::crc32c(bytes),
        leader_epoch: 0,
        layout: EntryLayout::Batches,
        txn: None,
    }
}

/// A small range before `entries`, read by the reader that asks for the window.
fn before() -> CatalogEntry {
    let mut e = entry("before", 0, b"x");
    e.base_offset = -1;
    e.last_offset = -1;
    e
}

async fn store_with(data: &[u8]) -> Arc<dyn ObjectStore> {
    let store = InMemory::new();
    store
        .put(&ObjectPath::from("o"), PutPayload::from(data.to_vec()))
        .await
        .expect("put");
    Arc::new(store)
}

/// How many of `entries` have a GET in flight.
fn in_flight_count(ahead: &ReadAhead, entries: &[CatalogEntry]) -> usize {
    entries
        .iter()
        .filter(|e| ahead.in_flight(e).is_some())
        .count()
}

#[tokio::test]
async fn the_window_is_fetched_once_and_a_waiting_reader_gets_the_same_bytes() {
    let data: Vec<u8> = (0..64u32 << 10).map(|i| (i % 251) as u8).collect();
    let entries: Vec<CatalogEntry> = (0..8u64)
        .map(|i| {
            entry(
                "o",
                i * 8192,
                &data[(i * 8192) as usize..((i + 1) * 8192) as usize],
            )
        })
        .collect();
    let ahead = ReadAhead::new(store_with(&data).await, ReadCache::new(64 << 20));
    ahead.ahead(-1, &before(), entries.iter().cloned());
    let started = in_flight_count(&ahead, &entries);
    assert_eq!(started, 8, "the window's ranges are fetched side by side");
    // Asking again while the GETs run starts nothing new.
    ahead.ahead(-1, &before(), entries.iter().cloned());
    for e in &entries {
        if let Some(pending) = ahead.in_flight(e) {
            let got = pending.await.expect("prefetched");
            assert_eq!(
                &got[..],
                &data[e.byte_start as usize..][..e.byte_len as usize]
            );
        }
    }
    // Let the tasks finish.
    while entries.iter().any(|e| ahead.in_flight(e).is_some()) {
        tokio::task::yield_now().await;
    }
    assert_eq!(ahead.fetched.load(Ordering::Relaxed), 8, "each range once");
    for e in &entries {
        assert!(ahead.cache.contains("o", e.byte_start, e.byte_len));
    }
    ahead.ahead(-1, &before(), entries.iter().cloned());
    assert!(entries.iter().all(|e| ahead.in_flight(e).is_none()));
    assert_eq!(
        ahead.fetched.load(Ordering::Relaxed),
        8,
        "cached ranges are not fetched again"
    );
}

#[tokio::test]
async fn a_range_failing_its_checksum_is_neither_cached_nor_handed_out() {
    let data = vec![7u8; 4096];
    let mut bad = entry("o", 0, &data);
    bad.crc32c ^= 1;
    let ahead = ReadAhead::new(store_with(&data).await, ReadCache::new(64 << 20));
    ahead.ahead(-1, &before(), [bad.clone()]);
    if let Some(pending) = ahead.in_flight(&bad) {
        assert!(pending.await.is_none());
    }
    while ahead.in_flight(&bad).is_some() {
        tokio::task::yield_now().await;
    }
    assert!(!ahead.cache.contains("o", 0, 4096));
    assert_eq!(ahead.fetched.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn the_window_and_the_get_slots_bound_what_is_started() {
    let data = vec![1u8; 4 << 20];
    // 1 MiB window (a 16 MiB cache: 4 MiB scanned pool, a quarter of it).
    let ahead = ReadAhead::new(store_with(&data).await, ReadCache::new(16 << 20));
    assert_eq!(ahead.window_bytes, 1 << 20);
    let entries: Vec<CatalogEntry> = (0..16u64)
        .map(|i| entry("o", i * (256 << 10), &data[..256 << 10]))
        .collect();
    ahead.ahead(-1, &before(), entries.iter().cloned());
    let started = in_flight_count(&ahead, &entries);
    assert!(
        started <= 4,
        "{started} ranges of 256 KiB started in a 1 MiB window"
    );
    let big = ReadAhead::new(store_with(&data).await, ReadCache::new(1 << 30));
    big.ahead(-1, &before(), entries.iter().cloned());
    let started = in_flight_count(&big, &entries);
    assert!(started <= READ_AHEAD_GETS, "{started} GETs at once");
}

/// Batches of 60 records from offset 0 until `bytes`, and the entry naming them.
fn large_range(bytes: usize) -> (CatalogEntry, Vec<u8>) {
    let mut data = Vec::new();
    let mut base = 0i64;
    while data.len() < bytes {
        let mut b = crate::batch::testing::make_batch(60, 1_000);
        b[..8].copy_from_slice(&base.to_be_bytes());
        base += 60;
        data.extend_from_slice(&b);
    }
    let mut e = entry("o", 0, &data);
    e.base_offset = 0;
    e.last_offset = base - 1;
    (e, data)
}

async fn landed(ahead: &ReadAhead) {
    while !lock(&ahead.in_flight).is_empty() {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_large_range_is_cut_and_only_the_window_of_its_pieces_is_cached() {
    let (e, data) = large_range(3 << 20);
    // 16 MiB: a 4 MiB scanned pool, which takes ranges of up to 2 MiB whole; a 1 MiB
    // window; pieces of up to 1 MiB.
    let cache = ReadCache::new(16 << 20);
    assert!(large(&cache, &e));
    let ahead = ReadAhead::new(store_with(&data).await, cache);
    assert_eq!(ahead.window_bytes(), 1 << 20);
    // Not cut yet, after the reader's range: fetched whole (and cut) by read-ahead,
    // with only the window's pieces cached.
    ahead.ahead(-1, &before(), [e.clone()]);
    let pending = ahead
        .in_flight(&e)
        .expect("a large range is fetched whole to cut");
    assert_eq!(pending.await.expect("checked").len(), data.len());
    landed(&ahead).await;
    let cut = ahead.pieces.get(&e).expect("cut");
    assert!(cut.len() >= 3, "{} pieces", cut.len());
    let cached: Vec<bool> = cut
        .iter()
        .map(|p| ahead.cache.contains("o", p.start, p.len))
        .collect();
    assert!(cached[0], "the first piece is in the window");
    assert!(!cached[cut.len() - 1], "the last piece is past the window");
    assert!(cached[1], "the window after the first piece");
    // A reader in the second piece: the window's next piece is fetched alone.
    ahead.ahead(cut[1].first_offset, &e, []);
    assert!(ahead.piece_in_flight(&e, &cut[2]).is_some());
    landed(&ahead).await;
    assert!(ahead.cache.contains("o", cut[2].start, cut[2].len));
    assert_eq!(
        ahead.fetched.load(Ordering::Relaxed),
        2,
        "the cut, then one piece"
    );
    // A reader in the last piece: nothing after it.
    let last = cut[cut.len() - 1];
    ahead.ahead(last.first_offset, &e, []);
    assert!(lock(&ahead.in_flight).is_empty());
}

#[tokio::test]
async fn a_piece_failing_its_crc_is_neither_cached_nor_handed_out() {
    let (e, data) = large_range(3 << 20);
    let cache = ReadCache::new(16 << 20);
    let ahead = ReadAhead::new(store_with(&data).await, cache);
    // The cut learned from the right bytes; the store then holds others (a torn or
    // corrupted object) under the same key.
    ahead
        .pieces
        .remember(&ahead.cache, &e, &Bytes::from(data.clone()));
    let mut other = data.clone();
    for b in other.iter_mut() {
        *b ^= 0x5a;
    }
    ahead
        .objects
        .put(&ObjectPath::from("o"), PutPayload::from(other))
        .await
        .expect("put");
    ahead.ahead(0, &e, []);
    let cut = ahead.pieces.get(&e).expect("cut");
    let pending = ahead
        .piece_in_flight(&e, &cut[1])
        .expect("prefetching piece 1");
    assert!(pending.await.is_none(), "a bad piece is not handed out");
    landed(&ahead).await;
    assert!(!ahead.cache.contains("o", cut[1].start, cut[1].len));
    assert_eq!(ahead.fetched.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn pieces_are_fetched_in_runs_of_half_the_window_or_when_the_reader_needs_them() {
    let (e, data) = large_range(10 << 20);
    // 64 MiB: a 16 MiB scanned pool (one shard), ranges of up to 8 MiB whole, a 4 MiB
    // window, pieces of 1 MiB.
    let cache = ReadCache::new(64 << 20);
    let ahead = ReadAhead::new(store_with(&data).await, cache);
    assert_eq!(ahead.window_bytes(), 4 << 20);
    let cut = ahead
        .pieces
        .remember(&ahead.cache, &e, &Bytes::from(data.clone()));
    assert!(cut.len() >= 10, "{} pieces", cut.len());
    // Nothing cached, the reader in piece 0: its next pieces, the whole window, at once
    // and by one GET.
    ahead.ahead(0, &e, []);
    let started: Vec<bool> = cut
        .iter()
        .map(|p| ahead.piece_in_flight(&e, p).is_some())
        .collect();
    assert_eq!(&started[..6], &[false, true, true, true, true, false]);
    landed(&ahead).await;
    assert_eq!(
        ahead.fetched.load(Ordering::Relaxed),
        1,
        "one GET for the run"
    );
    // The reader in piece 1: one piece missing at the window's end, under half the
    // window: not yet.
    ahead.ahead(cut[1].first_offset, &e, []);
    assert!(lock(&ahead.in_flight).is_empty());
    // In piece 2: two missing, half the window: one GET for both.
    ahead.ahead(cut[2].first_offset, &e, []);
    assert!(ahead.piece_in_flight(&e, &cut[5]).is_some());
    assert!(ahead.piece_in_flight(&e, &cut[6]).is_some());
    landed(&ahead).await;
    assert_eq!(ahead.fetched.load(Ordering::Relaxed), 2);
    for p in &cut[1..7] {
        assert!(ahead.cache.contains("o", p.start, p.len));
    }
    // Near the range's end the last pieces are fetched however few.
    let last = cut.len() - 1;
    for p in &cut[7..last] {
        ahead
            .cache
            .insert_scanned("o", p.start, p.len, Bytes::new());
    }
    ahead.ahead(cut[last - 1].first_offset, &e, []);
    assert!(ahead.piece_in_flight(&e, &cut[last]).is_some());
}

#[tokio::test]
async fn the_reader_s_next_piece_in_the_next_range_is_fetched_at_once() {
    let (e, data) = large_range(10 << 20);
    let cache = ReadCache::new(64 << 20);
    let ahead = ReadAhead::new(store_with(&data).await, cache);
    let mut e2 = e.clone();
    e2.object_key = "o2".into();
    e2.base_offset = e.last_offset + 1;
    e2.last_offset = e.last_offset + 1 + (e.last_offset - e.base_offset);
    ahead
        .objects
        .put(&ObjectPath::from("o2"), PutPayload::from(data.clone()))
        .await
        .expect("put");
    let whole = Bytes::from(data.clone());
    let cut = ahead.pieces.remember(&ahead.cache, &e, &whole);
    let cut2 = ahead.pieces.remember(&ahead.cache, &e2, &whole);
    // The reader in the last piece of `e`: the next piece is `e2`'s first, missing
    // alone (the rest of the window cached), so not a run of half the window.
    for p in &cut2[1..4] {
        ahead
            .cache
            .insert_scanned("o2", p.start, p.len, Bytes::new());
    }
    let last = cut[cut.len() - 1];
    ahead.ahead(last.first_offset, &e, [e2.clone()]);
    assert!(ahead.piece_in_flight(&e2, &cut2[0]).is_some());
    landed(&ahead).await;
}
