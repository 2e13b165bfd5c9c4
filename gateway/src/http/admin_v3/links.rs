//! Cluster links and mirror topics over HTTP (issue 20), shaped after Confluent's REST v3
//! cluster-linking routes (`/v3/clusters/{c}/links…`, `mirrors:promote`); what `oxbow
//! links` calls. Changing a link needs ALTER on the cluster, reading it DESCRIBE
//! (`http::authz`).
//!
//! - `GET /v3/clusters/{c}/links`: every link with its state and last error.
//! - `POST /v3/clusters/{c}/links`: `{"link_name", "bootstrap_servers", "topics": [..],
//!   "groups": [..], "sasl_mechanism"?, "sasl_username"?, "sasl_password"?,
//!   "ssl_ca_pem"? (TLS to the source, trusting these CAs), "skip_validation"?: false}` → 201; the source is asked for its topics first with the
//!   link's credentials (422/42209 naming the failure if it does not answer), unless
//!   `skip_validation`.
//! - `GET /v3/clusters/{c}/links/{l}`: the link and each mirror topic with its state,
//!   error and per-partition positions (source and destination high watermarks, lag).
//! - `DELETE /v3/clusters/{c}/links/{l}[?force=true]`: 204; refused while the link still
//!   mirrors a topic that is not promoted, unless forced.
//! - `POST /v3/clusters/{c}/links/{l}/pause`, `…/resume`: 204.
//! - `POST /v3/clusters/{c}/links/{l}/mirrors:promote`: `{"mirror_topic_names": [..]
//!   (empty: all), "wait_for_lag_zero_ms"?}` → 200 with each topic's outcome, the records
//!   it was behind (the RPO) and how long promotion took.
//!
//! The SASL password is stored in the metadata service (the link must present it) and is
//! never returned.

use super::check_cluster;
use crate::http::body::{json, parse_json, require_json};
use crate::http::error::ApiError;
use crate::http::extract::{ApiPath, Body};
use crate::http::AppState;
use crate::mirror::{admin, state_name};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use oxbow_metadata::{Link, LinkSecurity, LinkState};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateLink {
    link_name: String,
    bootstrap_servers: String,
    #[serde(default)]
    topics: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    sasl_mechanism: Option<String>,
    #[serde(default)]
    sasl_username: Option<String>,
    #[serde(default)]
    sasl_password: Option<String>,
    /// TLS to the source, trusting these CA certificates (PEM).
    #[serde(default)]
    ssl_ca_pem: Option<String>,
    #[serde(default)]
    skip_validation: bool,
}

#[derive(Debug, Serialize)]
struct LinkView {
    kind: &'static str,
    cluster_id: String,
    link_name: String,
    bootstrap_servers: String,
    /// `active` or `paused`.
    state: &'static str,
    topics: Vec<String>,
    groups: Vec<String>,
    sasl_mechanism: Option<String>,
    sasl_username: Option<String>,
    /// Whether the link speaks TLS to the source.
    tls: bool,
    /// The last error this broker's tasks or reconciler hit for the link (a wrong password,
    /// an unreachable source), cleared by the next success.
    last_error: Option<String>,
    mirror_topics: Vec<MirrorView>,
}

#[derive(Debug, Serialize)]
struct MirrorView {
    topic_name: String,
    source_topic_name: String,
    /// `mirroring`, `promoted` or `failed`.
    state: &'static str,
    error: Option<String>,
    /// Only in `GET …/links/{l}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    partitions: Option<Vec<admin::PartitionPosition>>,
}

fn link_state(s: LinkState) -> &'static str {
    match s {
        LinkState::Active => "active",
        LinkState::Paused => "paused",
    }
}

fn link_view(app: &AppState, cluster_id: &str, link: &Link) -> LinkView {
    let mirrors = &app.http.broker.mirrors;
    let mirror_topics = mirrors
        .topics()
        .into_iter()
        .filter(|t| t.value.link == link.name)
        .map(|t| MirrorView {
            topic_name: t.value.topic,
            source_topic_name: t.value.source_topic,
            state: state_name(t.value.state),
            error: t.value.error,
            partitions: None,
        })
        .collect();
    LinkView {
        kind: "KafkaLink",
        cluster_id: cluster_id.to_string(),
        link_name: link.name.clone(),
        bootstrap_servers: link.bootstrap.clone(),
        state: link_state(link.state),
        topics: link.topics.clone(),
        groups: link.groups.clone(),
        sasl_mechanism: link.security.sasl_mechanism.clone(),
        sasl_username: link.security.sasl_username.clone(),
        tls: link.security.ssl_ca_pem.is_some(),
        last_error: mirrors.link_error(&link.name),
        mirror_topics,
    }
}

