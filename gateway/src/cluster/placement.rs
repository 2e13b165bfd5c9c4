//! Placement: which live broker leads which partition. Pure functions, no I/O, no clock,
//! no randomness: the same inputs give the same answer on every broker and every run.
//!
//! Three questions, one set of rules:
//! - [`place_new`]: leaders for a new topic's (or new) partitions. Each partition goes to the
//!   broker leading the fewest of *this topic's* partitions (a topic's load spreads over
//!   every broker), then the fewest partitions overall, then — so consecutive partitions
//!   alternate zones — a broker outside the previous partition's zone, then the lowest id.
//! - [`plan_moves`]: the moves that bring an assignment back to balance — every partition of
//!   a broker that is not live must move ("orphans"; failover, to the least loaded live
//!   brokers), and while the most loaded
//!   live broker leads two or more partitions more than the least loaded one, one partition
//!   moves from the first to the second. That is the fewest moves that balance the counts:
//!   a broker joining takes only its fair share, a broker leaving gives away only its own.
//! - [`coordinator_for`]: the broker coordinating a consumer group (rendezvous hashing).
//!
//! Zones: a broker without `--az` is a zone of its own (the same rule as WAL replica
//! placement), so AZ-awareness never groups unrelated brokers together.

use oxbow_metadata::{BrokerId, PartitionId, TopicId};
use std::collections::{BTreeMap, BTreeSet};

/// A live broker as placement sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub id: BrokerId,
    /// The broker's availability zone; `None` is a zone of its own.
    pub az: Option<String>,
}

impl Node {
    pub fn new(id: BrokerId, az: Option<&str>) -> Node {
        Node {
            id,
            az: az.map(str::to_string),
        }
    }

    fn zone(&self) -> Zone<'_> {
        match &self.az {
            Some(z) => Zone::Named(z),
            None => Zone::Alone(self.id),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Zone<'a> {
    Named(&'a str),
    Alone(BrokerId),
}

/// One partition of the cluster, ordered by topic then partition (the order every
/// deterministic choice below breaks ties in).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot {
    pub topic_id: TopicId,
    pub partition: PartitionId,
}

/// A partition moving from one broker to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    pub slot: Slot,
    pub from: BrokerId,
    pub to: BrokerId,
    /// `from` is not live: the partition is orphaned and moves by failover, not by a
    /// graceful transfer.
    pub orphan: bool,
}

/// Leaders for `count` new partitions of one topic.
///
/// `nodes`: the live brokers (any order). `load`: how many partitions each broker leads now,
/// over all topics (missing = 0). `existing`: the leaders of the topic's partitions that
/// already exist (empty for a new topic), in partition order. Returns one leader per new
/// partition, in partition order; empty if there is no live broker.
pub fn place_new(
    nodes: &[Node],
    load: &BTreeMap<BrokerId, usize>,
    existing: &[BrokerId],
    count: usize,
) -> Vec<BrokerId> {
    let mut nodes: Vec<&Node> = nodes.iter().collect();
    nodes.sort_by_key(|n| n.id);
    nodes.dedup_by_key(|n| n.id);
    if nodes.is_empty() {
        return Vec::new();
    }
    let mut load: BTreeMap<BrokerId, usize> = nodes
        .iter()
        .map(|n| (n.id, load.get(&n.id).copied().unwrap_or(0)))
        .collect();
    let mut in_topic: BTreeMap<BrokerId, usize> = BTreeMap::new();
    for b in existing {
        *in_topic.entry(*b).or_default() += 1;
    }
    let zone_of = |id: BrokerId| nodes.iter().find(|n| n.id == id).map(|n| n.zone());
    let mut previous_zone = existing.last().and_then(|b| zone_of(*b));
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let chosen = nodes
            .iter()
            .min_by_key(|n| {
                (
                    in_topic.get(&n.id).copied().unwrap_or(0),
                    load.get(&n.id).copied().unwrap_or(0),
                    Some(n.zone()) == previous_zone,
                    n.id,
                )
            })
            .expect("nodes is not empty");
        *in_topic.entry(chosen.id).or_default() += 1;
        *load.entry(chosen.id).or_default() += 1;
        previous_zone = Some(chosen.zone());
        out.push(chosen.id);
    }
    out
}

