//! A broker for unit tests, as `oxbow serve` runs one: embedded metadata and local objects
//! in a temp dir, one broker id, no seals during a test (an hour's flush interval).

use super::{Broker, BrokerSettings};
use crate::security::acl::AuthorizerSettings;
use oxbow_metadata::{EmbeddedStore, MetadataStore};
use oxbow_segment_writer::{objects, LogManager, LogSettings, WalSettings};
use std::sync::Arc;
use std::time::Duration;

pub(crate) async fn temp_broker(
    dir: &std::path::Path,
    authorization: AuthorizerSettings,
) -> Arc<Broker> {
    let objects = objects::local(&dir.join("objects")).expect("object store");
    temp_broker_with(dir, authorization, objects, 1 << 20, 1 << 20).await
}

/// [`temp_broker`] on `objects`, with `partition_tail_bytes` of each partition's sealed
/// data kept in memory and a read cache of `cache_bytes`: a test of reads from the object
/// store passes 0 and 0 (every sealed range is then a GET) and a store that hooks its GETs.
pub(crate) async fn temp_broker_with(
    dir: &std::path::Path,
    authorization: AuthorizerSettings,
    objects: Arc<dyn object_store::ObjectStore>,
    partition_tail_bytes: usize,
    cache_bytes: usize,
) -> Arc<Broker> {
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(EmbeddedStore::open(&dir.join("meta.redb")).expect("metadata"));
    let log = LogManager::open(
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
            partition_tail_bytes,
            tail_memory_bytes: usize::MAX,
            producer_id_expiration: oxbow_segment_writer::PRODUCER_ID_EXPIRATION_DEFAULT,
            max_decompressed_batch_bytes:
                oxbow_segment_writer::decompress::DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES,
            durability: Default::default(),
            replication: Default::default(),
        },
        metadata.clone(),
        objects,
        oxbow_cache::ReadCache::new(cache_bytes),
    )
    .await
    .expect("log");
    let settings = BrokerSettings {
        broker_id: 1,
        advertised_host: "127.0.0.1".into(),
        advertised_port: 9092,
        listeners: [("PLAINTEXT".to_string(), ("127.0.0.1".to_string(), 9092))].into(),
        auto_create_topics: false,
        default_partitions: 1,
        max_request_bytes: 1 << 20,
        cluster_id: "test".into(),
        log_retention_ms: 604_800_000,
        log_retention_bytes: -1,
        authorization,
        sasl: Default::default(),
        oauth: None,
        object_store_location: "memory".into(),
        transactions: Default::default(),
    };
    Broker::new(settings, metadata, log).await.expect("broker")
}
