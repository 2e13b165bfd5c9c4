//! The controller's pure core: given what it has seen of brokers and partitions, which
//! partition states should change. No I/O, no clock (the driver passes `now_ms`), so every
//! decision is unit-tested by feeding events.
//!
//! Decisions, in order, on every event:
//! 1. **Failover.** A partition whose leader has no live lease moves to a live broker at
//!    once: leader = the requested transfer target if that one is live, else the placement
//!    rule ([`placement::plan_moves`]) over the *ready* live brokers; `leader_epoch + 1`; `recover_from` = the dead leader
//!    (kept if already set: a new leader that died before recovering leaves the older
//!    tail still to recover); `transfer_to` cleared. The new leader recovers the dead
//!    broker's WAL tail from its replicas before serving (segment-writer).
//! 2. **Transfer bookkeeping.** A requested transfer (`transfer_to`) whose target is not live
//!    is cancelled; one the live leader has not carried out within `transfer_timeout` is
//!    cancelled too. Never forced: forcing leadership away from a *live* leader could leave
//!    it acknowledging writes the new leader never recovers; a leader that dies instead
//!    is handled by 1.
//! 3. **Balance.** When nothing else is in flight, every live broker is ready, and the
//!    live brokers' partition counts
//!    differ by two or more for `balance_delay` without a break (a broker that just joined
//!    has settled; a broker shutting down has handed off and deregistered), request
//!    graceful transfers ([`placement::plan_moves`]), at most `transfers_max` at once. The
//!    current leader carries each out (`cluster/handoff.rs`, segment-writer's
//!    `leadership.rs`).
//!
//! Ready: a broker registers before it has replayed its WAL and started serving (that may
//! take seconds), so the driver probes each newly registered broker (a Kafka ApiVersions
//! round trip) and reports [`Event::BrokerReady`]; until then the broker is given nothing,
//! neither failed-over partitions nor its share.
//!
//! An action is not emitted again for the same partition version until `retry` has passed:
//! the driver's compare-and-swap (or the watch) shows its effect as a new version; a failed
//! one is retried after `retry`.

use super::placement::{self, Node, Slot};
use oxbow_metadata::{BrokerId, BrokerRegistration, PartitionState, TopicId, TopicMetadata};
use std::collections::{BTreeMap, BTreeSet};

/// Timings and bounds of the controller (all in milliseconds of the driver's clock).
#[derive(Clone, Debug)]
pub struct ControllerSettings {
    /// How long a requested transfer may stay unanswered by a live leader before it is
    /// cancelled (and possibly requested again by the balancer). Longer tolerates slow
    /// seals (an object-store hiccup); shorter frees a stuck partition for another plan.
    pub transfer_timeout_ms: u64,
    /// How long an imbalance must last before transfers are requested. Shorter gives a new
    /// broker its share sooner; longer avoids moving partitions to a broker that is only
    /// passing through (restarting, shutting down).
    pub balance_delay_ms: u64,
    /// Most transfers requested at once: bounds how much leadership is in motion.
    pub transfers_max: usize,
    /// How long an emitted action waits for its effect before it is emitted again.
    pub retry_ms: u64,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        ControllerSettings {
            transfer_timeout_ms: 10_000,
            balance_delay_ms: 2_000,
            transfers_max: 64,
            retry_ms: 3_000,
        }
    }
}

/// What the controller learns.
#[derive(Clone, Debug)]
pub enum Event {
    /// Every live broker (a full re-list).
    Brokers(Vec<BrokerRegistration>),
    /// A broker registered; a re-registration (a restart) makes it not ready again.
    BrokerJoined(BrokerRegistration),
    BrokerLeft(BrokerId),
    /// A live broker answered a probe: it serves requests.
    BrokerReady(BrokerId),
    /// Every topic (a full re-list).
    Topics(Vec<TopicMetadata>),
    /// A topic was created, grew, or was re-read.
    TopicChanged(TopicMetadata),
    TopicDeleted(TopicId),
    PartitionChanged(TopicId, PartitionState),
    /// Time passed (timeouts, the balance delay).
    Tick,
}

/// What the controller wants changed: one compare-and-swap of one partition, from
/// `expected` (its version is the compare) to [`Action::new_state`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Move leadership away from a dead broker (decision 1).
    Failover {
        topic_id: TopicId,
        expected: PartitionState,
        to: BrokerId,
    },
    /// Ask the live leader to hand the partition to `to` (decision 3).
    RequestTransfer {
        topic_id: TopicId,
        expected: PartitionState,
        to: BrokerId,
    },
    /// Withdraw a transfer request (decision 2).
    CancelTransfer {
        topic_id: TopicId,
        expected: PartitionState,
    },
}

