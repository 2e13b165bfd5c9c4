//! The source side of WAL replication (design brief → Write path, steps 3–4): streams this
//! broker's WAL to WAL replicas in other availability zones and keeps the in-sync set.
//!
//! Lifecycle: the WAL writer hands every write group to [`Replicator::publish`] before its
//! local fsync; one link task per replica ([`Replicator::run`] starts and stops them) sends
//! the groups (`Hello` at the first one, then `Entries`, and `Trim` when the sealer moved
//! the trim point) and feeds the replica's `Ack`s into the commit tracker
//! ([`crate::commit`]). A link whose queue overflows is dropped and reconnects; its replica
//! then misses entries, so it leaves the in-sync set after `replica_lag_max` and rejoins once
//! everything it missed is in the object store and it has caught up.
//!
//! The replica set is chosen here, by the WAL's own broker (the only writer of its record):
//! up to `replication_factor − 1` live brokers, one per zone other than this broker's,
//! keeping current replicas while they stay eligible. It is recorded in the metadata service
//! (`WalReplicaSet`), with the in-sync set, for whoever recovers this broker's tail.

use crate::commit::CommitTracker;
use crate::error::{Error, Result};
use crate::internal_auth::InternalAuth;
use crate::replica_proto::{read_frame, write_frame, Frame};
use crate::transport::ReplicaTransport;
use bytes::Bytes;
use oxbow_metadata::clock::Clock;
use oxbow_metadata::{BrokerId, BrokerRegistration, MetadataStore, WalReplicaSet};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Settings of WAL replication.
#[derive(Clone, Debug)]
pub struct ReplicationSettings {
    /// This broker's availability zone (`None`: a zone of its own).
    pub az: Option<String>,
    /// Copies of the WAL including this broker's, each in a different zone. Each extra copy
    /// survives one more zone loss and costs a cross-zone transfer of every produced byte.
    pub replication_factor: u16,
    /// An in-sync replica holding back an acknowledgement this long leaves the in-sync set:
    /// the longest `acks=all` stall a lost zone causes.
    pub replica_lag_max: Duration,
    /// The cluster secrets every internal connection authenticates with
    /// (`--internal-auth-secret-file`, [`crate::internal_auth`]); `None`: no handshake, and
    /// anyone reaching the internal port is served. The handshake costs one round trip per
    /// connection (streams are long-lived; tail requests are rare), nothing per write.
    pub internal_auth: Option<crate::internal_auth::Secrets>,
}

impl Default for ReplicationSettings {
    fn default() -> Self {
        ReplicationSettings {
            az: None,
            replication_factor: 1,
            replica_lag_max: Duration::from_secs(3),
            internal_auth: None,
        }
    }
}

/// Write groups queued per link; a link that falls this far behind is dropped.
const LINK_QUEUE_GROUPS: usize = 1024;
/// How often the driver checks membership, lag and catch-up.
const TICK: Duration = Duration::from_millis(100);
/// How often the live brokers are listed to (re)choose replicas.
const MEMBERSHIP_EVERY: Duration = Duration::from_secs(1);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const RECONNECT_BACKOFF: Duration = Duration::from_millis(300);

/// The links' queues, and where the next write group starts (so a new link knows where its
/// stream begins, atomically with joining).
struct Subscribers {
    next_sequence: u64,
    links: Vec<(BrokerId, mpsc::Sender<Group>)>,
}

#[derive(Clone)]
struct Group {
    first_sequence: u64,
    bytes: Bytes,
}

/// Chooses the WAL replicas: one live broker per zone other than `my_az`, keeping `current`
/// ones that are still eligible, then by broker id; at most `replication_factor − 1`.
/// Brokers without a zone are each a zone of their own.
pub fn choose_replicas(
    me: BrokerId,
    my_az: Option<&str>,
    live: &[BrokerRegistration],
    current: &[BrokerId],
    replication_factor: u16,
) -> Vec<BrokerId> {
    let want = usize::from(replication_factor.saturating_sub(1));
    let zone = |b: &BrokerRegistration| match &b.az {
        Some(z) => z.clone(),
        None => format!("\u{0}broker-{}", b.broker_id),
    };
    let my_zone = my_az.map(str::to_string);
    let mut eligible: Vec<&BrokerRegistration> = live
        .iter()
        .filter(|b| b.broker_id != me && !b.internal_addr.is_empty())
        .filter(|b| my_zone.is_none() || b.az != my_zone)
        .collect();
    eligible.sort_by_key(|b| (!current.contains(&b.broker_id), b.broker_id));
    let mut zones = BTreeSet::new();
    let mut chosen = Vec::new();
    for b in eligible {
        if chosen.len() >= want {
            break;
        }
        if zones.insert(zone(b)) {
            chosen.push(b.broker_id);
        }
    }
    chosen.sort_unstable();
    chosen
}

