//! REST Proxy v2 consumer instances: a client creates a named consumer in a group, gives
//! it partitions (a subscription, as a real group member next to Kafka clients, or a
//! manual assignment), polls records in the JSON or binary format, commits, seeks and
//! deletes it. State lives in memory on this broker ([`instance`]); committed offsets live
//! in the group coordinator, shared with Kafka clients.
//!
//! # Endpoints (under `/consumers/{group}`)
//! | method | path | body → answer |
//! |---|---|---|
//! | POST | (none: `/consumers/{group}`) | `{"name"?, "format"?, "auto.offset.reset"?, "auto.commit.enable"?}` → `{"instance_id","base_uri"}` |
//! | DELETE | `/instances/{i}` | → 204 (leaves the group) |
//! | POST, GET, DELETE | `/instances/{i}/subscription` | `{"topics":[..]}` → 204; → `{"topics":[..]}`; → 204 |
//! | POST, GET | `/instances/{i}/assignments` | `{"partitions":[{"topic","partition"}]}` → 204; → same shape |
//! | GET | `/instances/{i}/records?timeout=&max_bytes=` | → `[{"topic","key","value","partition","offset"}]` |
//! | POST | `/instances/{i}/offsets` | `{"offsets":[{"topic","partition","offset","metadata"?}]}` or no body → 200 |
//! | GET | `/instances/{i}/offsets` | `{"partitions":[..]}` or no body (= assigned) → `{"offsets":[{"topic","partition","offset","metadata"}]}` |
//! | POST | `/instances/{i}/positions` | `{"offsets":[{"topic","partition","offset"}]}` → 204 |
//! | POST | `/instances/{i}/positions/beginning`, `/end` | `{"partitions":[..]}` → 204 |
//!
//! # Semantics
//! - `format` is `binary` (default) or `json`; a poll's `Accept` must name the instance's
//!   format (or be absent or a wildcard), else 406/40601.
//! - An explicit commit of offset N stores N + 1, the next offset to read (the REST
//!   Proxy's rule: the body names the last record consumed). A commit without a body
//!   stores every current position. `GET offsets` returns what is stored.
//! - `auto.commit.enable` (default `true`, Kafka's default) commits the positions after
//!   every poll that moved them, and before a rebalance takes partitions away.
//! - Positions start at the group's committed offset, else at `auto.offset.reset`
//!   (`latest` by default, as in Kafka).
//! - In a cluster, creating an instance on a broker that does not coordinate the group
//!   answers 307 with the coordinator's address (instances live on the group's coordinator).
//! - `topic_pattern` subscriptions match whole topic names (as Kafka's Java client) and are
//!   re-evaluated while subscribed: a topic created later that matches triggers a rebalance.
//!
//! # Errors (besides the API-wide ones in [`super`])
//! | status | code  | when |
//! |--------|-------|------|
//! | 404    | 40403 | no such consumer instance (never created, deleted, or expired) |
//! | 409    | 40902 | an instance of that name already exists in the group |
//! | 409    | 40903 | subscribe while manually assigned (or the reverse); seek a partition not assigned; poll with neither, or while the group refuses the member |
//! | 409    | 40905 | commit refused by the group (rebalance in progress, stale generation) |
//! | 429    | 42901 | [`instance::INSTANCES_MAX`] instances exist |

pub mod instance;
pub mod member;
pub mod offsets;
pub mod poll;

use super::body::{json_response, parse_json, require_json, v2_ok, EmbeddedFormat};
use super::body::{JSON_CONTENT_TYPE, V2_CONTENT_TYPE};
use super::error::ApiError;
use super::extract::{ApiPath, ApiQuery, Body};
use super::records::embed;
use super::records::read_limits;
use super::{authz, AppState};
use crate::security::Session;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Extension;
use axum::Router;
use bytes::Bytes;
use instance::{InstanceConfig, OffsetReset, Tp};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The consumer routes, merged into the API's router.
pub(crate) fn routes() -> Router<AppState> {
    const I: &str = "/consumers/{group}/instances/{instance}";
    Router::new()
        .route("/consumers/{group}", post(create))
        .route(I, delete(remove))
        .route(
            &format!("{I}/subscription"),
            post(subscribe).get(subscription).delete(unsubscribe),
        )
        .route(&format!("{I}/assignments"), post(assign).get(assignments))
        .route(&format!("{I}/records"), get(records))
        .route(&format!("{I}/offsets"), post(commit).get(committed))
        .route(&format!("{I}/positions"), post(seek))
        .route(&format!("{I}/positions/beginning"), post(seek_beginning))
        .route(&format!("{I}/positions/end"), post(seek_end))
}

