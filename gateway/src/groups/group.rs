//! One consumer group's membership state machine (Kafka's classic group protocol), pure:
//! no I/O, no clock — the caller passes `now_ms` and delivers the [`Action`]s it returns.
//!
//! States follow Kafka's `GroupCoordinator`: `Empty` → (first JoinGroup) →
//! `PreparingRebalance` → (every member rejoined, or the rebalance timeout) →
//! `CompletingRebalance` → (the leader's SyncGroup) → `Stable` → (a member joins, leaves,
//! changes its protocols or misses its session timeout) → `PreparingRebalance` …
//!
//! Invariants (checked in the tests below):
//! - every JoinGroup or SyncGroup left waiting is answered exactly once, by an action;
//! - the generation grows by one per completed rebalance;
//! - a request with a stale generation, unknown member id or fenced static instance id is
//!   refused (`ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID`, `FENCED_INSTANCE_ID`), so a zombie
//!   member can neither heartbeat nor commit.

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use std::collections::{BTreeMap, BTreeSet, HashMap};

pub type MemberId = String;

/// Shortest and longest session timeouts accepted (Kafka's `group.min/max.session.timeout.ms`
/// are 6 s and 30 min; the lower bound is relaxed so tests and latency-sensitive users can
/// detect dead consumers faster).
pub const SESSION_TIMEOUT_MIN_MS: u64 = 1_000;
pub const SESSION_TIMEOUT_MAX_MS: u64 = 1_800_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name Kafka's DescribeGroups and ListGroups use.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A member of the group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub id: MemberId,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: u64,
    pub rebalance_timeout_ms: u64,
    /// (protocol name, metadata) in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    pub last_seen_ms: u64,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

/// A JoinGroup request, decoded.
#[derive(Clone, Debug)]
pub struct JoinRequest {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: u64,
    pub rebalance_timeout_ms: u64,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a new member must first get its id (KIP-394).
    pub require_known_member_id: bool,
}

/// The answer to a JoinGroup.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JoinResult {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Every member and its metadata, for the leader only (it computes the assignment).
    pub members: Vec<(MemberId, Option<String>, Bytes)>,
}

impl JoinResult {
    fn error(e: ResponseError, member_id: &str) -> Self {
        JoinResult {
            error: e.code(),
            generation: -1,
            member_id: member_id.to_string(),
            ..Default::default()
        }
    }
}

/// The answer to a SyncGroup.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncResult {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    fn error(e: ResponseError) -> Self {
        SyncResult {
            error: e.code(),
            ..Default::default()
        }
    }
}

/// Whether an answer is ready now or comes later through an [`Action`] addressed to the
/// given member id (for a new member, the id the group just gave it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply<T> {
    Now(T),
    Later(MemberId),
}

/// An answer to a request that was left waiting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Join(MemberId, JoinResult),
    Sync(MemberId, SyncResult),
}

/// Rebalances begun and ended since the driver last took them ([`Group::take_rebalances`]):
/// the coordinator turns them into metrics, the group keeps no clock of its own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rebalances {
    /// Rebalances begun: the group entered `PreparingRebalance` from `Empty` or `Stable`
    /// (one that restarts while completing is the same rebalance).
    pub begun: u32,
    /// How long the last one to reach `Stable` took, from its beginning (ms).
    pub completed_ms: Option<u64>,
}

/// A group's state; see the module docs.
#[derive(Clone, Debug)]
pub struct Group {
    pub id: String,
    pub state: GroupState,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: Option<MemberId>,
    pub members: BTreeMap<MemberId, Member>,
    static_members: HashMap<String, MemberId>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, until they join or expire.
    pending_member_ids: HashMap<MemberId, u64>,
    joining: BTreeSet<MemberId>,
    syncing: BTreeSet<MemberId>,
    rebalance_deadline_ms: u64,
    initial_delay_until_ms: u64,
    initial_rebalance_delay_ms: u64,
    /// When the rebalance under way began (`None`: none is).
    rebalance_began_ms: Option<u64>,
    /// Not yet taken by the driver.
    rebalances: Rebalances,
}

