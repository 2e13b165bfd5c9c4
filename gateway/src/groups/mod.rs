//! The group coordinator: consumer group membership (Kafka's classic protocol) and
//! committed offsets.
//!
//! Each group's state machine ([`group::Group`]) is pure; this driver holds one per group
//! behind a mutex, parks JoinGroup and SyncGroup requests until their answers are ready,
//! and runs a ticker for session and rebalance timeouts. On one node this broker
//! coordinates every group; in a cluster, the groups `cluster::placement::coordinator_for`
//! gives it (the Kafka handlers answer NOT_COORDINATOR for the others), and when membership
//! changes it drops the groups it no longer coordinates ([`Coordinator::retain_groups`]):
//! members re-find their coordinator and rejoin there, and committed offsets are read back
//! from the metadata service, where every commit was written through.
//!
//! Committed offsets are written through to the metadata service (one write per
//! OffsetCommit request, carrying all its partitions) and cached per group, so OffsetFetch
//! is served from memory.
//!
//! Transactional offsets (TxnOffsetCommit, issue 16) are written through as pending records
//! per (group, producer id) (`oxbow_metadata::PendingTxnOffsets`) and cached beside the
//! committed ones. They are invisible to OffsetFetch (which answers UNSTABLE_OFFSET_COMMIT
//! for their partitions when it asks for stable offsets) until the transaction coordinator's
//! marker for the group's offsets partition ([`offsets_partition`]) completes them:
//! [`Coordinator::complete_txn_offsets`] turns them into committed offsets, or drops them,
//! in one metadata transaction.

pub mod assignor;
pub mod group;
pub mod lag;
pub mod protocol;
mod rebalance_metrics;
pub mod remote_high_watermarks;
mod txn_offsets;

use group::{Action, Group, JoinRequest, JoinResult, MemberId, Reply, SyncResult};
use kafka_protocol::error::ResponseError;
use oxbow_metadata::group::{CommittedOffset, PendingTxnOffsets};
use oxbow_metadata::MetadataStore;
pub use rebalance_metrics::RebalanceMetrics;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// How often timers (session expiry, rebalance timeout) are checked. Bounds how late a
/// dead member is noticed, beyond its session timeout.
const TICK: Duration = Duration::from_millis(100);
/// Extra wait beyond a member's rebalance timeout before a parked JoinGroup gives up.
const JOIN_WAIT_SLACK: Duration = Duration::from_secs(5);

/// Settings of the coordinator.
#[derive(Clone, Debug)]
pub struct CoordinatorSettings {
    /// How long the first rebalance of an empty group waits for more members (Kafka's
    /// `group.initial.rebalance.delay.ms`, default 3 s): longer means fewer rebalances when
    /// a fleet starts together, shorter means a lone consumer starts sooner.
    pub initial_rebalance_delay: Duration,
}

struct Slot {
    group: Group,
    joins: HashMap<MemberId, oneshot::Sender<JoinResult>>,
    syncs: HashMap<MemberId, oneshot::Sender<SyncResult>>,
}

impl Slot {
    /// Answers every parked JoinGroup and SyncGroup NOT_COORDINATOR: this broker no longer
    /// coordinates the group, the members look the coordinator up again.
    fn unload(&mut self) {
        let code = ResponseError::NotCoordinator.code();
        for (_, tx) in self.joins.drain() {
            let _ = tx.send(JoinResult {
                error: code,
                generation: -1,
                ..Default::default()
            });
        }
        for (_, tx) in self.syncs.drain() {
            let _ = tx.send(SyncResult {
                error: code,
                ..Default::default()
            });
        }
    }

    /// Answers the parked requests `actions` name, and notes the rebalances the group
    /// began or completed in `metrics`.
    fn deliver(&mut self, actions: Vec<Action>, metrics: &RebalanceMetrics) {
        metrics.note(self.group.take_rebalances());
        for a in actions {
            match a {
                Action::Join(m, r) => {
                    if let Some(tx) = self.joins.remove(&m) {
                        let _ = tx.send(r);
                    }
                }
                Action::Sync(m, r) => {
                    if let Some(tx) = self.syncs.remove(&m) {
                        let _ = tx.send(r);
                    }
                }
            }
        }
    }
}