/// Counts of replicas leaving and joining the recorded in-sync set.
#[derive(Debug, Default)]
pub struct IsrChanges {
    pub shrinks: AtomicU64,
    pub expands: AtomicU64,
    /// Whether a record was seen yet (the first one is the starting point, not a change).
    seen: AtomicBool,
}

/// The source side of WAL replication for this broker.
pub struct Replicator {
    me: BrokerId,
    incarnation: u64,
    /// Sequences this run of the WAL never holds (`Wal::skipped`), told in every `Hello`.
    skipped: std::ops::Range<u64>,
    settings: ReplicationSettings,
    metadata: Arc<dyn MetadataStore>,
    pub(crate) commit: Arc<CommitTracker>,
    /// How replica streams are dialled (TCP, or the simulation's network).
    transport: Arc<dyn ReplicaTransport>,
    /// Authenticates every stream before its `Hello` (no-op without secrets).
    auth: InternalAuth,
    clock: Arc<dyn Clock>,
    subscribers: Mutex<Subscribers>,
    /// Everything before it is in the object store (set by the sealer).
    sealed_floor: watch::Sender<u64>,
    /// The stored record (the last one written or read).
    record: tokio::sync::Mutex<Option<WalReplicaSet>>,
    /// The in-sync replicas the stored record names: only these count toward
    /// `min.insync.replicas`, since a recovery after this broker dies asks only them.
    recorded_isr: Mutex<BTreeSet<BrokerId>>,
    /// Replicas that left and joined the recorded in-sync set since start (Kafka's ISR
    /// shrink and expand rates), not counting the first record read.
    isr_changes: IsrChanges,
    /// Raised by [`Self::reset_record`]: until then the record still names a lost WAL
    /// incarnation whose tail is being recovered, and [`Self::run`] must not replace it.
    record_reset: watch::Sender<bool>,
}

impl Replicator {
    #[allow(clippy::too_many_arguments)] // components and start state, each needed once
    pub fn new(
        me: BrokerId,
        incarnation: u64,
        settings: ReplicationSettings,
        metadata: Arc<dyn MetadataStore>,
        commit: Arc<CommitTracker>,
        transport: Arc<dyn ReplicaTransport>,
        auth: InternalAuth,
        clock: Arc<dyn Clock>,
        (next_sequence, skipped): (u64, std::ops::Range<u64>),
        sealed_floor: u64,
    ) -> Replicator {
        Replicator {
            me,
            incarnation,
            skipped,
            settings,
            metadata,
            commit,
            transport,
            auth,
            clock,
            subscribers: Mutex::new(Subscribers {
                next_sequence,
                links: Vec::new(),
            }),
            sealed_floor: watch::channel(sealed_floor).0,
            record: tokio::sync::Mutex::new(None),
            recorded_isr: Mutex::new(BTreeSet::new()),
            isr_changes: IsrChanges::default(),
            record_reset: watch::channel(false).0,
        }
    }

    /// Hands a write group to every link (called on the WAL writer thread; never blocks).
    pub fn publish(
        &self,
        first_sequence: u64,
        next_sequence: u64,
        group: &crate::wal::WalGroup<'_>,
    ) {
        let Ok(mut subs) = self.subscribers.lock() else {
            return;
        };
        subs.next_sequence = next_sequence;
        if subs.links.is_empty() {
            return;
        }
        let group = Group {
            first_sequence,
            bytes: group.to_bytes(),
        };
        subs.links
            .retain(|(replica, tx)| match tx.try_send(group.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::warn!(replica, "WAL replica fell behind; restarting its stream");
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            });
    }

    /// The sealer moved the trim point: everything before `floor` is in the object store.
    pub fn set_sealed_floor(&self, floor: u64) {
        self.sealed_floor.send_if_modified(|f| {
            let moved = floor > *f;
            *f = (*f).max(floor);
            moved
        });
    }