impl Action {
    pub fn topic_id(&self) -> TopicId {
        match self {
            Action::Failover { topic_id, .. }
            | Action::RequestTransfer { topic_id, .. }
            | Action::CancelTransfer { topic_id, .. } => *topic_id,
        }
    }

    pub fn expected(&self) -> &PartitionState {
        match self {
            Action::Failover { expected, .. }
            | Action::RequestTransfer { expected, .. }
            | Action::CancelTransfer { expected, .. } => expected,
        }
    }

    /// The state to write (its `version` is set by the store).
    pub fn new_state(&self) -> PartitionState {
        match self {
            Action::Failover { expected, to, .. } => failover_state(expected, *to),
            Action::RequestTransfer { expected, to, .. } => PartitionState {
                transfer_to: Some(*to),
                ..expected.clone()
            },
            Action::CancelTransfer { expected, .. } => PartitionState {
                transfer_to: None,
                ..expected.clone()
            },
        }
    }
}

/// `state` led by `to` after its leader died: next epoch, the dead leader's tail to recover.
pub fn failover_state(state: &PartitionState, to: BrokerId) -> PartitionState {
    PartitionState {
        leader: to,
        leader_epoch: state.leader_epoch + 1,
        recover_from: state.recover_from.or(Some(state.leader)),
        transfer_to: None,
        ..state.clone()
    }
}

/// The controller's knowledge and bookkeeping.
pub struct ControllerCore {
    settings: ControllerSettings,
    brokers: BTreeMap<BrokerId, BrokerRegistration>,
    /// Live brokers known to serve requests.
    ready: BTreeSet<BrokerId>,
    topics: BTreeMap<TopicId, Vec<PartitionState>>,
    /// Nothing is decided before both have been listed once.
    brokers_listed: bool,
    topics_listed: bool,
    /// Per partition: the version an action was emitted for, and when.
    emitted: BTreeMap<Slot, (u64, u64)>,
    /// Per pending transfer: the version it was first seen at, and when.
    transfer_seen: BTreeMap<Slot, (u64, u64)>,
    /// Since when the live brokers have been out of balance (None: balanced).
    imbalanced_since_ms: Option<u64>,
}

impl ControllerCore {
    pub fn new(settings: ControllerSettings) -> ControllerCore {
        ControllerCore {
            settings,
            brokers: BTreeMap::new(),
            ready: BTreeSet::new(),
            topics: BTreeMap::new(),
            brokers_listed: false,
            topics_listed: false,
            emitted: BTreeMap::new(),
            transfer_seen: BTreeMap::new(),
            imbalanced_since_ms: None,
        }
    }

    /// Applies one event and returns the changes wanted now.
    pub fn step(&mut self, now_ms: u64, event: Event) -> Vec<Action> {
        self.step_all(now_ms, [event])
    }

    /// [`Self::step`] for several events at once: each is applied, then one decision is
    /// made. A decision looks at every partition, so a burst of thousands of partition
    /// changes (a failover's own results, an open storm) decided once costs O(partitions),
    /// not O(partitions²).
    pub fn step_all(
        &mut self,
        now_ms: u64,
        events: impl IntoIterator<Item = Event>,
    ) -> Vec<Action> {
        for event in events {
            self.apply(event);
        }
        if !(self.brokers_listed && self.topics_listed) {
            return Vec::new();
        }
        self.decide(now_ms)
    }

    /// A partition's state as last seen.
    pub fn partition(&self, topic_id: TopicId, partition: i32) -> Option<&PartitionState> {
        self.topics
            .get(&topic_id)?
            .get(usize::try_from(partition).ok()?)
    }

