//! The range assignor, for the one group member Oxbow itself runs: an HTTP (REST Proxy)
//! consumer instance that a group elects leader computes the assignment for every member,
//! Kafka clients included, exactly as Kafka's `RangeAssignor` would.
//!
//! Pure: members' subscriptions and the topics' partition counts in, one assignment per
//! member out. The consumer protocol's embedded formats are written here (an `i16`
//! version prefix, then the versioned body — version 0, which every client reads) and read
//! by [`super::protocol`].

use super::group::MemberId;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// The protocol name of the range assignor (Kafka's `RangeAssignor.RANGE_ASSIGNOR_NAME`).
pub const RANGE: &str = "range";

/// Version of the embedded subscription and assignment formats Oxbow writes. Version 0 is
/// the common denominator: every client decodes it, and newer fields (owned partitions,
/// rack) only matter to assignors Oxbow does not run.
const EMBEDDED_VERSION: i16 = 0;

/// Partitions by topic, each list sorted.
pub type Assignment = BTreeMap<String, Vec<i32>>;

/// One member as the assignor sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberSubscription {
    pub member_id: MemberId,
    /// `group.instance.id` of a static member: Kafka orders static members by it, so their
    /// partitions survive a restart (which changes the member id).
    pub instance_id: Option<String>,
    pub topics: Vec<String>,
}

/// Kafka's `AbstractPartitionAssignor.MemberInfo` order: static members (by instance id)
/// before dynamic ones (by member id).
fn member_order(a: &MemberSubscription, b: &MemberSubscription) -> Ordering {
    match (&a.instance_id, &b.instance_id) {
        (Some(x), Some(y)) => x.cmp(y).then_with(|| a.member_id.cmp(&b.member_id)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.member_id.cmp(&b.member_id),
    }
}

/// Kafka's range assignment: per topic, its partitions in order are split into contiguous
/// ranges over the members subscribed to it (in `member_order`); the first
/// `partitions % members` members get one extra. Topics missing from `partition_counts`
/// (unknown to the cluster) are skipped. Every member gets an entry, possibly empty.
pub fn range_assign(
    members: &[MemberSubscription],
    partition_counts: &BTreeMap<String, i32>,
) -> BTreeMap<MemberId, Assignment> {
    let mut out: BTreeMap<MemberId, Assignment> = members
        .iter()
        .map(|m| (m.member_id.clone(), Assignment::new()))
        .collect();
    let mut by_topic: BTreeMap<&str, Vec<&MemberSubscription>> = BTreeMap::new();
    for m in members {
        for t in &m.topics {
            let subscribers = by_topic.entry(t.as_str()).or_default();
            // A member naming a topic twice is still one subscriber.
            if !subscribers.iter().any(|s| s.member_id == m.member_id) {
                subscribers.push(m);
            }
        }
    }
    for (topic, mut subscribers) in by_topic {
        let Some(&count) = partition_counts.get(topic) else {
            continue;
        };
        if count <= 0 || subscribers.is_empty() {
            continue;
        }
        subscribers.sort_by(|a, b| member_order(a, b));
        let n = subscribers.len() as i32;
        let (per, extra) = (count / n, count % n);
        for (i, m) in subscribers.iter().enumerate() {
            let i = i as i32;
            let start = per * i + i.min(extra);
            let len = per + i32::from(i < extra);
            if len == 0 {
                continue;
            }
            out.entry(m.member_id.clone())
                .or_default()
                .insert(topic.to_string(), (start..start + len).collect());
        }
    }
    out
}

fn versioned(encode: impl FnOnce(&mut BytesMut) -> anyhow::Result<()>) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(EMBEDDED_VERSION);
    match encode(&mut buf) {
        Ok(()) => buf.freeze(),
        // Version 0 of both formats is strings and integers only; encoding cannot fail
        // for them. An empty metadata would read as "no topics" rather than corrupt data.
        Err(e) => {
            tracing::error!(error = %e, "encoding consumer protocol metadata failed");
            Bytes::new()
        }
    }
}

/// A consumer's JoinGroup metadata: the topics it subscribes to.
pub fn encode_subscription(topics: &[String]) -> Bytes {
    let subscription = ConsumerProtocolSubscription::default().with_topics(
        topics
            .iter()
            .map(|t| StrBytes::from_string(t.clone()))
            .collect(),
    );
    versioned(|buf| subscription.encode(buf, EMBEDDED_VERSION))
}

/// A member's SyncGroup assignment.
pub fn encode_assignment(assignment: &Assignment) -> Bytes {
    let assigned = ConsumerProtocolAssignment::default().with_assigned_partitions(
        assignment
            .iter()
            .map(|(topic, partitions)| {
                TopicPartition::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.clone())))
                    .with_partitions(partitions.clone())
            })
            .collect(),
    );
    versioned(|buf| assigned.encode(buf, EMBEDDED_VERSION))
}

