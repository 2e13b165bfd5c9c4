//! High watermarks of partitions led by other brokers, for the lag of the groups
//! coordinated here (`/metrics`, the console's lag routes): a coordinator knows its groups'
//! committed offsets, but only the leader knows a partition's high watermark.
//!
//! Every sampling tick (`crate::samples`, 5 s) the sampler asks each other leader once:
//! one ListOffsets (latest) for every partition of it that a group coordinated here has
//! committed, all leaders at once, each bounded by [`ASK_TIMEOUT`], over one connection per
//! broker kept between ticks (replaced after an error). At most [`PARTITIONS_MAX`]
//! partitions are asked per tick. An answer is used for [`FRESH_FOR`]; past it (the leader
//! stopped answering) the lag is unknown again rather than stale. Errors are logged at
//! debug and leave the partitions' lag unknown: the loop never waits longer than the
//! timeout, and nothing else waits on it.
//!
//! The broker dials the leader's registered Kafka address (the inter-broker listener,
//! PLAINTEXT for now: README → Listeners) as HTTP produce forwarding does; with ACLs on,
//! ListOffsets needs DESCRIBE on the topic for that connection's principal, or these lags
//! stay unknown.

use crate::broker::Broker;
use crate::client::connection::Connection;
use crate::client::requests;
use kafka_protocol::messages::ListOffsetsRequest;
use oxbow_metadata::{BrokerId, Offset, TopicPartition};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bound on one leader's answer (connecting included).
pub const ASK_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an answer is used: three sampling ticks.
pub const FRESH_FOR: Duration = Duration::from_secs(15);
/// Most partitions asked per tick, over all leaders.
pub const PARTITIONS_MAX: usize = 10_000;

/// The answers, by partition (see the module docs).
#[derive(Default)]
pub struct RemoteHighWatermarks {
    answers: Mutex<HashMap<TopicPartition, (Offset, Instant)>>,
}

impl RemoteHighWatermarks {
    /// `tp`'s high watermark as its leader last answered, if fresh.
    pub fn get(&self, tp: &TopicPartition) -> Option<Offset> {
        let answers = self.answers.lock().ok()?;
        let (hw, at) = answers.get(tp)?;
        (at.elapsed() < FRESH_FOR).then_some(*hw)
    }

    /// Every fresh answer.
    pub fn fresh(&self) -> Vec<(TopicPartition, Offset)> {
        self.answers.lock().map_or_else(
            |_| Vec::new(),
            |a| {
                a.iter()
                    .filter(|(_, (_, at))| at.elapsed() < FRESH_FOR)
                    .map(|(tp, (hw, _))| (*tp, *hw))
                    .collect()
            },
        )
    }

    /// Notes `answered` at `at` and forgets answers no longer fresh.
    fn note(&self, answered: Vec<(TopicPartition, Offset)>, at: Instant) {
        if let Ok(mut a) = self.answers.lock() {
            a.retain(|_, (_, t)| t.elapsed() < FRESH_FOR);
            a.extend(answered.into_iter().map(|(tp, hw)| (tp, (hw, at))));
        }
    }
}

/// One partition to ask about: its topic's name and id, and its index.
type Wanted = (String, TopicPartition);

/// Which partitions to ask which leader about: those of `committed` ((topic, partition)
/// pairs, any order, repeats allowed) whose `leader_of` is another broker, at most `max`,
/// grouped by leader and by topic.
pub fn plan(
    committed: impl IntoIterator<Item = (String, i32)>,
    leader_of: impl Fn(&str, i32) -> Option<(BrokerId, TopicPartition)>,
    me: BrokerId,
    max: usize,
) -> BTreeMap<BrokerId, Vec<Wanted>> {
    let mut seen = std::collections::HashSet::new();
    let mut out: BTreeMap<BrokerId, Vec<Wanted>> = BTreeMap::new();
    for (topic, partition) in committed {
        if seen.len() >= max {
            break;
        }
        let Some((leader, tp)) = leader_of(&topic, partition) else {
            continue;
        };
        if leader != me && seen.insert(tp) {
            out.entry(leader).or_default().push((topic, tp));
        }
    }
    out
}