type OffsetMap = BTreeMap<(String, i32), CommittedOffset>;

/// Kafka's `offsets.topic.num.partitions` default: the partitions of `__consumer_offsets`
/// that groups hash to ([`offsets_partition`]). Oxbow keeps no such topic and places
/// coordinators by group id (`cluster::placement::coordinator_for`); the number only names
/// the partition a transaction coordinator's WriteTxnMarkers aims at for a group, as Kafka's
/// does, so it must stay Kafka's.
pub const OFFSETS_PARTITIONS: i32 = 50;

/// The `__consumer_offsets` partition of `group_id`, as Kafka computes it
/// (`GroupMetadataManager.partitionFor`): `Utils.abs(groupId.hashCode()) % 50`, where
/// `hashCode` is Java's `String.hashCode` over UTF-16 code units and `Utils.abs` is
/// `Math.abs` except that `Integer.MIN_VALUE` gives 0.
pub fn offsets_partition(group_id: &str) -> i32 {
    let hash = group_id.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    // `checked_abs` is `None` only for i32::MIN, which Kafka's `Utils.abs` maps to 0.
    hash.checked_abs().unwrap_or(0) % OFFSETS_PARTITIONS
}

/// A group's offsets as cached: committed, and pending transactional ones by producer id.
#[derive(Default)]
struct GroupOffsets {
    committed: OffsetMap,
    pending: BTreeMap<i64, PendingTxnOffsets>,
}

impl GroupOffsets {
    /// Partitions some open transaction holds an offset for.
    fn pending_partitions(&self) -> BTreeSet<(String, i32)> {
        self.pending
            .values()
            .flat_map(|r| r.offsets.iter().map(|o| (o.topic.clone(), o.partition)))
            .collect()
    }
}

/// A TxnOffsetCommit refused: by the group (Kafka's error for it), or because the metadata
/// service failed or refused the write (a fenced producer epoch among them).
#[derive(Debug, thiserror::Error)]
pub enum TxnOffsetsError {
    #[error("refused by the group: {0:?}")]
    Group(ResponseError),
    /// The transaction coordinator did not verify the group in the producer's ongoing
    /// transaction (the code to answer).
    #[error("not verified by the transaction coordinator: {0:?}")]
    Txn(ResponseError),
    #[error(transparent)]
    Metadata(#[from] oxbow_metadata::Error),
}

/// What [`Coordinator::complete_txn_offsets`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnOffsetsCompletion {
    /// Groups coordinated here whose pending offsets of the producer were committed or
    /// dropped now (a retry of a marker that landed finds nothing: none).
    pub completed: Vec<String>,
    /// Groups with pending offsets of the producer, in the partitions asked, that another
    /// broker coordinates, with their offsets partition: untouched here. The caller answers
    /// NOT_COORDINATOR for those partitions and sends the marker to the group's
    /// coordinator.
    pub not_coordinator: Vec<(String, i32)>,
}

/// A group as DescribeGroups shows it.
#[derive(Clone, Debug)]
pub struct GroupView {
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<group::Member>,
}

/// Whether this broker coordinates a group.
type Coordinates = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// One group's cached offsets; `None` until loaded from the metadata service.
type OffsetsCell = Arc<tokio::sync::Mutex<Option<GroupOffsets>>>;

