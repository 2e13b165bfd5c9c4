//! A minimal Confluent REST v3 admin API: the cluster, its brokers, topics, partitions and
//! consumer groups.
//!
//! - `GET /v3/clusters`, `GET /v3/clusters/{c}`
//! - `GET /v3/clusters/{c}/brokers[/{b}]` ([`brokers`])
//! - `GET /v3/clusters/{c}/topics/{t}/partitions[/{p}]` ([`partitions`])
//! - `GET /v3/clusters/{c}/consumer-groups[/{g}[/consumers|/lags|/lag-summary]]`
//!   ([`groups`])
//! - `/v3/clusters/{c}/links…`: cluster links and mirror topics ([`links`])
//! - `GET /v3/clusters/{c}/topics`, `POST /v3/clusters/{c}/topics` (201 with the topic)
//! - `GET /v3/clusters/{c}/topics/{t}`, `DELETE /v3/clusters/{c}/topics/{t}` (204)
//! - `GET /v3/clusters/{c}/topics/{t}/configs` (every topic config), `GET|PUT|DELETE
//!   .../configs/{name}` (PUT `{"value": "…"}` sets it, DELETE resets it to the default;
//!   204), `POST .../configs:alter` (`{"data": [{"name", "value"} | {"name", "operation":
//!   "DELETE"}], "validate_only": false}`, all or nothing; 204). Changes go through
//!   IncrementalAlterConfigs' rules; an invalid one is 422/42205 naming the key.
//!
//! Resources carry `kind`, `metadata.self` and their fields, like the REST Proxy's; `self`
//! links are paths relative to this server (it does not know the address clients use).
//! Where Oxbow knows more than the REST Proxy shows (replica state, load, lease, lag
//! history), it is added as extra fields beside REST Proxy's; none of REST Proxy's is
//! renamed. Topics carry their partitions' totals (`under_replicated_partitions`,
//! `offline_partitions`, and for partitions led here `stored_bytes`, `records_per_sec`).
//! A cluster id other than this broker's is 404/40404. Request and response bodies are
//! plain `application/json`.

pub(crate) mod brokers;
pub(crate) mod groups;
pub(crate) mod links;
pub(crate) mod partitions;

use super::body::{json, parse_json, require_json};
use super::error::ApiError;
use super::extract::{ApiPath, Body};
use super::topics::existing_topic;
use super::{authz, AppState};
use crate::security::acl::{AclOperation, ResourceType};
use crate::security::Session;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use oxbow_metadata::topic::ConfigValue;
use oxbow_metadata::{AlterOp, ConfigAlteration, ConfigChange, TopicMetadata, TopicSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Serialize)]
struct ResourceMetadata {
    #[serde(rename = "self")]
    self_path: String,
}

#[derive(Debug, Serialize)]
struct ListMetadata {
    #[serde(rename = "self")]
    self_path: String,
    next: Option<String>,
}

#[derive(Debug, Serialize)]
struct List<T> {
    kind: &'static str,
    metadata: ListMetadata,
    data: Vec<T>,
}

#[derive(Debug, Serialize)]
struct ClusterView {
    kind: &'static str,
    metadata: ResourceMetadata,
    cluster_id: String,
}

#[derive(Debug, Serialize)]
struct TopicView {
    kind: &'static str,
    metadata: ResourceMetadata,
    cluster_id: String,
    topic_name: String,
    is_internal: bool,
    replication_factor: i16,
    partitions_count: usize,
    partitions: partitions::Related,
    #[serde(flatten)]
    stats: partitions::TopicStats,
}

/// `POST /v3/clusters/{c}/topics`.
#[derive(Debug, Deserialize)]
struct CreateTopicRequest {
    topic_name: String,
    /// Absent or -1: the broker's `default_partitions`.
    #[serde(default)]
    partitions_count: Option<i32>,
    /// Absent or -1: 1. Kept for describe output only (see `TopicSpec`).
    #[serde(default)]
    replication_factor: Option<i16>,
    #[serde(default)]
    configs: Vec<ConfigEntry>,
}

