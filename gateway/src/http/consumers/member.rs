//! The group membership of a subscribed instance: one task per subscription that joins
//! the group next to Kafka clients (protocol type `consumer`, protocol `range`), computes
//! the assignment when elected leader, syncs, heartbeats, and rejoins on a rebalance.
//!
//! # Lifecycle
//! Spawned by subscribe on the registry's tracker; ends when its token is cancelled
//! (unsubscribe, a new subscription, instance deleted or expired, API dropped). On a
//! rebalance and on the way out it gives up its partitions (eager protocol), committing
//! their positions first when the instance auto-commits, and on the way out it leaves the
//! group so the others rebalance at once instead of after the session timeout.

use super::instance::Instance;
use super::offsets::commit_positions;
use crate::broker::Broker;
use crate::groups::assignor::{self, MemberSubscription, RANGE};
use crate::groups::group::{JoinRequest, JoinResult, MemberId};
use crate::groups::protocol::{self, CONSUMER};
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often a member heartbeats. A third of Kafka's usual ratio to the session timeout
/// would do; one second also bounds how late the instance notices a rebalance.
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// How long without a heartbeat before the coordinator drops the member (Kafka's consumer
/// default is 45 s; 30 s frees a crashed gateway's partitions sooner).
const SESSION_TIMEOUT_MS: u64 = 30_000;
/// How long the coordinator waits for every member to rejoin during a rebalance.
const REBALANCE_TIMEOUT_MS: u64 = 60_000;
/// Pause before retrying a join that failed for a reason other than a rebalance.
const RETRY_BACKOFF: Duration = Duration::from_millis(500);

/// What an instance subscribes to.
#[derive(Clone, Debug)]
pub enum Subscription {
    /// These topics.
    Topics(Vec<String>),
    /// Every topic whose whole name matches (Kafka's pattern subscription, as the Java
    /// client's `Pattern.matcher(name).matches()`).
    Pattern(regex::Regex),
}

impl PartialEq for Subscription {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Subscription::Topics(a), Subscription::Topics(b)) => a == b,
            (Subscription::Pattern(a), Subscription::Pattern(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl Eq for Subscription {}

impl Subscription {
    /// A pattern subscription; an error if `pattern` is not a valid regular expression.
    pub fn pattern(pattern: &str) -> Result<Subscription, regex::Error> {
        regex::Regex::new(&format!("^(?:{pattern})$")).map(Subscription::Pattern)
    }

    /// The topics subscribed to now, sorted.
    pub fn topics(&self, broker: &Broker) -> Vec<String> {
        match self {
            Subscription::Topics(t) => t.clone(),
            Subscription::Pattern(re) => broker
                .topics()
                .iter()
                .map(|t| t.name.clone())
                .filter(|n| re.is_match(n))
                .collect(),
        }
    }
}

/// Runs the membership of subscription `epoch` of `instance` until `token` is cancelled.
pub async fn run(
    broker: Arc<Broker>,
    instance: Arc<Instance>,
    epoch: u64,
    subscription: Subscription,
    token: CancellationToken,
) {
    let coordinator = broker.coordinator.clone();
    let group = instance.group.clone();
    let mut member_id = String::new();
    'join: while !token.is_cancelled() {
        // A pattern is resolved at every join; the heartbeat loop rejoins when it matches
        // a different set of topics.
        let topics = subscription.topics(&broker);
        let metadata = assignor::encode_subscription(&topics);
        let request = JoinRequest {
            member_id: member_id.clone(),
            instance_id: None,
            client_id: format!("oxbow-rest-{}", instance.id),
            client_host: "oxbow-rest-proxy".into(),
            session_timeout_ms: SESSION_TIMEOUT_MS,
            rebalance_timeout_ms: REBALANCE_TIMEOUT_MS,
            protocol_type: CONSUMER.into(),
            protocols: vec![(RANGE.into(), metadata.clone())],
            require_known_member_id: true,
        };
        let joined = tokio::select! {
            _ = token.cancelled() => break 'join,
            joined = coordinator.join(&group, request) => joined,
        };
        if joined.error != 0 {
            if joined.error == ResponseError::MemberIdRequired.code() {
                // KIP-394: a new member first gets its id, then joins with it.
                member_id = joined.member_id.clone();
                continue;
            }
            if is_unknown_member(joined.error) {
                member_id.clear();
            } else if joined.error != ResponseError::RebalanceInProgress.code() {
                let why = ResponseError::try_from_code(joined.error)
                    .map_or_else(|| format!("error {}", joined.error), |e| format!("{e:?}"));
                instance.refused(epoch, format!("the group refuses this member: {why}"));
            }
            tracing::debug!(%group, instance = %instance.id, error = joined.error, "rest consumer join failed; retrying");
            if pause(&token, RETRY_BACKOFF).await {
                break 'join;
            }
            continue;
        }
        member_id = joined.member_id.clone();
        let generation = joined.generation;
        // The leader watches the partition counts it assigned from: a topic created or
        // grown since needs a new assignment (Kafka's leader does the same from metadata).
        let (assignments, assigned_from) = if joined.leader == member_id {
            let (assignments, counts) = leader_assignments(&broker, &joined);
            (assignments, Some(counts))
        } else {
            (Vec::new(), None)
        };
        let synced = tokio::select! {
            _ = token.cancelled() => break 'join,
            synced = coordinator.sync(&group, &member_id, None, generation, assignments) => synced,
        };
        if synced.error != 0 {
            if is_unknown_member(synced.error) {
                member_id.clear();
            }
            continue;
        }
        let partitions = protocol::assignment_partitions(&synced.assignment);
        tracing::debug!(%group, instance = %instance.id, generation, ?partitions, "rest consumer assigned");
        instance.install_assignment(epoch, &member_id, generation, partitions);
        let mut tick = tokio::time::interval(HEARTBEAT_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = token.cancelled() => break 'join,
                _ = tick.tick() => {}
            }
            let code = coordinator.heartbeat(&group, &member_id, None, generation);
            let grown = assigned_from
                .as_ref()
                .is_some_and(|seen| partition_counts(&broker, seen.keys()) != *seen)
                || subscription.topics(&broker) != topics;
            if code == 0 && !grown {
                continue;
            }
            if grown {
                tracing::debug!(%group, instance = %instance.id, "subscribed topics changed; rebalancing");
            }
            // A rebalance began, or this member was fenced: give the partitions up and
            // rejoin (with the same id unless the group no longer knows it).
            give_up(&broker, &instance, epoch).await;
            if is_unknown_member(code) {
                member_id.clear();
            }
            continue 'join;
        }
    }
    give_up(&broker, &instance, epoch).await;
    if !member_id.is_empty() {
        coordinator.leave(&group, &member_id, None);
    }
}