/// The moves that make `assignment` (every partition and its current leader) led only by
/// `nodes` and balanced (see the module docs), at most `max_moves` of them. Orphans come
/// first and are never left out for lack of room; balancing moves fill what `max_moves`
/// leaves. Applying every returned move and calling again returns nothing, unless
/// `max_moves` cut the plan short.
pub fn plan_moves(
    nodes: &[Node],
    assignment: &BTreeMap<Slot, BrokerId>,
    max_moves: usize,
) -> Vec<Move> {
    let live: BTreeSet<BrokerId> = nodes.iter().map(|n| n.id).collect();
    if live.is_empty() {
        return Vec::new();
    }
    let mut state = Loads::new(&live, assignment);
    let mut moves = Vec::new();

    // Orphans: every one moves, to the broker leading the fewest partitions (so no move
    // is wasted: orphans fill the gaps first), then the fewest of its topic, then the
    // lowest id.
    let orphans: Vec<(Slot, BrokerId)> = assignment
        .iter()
        .filter(|(_, b)| !live.contains(b))
        .map(|(s, b)| (*s, *b))
        .collect();
    for (slot, from) in orphans {
        let to = *live
            .iter()
            .min_by_key(|b| (state.load(**b), state.in_topic(**b, slot.topic_id), **b))
            .expect("live is not empty");
        state.assign(slot, None, to);
        moves.push(Move {
            slot,
            from,
            to,
            orphan: true,
        });
    }

    // Balance: most loaded → least loaded while they differ by two or more.
    while moves.len() < max_moves {
        let (Some(src), Some(dst)) = (state.most_loaded(), state.least_loaded()) else {
            break;
        };
        if state.load(src) < state.load(dst) + 2 {
            break;
        }
        // The partition whose move spreads its topic best: most of its topic on the
        // source, fewest on the destination; ties by slot order.
        let Some(slot) = state.led_by(src).iter().copied().max_by_key(|s| {
            let spread =
                state.in_topic(src, s.topic_id) as i64 - state.in_topic(dst, s.topic_id) as i64;
            (spread, std::cmp::Reverse(*s))
        }) else {
            break;
        };
        state.assign(slot, Some(src), dst);
        moves.push(Move {
            slot,
            from: src,
            to: dst,
            orphan: false,
        });
    }
    moves
}

/// The live broker that coordinates `group_id`: rendezvous (highest random weight) hashing
/// over the live brokers' ids. Every broker with the same view of live brokers picks the
/// same one, and a broker joining or leaving moves only the groups it wins or held (a plain
/// `hash % n` would move almost every group). `None` if `live` is empty.
pub fn coordinator_for(group_id: &str, live: &[BrokerId]) -> Option<BrokerId> {
    live.iter()
        .copied()
        .max_by_key(|b| (rendezvous_weight(group_id, *b), std::cmp::Reverse(*b)))
}

