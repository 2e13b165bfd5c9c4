//! The transaction coordinator's driver: one [`TxnCoordinator`] state machine per
//! `transactional.id` this broker coordinates, its record in the metadata service
//! (`txns/{id}`, compare-and-swap on the record's version) and the marker writers.
//!
//! Lifecycle of an id here: loaded from the metadata service on its first request (or by
//! the periodic scan, after a failover moved the id here), then every request is one step
//! of its machine under the id's lock, whose actions run in order: `Persist` writes the
//! record (a lost compare means another broker wrote it since — this one is stale, drops
//! the id and answers `NOT_COORDINATOR`; any other failure forgets the in-memory state so
//! the next request reloads what is stored), `Reply` becomes the answer, `WriteMarkers`
//! starts a tracked task that writes the markers ([`TxnEnv::write_markers`]: every
//! partition's leader and every group's coordinator), retrying until they are all durable
//! or the id moves away, then steps `MarkersWritten` (which persists the `Complete*` state).
//! So a reply never says more than is stored, and a prepared transaction is finished by
//! whichever broker coordinates the id next ([`TxnCoordinator::resume`]).
//!
//! Background ([`TxnCoordinators::run`]): every `abort_check_interval` (Kafka's
//! `transaction.abort.timed.out.transaction.cleanup.interval.ms`) each loaded id is ticked
//! (an `Ongoing` transaction past its timeout is aborted under a bumped epoch); every
//! `scan_interval` the stored ids are listed and those this broker now coordinates are
//! loaded (prepared ones resumed, open ones timed), ids it no longer coordinates are
//! dropped from memory, and ids idle past `transactional.id.expiration.ms` are deleted.

