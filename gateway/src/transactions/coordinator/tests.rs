//! The driver over the embedded (in-memory) metadata store and an in-memory broker twin:
//! what is stored before a reply, markers retried until written, a stale coordinator
//! refused, a new coordinator finishing a prepared transaction, timeouts.

use super::*;
use crate::transactions::state::TxnState;
use oxbow_metadata::EmbeddedStore;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};

#[derive(Default)]
struct Twin {
    now_ms: AtomicI64,
    next_pid: AtomicI64,
    not_mine: AtomicBool,
    /// Marker writes to fail before one succeeds.
    failures_left: AtomicUsize,
    written: Mutex<Vec<MarkerJob>>,
}

#[async_trait::async_trait]
impl TxnEnv for Twin {
    fn coordinates(&self, _id: &str) -> bool {
        !self.not_mine.load(Ordering::SeqCst)
    }
    async fn next_producer_id(&self) -> Result<i64, String> {
        Ok(1000 + self.next_pid.fetch_add(1, Ordering::SeqCst))
    }
    async fn write_markers(&self, job: &MarkerJob) -> Result<(), String> {
        if self
            .failures_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err("leader not available".into());
        }
        self.written.lock().expect("lock").push(job.clone());
        Ok(())
    }
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }
    async fn pause(&self, _d: Duration) {
        tokio::task::yield_now().await;
    }
}

fn setup() -> (Arc<dyn MetadataStore>, Arc<Twin>, Arc<dyn TxnEnv>) {
    let store: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory().expect("store"));
    let twin = Arc::new(Twin::default());
    let env: Arc<dyn TxnEnv> = twin.clone();
    (store, twin, env)
}

fn init() -> Request {
    Request::InitProducerId {
        timeout_ms: 60_000,
        max_timeout_ms: crate::transactions::state::TIMEOUT_MAX_MS,
        expected: None,
        fresh_producer_id: None,
    }
}

async fn stored(store: &Arc<dyn MetadataStore>, id: &str) -> Transaction {
    let r = store.transaction(id).await.expect("read").expect("stored");
    record::decode(&r.data).expect("decodes")
}