/// Longest instance name: it appears in paths and in the member's client id.
const NAME_BYTES_MAX: usize = 249;

#[derive(Debug, Default, Deserialize)]
struct CreateRequest {
    name: Option<String>,
    format: Option<String>,
    #[serde(rename = "auto.offset.reset")]
    auto_offset_reset: Option<String>,
    /// A string in the REST Proxy (`"true"`); a JSON boolean is taken too.
    #[serde(rename = "auto.commit.enable")]
    auto_commit_enable: Option<serde_json::Value>,
}

fn parse_create(body: &[u8]) -> Result<(Option<String>, InstanceConfig), ApiError> {
    let req: CreateRequest = if body.iter().all(u8::is_ascii_whitespace) {
        CreateRequest::default()
    } else {
        parse_json(body)?
    };
    if let Some(name) = &req.name {
        if name.is_empty() || name.len() > NAME_BYTES_MAX || name.contains('/') {
            return Err(ApiError::invalid_body(format!(
                "invalid consumer name '{name}': 1 to {NAME_BYTES_MAX} bytes, no '/'"
            )));
        }
    }
    let format = match req
        .format
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("binary") => EmbeddedFormat::Binary,
        Some("json") => EmbeddedFormat::Json,
        Some(other) => {
            return Err(ApiError::invalid_body(format!(
                "unsupported format '{other}': use 'binary' or 'json' (avro, protobuf and \
                 jsonschema need a schema registry)"
            )))
        }
    };
    let reset = match req
        .auto_offset_reset
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("latest" | "largest") => OffsetReset::Latest,
        Some("earliest" | "smallest") => OffsetReset::Earliest,
        Some(other) => {
            return Err(ApiError::invalid_body(format!(
                "unsupported auto.offset.reset '{other}': use 'earliest' or 'latest'"
            )))
        }
    };
    let auto_commit = match &req.auto_commit_enable {
        None | Some(serde_json::Value::Null) => true,
        Some(serde_json::Value::Bool(b)) => *b,
        Some(serde_json::Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
        Some(serde_json::Value::String(s)) if s.eq_ignore_ascii_case("false") => false,
        Some(other) => {
            return Err(ApiError::invalid_body(format!(
                "invalid auto.commit.enable {other}: use \"true\" or \"false\""
            )))
        }
    };
    Ok((
        req.name,
        InstanceConfig {
            format,
            reset,
            auto_commit,
        },
    ))
}

/// Parses a JSON body, checking its `Content-Type` first; `None` for an empty body.
fn optional_json<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Option<T>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    require_json(headers)?;
    parse_json(body).map(Some)
}

fn required_json<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<T, ApiError> {
    require_json(headers)?;
    parse_json(body)
}

#[derive(Debug, Serialize)]
struct Created {
    instance_id: String,
    base_uri: String,
}

/// `POST /consumers/{group}`.
async fn create(
    State(app): State<AppState>,
    ApiPath(group): ApiPath<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    if !body.iter().all(u8::is_ascii_whitespace) {
        require_json(&headers)?;
    }
    let (name, config) = parse_create(&body)?;
    // An instance is a member of its group through this broker's coordinator, so it must
    // live on the broker that coordinates the group: send the client there (307 keeps the
    // method and body; the answer's base_uri then names that broker).
    let broker = &app.http.broker;
    let coordinator = broker.cluster.coordinator_for(&group);
    if coordinator != broker.settings.broker_id {
        if let Some(b) = broker.cluster.broker(coordinator) {
            let location = format!("http://{}/consumers/{group}", b.http_addr);
            return Ok((
                StatusCode::TEMPORARY_REDIRECT,
                [(header::LOCATION, location)],
            )
                .into_response());
        }
    }
    let instance = app.consumers.create(&group, name, config)?;
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("localhost");
    tracing::info!(%group, instance = %instance.id, ?config, "created consumer instance");
    Ok(v2_ok(&Created {
        base_uri: format!("http://{host}/consumers/{group}/instances/{}", instance.id),
        instance_id: instance.id.clone(),
    }))
}

