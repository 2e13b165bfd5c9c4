//! The cluster: several brokers sharing one metadata service and one object store.
//!
//! Responsibility: who leads which partition, who coordinates which consumer group, and
//! moving leadership when brokers come and go — without copying data, because every
//! sealed byte is in the object store and only a WAL tail is local.
//!
//! # Layout
//! - [`placement`]: pure rules — leaders for new partitions, the moves that rebalance,
//!   the coordinator of a group (rendezvous hashing).
//! - [`controller_state`]: the controller's pure core, `step(event) -> Vec<Action>`: failover
//!   of a dead broker's partitions, graceful-transfer requests for balance, their timeouts.
//! - [`controller`]: its driver: campaign for the post (every broker), and while holding it
//!   feed the core from broker/topic watches plus a periodic full re-list, and apply its
//!   actions by compare-and-swap.
//! - [`follower`]: every broker's view of the cluster — live brokers (for Metadata,
//!   FindCoordinator) and topics with their leaders (the topic cache) — from watches plus
//!   re-lists; it forgets partitions this broker no longer leads and passes transfer
//!   requests addressed to this broker's partitions to [`handoff`].
//! - [`handoff`]: graceful transfer by the current leader — which partitions go where (a
//!   queue of `transfer_to` requests; on SIGTERM, everything led here, placed); the storage
//!   steps (gate, durability, seal, checks, CAS at epoch + 1, forget) are segment-writer's
//!   `Leadership::hand_off`.
//! - [`history_state`]: pure choice of the revision the metadata service's history may be
//!   compacted to (the newest sample at least `--metadata-history-retention` old);
//!   [`history`]: its driver (every broker samples, the controller compacts) and the
//!   metadata footprint on `/metrics`.
//!
//! Lifecycle: `server.rs` spawns the follower, the handoff worker, the controller and the
//! history task on the broker's `TaskTracker`; the follower and handoff worker stop with the listeners, the
//! controller stops (resigning the post) before the SIGTERM handoff so it does not fight it.

pub mod controller;
pub mod controller_state;
pub mod follower;
pub mod handoff;
pub mod history;
pub mod history_state;
pub mod placement;
pub mod reclaim;
pub mod watch_loop;
pub mod watch_metrics;

use oxbow_metadata::{BrokerId, BrokerRegistration};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::RwLock;

/// This broker's view of the live brokers and of the controller, kept current by
/// [`follower::run_membership`] and [`controller::run_controller`]. Cheap to read on every
/// request.
pub struct ClusterView {
    me: BrokerId,
    brokers: RwLock<BTreeMap<BrokerId, BrokerRegistration>>,
    /// The controller's id; -1 when unknown.
    controller: AtomicI32,
    /// Each live broker's WAL replicas and in-sync replicas as last recorded
    /// (`follower::run_wal_sets`): a partition's replicas and ISR in Metadata.
    wal_sets: RwLock<BTreeMap<BrokerId, WalCopies>>,
    /// How far behind the metadata service this view and the controller are.
    pub watch_metrics: watch_metrics::WatchMetrics,
}

/// A broker's WAL replicas and the in-sync ones among them, as recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WalCopies {
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    /// Brokers that left `replicas` while not live (their zone was lost and the broker
    /// re-chose its replicas among the survivors), oldest first, as this view saw it; a
    /// member is forgotten once it is live again. Metadata lists them as offline replicas
    /// of a partition short of copies ([`ClusterView::partition_replicas`]).
    pub lost: Vec<BrokerId>,
}

/// Most lost replicas remembered per broker (the replication factor's own bound).
const LOST_MAX: usize = 16;

/// `next`'s lost members, given the copies recorded `before` it: those already lost and
/// the replicas dropped since, unless live again or chosen again.
fn lost_members(
    leader: BrokerId,
    before: &WalCopies,
    next: &WalCopies,
    live: impl Fn(BrokerId) -> bool,
) -> Vec<BrokerId> {
    let mut lost: Vec<BrokerId> = Vec::new();
    for b in before.lost.iter().chain(&before.replicas).copied() {
        if b != leader && !live(b) && !next.replicas.contains(&b) && !lost.contains(&b) {
            lost.push(b);
        }
    }
    let excess = lost.len().saturating_sub(LOST_MAX);
    lost.drain(..excess);
    lost
}

/// A partition's replicas as Oxbow reports them (Metadata, the v3 partitions endpoint,
/// the console): its leader and the brokers its leader's WAL is replicated to, and — while
/// those are fewer than the copies wanted — the replicas lost since (decision 33).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionReplicas {
    /// Whether the leader holds a live lease (this broker always does while it answers).
    pub leader_live: bool,
    /// The leader first, then its WAL replicas, then lost ones ([`WalCopies::lost`], the
    /// most recently lost first) until there are as many as the copies wanted.
    pub replicas: Vec<BrokerId>,
    /// The leader and the live WAL replicas recorded in sync; empty while the leader is
    /// not live (nothing can be acknowledged then).
    pub isr: Vec<BrokerId>,
    /// Replicas without a live lease: the leader itself when it is not live, then WAL
    /// replicas that are not.
    pub offline: Vec<BrokerId>,
}

