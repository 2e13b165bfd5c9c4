//! Waiting recoveries on one node, in paused time: a broker that lost its WAL while its
//! recorded in-sync replica is down opens, refuses its partitions, retries with bounded
//! backoff (neither hammering nor stalling), and recovers once the replica answers.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use oxbow_cache::ReadCache;
use oxbow_metadata::{BrokerRegistration, EmbeddedStore, MetadataStore, TopicSpec, WalReplicaSet};
use oxbow_segment_writer::internal_auth::InternalAuth;
use oxbow_segment_writer::leadership::recovery_state::{RecoveryKey, BACKOFF_MAX, BACKOFF_MIN};
use oxbow_segment_writer::{
    objects, serve_internal, ErrorKind, LogManager, LogSettings, ReplicaStore, WalSettings,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

fn registration(id: i32, internal_addr: String) -> BrokerRegistration {
    BrokerRegistration {
        broker_id: id,
        az: None,
        kafka_addr: String::new(),
        http_addr: String::new(),
        internal_addr,
        listeners: Default::default(),
    }
}

fn attempts(log: &LogManager) -> u32 {
    log.recovery_attempts()
        .iter()
        .find(|(k, _)| *k == RecoveryKey::OwnTail)
        .map_or(0, |(_, n)| *n)
}

#[tokio::test(start_paused = true)]
async fn a_lost_wal_waits_for_its_replica_with_bounded_backoff_then_recovers() {
    let dir = tempfile::tempdir().expect("tmp");
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(EmbeddedStore::open(&dir.path().join("meta.redb")).expect("metadata"));
    let topic = metadata
        .create_topic(
            TopicSpec {
                name: "t".into(),
                partitions: 1,
                replication_factor: 1,
                configs: BTreeMap::new(),
            },
            1,
        )
        .await
        .expect("topic");
    // Broker 1's previous WAL incarnation had broker 2 in sync; broker 2 is registered at
    // an address nobody listens on (its process is down).
    metadata
        .put_wal_replica_set(
            WalReplicaSet {
                broker_id: 1,
                incarnation: 42,
                replicas: vec![2],
                isr: vec![2],
                eligible: Vec::new(),
                version: 0,
            },
            None,
        )
        .await
        .expect("record");
    let dead = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let dead_addr = dead.local_addr().expect("addr").to_string();
    drop(dead);
    let lease = metadata
        .register_broker(registration(2, dead_addr), Duration::from_secs(3600))
        .await
        .expect("register 2");

    let log = LogManager::open(
        LogSettings {
            broker_id: 1,
            wal: WalSettings {
                dir: dir.path().join("b1/wal"),
                file_bytes_max: 1 << 20,
                budget_bytes: 1 << 30,
                direct_writes: true,
            },
            flush_interval: Duration::from_secs(3600),
            flush_bytes: 1 << 30,
            partition_tail_bytes: 0,
            tail_memory_bytes: usize::MAX,
            producer_id_expiration: oxbow_segment_writer::PRODUCER_ID_EXPIRATION_DEFAULT,
            max_decompressed_batch_bytes:
                oxbow_segment_writer::decompress::DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES,
            durability: Default::default(),
            replication: Default::default(),
        },
        metadata.clone(),
        objects::local(&dir.path().join("objects")).expect("objects"),
        ReadCache::new(1 << 20),
    )
    .await
    .expect("opens although no replica answers");
    assert_eq!(attempts(&log), 1, "the first attempt runs in open");
    let Err(err) = log.partition(&topic, 0).await else {
        panic!("served before its tail was recovered");
    };
    assert_eq!(err.kind(), ErrorKind::NotLeader, "{err}");

    let stop = CancellationToken::new();
    let driver = tokio::spawn(log.clone().run_recoveries(stop.clone()));
    // Backoff doubles from BACKOFF_MIN to BACKOFF_MAX (scaled by a jitter in [0.5, 1]):
    // over 60 s that is at least 60 / 5 = 12 attempts and, after the first few short
    // ones, no more than one per 2.5 s.
    let window = Duration::from_secs(60);
    tokio::time::sleep(window).await;
    let n = attempts(&log);
    let most = 8 + (window.as_millis() / (BACKOFF_MAX / 2).as_millis()) as u32;
    let least = (window.as_millis() / BACKOFF_MAX.as_millis()) as u32;
    assert!((least..=most).contains(&n), "{n} attempts in {window:?}");
    assert!(BACKOFF_MIN < BACKOFF_MAX);
    assert_eq!(log.recoveries_pending(), 1);

    // The replica is back (holding nothing of broker 1: everything was sealed): the next
    // attempt, made at once when it joins, recovers and the partition opens.
    metadata.revoke_lease(lease.id).await.expect("revoke");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let store = Arc::new(ReplicaStore::new(
        oxbow_segment_writer::wal_disk::FsDisk::new(dir.path().join("b2/replicas")),
        1 << 20,
    ));
    // As an in-sync replica does, it holds a copy of the recorded incarnation, begun at or
    // below the source's sealed floor (empty: all trimmed); a replica without one (its disk
    // lost), or whose copy began above the floor, would not count as in sync.
    {
        let copy = store.log(1, 42).expect("broker 1's copy");
        let mut copy = copy.lock().expect("lock");
        copy.stream_begins(7, 0..0);
        assert!(!copy.complete(), "no floor known yet");
        copy.trim(5).expect("trim");
        assert!(!copy.complete(), "began above the floor");
        copy.trim(7).expect("trim");
        assert!(copy.complete());
    }
    let server = tokio::spawn(serve_internal(
        listener,
        InternalAuth::disabled(2),
        store,
        stop.clone(),
        TaskTracker::new(),
    ));
    metadata
        .register_broker(registration(2, addr), Duration::from_secs(3600))
        .await
        .expect("register 2 again");
    log.retry_recoveries_now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while log.recoveries_pending() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "not recovered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(log.not_ready_reasons().is_empty());
    log.partition(&topic, 0)
        .await
        .expect("serves once recovered");
    stop.cancel();
    driver.await.expect("driver");
    server.await.expect("server");
}