    /// In-sync copies of the WAL, this broker's included: replicas the commit point waits
    /// for *and* the stored record names. A replica joins the first before the second (the
    /// record never names one acknowledgements did not wait for); counting it before it is
    /// recorded would let an `acks=all` write rest on a copy a recovery does not ask for.
    pub fn in_sync_copies(&self) -> usize {
        // Called for every acks=all append: count under the lock instead of copying the set.
        // (The record lock is never held while taking the commit lock elsewhere.)
        let Ok(recorded) = self.recorded_isr.lock() else {
            return 1;
        };
        1 + self
            .commit
            .read(|s| s.isr().intersection(&recorded).count())
            .unwrap_or(0)
    }

    /// Copies of the WAL wanted, this broker's included (`--wal-replication-factor`).
    pub fn replication_factor(&self) -> usize {
        usize::from(self.settings.replication_factor)
    }

    /// Replicas that left and joined the recorded in-sync set since start.
    pub fn isr_changes(&self) -> &IsrChanges {
        &self.isr_changes
    }

    fn set_recorded(&self, stored: &WalReplicaSet) {
        if let Ok(mut r) = self.recorded_isr.lock() {
            let next: BTreeSet<BrokerId> = stored.isr.iter().copied().collect();
            if self.isr_changes.seen.swap(true, Ordering::Relaxed) {
                let left = r.difference(&next).count() as u64;
                let joined = next.difference(&r).count() as u64;
                self.isr_changes.shrinks.fetch_add(left, Ordering::Relaxed);
                self.isr_changes
                    .expands
                    .fetch_add(joined, Ordering::Relaxed);
            }
            *r = next;
        }
    }

    /// A queue of every write group from now on, and the sequence the first one starts at.
    fn subscribe(&self, replica: BrokerId) -> Result<(mpsc::Receiver<Group>, u64)> {
        let (tx, rx) = mpsc::channel(LINK_QUEUE_GROUPS);
        let mut subs = self
            .subscribers
            .lock()
            .map_err(|_| Error::Internal("replication subscribers lock poisoned".into()))?;
        subs.links.retain(|(b, _)| *b != replica);
        subs.links.push((replica, tx));
        Ok((rx, subs.next_sequence))
    }

    /// The sequence the next write group gets: everything acknowledged so far is below it.
    fn next_sequence(&self) -> u64 {
        self.subscribers.lock().map_or(0, |s| s.next_sequence)
    }

    fn unsubscribe(&self, replica: BrokerId) {
        if let Ok(mut subs) = self.subscribers.lock() {
            subs.links.retain(|(b, _)| *b != replica);
        }
    }

    /// Records the set for this incarnation with no in-sync replica, before anything is
    /// acknowledged: what a previous run recorded is not true of this run's streams. The
    /// previous run's in-sync replicas of this same incarnation still hold what it
    /// acknowledged (replayed now, unsealed): they become eligible (see
    /// [`WalReplicaSet::eligible`]) until it is sealed.
    pub async fn reset_record(&self) -> Result<()> {
        let current = self.metadata.wal_replica_set(self.me).await?;
        let next = self.next_sequence();
        let same = current
            .as_ref()
            .filter(|c| c.incarnation == self.incarnation);
        let mut eligible = same.map(|c| c.eligible.clone()).unwrap_or_default();
        for &b in same.map(|c| c.isr.as_slice()).unwrap_or_default() {
            mark_eligible(&mut eligible, b, next);
        }
        let set = WalReplicaSet {
            broker_id: self.me,
            incarnation: self.incarnation,
            replicas: same.map(|c| c.replicas.clone()).unwrap_or_default(),
            isr: Vec::new(),
            eligible,
            version: 0,
        };
        let stored = self
            .metadata
            .put_wal_replica_set(set, current.map(|c| c.version))
            .await?;
        self.set_recorded(&stored);
        *self.record.lock().await = Some(stored);
        self.record_reset.send_replace(true);
        Ok(())
    }