    fn apply(&mut self, event: Event) {
        match event {
            Event::Brokers(list) => {
                self.brokers = list.into_iter().map(|b| (b.broker_id, b)).collect();
                let brokers = &self.brokers;
                self.ready.retain(|b| brokers.contains_key(b));
                self.brokers_listed = true;
            }
            Event::BrokerJoined(b) => {
                self.ready.remove(&b.broker_id);
                self.brokers.insert(b.broker_id, b);
            }
            Event::BrokerLeft(id) => {
                self.brokers.remove(&id);
                self.ready.remove(&id);
            }
            Event::BrokerReady(id) => {
                if self.brokers.contains_key(&id) {
                    self.ready.insert(id);
                }
            }
            Event::Topics(list) => {
                let ids: Vec<TopicId> = list.iter().map(|t| t.topic_id).collect();
                self.topics.retain(|id, _| ids.contains(id));
                for t in list {
                    self.merge_topic(t);
                }
                self.topics_listed = true;
            }
            Event::TopicChanged(t) => self.merge_topic(t),
            Event::TopicDeleted(id) => {
                self.topics.remove(&id);
            }
            Event::PartitionChanged(topic_id, state) => {
                if let Some(slot) = self
                    .topics
                    .get_mut(&topic_id)
                    .and_then(|ps| ps.get_mut(usize::try_from(state.partition).ok()?))
                {
                    // Events are whole states; an older one (a re-list racing a watch
                    // event) must not overwrite a newer one.
                    if state.version >= slot.version {
                        *slot = state;
                    }
                }
            }
            Event::Tick => {}
        }
    }

    fn merge_topic(&mut self, t: TopicMetadata) {
        let entry = self.topics.entry(t.topic_id).or_default();
        let mut merged = t.partitions;
        for (i, p) in merged.iter_mut().enumerate() {
            if let Some(old) = entry.get(i) {
                if old.version > p.version {
                    *p = old.clone();
                }
            }
        }
        *entry = merged;
    }

    fn nodes(&self) -> Vec<Node> {
        self.brokers
            .values()
            .map(|b| Node::new(b.broker_id, b.az.as_deref()))
            .collect()
    }

    /// Live brokers not yet known to serve: the driver probes these.
    pub fn unready(&self) -> Vec<BrokerRegistration> {
        self.brokers
            .values()
            .filter(|b| !self.ready.contains(&b.broker_id))
            .cloned()
            .collect()
    }

    fn assignment(&self) -> BTreeMap<Slot, BrokerId> {
        self.topics
            .iter()
            .flat_map(|(topic_id, ps)| {
                ps.iter().map(move |p| {
                    (
                        Slot {
                            topic_id: *topic_id,
                            partition: p.partition,
                        },
                        p.leader,
                    )
                })
            })
            .collect()
    }

    /// Whether an action for `slot` at `version` is still waiting for its effect.
    fn in_flight(&self, slot: &Slot, version: u64, now_ms: u64) -> bool {
        self.emitted.get(slot).is_some_and(|(v, at)| {
            *v == version && now_ms.saturating_sub(*at) < self.settings.retry_ms
        })
    }

    fn emit(&mut self, out: &mut Vec<Action>, slot: Slot, action: Action, now_ms: u64) {
        self.emitted
            .insert(slot, (action.expected().version, now_ms));
        out.push(action);
    }