use super::record;
use super::state::{Action, Event, Reply, Request, Transaction, TxnCoordinator, TxnPartition};
use kafka_protocol::error::ResponseError;
use oxbow_metadata::MetadataStore;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The coordinator's settings (Kafka's names in the docs).
#[derive(Clone, Debug)]
pub struct TxnSettings {
    /// `transactional.id.expiration.ms` (Kafka: 7 days): an id with no transaction open and
    /// no request for this long is deleted, and its next InitProducerId starts afresh.
    /// Shorter frees metadata sooner; a producer idle longer loses its fencing history.
    pub id_expiration: Duration,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms` (Kafka: 10 s): how
    /// often open transactions are checked against their timeout. Shorter aborts a stuck
    /// transaction (and frees consumers' last stable offset) sooner, for a little CPU.
    pub abort_check_interval: Duration,
    /// How often the stored ids are scanned for ones that moved here (failover). Each scan
    /// lists every stored id (keys only).
    pub scan_interval: Duration,
    /// `transaction.max.timeout.ms` (Kafka: 15 minutes): the longest `transaction.timeout.ms`
    /// a producer may ask for (else INVALID_TRANSACTION_TIMEOUT). Longer lets a stuck
    /// transaction hold `read_committed` consumers longer; Flink's sink asks for an hour.
    pub max_timeout_ms: i32,
    /// The `transaction.version` finalized in ApiVersions (Kafka's feature, KIP-584): 2
    /// makes Kafka 4 clients use KIP-890's protocol 2 (no AddPartitionsToTxn or
    /// AddOffsetsToTxn from clients; the epoch bumped by every EndTxn); 1 keeps them on
    /// protocol 1. Requests are served by their version either way, as in Kafka.
    pub transaction_version: i16,
}

impl Default for TxnSettings {
    fn default() -> Self {
        TxnSettings {
            id_expiration: Duration::from_secs(7 * 24 * 3600),
            abort_check_interval: Duration::from_secs(10),
            scan_interval: Duration::from_secs(10),
            max_timeout_ms: super::state::TIMEOUT_MAX_MS,
            transaction_version: 2,
        }
    }
}

/// Markers to write for one prepared transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkerJob {
    pub transactional_id: String,
    pub commit: bool,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// Written into each marker (Kafka: the transaction log partition's leader epoch; here
    /// the low bits of the record version, which grows with every coordinator write).
    pub coordinator_epoch: i32,
    pub partitions: BTreeSet<TxnPartition>,
    pub groups: BTreeSet<String>,
}

/// What the driver needs from the broker (an in-memory twin in the tests below).
#[async_trait::async_trait]
pub trait TxnEnv: Send + Sync + 'static {
    /// Whether this broker coordinates `transactional_id` now.
    fn coordinates(&self, transactional_id: &str) -> bool;
    async fn next_producer_id(&self) -> Result<i64, String>;
    /// Writes every marker of `job` and completes its groups' pending offsets; `Ok` once
    /// all are durable. Called again on failure (each part must be idempotent).
    async fn write_markers(&self, job: &MarkerJob) -> Result<(), String>;
    fn now_ms(&self) -> i64;
    /// Waits `d` (or returns early on shutdown); the broker's real clock.
    async fn pause(&self, d: Duration);
}

/// Why a request could not be stepped.
fn unavailable() -> Reply {
    Reply {
        error: Some(ResponseError::CoordinatorNotAvailable),
        producer: None,
    }
}

fn not_coordinator() -> Reply {
    Reply {
        error: Some(ResponseError::NotCoordinator),
        producer: None,
    }
}

struct Slot {
    machine: TxnCoordinator,
    /// The machine holds what is stored (else it is reloaded before the next step).
    loaded: bool,
    /// The stored record's version (`None`: nothing stored).
    version: Option<u64>,
    /// A marker task is running for this id.
    writing: bool,
}

/// What DescribeTransactions and ListTransactions show of an id.
#[derive(Clone, Debug)]
pub struct TxnListing {
    pub transactional_id: String,
    pub transaction: Transaction,
}

/// Every id this broker coordinates (see the module docs).
pub struct TxnCoordinators {
    metadata: Arc<dyn MetadataStore>,
    settings: TxnSettings,
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Slot>>>>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

impl TxnCoordinators {
    /// The settings it runs with.
    pub fn settings(&self) -> &TxnSettings {
        &self.settings
    }

    pub fn new(metadata: Arc<dyn MetadataStore>, settings: TxnSettings) -> Arc<Self> {
        Arc::new(TxnCoordinators {
            metadata,
            settings,
            slots: Mutex::new(HashMap::new()),
            tasks: TaskTracker::new(),
            shutdown: CancellationToken::new(),
        })
    }

    fn slot(&self, id: &str) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots
            .entry(id.to_string())
            .or_insert_with(|| {
                Arc::new(tokio::sync::Mutex::new(Slot {
                    machine: TxnCoordinator::default(),
                    loaded: false,
                    version: None,
                    writing: false,
                }))
            })
            .clone()
    }

    fn forget(&self, id: &str) {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    fn ids(&self) -> Vec<String> {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Loads the stored record into `slot` unless it holds it already.
    async fn load(&self, id: &str, slot: &mut Slot) -> Result<(), ResponseError> {
        if slot.loaded {
            return Ok(());
        }
        let stored = self.metadata.transaction(id).await.map_err(|e| {
            tracing::warn!(transactional_id = id, error = %e, "cannot load a transactional id");
            ResponseError::CoordinatorNotAvailable
        })?;
        let (txn, version) = match stored {
            None => (None, None),
            Some(r) => match record::decode(&r.data) {
                Ok(t) => (Some(t), Some(r.version)),
                Err(e) => {
                    tracing::error!(transactional_id = id, error = %e, "stored transaction record is unreadable");
                    return Err(ResponseError::CoordinatorNotAvailable);
                }
            },
        };
        slot.machine = TxnCoordinator::loaded(txn);
        slot.version = version;
        slot.loaded = true;
        Ok(())
    }

    /// One client request for `id`: its reply (after whatever it had to store).
    pub async fn request(
        self: &Arc<Self>,
        env: &Arc<dyn TxnEnv>,
        id: &str,
        request: Request,
    ) -> Reply {
        if !env.coordinates(id) {
            self.forget(id);
            return not_coordinator();
        }
        let slot = self.slot(id);
        let mut s = slot.lock().await;
        if let Err(e) = self.load(id, &mut s).await {
            return Reply {
                error: Some(e),
                producer: None,
            };
        }
        let now = env.now_ms();
        let mut actions = s.machine.step(now, Event::Request(request.clone()));
        if actions == [Action::NeedProducerId] {
            let fresh = match env.next_producer_id().await {
                Ok(pid) => pid,
                Err(e) => {
                    tracing::warn!(transactional_id = id, error = %e, "cannot allocate a producer id");
                    return unavailable();
                }
            };
            let Request::InitProducerId {
                timeout_ms,
                max_timeout_ms,
                expected,
                ..
            } = request
            else {
                return unavailable();
            };
            actions = s.machine.step(
                now,
                Event::Request(Request::InitProducerId {
                    timeout_ms,
                    max_timeout_ms,
                    expected,
                    fresh_producer_id: Some(fresh),
                }),
            );
        }
        self.run(env, id, &mut s, actions)
            .await
            .unwrap_or_else(unavailable)
    }

    /// Carries out `actions` in order (see the module docs); returns the reply among them.
    async fn run(
        self: &Arc<Self>,
        env: &Arc<dyn TxnEnv>,
        id: &str,
        s: &mut Slot,
        actions: Vec<Action>,
    ) -> Option<Reply> {
        let mut reply = None;
        for action in actions {
            match action {
                Action::Persist(t) => {
                    if let Err(r) = self.persist(id, s, &t).await {
                        return Some(r);
                    }
                }
                Action::Reply(r) => reply = Some(r),
                Action::WriteMarkers {
                    commit,
                    producer_id,
                    producer_epoch,
                    partitions,
                    groups,
                } => {
                    let job = MarkerJob {
                        transactional_id: id.to_string(),
                        commit,
                        producer_id,
                        producer_epoch,
                        coordinator_epoch: (s.version.unwrap_or(0) & 0x7fff_ffff) as i32,
                        partitions,
                        groups,
                    };
                    self.spawn_markers(env, s, job);
                }
                Action::NeedProducerId => return Some(unavailable()),
            }
        }
        reply
    }

    async fn persist(&self, id: &str, s: &mut Slot, t: &Transaction) -> Result<(), Reply> {
        match self
            .metadata
            .put_transaction(id, s.version, record::encode(t).into())
            .await
        {
            Ok(r) => {
                s.version = Some(r.version);
                Ok(())
            }
            Err(e) => {
                // What the machine holds is ahead of what is stored: reload next time.
                s.loaded = false;
                if matches!(e, oxbow_metadata::Error::Conflict(_)) {
                    tracing::info!(
                        transactional_id = id,
                        "transactional id written by another coordinator; dropping it here"
                    );
                    self.forget(id);
                    Err(not_coordinator())
                } else {
                    tracing::warn!(transactional_id = id, error = %e, "cannot store a transaction's state");
                    Err(unavailable())
                }
            }
        }
    }

    fn spawn_markers(self: &Arc<Self>, env: &Arc<dyn TxnEnv>, s: &mut Slot, job: MarkerJob) {
        if s.writing {
            return;
        }
        s.writing = true;
        let this = self.clone();
        let env = env.clone();
        self.tasks.spawn(async move {
            let id = job.transactional_id.clone();
            let mut backoff = Duration::from_millis(50);
            loop {
                if this.shutdown.is_cancelled() {
                    return;
                }
                if !env.coordinates(&id) {
                    // The next coordinator resumes from the stored prepare.
                    this.forget(&id);
                    return;
                }
                match env.write_markers(&job).await {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::info!(transactional_id = %id, error = %e, "transaction markers not all written yet; retrying");
                        env.pause(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(2));
                    }
                }
            }
            let slot = this.slot(&id);
            let mut s = slot.lock().await;
            s.writing = false;
            if !s.loaded {
                return;
            }
            let actions = s.machine.step(env.now_ms(), Event::MarkersWritten);
            this.run(&env, &id, &mut s, actions).await;
        });
    }

    /// Ticks every loaded id (timeouts) and finishes what a failed write left prepared.
    /// An id no longer coordinated here is dropped, not ticked: a broker back from a pause
    /// longer than its session must not time out (and fence) a transaction it no longer
    /// coordinates, even where its stale copy would still win the compare.
    async fn tick(self: &Arc<Self>, env: &Arc<dyn TxnEnv>) {
        for id in self.ids() {
            if !env.coordinates(&id) {
                self.forget(&id);
                continue;
            }
            let slot = self.slot(&id);
            let mut s = slot.lock().await;
            if !s.loaded || s.writing {
                continue;
            }
            let now = env.now_ms();
            let mut actions = s.machine.step(now, Event::Tick);
            if actions.is_empty() {
                actions = s.machine.resume(now);
            }
            if !actions.is_empty() {
                self.run(env, &id, &mut s, actions).await;
            }
        }
    }

    /// Adopts the stored ids this broker coordinates, drops those it does not, deletes
    /// expired ones.
    async fn scan(self: &Arc<Self>, env: &Arc<dyn TxnEnv>) {
        let stored = match self.metadata.list_transactions().await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::debug!(error = %e, "cannot list transactional ids");
                return;
            }
        };
        for id in self.ids() {
            if !env.coordinates(&id) {
                self.forget(&id);
            }
        }
        for id in stored {
            if !env.coordinates(&id) {
                continue;
            }
            let slot = self.slot(&id);
            let mut s = slot.lock().await;
            if s.writing || self.load(&id, &mut s).await.is_err() {
                continue;
            }
            let now = env.now_ms();
            let actions = s.machine.resume(now);
            if !actions.is_empty() {
                self.run(env, &id, &mut s, actions).await;
                continue;
            }
            let expired = s.machine.transaction().is_some_and(|t| {
                idle(t)
                    && now.saturating_sub(t.updated_ms)
                        >= self.settings.id_expiration.as_millis() as i64
            });
            if let (true, Some(version)) = (expired, s.version) {
                match self.metadata.delete_transaction(&id, version).await {
                    Ok(()) => {
                        tracing::info!(transactional_id = %id, "transactional id expired");
                        drop(s);
                        self.forget(&id);
                    }
                    Err(e) => {
                        s.loaded = false;
                        tracing::debug!(transactional_id = %id, error = %e, "transactional id not expired this time");
                    }
                }
            }
        }
    }

    /// The coordinator's background loop (see the module docs), until `stop`; then waits
    /// for running marker tasks to stop.
    pub async fn run_background(self: Arc<Self>, env: Arc<dyn TxnEnv>, stop: CancellationToken) {
        let mut last_scan: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = env.pause(self.settings.abort_check_interval.min(self.settings.scan_interval)) => {}
            }
            let now = tokio::time::Instant::now();
            if last_scan.is_none_or(|t| now.duration_since(t) >= self.settings.scan_interval) {
                last_scan = Some(now);
                self.scan(&env).await;
            }
            self.tick(&env).await;
        }
        self.shutdown.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Every stored id this broker coordinates, with its state (loaded as needed).
    pub async fn listings(
        self: &Arc<Self>,
        env: &Arc<dyn TxnEnv>,
    ) -> Result<Vec<TxnListing>, ResponseError> {
        let stored = self
            .metadata
            .list_transactions()
            .await
            .map_err(|_| ResponseError::CoordinatorNotAvailable)?;
        let mut out = Vec::new();
        for id in stored {
            if !env.coordinates(&id) {
                continue;
            }
            if let Some(l) = self.describe(&id).await? {
                out.push(l);
            }
        }
        Ok(out)
    }

    /// KIP-890 part 1, a partition leader's question: which of `partitions` are not in
    /// `producer_id`'s ongoing transaction ([`super::verify::check`] on the stored state,
    /// loaded as needed); `NOT_COORDINATOR` if the id is coordinated elsewhere.
    pub async fn verify(
        &self,
        env: &Arc<dyn TxnEnv>,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TxnPartition],
    ) -> Result<Vec<TxnPartition>, ResponseError> {
        if !env.coordinates(id) {
            self.forget(id);
            return Err(ResponseError::NotCoordinator);
        }
        let slot = self.slot(id);
        let mut s = slot.lock().await;
        self.load(id, &mut s).await?;
        super::verify::check(
            s.machine.transaction(),
            producer_id,
            producer_epoch,
            partitions,
        )
    }

    /// One id's state, if it is stored.
    pub async fn describe(&self, id: &str) -> Result<Option<TxnListing>, ResponseError> {
        let slot = self.slot(id);
        let mut s = slot.lock().await;
        self.load(id, &mut s).await?;
        Ok(s.machine.transaction().map(|t| TxnListing {
            transactional_id: id.to_string(),
            transaction: t.clone(),
        }))
    }
}

/// No transaction open or being finished.
fn idle(t: &Transaction) -> bool {
    use super::state::TxnState::*;
    matches!(t.state, Empty | CompleteCommit | CompleteAbort)
}

#[cfg(test)]
mod tests;
