//! [`LogRecovery`]: the WAL tail recoveries a [`LogManager`] owes before it serves — this
//! broker's own tail, lost with its WAL directory, and partitions whose `recover_from`
//! broker's tail is not in this broker's WAL yet (ARCHITECTURE decision 13) — with their
//! retry schedule and the tails fetched for them.
//!
//! Lifecycle: [`LogManager::open_with`] creates it, holding the previous incarnation's
//! replica-set record if the WAL directory is new, and makes the first attempt at the own
//! tail (`recover_own_tail`: open every partition led here, each with the tail appended).
//! A partition's `recover_from` recovery runs inside its open (`open_partition`), which
//! fetches tails through [`LogRecovery::tail_of`] ([`crate::leadership::recover::fetch_tail`], reused
//! for [`TAIL_REUSE`]). A failed attempt is recorded in the pure schedule
//! ([`crate::leadership::recovery_state`]) by [`LogRecovery::failed`]; while it backs off, opens of
//! the partition are refused ([`LogRecovery::check_open`]) and
//! [`LogManager::run_recoveries`], the broker's recovery task, retries it when due (at once
//! after [`LogManager::retry_recoveries_now`]). The own tail is done once every partition
//! led here opened with it and it is sealed; from then on partitions open normally.

use super::LogManager;
use crate::error::{Error, Result};
use crate::leadership::recovery_state::{Recoveries, RecoveryKey};
use crate::replica_store::ReplicaStore;
use crate::transport::ReplicaTransport;
use oxbow_metadata::clock::{Clock, Rng};
use oxbow_metadata::{
    BrokerId, MetadataStore, PartitionId, TopicId, TopicMetadata, TopicPartition, WalReplicaSet,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long a fetched WAL tail is reused by further recoveries from the same source: less
/// than any lease lives ([`LogRecovery::tail_of`] says why).
const TAIL_REUSE: Duration = oxbow_metadata::LEASE_TTL_MIN;

/// (source, skipped incarnation, version of the source's replica-set record) → tail.
type TailCache = HashMap<
    (BrokerId, Option<u64>, Option<u64>),
    (tokio::time::Instant, Arc<crate::leadership::recover::Tail>),
>;

/// The recoveries a [`LogManager`] waits on (see the module docs); the log owns one.
pub(super) struct LogRecovery {
    /// This broker: whose own tail [`RecoveryKey::OwnTail`] is.
    broker_id: BrokerId,
    metadata: Arc<dyn MetadataStore>,
    /// Other brokers' WAL copies held here: what this broker holds of a source's tail.
    replica_store: Arc<ReplicaStore>,
    /// Dials other brokers' internal ports (tail requests of recoveries).
    transport: Arc<dyn ReplicaTransport>,
    /// Authenticates those connections (no-op without secrets).
    auth: crate::internal_auth::InternalAuth,
    clock: Arc<dyn Clock>,
    /// Draws the retry backoff's jitter.
    rng: Arc<dyn Rng>,
    /// Set while the start-up recovers this broker's own tail after losing its WAL: the
    /// replica set recorded by the previous incarnation.
    self_recovery: Mutex<Option<WalReplicaSet>>,
    /// Recoveries waiting for a WAL replica to answer; see [`crate::leadership::recovery_state`].
    recoveries: Mutex<Recoveries>,
    /// Wakes [`LogManager::run_recoveries`] when a recovery starts waiting.
    recovery_added: Notify,
    /// Recently fetched WAL tails; see [`LogRecovery::tail_of`].
    tails: Mutex<TailCache>,
    /// Held while a tail is fetched: partitions of one source recovering side by side wait
    /// for one fetch, then share it.
    fetching: tokio::sync::Mutex<()>,
}

impl LogRecovery {
    /// `own_previous`: the replica-set record of this broker's previous incarnation, if its
    /// WAL directory is new and that incarnation's tail is still owed.
    #[allow(clippy::too_many_arguments)] // components and start state, each needed once
    pub(super) fn new(
        broker_id: BrokerId,
        metadata: Arc<dyn MetadataStore>,
        replica_store: Arc<ReplicaStore>,
        transport: Arc<dyn ReplicaTransport>,
        auth: crate::internal_auth::InternalAuth,
        clock: Arc<dyn Clock>,
        rng: Arc<dyn Rng>,
        own_previous: Option<WalReplicaSet>,
    ) -> LogRecovery {
        LogRecovery {
            broker_id,
            metadata,
            replica_store,
            transport,
            auth,
            clock,
            rng,
            self_recovery: Mutex::new(own_previous),
            recoveries: Mutex::new(Recoveries::default()),
            recovery_added: Notify::new(),
            tails: Mutex::new(HashMap::new()),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    fn recoveries(&self) -> Result<std::sync::MutexGuard<'_, Recoveries>> {
        self.recoveries
            .lock()
            .map_err(|_| Error::Internal("recoveries lock poisoned".into()))
    }

    /// Records a failed recovery attempt and logs it; returns the error clients get.
    pub(super) fn failed(
        &self,
        key: RecoveryKey,
        source: BrokerId,
        topic: Option<(TopicId, String)>,
        error: &Error,
    ) -> Error {
        let what = match (&key, &topic) {
            (RecoveryKey::OwnTail, _) => "this broker's lost WAL tail".to_string(),
            (RecoveryKey::Partition(tp), Some((_, name))) => {
                format!("{name}-{}: the WAL tail of broker {source}", tp.partition)
            }
            (RecoveryKey::Partition(tp), None) => {
                format!(
                    "{}-{}: the WAL tail of broker {source}",
                    tp.topic_id, tp.partition
                )
            }
        };
        let jitter = 0.5 + self.rng.unit_f64() / 2.0;
        let scheduled = self.recoveries().map(|mut r| {
            r.failed(
                key,
                source,
                topic,
                error.to_string(),
                self.clock.now(),
                jitter,
            )
        });
        if let Ok((attempt, retry_in)) = scheduled {
            tracing::warn!(recovering = %what, attempt, ?retry_in, error = %error,
                "WAL tail recovery failed; retrying");
        }
        self.recovery_added.notify_one();
        Error::RecoveryPending(format!("recovering {what}: {error}"))
    }

    /// `key` needs no further attempt.
    pub(super) fn done(&self, key: RecoveryKey) {
        if let Ok(mut r) = self.recoveries() {
            r.done(key);
        }
    }

    /// Refuses to open `partition` of `topic` ([`Error::RecoveryPending`]) while this broker's
    /// own tail is owed, or while the partition's recovery backs off after a failed attempt:
    /// clients are answered at once, and the recovery task retries it.
    pub(super) fn check_open(&self, topic: &TopicMetadata, partition: PartitionId) -> Result<()> {
        let tp = TopicPartition::new(topic.topic_id, partition);
        let now = self.clock.now();
        let r = self.recoveries()?;
        for key in [RecoveryKey::OwnTail, RecoveryKey::Partition(tp)] {
            if key == RecoveryKey::OwnTail && r.get(&key).is_some() || r.backing_off(&key, now) {
                let why = r
                    .get(&key)
                    .map(|p| p.last_error.clone())
                    .unwrap_or_default();
                return Err(Error::RecoveryPending(match key {
                    RecoveryKey::OwnTail => format!(
                        "this broker is recovering its lost WAL tail from its replicas ({why})"
                    ),
                    RecoveryKey::Partition(_) => format!(
                        "{}-{partition} waits to recover a dead broker's WAL tail ({why})",
                        topic.name
                    ),
                }));
            }
        }
        Ok(())
    }

    /// The previous incarnation's replica-set record while this broker owes its own tail.
    pub(super) fn own_previous(&self) -> Option<WalReplicaSet> {
        self.self_recovery.lock().ok().and_then(|s| s.clone())
    }

    /// This broker's own tail is recovered (and sealed): partitions open normally now.
    fn own_tail_recovered(&self) {
        if let Ok(mut s) = self.self_recovery.lock() {
            *s = None;
        }
    }

    /// Makes every waiting recovery due now ([`LogManager::retry_recoveries_now`]).
    fn retry_now(&self) {
        if let Ok(mut r) = self.recoveries() {
            if r.is_empty() {
                return;
            }
            r.expedite(self.clock.now());
        }
        self.recovery_added.notify_one();
    }

    /// The recoveries' part of [`LogManager::not_ready_reasons`]: what each one waits for.
    pub(super) fn not_ready_reasons(&self) -> Vec<String> {
        let mut out = Vec::new();
        let own_isr = self
            .self_recovery
            .lock()
            .ok()
            .and_then(|s| s.as_ref().map(|r| r.isr.clone()));
        if let Ok(r) = self.recoveries() {
            for (key, p) in r.iter() {
                let last = if p.attempts == 0 {
                    "first attempt running".to_string()
                } else {
                    format!("attempt {} failed: {}", p.attempts, p.last_error)
                };
                match key {
                    RecoveryKey::OwnTail => out.push(format!(
                        "recovering this broker's lost WAL tail from its in-sync WAL replicas {:?} before serving its partitions ({last})",
                        own_isr.clone().unwrap_or_default()
                    )),
                    RecoveryKey::Partition(tp) if p.attempts > 0 => out.push(format!(
                        "partition {}-{}: waiting to recover the WAL tail of broker {} from its WAL replicas ({last})",
                        p.topic.as_ref().map_or_else(|| tp.topic_id.to_string(), |t| t.1.clone()),
                        tp.partition,
                        p.source
                    )),
                    RecoveryKey::Partition(_) => {}
                }
            }
        }
        out
    }

    /// See [`LogManager::owes_own_tail`].
    fn owes_own_tail(&self) -> bool {
        self.self_recovery.lock().map_or(true, |s| s.is_some())
    }

    /// See [`LogManager::recovery_attempts`].
    fn attempts(&self) -> Vec<(RecoveryKey, u32)> {
        self.recoveries()
            .map(|r| r.iter().map(|(k, p)| (*k, p.attempts)).collect())
            .unwrap_or_default()
    }

    /// See [`LogManager::recoveries_pending`].
    fn pending(&self) -> usize {
        self.recoveries().map(|r| r.len()).unwrap_or(0)
    }

    /// What live brokers hold of `source`'s WAL (see [`crate::leadership::recover::fetch_tail`]), asked
    /// once per recovery burst: a failover hands one broker several partitions of the same
    /// dead source, and each would otherwise fetch the whole tail again. A tail is reused
    /// only if the source was not registered when it was fetched, and for less than the
    /// shortest lease ([`TAIL_REUSE`]): the source acknowledges only while its lease is
    /// alive, so to acknowledge anything more it must register again, and that new lease
    /// cannot expire (the only way its partitions move again) within the reuse window.
    /// (Found by the simulation, seed 149: reused for 10 s, a tail fetched at one failover
    /// of a source served the next one, 6 s later, after the source had come back in
    /// between and acknowledged more; the new leader recovered nothing of it.)
    pub(super) async fn tail_of(
        &self,
        source: BrokerId,
        record: Option<&WalReplicaSet>,
        skip_incarnation: Option<u64>,
    ) -> Result<Arc<crate::leadership::recover::Tail>> {
        let key = (source, skip_incarnation, record.map(|r| r.version));
        let cached = || {
            let tails = self.tails.lock().ok()?;
            let (at, tail) = tails.get(&key)?;
            (self.clock.now().saturating_duration_since(*at) < TAIL_REUSE).then(|| tail.clone())
        };
        if let Some(tail) = cached() {
            return Ok(tail);
        }
        let _fetching = self.fetching.lock().await;
        // Fetched by another recovery while this one waited?
        if let Some(tail) = cached() {
            return Ok(tail);
        }
        let (tail, source_registered) = crate::leadership::recover::fetch_tail(
            &self.transport,
            &self.auth,
            &self.metadata,
            self.broker_id,
            &self.replica_store,
            source,
            record,
            skip_incarnation,
        )
        .await?;
        let tail = Arc::new(tail);
        // This broker's own lost WAL (`source` is this broker, registered, in a new
        // incarnation): what the lost one held cannot grow.
        if source_registered && source != self.broker_id {
            return Ok(tail);
        }
        if let Ok(mut tails) = self.tails.lock() {
            let now = self.clock.now();
            tails.retain(|_, (at, _)| now.saturating_duration_since(*at) < TAIL_REUSE);
            tails.insert(key, (now, tail.clone()));
        }
        Ok(tail)
    }
}

impl LogManager {
    /// Retries every waiting recovery when its backoff has passed, until `shutdown`: this
    /// broker's own lost tail (then it serves its partitions) and partitions whose
    /// `recover_from` broker's replicas did not answer. Run on the broker's task tracker.
    pub async fn run_recoveries(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let now = self.clock.now();
            let due = self
                .recovery
                .recoveries()
                .map(|r| r.due(now))
                .unwrap_or_default();
            for (key, pending) in due {
                let attempt = pending.attempts + 1;
                tracing::info!(
                    ?key,
                    source = pending.source,
                    attempt,
                    "attempting WAL tail recovery"
                );
                let result = match key {
                    RecoveryKey::OwnTail => match self.recover_own_tail().await {
                        Ok(()) => Ok(()),
                        Err(e) => Err(self.recovery.failed(key, pending.source, None, &e)),
                    },
                    // The open records the failures of the recovery itself; an error before
                    // it gets there (the metadata service unreachable, say) must back off
                    // too, or this loop retries at once, forever (found by the simulation,
                    // seed 20: a broker cut from the metadata service spun here).
                    RecoveryKey::Partition(tp) => match self.retry_partition_recovery(tp).await {
                        Ok(()) => Ok(()),
                        Err(e) => {
                            let recorded = self
                                .recovery
                                .recoveries()
                                .map(|r| r.get(&key).is_none_or(|p| p.next_attempt > now))
                                .unwrap_or(true);
                            if recorded {
                                Err(e)
                            } else {
                                Err(self.recovery.failed(
                                    key,
                                    pending.source,
                                    pending.topic.clone(),
                                    &e,
                                ))
                            }
                        }
                    },
                };
                if result.is_ok() {
                    self.recovery.done(key);
                    tracing::info!(
                        ?key,
                        source = pending.source,
                        attempt,
                        "WAL tail recovery finished"
                    );
                }
            }
            let next = self.recovery.recoveries().ok().and_then(|r| r.next_due());
            let wait = async {
                match next {
                    Some(at) => self.clock.sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // Polled in order (shutdown first): tokio's random branch order would make the
                // simulation's runs differ for one seed.
                biased;
                _ = shutdown.cancelled() => return,
                _ = self.recovery.recovery_added.notified() => {}
                _ = wait => {}
            }
        }
    }

    /// Retries every waiting recovery now: a broker joined and may be the WAL replica they
    /// wait for (called by the membership follower), so recovery need not sit out a backoff.
    pub fn retry_recoveries_now(&self) {
        self.recovery.retry_now();
    }

    /// Opens a partition waiting for its `recover_from` recovery, if it still needs one.
    async fn retry_partition_recovery(&self, tp: TopicPartition) -> Result<()> {
        let found = self
            .metadata
            .partition_state(tp.topic_id, tp.partition)
            .await?;
        let needed = found
            .as_ref()
            .is_some_and(|(_, s)| s.leader == self.settings.broker_id && s.recover_from.is_some());
        match found.map(|(topic, _)| topic) {
            Some(topic) if needed => self
                .open_partition(&topic, tp.partition, true, true)
                .await
                .map(|_| ()),
            _ => Ok(()),
        }
    }

    /// Whether this broker lost its WAL and has not recovered the old one's tail yet (its
    /// partitions must not be handed over before: the tail would be left behind).
    pub fn owes_own_tail(&self) -> bool {
        self.recovery.owes_own_tail()
    }

    /// Every waiting recovery and its failed attempts so far.
    pub fn recovery_attempts(&self) -> Vec<(RecoveryKey, u32)> {
        self.recovery.attempts()
    }

    /// Recoveries waiting (this broker's own tail counts as one).
    pub fn recoveries_pending(&self) -> usize {
        self.recovery.pending()
    }

    /// This broker lost its WAL directory (a new incarnation) while the metadata service
    /// remembers an older one: reopen every partition it leads, each recovering the older
    /// incarnation's tail from the WAL replicas before anything new is accepted.
    /// One attempt; partitions opened stay open, so a retry redoes only the others. Once
    /// every one is open the replica-set record is reset to this incarnation (which marks
    /// the old tail as recovered) and partitions open normally from then on.
    pub(super) async fn recover_own_tail(&self) -> Result<()> {
        let me = self.settings.broker_id;
        let mut recovered = 0;
        let mut first_error = None;
        for topic in self.metadata.list_topics().await? {
            for p in topic.partitions.iter().filter(|p| p.leader == me) {
                match self.open_partition(&topic, p.partition, true, true).await {
                    Ok(_) => recovered += 1,
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        // Partitions led elsewhere may still have to recover this broker's lost tail
        // (`recover_from` names it): their new leaders find it through this broker's record,
        // so the record keeps the lost incarnation until none is left. Resetting it earlier
        // made such a partition, moved back here, recover from the new, empty incarnation
        // and drop acknowledged records (found by the simulation, seed 51).
        let owed: Vec<String> = self
            .metadata
            .list_topics()
            .await?
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| p.recover_from == Some(me))
                    .map(move |p| format!("{}-{}", t.name, p.partition))
            })
            .collect();
        if !owed.is_empty() {
            return Err(Error::Replication(format!(
                "partitions still recover this broker's lost WAL tail elsewhere ({}); its record keeps the lost incarnation until they have",
                owed.join(", ")
            )));
        }
        // What was recovered is now in this incarnation's WAL alone: replication streams
        // carry only what is written after they start, so the other copies are still the
        // lost incarnation's, on the replicas the record names. Resetting the record forgets
        // them, and a second lost disk would then lose acknowledged data (found by the
        // simulation, seed 18): seal first; if the object store cannot take it now, the
        // recovery stays pending and is retried.
        self.seal_once().await?;
        self.replicator.reset_record().await?;
        self.recovery.own_tail_recovered();
        tracing::info!(
            partitions = recovered,
            "recovered this broker's tail from its WAL replicas"
        );
        Ok(())
    }
}