impl ClusterView {
    /// A view holding only `brokers` (this broker's own registration among them once
    /// registered).
    pub fn new(me: BrokerId, brokers: Vec<BrokerRegistration>) -> ClusterView {
        ClusterView {
            me,
            brokers: RwLock::new(brokers.into_iter().map(|b| (b.broker_id, b)).collect()),
            controller: AtomicI32::new(-1),
            wal_sets: RwLock::new(BTreeMap::new()),
            watch_metrics: Default::default(),
        }
    }

    /// Replaces the recorded WAL replica sets (a full re-read), carrying each broker's
    /// lost replicas over ([`WalCopies::lost`]; `sets`' own are ignored).
    pub fn set_wal_copies(&self, mut sets: BTreeMap<BrokerId, WalCopies>) {
        // Lock order: `wal_sets`, then `brokers` (as in `partition_replicas`).
        let Ok(mut m) = self.wal_sets.write() else {
            return;
        };
        let live = |b: BrokerId| b == self.me || self.is_live(b);
        for (leader, next) in sets.iter_mut() {
            let before = m.get(leader).cloned().unwrap_or_default();
            next.lost = lost_members(*leader, &before, next, live);
        }
        *m = sets;
    }

    /// `leader`'s recorded WAL replicas and in-sync ones (none recorded: no replicas).
    pub fn wal_copies(&self, leader: BrokerId) -> WalCopies {
        self.wal_sets
            .read()
            .ok()
            .and_then(|m| m.get(&leader).cloned())
            .unwrap_or_default()
    }

    pub fn me(&self) -> BrokerId {
        self.me
    }

    /// The replicas, ISR and offline replicas of a partition `leader` leads, from its
    /// recorded WAL copies and the live brokers; `wanted` is how many copies it should
    /// have (`metrics::health::wanted_copies`), so a partition whose leader re-chose fewer
    /// replicas after losing a zone keeps listing the lost one, offline and not in sync.
    pub fn partition_replicas(&self, leader: BrokerId, wanted: usize) -> PartitionReplicas {
        let copies = self.wal_copies(leader);
        let live = |b: &BrokerId| *b == self.me || self.is_live(*b);
        let leader_live = live(&leader);
        let mut replicas: Vec<BrokerId> = std::iter::once(leader)
            .chain(copies.replicas.iter().copied())
            .collect();
        for b in copies.lost.iter().rev() {
            if replicas.len() >= wanted {
                break;
            }
            if !replicas.contains(b) {
                replicas.push(*b);
            }
        }
        let offline_copies: Vec<BrokerId> = replicas
            .iter()
            .skip(1)
            .filter(|b| !live(b))
            .copied()
            .collect();
        PartitionReplicas {
            leader_live,
            replicas,
            isr: if leader_live {
                std::iter::once(leader)
                    .chain(copies.isr.iter().copied().filter(|b| live(b)))
                    .collect()
            } else {
                Vec::new()
            },
            offline: (!leader_live)
                .then_some(leader)
                .into_iter()
                .chain(offline_copies)
                .collect(),
        }
    }

    /// Replaces the live brokers (a full re-list). Returns whether the set of ids changed.
    pub fn set_brokers(&self, brokers: Vec<BrokerRegistration>) -> bool {
        let next: BTreeMap<_, _> = brokers.into_iter().map(|b| (b.broker_id, b)).collect();
        match self.brokers.write() {
            Ok(mut m) => {
                let changed = !m.keys().eq(next.keys());
                *m = next;
                changed
            }
            Err(_) => false,
        }
    }

    /// A broker registered (or re-registered). Returns whether it is new to the view.
    pub fn joined(&self, b: BrokerRegistration) -> bool {
        self.brokers
            .write()
            .map(|mut m| m.insert(b.broker_id, b).is_none())
            .unwrap_or(false)
    }

    /// A broker's lease ended. Returns whether it was in the view.
    pub fn left(&self, id: BrokerId) -> bool {
        self.brokers
            .write()
            .map(|mut m| m.remove(&id).is_some())
            .unwrap_or(false)
    }