    /// Changes the stored record by compare-and-swap (re-reading on a conflict).
    async fn update_record(&self, change: impl Fn(&mut WalReplicaSet)) -> Result<()> {
        let mut cached = self.record.lock().await;
        for _ in 0..3 {
            let base = match cached.clone() {
                Some(r) => r,
                None => match self.metadata.wal_replica_set(self.me).await? {
                    Some(r) => {
                        // What is stored is what is recorded, whoever wrote it last.
                        self.set_recorded(&r);
                        r
                    }
                    None => WalReplicaSet {
                        broker_id: self.me,
                        incarnation: self.incarnation,
                        replicas: Vec::new(),
                        isr: Vec::new(),
                        eligible: Vec::new(),
                        version: 0,
                    },
                },
            };
            let expected = (base.version > 0).then_some(base.version);
            let mut next = base.clone();
            next.incarnation = self.incarnation;
            change(&mut next);
            if next == base {
                return Ok(());
            }
            match self.metadata.put_wal_replica_set(next, expected).await {
                Ok(stored) => {
                    self.set_recorded(&stored);
                    *cached = Some(stored);
                    return Ok(());
                }
                Err(e) if e.kind() == oxbow_metadata::ErrorKind::Conflict => {
                    *cached = None;
                }
                Err(e) => {
                    // The write may have landed: read the record again next time.
                    *cached = None;
                    return Err(e.into());
                }
            }
        }
        Err(Error::Replication(
            "the WAL replica set kept changing under this broker".into(),
        ))
    }

    /// Runs replication until `shutdown`: chooses replicas, runs their links, shrinks and
    /// grows the in-sync set.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut links: HashMap<BrokerId, CancellationToken> = HashMap::new();
        let mut replicas: Vec<BrokerId> = Vec::new();
        let addrs: Arc<Mutex<HashMap<BrokerId, String>>> = Arc::default();
        let tasks = TaskTracker::new();
        let mut last_membership: Option<Instant> = None;
        let mut reset = self.record_reset.subscribe();
        tokio::select! {
            // Polled in order (shutdown first): tokio's random branch order would make the
            // simulation's runs differ for one seed.
            biased;
            _ = shutdown.cancelled() => return,
            _ = reset.wait_for(|r| *r) => {}
        }
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                // Polled in order (shutdown first): tokio's random branch order would make the
                // simulation's runs differ for one seed.
                biased;
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            if self.settings.replication_factor > 1
                && last_membership.is_none_or(|t| t.elapsed() >= MEMBERSHIP_EVERY)
            {
                last_membership = Some(self.clock.now());
                match self.metadata.list_brokers().await {
                    Ok(live) => {
                        if let Ok(mut a) = addrs.lock() {
                            *a = live
                                .iter()
                                .map(|b| (b.broker_id, b.internal_addr.clone()))
                                .collect();
                        }
                        let chosen = choose_replicas(
                            self.me,
                            self.settings.az.as_deref(),
                            &live,
                            &replicas,
                            self.settings.replication_factor,
                        );
                        if chosen != replicas {
                            if let Err(e) = self
                                .change_replicas(&chosen, &mut links, &addrs, &shutdown, &tasks)
                                .await
                            {
                                tracing::warn!(error = %e, "could not change WAL replicas; retrying");
                            } else {
                                tracing::info!(replicas = ?chosen, "WAL replicas chosen");
                                replicas = chosen;
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot list brokers to choose WAL replicas")
                    }
                }
            }
            if let Err(e) = self.check_in_sync().await {
                tracing::warn!(error = %e, "could not update the WAL in-sync set; retrying");
            }
        }
        for (_, stop) in links {
            stop.cancel();
        }
        tasks.close();
        tasks.wait().await;
    }

    async fn change_replicas(
        self: &Arc<Self>,
        chosen: &[BrokerId],
        links: &mut HashMap<BrokerId, CancellationToken>,
        addrs: &Arc<Mutex<HashMap<BrokerId, String>>>,
        shutdown: &CancellationToken,
        tasks: &TaskTracker,
    ) -> Result<()> {
        let gone: Vec<BrokerId> = links
            .keys()
            .copied()
            .filter(|b| !chosen.contains(b))
            .collect();
        // Out of the recorded in-sync set first, then out of the commit rule.
        let chosen_vec = chosen.to_vec();
        let next = self.next_sequence();
        self.update_record(|r| {
            r.replicas = chosen_vec.clone();
            let left: Vec<BrokerId> = r
                .isr
                .iter()
                .copied()
                .filter(|b| !chosen_vec.contains(b))
                .collect();
            for b in left {
                mark_eligible(&mut r.eligible, b, next);
            }
            r.isr.retain(|b| chosen_vec.contains(b));
        })
        .await?;
        for b in gone {
            if let Some(stop) = links.remove(&b) {
                stop.cancel();
            }
            self.unsubscribe(b);
            self.commit.with(|s| {
                let released = s.remove_from_isr(b);
                s.forget_link(b);
                ((), released)
            })?;
        }
        for &b in chosen {
            if links.contains_key(&b) {
                continue;
            }
            let stop = shutdown.child_token();
            links.insert(b, stop.clone());
            let this = self.clone();
            let addrs = addrs.clone();
            // Link tasks end with their token (cancelled on removal or shutdown).
            tasks.spawn(async move { this.link(b, addrs, stop).await });
        }
        Ok(())
    }