/// Waits (yielding) until the marker task of `id` has finished.
async fn settle(c: &Arc<TxnCoordinators>, id: &str) {
    for _ in 0..1000 {
        let slot = c.slot(id);
        let done = !slot.lock().await.writing;
        if done {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("markers never finished");
}

#[tokio::test]
async fn a_commit_is_stored_before_its_reply_and_completed_after_its_markers() {
    let (store, twin, env) = setup();
    let c = TxnCoordinators::new(store.clone(), TxnSettings::default());
    let r = c.request(&env, "t1", init()).await;
    assert_eq!(r.error, None);
    let (pid, epoch) = r.producer.expect("producer");
    assert_eq!((pid, epoch), (1000, 0));
    assert_eq!(stored(&store, "t1").await.state, TxnState::Empty);

    let add = Request::AddPartitions {
        producer_id: pid,
        producer_epoch: epoch,
        partitions: vec![("orders".into(), 0), ("orders".into(), 1)],
    };
    assert_eq!(c.request(&env, "t1", add).await.error, None);
    assert_eq!(stored(&store, "t1").await.state, TxnState::Ongoing);
    let offsets = Request::AddOffsets {
        producer_id: pid,
        producer_epoch: epoch,
        group: "g".into(),
    };
    assert_eq!(c.request(&env, "t1", offsets).await.error, None);

    twin.failures_left.store(3, Ordering::SeqCst);
    let end = Request::EndTxn {
        producer_id: pid,
        producer_epoch: epoch,
        commit: true,
        bump_epoch: false,
    };
    assert_eq!(c.request(&env, "t1", end).await.error, None);
    settle(&c, "t1").await;
    let jobs = twin.written.lock().expect("lock").clone();
    assert_eq!(jobs.len(), 1, "written once, after three failures");
    assert!(jobs[0].commit && jobs[0].partitions.len() == 2 && jobs[0].groups.len() == 1);
    let t = stored(&store, "t1").await;
    assert_eq!(t.state, TxnState::CompleteCommit);
    assert!(t.partitions.is_empty());
}

#[tokio::test]
async fn a_stale_coordinator_is_refused_and_a_new_one_finishes_the_prepare() {
    let (store, twin, env) = setup();
    let a = TxnCoordinators::new(store.clone(), TxnSettings::default());
    let (pid, epoch) = a
        .request(&env, "t2", init())
        .await
        .producer
        .expect("producer");
    let add = Request::AddPartitions {
        producer_id: pid,
        producer_epoch: epoch,
        partitions: vec![("orders".into(), 0)],
    };
    assert_eq!(a.request(&env, "t2", add.clone()).await.error, None);

    // Another broker takes the id over and writes it (an InitProducerId fencing the
    // open transaction): the first one's next write loses its compare.
    let b = TxnCoordinators::new(store.clone(), TxnSettings::default());
    twin.failures_left.store(usize::MAX, Ordering::SeqCst);
    let r = b.request(&env, "t2", init()).await;
    assert_eq!(r.error, Some(ResponseError::ConcurrentTransactions));
    assert_eq!(stored(&store, "t2").await.state, TxnState::PrepareAbort);
    let add2 = Request::AddPartitions {
        producer_id: pid,
        producer_epoch: epoch,
        partitions: vec![("orders".into(), 1)],
    };
    assert_eq!(
        a.request(&env, "t2", add2).await.error,
        Some(ResponseError::NotCoordinator)
    );

    // b dies with its markers unwritten; c takes over and finishes from what is stored.
    b.shutdown.cancel();
    twin.failures_left.store(0, Ordering::SeqCst);
    let c = TxnCoordinators::new(store.clone(), TxnSettings::default());
    c.scan(&env).await;
    settle(&c, "t2").await;
    let t = stored(&store, "t2").await;
    assert_eq!(t.state, TxnState::CompleteAbort);
    assert_eq!(t.producer_epoch, 1, "the fence bumped the epoch");
    let jobs = twin.written.lock().expect("lock").clone();
    assert!(jobs.iter().all(|j| !j.commit && j.producer_epoch == 1));
    // The restarted producer now gets the next epoch; the old one is fenced.
    let r = c.request(&env, "t2", init()).await;
    assert_eq!(r.producer, Some((pid, 2)));
    assert_eq!(
        c.request(&env, "t2", add).await.error,
        Some(ResponseError::ProducerFenced)
    );
}

#[tokio::test]
async fn an_open_transaction_past_its_timeout_is_aborted_by_the_tick() {
    let (store, twin, env) = setup();
    let c = TxnCoordinators::new(store.clone(), TxnSettings::default());
    let init = Request::InitProducerId {
        timeout_ms: 1_000,
        max_timeout_ms: crate::transactions::state::TIMEOUT_MAX_MS,
        expected: None,
        fresh_producer_id: None,
    };
    let (pid, epoch) = c
        .request(&env, "t3", init)
        .await
        .producer
        .expect("producer");
    let add = Request::AddPartitions {
        producer_id: pid,
        producer_epoch: epoch,
        partitions: vec![("orders".into(), 0)],
    };
    c.request(&env, "t3", add).await;
    c.tick(&env).await;
    assert_eq!(stored(&store, "t3").await.state, TxnState::Ongoing);
    twin.now_ms.store(1_500, Ordering::SeqCst);
    c.tick(&env).await;
    settle(&c, "t3").await;
    assert_eq!(stored(&store, "t3").await.state, TxnState::CompleteAbort);
    // The producer that timed out is fenced.
    let end = Request::EndTxn {
        producer_id: pid,
        producer_epoch: epoch,
        commit: true,
        bump_epoch: false,
    };
    assert_eq!(
        c.request(&env, "t3", end).await.error,
        Some(ResponseError::ProducerFenced)
    );
}

#[tokio::test]
async fn ids_elsewhere_are_not_coordinated_and_idle_ids_expire() {
    let (store, twin, env) = setup();
    let settings = TxnSettings {
        id_expiration: Duration::from_millis(100),
        ..TxnSettings::default()
    };
    let c = TxnCoordinators::new(store.clone(), settings);
    assert_eq!(c.request(&env, "t4", init()).await.error, None);
    twin.not_mine.store(true, Ordering::SeqCst);
    assert_eq!(
        c.request(&env, "t4", init()).await.error,
        Some(ResponseError::NotCoordinator)
    );
    twin.not_mine.store(false, Ordering::SeqCst);
    c.scan(&env).await;
    assert!(store.transaction("t4").await.expect("read").is_some());
    twin.now_ms.store(200, Ordering::SeqCst);
    c.scan(&env).await;
    assert!(store.transaction("t4").await.expect("read").is_none());
}

#[tokio::test]
async fn a_broker_that_no_longer_coordinates_an_id_does_not_time_it_out() {
    let (store, twin, env) = setup();
    let c = TxnCoordinators::new(store.clone(), TxnSettings::default());
    let init = Request::InitProducerId {
        timeout_ms: 1_000,
        max_timeout_ms: crate::transactions::state::TIMEOUT_MAX_MS,
        expected: None,
        fresh_producer_id: None,
    };
    let (pid, epoch) = c
        .request(&env, "t5", init)
        .await
        .producer
        .expect("producer");
    let add = Request::AddPartitions {
        producer_id: pid,
        producer_epoch: epoch,
        partitions: vec![("orders".into(), 0)],
    };
    c.request(&env, "t5", add).await;
    // Paused past its session: the id moved, nobody wrote it yet, the timeout passed.
    twin.not_mine.store(true, Ordering::SeqCst);
    twin.now_ms.store(5_000, Ordering::SeqCst);
    c.tick(&env).await;
    let t = stored(&store, "t5").await;
    assert_eq!((t.state, t.producer_epoch), (TxnState::Ongoing, epoch));
    assert!(twin.written.lock().expect("lock").is_empty());
}