    fn decide(&mut self, now_ms: u64) -> Vec<Action> {
        let nodes = self.nodes();
        let ready_nodes: Vec<Node> = nodes
            .iter()
            .filter(|n| self.ready.contains(&n.id))
            .cloned()
            .collect();
        let assignment = self.assignment();
        // Forget bookkeeping of partitions that moved on (their version changed) or vanished.
        let current = |slot: &Slot| {
            self.partition(slot.topic_id, slot.partition)
                .map(|p| p.version)
        };
        let stale: Vec<Slot> = self
            .emitted
            .iter()
            .filter(|(slot, (v, _))| current(slot) != Some(*v))
            .map(|(s, _)| *s)
            .collect();
        for s in stale {
            self.emitted.remove(&s);
        }
        let mut out = Vec::new();

        // 1. Failover: every partition of a broker without a live lease, to ready brokers
        // (to any live one if none is ready yet). Partitions of live brokers that are not
        // ready are left out of the plan: they are not orphans.
        let (targets, plan_over) = if ready_nodes.is_empty() {
            (&nodes, assignment.clone())
        } else {
            let ready = &self.ready;
            let brokers = &self.brokers;
            let plan_over = assignment
                .iter()
                .filter(|(_, b)| ready.contains(b) || !brokers.contains_key(b))
                .map(|(s, b)| (*s, *b))
                .collect();
            (&ready_nodes, plan_over)
        };
        let orphans = placement::plan_moves(targets, &plan_over, 0);
        for m in &orphans {
            let Some(state) = self.partition(m.slot.topic_id, m.slot.partition).cloned() else {
                continue;
            };
            if self.in_flight(&m.slot, state.version, now_ms) {
                continue;
            }
            let to = state
                .transfer_to
                .filter(|t| self.brokers.contains_key(t))
                .unwrap_or(m.to);
            let action = Action::Failover {
                topic_id: m.slot.topic_id,
                expected: state,
                to,
            };
            self.emit(&mut out, m.slot, action, now_ms);
        }

        // 2. Requested transfers: cancel those that cannot or did not happen.
        let mut pending = 0usize;
        let mut seen_now = BTreeMap::new();
        for (slot, leader) in &assignment {
            let Some(state) = self.partition(slot.topic_id, slot.partition).cloned() else {
                continue;
            };
            let Some(target) = state.transfer_to else {
                continue;
            };
            if !self.brokers.contains_key(leader) {
                continue; // failover handles it
            }
            pending += 1;
            let since = match self.transfer_seen.get(slot) {
                Some((v, at)) if *v == state.version => *at,
                _ => now_ms,
            };
            seen_now.insert(*slot, (state.version, since));
            let hopeless = !self.brokers.contains_key(&target) || target == *leader;
            let timed_out = now_ms.saturating_sub(since) >= self.settings.transfer_timeout_ms;
            if (hopeless || timed_out) && !self.in_flight(slot, state.version, now_ms) {
                let action = Action::CancelTransfer {
                    topic_id: slot.topic_id,
                    expected: state,
                };
                self.emit(&mut out, *slot, action, now_ms);
            }
        }
        self.transfer_seen = seen_now;

        // 3. Balance, only when everything else is quiet.
        let quiet = orphans.is_empty()
            && pending == 0
            && out.is_empty()
            && self.emitted.is_empty()
            && ready_nodes.len() == nodes.len();
        let moves = if quiet {
            placement::plan_moves(&nodes, &assignment, self.settings.transfers_max)
        } else {
            Vec::new()
        };
        if moves.is_empty() {
            if quiet {
                self.imbalanced_since_ms = None;
            }
            return out;
        }
        let since = *self.imbalanced_since_ms.get_or_insert(now_ms);
        if now_ms.saturating_sub(since) < self.settings.balance_delay_ms {
            return out;
        }
        for m in moves {
            let Some(state) = self.partition(m.slot.topic_id, m.slot.partition).cloned() else {
                continue;
            };
            let action = Action::RequestTransfer {
                topic_id: m.slot.topic_id,
                expected: state,
                to: m.to,
            };
            self.emit(&mut out, m.slot, action, now_ms);
        }
        self.imbalanced_since_ms = None;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxbow_metadata::TopicConfigs;
    use oxbow_segment_writer::leadership::handoff_state::transferred_state;

    fn reg(id: BrokerId) -> BrokerRegistration {
        BrokerRegistration {
            broker_id: id,
            az: Some(format!("az{id}")),
            kafka_addr: format!("127.0.0.1:{}", 9000 + id),
            http_addr: String::new(),
            internal_addr: String::new(),
            listeners: Default::default(),
        }
    }

    fn topic(n: u128, leaders: &[BrokerId]) -> TopicMetadata {
        TopicMetadata {
            name: format!("t{n}"),
            topic_id: TopicId(uuid::Uuid::from_u128(n)),
            replication_factor: 1,
            configs: TopicConfigs::default(),
            partitions: leaders
                .iter()
                .enumerate()
                .map(|(p, b)| PartitionState::new(p as i32, *b))
                .collect(),
            created_at_ms: 0,
        }
    }

    fn settings() -> ControllerSettings {
        ControllerSettings {
            transfer_timeout_ms: 10_000,
            balance_delay_ms: 2_000,
            transfers_max: 64,
            retry_ms: 3_000,
        }
    }

    /// A controller that has listed brokers 1..=n and `topics`.
    fn listed(n: BrokerId, topics: Vec<TopicMetadata>) -> (ControllerCore, Vec<Action>) {
        let mut c = ControllerCore::new(settings());
        assert!(c
            .step(0, Event::Brokers((1..=n).map(reg).collect()))
            .is_empty());
        for b in 1..=n {
            assert!(c.step(0, Event::BrokerReady(b)).is_empty());
        }
        let actions = c.step(0, Event::Topics(topics));
        (c, actions)
    }

    /// What the driver does after a successful compare-and-swap.
    fn applied(c: &mut ControllerCore, now: u64, a: &Action) -> Vec<Action> {
        let mut s = a.new_state();
        s.version = a.expected().version + 1;
        c.step(now, Event::PartitionChanged(a.topic_id(), s))
    }

    #[test]
    fn nothing_happens_in_a_balanced_cluster() {
        let t = topic(1, &[1, 2, 3, 1, 2, 3]);
        let (mut c, actions) = listed(3, vec![t]);
        assert!(actions.is_empty());
        assert!(c.step(60_000, Event::Tick).is_empty());
    }

    #[test]
    fn nothing_is_decided_before_both_lists() {
        let mut c = ControllerCore::new(settings());
        assert!(c.step(0, Event::Topics(vec![topic(1, &[9])])).is_empty());
        assert!(c.step(0, Event::BrokerJoined(reg(1))).is_empty());
        assert_eq!(c.step(0, Event::Brokers(vec![reg(1)])).len(), 1);
    }

    #[test]
    fn a_dead_brokers_partitions_fail_over_at_once_with_recovery() {
        let t = topic(1, &[1, 2, 3, 1, 2, 3]);
        let (mut c, _) = listed(3, vec![t.clone()]);
        let actions = c.step(10, Event::BrokerLeft(3));
        assert_eq!(actions.len(), 2, "{actions:?}");
        for a in &actions {
            let Action::Failover { expected, to, .. } = a else {
                panic!("{a:?}");
            };
            assert_eq!(expected.leader, 3);
            assert!(*to == 1 || *to == 2);
            let next = a.new_state();
            assert_eq!(next.leader_epoch, expected.leader_epoch + 1);
            assert_eq!(next.recover_from, Some(3));
            assert_eq!(next.transfer_to, None);
        }
        // Spread over the survivors.
        let targets: Vec<_> = actions.iter().map(|a| a.new_state().leader).collect();
        assert_ne!(targets[0], targets[1]);
        // Not emitted again while in flight; again after the retry interval.
        assert!(c.step(20, Event::Tick).is_empty());
        assert_eq!(c.step(3_100, Event::Tick).len(), 2);
        // Once applied, nothing more (the survivors are balanced: 3 and 3).
        for a in &actions {
            applied(&mut c, 3_200, a);
        }
        assert!(c.step(60_000, Event::Tick).is_empty());
    }

    #[test]
    fn an_older_recover_from_is_kept() {
        let mut state = PartitionState::new(0, 2);
        state.recover_from = Some(1);
        assert_eq!(failover_state(&state, 3).recover_from, Some(1));
        state.recover_from = None;
        assert_eq!(failover_state(&state, 3).recover_from, Some(2));
        // A graceful transfer leaves nothing to recover from the old leader.
        assert_eq!(transferred_state(&state, 3).recover_from, None);
        assert_eq!(transferred_state(&state, 3).leader_epoch, 1);
    }

    #[test]
    fn failover_prefers_the_requested_transfer_target() {
        let mut t = topic(1, &[1, 2, 3]);
        t.partitions[0].transfer_to = Some(3);
        let (mut c, _) = listed(3, vec![t]);
        let actions = c.step(0, Event::BrokerLeft(1));
        assert_eq!(actions.len(), 1);
        assert_eq!(actions[0].new_state().leader, 3);
    }

    #[test]
    fn a_joining_broker_gets_its_share_by_graceful_transfer_after_the_delay() {
        let t = topic(1, &[1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3]);
        let (mut c, _) = listed(3, vec![t]);
        assert!(c.step(500, Event::BrokerJoined(reg(4))).is_empty());
        assert!(
            c.step(5_000, Event::Tick).is_empty(),
            "not ready: nothing moves"
        );
        assert_eq!(c.unready().len(), 1);
        assert!(c.step(1_000, Event::BrokerReady(4)).is_empty());
        assert!(
            c.step(2_500, Event::Tick).is_empty(),
            "within the balance delay"
        );
        let actions = c.step(3_000, Event::Tick);
        assert_eq!(actions.len(), 3, "{actions:?}");
        assert!(actions
            .iter()
            .all(|a| matches!(a, Action::RequestTransfer { to: 4, .. })));
        // The requests are seen; the leaders hand over; then all is quiet.
        let mut seen = Vec::new();
        for a in &actions {
            assert!(applied(&mut c, 3_100, a).is_empty());
            let mut s = a.new_state();
            s.version = a.expected().version + 1;
            seen.push((a.topic_id(), s));
        }
        for (topic_id, s) in seen {
            let mut moved = transferred_state(&s, 4);
            moved.version = s.version + 1;
            assert!(c
                .step(3_500, Event::PartitionChanged(topic_id, moved))
                .is_empty());
        }
        assert!(c.step(60_000, Event::Tick).is_empty());
    }

    #[test]
    fn a_restarting_broker_is_not_given_failed_over_partitions_before_it_is_ready() {
        let t = topic(1, &[1, 2, 3, 1, 2, 3]);
        let (mut c, _) = listed(3, vec![t]);
        // Broker 3 restarts (re-registers: not ready); broker 2 dies.
        assert!(c.step(0, Event::BrokerJoined(reg(3))).is_empty());
        let actions = c.step(10, Event::BrokerLeft(2));
        assert_eq!(actions.len(), 2);
        assert!(
            actions.iter().all(|a| a.new_state().leader == 1),
            "{actions:?}"
        );
        // Broker 3's own partitions are not orphans.
        assert!(actions.iter().all(|a| a.expected().leader == 2));
    }

    #[test]
    fn a_broker_passing_through_is_not_given_partitions() {
        let t = topic(1, &[1, 2, 3, 1, 2, 3]);
        let (mut c, _) = listed(3, vec![t]);
        assert!(c.step(0, Event::BrokerJoined(reg(4))).is_empty());
        assert!(c.step(0, Event::BrokerReady(4)).is_empty());
        assert!(c.step(1_000, Event::BrokerLeft(4)).is_empty());
        assert!(c.step(10_000, Event::Tick).is_empty());
    }

    #[test]
    fn unanswered_transfers_are_cancelled_not_forced() {
        let mut t = topic(1, &[1, 2, 3]);
        t.partitions[0].transfer_to = Some(2);
        let (mut c, actions) = listed(3, vec![t]);
        assert!(actions.is_empty());
        assert!(c.step(9_000, Event::Tick).is_empty());
        let actions = c.step(10_001, Event::Tick);
        assert_eq!(actions.len(), 1);
        assert!(matches!(actions[0], Action::CancelTransfer { .. }));
        let next = actions[0].new_state();
        assert_eq!((next.leader, next.transfer_to), (1, None));
    }

    #[test]
    fn a_transfer_to_a_dead_broker_is_cancelled_at_once() {
        let mut t = topic(1, &[1, 2, 3]);
        t.partitions[0].transfer_to = Some(3);
        let (mut c, _) = listed(3, vec![t]);
        let actions = c.step(5, Event::BrokerLeft(3));
        // Broker 3's own partition fails over; the request to it is withdrawn.
        assert_eq!(actions.len(), 2, "{actions:?}");
        assert!(actions.iter().any(
            |a| matches!(a, Action::CancelTransfer { expected, .. } if expected.partition == 0)
        ));
    }

    #[test]
    fn older_states_do_not_overwrite_newer_ones() {
        let t = topic(1, &[1]);
        let (mut c, _) = listed(2, vec![t.clone()]);
        let mut newer = t.partitions[0].clone();
        newer.leader = 2;
        newer.version = 5;
        c.step(0, Event::PartitionChanged(t.topic_id, newer.clone()));
        // A re-list that read before the change.
        c.step(0, Event::Topics(vec![t.clone()]));
        assert_eq!(c.partition(t.topic_id, 0), Some(&newer));
        c.step(0, Event::TopicDeleted(t.topic_id));
        assert_eq!(c.partition(t.topic_id, 0), None);
    }

    #[test]
    fn a_conflicting_action_is_decided_again_from_the_new_state() {
        let t = topic(1, &[3]);
        let (mut c, _) = listed(2, vec![t.clone()]);
        let a = c.step(0, Event::BrokerLeft(3));
        assert!(
            a.is_empty(),
            "3 was never live: already failed over at listing"
        );
        let (mut c, first) = listed(2, vec![t.clone()]);
        assert_eq!(first.len(), 1);
        // Someone else moved it meanwhile (the CAS lost): the re-read shows broker 2 leads.
        let mut other = t.partitions[0].clone();
        other.leader = 2;
        other.leader_epoch = 1;
        other.version = 1;
        let mut reread = t.clone();
        reread.partitions = vec![other];
        assert!(c.step(10, Event::TopicChanged(reread)).is_empty());
    }
}
