//! REST Proxy v3 consumer groups, read-only:
//!
//! - `GET /v3/clusters/{c}/consumer-groups`: every group this broker knows (those with
//!   committed offsets in the metadata service, and those with members here), the ones the
//!   client may DESCRIBE;
//! - `GET .../consumer-groups/{g}`: state, coordinator, assignor;
//! - `GET .../consumer-groups/{g}/consumers`: members with client id, host and (consumer
//!   protocol) their assigned partitions;
//! - `GET .../consumer-groups/{g}/lags`: per committed partition the current (committed)
//!   offset, log end offset and lag, and the member it is assigned to; partitions of topics
//!   the client may not DESCRIBE are left out, as OffsetFetch leaves them out;
//! - `GET .../consumer-groups/{g}/lag-summary`: the total and the largest lag, plus the
//!   recent total-lag history (`crate::samples`) as `lag_history`.
//!
//! A group is coordinated by one broker (`cluster::placement::coordinator_for`); only that
//! broker has its members. Another broker answers from the metadata service: state
//! `UNKNOWN`, no members, committed offsets, and `coordinator` naming the broker to ask
//! (whose console shows the rest). Lags are known for partitions led by the broker
//! answering (`groups::lag`). An unknown group is 404/40406. States are REST Proxy's
//! spelling of Kafka's (`STABLE`, `PREPARING_REBALANCE`, …).

use super::partitions::Related;
use super::{check_cluster, List, ListMetadata, ResourceMetadata};
use crate::broker::Broker;
use crate::groups::{group::Member, lag, protocol};
use crate::http::authz;
use crate::http::body::json;
use crate::http::error::ApiError;
use crate::http::extract::ApiPath;
use crate::http::AppState;
use crate::security::acl::{AclOperation, ResourceType};
use crate::security::Session;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use oxbow_metadata::BrokerId;
use serde::Serialize;
use std::collections::HashMap;

