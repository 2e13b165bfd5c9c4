//! v2 topic metadata: `GET /topics`, `GET /topics/{t}`, `GET /topics/{t}/partitions` and
//! `GET /topics/{t}/partitions/{p}`, in the REST Proxy's shapes.
//!
//! Reads never create topics (only produce auto-creates, as in Kafka). Every partition is
//! led by its one leader, which is also its only replica as the v2 API sees it: durability
//! comes from the WAL replicas and the object store, not from per-topic followers.

use super::body::v2_ok;
use super::error::ApiError;
use super::extract::{partition_param, ApiPath};
use super::AppState;
use crate::error::BrokerError;
use crate::security::acl::{AclOperation, ResourceType};
use crate::security::Session;
use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use oxbow_metadata::{PartitionState, TopicMetadata};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `GET /topics/{t}`.
#[derive(Debug, Serialize)]
pub struct TopicView {
    pub name: String,
    /// Every config with its effective value (defaults included), as the REST Proxy does.
    pub configs: BTreeMap<&'static str, String>,
    pub partitions: Vec<PartitionView>,
}

/// One partition of `GET /topics/{t}` and `GET /topics/{t}/partitions[/{p}]`.
#[derive(Debug, Serialize)]
pub struct PartitionView {
    pub partition: i32,
    pub leader: i32,
    pub replicas: Vec<ReplicaView>,
}

#[derive(Debug, Serialize)]
pub struct ReplicaView {
    pub broker: i32,
    pub leader: bool,
    pub in_sync: bool,
}

impl From<&PartitionState> for PartitionView {
    fn from(p: &PartitionState) -> Self {
        PartitionView {
            partition: p.partition,
            leader: p.leader,
            replicas: vec![ReplicaView {
                broker: p.leader,
                leader: true,
                in_sync: true,
            }],
        }
    }
}

impl From<&TopicMetadata> for TopicView {
    fn from(t: &TopicMetadata) -> Self {
        TopicView {
            name: t.name.clone(),
            configs: t
                .configs
                .describe()
                .into_iter()
                .map(|c| (c.name, c.value))
                .collect(),
            partitions: t.partitions.iter().map(PartitionView::from).collect(),
        }
    }
}

/// A topic that must exist (404/40401 otherwise).
pub(super) fn existing_topic(app: &AppState, name: &str) -> Result<Arc<TopicMetadata>, ApiError> {
    app.http
        .broker
        .topic(name)
        .ok_or_else(|| BrokerError::UnknownTopic(name.to_string()).into())
}

/// A partition that must exist in `topic` (404/40402 otherwise).
pub(super) fn existing_partition<'t>(
    topic: &'t TopicMetadata,
    raw: &str,
) -> Result<&'t PartitionState, ApiError> {
    let p = partition_param(&topic.name, raw)?;
    topic.partition(p).ok_or_else(|| {
        BrokerError::UnknownPartition {
            topic: topic.name.clone(),
            partition: p,
        }
        .into()
    })
}

/// `GET /topics`: the names of every topic, sorted.
pub(crate) async fn list(
    State(app): State<AppState>,
    session: Option<Extension<Session>>,
) -> Response {
    // Only the topics the client may describe (`http::authz`).
    let authz = app
        .http
        .broker
        .authz(&super::authz::session_or_anonymous(session));
    let names: Vec<String> = app
        .http
        .broker
        .topics()
        .iter()
        .filter(|t| authz.allows(AclOperation::Describe, ResourceType::Topic, &t.name))
        .map(|t| t.name.clone())
        .collect();
    v2_ok(&names)
}

/// `GET /topics/{t}`.
pub(crate) async fn describe(
    State(app): State<AppState>,
    ApiPath(topic): ApiPath<String>,
) -> Result<Response, ApiError> {
    let t = existing_topic(&app, &topic)?;
    Ok(v2_ok(&TopicView::from(t.as_ref())))
}

/// `GET /topics/{t}/partitions`.
pub(crate) async fn partitions(
    State(app): State<AppState>,
    ApiPath(topic): ApiPath<String>,
) -> Result<Response, ApiError> {
    let t = existing_topic(&app, &topic)?;
    let views: Vec<PartitionView> = t.partitions.iter().map(PartitionView::from).collect();
    Ok(v2_ok(&views))
}

/// `GET /topics/{t}/partitions/{p}`.
pub(crate) async fn partition(
    State(app): State<AppState>,
    ApiPath((topic, partition)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let t = existing_topic(&app, &topic)?;
    let p = existing_partition(&t, &partition)?;
    Ok(v2_ok(&PartitionView::from(p)))
}