    async fn check_in_sync(&self) -> Result<()> {
        let now = self.clock.now();
        let laggards = self
            .commit
            .read(|s| s.laggards(now, self.settings.replica_lag_max))?;
        for b in laggards {
            tracing::warn!(replica = b, lag_max = ?self.settings.replica_lag_max,
                "WAL replica is not keeping up; removing it from the in-sync set");
            let next = self.next_sequence();
            self.update_record(|r| {
                if r.isr.contains(&b) {
                    r.isr.retain(|x| *x != b);
                    mark_eligible(&mut r.eligible, b, next);
                }
            })
            .await?;
            self.commit.with(|s| ((), s.remove_from_isr(b)))?;
        }
        let floor = *self.sealed_floor.borrow();
        // Eligible replicas whose entries are all sealed now are needed no more.
        self.update_record(|r| r.eligible.retain(|(_, up_to)| *up_to > floor))
            .await?;
        let mut joining = self.commit.read(|s| s.ready_to_join(floor))?;
        // Counted but not recorded: an earlier record update failed after the count (its
        // outcome unknown). Recorded again, or acks=all would wait on a set the record
        // never names (found by the simulation, seed 152: produce refused for good).
        let recorded = self
            .recorded_isr
            .lock()
            .map_err(|_| Error::Internal("WAL in-sync record lock poisoned".into()))?
            .clone();
        joining.extend(
            self.commit
                .read(|s| s.isr().difference(&recorded).copied().collect::<Vec<_>>())?,
        );
        for b in joining {
            // Counted first (stricter), recorded second: the record never names a replica
            // that acknowledged entries were not waiting for.
            self.commit.with(|s| {
                s.add_to_isr(b);
                ((), Vec::new())
            })?;
            self.update_record(|r| {
                if !r.isr.contains(&b) {
                    r.isr.push(b);
                    r.isr.sort_unstable();
                }
                r.eligible.retain(|(x, _)| *x != b);
            })
            .await?;
            tracing::info!(replica = b, "WAL replica is in sync");
        }
        Ok(())
    }

    /// One replica's stream, reconnecting until `stop`.
    async fn link(
        self: Arc<Self>,
        replica: BrokerId,
        addrs: Arc<Mutex<HashMap<BrokerId, String>>>,
        stop: CancellationToken,
    ) {
        while !stop.is_cancelled() {
            let addr = addrs.lock().ok().and_then(|a| a.get(&replica).cloned());
            if let Some(addr) = addr.filter(|a| !a.is_empty()) {
                if let Err(e) = self.stream_once(replica, &addr, &stop).await {
                    tracing::debug!(replica, error = %e, "WAL replication stream ended");
                }
            }
            self.unsubscribe(replica);
            tokio::select! {
                // Polled in order (shutdown first): tokio's random branch order would make the
                // simulation's runs differ for one seed.
                biased;
                _ = stop.cancelled() => break,
                _ = self.clock.sleep(RECONNECT_BACKOFF) => {}
            }
        }
        self.unsubscribe(replica);
    }