/// Asks every other leader of a partition the groups coordinated here committed for its
/// high watermark (see the module docs). `conns`: the connections kept between ticks.
pub async fn refresh(broker: &Broker, conns: &mut HashMap<BrokerId, Connection>) {
    let committed = broker
        .coordinator
        .cached_offsets()
        .into_iter()
        .map(|(_, topic, partition, _)| (topic, partition));
    let me = broker.settings.broker_id;
    let asks = plan(
        committed,
        |topic, partition| {
            let t = broker.topic(topic)?;
            let p = t.partitions.iter().find(|p| p.partition == partition)?;
            let live = broker.cluster.is_live(p.leader);
            live.then(|| (p.leader, TopicPartition::new(t.topic_id, partition)))
        },
        me,
        PARTITIONS_MAX,
    );
    conns.retain(|id, c| asks.contains_key(id) && !c.is_broken());
    let mut calls = Vec::with_capacity(asks.len());
    for (leader, wanted) in asks {
        let Some(addr) = broker.cluster.broker(leader).map(|b| b.kafka_addr) else {
            continue;
        };
        let conn = conns.remove(&leader);
        calls.push(async move {
            let asked = tokio::time::timeout(ASK_TIMEOUT, ask(conn, &addr, &wanted)).await;
            let (conn, answered) = match asked {
                Ok(Ok((conn, answered))) => (Some(conn), answered),
                Ok(Err(e)) => {
                    tracing::debug!(leader, error = %e, "asking a leader for high watermarks failed");
                    (None, Vec::new())
                }
                Err(_) => {
                    tracing::debug!(leader, "a leader did not answer for high watermarks in time");
                    (None, Vec::new())
                }
            };
            (leader, conn, answered)
        });
    }
    let mut answered = Vec::new();
    for (leader, conn, got) in futures::future::join_all(calls).await {
        if let Some(c) = conn {
            conns.insert(leader, c);
        }
        answered.extend(got);
    }
    broker.samples.remote.note(answered, Instant::now());
}

/// One ListOffsets of `wanted` to the broker at `addr` (over `conn` if given).
async fn ask(
    conn: Option<Connection>,
    addr: &str,
    wanted: &[Wanted],
) -> Result<(Connection, Vec<(TopicPartition, Offset)>), crate::client::ClientError> {
    let mut conn = match conn {
        Some(c) => c,
        None => Connection::open(addr, ASK_TIMEOUT, "oxbow-lag-sampler").await?,
    };
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    let mut ids: HashMap<(&str, i32), TopicPartition> = HashMap::new();
    for (topic, tp) in wanted {
        by_topic.entry(topic).or_default().push(tp.partition);
        ids.insert((topic, tp.partition), *tp);
    }
    let topics: Vec<(String, Vec<i32>)> = by_topic
        .into_iter()
        .map(|(t, ps)| (t.to_string(), ps))
        .collect();
    let version = conn.pick_version::<ListOffsetsRequest>(None)?;
    let request = requests::list_latest_offsets(version, &topics, ASK_TIMEOUT);
    let response = conn.send(version, &request, Duration::ZERO).await?;
    let mut out = Vec::new();
    for t in &response.topics {
        for p in &t.partitions {
            if p.error_code != 0 || p.offset < 0 {
                continue;
            }
            if let Some(tp) = ids.get(&(t.name.as_str(), p.partition_index)) {
                out.push((*tp, p.offset));
            }
        }
    }
    Ok((conn, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxbow_metadata::TopicId;

    #[test]
    fn a_plan_asks_each_other_leader_once_per_partition_within_the_bound() {
        let id = TopicId(uuid::Uuid::from_u128(7));
        let leader_of = |t: &str, p: i32| match t {
            "gone" => None,
            _ => Some((p % 3 + 1, TopicPartition::new(id, p))),
        };
        let committed = [
            ("t", 0),
            ("t", 1),
            ("t", 1),
            ("t", 2),
            ("gone", 5),
            ("t", 4),
        ]
        .map(|(t, p)| (t.to_string(), p));
        let plan_for = |max| plan(committed.clone(), leader_of, 1, max);
        let got = plan_for(100);
        // Partition 0 → broker 1 (this one) and 2 → broker 3; 1 and 4 → broker 2, 1 once.
        assert_eq!(got.keys().copied().collect::<Vec<_>>(), vec![2, 3]);
        let partitions = |b| {
            got[&b]
                .iter()
                .map(|(_, tp)| tp.partition)
                .collect::<Vec<_>>()
        };
        assert_eq!(partitions(2), vec![1, 4]);
        assert_eq!(partitions(3), vec![2]);
        assert_eq!(plan_for(1).values().map(Vec::len).sum::<usize>(), 1);
    }

    #[test]
    fn answers_are_used_while_fresh() {
        let r = RemoteHighWatermarks::default();
        let tp = TopicPartition::new(TopicId(uuid::Uuid::from_u128(1)), 0);
        r.note(vec![(tp, 42)], Instant::now());
        assert_eq!(r.get(&tp), Some(42));
        assert_eq!(r.fresh(), vec![(tp, 42)]);
        let old = Instant::now().checked_sub(FRESH_FOR);
        if let Some(old) = old {
            r.note(vec![(tp, 43)], old);
            assert_eq!(r.get(&tp), None, "a stale answer is not used");
        }
    }
}
