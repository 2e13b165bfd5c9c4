//! WAL replication between three brokers in one process (three `LogManager`s, each with its
//! own WAL, replica store and internal server on loopback, sharing one metadata service and
//! one object store): the in-sync set forms, `acks=all` follows `min.insync.replicas`, and a
//! broker's acknowledged tail survives losing its WAL directory or the broker itself.
//!
//! A "crash" aborts a broker's tasks (no final seal) and drops its log; seals are held back
//! (flush interval of an hour) so acknowledged data lives only in WALs.

// Real servers and real time in this test (clippy.toml bans these in simulated code).
#![allow(clippy::disallowed_methods)]

use oxbow_cache::ReadCache;
use oxbow_metadata::{BrokerRegistration, EmbeddedStore, MetadataStore, TopicMetadata, TopicSpec};
use oxbow_segment_writer::batch::{
    self,
    testing::{make_batch, make_idempotent_batch},
};
use oxbow_segment_writer::{
    objects, run_sealer, serve_internal, Acks, AppendPolicy, ErrorKind, LogManager, LogSettings,
    Mirrored, ReplicationSettings, WalSettings,
};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

struct Node {
    log: Arc<LogManager>,
    tasks: Vec<JoinHandle<()>>,
    stop: CancellationToken,
}

impl Node {
    /// Stops the broker as a crash would: nothing more is sealed or sent.
    async fn crash(self) {
        // Abort before cancelling: a cancelled sealer would seal one last time.
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks {
            let _ = t.await;
        }
        self.stop.cancel();
        drop(self.log);
        // Let the WAL writer thread see its queue closed.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Cluster {
    root: tempfile::TempDir,
    metadata: Arc<dyn MetadataStore>,
}

impl Cluster {
    fn new() -> Cluster {
        let root = tempfile::tempdir().expect("tmp");
        let metadata: Arc<dyn MetadataStore> =
            Arc::new(EmbeddedStore::open(&root.path().join("meta.redb")).expect("metadata"));
        Cluster { root, metadata }
    }

    fn dir(&self, id: i32) -> PathBuf {
        self.root.path().join(format!("b{id}"))
    }