/// The group coordinator of this broker.
pub struct Coordinator {
    metadata: Arc<dyn MetadataStore>,
    settings: CoordinatorSettings,
    start: Instant,
    groups: Mutex<HashMap<String, Arc<Mutex<Slot>>>>,
    /// Per group: committed and pending offsets, loaded from the metadata service on first
    /// use.
    offsets: Mutex<HashMap<String, OffsetsCell>>,
    /// Which groups are this broker's (every group unless set: one node). Only transaction
    /// markers ask it here: they name offsets partitions, not groups; every other call is
    /// for a group the Kafka handler has checked already.
    coordinates: Coordinates,
    /// Rebalances of the groups coordinated here.
    rebalances: RebalanceMetrics,
}

fn now_wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Coordinator {
    pub fn new(metadata: Arc<dyn MetadataStore>, settings: CoordinatorSettings) -> Self {
        Coordinator {
            metadata,
            settings,
            start: Instant::now(),
            groups: Mutex::new(HashMap::new()),
            offsets: Mutex::new(HashMap::new()),
            coordinates: Arc::new(|_: &str| true),
            rebalances: RebalanceMetrics::default(),
        }
    }

    /// The same coordinator, told which groups this broker coordinates (in a cluster: the
    /// ones `ClusterView::coordinator_for` gives it).
    pub fn with_coordinates(
        mut self,
        coordinates: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.coordinates = Arc::new(coordinates);
        self
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// The rebalance metrics of the groups coordinated here.
    pub fn rebalance_metrics(&self) -> &RebalanceMetrics {
        &self.rebalances
    }

    fn slot(&self, group_id: &str) -> Arc<Mutex<Slot>> {
        let mut groups = match self.groups.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        groups
            .entry(group_id.to_string())
            .or_insert_with(|| {
                Arc::new(Mutex::new(Slot {
                    group: Group::new(
                        group_id,
                        self.settings.initial_rebalance_delay.as_millis() as u64,
                    ),
                    joins: HashMap::new(),
                    syncs: HashMap::new(),
                }))
            })
            .clone()
    }

    /// Keeps only the groups `keep` accepts (the ones this broker still coordinates):
    /// the others' parked JoinGroup/SyncGroup waits are answered NOT_COORDINATOR at once,
    /// as Kafka does when it unloads a group (the waiting request holds the group's slot,
    /// so dropping the slot alone would leave the member waiting out its whole rebalance
    /// timeout on a broker that no longer coordinates it), and their cached offsets go, so
    /// a group that comes back later is read fresh from the metadata service.
    pub fn retain_groups(&self, keep: impl Fn(&str) -> bool) {
        let dropped: Vec<Arc<Mutex<Slot>>> = match self.groups.lock() {
            Ok(mut g) => {
                let gone: Vec<String> = g.keys().filter(|id| !keep(id)).cloned().collect();
                gone.iter().filter_map(|id| g.remove(id)).collect()
            }
            Err(_) => Vec::new(),
        };
        for slot in &dropped {
            Self::lock(slot).unload();
        }
        if let Ok(mut o) = self.offsets.lock() {
            o.retain(|id, _| keep(id));
        }
        if !dropped.is_empty() {
            tracing::info!(
                groups = dropped.len(),
                "no longer coordinating some groups (membership changed)"
            );
        }
    }

    fn existing(&self, group_id: &str) -> Option<Arc<Mutex<Slot>>> {
        self.groups.lock().ok()?.get(group_id).cloned()
    }

    fn lock(slot: &Mutex<Slot>) -> std::sync::MutexGuard<'_, Slot> {
        match slot.lock() {
            Ok(s) => s,
            // A panic while holding the lock left the group in some state; carry on with it
            // rather than wedge every member of the group forever.
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// JoinGroup: resolves when the rebalance completes (or at once for errors and
    /// MEMBER_ID_REQUIRED).
    pub async fn join(&self, group_id: &str, req: JoinRequest) -> JoinResult {
        let wait = Duration::from_millis(req.rebalance_timeout_ms.max(req.session_timeout_ms))
            + self.settings.initial_rebalance_delay
            + JOIN_WAIT_SLACK;
        let slot = self.slot(group_id);
        let rx = {
            let mut s = Self::lock(&slot);
            let now = self.now_ms();
            let (reply, actions) = s.group.join(req, now);
            let rx = match reply {
                Reply::Now(r) => {
                    s.deliver(actions, &self.rebalances);
                    return r;
                }
                Reply::Later(member) => {
                    // Registered before the actions go out: the answer may be among them.
                    // A member that joins again replaces (and so ends) its older wait.
                    let (tx, rx) = oneshot::channel();
                    s.joins.insert(member, tx);
                    rx
                }
            };
            s.deliver(actions, &self.rebalances);
            rx
        };
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(r)) => r,
            _ => JoinResult {
                error: ResponseError::RebalanceInProgress.code(),
                generation: -1,
                ..Default::default()
            },
        }
    }

    /// SyncGroup: resolves when the leader has sent the assignment.
    pub async fn sync(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        assignments: Vec<(MemberId, bytes::Bytes)>,
    ) -> SyncResult {
        let Some(slot) = self.existing(group_id) else {
            return SyncResult {
                error: ResponseError::UnknownMemberId.code(),
                ..Default::default()
            };
        };
        let (rx, wait) = {
            let mut s = Self::lock(&slot);
            let now = self.now_ms();
            let wait = s
                .group
                .members
                .get(member_id)
                .map(|m| Duration::from_millis(m.session_timeout_ms))
                .unwrap_or_default()
                + JOIN_WAIT_SLACK;
            let (reply, actions) =
                s.group
                    .sync(member_id, instance_id, generation, assignments, now);
            match reply {
                Reply::Now(r) => {
                    s.deliver(actions, &self.rebalances);
                    return r;
                }
                Reply::Later(member) => {
                    let (tx, rx) = oneshot::channel();
                    s.syncs.insert(member, tx);
                    s.deliver(actions, &self.rebalances);
                    (rx, wait)
                }
            }
        };
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(r)) => r,
            _ => SyncResult {
                error: ResponseError::RebalanceInProgress.code(),
                ..Default::default()
            },
        }
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> i16 {
        let Some(slot) = self.existing(group_id) else {
            return ResponseError::UnknownMemberId.code();
        };
        let mut s = Self::lock(&slot);
        let now = self.now_ms();
        s.group.heartbeat(member_id, instance_id, generation, now)
    }

    pub fn leave(&self, group_id: &str, member_id: &str, instance_id: Option<&str>) -> i16 {
        let Some(slot) = self.existing(group_id) else {
            return ResponseError::UnknownMemberId.code();
        };
        let mut s = Self::lock(&slot);
        let now = self.now_ms();
        let (code, actions) = s.group.leave(member_id, instance_id, now);
        s.deliver(actions, &self.rebalances);
        code
    }

    /// Runs the timers until `shutdown`.
    pub async fn run_ticker(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let slots: Vec<_> = match self.groups.lock() {
                Ok(g) => g.values().cloned().collect(),
                Err(_) => continue,
            };
            for slot in slots {
                let mut s = Self::lock(&slot);
                let now = self.now_ms();
                let actions = s.group.tick(now);
                s.deliver(actions, &self.rebalances);
            }
        }
    }

    /// DescribeGroups for one group (`None`: not known here, reported as Dead). A group
    /// known only by its committed offsets (no member since this broker started) is Empty,
    /// as Kafka reports it.
    pub async fn describe(&self, group_id: &str) -> Option<GroupView> {
        if let Some(slot) = self.existing(group_id) {
            let s = Self::lock(&slot);
            let g = &s.group;
            if g.state != group::GroupState::Dead {
                return Some(GroupView {
                    state: g.state.name(),
                    protocol_type: g.protocol_type.clone().unwrap_or_default(),
                    protocol: g.protocol.clone().unwrap_or_default(),
                    members: g.members.values().cloned().collect(),
                });
            }
        }
        let has_offsets = match self.fetch_offsets(group_id).await {
            Ok(o) => !o.is_empty(),
            Err(e) => {
                tracing::warn!(group = group_id, error = %e, "reading offsets failed");
                false
            }
        };
        has_offsets.then(|| GroupView {
            state: group::GroupState::Empty.name(),
            protocol_type: protocol::CONSUMER.to_string(),
            protocol: String::new(),
            members: Vec::new(),
        })
    }

    /// Every known group: (id, protocol type, state).
    pub async fn list(&self) -> Result<Vec<(String, String, &'static str)>, oxbow_metadata::Error> {
        let mut out: BTreeMap<String, (String, &'static str)> = BTreeMap::new();
        for id in self.metadata.list_groups().await? {
            out.insert(id, ("consumer".to_string(), "Empty"));
        }
        if let Ok(groups) = self.groups.lock() {
            for (id, slot) in groups.iter() {
                let s = Self::lock(slot);
                if s.group.state == group::GroupState::Dead {
                    continue;
                }
                let pt = s
                    .group
                    .protocol_type
                    .clone()
                    .unwrap_or_else(|| "consumer".into());
                out.insert(id.clone(), (pt, s.group.state.name()));
            }
        }
        Ok(out.into_iter().map(|(id, (pt, st))| (id, pt, st)).collect())
    }

    /// DeleteGroups for one group: only a group without members.
    pub async fn delete(&self, group_id: &str) -> i16 {
        if let Some(slot) = self.existing(group_id) {
            let mut s = Self::lock(&slot);
            if !s.group.is_empty() {
                return ResponseError::NonEmptyGroup.code();
            }
            s.group.kill();
        }
        let known = match self.metadata.list_groups().await {
            Ok(ids) => ids.iter().any(|g| g == group_id),
            Err(e) => {
                tracing::warn!(error = %e, "listing groups failed");
                return ResponseError::CoordinatorNotAvailable.code();
            }
        };
        let in_memory = self
            .groups
            .lock()
            .map(|mut g| g.remove(group_id).is_some())
            .unwrap_or(false);
        if !known && !in_memory {
            return ResponseError::GroupIdNotFound.code();
        }
        if let Err(e) = self.metadata.delete_offsets(group_id, None).await {
            tracing::warn!(error = %e, "deleting offsets failed");
            return ResponseError::CoordinatorNotAvailable.code();
        }
        if let Ok(mut o) = self.offsets.lock() {
            o.remove(group_id);
        }
        0
    }

    fn offsets_slot(&self, group_id: &str) -> OffsetsCell {
        let mut o = match self.offsets.lock() {
            Ok(o) => o,
            Err(poisoned) => poisoned.into_inner(),
        };
        o.entry(group_id.to_string()).or_default().clone()
    }

    async fn loaded<'a>(
        &self,
        group_id: &str,
        cell: &'a mut Option<GroupOffsets>,
    ) -> Result<&'a mut GroupOffsets, oxbow_metadata::Error> {
        if cell.is_none() {
            let (committed, pending) = futures::future::try_join(
                self.metadata.fetch_offsets(group_id),
                self.metadata.txn_offsets(group_id),
            )
            .await?;
            *cell = Some(GroupOffsets {
                committed: committed
                    .into_iter()
                    .map(|o| ((o.topic.clone(), o.partition), o))
                    .collect(),
                pending: pending.into_iter().map(|r| (r.producer_id, r)).collect(),
            });
        }
        Ok(cell.get_or_insert_with(GroupOffsets::default))
    }

    /// Checks the member may commit (generation fencing).
    pub fn check_commit(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), ResponseError> {
        match self.existing(group_id) {
            Some(slot) => Self::lock(&slot)
                .group
                .check_commit(member_id, instance_id, generation),
            None if generation < 0 && member_id.is_empty() => Ok(()),
            None => Err(ResponseError::UnknownMemberId),
        }
    }

    /// Stores offsets (one metadata write for all of them) and caches them.
    pub async fn commit_offsets(
        &self,
        group_id: &str,
        offsets: Vec<(String, i32, i64, i32, String)>,
    ) -> Result<(), oxbow_metadata::Error> {
        let ts = now_wall_ms();
        let offsets: Vec<CommittedOffset> = offsets
            .into_iter()
            .map(
                |(topic, partition, offset, leader_epoch, metadata)| CommittedOffset {
                    topic,
                    partition,
                    offset,
                    leader_epoch,
                    metadata,
                    commit_timestamp_ms: ts,
                },
            )
            .collect();
        let cell = self.offsets_slot(group_id);
        let mut guard = cell.lock().await;
        self.metadata
            .commit_offsets(group_id, offsets.clone())
            .await?;
        let map = &mut self.loaded(group_id, &mut guard).await?.committed;
        for o in offsets {
            map.insert((o.topic.clone(), o.partition), o);
        }
        Ok(())
    }

    /// Every committed offset of a group.
    pub async fn fetch_offsets(
        &self,
        group_id: &str,
    ) -> Result<BTreeMap<(String, i32), CommittedOffset>, oxbow_metadata::Error> {
        Ok(self.fetch_offsets_and_pending(group_id).await?.0)
    }

    /// Every committed offset of a group, and the partitions an open transaction holds a
    /// pending offset for (OffsetFetch with `require_stable` answers those
    /// UNSTABLE_OFFSET_COMMIT).
    pub async fn fetch_offsets_and_pending(
        &self,
        group_id: &str,
    ) -> Result<(OffsetMap, BTreeSet<(String, i32)>), oxbow_metadata::Error> {
        let cell = self.offsets_slot(group_id);
        let mut guard = cell.lock().await;
        let offsets = self.loaded(group_id, &mut guard).await?;
        Ok((offsets.committed.clone(), offsets.pending_partitions()))
    }

    /// Every committed offset held in memory: (group, topic, partition, offset). Groups not
    /// touched since start are not loaded; lag metrics cover the active ones.
    pub fn cached_offsets(&self) -> Vec<(String, String, i32, i64)> {
        let cells: Vec<(String, OffsetsCell)> = match self.offsets.lock() {
            Ok(o) => o.iter().map(|(g, c)| (g.clone(), c.clone())).collect(),
            Err(_) => return Vec::new(),
        };
        let mut out = Vec::new();
        for (group, cell) in cells {
            // A group mid-commit is skipped this scrape rather than waited for.
            if let Ok(guard) = cell.try_lock() {
                if let Some(offsets) = guard.as_ref() {
                    out.extend(
                        offsets
                            .committed
                            .values()
                            .map(|o| (group.clone(), o.topic.clone(), o.partition, o.offset)),
                    );
                }
            }
        }
        out
    }

    /// OffsetDelete: removes offsets of topics the group is not subscribed to.
    pub async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: Vec<(String, i32)>,
    ) -> Result<Vec<(String, i32, i16)>, oxbow_metadata::Error> {
        let subscribed = self
            .existing(group_id)
            .map(|slot| protocol::subscribed_topics(&Self::lock(&slot).group))
            .unwrap_or_default();
        let (refused, allowed): (Vec<_>, Vec<_>) = partitions
            .into_iter()
            .partition(|(t, _)| subscribed.contains(t));
        if !allowed.is_empty() {
            self.metadata
                .delete_offsets(group_id, Some(allowed.clone()))
                .await?;
            let cell = self.offsets_slot(group_id);
            let mut guard = cell.lock().await;
            if let Some(offsets) = guard.as_mut() {
                for k in &allowed {
                    offsets.committed.remove(k);
                }
            }
        }
        Ok(allowed
            .into_iter()
            .map(|(t, p)| (t, p, 0))
            .chain(
                refused
                    .into_iter()
                    .map(|(t, p)| (t, p, ResponseError::GroupSubscribedToTopic.code())),
            )
            .collect())
    }
}

#[cfg(test)]
mod tests;