/// `GET /v3/clusters/{c}/links`.
pub(crate) async fn list(
    State(app): State<AppState>,
    ApiPath(cluster_id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    let data: Vec<LinkView> = app
        .http
        .broker
        .mirrors
        .links()
        .iter()
        .map(|l| link_view(&app, id, &l.value))
        .collect();
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "kind": "KafkaLinkList", "data": data }),
    ))
}

/// `POST /v3/clusters/{c}/links`.
pub(crate) async fn create(
    State(app): State<AppState>,
    ApiPath(cluster_id): ApiPath<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    require_json(&headers)?;
    let r: CreateLink = parse_json(&body)?;
    let link = Link {
        name: r.link_name,
        bootstrap: r.bootstrap_servers,
        security: LinkSecurity {
            sasl_mechanism: r.sasl_mechanism,
            sasl_username: r.sasl_username,
            sasl_password: r.sasl_password,
            ssl_ca_pem: r.ssl_ca_pem,
        },
        topics: r.topics,
        groups: r.groups,
        state: LinkState::Active,
    };
    admin::create_link(&app.http.broker, link.clone(), r.skip_validation).await?;
    Ok(json(StatusCode::CREATED, &link_view(&app, id, &link)))
}

/// `GET /v3/clusters/{c}/links/{l}`.
pub(crate) async fn describe(
    State(app): State<AppState>,
    ApiPath((cluster_id, name)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    let broker = &app.http.broker;
    let link = broker
        .mirrors
        .link(&name)
        .ok_or_else(|| crate::error::BrokerError::UnknownLink(name.clone()))?
        .value;
    let mut view = link_view(&app, id, &link);
    // Positions need the source; without it they are left out (last_error says why).
    if let Ok(mut client) = crate::mirror::task::connect(&link).await {
        for m in view.mirror_topics.iter_mut() {
            let Some(t) = broker.mirrors.topic(&m.topic_name) else {
                continue;
            };
            if let Ok(p) = admin::positions(broker, &mut client, &t.value).await {
                m.partitions = Some(p);
            }
        }
    }
    Ok(json(StatusCode::OK, &view))
}

#[derive(Debug, Deserialize)]
pub(crate) struct DeleteQuery {
    #[serde(default)]
    force: bool,
}

/// `DELETE /v3/clusters/{c}/links/{l}`.
pub(crate) async fn delete(
    State(app): State<AppState>,
    ApiPath((cluster_id, name)): ApiPath<(String, String)>,
    Query(q): Query<DeleteQuery>,
) -> Result<Response, ApiError> {
    check_cluster(&app, &cluster_id)?;
    admin::delete_link(&app.http.broker, &name, q.force).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /v3/clusters/{c}/links/{l}/pause`.
pub(crate) async fn pause(
    State(app): State<AppState>,
    ApiPath((cluster_id, name)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    check_cluster(&app, &cluster_id)?;
    admin::set_link_state(&app.http.broker, &name, LinkState::Paused).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /v3/clusters/{c}/links/{l}/resume`.
pub(crate) async fn resume(
    State(app): State<AppState>,
    ApiPath((cluster_id, name)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    check_cluster(&app, &cluster_id)?;
    admin::set_link_state(&app.http.broker, &name, LinkState::Active).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PromoteRequest {
    #[serde(default)]
    mirror_topic_names: Vec<String>,
    #[serde(default)]
    wait_for_lag_zero_ms: Option<u64>,
}

/// `POST /v3/clusters/{c}/links/{l}/mirrors:promote`.
pub(crate) async fn promote(
    State(app): State<AppState>,
    ApiPath((cluster_id, name)): ApiPath<(String, String)>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    check_cluster(&app, &cluster_id)?;
    let r: PromoteRequest = if body.is_empty() {
        PromoteRequest {
            mirror_topic_names: vec![],
            wait_for_lag_zero_ms: None,
        }
    } else {
        require_json(&headers)?;
        parse_json(&body)?
    };
    let done = admin::promote(
        &app.http.broker,
        &name,
        &r.mirror_topic_names,
        r.wait_for_lag_zero_ms.map(Duration::from_millis),
    )
    .await?;
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "kind": "KafkaMirrorPromoteList", "data": done }),
    ))
}