/// `DELETE /consumers/{group}/instances/{instance}`. An auto-committing instance commits
/// its positions first, as a Kafka consumer does when closed.
async fn remove(
    State(app): State<AppState>,
    ApiPath((group, id)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let instance = app.consumers.get(&group, &id)?;
    if instance.config.auto_commit {
        let _io = instance.io.lock().await;
        let (member, positions) = {
            let s = instance.state();
            let positions: Vec<(Tp, i64)> = s
                .positions
                .iter()
                .filter(|(tp, _)| s.assigned.contains(*tp))
                .map(|(tp, o)| (tp.clone(), *o))
                .collect();
            (s.member.clone(), positions)
        };
        let committed =
            offsets::commit_positions(&app.http.broker, &group, member.as_ref(), positions).await;
        if let Err(e) = committed {
            tracing::debug!(%group, instance = %id, error = %e, "commit on delete refused");
        }
    }
    app.consumers.remove(&group, &id)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize)]
struct SubscribeRequest {
    topics: Option<Vec<String>>,
    topic_pattern: Option<String>,
}

fn parse_subscribe(req: SubscribeRequest) -> Result<member::Subscription, ApiError> {
    match (req.topics, req.topic_pattern) {
        (Some(_), Some(_)) => Err(ApiError::invalid_body(
            "give either 'topics' or 'topic_pattern', not both",
        )),
        (None, Some(pattern)) => member::Subscription::pattern(&pattern).map_err(|e| {
            ApiError::invalid_body(format!(
                "'topic_pattern' is not a valid regular expression: {e}"
            ))
        }),
        (None, None) => Err(ApiError::invalid_body("'topics' is required")),
        (Some(topics), None) if topics.is_empty() => Err(ApiError::invalid_body(
            "'topics' must name at least one topic",
        )),
        (Some(mut topics), None) => {
            topics.sort();
            topics.dedup();
            Ok(member::Subscription::Topics(topics))
        }
    }
}

/// `POST .../subscription`.
async fn subscribe(
    State(app): State<AppState>,
    session: Option<Extension<Session>>,
    ApiPath((group, id)): ApiPath<(String, String)>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let instance = app.consumers.get(&group, &id)?;
    let subscription = parse_subscribe(required_json(&headers, &body)?)?;
    // READ on every topic named (`http::authz`; a pattern's topics are checked per poll).
    if let member::Subscription::Topics(topics) = &subscription {
        authz::require_read(&app.http.broker, session, topics)?;
    }
    app.consumers.subscribe(&instance, subscription)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Serialize)]
struct Subscription {
    topics: Vec<String>,
}

