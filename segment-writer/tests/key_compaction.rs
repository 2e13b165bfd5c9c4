//! Key compaction end to end on one node: the latest value per key at its offset, stable
//! rounds, tombstones by age, readers racing it never see a key go back; the throughput
//! figure (ignored by default).

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use oxbow_cache::ReadCache;
use oxbow_metadata::{EntryLayout, MetadataStore, TopicMetadata};
use oxbow_segment_writer::{
    objects, Acks, AppendPolicy, CompactSettings, Compactor, LogManager, LogSettings,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

mod common;

use common::*;

/// A compacted topic's policies: key compaction whenever anything is dirty.
struct Compacted {
    delete_retention_ms: i64,
}

impl oxbow_segment_writer::RetentionPolicies for Compacted {
    fn retention(&self, _: oxbow_metadata::TopicId) -> Option<oxbow_segment_writer::Retention> {
        Some(oxbow_segment_writer::Retention { ms: -1, bytes: -1 })
    }

    fn key_compaction(
        &self,
        _: oxbow_metadata::TopicId,
    ) -> Option<oxbow_segment_writer::key_compact::KeyCompaction> {
        Some(oxbow_segment_writer::key_compact::KeyCompaction {
            delete_retention_ms: self.delete_retention_ms,
            min_lag_ms: 0,
            max_lag_ms: i64::MAX,
            min_dirty_ratio: 0.0,
        })
    }
}

const ALL_CODECS: &[oxbow_segment_writer::decompress::Codec] = {
    use oxbow_segment_writer::decompress::Codec;
    &[
        Codec::None,
        Codec::Zstd,
        Codec::Gzip,
        Codec::Lz4,
        Codec::Snappy,
    ]
};

/// Latest (offset, value) per key, as a Kafka consumer of a compacted topic should end up.
type Latest = BTreeMap<Vec<u8>, (i64, Option<Vec<u8>>)>;
/// A record read or written: offset, key, value (`None`: a tombstone).
type Written = (i64, Vec<u8>, Option<Vec<u8>>);

/// Writes `rounds` rounds to partition 0, each overwriting every key of `keys` (some as
/// tombstones in odd rounds), `per_batch` records a batch, in `codecs` by turns, sealing
/// after each; returns every record written as (offset, key, value).
async fn produce_keyed(
    log: &LogManager,
    topic: &TopicMetadata,
    first_round: u32,
    rounds: u32,
    keys: u32,
    per_batch: usize,
    codecs: &[oxbow_segment_writer::decompress::Codec],
) -> Vec<Written> {
    use oxbow_segment_writer::key_compact::testing::keyed_batch;
    let part = log.partition(topic, 0).await.expect("partition");
    let mut written = Vec::new();
    for round in first_round..first_round + rounds {
        let codec = codecs[round as usize % codecs.len()];
        for chunk in (0..keys).collect::<Vec<_>>().chunks(per_batch) {
            let recs: Vec<(Vec<u8>, Option<Vec<u8>>)> = chunk
                .iter()
                .map(|k| {
                    let key = format!("key-{k}").into_bytes();
                    let tombstone = round % 2 == 1 && k % 5 == 0;
                    let value = (!tombstone).then(|| format!("{k}@{round}").into_bytes());
                    (key, value)
                })
                .collect();
            let refs: Vec<oxbow_segment_writer::key_compact::testing::KeyValue> = recs
                .iter()
                .map(|(k, v)| (Some(k.as_slice()), v.as_deref()))
                .collect();
            let b = keyed_batch(0, 10_000 + i64::from(round) * 100, &refs, codec);
            let appended = log
                .append(&part, &b, &AppendPolicy::of(&topic.configs), Acks::All)
                .await
                .expect("append");
            for (i, (k, v)) in recs.into_iter().enumerate() {
                written.push((appended.base_offset + i as i64, k, v));
            }
        }
        log.seal_once().await.expect("seal");
    }
    written
}

fn latest_of(written: &[Written]) -> Latest {
    let mut latest = Latest::new();
    for (o, k, v) in written {
        latest.insert(k.clone(), (*o, v.clone()));
    }
    latest
}

/// Reads partition 0 from `from`, decoding every record.
async fn read_records(log: &LogManager, topic: &TopicMetadata, from: i64) -> Vec<Written> {
    let part = log.partition(topic, 0).await.expect("partition");
    let r = log.read(&part, from, 1 << 30, true).await.expect("read");
    oxbow_segment_writer::key_compact::testing::decoded_records(&r.batches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_compaction_keeps_the_latest_value_per_key_at_its_offset() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let log = open(dir.path(), metadata.clone()).await;
    let mut written = produce_keyed(&log, &topic, 0, 6, 40, 7, ALL_CODECS).await;
    let part = log.partition(&topic, 0).await.expect("partition");
    let (_, _, end) = part.offsets().expect("offsets");
    assert_eq!(end, 240);
    let stop = CancellationToken::new();
    // Negative: tombstones stay and get no delete horizon, so the expiry below is the
    // first cleaning to stamp one.
    let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::ZERO))
        .with_retention(Arc::new(Compacted {
            delete_retention_ms: -1,
        }));
    let stats = compactor.run_once(&stop).await.expect("round");
    assert!(stats.segments_written >= 1, "{stats:?}");

    let check = |got: Vec<Written>, latest: &Latest| {
        let want: Vec<Written> = {
            let mut v: Vec<_> = latest
                .iter()
                .map(|(k, (o, v))| (*o, k.clone(), v.clone()))
                .collect();
            v.sort();
            v
        };
        assert_eq!(
            got, want,
            "exactly the latest record per key, at its offset"
        );
    };
    let latest = latest_of(&written);
    check(read_records(&log, &topic, 0).await, &latest);
    // Tombstones younger than delete.retention.ms stay as their key's latest.
    assert!(latest.values().any(|(_, v)| v.is_none()));
    // Every offset reads (a fetch in a gap gets the next batch), and the span is unchanged.
    for offset in 0..end {
        let r = log.read(&part, offset, 1, true).await.expect("read");
        let first = r.batches.first().expect("a batch at or after every offset");
        assert!(header(first).last_offset() >= offset);
    }
    let entries = metadata
        .catalog_entries(topic.topic_id, 0, 0, 100)
        .await
        .expect("catalog");
    assert_eq!(entries.first().map(|e| e.base_offset), Some(0));
    assert_eq!(entries.last().map(|e| e.last_offset), Some(end - 1));
    assert!(entries
        .iter()
        .all(|e| e.layout == EntryLayout::SegmentIndex));
    // The segments verify (batches in order, chunks ending where they say).
    for o in objects_in(dir.path()) {
        if o.to_string_lossy().contains("segments/") {
            let body = std::fs::read(&o).expect("segment");
            oxbow_segment_writer::segment::verify(&o.to_string_lossy(), &body).expect("verifies");
        }
    }

    // A second round changes nothing.
    let again = compactor.run_once(&stop).await.expect("round");
    assert_eq!(again.segments_written, 0, "stable: {again:?}");
    check(read_records(&log, &topic, 0).await, &latest);

    // More writes (a producer going on): the newer values replace the older at the next
    // round; data written since is cleaned against the whole log.
    written.extend(produce_keyed(&log, &topic, 6, 2, 25, 7, ALL_CODECS).await);
    compactor.run_once(&stop).await.expect("round");
    let latest = latest_of(&written);
    check(read_records(&log, &topic, 0).await, &latest);

    // KIP-534: a tombstone stays delete.retention.ms after the cleaning that first kept it,
    // however old its own timestamp (these are from 1970): the first cleaning with a
    // retention stamps the horizon and keeps them, one past the horizon drops them.
    let expiring = || {
        Compactor::new(log.clone(), compact_settings(Duration::ZERO)).with_retention(Arc::new(
            Compacted {
                delete_retention_ms: 20,
            },
        ))
    };
    expiring().run_once(&stop).await.expect("stamping round");
    check(read_records(&log, &topic, 0).await, &latest);
    tokio::time::sleep(Duration::from_millis(50)).await;
    expiring().run_once(&stop).await.expect("expiring round");
    let live: Latest = latest
        .into_iter()
        .filter(|(_, (_, v))| v.is_some())
        .collect();
    check(read_records(&log, &topic, 0).await, &live);
    // The log end never moves; appends go on there.
    let (_, _, end_after) = part.offsets().expect("offsets");
    assert_eq!(end_after, 240 + 50);
}

