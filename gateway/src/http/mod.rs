//! The HTTP/JSON API: Confluent REST Proxy v2 compatible topics, produce and simple reads,
//! a minimal v3 admin API, and `/healthz`, `/readyz`, `/metrics`.
//!
//! [`router`] builds the whole API over a shared [`Broker`]; the server binds and serves
//! it (and owns its shutdown). Handlers are thin: they parse, call the broker, and shape
//! the answer; everything they share is in [`body`], [`extract`] and [`error`].
//!
//! # Endpoints
//! - [`topics`]: `GET /topics`, `GET /topics/{t}`, `GET /topics/{t}/partitions[/{p}]`
//! - [`produce`]: `POST /topics/{t}`, `POST /topics/{t}/partitions/{p}`
//! - [`records`]: `GET /topics/{t}/partitions/{p}/records?offset=&max_bytes=&timeout=`
//! - [`consumers`]: REST Proxy v2 consumer instances, `POST /consumers/{g}` and
//!   `/consumers/{g}/instances/{i}/…` (their own error codes are listed there)
//! - [`admin_v3`]: `/v3/clusters`, `/v3/clusters/{c}`, `/v3/clusters/{c}/topics[/{t}]`,
//!   `.../topics/{t}/configs[/{name}|:alter]`, `.../topics/{t}/partitions[/{p}]`,
//!   `/v3/clusters/{c}/brokers[/{b}]`, `/v3/clusters/{c}/consumer-groups[/{g}[/consumers|
//!   /lags|/lag-summary]]` (read-only)
//! - [`console`]: the read-only console, `GET /ui` and its script and style sheet
//! - [`health`]: `/healthz`, `/readyz`, `/metrics`
//! - [`authn`]: `--http-authentication` Basic and Bearer (401/40101 with `WWW-Authenticate`)
//! - [`authz`]: ACL checks of every route under `--authorizer acl` (403/40301)
//!
//! # Errors
//! Every error is `{"error_code": N, "message": "..."}` (`application/json`), where `N` is
//! the HTTP status × 100 plus a detail, as in the REST Proxy. Broker failures use the one
//! mapping in `crate::error` (e.g. 404/40401 unknown topic, 404/40402 unknown partition,
//! 416/41601 offset out of range, 409/40902 topic exists, 422/42202 invalid topic name).
//! The errors only HTTP has:
//!
//! | status | code  | when |
//! |--------|-------|------|
//! | 400    | 40001 | body is not JSON (syntax error, truncated, empty) |
//! | 400    | 40002 | body could not be read |
//! | 400    | 40003 | path is not UTF-8 after percent-decoding |
//! | 401    | 40101 | no valid credentials (`--http-authentication`, see [`authn`]) |
//! | 403    | 40301 | not authorized (`--authorizer acl`, see [`authz`]) |
//! | 404    | 40400 | no such endpoint |
//! | 404    | 40402 | partition path segment is not a partition number |
//! | 404    | 40404 | v3 cluster id is not this cluster's |
//! | 404    | 40405 | v3 topic config name Kafka does not define |
//! | 404    | 40406 | v3 consumer group this cluster does not know |
//! | 404    | 40407 | v3 broker id that is not a live broker |
//! | 405    | 40500 | method not allowed on this endpoint |
//! | 406    | 40601 | `Accept` names no format this endpoint produces |
//! | 408    | 40801 | body not received whole within `--http-body-timeout` |
//! | 413    | 41301 | body larger than [`BODY_BYTES_MAX`] |
//! | 415    | 41501 | `Content-Type` missing or unsupported |
//! | 422    | 42201 | JSON of the wrong shape (missing field, wrong type, empty `records`) |
//! | 422    | 42203 | binary-format key or value is not base64 |
//! | 422    | 42204 | query parameter missing or invalid |
//! | 422    | 42209 | more than [`produce::RECORDS_PER_REQUEST_MAX`] records |
//! | 422    | 42210 | JSON nested deeper than [`body::JSON_DEPTH_MAX`] |
//! | 431    | 43101 | more than [`HEADERS_MAX`] header lines |
//! | 503    | 50301 | Basic login waited too long for a password check (retry) |
//!
//! Connections are bounded by [`listener`]: a cap, and header-read, idle and body timeouts.
//! A request head hyper cannot parse at all (over [`listener::HEADERS_PARSE_MAX`] lines or
//! [`listener::HEADER_BYTES_MAX`] bytes, a malformed request line) is answered by hyper
//! itself, before any of this code runs, with an empty 4xx body.
//!
//! Handlers reject through their own extractors ([`extract`]), and a last middleware turns
//! any remaining non-JSON error (e.g. axum's own 405) into this shape, so a client never
//! sees a plain-text error.