impl Group {
    /// An empty group. `initial_rebalance_delay_ms` is how long the first rebalance of an
    /// empty group waits for more members (Kafka's `group.initial.rebalance.delay.ms`): one
    /// rebalance for a fleet that starts together instead of one per member.
    pub fn new(id: &str, initial_rebalance_delay_ms: u64) -> Self {
        Group {
            id: id.to_string(),
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            static_members: HashMap::new(),
            pending_member_ids: HashMap::new(),
            joining: BTreeSet::new(),
            syncing: BTreeSet::new(),
            rebalance_deadline_ms: 0,
            initial_delay_until_ms: 0,
            initial_rebalance_delay_ms,
            rebalance_began_ms: None,
            rebalances: Rebalances::default(),
        }
    }

    /// The rebalances begun and completed since the last call.
    pub fn take_rebalances(&mut self) -> Rebalances {
        std::mem::take(&mut self.rebalances)
    }

    /// Ends the rebalance under way, if any: `stable` if it reached `Stable` at `now_ms`
    /// (timed), else it was abandoned (every member left).
    fn end_rebalance(&mut self, now_ms: u64, stable: bool) {
        if let Some(began) = self.rebalance_began_ms.take() {
            if stable {
                self.rebalances.completed_ms = Some(now_ms.saturating_sub(began));
            }
        }
    }

    fn new_member_id(&mut self, client_id: &str) -> MemberId {
        format!("{client_id}-{}", uuid::Uuid::new_v4())
    }

    /// Protocols every member (and, if given, a candidate) supports.
    fn common_protocols(&self, candidate: Option<&[(String, Bytes)]>) -> Vec<String> {
        let mut sets = self
            .members
            .values()
            .map(|m| {
                m.protocols
                    .iter()
                    .map(|(n, _)| n.clone())
                    .collect::<BTreeSet<_>>()
            })
            .chain(candidate.map(|c| c.iter().map(|(n, _)| n.clone()).collect()));
        let Some(first) = sets.next() else {
            return Vec::new();
        };
        sets.fold(first, |acc, s| acc.intersection(&s).cloned().collect())
            .into_iter()
            .collect()
    }

    /// Kafka's protocol vote: each member votes for its most preferred common protocol.
    fn select_protocol(&self) -> Option<String> {
        let common = self.common_protocols(None);
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some((name, _)) = m.protocols.iter().find(|(n, _)| common.contains(n)) {
                *votes.entry(name.as_str()).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by_key(|(_, v)| *v)
            .map(|(n, _)| n.to_string())
    }

    fn join_result(&self, member_id: &str) -> JoinResult {
        let leader = self.leader.clone().unwrap_or_default();
        let protocol = self.protocol.clone();
        let members = if member_id == leader {
            let p = protocol.clone().unwrap_or_default();
            self.members
                .values()
                .map(|m| (m.id.clone(), m.instance_id.clone(), m.metadata_for(&p)))
                .collect()
        } else {
            Vec::new()
        };
        JoinResult {
            error: 0,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: protocol,
            leader,
            member_id: member_id.to_string(),
            members,
        }
    }

    /// Checks a request's member id, static instance id and generation.
    fn check_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: Option<i32>,
    ) -> Result<(), ResponseError> {
        if let Some(instance) = instance_id {
            if let Some(current) = self.static_members.get(instance) {
                if current != member_id {
                    return Err(ResponseError::FencedInstanceId);
                }
            }
        }
        if !self.members.contains_key(member_id) {
            return Err(ResponseError::UnknownMemberId);
        }
        if let Some(g) = generation {
            if g != self.generation {
                return Err(ResponseError::IllegalGeneration);
            }
        }
        Ok(())
    }