    async fn stream_once(
        &self,
        replica: BrokerId,
        addr: &str,
        stop: &CancellationToken,
    ) -> Result<()> {
        let mut socket = tokio::time::timeout(CONNECT_TIMEOUT, self.transport.connect(addr))
            .await
            .map_err(|_| Error::Replication(format!("connecting to {addr} timed out")))??;
        // Before anything of the WAL goes out: the peer proves it is `replica`.
        self.auth.dial(&mut socket, replica, addr).await?;
        let (mut rd, mut wr) = tokio::io::split(socket);
        let (mut groups, start_sequence) = self.subscribe(replica)?;
        write_frame(
            &mut wr,
            &Frame::Hello {
                source: self.me,
                incarnation: self.incarnation,
                start_sequence,
                skipped: self.skipped.clone(),
            },
        )
        .await?;
        self.commit.with(|s| {
            s.link_started(replica, start_sequence);
            ((), Vec::new())
        })?;
        let commit = self.commit.clone();
        let acks = async move {
            while let Some(f) = read_frame(&mut rd).await? {
                match f {
                    Frame::Ack { durable } => {
                        commit.with(|s| ((), s.replica_acked(replica, durable)))?;
                    }
                    Frame::Refused { reason } => return Err(Error::Replication(reason)),
                    _ => return Err(Error::Replication("unexpected frame from a replica".into())),
                }
            }
            Ok::<(), Error>(())
        };
        tokio::pin!(acks);
        // The floor as it is now, then every change: a replica knows from the start whether
        // its copy begins at or below it (`ReplicaLog::complete`).
        let mut floor = self.sealed_floor.subscribe();
        let keep_from = *floor.borrow_and_update();
        write_frame(&mut wr, &Frame::Trim { keep_from }).await?;
        loop {
            tokio::select! {
                // Polled in order (shutdown first): tokio's random branch order would make the
                // simulation's runs differ for one seed.
                biased;
                _ = stop.cancelled() => return Ok(()),
                r = &mut acks => return r,
                g = groups.recv() => match g {
                    Some(g) => write_entries(&mut wr, &g).await?,
                    None => return Err(Error::Replication("dropped for falling behind".into())),
                },
                changed = floor.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    let keep_from = *floor.borrow_and_update();
                    write_frame(&mut wr, &Frame::Trim { keep_from }).await?;
                }
            }
        }
    }
}

/// Records that `replica` holds everything acknowledged below `up_to` (the latest claim wins).
fn mark_eligible(eligible: &mut Vec<(BrokerId, u64)>, replica: BrokerId, up_to: u64) {
    match eligible.iter_mut().find(|(b, _)| *b == replica) {
        Some(e) => e.1 = e.1.max(up_to),
        None => {
            eligible.push((replica, up_to));
            eligible.sort_unstable();
        }
    }
}

/// Writes an `Entries` frame without copying the group's bytes.
async fn write_entries<W: tokio::io::AsyncWrite + Unpin>(w: &mut W, g: &Group) -> Result<()> {
    let len = u32::try_from(1 + 8 + g.bytes.len())
        .map_err(|_| Error::Replication("write group too large for a frame".into()))?;
    let mut head = Vec::with_capacity(13);
    head.extend_from_slice(&len.to_be_bytes());
    head.push(2); // Entries
    head.extend_from_slice(&g.first_sequence.to_be_bytes());
    w.write_all(&head).await?;
    w.write_all(&g.bytes).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(id: BrokerId, az: Option<&str>) -> BrokerRegistration {
        BrokerRegistration {
            broker_id: id,
            az: az.map(str::to_string),
            kafka_addr: String::new(),
            http_addr: String::new(),
            internal_addr: format!("127.0.0.1:{}", 9000 + id),
            listeners: Default::default(),
        }
    }

    #[test]
    fn replicas_are_in_other_zones_one_per_zone() {
        let live = [
            reg(1, Some("a")),
            reg(2, Some("a")),
            reg(3, Some("b")),
            reg(4, Some("b")),
            reg(5, Some("c")),
        ];
        assert_eq!(choose_replicas(1, Some("a"), &live, &[], 3), vec![3, 5]);
        // Current replicas are kept while eligible.
        assert_eq!(choose_replicas(1, Some("a"), &live, &[4], 3), vec![4, 5]);
        // Capped by the zones available, and by the factor.
        assert_eq!(choose_replicas(1, Some("a"), &live[..4], &[], 3), vec![3]);
        assert_eq!(
            choose_replicas(1, Some("a"), &live, &[], 1),
            Vec::<BrokerId>::new()
        );
        // Without zones every broker is its own zone.
        let bare = [reg(1, None), reg(2, None), reg(3, None)];
        assert_eq!(choose_replicas(1, None, &bare, &[], 3), vec![2, 3]);
    }
}