pub mod admin_v3;
pub mod authn;
pub mod authz;
pub mod body;
pub mod console;
pub mod consumers;
pub mod error;
pub mod extract;
pub mod health;
pub mod listener;
pub mod produce;
pub mod records;
pub mod topics;

use crate::broker::Broker;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use error::ApiError;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

/// Largest request body. Bounds the memory one request pins; a produce request of this
/// size is already far more than one round trip should carry.
pub const BODY_BYTES_MAX: usize = 32 << 20;

/// Most header lines in a request; more is 431 (with the error JSON). Kafka's REST Proxy
/// (Jetty) bounds header bytes instead; a count is what a client can act on, and hyper's
/// own byte bound ([`listener::HEADER_BYTES_MAX`]) still applies.
pub const HEADERS_MAX: usize = 100;

/// How much of a non-JSON error body is kept as the message when it is rewritten as JSON.
const ERROR_TEXT_BYTES_MAX: usize = 4 << 10;

/// What the HTTP API needs from the server.
#[derive(Clone)]
pub struct HttpState {
    pub broker: Arc<Broker>,
    /// Raised once the broker serves traffic, lowered when shutdown begins (`/readyz`).
    pub ready: Arc<AtomicBool>,
    /// `--http-authentication` and friends (none by default).
    pub authentication: authn::HttpAuthSettings,
}

/// The state handlers see: the server's plus what the API itself keeps.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) http: HttpState,
    /// Rotates the partition unkeyed records of successive produce requests go to.
    pub(crate) next_partition: Arc<AtomicU32>,
    /// REST Proxy consumer instances; dropping the last clone ends their tasks.
    pub(crate) consumers: Arc<consumers::instance::Registry>,
    /// Who requests are (`authn`): the settings and the Basic verifier.
    pub(crate) authentication: Arc<authn::Authentication>,
}