/// `GET .../subscription`.
async fn subscription(
    State(app): State<AppState>,
    ApiPath((group, id)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let instance = app.consumers.get(&group, &id)?;
    let topics = match &instance.state().mode {
        instance::Mode::Subscribed(topics) => topics.clone(),
        instance::Mode::SubscribedPattern(pattern) => pattern.topics(&app.http.broker),
        instance::Mode::None | instance::Mode::Assigned => Vec::new(),
    };
    Ok(v2_ok(&Subscription { topics }))
}

/// `DELETE .../subscription`.
async fn unsubscribe(
    State(app): State<AppState>,
    ApiPath((group, id)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let instance = app.consumers.get(&group, &id)?;
    app.consumers.unsubscribe(&instance);
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize, Serialize)]
struct PartitionJson {
    topic: String,
    partition: i32,
}

#[derive(Debug, Deserialize, Serialize)]
struct Partitions {
    partitions: Vec<PartitionJson>,
}

fn tps(partitions: Vec<PartitionJson>) -> Result<Vec<Tp>, ApiError> {
    partitions
        .into_iter()
        .map(|p| {
            if p.partition < 0 {
                Err(ApiError::invalid_body(format!(
                    "invalid partition {} of topic '{}'",
                    p.partition, p.topic
                )))
            } else {
                Ok((p.topic, p.partition))
            }
        })
        .collect()
}

/// `POST .../assignments`.
async fn assign(
    State(app): State<AppState>,
    session: Option<Extension<Session>>,
    ApiPath((group, id)): ApiPath<(String, String)>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let instance = app.consumers.get(&group, &id)?;
    let req: Partitions = required_json(&headers, &body)?;
    let tps = tps(req.partitions)?;
    authz::require_read(&app.http.broker, session, tps.iter().map(|(t, _)| t))?;
    for tp in &tps {
        offsets::existing(&app.http.broker, tp)?;
    }
    app.consumers.assign(&instance, tps)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET .../assignments`.
async fn assignments(
    State(app): State<AppState>,
    ApiPath((group, id)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let instance = app.consumers.get(&group, &id)?;
    let partitions = instance
        .state()
        .assigned
        .iter()
        .map(|(topic, partition)| PartitionJson {
            topic: topic.clone(),
            partition: *partition,
        })
        .collect();
    Ok(v2_ok(&Partitions { partitions }))
}

/// Whether the `Accept` header allows answering in `format`: absent, a wildcard, or the
/// format's media type (`application/json` for the JSON format).
fn accepts(headers: &HeaderMap, format: EmbeddedFormat) -> bool {
    let ranges: Vec<String> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .filter(|v| !v.is_empty())
        .collect();
    ranges.is_empty()
        || ranges.iter().any(|r| {
            matches!(r.as_str(), "*/*" | "application/*")
                || r == format.content_type()
                || (format == EmbeddedFormat::Json && r == JSON_CONTENT_TYPE)
                || (format == EmbeddedFormat::Binary && r == V2_CONTENT_TYPE)
        })
}

fn format_name(format: EmbeddedFormat) -> &'static str {
    match format {
        EmbeddedFormat::Json => "json",
        EmbeddedFormat::Binary => "binary",
    }
}

#[derive(Debug, Serialize)]
struct RecordView<'a> {
    topic: &'a str,
    key: Option<Box<RawValue>>,
    value: Option<Box<RawValue>>,
    partition: i32,
    offset: i64,
}

/// `GET .../records`.
async fn records(
    State(app): State<AppState>,
    session: Option<Extension<Session>>,
    ApiPath((group, id)): ApiPath<(String, String)>,
    ApiQuery(query): ApiQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let instance = app.consumers.get(&group, &id)?;
    // READ on every topic read, at every poll (an ACL removed after subscribing counts).
    if app.http.broker.authorizer.enabled() {
        let topics: Vec<String> = {
            let state = instance.state();
            match &state.mode {
                instance::Mode::Subscribed(topics) => topics.clone(),
                instance::Mode::SubscribedPattern(pattern) => pattern.topics(&app.http.broker),
                instance::Mode::Assigned | instance::Mode::None => {
                    state.assigned.iter().map(|(t, _)| t.clone()).collect()
                }
            }
        };
        authz::require_read(&app.http.broker, session, &topics)?;
    }
    let format = instance.config.format;
    if !accepts(&headers, format) {
        return Err(ApiError::not_acceptable(format!(
            "consumer instance '{id}' reads the {} format: accept {}",
            format_name(format),
            format.content_type()
        )));
    }
    let (max_bytes, timeout) = read_limits(&query)?;
    let polled = poll::poll(&app.http.broker, &instance, max_bytes, timeout).await?;
    let views = polled
        .iter()
        .map(|r| {
            Ok(RecordView {
                topic: &r.topic,
                key: embed(format, r.key.as_ref())?,
                value: embed(format, r.value.as_ref())?,
                partition: r.partition,
                offset: r.offset,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(json_response(StatusCode::OK, format.content_type(), &views))
}

#[derive(Debug, Deserialize)]
struct OffsetJson {
    topic: String,
    partition: i32,
    offset: i64,
    metadata: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Offsets {
    offsets: Vec<OffsetJson>,
}

fn parse_offsets(req: Offsets) -> Result<Vec<(Tp, i64, String)>, ApiError> {
    req.offsets
        .into_iter()
        .map(|o| {
            if o.partition < 0 || o.offset < 0 {
                return Err(ApiError::invalid_body(format!(
                    "invalid offset {} of partition {}-{}",
                    o.offset, o.topic, o.partition
                )));
            }
            Ok((
                (o.topic, o.partition),
                o.offset,
                o.metadata.unwrap_or_default(),
            ))
        })
        .collect()
}

/// `POST .../offsets`: commits the given offsets (each as offset + 1) or, without a body,
/// every current position.
async fn commit(
    State(app): State<AppState>,
    ApiPath((group, id)): ApiPath<(String, String)>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let instance = app.consumers.get(&group, &id)?;
    let broker = &app.http.broker;
    let explicit = optional_json::<Offsets>(&headers, &body)?
        .map(parse_offsets)
        .transpose()?
        .filter(|o| !o.is_empty());
    let _io = instance.io.lock().await;
    let (member, offsets) = {
        let s = instance.state();
        let offsets = match explicit {
            Some(offsets) => offsets
                .into_iter()
                .map(|(tp, o, m)| (tp, o.saturating_add(1), m))
                .collect(),
            None => s
                .positions
                .iter()
                .filter(|(tp, _)| s.assigned.contains(*tp))
                .map(|(tp, o)| (tp.clone(), *o, String::new()))
                .collect::<Vec<_>>(),
        };
        (s.member.clone(), offsets)
    };
    for (tp, _, _) in &offsets {
        offsets::existing(broker, tp)?;
    }
    offsets::commit(broker, &group, member.as_ref(), offsets).await?;
    Ok(StatusCode::OK.into_response())
}

#[derive(Debug, Serialize)]
struct CommittedView {
    topic: String,
    partition: i32,
    offset: i64,
    metadata: String,
}

#[derive(Debug, Serialize)]
struct CommittedList {
    offsets: Vec<CommittedView>,
}

/// `GET .../offsets`: the committed offsets of the partitions in the body, or of the
/// assigned partitions without one.
async fn committed(
    State(app): State<AppState>,
    ApiPath((group, id)): ApiPath<(String, String)>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let instance = app.consumers.get(&group, &id)?;
    let wanted: Vec<Tp> = match optional_json::<Partitions>(&headers, &body)? {
        Some(req) => tps(req.partitions)?,
        None => instance.state().assigned.iter().cloned().collect(),
    };
    let found = offsets::committed(&app.http.broker, &group, &wanted).await?;
    let offsets = found
        .into_iter()
        .map(|((topic, partition), offset, metadata)| CommittedView {
            topic,
            partition,
            offset,
            metadata,
        })
        .collect();
    Ok(v2_ok(&CommittedList { offsets }))
}

/// `POST .../positions`: the next poll reads each partition from the given offset.
async fn seek(
    State(app): State<AppState>,
    ApiPath((group, id)): ApiPath<(String, String)>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let instance = app.consumers.get(&group, &id)?;
    let offsets: Vec<(Tp, i64)> = parse_offsets(required_json(&headers, &body)?)?
        .into_iter()
        .map(|(tp, o, _)| (tp, o))
        .collect();
    for (tp, _) in &offsets {
        offsets::existing(&app.http.broker, tp)?;
    }
    let _io = instance.io.lock().await;
    offsets::seek(&instance, offsets)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn seek_boundary(
    app: AppState,
    group: String,
    id: String,
    headers: HeaderMap,
    body: Bytes,
    to: OffsetReset,
) -> Result<Response, ApiError> {
    let instance = app.consumers.get(&group, &id)?;
    let req: Partitions = required_json(&headers, &body)?;
    let tps = tps(req.partitions)?;
    let _io = instance.io.lock().await;
    offsets::seek_to(&app.http.broker, &instance, tps, to).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST .../positions/beginning`.
async fn seek_beginning(
    State(app): State<AppState>,
    ApiPath((group, id)): ApiPath<(String, String)>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    seek_boundary(app, group, id, headers, body, OffsetReset::Earliest).await
}

/// `POST .../positions/end`.
async fn seek_end(
    State(app): State<AppState>,
    ApiPath((group, id)): ApiPath<(String, String)>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    seek_boundary(app, group, id, headers, body, OffsetReset::Latest).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::body::{BINARY_V2_CONTENT_TYPE, JSON_V2_CONTENT_TYPE};
    use crate::http::records::{READ_BYTES_DEFAULT, READ_TIMEOUT_DEFAULT};
    use axum::http::HeaderValue;
    use std::collections::HashMap;
    use std::time::Duration;

    #[test]
    fn create_defaults_and_options() {
        let (name, c) = parse_create(b"").expect("empty");
        assert_eq!(name, None);
        assert_eq!(
            c,
            InstanceConfig {
                format: EmbeddedFormat::Binary,
                reset: OffsetReset::Latest,
                auto_commit: true
            }
        );
        let (name, c) = parse_create(
            br#"{"name":"c1","format":"JSON","auto.offset.reset":"earliest","auto.commit.enable":"false"}"#,
        )
        .expect("full");
        assert_eq!(name.as_deref(), Some("c1"));
        assert_eq!(
            c,
            InstanceConfig {
                format: EmbeddedFormat::Json,
                reset: OffsetReset::Earliest,
                auto_commit: false
            }
        );
        let (_, c) = parse_create(br#"{"auto.commit.enable":false}"#).expect("bool");
        assert!(!c.auto_commit);
        for bad in [
            &br#"{"format":"avro"}"#[..],
            br#"{"auto.offset.reset":"none"}"#,
            br#"{"auto.commit.enable":"maybe"}"#,
            br#"{"name":"a/b"}"#,
            br#"{"name":""}"#,
        ] {
            let e = parse_create(bad).expect_err("invalid");
            assert_eq!(e.error_code(), 42201, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_create(b"{").expect_err("syntax").error_code(), 40001);
    }

    #[test]
    fn subscriptions() {
        let parse = |s: &str| parse_subscribe(serde_json::from_str(s).expect("json"));
        assert_eq!(
            parse(r#"{"topics":["b","a","b"]}"#).expect("topics"),
            member::Subscription::Topics(vec!["a".into(), "b".into()])
        );
        let member::Subscription::Pattern(re) =
            parse(r#"{"topic_pattern":"orders-.*"}"#).expect("pattern")
        else {
            panic!("a pattern subscription");
        };
        // The whole name must match, as with Kafka's Java client.
        assert!(re.is_match("orders-eu"));
        assert!(!re.is_match("old-orders-eu"));
        for bad in [
            r#"{"topic_pattern":"a("}"#,
            r#"{}"#,
            r#"{"topics":[]}"#,
            r#"{"topics":["a"],"topic_pattern":"a"}"#,
        ] {
            assert_eq!(parse(bad).expect_err(bad).error_code(), 42201);
        }
    }

    #[test]
    fn offsets_bodies() {
        let req: Offsets = serde_json::from_str(
            r#"{"offsets":[{"topic":"t","partition":1,"offset":5},{"topic":"t","partition":0,"offset":0,"metadata":"m"}]}"#,
        )
        .expect("json");
        assert_eq!(
            parse_offsets(req).expect("valid"),
            vec![
                (("t".to_string(), 1), 5, String::new()),
                (("t".to_string(), 0), 0, "m".to_string())
            ]
        );
        let req: Offsets =
            serde_json::from_str(r#"{"offsets":[{"topic":"t","partition":0,"offset":-1}]}"#)
                .expect("json");
        assert_eq!(
            parse_offsets(req).expect_err("negative").error_code(),
            42201
        );
    }

    #[test]
    fn accept_must_match_the_format() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_str(v).expect("value"));
            h
        };
        assert!(accepts(&HeaderMap::new(), EmbeddedFormat::Json));
        assert!(accepts(&with("*/*"), EmbeddedFormat::Json));
        assert!(accepts(&with(JSON_V2_CONTENT_TYPE), EmbeddedFormat::Json));
        assert!(accepts(&with("application/json"), EmbeddedFormat::Json));
        assert!(!accepts(
            &with(BINARY_V2_CONTENT_TYPE),
            EmbeddedFormat::Json
        ));
        assert!(accepts(
            &with(BINARY_V2_CONTENT_TYPE),
            EmbeddedFormat::Binary
        ));
        assert!(!accepts(
            &with(JSON_V2_CONTENT_TYPE),
            EmbeddedFormat::Binary
        ));
        assert!(accepts(
            &with("text/html, application/vnd.kafka.binary.v2+json;q=0.9"),
            EmbeddedFormat::Binary
        ));
    }

    #[test]
    fn poll_parameters() {
        let q = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            read_limits(&q(&[])).expect("defaults"),
            (READ_BYTES_DEFAULT, READ_TIMEOUT_DEFAULT)
        );
        assert_eq!(
            read_limits(&q(&[("max_bytes", "10"), ("timeout", "5")])).expect("given"),
            (10, Duration::from_millis(5))
        );
        assert_eq!(
            read_limits(&q(&[("max_bytes", "0")]))
                .expect_err("zero")
                .error_code(),
            42204
        );
    }
}