/// Kafka's state name (`PreparingRebalance`) as the REST Proxy spells it
/// (`PREPARING_REBALANCE`).
pub(crate) fn rest_state(kafka: &str) -> String {
    let mut out = String::with_capacity(kafka.len() + 4);
    for (i, c) in kafka.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// What this broker can say about a group.
struct GroupSnapshot {
    state: String,
    protocol_type: String,
    protocol: String,
    members: Vec<Member>,
    coordinator: BrokerId,
    coordinated_here: bool,
}

/// The group, or 404/40406. Existence is checked against the group list first, so asking
/// about a name that is no group leaves nothing cached behind.
async fn snapshot(broker: &Broker, group: &str) -> Result<GroupSnapshot, ApiError> {
    let known = broker
        .coordinator
        .list()
        .await
        .map_err(|e| ApiError::from(crate::error::BrokerError::from(e)))?
        .into_iter()
        .any(|(id, _, _)| id == group);
    if !known {
        return Err(ApiError::unknown_group(group));
    }
    let coordinator = broker.cluster.coordinator_for(group);
    if !broker.coordinates(group) {
        return Ok(GroupSnapshot {
            state: "UNKNOWN".into(),
            protocol_type: protocol::CONSUMER.into(),
            protocol: String::new(),
            members: Vec::new(),
            coordinator,
            coordinated_here: false,
        });
    }
    let view = broker
        .coordinator
        .describe(group)
        .await
        .ok_or_else(|| ApiError::unknown_group(group))?;
    Ok(GroupSnapshot {
        state: rest_state(view.state),
        protocol_type: view.protocol_type,
        protocol: view.protocol,
        members: view.members,
        coordinator,
        coordinated_here: true,
    })
}

fn group_path(cluster_id: &str, group: &str) -> String {
    format!("/v3/clusters/{cluster_id}/consumer-groups/{group}")
}

#[derive(Debug, Serialize)]
struct GroupView {
    kind: &'static str,
    metadata: ResourceMetadata,
    cluster_id: String,
    consumer_group_id: String,
    /// No members and no protocol type: offsets committed by a client outside any group.
    is_simple: bool,
    partition_assignor: String,
    state: String,
    coordinator: Related,
    consumer: Related,
    lag_summary: Related,
    coordinator_id: BrokerId,
    /// Whether the broker answering coordinates it (only then are members known).
    coordinated_here: bool,
    protocol_type: String,
    /// In the single-group view only (the list does not load members).
    members_count: Option<usize>,
}

fn group_view(cluster_id: &str, group: &str, s: &GroupSnapshot) -> GroupView {
    let base = group_path(cluster_id, group);
    GroupView {
        kind: "KafkaConsumerGroup",
        coordinator: Related::to(format!(
            "/v3/clusters/{cluster_id}/brokers/{}",
            s.coordinator
        )),
        consumer: Related::to(format!("{base}/consumers")),
        lag_summary: Related::to(format!("{base}/lag-summary")),
        metadata: ResourceMetadata { self_path: base },
        cluster_id: cluster_id.to_string(),
        consumer_group_id: group.to_string(),
        is_simple: s.protocol_type.is_empty(),
        partition_assignor: s.protocol.clone(),
        state: s.state.clone(),
        coordinator_id: s.coordinator,
        coordinated_here: s.coordinated_here,
        protocol_type: s.protocol_type.clone(),
        members_count: Some(s.members.len()),
    }
}

/// `GET /v3/clusters/{c}/consumer-groups`.
pub(crate) async fn list(
    State(app): State<AppState>,
    session: Option<Extension<Session>>,
    ApiPath(cluster_id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    let broker = &app.http.broker;
    let authz = broker.authz(&authz::session_or_anonymous(session));
    let groups = broker
        .coordinator
        .list()
        .await
        .map_err(|e| ApiError::from(crate::error::BrokerError::from(e)))?;
    let data = groups
        .into_iter()
        .filter(|(g, _, _)| authz.allows(AclOperation::Describe, ResourceType::Group, g))
        .map(|(g, protocol_type, state)| {
            let coordinated_here = broker.coordinates(&g);
            let s = GroupSnapshot {
                state: if coordinated_here {
                    rest_state(state)
                } else {
                    "UNKNOWN".into()
                },
                protocol_type,
                protocol: String::new(),
                members: Vec::new(),
                coordinator: broker.cluster.coordinator_for(&g),
                coordinated_here,
            };
            // The list does not load every group's members: no `members_count`.
            GroupView {
                members_count: None,
                ..group_view(id, &g, &s)
            }
        })
        .collect();
    Ok(json(
        StatusCode::OK,
        &List {
            kind: "KafkaConsumerGroupList",
            metadata: ListMetadata {
                self_path: format!("/v3/clusters/{id}/consumer-groups"),
                next: None,
            },
            data,
        },
    ))
}

/// `GET /v3/clusters/{c}/consumer-groups/{g}`.
pub(crate) async fn get(
    State(app): State<AppState>,
    ApiPath((cluster_id, group)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    let s = snapshot(&app.http.broker, &group).await?;
    Ok(json(StatusCode::OK, &group_view(id, &group, &s)))
}

#[derive(Debug, Serialize)]
struct AssignedPartition {
    topic_name: String,
    partition_id: i32,
}

#[derive(Debug, Serialize)]
struct ConsumerView {
    kind: &'static str,
    metadata: ResourceMetadata,
    cluster_id: String,
    consumer_group_id: String,
    consumer_id: String,
    instance_id: Option<String>,
    client_id: String,
    /// The host the member connected from.
    client_host: String,
    assignments: Related,
    /// The partitions assigned to it (consumer protocol only; empty for others).
    assigned_partitions: Vec<AssignedPartition>,
}

/// A consumer-protocol member's assigned (topic, partition)s.
fn assigned(protocol_type: &str, m: &Member) -> Vec<(String, i32)> {
    if protocol_type == protocol::CONSUMER {
        protocol::assignment_partitions(&m.assignment)
    } else {
        Vec::new()
    }
}

/// `GET /v3/clusters/{c}/consumer-groups/{g}/consumers`.
pub(crate) async fn consumers(
    State(app): State<AppState>,
    ApiPath((cluster_id, group)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    let s = snapshot(&app.http.broker, &group).await?;
    let base = group_path(id, &group);
    let mut members = s.members.clone();
    members.sort_by(|a, b| a.id.cmp(&b.id));
    let data = members
        .iter()
        .map(|m| {
            let self_path = format!("{base}/consumers/{}", m.id);
            ConsumerView {
                kind: "KafkaConsumer",
                assignments: Related::to(format!("{self_path}/assignments")),
                metadata: ResourceMetadata { self_path },
                cluster_id: id.to_string(),
                consumer_group_id: group.clone(),
                consumer_id: m.id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                assigned_partitions: assigned(&s.protocol_type, m)
                    .into_iter()
                    .map(|(topic_name, partition_id)| AssignedPartition {
                        topic_name,
                        partition_id,
                    })
                    .collect(),
            }
        })
        .collect();
    Ok(json(
        StatusCode::OK,
        &List {
            kind: "KafkaConsumerList",
            metadata: ListMetadata {
                self_path: format!("{base}/consumers"),
                next: None,
            },
            data,
        },
    ))
}

#[derive(Debug, Serialize)]
struct LagView {
    kind: &'static str,
    metadata: ResourceMetadata,
    cluster_id: String,
    consumer_group_id: String,
    topic_name: String,
    partition_id: i32,
    current_offset: i64,
    /// `null` when the partition is not led by the broker answering.
    log_end_offset: Option<i64>,
    lag: Option<i64>,
    /// The member the partition is assigned to; empty when none is.
    consumer_id: String,
    instance_id: Option<String>,
    client_id: String,
}

/// The group's lags (topics the session may describe only), each with its member.
async fn lag_views(
    app: &AppState,
    session: Option<Extension<Session>>,
    cluster_id: &str,
    group: &str,
) -> Result<Vec<LagView>, ApiError> {
    let broker = &app.http.broker;
    let s = snapshot(broker, group).await?;
    let owners: HashMap<(String, i32), &Member> = s
        .members
        .iter()
        .flat_map(|m| {
            assigned(&s.protocol_type, m)
                .into_iter()
                .map(move |tp| (tp, m))
        })
        .collect();
    let authz = broker.authz(&authz::session_or_anonymous(session));
    let lags = lag::group_lags(broker, group)
        .await
        .map_err(|e| ApiError::from(crate::error::BrokerError::from(e)))?;
    let base = group_path(cluster_id, group);
    Ok(lags
        .into_iter()
        .filter(|l| authz.allows(AclOperation::Describe, ResourceType::Topic, &l.topic))
        .map(|l| {
            let owner = owners.get(&(l.topic.clone(), l.partition));
            LagView {
                kind: "KafkaConsumerLag",
                metadata: ResourceMetadata {
                    self_path: format!("{base}/lags/{}/partitions/{}", l.topic, l.partition),
                },
                cluster_id: cluster_id.to_string(),
                consumer_group_id: group.to_string(),
                current_offset: l.committed_offset,
                log_end_offset: l.log_end_offset,
                lag: l.lag,
                consumer_id: owner.map(|m| m.id.clone()).unwrap_or_default(),
                instance_id: owner.and_then(|m| m.instance_id.clone()),
                client_id: owner.map(|m| m.client_id.clone()).unwrap_or_default(),
                topic_name: l.topic,
                partition_id: l.partition,
            }
        })
        .collect())
}

/// `GET /v3/clusters/{c}/consumer-groups/{g}/lags`.
pub(crate) async fn lags(
    State(app): State<AppState>,
    session: Option<Extension<Session>>,
    ApiPath((cluster_id, group)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    let data = lag_views(&app, session, id, &group).await?;
    Ok(json(
        StatusCode::OK,
        &List {
            kind: "KafkaConsumerLagList",
            metadata: ListMetadata {
                self_path: format!("{}/lags", group_path(id, &group)),
                next: None,
            },
            data,
        },
    ))
}

#[derive(Debug, Serialize)]
struct LagPoint {
    time_ms: i64,
    total_lag: i64,
}

#[derive(Debug, Serialize)]
struct LagSummaryView {
    kind: &'static str,
    metadata: ResourceMetadata,
    cluster_id: String,
    consumer_group_id: String,
    max_lag_consumer_id: String,
    max_lag_instance_id: Option<String>,
    max_lag_client_id: String,
    max_lag_topic_name: String,
    max_lag_partition_id: i32,
    max_lag: i64,
    total_lag: i64,
    max_lag_consumer: Option<Related>,
    max_lag_partition: Option<Related>,
    /// Committed partitions whose lag is not known here (led by another broker).
    partitions_without_lag: usize,
    /// Total lag sampled every `lag_history_interval_ms`, oldest first (bounded; see
    /// `crate::samples`).
    lag_history: Vec<LagPoint>,
    lag_history_interval_ms: u64,
}

/// `GET /v3/clusters/{c}/consumer-groups/{g}/lag-summary`.
pub(crate) async fn lag_summary(
    State(app): State<AppState>,
    session: Option<Extension<Session>>,
    ApiPath((cluster_id, group)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    let views = lag_views(&app, session, id, &group).await?;
    let base = group_path(id, &group);
    let total_lag = views.iter().filter_map(|v| v.lag).sum();
    let max = views
        .iter()
        .filter(|v| v.lag.is_some())
        .max_by_key(|v| (v.lag, std::cmp::Reverse((&v.topic_name, v.partition_id))));
    let history = app
        .http
        .broker
        .samples
        .lag
        .samples(&group)
        .into_iter()
        .map(|s| LagPoint {
            time_ms: s.time_ms,
            total_lag: s.total_lag,
        })
        .collect();
    let summary = LagSummaryView {
        kind: "KafkaConsumerGroupLagSummary",
        metadata: ResourceMetadata {
            self_path: format!("{base}/lag-summary"),
        },
        cluster_id: id.to_string(),
        consumer_group_id: group.clone(),
        max_lag_consumer_id: max.map(|v| v.consumer_id.clone()).unwrap_or_default(),
        max_lag_instance_id: max.and_then(|v| v.instance_id.clone()),
        max_lag_client_id: max.map(|v| v.client_id.clone()).unwrap_or_default(),
        max_lag_topic_name: max.map(|v| v.topic_name.clone()).unwrap_or_default(),
        max_lag_partition_id: max.map_or(-1, |v| v.partition_id),
        max_lag: max.and_then(|v| v.lag).unwrap_or(0),
        total_lag,
        max_lag_consumer: max
            .filter(|v| !v.consumer_id.is_empty())
            .map(|v| Related::to(format!("{base}/consumers/{}", v.consumer_id))),
        max_lag_partition: max.map(|v| {
            Related::to(format!(
                "/v3/clusters/{id}/topics/{}/partitions/{}",
                v.topic_name, v.partition_id
            ))
        }),
        partitions_without_lag: views.iter().filter(|v| v.lag.is_none()).count(),
        lag_history: history,
        lag_history_interval_ms: crate::samples::SAMPLE_INTERVAL.as_millis() as u64,
    };
    Ok(json(StatusCode::OK, &summary))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_in_rest_proxy_spelling() {
        assert_eq!(rest_state("Stable"), "STABLE");
        assert_eq!(rest_state("PreparingRebalance"), "PREPARING_REBALANCE");
        assert_eq!(rest_state("CompletingRebalance"), "COMPLETING_REBALANCE");
        assert_eq!(rest_state("Empty"), "EMPTY");
    }
}