    async fn start(&self, id: i32) -> Node {
        let dir = self.dir(id);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        self.metadata
            .register_broker(
                BrokerRegistration {
                    broker_id: id,
                    az: Some(format!("az{id}")),
                    kafka_addr: String::new(),
                    http_addr: String::new(),
                    internal_addr: addr,
                    listeners: Default::default(),
                },
                Duration::from_secs(120),
            )
            .await
            .expect("register");
        let log = LogManager::open(
            LogSettings {
                broker_id: id,
                wal: WalSettings {
                    dir: dir.join("wal"),
                    // Small files (here and in replica copies), so trims are visible.
                    file_bytes_max: 512,
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
                replication: ReplicationSettings {
                    az: Some(format!("az{id}")),
                    replication_factor: 3,
                    replica_lag_max: Duration::from_millis(500),
                    internal_auth: None,
                },
            },
            self.metadata.clone(),
            objects::local(&self.root.path().join("objects")).expect("objects"),
            ReadCache::new(1 << 20),
        )
        .await
        .expect("open log");
        let stop = CancellationToken::new();
        let tasks = vec![
            tokio::spawn(run_sealer(log.clone(), stop.clone())),
            tokio::spawn(log.replicator.clone().run(stop.clone())),
            tokio::spawn(log.clone().run_recoveries(stop.clone())),
            tokio::spawn(serve_internal(
                listener,
                log.internal_auth().clone(),
                log.replica_store.clone(),
                stop.clone(),
                TaskTracker::new(),
            )),
        ];
        Node { log, tasks, stop }
    }

    /// Moves partition 0 of `topic` to broker `to` with `recover_from` set, as the
    /// controller does when the leader's lease expires.
    async fn move_partition(&self, topic: &TopicMetadata, to: i32, recover_from: i32) {
        // Read afresh: opening a partition records its epoch's start in the state.
        let stored = self
            .metadata
            .topic_by_id(topic.topic_id)
            .await
            .expect("topic")
            .expect("exists");
        let state = stored.partition(0).expect("partition 0").clone();
        let mut moved = state.clone();
        moved.leader = to;
        moved.leader_epoch += 1;
        moved.recover_from = Some(recover_from);
        self.metadata
            .update_partition(topic.topic_id, state.version, moved)
            .await
            .expect("move the partition");
    }

    async fn topic(&self, name: &str, partitions: i32, min_insync: &str) -> TopicMetadata {
        self.metadata
            .create_topic(
                TopicSpec {
                    name: name.into(),
                    partitions,
                    replication_factor: 3,
                    configs: BTreeMap::from([(
                        "min.insync.replicas".to_string(),
                        min_insync.to_string(),
                    )]),
                },
                1,
            )
            .await
            .expect("topic")
    }
}

async fn wait_in_sync(node: &Node, copies: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while node.log.replicator.in_sync_copies() < copies {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} in-sync copies after 15 s",
            node.log.replicator.in_sync_copies()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads a partition from offset 0; returns the base offsets of its batches.
async fn read_all(log: &LogManager, topic: &TopicMetadata, partition: i32) -> Vec<i64> {
    let p = log
        .partition(topic, partition)
        .await
        .expect("open partition");
    let mut out = Vec::new();
    let mut next = 0;
    loop {
        let r = log.read(&p, next, 1 << 20, true).await.expect("read");
        if r.batches.is_empty() {
            break;
        }
        for b in &r.batches {
            let h = batch::peek_header(b).expect("header").expect("whole");
            out.push(h.base_offset);
            next = h.last_offset() + 1;
        }
    }
    out
}

async fn append_many(log: &LogManager, topic: &TopicMetadata, partition: i32, n: i64) {
    let p = log.partition(topic, partition).await.expect("partition");
    for i in 0..n {
        log.append(
            &p,
            &make_batch(2, 1000 + i),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("acks=all append");
    }
}

fn dense(base_offsets: &[i64], batches: i64) {
    let want: Vec<i64> = (0..batches).map(|i| i * 2).collect();
    assert_eq!(base_offsets, want.as_slice());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_tail_survives_losing_the_wal_directory() {
    let c = Cluster::new();
    let n1 = c.start(1).await;
    let n2 = c.start(2).await;
    let n3 = c.start(3).await;
    let topic = c.topic("t", 2, "3").await;
    wait_in_sync(&n1, 3).await;
    append_many(&n1.log, &topic, 0, 40).await;
    append_many(&n1.log, &topic, 1, 25).await;
    n1.crash().await;
    std::fs::remove_dir_all(c.dir(1).join("wal")).expect("delete the WAL");

    let n1 = c.start(1).await;
    dense(&read_all(&n1.log, &topic, 0).await, 40);
    dense(&read_all(&n1.log, &topic, 1).await, 25);
    // The recovered tail is this broker's data again: it seals into the object store.
    n1.log.seal_once().await.expect("seal");
    for (p, end) in [(0, 80), (1, 50)] {
        let last = c
            .metadata
            .catalog_last(topic.topic_id, p)
            .await
            .expect("catalog")
            .expect("catalogued");
        assert_eq!(last.next_offset(), end);
    }
    for n in [n1, n2, n3] {
        n.crash().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_lost_its_wal_waits_for_its_replicas_then_recovers_its_tail() {
    let c = Cluster::new();
    let n1 = c.start(1).await;
    let n2 = c.start(2).await;
    let n3 = c.start(3).await;
    let topic = c.topic("t", 1, "3").await;
    wait_in_sync(&n1, 3).await;
    append_many(&n1.log, &topic, 0, 40).await;
    // The whole cluster goes down; broker 1 comes back first, without its WAL.
    for n in [n1, n2, n3] {
        n.crash().await;
    }
    std::fs::remove_dir_all(c.dir(1)).expect("delete broker 1's data");
    let n1 = c.start(1).await;
    let Err(err) = n1.log.partition(&topic, 0).await else {
        panic!("opened before its tail was recovered");
    };
    assert_eq!(err.kind(), ErrorKind::NotLeader, "{err}");
    let reasons = n1.log.not_ready_reasons();
    assert!(
        reasons.iter().any(|r| r.contains("lost WAL tail")),
        "{reasons:?}"
    );
    assert_eq!(n1.log.recoveries_pending(), 1);

    // One of its in-sync replicas is back: the next attempt recovers the tail.
    let n2 = c.start(2).await;
    n1.log.retry_recoveries_now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while n1.log.recoveries_pending() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not recovered within 15 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(n1.log.not_ready_reasons().is_empty());
    dense(&read_all(&n1.log, &topic, 0).await, 40);
    for n in [n1, n2] {
        n.crash().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_source_answers_for_its_own_tail_when_its_replicas_are_down() {
    let c = Cluster::new();
    let n1 = c.start(1).await;
    let n2 = c.start(2).await;
    let n3 = c.start(3).await;
    let topic = c.topic("t", 1, "3").await;
    wait_in_sync(&n1, 3).await;
    append_many(&n1.log, &topic, 0, 40).await;
    for n in [n1, n2, n3] {
        n.crash().await;
    }
    // Broker 1 restarts with its WAL (its restart records an empty in-sync set), the
    // partition moves to broker 2 with `recover_from: 1`, broker 2 comes back without its
    // copies of other WALs and broker 3 stays down: only broker 1 itself still holds the
    // acknowledged tail.
    let n1 = c.start(1).await;
    c.move_partition(&topic, 2, 1).await;
    std::fs::remove_dir_all(c.dir(2).join("replicas")).expect("delete broker 2's copies");
    let n2 = c.start(2).await;
    dense(&read_all(&n2.log, &topic, 0).await, 40);
    for n in [n1, n2] {
        n.crash().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_recovers_a_dead_brokers_tail_from_its_replicas() {
    let c = Cluster::new();
    let n1 = c.start(1).await;
    let n2 = c.start(2).await;
    let n3 = c.start(3).await;
    let topic = c.topic("moved", 1, "2").await;
    wait_in_sync(&n1, 3).await;
    append_many(&n1.log, &topic, 0, 30).await;
    n1.crash().await;

    // What the controller does when broker 1's lease expires.
    c.move_partition(&topic, 2, 1).await;

    dense(&read_all(&n2.log, &topic, 0).await, 30);
    let p = n2.log.partition(&topic, 0).await.expect("partition");
    let next = n2
        .log
        .append(
            &p,
            &make_batch(1, 5000),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("the new leader takes writes");
    assert_eq!(next.base_offset, 60);
    let stored = c
        .metadata
        .topic_by_id(topic.topic_id)
        .await
        .expect("topic")
        .expect("exists");
    assert_eq!(
        stored.partitions[0].recover_from, None,
        "recovery is recorded as done"
    );
    // The recovered batches keep epoch 0, so epoch 1 starts after them, not where the
    // catalog ended at the failover (the new leader seals them under its own epoch, which is
    // why the catalog's epochs cannot answer OffsetForLeaderEpoch).
    let starts: Vec<(i32, i64)> = stored.partitions[0]
        .leader_epochs
        .entries()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect();
    assert_eq!(starts, vec![(0, 0), (1, 60)]);
    assert_eq!(p.end_offset_for(0).expect("lookup"), Some((0, 60)));
    assert_eq!(p.end_offset_for(1).expect("lookup"), Some((1, 61)));
    // Sealed by the new leader under its epoch.
    n2.log.seal_once().await.expect("seal");
    let last = c
        .metadata
        .catalog_last(topic.topic_id, 0)
        .await
        .expect("catalog")
        .expect("catalogued");
    assert_eq!((last.next_offset(), last.leader_epoch), (61, 1));
    for n in [n2, n3] {
        n.crash().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_all_follows_min_insync_replicas_as_replicas_go_and_come() {
    let c = Cluster::new();
    let n1 = c.start(1).await;
    let n2 = c.start(2).await;
    let n3 = c.start(3).await;
    let topic = c.topic("zones", 1, "2").await;
    wait_in_sync(&n1, 3).await;
    append_many(&n1.log, &topic, 0, 5).await;

    // One replica zone goes away: after the lag bound the in-sync set shrinks and acks=all
    // goes on with 2 copies.
    n3.crash().await;
    append_many(&n1.log, &topic, 0, 5).await;
    assert_eq!(n1.log.replicator.in_sync_copies(), 2);
    let record = c
        .metadata
        .wal_replica_set(1)
        .await
        .expect("read")
        .expect("recorded");
    assert_eq!(record.isr, vec![2], "the shrink is recorded");

    // A second one: 1 copy < 2, refused.
    n2.crash().await;
    let p = n1.log.partition(&topic, 0).await.expect("partition");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let refused = loop {
        match n1
            .log
            .append(
                &p,
                &make_batch(1, 1),
                &AppendPolicy::of(&topic.configs),
                Acks::All,
            )
            .await
        {
            Err(e) if e.kind() == ErrorKind::NotEnoughReplicas => break e,
            Err(e) if e.kind() == ErrorKind::NotEnoughReplicasAfterAppend => {}
            Ok(_) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "never refused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        refused.to_string().contains("min.insync.replicas"),
        "{refused}"
    );
    // acks=1 still works on one copy.
    n1.log
        .append(
            &p,
            &make_batch(1, 2),
            &AppendPolicy::of(&topic.configs),
            Acks::Leader,
        )
        .await
        .expect("acks=1");

    // A zone comes back. It rejoins the in-sync set once everything it missed is in the
    // object store (a seal) and it has caught up; then acks=all works again.
    let n2 = c.start(2).await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // n1 re-reads n2's new address
    n1.log
        .seal_once()
        .await
        .expect("seal what replica 2 missed");
    wait_in_sync(&n1, 2).await;
    n1.log
        .append(
            &p,
            &make_batch(1, 3),
            &AppendPolicy::of(&topic.configs),
            Acks::All,
        )
        .await
        .expect("acks=all again");
    for n in [n1, n2] {
        n.crash().await;
    }
}

/// A producer's retry of a batch the leader holds but has not committed yet (its replica
/// has not acked it) is answered only once the original is committed, with the original's
/// offset — as Kafka's delayed produce waits for the high watermark to pass a duplicate.
/// Answered at once, the retry's ack would cover a batch a crash of the leader could lose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_is_acknowledged_only_once_its_original_is_committed() {
    let c = Cluster::new();
    let n1 = c.start(1).await;
    let n2 = c.start(2).await;
    let n3 = c.start(3).await;
    let topic = c.topic("retried", 1, "2").await;
    wait_in_sync(&n1, 3).await;
    let p = n1.log.partition(&topic, 0).await.expect("partition");
    let policy = AppendPolicy::of(&topic.configs);
    let (producer, epoch) = (4242, 0);
    n1.log
        .append(
            &p,
            &make_idempotent_batch(2, 1, producer, epoch, 0),
            &policy,
            Acks::All,
        )
        .await
        .expect("first batch");

    // A replica stops acking: the next batch is fsynced here but not committed until the
    // in-sync set drops it (`replica_lag_max`, 500 ms here).
    n3.crash().await;
    let batch = make_idempotent_batch(2, 2, producer, epoch, 2);
    let original = n1
        .log
        .enqueue(&p, &batch, &policy, Acks::All)
        .await
        .expect("queued");
    let offset = original.appended.base_offset;
    let retry = n1
        .log
        .append(&p, &batch, &policy, Acks::All)
        .await
        .expect("the retry is acknowledged");
    let (_, high_watermark, _) = p.offsets().expect("offsets");
    assert_eq!((retry.base_offset, retry.duplicate), (offset, true));
    assert!(
        high_watermark > offset + 1,
        "the retry was acknowledged before its original was committed (high watermark {high_watermark})"
    );
    original
        .wait()
        .await
        .expect("the original is acknowledged too");
    for n in [n1, n2] {
        n.crash().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_live_leader_keeps_its_tail_on_replicas_until_the_new_leader_recovered_it() {
    let c = Cluster::new();
    let n1 = c.start(1).await;
    let n2 = c.start(2).await;
    let n3 = c.start(3).await;
    let topic = c.topic("deposed", 1, "3").await;
    wait_in_sync(&n1, 3).await;
    append_many(&n1.log, &topic, 0, 20).await;

    // Leadership moves while broker 1 is alive (as after a pause past its session).
    c.move_partition(&topic, 2, 1).await;
    // Broker 1's seal is fenced: it forgets the partition but must keep the tail in its WAL
    // and tell its replicas nothing that would let them drop it.
    assert!(
        n1.log.seal_once().await.is_err(),
        "the deposed leader is fenced"
    );
    n1.log.release_holds().await.expect("check holds");
    n1.log
        .seal_once()
        .await
        .expect("an empty seal trims what it may");
    tokio::time::sleep(Duration::from_millis(500)).await; // trims reach the replicas

    dense(&read_all(&n2.log, &topic, 0).await, 20);
    // Recovered: broker 1 may let go now.
    n1.log.release_holds().await.expect("release");
    for n in [n1, n2, n3] {
        n.crash().await;
    }
}

/// A source log a mirror follows (issue 20): 40 batches of producer 77 at their source
/// offsets, with a gap of 7 offsets before the 26th (what a compacted source leaves).
fn source_log() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut offset = 0i64;
    for i in 0..40i64 {
        if i == 25 {
            offset += 7;
        }
        let mut b = make_idempotent_batch(3, 10_000 + i, 77, 0, (i * 3) as i32);
        b[0..8].copy_from_slice(&offset.to_be_bytes());
        out.push(b);
        offset += 3;
    }
    out
}

fn last_offset(b: &[u8]) -> i64 {
    batch::peek_header(b)
        .expect("header")
        .expect("whole")
        .last_offset()
}

/// What a mirror task does on `log`: fetch from the partition's log end, here starting
/// `refetch` batches early (a fetch may return what is held already), up to `source[..upto]`.
async fn mirror_from_log_end(
    log: &LogManager,
    topic: &TopicMetadata,
    source: &[Vec<u8>],
    upto: usize,
    refetch: usize,
) {
    let p = log.partition(topic, 0).await.expect("partition");
    let (_, _, end) = p.offsets().expect("offsets");
    let first = source
        .iter()
        .position(|b| last_offset(b) >= end)
        .unwrap_or(source.len())
        .saturating_sub(refetch);
    for b in &source[first..upto] {
        match log
            .enqueue_mirrored(&p, b, 1 << 20, 2)
            .await
            .expect("mirror")
        {
            Mirrored::Skipped => {}
            Mirrored::Queued(q) => {
                for a in q {
                    a.wait().await.expect("durable");
                }
            }
        }
    }
}

async fn read_batches(log: &LogManager, topic: &TopicMetadata) -> Vec<bytes::Bytes> {
    let p = log.partition(topic, 0).await.expect("partition");
    let mut out = Vec::new();
    let mut next = 0;
    loop {
        let r = log.read(&p, next, 1 << 20, true).await.expect("read");
        if r.batches.is_empty() {
            return out;
        }
        for b in r.batches {
            next = last_offset(&b) + 1;
            out.push(b);
        }
    }
}

/// The mirror's log is the source's, byte for byte but the leader epoch, with one empty
/// batch exactly over the gap, contiguous from 0: no gap, no duplicate.
fn assert_mirrors(held: &[bytes::Bytes], source: &[Vec<u8>]) {
    let mut data = Vec::new();
    let mut next = 0;
    for b in held {
        let h = batch::peek_header(b).expect("header").expect("whole");
        assert_eq!(h.base_offset, next, "contiguous, nothing twice");
        next = h.last_offset() + 1;
        if h.record_count > 0 {
            data.push(b.clone());
        } else {
            assert_eq!(
                (h.base_offset, h.last_offset()),
                (75, 81),
                "the filler spans the gap"
            );
        }
    }
    assert_eq!(data.len(), source.len());
    for (m, s) in data.iter().zip(source) {
        assert_eq!(&m[..12], &s[..12]);
        assert_eq!(&m[16..], &s[16..], "same bytes but the leader epoch");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_resumes_on_a_new_leader_without_gap_or_duplicate() {
    let c = Cluster::new();
    let n1 = c.start(1).await;
    let n2 = c.start(2).await;
    let n3 = c.start(3).await;
    let topic = c.topic("mirrored", 1, "2").await;
    wait_in_sync(&n1, 3).await;
    let source = source_log();
    // Broker 1 mirrors past the gap, acknowledged (in its WAL and two replicas), then dies.
    mirror_from_log_end(&n1.log, &topic, &source, 30, 0).await;
    n1.crash().await;
    c.move_partition(&topic, 2, 1).await;
    // Broker 2 recovers the tail, then mirrors on from its log end, re-fetching a little.
    mirror_from_log_end(&n2.log, &topic, &source, source.len(), 3).await;
    assert_mirrors(&read_batches(&n2.log, &topic).await, &source);
    // The same from the object store.
    n2.log.seal_once().await.expect("seal");
    assert_mirrors(&read_batches(&n2.log, &topic).await, &source);
    for n in [n2, n3] {
        n.crash().await;
    }
}