#[derive(Debug, Deserialize)]
struct ConfigEntry {
    name: String,
    /// `null` means "the default", so the entry is dropped.
    value: Option<String>,
}

fn cluster_view(cluster_id: &str) -> ClusterView {
    ClusterView {
        kind: "KafkaCluster",
        metadata: ResourceMetadata {
            self_path: format!("/v3/clusters/{cluster_id}"),
        },
        cluster_id: cluster_id.to_string(),
    }
}

fn topic_view(broker: &crate::broker::Broker, cluster_id: &str, t: &TopicMetadata) -> TopicView {
    let self_path = format!("/v3/clusters/{cluster_id}/topics/{}", t.name);
    TopicView {
        kind: "KafkaTopic",
        partitions: partitions::Related::to(format!("{self_path}/partitions")),
        stats: partitions::topic_stats(broker, t),
        metadata: ResourceMetadata { self_path },
        cluster_id: cluster_id.to_string(),
        topic_name: t.name.clone(),
        is_internal: false,
        replication_factor: t.replication_factor,
        partitions_count: t.partitions.len(),
    }
}

/// This broker's cluster id, if `cluster_id` is it.
fn check_cluster<'a>(app: &'a AppState, cluster_id: &str) -> Result<&'a str, ApiError> {
    let ours = app.http.broker.settings.cluster_id.as_str();
    if cluster_id == ours {
        Ok(ours)
    } else {
        Err(ApiError::unknown_cluster(cluster_id))
    }
}

/// The topic spec a create request asks for, defaults filled in.
fn topic_spec(request: CreateTopicRequest, default_partitions: i32) -> TopicSpec {
    TopicSpec {
        name: request.topic_name,
        partitions: match request.partitions_count {
            None | Some(-1) => default_partitions,
            Some(n) => n,
        },
        replication_factor: match request.replication_factor {
            None | Some(-1) => 1,
            Some(n) => n,
        },
        configs: request
            .configs
            .into_iter()
            .filter_map(|c| Some((c.name, c.value?)))
            .collect::<BTreeMap<_, _>>(),
    }
}

/// `GET /v3/clusters`.
pub(crate) async fn clusters(State(app): State<AppState>) -> Response {
    let id = &app.http.broker.settings.cluster_id;
    json(
        StatusCode::OK,
        &List {
            kind: "KafkaClusterList",
            metadata: ListMetadata {
                self_path: "/v3/clusters".into(),
                next: None,
            },
            data: vec![cluster_view(id)],
        },
    )
}