/// Figure: key compaction's throughput (MB/s rewritten) and read amplification (bytes read
/// / bytes written) on a changelog of `OXBOW_FIGURE_KEYS` keys (default 1 M), 100-byte
/// values in batches of 100 records, uncompressed. Two cleanings through the pure core (in
/// memory, the compactor's two passes: the map from the dirty part, then every run of
/// 64 MiB rewritten): the first of a log where each key was written twice, and a steady
/// state one at Kafka's default `min.cleanable.dirty.ratio` (0.5: as many random updates as
/// the clean log holds). Then one end-to-end round through the compactor (local object
/// store) with `OXBOW_FIGURE_E2E_KEYS` (default 100 k) keys written three times.
/// `cargo test -p oxbow-segment-writer --test compact figure -- --ignored --nocapture`
/// (a debug build: an optimized one is several times faster).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a figure, not a check: run with --ignored --nocapture"]
async fn figure_key_compaction_throughput_and_read_amplification() {
    use oxbow_segment_writer::decompress::Codec;
    use oxbow_segment_writer::key_compact::{
        clean_run, testing::keyed_batch, OffsetMap, RunParams,
    };
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let keys = env("OXBOW_FIGURE_KEYS", 1_000_000);
    let mb = |b: u64| b as f64 / 1e6;
    let value = [b'v'; 100];
    // xorshift: updates of random keys.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let batches_of = |ks: &[u64], first_offset: i64| -> Vec<Bytes> {
        ks.chunks(100)
            .enumerate()
            .map(|(i, c)| {
                let key_bytes: Vec<Vec<u8>> = c
                    .iter()
                    .map(|k| format!("key-{k:010}").into_bytes())
                    .collect();
                let recs: Vec<oxbow_segment_writer::key_compact::testing::KeyValue> = key_bytes
                    .iter()
                    .map(|k| (Some(k.as_slice()), Some(&value[..])))
                    .collect();
                keyed_batch(first_offset + (i as i64) * 100, 0, &recs, Codec::None)
            })
            .collect()
    };
    let clean = |log: &[Bytes], dirty_from: i64, what: &str| -> Vec<Bytes> {
        let t = Instant::now();
        let mut map = OffsetMap::with_budget(64 << 20);
        let mut read: u64 = 0;
        let mut covered = None;
        for b in log.iter().filter(|b| header(b).last_offset() >= dirty_from) {
            read += b.len() as u64;
            let p = map
                .add(std::slice::from_ref(b), dirty_from, 1 << 20)
                .expect("map");
            assert!(!p.full, "64 MiB holds the keys");
            covered = p.covered_to.or(covered);
        }
        let params = RunParams {
            cleaned_to: covered.expect("dirty data"),
            now_ms: 0,
            delete_retention_ms: -1,
            max_decompressed_batch_bytes: 1 << 20,
        };
        let mut out = Vec::new();
        let mut run = Vec::new();
        let mut run_bytes = 0usize;
        let flush = |run: &mut Vec<Bytes>, out: &mut Vec<Bytes>| {
            let c = clean_run(run, &map, params).expect("clean");
            out.extend(c.batches);
            run.clear();
        };
        for b in log {
            read += b.len() as u64;
            run_bytes += b.len();
            run.push(b.clone());
            if run_bytes >= 64 << 20 {
                flush(&mut run, &mut out);
                run_bytes = 0;
            }
        }
        flush(&mut run, &mut out);
        let secs = t.elapsed().as_secs_f64();
        let input: u64 = log.iter().map(|b| b.len() as u64).sum();
        let written: u64 = out.iter().map(|b| b.len() as u64).sum();
        println!(
            "figure key-compaction core, {what}: {} keys, {:.1} MB log → {:.1} MB in {secs:.2} s: \
             {:.1} MB/s rewritten ({:.1} MB/s of log read), read amplification {:.2} \
             ({:.1} MB read / {:.1} MB written), map {} keys",
            keys,
            mb(input),
            mb(written),
            mb(written) / secs,
            mb(read) / secs,
            read as f64 / written as f64,
            mb(read),
            mb(written),
            map.len()
        );
        out
    };
    // First cleaning: every key written twice (in order, then shuffled by stride).
    let mut ks: Vec<u64> = (0..keys).collect();
    ks.extend((0..keys).map(|i| (i * 7_919) % keys));
    let log = batches_of(&ks, 0);
    let compacted = clean(&log, i64::MIN, "first cleaning (2 writes per key)");
    drop(log);
    // Steady state: as many random updates as the clean log holds (dirty ratio 0.5).
    let end = 2 * keys as i64;
    let updates: Vec<u64> = (0..keys).map(|_| rand() % keys).collect();
    let mut log = compacted;
    log.extend(batches_of(&updates, end));
    clean(&log, end, "steady state at dirty ratio 0.5");
    drop(log);

    // One end-to-end round: produce through the log, seal, compact into segments.
    let e2e_keys = env("OXBOW_FIGURE_E2E_KEYS", 100_000) as u32;
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let log = open(dir.path(), metadata.clone()).await;
    produce_keyed(&log, &topic, 0, 3, e2e_keys, 100, &[Codec::None]).await;
    let mut compactor = Compactor::new(
        log.clone(),
        CompactSettings::new(512 << 20, Duration::from_secs(3600), Duration::ZERO),
    )
    .with_retention(Arc::new(Compacted {
        delete_retention_ms: i64::MAX,
    }));
    let t = Instant::now();
    let stats = compactor
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    let secs = t.elapsed().as_secs_f64();
    let written = log
        .compact_metrics
        .segment_bytes_written
        .load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "figure key-compaction end to end (local store, one round): {e2e_keys} keys × 3 writes, \
         {:.1} MB read, {:.1} MB written in {secs:.2} s: {:.1} MB/s rewritten, read \
         amplification {:.2} ({} segments)",
        mb(stats.bytes_read),
        mb(written),
        mb(written) / secs,
        stats.bytes_read as f64 / written.max(1) as f64,
        stats.segments_written
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_racing_key_compaction_never_see_an_older_value_after_a_newer_one() {
    // No delete delay (objects vanish under readers, who look the catalog up again) and a
    // memory tail holding the whole log (swaps drop the originals from it while readers
    // read it; without that, reads from 0 would never see the compaction).
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("meta"));
    let topic = topic(&metadata).await;
    let store = objects::local(&dir.path().join("objects")).expect("object store");
    let log = LogManager::open(
        LogSettings {
            partition_tail_bytes: 1 << 20,
            tail_memory_bytes: usize::MAX,
            ..settings(dir.path())
        },
        metadata.clone(),
        store,
        ReadCache::new(1 << 20),
    )
    .await
    .expect("open log");
    let mut written = produce_keyed(&log, &topic, 0, 2, 30, 7, ALL_CODECS).await;
    let stop = CancellationToken::new();
    let reader = {
        let (log, topic, stop) = (log.clone(), topic.clone(), stop.clone());
        tokio::spawn(async move {
            let mut reads = 0u64;
            while !stop.is_cancelled() {
                let records = read_records(&log, &topic, 0).await;
                let mut newest: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
                let mut previous = -1;
                for (offset, key, _) in records {
                    assert!(offset > previous, "offsets increase");
                    previous = offset;
                    // Offsets order a key's values: the one read must be newer than any
                    // read before it.
                    let seen = newest.insert(key.clone(), offset);
                    assert!(seen.is_none_or(|s| s < offset), "key {key:?} went back");
                }
                reads += 1;
                tokio::task::yield_now().await;
            }
            reads
        })
    };
    let mut compactor = Compactor::new(log.clone(), compact_settings(Duration::ZERO))
        .with_retention(Arc::new(Compacted {
            delete_retention_ms: i64::MAX,
        }));
    for round in 0..10 {
        written.extend(produce_keyed(&log, &topic, 2 + round, 1, 30, 7, ALL_CODECS).await);
        compactor
            .run_once(&CancellationToken::new())
            .await
            .expect("round");
    }
    stop.cancel();
    let reads = tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .expect("the reader stops within a minute")
        .expect("every read was in order");
    assert!(reads > 0);
    // And the result is the latest per key, at its offset.
    let latest = latest_of(&written);
    let mut want: Vec<Written> = latest.into_iter().map(|(k, (o, v))| (o, k, v)).collect();
    want.sort();
    assert_eq!(read_records(&log, &topic, 0).await, want);
}
