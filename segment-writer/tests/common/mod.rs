//! What the compactor's integration tests share: a one-node log over the local object
//! store and an embedded metadata store, a topic, seals of many small batches, and views of
//! the objects.

#![allow(dead_code)]

use bytes::Bytes;
use oxbow_cache::ReadCache;
use oxbow_metadata::{MetadataStore, TopicMetadata, TopicSpec};
use oxbow_segment_writer::batch::{self, testing::make_batch};
use oxbow_segment_writer::{
    objects, Acks, AppendPolicy, CompactSettings, LogManager, LogSettings, WalSettings,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub const PARTITIONS: i32 = 3;
pub const ROUNDS: i64 = 20;

pub fn settings(dir: &Path) -> LogSettings {
    LogSettings {
        broker_id: 1,
        wal: WalSettings {
            dir: dir.join("wal"),
            file_bytes_max: 1 << 20,
            budget_bytes: 1 << 30,
            direct_writes: true,
        },
        flush_interval: Duration::from_secs(3600),
        flush_bytes: 1 << 30,
        // Nothing kept in memory after a seal: reads go to the object store.
        partition_tail_bytes: 0,
        tail_memory_bytes: usize::MAX,
        producer_id_expiration: oxbow_segment_writer::PRODUCER_ID_EXPIRATION_DEFAULT,
        max_decompressed_batch_bytes:
            oxbow_segment_writer::decompress::DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES,
        durability: Default::default(),
        replication: Default::default(),
    }
}

pub async fn open(dir: &Path, metadata: Arc<dyn MetadataStore>) -> Arc<LogManager> {
    let store = objects::local(&dir.join("objects")).expect("object store");
    LogManager::open(settings(dir), metadata, store, ReadCache::new(1 << 20))
        .await
        .expect("open log")
}

pub fn compact_settings(delete_delay: Duration) -> CompactSettings {
    CompactSettings {
        // Small chunks, so segments have many index rows.
        index_interval_bytes: 700,
        ..CompactSettings::new(1 << 20, Duration::from_secs(3600), delete_delay)
    }
}

pub async fn topic(metadata: &Arc<dyn MetadataStore>) -> TopicMetadata {
    metadata
        .create_topic(
            TopicSpec {
                name: "c".into(),
                partitions: PARTITIONS,
                replication_factor: 1,
                configs: BTreeMap::new(),
            },
            1,
        )
        .await
        .expect("topic")
}

/// Appends a few batches to every partition and seals them into one object, `rounds`
/// times: each object holds every partition. Timestamps jump around (not monotonic).
pub async fn produce(log: &LogManager, topic: &TopicMetadata, first_round: i64, rounds: i64) {
    for round in first_round..first_round + rounds {
        for p in 0..PARTITIONS {
            let part = log.partition(topic, p).await.expect("partition");
            for i in 0..3 {
                let ts = 10_000 + ((round * 7 + i * 3) % 13) * 100 + i64::from(p);
                let count = 1 + ((round + i) % 4) as i32;
                log.append(
                    &part,
                    &make_batch(count, ts),
                    &AppendPolicy::of(&topic.configs),
                    Acks::All,
                )
                .await
                .expect("append");
            }
        }
        log.seal_once().await.expect("seal");
    }
}

/// Every batch of every partition, read from the start.
pub async fn read_all(log: &LogManager, topic: &TopicMetadata) -> Vec<Vec<Bytes>> {
    let mut out = Vec::new();
    for p in 0..PARTITIONS {
        let part = log.partition(topic, p).await.expect("partition");
        let r = log.read(&part, 0, 1 << 30, true).await.expect("read");
        out.push(r.batches);
    }
    out
}

/// Every file in the object store.
pub fn objects_in(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let path = e.path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&dir.join("objects"), &mut out);
    out.sort();
    out
}

pub fn count_under(objects: &[PathBuf], prefix: &str) -> usize {
    objects
        .iter()
        .filter(|p| p.to_string_lossy().contains(prefix))
        .count()
}

pub fn header(b: &Bytes) -> batch::BatchHeader {
    batch::peek_header(b).expect("header").expect("whole")
}

/// The base offsets of `batches`.
pub fn offsets(batches: &[Bytes]) -> Vec<i64> {
    batches.iter().map(|b| header(b).base_offset).collect()
}

/// Reads every offset alone and by timestamp, checking against `expected`.
pub async fn check_reads(log: &LogManager, topic: &TopicMetadata, expected: &[Vec<Bytes>]) {
    for (p, batches) in expected.iter().enumerate() {
        let part = log.partition(topic, p as i32).await.expect("partition");
        let all = log.read(&part, 0, 1 << 30, true).await.expect("read all");
        assert_eq!(
            &all.batches, batches,
            "partition {p}: every batch identical"
        );
        for b in batches {
            let h = header(b);
            for offset in h.base_offset..=h.last_offset() {
                let r = log.read(&part, offset, 1, true).await.expect("read");
                assert_eq!(r.batches.first(), Some(b), "partition {p} offset {offset}");
            }
            // By time: the first batch whose max timestamp reaches T.
            for t in [h.max_timestamp, h.max_timestamp - 1, h.base_timestamp] {
                let want = batches.iter().find(|x| header(x).max_timestamp >= t);
                let got = log
                    .find_batch_by_timestamp(&part, t)
                    .await
                    .expect("by time");
                assert_eq!(got.as_ref(), want, "partition {p} timestamp {t}");
            }
        }
        let past = batches.iter().map(|b| header(b).max_timestamp).max();
        let none = log
            .find_batch_by_timestamp(&part, past.unwrap_or(0) + 1)
            .await
            .expect("by time");
        assert!(none.is_none(), "no batch after the last timestamp");
    }
}

/// What a [`HookedStore`] does around each GET it passes on.
#[async_trait::async_trait]
pub trait GetHook: std::fmt::Debug + Send + Sync + 'static {
    /// Before the GET goes to the inner store.
    async fn before(
        &self,
        _location: &object_store::path::Path,
        _options: &object_store::GetOptions,
    ) {
    }
    /// With its result.
    fn after(&self, _result: &object_store::Result<object_store::GetResult>) {}
}

/// An object store that passes everything on to `inner`, every GET through `hook`.
#[derive(Debug)]
pub struct HookedStore<H> {
    pub inner: Arc<dyn object_store::ObjectStore>,
    pub hook: H,
}

impl<H: GetHook> std::fmt::Display for HookedStore<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hooked({})", self.inner)
    }
}

#[async_trait::async_trait]
impl<H: GetHook> object_store::ObjectStore for HookedStore<H> {
    async fn put_opts(
        &self,
        location: &object_store::path::Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &object_store::path::Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &object_store::path::Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        self.hook.before(location, &options).await;
        let r = self.inner.get_opts(location, options).await;
        self.hook.after(&r);
        r
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<
            'static,
            object_store::Result<object_store::path::Path>,
        >,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &object_store::path::Path,
        to: &object_store::path::Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