    fn prepare_rebalance(&mut self, now_ms: u64, actions: &mut Vec<Action>) {
        if self.state == GroupState::PreparingRebalance {
            return;
        }
        // Members waiting for their assignment will not get one from this generation.
        for m in std::mem::take(&mut self.syncing) {
            actions.push(Action::Sync(
                m,
                SyncResult::error(ResponseError::RebalanceInProgress),
            ));
        }
        if self.state == GroupState::Empty {
            self.initial_delay_until_ms = now_ms + self.initial_rebalance_delay_ms;
        }
        let timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0);
        self.rebalance_deadline_ms = now_ms + timeout;
        if self.rebalance_began_ms.is_none() {
            self.rebalance_began_ms = Some(now_ms);
            self.rebalances.begun = self.rebalances.begun.saturating_add(1);
        }
        self.state = GroupState::PreparingRebalance;
    }

    fn maybe_complete_join(&mut self, now_ms: u64, actions: &mut Vec<Action>) {
        if self.state == GroupState::PreparingRebalance
            && !self.members.is_empty()
            && self.members.keys().all(|m| self.joining.contains(m))
            && now_ms >= self.initial_delay_until_ms
        {
            self.complete_join(now_ms, actions);
        }
    }

    fn remove_member(&mut self, member_id: &str, actions: &mut Vec<Action>) {
        if let Some(m) = self.members.remove(member_id) {
            if let Some(instance) = &m.instance_id {
                if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                    self.static_members.remove(instance);
                }
            }
        }
        if self.joining.remove(member_id) {
            actions.push(Action::Join(
                member_id.to_string(),
                JoinResult::error(ResponseError::UnknownMemberId, member_id),
            ));
        }
        if self.syncing.remove(member_id) {
            actions.push(Action::Sync(
                member_id.to_string(),
                SyncResult::error(ResponseError::UnknownMemberId),
            ));
        }
        if self.leader.as_deref() == Some(member_id) {
            self.leader = None;
        }
    }

    fn complete_join(&mut self, now_ms: u64, actions: &mut Vec<Action>) {
        let gone: Vec<MemberId> = self
            .members
            .keys()
            .filter(|m| !self.joining.contains(*m))
            .cloned()
            .collect();
        for m in gone {
            self.remove_member(&m, actions);
        }
        self.generation += 1;
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.protocol = None;
            self.leader = None;
            self.joining.clear();
            self.end_rebalance(now_ms, false);
            return;
        }
        self.protocol = self.select_protocol();
        if self
            .leader
            .as_ref()
            .is_none_or(|l| !self.members.contains_key(l))
        {
            self.leader = self.joining.iter().next().cloned();
        }
        self.state = GroupState::CompletingRebalance;
        for m in self.members.values_mut() {
            m.last_seen_ms = now_ms;
            m.assignment = Bytes::new();
        }
        for m in std::mem::take(&mut self.joining) {
            let result = self.join_result(&m);
            actions.push(Action::Join(m, result));
        }
    }

    /// JoinGroup.
    pub fn join(&mut self, req: JoinRequest, now_ms: u64) -> (Reply<JoinResult>, Vec<Action>) {
        let mut actions = Vec::new();
        let now = |r: JoinResult| (Reply::Now(r), Vec::new());
        if self.state == GroupState::Dead {
            return now(JoinResult::error(
                ResponseError::CoordinatorNotAvailable,
                &req.member_id,
            ));
        }
        if !(SESSION_TIMEOUT_MIN_MS..=SESSION_TIMEOUT_MAX_MS).contains(&req.session_timeout_ms) {
            return now(JoinResult::error(
                ResponseError::InvalidSessionTimeout,
                &req.member_id,
            ));
        }
        let consistent = !req.protocol_type.is_empty()
            && !req.protocols.is_empty()
            && (self.members.is_empty()
                || (self.protocol_type.as_deref() == Some(req.protocol_type.as_str())
                    && !self.common_protocols(Some(&req.protocols)).is_empty()));
        if !consistent {
            return now(JoinResult::error(
                ResponseError::InconsistentGroupProtocol,
                &req.member_id,
            ));
        }
        let mut member_id = req.member_id.clone();
        if member_id.is_empty() {
            match &req.instance_id {
                Some(instance) if self.static_members.contains_key(instance) => {
                    // A static member restarted: it takes over its old identity under a new
                    // member id; the old id is fenced from now on (KIP-345).
                    let old_id = self.static_members[instance].clone();
                    let new_id = self.new_member_id(&req.client_id);
                    let Some(mut m) = self.members.remove(&old_id) else {
                        return now(JoinResult::error(ResponseError::UnknownMemberId, ""));
                    };
                    let was_leader = self.leader.as_deref() == Some(old_id.as_str());
                    let unchanged = m.protocols == req.protocols;
                    if self.joining.remove(&old_id) {
                        actions.push(Action::Join(
                            old_id.clone(),
                            JoinResult::error(ResponseError::FencedInstanceId, &old_id),
                        ));
                        self.joining.insert(new_id.clone());
                    }
                    if self.syncing.remove(&old_id) {
                        actions.push(Action::Sync(
                            old_id.clone(),
                            SyncResult::error(ResponseError::FencedInstanceId),
                        ));
                    }
                    m.id = new_id.clone();
                    m.protocols = req.protocols.clone();
                    m.session_timeout_ms = req.session_timeout_ms;
                    m.rebalance_timeout_ms = req.rebalance_timeout_ms;
                    m.client_id = req.client_id.clone();
                    m.client_host = req.client_host.clone();
                    m.last_seen_ms = now_ms;
                    self.members.insert(new_id.clone(), m);
                    self.static_members.insert(instance.clone(), new_id.clone());
                    if was_leader {
                        self.leader = Some(new_id.clone());
                    }
                    if self.state == GroupState::Stable && unchanged && !was_leader {
                        // No rebalance: the member gets its old assignment on SyncGroup.
                        return (Reply::Now(self.join_result(&new_id)), actions);
                    }
                    member_id = new_id;
                }
                Some(instance) => {
                    member_id = self.new_member_id(&req.client_id);
                    self.static_members
                        .insert(instance.clone(), member_id.clone());
                    self.add_member(&member_id, &req, now_ms);
                }
                None if req.require_known_member_id => {
                    let id = self.new_member_id(&req.client_id);
                    self.pending_member_ids
                        .insert(id.clone(), now_ms + req.session_timeout_ms);
                    return now(JoinResult::error(ResponseError::MemberIdRequired, &id));
                }
                None => {
                    member_id = self.new_member_id(&req.client_id);
                    self.add_member(&member_id, &req, now_ms);
                }
            }
        } else if self.pending_member_ids.remove(&member_id).is_some() {
            if let Some(instance) = &req.instance_id {
                self.static_members
                    .insert(instance.clone(), member_id.clone());
            }
            self.add_member(&member_id, &req, now_ms);
        } else {
            if let Err(e) = self.check_member(&member_id, req.instance_id.as_deref(), None) {
                return now(JoinResult::error(e, &member_id));
            }
            let is_leader = self.leader.as_deref() == Some(member_id.as_str());
            let Some(m) = self.members.get_mut(&member_id) else {
                return now(JoinResult::error(
                    ResponseError::UnknownMemberId,
                    &member_id,
                ));
            };
            let unchanged = m.protocols == req.protocols;
            m.protocols = req.protocols.clone();
            m.session_timeout_ms = req.session_timeout_ms;
            m.rebalance_timeout_ms = req.rebalance_timeout_ms;
            m.last_seen_ms = now_ms;
            match self.state {
                GroupState::CompletingRebalance if unchanged => {
                    // The member missed its JoinGroup answer: give it again.
                    return now(self.join_result(&member_id));
                }
                GroupState::Stable if unchanged && !is_leader => {
                    return now(self.join_result(&member_id));
                }
                _ => {}
            }
        }
        self.prepare_rebalance(now_ms, &mut actions);
        self.joining.insert(member_id.clone());
        self.maybe_complete_join(now_ms, &mut actions);
        (Reply::Later(member_id), actions)
    }

    fn add_member(&mut self, member_id: &str, req: &JoinRequest, now_ms: u64) {
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        self.members.insert(
            member_id.to_string(),
            Member {
                id: member_id.to_string(),
                instance_id: req.instance_id.clone(),
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
                session_timeout_ms: req.session_timeout_ms,
                rebalance_timeout_ms: req.rebalance_timeout_ms,
                protocols: req.protocols.clone(),
                assignment: Bytes::new(),
                last_seen_ms: now_ms,
            },
        );
    }

    /// SyncGroup. `assignments` is only read from the leader.
    pub fn sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        assignments: Vec<(MemberId, Bytes)>,
        now_ms: u64,
    ) -> (Reply<SyncResult>, Vec<Action>) {
        let mut actions = Vec::new();
        if let Err(e) = self.check_member(member_id, instance_id, Some(generation)) {
            return (Reply::Now(SyncResult::error(e)), actions);
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.last_seen_ms = now_ms;
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => (
                Reply::Now(SyncResult::error(ResponseError::UnknownMemberId)),
                actions,
            ),
            GroupState::PreparingRebalance => (
                Reply::Now(SyncResult::error(ResponseError::RebalanceInProgress)),
                actions,
            ),
            GroupState::Stable => (Reply::Now(self.sync_result(member_id)), actions),
            GroupState::CompletingRebalance => {
                self.syncing.insert(member_id.to_string());
                if self.leader.as_deref() == Some(member_id) {
                    let mut assigned: HashMap<MemberId, Bytes> = assignments.into_iter().collect();
                    for m in self.members.values_mut() {
                        m.assignment = assigned.remove(&m.id).unwrap_or_default();
                    }
                    self.state = GroupState::Stable;
                    self.end_rebalance(now_ms, true);
                    for m in std::mem::take(&mut self.syncing) {
                        let result = self.sync_result(&m);
                        actions.push(Action::Sync(m, result));
                    }
                }
                (Reply::Later(member_id.to_string()), actions)
            }
        }
    }

    fn sync_result(&self, member_id: &str) -> SyncResult {
        SyncResult {
            error: 0,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            assignment: self
                .members
                .get(member_id)
                .map(|m| m.assignment.clone())
                .unwrap_or_default(),
        }
    }

    /// Heartbeat: error code (0 when the member may carry on).
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now_ms: u64,
    ) -> i16 {
        if matches!(self.state, GroupState::Empty | GroupState::Dead) {
            return ResponseError::UnknownMemberId.code();
        }
        if let Err(e) = self.check_member(member_id, instance_id, Some(generation)) {
            return e.code();
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.last_seen_ms = now_ms;
        }
        match self.state {
            GroupState::PreparingRebalance => ResponseError::RebalanceInProgress.code(),
            _ => 0,
        }
    }

    /// LeaveGroup for one member (by member id, or by static instance id with an empty
    /// member id). Returns the error code for that member.
    pub fn leave(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        now_ms: u64,
    ) -> (i16, Vec<Action>) {
        let mut actions = Vec::new();
        let id = match (member_id.is_empty(), instance_id) {
            (true, Some(instance)) => match self.static_members.get(instance) {
                Some(id) => id.clone(),
                None => return (ResponseError::UnknownMemberId.code(), actions),
            },
            _ => member_id.to_string(),
        };
        if let Err(e) = self.check_member(&id, instance_id, None) {
            return (e.code(), actions);
        }
        self.remove_member(&id, &mut actions);
        self.after_removal(now_ms, &mut actions);
        (0, actions)
    }

    fn after_removal(&mut self, now_ms: u64, actions: &mut Vec<Action>) {
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                if self.members.is_empty() {
                    self.generation += 1;
                    self.state = GroupState::Empty;
                    self.end_rebalance(now_ms, false);
                    self.protocol = None;
                    self.leader = None;
                    for m in std::mem::take(&mut self.syncing) {
                        actions.push(Action::Sync(
                            m,
                            SyncResult::error(ResponseError::UnknownMemberId),
                        ));
                    }
                } else {
                    self.prepare_rebalance(now_ms, actions);
                }
            }
            GroupState::PreparingRebalance => {
                if self.members.is_empty() {
                    self.complete_join(now_ms, actions);
                } else {
                    self.maybe_complete_join(now_ms, actions);
                }
            }
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// Timers: session expiry, rebalance timeout, the initial rebalance delay.
    pub fn tick(&mut self, now_ms: u64) -> Vec<Action> {
        let mut actions = Vec::new();
        self.pending_member_ids.retain(|_, expiry| *expiry > now_ms);
        let expired: Vec<MemberId> = self
            .members
            .values()
            .filter(|m| {
                !self.joining.contains(&m.id) && m.last_seen_ms + m.session_timeout_ms <= now_ms
            })
            .map(|m| m.id.clone())
            .collect();
        if !expired.is_empty() {
            for m in &expired {
                self.remove_member(m, &mut actions);
            }
            self.after_removal(now_ms, &mut actions);
        }
        if self.state == GroupState::PreparingRebalance {
            if now_ms >= self.rebalance_deadline_ms && now_ms >= self.initial_delay_until_ms {
                self.complete_join(now_ms, &mut actions);
            } else {
                self.maybe_complete_join(now_ms, &mut actions);
            }
        }
        actions
    }

    /// Checks an OffsetCommit's member and generation (`generation < 0` with an empty member
    /// id is a standalone consumer, allowed only while the group has no members).
    pub fn check_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), ResponseError> {
        if generation < 0 && member_id.is_empty() {
            return if self.members.is_empty() {
                Ok(())
            } else {
                Err(ResponseError::UnknownMemberId)
            };
        }
        if matches!(self.state, GroupState::Empty | GroupState::Dead) {
            return Err(ResponseError::UnknownMemberId);
        }
        // Checked before the generation, as Kafka does: a member still on the previous
        // generation while the new one completes gets a retriable answer, not a fatal one.
        if self.state == GroupState::CompletingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        self.check_member(member_id, instance_id, Some(generation))?;
        Ok(())
    }

    /// Checks a TxnOffsetCommit (Kafka's `GroupCoordinator.doTxnCommitOffsets`): looser
    /// than [`Self::check_commit`], each field is checked only when the request sets it
    /// (v3+ carry them; older ones carry none and rest on the producer epoch). A static
    /// member's instance id held by another member is FENCED_INSTANCE_ID, an unknown member
    /// id UNKNOWN_MEMBER_ID, a generation other than the group's ILLEGAL_GENERATION.
    pub fn check_txn_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), ResponseError> {
        if self.state == GroupState::Dead {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        if let Some(instance) = instance_id {
            if let Some(current) = self.static_members.get(instance) {
                if current != member_id {
                    return Err(ResponseError::FencedInstanceId);
                }
            }
        }
        if !member_id.is_empty() && !self.members.contains_key(member_id) {
            return Err(ResponseError::UnknownMemberId);
        }
        if generation >= 0 && generation != self.generation {
            return Err(ResponseError::IllegalGeneration);
        }
        Ok(())
    }

    /// Whether the group may be deleted (DeleteGroups): only without members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.pending_member_ids.is_empty()
    }

    /// Marks the group deleted.
    pub fn kill(&mut self) {
        self.state = GroupState::Dead;
    }
}

#[cfg(test)]
mod tests;