fn is_unknown_member(code: i16) -> bool {
    code == ResponseError::UnknownMemberId.code() || code == ResponseError::FencedInstanceId.code()
}

/// Sleeps for `d`; true if cancelled meanwhile.
async fn pause(token: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = token.cancelled() => true,
        _ = tokio::time::sleep(d) => false,
    }
}

/// Revokes the partitions of membership `epoch`, committing their positions first when
/// the instance auto-commits (with the generation they were read under, which the
/// coordinator still accepts while the group prepares the rebalance).
async fn give_up(broker: &Broker, instance: &Instance, epoch: u64) {
    let Some((member, positions)) = instance.revoke(epoch) else {
        return;
    };
    if !instance.config.auto_commit || positions.is_empty() {
        return;
    }
    if let Err(e) = commit_positions(broker, &instance.group, Some(&member), positions).await {
        tracing::debug!(group = %instance.group, instance = %instance.id, error = %e, "auto-commit on revoke refused");
    }
}

/// Partitions of each topic (0 for a topic that does not exist).
fn partition_counts<'a>(
    broker: &Broker,
    topics: impl Iterator<Item = &'a String>,
) -> BTreeMap<String, i32> {
    topics
        .map(|t| {
            let n = broker.topic(t).map_or(0, |m| m.partitions.len() as i32);
            (t.clone(), n)
        })
        .collect()
}

/// The leader's SyncGroup assignments (every member's subscription decoded, partitions
/// split by the range assignor), and the partition counts they were computed from.
fn leader_assignments(
    broker: &Broker,
    joined: &JoinResult,
) -> (Vec<(MemberId, Bytes)>, BTreeMap<String, i32>) {
    let members: Vec<MemberSubscription> = joined
        .members
        .iter()
        .map(|(id, instance_id, meta)| MemberSubscription {
            member_id: id.clone(),
            instance_id: instance_id.clone(),
            topics: protocol::subscription_topics(meta),
        })
        .collect();
    let counts = partition_counts(broker, members.iter().flat_map(|m| m.topics.iter()));
    let assignments = assignor::range_assign(&members, &counts)
        .into_iter()
        .map(|(id, a)| (id, assignor::encode_assignment(&a)))
        .collect();
    (assignments, counts)
}