    /// The live brokers, by id.
    pub fn brokers(&self) -> Vec<BrokerRegistration> {
        self.brokers
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Ids of the live brokers, sorted.
    pub fn live_ids(&self) -> Vec<BrokerId> {
        self.brokers
            .read()
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default()
    }

    pub fn is_live(&self, id: BrokerId) -> bool {
        self.brokers
            .read()
            .map(|m| m.contains_key(&id))
            .unwrap_or(false)
    }

    pub fn broker(&self, id: BrokerId) -> Option<BrokerRegistration> {
        self.brokers.read().ok()?.get(&id).cloned()
    }

    /// The placement view of the live brokers.
    pub fn nodes(&self) -> Vec<placement::Node> {
        self.brokers()
            .iter()
            .map(|b| placement::Node::new(b.broker_id, b.az.as_deref()))
            .collect()
    }

    /// The broker coordinating `group_id`. Before this broker has seen any registration
    /// (the first moments of start-up) it is itself: a single node must never answer
    /// NOT_COORDINATOR for its own groups.
    pub fn coordinator_for(&self, group_id: &str) -> BrokerId {
        let live = self.live_ids();
        placement::coordinator_for(group_id, &live).unwrap_or(self.me)
    }

    pub fn controller(&self) -> Option<BrokerId> {
        match self.controller.load(Ordering::Acquire) {
            -1 => None,
            id => Some(id),
        }
    }

    pub fn set_controller(&self, id: Option<BrokerId>) {
        self.controller.store(id.unwrap_or(-1), Ordering::Release);
    }
}

/// `host:port` → (host, port), for a registration's `kafka_addr`.
pub fn split_host_port(addr: &str) -> Option<(String, i32)> {
    let (host, port) = addr.rsplit_once(':')?;
    let port: i32 = port.parse().ok()?;
    Some((host.trim_matches(['[', ']']).to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn the_view_follows_joins_and_departures() {
        let v = ClusterView::new(1, vec![reg(1)]);
        assert_eq!(v.coordinator_for("g"), 1);
        assert!(v.joined(reg(2)));
        assert!(!v.joined(reg(2)));
        assert_eq!(v.live_ids(), vec![1, 2]);
        assert!(v.left(2));
        assert!(!v.is_live(2));
        assert!(v.set_brokers(vec![reg(1), reg(3)]));
        assert!(!v.set_brokers(vec![reg(3), reg(1)]));
        // Nobody registered yet: this broker coordinates.
        let empty = ClusterView::new(7, Vec::new());
        assert_eq!(empty.coordinator_for("g"), 7);
        assert_eq!(empty.controller(), None);
        empty.set_controller(Some(3));
        assert_eq!(empty.controller(), Some(3));
    }

    #[test]
    fn partition_replicas_follow_wal_copies_and_leases() {
        let v = ClusterView::new(1, vec![reg(1), reg(2), reg(3)]);
        v.set_wal_copies([(1, copies(vec![2, 3], vec![2]))].into());
        let r = v.partition_replicas(1, 3);
        assert!(r.leader_live);
        assert_eq!(
            (r.replicas, r.isr, r.offline),
            (vec![1, 2, 3], vec![1, 2], vec![])
        );
        assert!(v.left(2));
        let r = v.partition_replicas(1, 3);
        assert_eq!((r.isr, r.offline), (vec![1], vec![2]));
        // A leader without a lease: no ISR, itself offline first.
        let r = v.partition_replicas(3, 3);
        assert!(r.leader_live);
        assert!(v.left(3));
        let r = v.partition_replicas(3, 3);
        assert_eq!((r.leader_live, r.isr, r.offline), (false, vec![], vec![3]));
    }

    fn copies(replicas: Vec<BrokerId>, isr: Vec<BrokerId>) -> WalCopies {
        WalCopies {
            replicas,
            isr,
            lost: Vec::new(),
        }
    }

    #[test]
    fn a_lost_zone_stays_listed_after_the_leader_re_chooses_its_replicas() {
        let v = ClusterView::new(1, vec![reg(1), reg(2), reg(3), reg(4)]);
        v.set_wal_copies([(1, copies(vec![2, 3], vec![2, 3]))].into());
        // Zone of 3 lost: out of the ISR first, then out of the re-chosen replicas.
        assert!(v.left(3));
        v.set_wal_copies([(1, copies(vec![2, 3], vec![2]))].into());
        v.set_wal_copies([(1, copies(vec![2], vec![2]))].into());
        let r = v.partition_replicas(1, 3);
        assert_eq!(
            (r.replicas, r.isr, r.offline),
            (vec![1, 2, 3], vec![1, 2], vec![3])
        );
        // Short of more than one copy: the most recently lost first, up to `wanted`.
        assert!(v.left(2));
        v.set_wal_copies([(1, copies(vec![], vec![]))].into());
        assert_eq!(v.partition_replicas(1, 3).replicas, vec![1, 2, 3]);
        assert_eq!(v.partition_replicas(1, 2).replicas, vec![1, 2]);
        // A single node wants one copy: nothing padded.
        assert_eq!(v.partition_replicas(1, 1).replicas, vec![1]);
        // A replacement chosen in a lost one's place: full again, nothing padded.
        v.set_wal_copies([(1, copies(vec![4], vec![4]))].into());
        assert_eq!(v.partition_replicas(1, 2).replicas, vec![1, 4]);
        assert_eq!(v.partition_replicas(1, 3).replicas, vec![1, 4, 2]);
        // A lost broker that is live again is forgotten: the leader chose without it.
        assert!(v.joined(reg(2)));
        assert!(v.joined(reg(3)));
        v.set_wal_copies([(1, copies(vec![4], vec![4]))].into());
        let r = v.partition_replicas(1, 3);
        assert_eq!((r.replicas, r.offline), (vec![1, 4], vec![]));
    }

    #[test]
    fn addresses_split() {
        assert_eq!(split_host_port("h:1"), Some(("h".into(), 1)));
        assert_eq!(split_host_port("[::1]:9092"), Some(("::1".into(), 9092)));
        assert_eq!(split_host_port("nope"), None);
    }
}
