use super::*;

#[tokio::test]
async fn hit_miss_and_bounded_size() {
    let c = ReadCache::new(100_000);
    assert!(c.get("a", 0, 3).await.is_none());
    c.insert_recent("a", 0, 3, Bytes::from_static(b"abc"));
    let hit = c.get("a", 0, 3).await.expect("hit");
    assert_eq!(&hit.bytes[..], b"abc");
    assert!(!hit.from_disk);
    assert!(c.get("a", 1, 3).await.is_none(), "ranges are distinct keys");
    for i in 0..1000 {
        c.insert_recent(&format!("k{i}"), 0, 1000, Bytes::from(vec![0u8; 1000]));
        c.insert_scanned(&format!("s{i}"), 0, 1000, Bytes::from(vec![0u8; 1000]));
    }
    // Within the capacity, give or take an entry per shard.
    assert!(c.usage_bytes() <= 120_000, "usage {}", c.usage_bytes());
}

#[tokio::test]
async fn a_scan_does_not_evict_the_recent_pool() {
    let c = ReadCache::new(400_000);
    // What the sealer put there, read again by readers near the tail.
    for i in 0..100 {
        c.insert_recent(&format!("recent{i}"), 0, 2000, Bytes::from(vec![1u8; 2000]));
    }
    for _ in 0..3 {
        for i in 0..100 {
            assert!(c.get(&format!("recent{i}"), 0, 2000).await.is_some());
        }
    }
    // A catch-up reader scans ten times the cache's size of cold data.
    for i in 0..2000 {
        c.insert_scanned(&format!("cold{i}"), 0, 2000, Bytes::from(vec![2u8; 2000]));
    }
    let kept = futures_count(&c, "recent", 100).await;
    assert_eq!(kept, 100, "the scan evicted {} recent ranges", 100 - kept);
    let scanned = futures_count(&c, "cold", 2000).await;
    assert!(
        scanned > 0 && scanned < 100,
        "the scanned pool holds a quarter: {scanned}"
    );
}

async fn futures_count(c: &ReadCache, prefix: &str, n: usize) -> usize {
    let mut found = 0;
    for i in 0..n {
        if c.get(&format!("{prefix}{i}"), 0, 2000).await.is_some() {
            found += 1;
        }
    }
    found
}

#[tokio::test]
async fn the_disk_tier_serves_what_memory_evicted_and_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let range = |i: usize| Bytes::from(vec![(i % 251) as u8; 64 << 10]);
    {
        // 1 MiB of memory, 64 MiB of disk: 64 ranges of 64 KiB overflow memory 4×.
        let c = ReadCache::with_disk(1 << 20, dir.path(), 64 << 20)
            .await
            .expect("open");
        assert!(c.has_disk());
        for i in 0..64 {
            c.insert_recent(&format!("obj{i}"), 0, 64 << 10, range(i));
        }
        let mut from_disk = 0;
        for i in 0..64 {
            let hit = c
                .get(&format!("obj{i}"), 0, 64 << 10)
                .await
                .expect("held somewhere");
            assert_eq!(hit.bytes, range(i), "range {i}");
            from_disk += usize::from(hit.from_disk);
        }
        assert!(from_disk > 0, "memory alone cannot hold them all");
        c.close().await;
    }
    let c = ReadCache::with_disk(1 << 20, dir.path(), 64 << 20)
        .await
        .expect("reopen");
    let hit = c
        .get("obj0", 0, 64 << 10)
        .await
        .expect("recovered from disk");
    assert!(hit.from_disk);
    assert_eq!(hit.bytes, range(0));
}

#[tokio::test]
async fn a_disk_tier_that_cannot_be_made_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").expect("file");
    let err = ReadCache::with_disk(1 << 20, &file, 16 << 20)
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("not-a-dir"), "{err}");
}

#[tokio::test]
async fn large_ranges_never_take_a_pool_past_its_budget() {
    // 32 MiB: 24 MiB recent (one shard), 8 MiB scanned (one shard).
    let c = ReadCache::new(32 << 20);
    for i in 0..40 {
        // What a lagging sealer uploads: chunks of a few MiB, some past half a shard.
        let len = (1 + i % 14) << 20;
        c.insert_recent(&format!("r{i}"), 0, len as u64, Bytes::from(vec![0u8; len]));
        c.insert_scanned(&format!("s{i}"), 0, len as u64, Bytes::from(vec![0u8; len]));
        assert!(
            c.usage_bytes() <= 32 << 20,
            "usage {} after {i}",
            c.usage_bytes()
        );
    }
    // A range within half a shard is cached; a larger one is not (its readers GET it).
    c.insert_recent("small", 0, 4 << 20, Bytes::from(vec![1u8; 4 << 20]));
    assert!(c.get("small", 0, 4 << 20).await.is_some());
    c.insert_recent("large", 0, 13 << 20, Bytes::from(vec![1u8; 13 << 20]));
    assert!(c.get("large", 0, 13 << 20).await.is_none());
}