/// The whole HTTP API, ready for `axum::serve`.
pub fn router(state: HttpState) -> Router {
    let app = AppState {
        consumers: Arc::new(consumers::instance::Registry::new(state.broker.clone())),
        authentication: Arc::new(authn::Authentication {
            settings: state.authentication.clone(),
            logins: crate::security::password::PasswordLogins::new(state.broker.security.clone()),
        }),
        http: state,
        next_partition: Arc::new(AtomicU32::new(0)),
    };
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/topics", get(topics::list))
        .route(
            "/topics/{topic}",
            get(topics::describe).post(produce::to_topic),
        )
        .route("/topics/{topic}/partitions", get(topics::partitions))
        .route(
            "/topics/{topic}/partitions/{partition}",
            get(topics::partition).post(produce::to_partition),
        )
        .route(
            "/topics/{topic}/partitions/{partition}/records",
            get(records::read),
        )
        .route("/v3/clusters", get(admin_v3::clusters))
        .route("/v3/clusters/{cluster}", get(admin_v3::cluster))
        .route(
            "/v3/clusters/{cluster}/topics",
            get(admin_v3::list_topics).post(admin_v3::create_topic),
        )
        .route(
            "/v3/clusters/{cluster}/topics/{topic}",
            get(admin_v3::get_topic).delete(admin_v3::delete_topic),
        )
        .route(
            "/v3/clusters/{cluster}/topics/{topic}/configs",
            get(admin_v3::list_topic_configs),
        )
        .route(
            "/v3/clusters/{cluster}/topics/{topic}/configs:alter",
            post(admin_v3::alter_topic_configs),
        )
        .route(
            "/v3/clusters/{cluster}/topics/{topic}/configs/{name}",
            get(admin_v3::get_topic_config)
                .put(admin_v3::update_topic_config)
                .delete(admin_v3::reset_topic_config),
        )
        .route(
            "/v3/clusters/{cluster}/topics/{topic}/partitions",
            get(admin_v3::partitions::list),
        )
        .route(
            "/v3/clusters/{cluster}/topics/{topic}/partitions/{partition}",
            get(admin_v3::partitions::get),
        )
        .route(
            "/v3/clusters/{cluster}/brokers",
            get(admin_v3::brokers::list),
        )
        .route(
            "/v3/clusters/{cluster}/brokers/{broker}",
            get(admin_v3::brokers::get),
        )
        .route(
            "/v3/clusters/{cluster}/consumer-groups",
            get(admin_v3::groups::list),
        )
        .route(
            "/v3/clusters/{cluster}/consumer-groups/{group}",
            get(admin_v3::groups::get),
        )
        .route(
            "/v3/clusters/{cluster}/consumer-groups/{group}/consumers",
            get(admin_v3::groups::consumers),
        )
        .route(
            "/v3/clusters/{cluster}/consumer-groups/{group}/lags",
            get(admin_v3::groups::lags),
        )
        .route(
            "/v3/clusters/{cluster}/consumer-groups/{group}/lag-summary",
            get(admin_v3::groups::lag_summary),
        )
        .route(
            "/v3/clusters/{cluster}/links",
            get(admin_v3::links::list).post(admin_v3::links::create),
        )
        .route(
            "/v3/clusters/{cluster}/links/{link}",
            get(admin_v3::links::describe).delete(admin_v3::links::delete),
        )
        .route(
            "/v3/clusters/{cluster}/links/{link}/pause",
            post(admin_v3::links::pause),
        )
        .route(
            "/v3/clusters/{cluster}/links/{link}/resume",
            post(admin_v3::links::resume),
        )
        .route(
            "/v3/clusters/{cluster}/links/{link}/mirrors:promote",
            post(admin_v3::links::promote),
        )
        .merge(console::routes())
        .merge(consumers::routes())
        // Every route above (not the fallback): ACL checks, and the request's session.
        .route_layer(middleware::from_fn_with_state(app.clone(), authz::check))
        .fallback(no_route)
        // Every route and the fallback: who the request is (401 before anything else).
        .layer(middleware::from_fn_with_state(
            app.clone(),
            authn::authenticate,
        ))
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .layer(middleware::from_fn_with_state(app.clone(), observe))
        .with_state(app)
}

async fn no_route(uri: Uri) -> ApiError {
    ApiError::no_route(uri.path())
}

/// Counts every request and makes sure every error leaves as JSON.
async fn observe(State(app): State<AppState>, request: Request, next: Next) -> Response {
    app.http
        .broker
        .metrics
        .http_requests
        .fetch_add(1, Ordering::Relaxed);
    let headers = request.headers().len();
    if headers > HEADERS_MAX {
        return ApiError::too_many_headers(headers, HEADERS_MAX).into_response();
    }
    let response = next.run(request).await;
    if !is_unshaped_error(&response) {
        return response;
    }
    // An error from axum itself (405, or a rejection no extractor of ours wraps): keep its
    // status, headers (e.g. `Allow`) and text, in the error JSON.
    let status = response.status();
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, ERROR_TEXT_BYTES_MAX)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("request failed")
            .to_string()
    } else {
        text
    };
    let shaped = ApiError::from_status(status, message).into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    let (shaped_parts, shaped_body) = shaped.into_parts();
    parts.headers.extend(shaped_parts.headers);
    Response::from_parts(parts, shaped_body)
}

/// An error response that is not JSON.
fn is_unshaped_error(response: &Response) -> bool {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return false;
    }
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("json"));
    !json
}
