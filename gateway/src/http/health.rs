//! Probes and metrics: `/healthz` (liveness), `/readyz` (readiness), `/metrics`.
//!
//! Liveness is "this process answers HTTP": a load balancer or orchestrator restarts the
//! broker when it stops. Readiness is the `ready` flag the server raises once start-up
//! (WAL replay, listeners) is done and lowers when shutdown begins, so traffic is routed
//! away before connections close — and the log's own reasons: a failed WAL (disk full,
//! I/O error) or a WAL tail recovery waiting for a replica, named in the JSON body.

use super::body::json;
use super::AppState;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::sync::atomic::Ordering;

/// Prometheus text exposition format, version 0.0.4.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Debug, Serialize)]
struct Status {
    status: &'static str,
}

#[derive(Debug, Serialize)]
struct NotReady {
    status: &'static str,
    /// What the broker waits for, one line each (empty during start-up and shutdown).
    reasons: Vec<String>,
}

/// `GET /healthz`: 200 `{"status":"ok"}` while the process serves.
pub(crate) async fn healthz() -> Response {
    json(StatusCode::OK, &Status { status: "ok" })
}

/// `GET /readyz`: 200 `{"status":"ready"}`, or 503 `{"status":"not_ready","reasons":[..]}`
/// during start-up and shutdown, after a WAL failure, and while a WAL tail recovery waits
/// for a replica.
pub(crate) async fn readyz(State(app): State<AppState>) -> Response {
    let reasons = app.http.broker.log.not_ready_reasons();
    if app.http.ready.load(Ordering::Acquire) && reasons.is_empty() {
        json(StatusCode::OK, &Status { status: "ready" })
    } else {
        json(
            StatusCode::SERVICE_UNAVAILABLE,
            &NotReady {
                status: "not_ready",
                reasons,
            },
        )
    }
}

/// `GET /metrics`: every broker metric in the Prometheus text format.
pub(crate) async fn metrics(State(app): State<AppState>) -> Response {
    let mut response = crate::metrics::render(&app.http.broker).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(METRICS_CONTENT_TYPE),
    );
    response
}
