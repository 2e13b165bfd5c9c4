//! Metadata service figures: catalog commits (one transaction carrying entries for 100
//! partitions, fenced by each partition's epoch, as one sealed object makes) and consumer
//! offset commits (batches of partitions per call), each with p50/p99 latency.
//!
//! ```text
//! cargo run --release -p oxbow-metadata --example bench -- [embedded|etcd|etcd://h:p/cluster] [seconds]
//! ```
//! `etcd` starts a single local etcd member in a temp dir (Debian `etcd-server`); the
//! embedded store is a `redb` file in a temp dir (fsync per commit, as in `oxbow serve`).

// A benchmark on the real clock (clippy.toml bans it in simulated code).
#![allow(clippy::disallowed_methods)]

use hdrhistogram::Histogram;
use oxbow_metadata::testing::EtcdCluster;
use oxbow_metadata::{
    CatalogCommit, CatalogEntry, CommittedOffset, EmbeddedStore, EpochFence, MetadataLocation,
    MetadataStore, TopicPartition, TopicSpec,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 100;
const OFFSET_BATCH: i32 = 100;
const OFFSET_WRITERS: usize = 8;

fn report(name: &str, ops: u64, elapsed: Duration, h: &Histogram<u64>, unit: &str, per_op: u64) {
    let per_s = ops as f64 / elapsed.as_secs_f64();
    println!(
        "{name:<40} {per_s:>9.0} commits/s ({:>9.0} {unit}/s)  p50 {:>7.2} ms  p99 {:>7.2} ms  ({ops} commits)",
        per_s * per_op as f64,
        h.value_at_quantile(0.50) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0,
    );
}

async fn catalog(store: &dyn MetadataStore, run_for: Duration) -> anyhow_free::Result<()> {
    let t = store
        .create_topic(
            TopicSpec {
                name: format!("bench-{}", uuid::Uuid::new_v4().simple()),
                partitions: PARTITIONS,
                replication_factor: 1,
                configs: BTreeMap::new(),
            },
            1,
        )
        .await?;
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(t.topic_id, p))
        .collect();
    let fences: Vec<EpochFence> = tps
        .iter()
        .map(|tp| EpochFence {
            topic_partition: *tp,
            leader_epoch: 0,
        })
        .collect();
    let mut h = Histogram::<u64>::new(3)?;
    let started = Instant::now();
    let mut n: i64 = 0;
    while started.elapsed() < run_for {
        let key = format!("data/b1/{n:020}-x.oxb");
        let entries: Vec<CatalogEntry> = tps
            .iter()
            .enumerate()
            .map(|(i, tp)| CatalogEntry {
                topic_id: tp.topic_id,
                partition: tp.partition,
                base_offset: n * 10,
                last_offset: n * 10 + 9,
                max_timestamp_ms: 1_700_000_000_000 + n,
                object_key: key.clone(),
                byte_start: i as u64 * 4096,
                byte_len: 4096,
                crc32c: 0xdead_beef,
                leader_epoch: 0,
                layout: oxbow_metadata::EntryLayout::Batches,
                txn: None,
            })
            .collect();
        let t0 = Instant::now();
        store
            .commit_catalog(CatalogCommit {
                entries,
                fences: fences.clone(),
                writer: None,
            })
            .await?;
        h.record(t0.elapsed().as_micros() as u64)?;
        n += 1;
    }
    report(
        "catalog commit (100 partitions/txn)",
        n as u64,
        started.elapsed(),
        &h,
        "entries",
        PARTITIONS as u64,
    );
    Ok(())
}

async fn offsets(store: Arc<dyn MetadataStore>, run_for: Duration) -> anyhow_free::Result<()> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..OFFSET_WRITERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut h = Histogram::<u64>::new(3)?;
            let mut n: i64 = 0;
            let group = format!("bench-group-{w}");
            while started.elapsed() < run_for {
                let batch: Vec<CommittedOffset> = (0..OFFSET_BATCH)
                    .map(|p| CommittedOffset {
                        topic: "bench".into(),
                        partition: p,
                        offset: n,
                        leader_epoch: 0,
                        metadata: String::new(),
                        commit_timestamp_ms: 1_700_000_000_000 + n,
                    })
                    .collect();
                let t0 = Instant::now();
                store.commit_offsets(&group, batch).await?;
                h.record(t0.elapsed().as_micros() as u64)?;
                n += 1;
            }
            anyhow_free::Result::Ok((n as u64, h))
        }));
    }
    let mut total = 0;
    let mut h = Histogram::<u64>::new(3)?;
    for t in tasks {
        let (n, hh) = t.await??;
        total += n;
        h.add(hh)?;
    }
    report(
        &format!("offset commit ({OFFSET_BATCH}/batch, {OFFSET_WRITERS} groups)"),
        total,
        started.elapsed(),
        &h,
        "offsets",
        OFFSET_BATCH as u64,
    );
    Ok(())
}

/// `Box<dyn Error>` without pulling `anyhow` into the crate's dev-dependencies.
mod anyhow_free {
    pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;
}

#[tokio::main]
async fn main() -> anyhow_free::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let backend = args.first().map(String::as_str).unwrap_or("embedded");
    let seconds: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    let run_for = Duration::from_secs(seconds);
    let dir = tempfile::tempdir()?;
    let mut _etcd = None;
    let store: Arc<dyn MetadataStore> = match backend {
        "embedded" => Arc::new(EmbeddedStore::open(&dir.path().join("metadata.redb"))?),
        "etcd" => {
            let etcd = EtcdCluster::start(1)?;
            let url = etcd.url("bench");
            _etcd = Some(etcd);
            open(&url, dir.path()).await?
        }
        url => open(url, dir.path()).await?,
    };
    println!("backend: {backend}, {seconds} s per figure");
    catalog(store.as_ref(), run_for).await?;
    offsets(store, run_for).await?;
    Ok(())
}

async fn open(url: &str, dir: &std::path::Path) -> anyhow_free::Result<Arc<dyn MetadataStore>> {
    let location: MetadataLocation = url.parse()?;
    let store = oxbow_metadata::open_store(&location, dir).await?;
    // A fresh single member elects itself within a second; wait for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.list_topics().await.is_err() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(store)
}