/// `GET /v3/clusters/{c}`.
pub(crate) async fn cluster(
    State(app): State<AppState>,
    ApiPath(cluster_id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    Ok(json(StatusCode::OK, &cluster_view(id)))
}

/// `GET /v3/clusters/{c}/topics`.
pub(crate) async fn list_topics(
    State(app): State<AppState>,
    session: Option<Extension<Session>>,
    ApiPath(cluster_id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    let authz = app.http.broker.authz(&authz::session_or_anonymous(session));
    let data = app
        .http
        .broker
        .topics()
        .iter()
        .filter(|t| authz.allows(AclOperation::Describe, ResourceType::Topic, &t.name))
        .map(|t| topic_view(&app.http.broker, id, t))
        .collect();
    Ok(json(
        StatusCode::OK,
        &List {
            kind: "KafkaTopicList",
            metadata: ListMetadata {
                self_path: format!("/v3/clusters/{id}/topics"),
                next: None,
            },
            data,
        },
    ))
}

/// `POST /v3/clusters/{c}/topics`: 201 with the topic; 409/40902 if it exists.
pub(crate) async fn create_topic(
    State(app): State<AppState>,
    session: Option<Extension<Session>>,
    ApiPath(cluster_id): ApiPath<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    require_json(&headers)?;
    let request: CreateTopicRequest = parse_json(&body)?;
    let broker = &app.http.broker;
    authz::require_create(
        broker,
        &authz::session_or_anonymous(session),
        &request.topic_name,
    )?;
    let spec = topic_spec(request, broker.settings.default_partitions);
    let created = broker.create_topic(spec).await?;
    Ok(json(StatusCode::CREATED, &topic_view(broker, id, &created)))
}

/// `GET /v3/clusters/{c}/topics/{t}`.
pub(crate) async fn get_topic(
    State(app): State<AppState>,
    ApiPath((cluster_id, topic)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    let t = existing_topic(&app, &topic)?;
    Ok(json(StatusCode::OK, &topic_view(&app.http.broker, id, &t)))
}

/// `DELETE /v3/clusters/{c}/topics/{t}`: 204; 404/40401 if there is no such topic.
pub(crate) async fn delete_topic(
    State(app): State<AppState>,
    ApiPath((cluster_id, topic)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    check_cluster(&app, &cluster_id)?;
    app.http.broker.delete_topic(&topic).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Serialize)]
struct TopicConfigView {
    kind: &'static str,
    metadata: ResourceMetadata,
    cluster_id: String,
    topic_name: String,
    name: &'static str,
    value: String,
    is_default: bool,
    is_read_only: bool,
    is_sensitive: bool,
    /// Confluent's names: `DYNAMIC_TOPIC_CONFIG` for an override, `STATIC_BROKER_CONFIG` for a
    /// broker flag it falls back to (`--log-retention-*`), else `DEFAULT_CONFIG`.
    source: &'static str,
}

fn config_view(
    cluster_id: &str,
    topic: &str,
    c: ConfigValue,
    fallback: Option<(&'static str, String)>,
) -> TopicConfigView {
    let fallback = fallback.filter(|_| c.is_default);
    let source = match (&fallback, c.is_default) {
        (Some(_), _) => "STATIC_BROKER_CONFIG",
        (None, true) => "DEFAULT_CONFIG",
        (None, false) => "DYNAMIC_TOPIC_CONFIG",
    };
    let is_default = c.is_default && fallback.is_none();
    let value = fallback.map_or(c.value, |(_, v)| v);
    TopicConfigView {
        kind: "KafkaTopicConfig",
        metadata: ResourceMetadata {
            self_path: format!(
                "/v3/clusters/{cluster_id}/topics/{topic}/configs/{}",
                c.name
            ),
        },
        cluster_id: cluster_id.to_string(),
        topic_name: topic.to_string(),
        name: c.name,
        value,
        is_default,
        is_read_only: false,
        is_sensitive: false,
        source,
    }
}

/// `GET /v3/clusters/{c}/topics/{t}/configs`.
pub(crate) async fn list_topic_configs(
    State(app): State<AppState>,
    ApiPath((cluster_id, topic)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    let t = existing_topic(&app, &topic)?;
    let data = t
        .configs
        .describe()
        .into_iter()
        .map(|c| {
            let fallback = app.http.broker.static_topic_default(c.name);
            config_view(id, &t.name, c, fallback)
        })
        .collect();
    Ok(json(
        StatusCode::OK,
        &List {
            kind: "KafkaTopicConfigList",
            metadata: ListMetadata {
                self_path: format!("/v3/clusters/{id}/topics/{}/configs", t.name),
                next: None,
            },
            data,
        },
    ))
}

/// `GET /v3/clusters/{c}/topics/{t}/configs/{name}`: 404/40405 for a name Kafka does not
/// define.
pub(crate) async fn get_topic_config(
    State(app): State<AppState>,
    ApiPath((cluster_id, topic, name)): ApiPath<(String, String, String)>,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    let t = existing_topic(&app, &topic)?;
    let c = t
        .configs
        .describe()
        .into_iter()
        .find(|c| c.name == name)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                40405,
                format!("topic config '{name}' does not exist (Kafka defines no such config)"),
            )
        })?;
    let fallback = app.http.broker.static_topic_default(c.name);
    Ok(json(StatusCode::OK, &config_view(id, &t.name, c, fallback)))
}

/// `PUT .../configs/{name}` body.
#[derive(Debug, Deserialize)]
struct UpdateConfigRequest {
    value: String,
}

/// `PUT /v3/clusters/{c}/topics/{t}/configs/{name}`: sets one config; 204.
pub(crate) async fn update_topic_config(
    State(app): State<AppState>,
    ApiPath((cluster_id, topic, name)): ApiPath<(String, String, String)>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    check_cluster(&app, &cluster_id)?;
    require_json(&headers)?;
    let request: UpdateConfigRequest = parse_json(&body)?;
    let change = ConfigChange {
        name,
        op: AlterOp::Set,
        value: Some(request.value),
    };
    alter(&app, &topic, vec![change], false).await
}

/// `DELETE /v3/clusters/{c}/topics/{t}/configs/{name}`: back to the default; 204.
pub(crate) async fn reset_topic_config(
    State(app): State<AppState>,
    ApiPath((cluster_id, topic, name)): ApiPath<(String, String, String)>,
) -> Result<Response, ApiError> {
    check_cluster(&app, &cluster_id)?;
    let change = ConfigChange {
        name,
        op: AlterOp::Delete,
        value: None,
    };
    alter(&app, &topic, vec![change], false).await
}

/// One entry of `POST .../configs:alter`.
#[derive(Debug, Deserialize)]
struct AlterEntry {
    name: String,
    #[serde(default)]
    value: Option<String>,
    /// `SET` (the default) or `DELETE`.
    #[serde(default)]
    operation: Option<String>,
}

/// `POST .../configs:alter` body.
#[derive(Debug, Deserialize)]
struct AlterConfigsRequest {
    data: Vec<AlterEntry>,
    #[serde(default)]
    validate_only: bool,
}

/// `POST /v3/clusters/{c}/topics/{t}/configs:alter`: every change or none; 204.
pub(crate) async fn alter_topic_configs(
    State(app): State<AppState>,
    ApiPath((cluster_id, topic)): ApiPath<(String, String)>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    check_cluster(&app, &cluster_id)?;
    require_json(&headers)?;
    let request: AlterConfigsRequest = parse_json(&body)?;
    let changes = request
        .data
        .into_iter()
        .map(|e| {
            let op = match e
                .operation
                .as_deref()
                .map(str::to_ascii_uppercase)
                .as_deref()
            {
                None | Some("SET") => AlterOp::Set,
                Some("DELETE") => AlterOp::Delete,
                Some(other) => {
                    return Err(ApiError::invalid_body(format!(
                        "config '{}': operation '{other}' is not SET or DELETE",
                        e.name
                    )))
                }
            };
            if op == AlterOp::Set && e.value.is_none() {
                return Err(ApiError::invalid_body(format!(
                    "config '{}': SET needs a value",
                    e.name
                )));
            }
            Ok(ConfigChange {
                name: e.name,
                op,
                value: e.value,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    alter(&app, &topic, changes, request.validate_only).await
}

async fn alter(
    app: &AppState,
    topic: &str,
    changes: Vec<ConfigChange>,
    validate_only: bool,
) -> Result<Response, ApiError> {
    app.http
        .broker
        .alter_topic_configs(topic, ConfigAlteration::Incremental(changes), validate_only)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_request_defaults() {
        let r: CreateTopicRequest = parse_json(br#"{"topic_name":"t"}"#).expect("parse");
        let spec = topic_spec(r, 3);
        assert_eq!((spec.partitions, spec.replication_factor), (3, 1));
        assert!(spec.configs.is_empty());

        let r: CreateTopicRequest = parse_json(
            br#"{"topic_name":"t","partitions_count":6,"replication_factor":-1,
                "configs":[{"name":"retention.ms","value":"1000"},{"name":"x","value":null}]}"#,
        )
        .expect("parse");
        let spec = topic_spec(r, 3);
        assert_eq!((spec.partitions, spec.replication_factor), (6, 1));
        assert_eq!(
            spec.configs.into_iter().collect::<Vec<_>>(),
            vec![("retention.ms".to_string(), "1000".to_string())]
        );

        let e =
            parse_json::<CreateTopicRequest>(br#"{"partitions_count":1}"#).expect_err("no name");
        assert_eq!(e.error_code(), 42201);
    }
}