/// A fixed, version-independent hash (FNV-1a, then a splitmix64 finaliser to spread the
/// bits): every broker, whatever Rust it was built with, computes the same weight.
fn rendezvous_weight(key: &str, broker: BrokerId) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.as_bytes().iter().chain(broker.to_le_bytes().iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Per-broker counts while a plan is being made.
struct Loads {
    /// Slots each live broker leads.
    led: BTreeMap<BrokerId, BTreeSet<Slot>>,
    /// (broker, topic) → partitions of the topic the broker leads.
    topic_counts: BTreeMap<(BrokerId, TopicId), usize>,
}

impl Loads {
    fn new(live: &BTreeSet<BrokerId>, assignment: &BTreeMap<Slot, BrokerId>) -> Loads {
        let mut loads = Loads {
            led: live.iter().map(|b| (*b, BTreeSet::new())).collect(),
            topic_counts: BTreeMap::new(),
        };
        for (slot, b) in assignment {
            if live.contains(b) {
                loads.add(*slot, *b);
            }
        }
        loads
    }

    fn add(&mut self, slot: Slot, b: BrokerId) {
        self.led.entry(b).or_default().insert(slot);
        *self.topic_counts.entry((b, slot.topic_id)).or_default() += 1;
    }

    fn assign(&mut self, slot: Slot, from: Option<BrokerId>, to: BrokerId) {
        if let Some(from) = from {
            if let Some(set) = self.led.get_mut(&from) {
                set.remove(&slot);
            }
            if let Some(c) = self.topic_counts.get_mut(&(from, slot.topic_id)) {
                *c = c.saturating_sub(1);
            }
        }
        self.add(slot, to);
    }

    fn load(&self, b: BrokerId) -> usize {
        self.led.get(&b).map_or(0, BTreeSet::len)
    }

    fn in_topic(&self, b: BrokerId, t: TopicId) -> usize {
        self.topic_counts.get(&(b, t)).copied().unwrap_or(0)
    }

    fn led_by(&self, b: BrokerId) -> Vec<Slot> {
        self.led
            .get(&b)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Ties: the lowest id.
    fn most_loaded(&self) -> Option<BrokerId> {
        self.led
            .iter()
            .max_by_key(|(b, s)| (s.len(), std::cmp::Reverse(**b)))
            .map(|(b, _)| *b)
    }

    /// Ties: the lowest id.
    fn least_loaded(&self) -> Option<BrokerId> {
        self.led
            .iter()
            .min_by_key(|(b, s)| (s.len(), **b))
            .map(|(b, _)| *b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(n: u128) -> TopicId {
        TopicId(uuid::Uuid::from_u128(n))
    }

    fn nodes(spec: &[(BrokerId, &str)]) -> Vec<Node> {
        spec.iter()
            .map(|(id, az)| Node::new(*id, Some(az)))
            .collect()
    }

    fn three() -> Vec<Node> {
        nodes(&[(1, "az1"), (2, "az2"), (3, "az3")])
    }

    fn loads_of(assignment: &BTreeMap<Slot, BrokerId>, live: &[Node]) -> BTreeMap<BrokerId, usize> {
        let mut out: BTreeMap<BrokerId, usize> = live.iter().map(|n| (n.id, 0)).collect();
        for b in assignment.values() {
            *out.entry(*b).or_default() += 1;
        }
        out
    }

    fn apply(assignment: &mut BTreeMap<Slot, BrokerId>, moves: &[Move]) {
        for m in moves {
            assert_eq!(
                assignment.get(&m.slot),
                Some(&m.from),
                "{m:?} moves from its leader"
            );
            assignment.insert(m.slot, m.to);
        }
    }

    fn assignment_of(topic_id: TopicId, leaders: &[BrokerId]) -> BTreeMap<Slot, BrokerId> {
        leaders
            .iter()
            .enumerate()
            .map(|(p, b)| {
                (
                    Slot {
                        topic_id,
                        partition: p as PartitionId,
                    },
                    *b,
                )
            })
            .collect()
    }

    #[test]
    fn a_new_topic_spreads_evenly_and_alternates_zones() {
        let leaders = place_new(&three(), &BTreeMap::new(), &[], 12);
        assert_eq!(leaders, vec![1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3]);
        // Two brokers share az1: consecutive partitions still change zone where they can.
        let four = nodes(&[(1, "az1"), (2, "az2"), (3, "az3"), (4, "az1")]);
        let leaders = place_new(&four, &BTreeMap::new(), &[], 4);
        assert_eq!(leaders, vec![1, 2, 3, 4]);
        let leaders = place_new(&four, &BTreeMap::new(), &[], 8);
        for pair in leaders.windows(2) {
            let zone = |b: BrokerId| if b == 4 { 1 } else { b };
            assert_ne!(zone(pair[0]), zone(pair[1]), "{leaders:?}");
        }
    }

    #[test]
    fn a_new_topic_starts_on_the_least_loaded_brokers() {
        let load = BTreeMap::from([(1, 5), (2, 5), (3, 4)]);
        assert_eq!(place_new(&three(), &load, &[], 1), vec![3]);
        // Spread within the topic comes first, then overall load.
        assert_eq!(place_new(&three(), &load, &[], 3), vec![3, 1, 2]);
        assert!(place_new(&[], &load, &[], 3).is_empty());
    }

    #[test]
    fn new_partitions_continue_the_topic_spread() {
        let leaders = place_new(&three(), &BTreeMap::new(), &[1, 2], 4);
        assert_eq!(leaders, vec![3, 1, 2, 3]);
        // Existing leaders that are not live count for nothing.
        let leaders = place_new(&three(), &BTreeMap::new(), &[9, 9], 3);
        assert_eq!(leaders.iter().collect::<BTreeSet<_>>().len(), 3);
    }

    #[test]
    fn without_zones_each_broker_is_its_own_zone() {
        let plain = vec![Node::new(1, None), Node::new(2, None)];
        assert_eq!(
            place_new(&plain, &BTreeMap::new(), &[], 4),
            vec![1, 2, 1, 2]
        );
    }

    #[test]
    fn a_dead_broker_gives_away_exactly_its_partitions() {
        let t = topic(1);
        let a = assignment_of(t, &[1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3]);
        let live = nodes(&[(1, "az1"), (2, "az2")]);
        let moves = plan_moves(&live, &a, 0);
        assert_eq!(moves.len(), 4);
        assert!(moves.iter().all(|m| m.from == 3 && m.orphan));
        let mut after = a.clone();
        apply(&mut after, &moves);
        assert_eq!(loads_of(&after, &live), BTreeMap::from([(1, 6), (2, 6)]));
        assert!(plan_moves(&live, &after, 100).is_empty());
    }

    #[test]
    fn a_joining_broker_takes_its_fair_share_from_each() {
        let t = topic(1);
        let a = assignment_of(t, &[1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3]);
        let four = nodes(&[(1, "az1"), (2, "az2"), (3, "az3"), (4, "az1")]);
        let moves = plan_moves(&four, &a, 100);
        assert_eq!(moves.len(), 3, "{moves:?}");
        assert!(moves.iter().all(|m| m.to == 4 && !m.orphan));
        let froms: BTreeSet<_> = moves.iter().map(|m| m.from).collect();
        assert_eq!(froms, BTreeSet::from([1, 2, 3]));
        let mut after = a.clone();
        apply(&mut after, &moves);
        assert!(plan_moves(&four, &after, 100).is_empty());
        // A cap leaves the rest for the next round.
        assert_eq!(plan_moves(&four, &a, 1).len(), 1);
    }

    #[test]
    fn balancing_spreads_each_topic() {
        // Two topics of 4 partitions on brokers 1 and 2; broker 3 joins: it should get one
        // of each topic, not two of one.
        let (t1, t2) = (topic(1), topic(2));
        let mut a = assignment_of(t1, &[1, 2, 1, 2]);
        a.extend(assignment_of(t2, &[1, 2, 1, 2]));
        let moves = plan_moves(&three(), &a, 100);
        let topics: BTreeSet<_> = moves.iter().map(|m| m.slot.topic_id).collect();
        assert_eq!(moves.len(), 2);
        assert_eq!(topics.len(), 2, "{moves:?}");
    }

    #[test]
    fn coordinators_are_deterministic_and_move_minimally() {
        let live = [1, 2, 3];
        let groups: Vec<String> = (0..600).map(|i| format!("group-{i}")).collect();
        let before: Vec<_> = groups.iter().map(|g| coordinator_for(g, &live)).collect();
        // Order of the live list does not matter.
        let shuffled: Vec<_> = groups
            .iter()
            .map(|g| coordinator_for(g, &[3, 1, 2]))
            .collect();
        assert_eq!(before, shuffled);
        // Roughly even.
        for b in live {
            let n = before.iter().filter(|c| **c == Some(b)).count();
            assert!(
                (150..=250).contains(&n),
                "broker {b} coordinates {n} of 600"
            );
        }
        // Broker 3 leaves: only its groups move.
        let after: Vec<_> = groups.iter().map(|g| coordinator_for(g, &[1, 2])).collect();
        for (b, a) in before.iter().zip(&after) {
            if *b != Some(3) {
                assert_eq!(b, a);
            }
        }
        // Broker 4 joins: groups only move to it.
        let joined: Vec<_> = groups
            .iter()
            .map(|g| coordinator_for(g, &[1, 2, 3, 4]))
            .collect();
        for (b, j) in before.iter().zip(&joined) {
            assert!(b == j || *j == Some(4));
        }
        assert_eq!(coordinator_for("g", &[]), None);
        // Pinned: the hash must not change between releases (brokers of two versions
        // must agree during a rolling deploy).
        assert_eq!(
            coordinator_for("orders-app", &[1, 2, 3]),
            coordinator_for("orders-app", &[3, 2, 1])
        );
        assert_eq!(rendezvous_weight("g", 1), rendezvous_weight("g", 1));
    }

    /// A small deterministic generator for the property tests (no dependency, no OS
    /// randomness: a failing seed reproduces).
    struct SplitMix(u64);

    impl SplitMix {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    /// The fewest moves that can balance `assignment` over `live`: every orphan, plus each
    /// live broker's excess over its target (targets are ⌈P/n⌉ for the most loaded
    /// P mod n brokers, ⌊P/n⌋ for the rest).
    fn fewest_moves(live: &[Node], assignment: &BTreeMap<Slot, BrokerId>) -> usize {
        let ids: BTreeSet<_> = live.iter().map(|n| n.id).collect();
        let orphans = assignment.values().filter(|b| !ids.contains(b)).count();
        let mut loads: Vec<usize> = ids
            .iter()
            .map(|b| assignment.values().filter(|x| *x == b).count())
            .collect();
        loads.sort_unstable_by(|a, b| b.cmp(a));
        let (p, n) = (assignment.len(), ids.len());
        let (floor, extra) = (p / n, p % n);
        let excess: usize = loads
            .iter()
            .enumerate()
            .map(|(i, l)| l.saturating_sub(floor + usize::from(i < extra)))
            .sum();
        orphans + excess
    }

    #[test]
    fn property_plans_balance_with_the_fewest_moves() {
        for seed in 0..500u64 {
            let mut rng = SplitMix(seed);
            let n_live = 1 + rng.below(6) as i32;
            let live: Vec<Node> = (1..=n_live)
                .map(|id| Node::new(id, Some(&format!("az{}", 1 + rng.below(3)))))
                .collect();
            let mut a = BTreeMap::new();
            for t in 0..(1 + rng.below(4)) {
                for p in 0..rng.below(20) {
                    // Leaders among the live brokers and up to two dead ones (ids 7, 8).
                    let leader = 1 + rng.below(n_live as u64 + 2) as i32;
                    let leader = if leader > n_live {
                        leader - n_live + 6
                    } else {
                        leader
                    };
                    a.insert(
                        Slot {
                            topic_id: topic(u128::from(t)),
                            partition: p as PartitionId,
                        },
                        leader,
                    );
                }
            }
            let moves = plan_moves(&live, &a, usize::MAX);
            assert_eq!(
                moves.len(),
                fewest_moves(&live, &a),
                "seed {seed}: {moves:?}"
            );
            // Deterministic.
            assert_eq!(moves, plan_moves(&live, &a, usize::MAX), "seed {seed}");
            let mut after = a.clone();
            apply(&mut after, &moves);
            let loads = loads_of(&after, &live);
            assert!(
                loads.keys().all(|b| *b <= n_live),
                "seed {seed}: orphans left {loads:?}"
            );
            let (min, max) = (loads.values().min(), loads.values().max());
            assert!(
                max.zip(min).is_none_or(|(max, min)| max - min <= 1),
                "seed {seed}: {loads:?}"
            );
            assert!(
                plan_moves(&live, &after, usize::MAX).is_empty(),
                "seed {seed}: stable"
            );
        }
    }

    #[test]
    fn property_new_topics_are_balanced_per_topic() {
        for seed in 0..300u64 {
            let mut rng = SplitMix(seed);
            let n = 1 + rng.below(7) as i32;
            let live: Vec<Node> = (1..=n)
                .map(|id| Node::new(id, Some(&format!("az{}", 1 + rng.below(3)))))
                .collect();
            let load: BTreeMap<BrokerId, usize> =
                (1..=n).map(|b| (b, rng.below(10) as usize)).collect();
            let count = 1 + rng.below(40) as usize;
            let leaders = place_new(&live, &load, &[], count);
            assert_eq!(leaders.len(), count);
            assert_eq!(leaders, place_new(&live, &load, &[], count), "seed {seed}");
            let mut per: BTreeMap<BrokerId, usize> = (1..=n).map(|b| (b, 0)).collect();
            for b in &leaders {
                *per.entry(*b).or_default() += 1;
            }
            let (min, max) = (per.values().min(), per.values().max());
            assert!(
                max.zip(min).is_none_or(|(max, min)| max - min <= 1),
                "seed {seed}: {per:?}"
            );
        }
    }
}