#[cfg(test)]
mod tests {
    use super::super::protocol::{assignment_partitions, subscription_topics};
    use super::*;

    fn member(id: &str, topics: &[&str]) -> MemberSubscription {
        MemberSubscription {
            member_id: id.into(),
            instance_id: None,
            topics: topics.iter().map(|t| t.to_string()).collect(),
        }
    }

    fn counts(pairs: &[(&str, i32)]) -> BTreeMap<String, i32> {
        pairs.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    fn parts(a: &BTreeMap<MemberId, Assignment>, member: &str, topic: &str) -> Vec<i32> {
        a.get(member)
            .and_then(|m| m.get(topic))
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn uneven_split_gives_the_first_members_one_more() {
        let members = [
            member("c", &["t"]),
            member("a", &["t"]),
            member("b", &["t"]),
        ];
        let a = range_assign(&members, &counts(&[("t", 7)]));
        assert_eq!(parts(&a, "a", "t"), vec![0, 1, 2]);
        assert_eq!(parts(&a, "b", "t"), vec![3, 4]);
        assert_eq!(parts(&a, "c", "t"), vec![5, 6]);
    }

    #[test]
    fn more_members_than_partitions_leaves_some_empty() {
        let members = [
            member("a", &["t"]),
            member("b", &["t"]),
            member("c", &["t"]),
        ];
        let a = range_assign(&members, &counts(&[("t", 2)]));
        assert_eq!(parts(&a, "a", "t"), vec![0]);
        assert_eq!(parts(&a, "b", "t"), vec![1]);
        assert_eq!(a.get("c"), Some(&Assignment::new()));
    }

    #[test]
    fn several_topics_are_split_independently() {
        let members = [member("a", &["x", "y"]), member("b", &["x", "y"])];
        let a = range_assign(&members, &counts(&[("x", 3), ("y", 3)]));
        // Range (unlike round robin) gives the same member the extra partition of every topic.
        assert_eq!(parts(&a, "a", "x"), vec![0, 1]);
        assert_eq!(parts(&a, "a", "y"), vec![0, 1]);
        assert_eq!(parts(&a, "b", "x"), vec![2]);
        assert_eq!(parts(&a, "b", "y"), vec![2]);
    }

    #[test]
    fn members_with_different_subscriptions() {
        let members = [
            member("a", &["x"]),
            member("b", &["x", "y"]),
            member("c", &["y", "missing"]),
        ];
        let a = range_assign(&members, &counts(&[("x", 4), ("y", 1)]));
        assert_eq!(parts(&a, "a", "x"), vec![0, 1]);
        assert_eq!(parts(&a, "b", "x"), vec![2, 3]);
        assert_eq!(parts(&a, "b", "y"), vec![0]);
        assert!(parts(&a, "c", "y").is_empty());
        assert!(parts(&a, "c", "missing").is_empty());
        // Every partition of every known topic is owned by exactly one member.
        let mut owned: Vec<(String, i32)> = a
            .values()
            .flat_map(|m| {
                m.iter()
                    .flat_map(|(t, ps)| ps.iter().map(|p| (t.clone(), *p)))
            })
            .collect();
        owned.sort();
        let expected: Vec<(String, i32)> = [("x", 0), ("x", 1), ("x", 2), ("x", 3), ("y", 0)]
            .iter()
            .map(|(t, p)| (t.to_string(), *p))
            .collect();
        assert_eq!(owned, expected);
    }

    #[test]
    fn static_members_sort_first() {
        let mut s = member("z", &["t"]);
        s.instance_id = Some("i".into());
        let members = [member("a", &["t"]), s];
        let a = range_assign(&members, &counts(&[("t", 2)]));
        assert_eq!(parts(&a, "z", "t"), vec![0]);
        assert_eq!(parts(&a, "a", "t"), vec![1]);
    }

    #[test]
    fn embedded_formats_round_trip() {
        let sub = encode_subscription(&["a".to_string(), "b".to_string()]);
        assert_eq!(&sub[..2], &[0, 0]);
        assert_eq!(subscription_topics(&sub), vec!["a", "b"]);
        let mut assignment = Assignment::new();
        assignment.insert("a".into(), vec![0, 2]);
        assignment.insert("b".into(), vec![1]);
        let bytes = encode_assignment(&assignment);
        assert_eq!(
            assignment_partitions(&bytes),
            vec![("a".into(), 0), ("a".into(), 2), ("b".into(), 1)]
        );
    }
}
