//! Offsets of an instance: committing (explicit offsets, or every position), reading the
//! group's committed offsets, where a partition starts, and seeking.
//!
//! Commits follow Kafka's rules through the coordinator: a subscribed instance commits as
//! its member and generation (a stale one is refused, 409/40905); an instance without a
//! membership commits as a "simple" consumer, which the coordinator allows only while the
//! group has no members.

use super::super::error::ApiError;
use super::instance::{illegal_state, Instance, Membership, OffsetReset, Tp};
use crate::broker::Broker;
use crate::error::BrokerError;
use axum::http::StatusCode;
use kafka_protocol::error::ResponseError;
use oxbow_metadata::TopicMetadata;
use std::sync::Arc;

/// The topic of a partition, checking both exist (404/40401, 404/40402).
pub fn existing(broker: &Broker, tp: &Tp) -> Result<Arc<TopicMetadata>, ApiError> {
    let topic = broker
        .topic(&tp.0)
        .ok_or_else(|| BrokerError::UnknownTopic(tp.0.clone()))?;
    if topic.partition(tp.1).is_none() {
        return Err(BrokerError::UnknownPartition {
            topic: tp.0.clone(),
            partition: tp.1,
        }
        .into());
    }
    Ok(topic)
}

fn commit_refused(e: ResponseError) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        40905,
        format!(
            "the group refused the commit ({e:?}): a rebalance is in progress or this \
             instance is no longer a member of the current generation; poll and retry"
        ),
    )
}

/// Commits `(partition, offset, metadata)` for the group, as `member` (member id,
/// generation) or as a simple consumer.
pub async fn commit(
    broker: &Broker,
    group: &str,
    member: Option<&Membership>,
    offsets: Vec<(Tp, i64, String)>,
) -> Result<(), ApiError> {
    if offsets.is_empty() {
        return Ok(());
    }
    let (member_id, generation) = member.map_or(("", -1), |(m, g)| (m.as_str(), *g));
    broker
        .coordinator
        .check_commit(group, member_id, None, generation)
        .map_err(commit_refused)?;
    broker
        .coordinator
        .commit_offsets(
            group,
            offsets
                .into_iter()
                .map(|((t, p), o, m)| (t, p, o, -1, m))
                .collect(),
        )
        .await
        .map_err(|e| ApiError::from(BrokerError::from(e)))
}

/// Commits positions (next offsets to read), without metadata.
pub async fn commit_positions(
    broker: &Broker,
    group: &str,
    member: Option<&Membership>,
    positions: Vec<(Tp, i64)>,
) -> Result<(), ApiError> {
    let offsets = positions
        .into_iter()
        .map(|(tp, o)| (tp, o, String::new()))
        .collect();
    commit(broker, group, member, offsets).await
}

/// The group's committed (offset, metadata) of each partition that has one.
pub async fn committed(
    broker: &Broker,
    group: &str,
    tps: &[Tp],
) -> Result<Vec<(Tp, i64, String)>, ApiError> {
    let all = broker
        .coordinator
        .fetch_offsets(group)
        .await
        .map_err(|e| ApiError::from(BrokerError::from(e)))?;
    Ok(tps
        .iter()
        .filter_map(|tp| {
            all.get(tp)
                .filter(|c| c.offset >= 0)
                .map(|c| (tp.clone(), c.offset, c.metadata.clone()))
        })
        .collect())
}

/// The earliest or latest offset of a partition.
pub async fn boundary(broker: &Broker, tp: &Tp, reset: OffsetReset) -> Result<i64, ApiError> {
    let topic = existing(broker, tp)?;
    let (offset, _) = match broker.list_offset(&topic, tp.1, reset.timestamp()).await {
        Err(e) if e.code() == ResponseError::NotLeaderOrFollower.code() => {
            broker
                .list_offset_elsewhere(&topic, tp.1, reset.timestamp())
                .await?
        }
        other => other?,
    };
    Ok(offset)
}

/// Gives every assigned partition without a position one: the committed offset, else
/// the reset policy. Partitions of topics deleted meanwhile are left without one.
pub async fn init_positions(broker: &Broker, instance: &Instance) -> Result<(), ApiError> {
    let missing: Vec<Tp> = {
        let s = instance.state();
        s.assigned
            .iter()
            .filter(|tp| !s.positions.contains_key(*tp))
            .cloned()
            .collect()
    };
    if missing.is_empty() {
        return Ok(());
    }
    let committed = committed(broker, &instance.group, &missing).await?;
    let mut found = Vec::with_capacity(missing.len());
    for tp in missing {
        if let Some((_, offset, _)) = committed.iter().find(|(c, _, _)| *c == tp) {
            found.push((tp, *offset));
            continue;
        }
        match boundary(broker, &tp, instance.config.reset).await {
            Ok(offset) => found.push((tp, offset)),
            Err(e) if e.status() == StatusCode::NOT_FOUND => {}
            Err(e) => return Err(e),
        }
    }
    let mut s = instance.state();
    for (tp, offset) in found {
        if s.assigned.contains(&tp) {
            s.positions.entry(tp).or_insert(offset);
        }
    }
    Ok(())
}

/// Moves positions of assigned partitions (409/40903 for a partition not assigned).
pub fn seek(instance: &Instance, offsets: Vec<(Tp, i64)>) -> Result<(), ApiError> {
    let mut s = instance.state();
    if let Some((tp, _)) = offsets.iter().find(|(tp, _)| !s.assigned.contains(tp)) {
        return Err(illegal_state(format!(
            "partition {}-{} is not assigned to this consumer instance",
            tp.0, tp.1
        )));
    }
    s.positions.extend(offsets);
    Ok(())
}

/// Moves positions of assigned partitions to their first or last offset.
pub async fn seek_to(
    broker: &Broker,
    instance: &Instance,
    tps: Vec<Tp>,
    to: OffsetReset,
) -> Result<(), ApiError> {
    let mut offsets = Vec::with_capacity(tps.len());
    for tp in tps {
        existing(broker, &tp)?;
        let offset = boundary(broker, &tp, to).await?;
        offsets.push((tp, offset));
    }
    seek(instance, offsets)
}
