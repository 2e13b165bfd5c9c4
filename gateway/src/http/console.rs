//! The built-in console: `GET /ui` (a page), `/ui/console.js`, `/ui/console.css`.
//!
//! One hand-written page, script and style sheet, compiled into the binary
//! (`include_str!`): nothing is fetched from anywhere but this server, so the console works
//! offline and behind any proxy, and a strict Content-Security-Policy can forbid everything
//! else (no inline script or style, no other origin, no frames, no forms). The page holds
//! no data; its script reads the cluster through the read-only v3 and v2 JSON routes as
//! the viewer, so authentication (`authn`) and ACLs (`authz`) apply to what it shows
//! exactly as to any client, and it has no control that changes anything.
//!
//! Views (hash routes, so a view can be linked and reloaded): brokers; topics; one topic's
//! partitions (paged, 50 rows at a time, so 1,000 partitions stay quick); consumer groups;
//! one group's members, lag per partition and total lag over time (an SVG chart of the
//! broker's sampled history, `crate::samples`); a record browser for one partition (from an
//! offset, or the first offset at or after a timestamp).

use super::AppState;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

const INDEX_HTML: &str = include_str!("console/index.html");
const CONSOLE_JS: &str = include_str!("console/console.js");
const CONSOLE_CSS: &str = include_str!("console/console.css");

/// Only this server's script, style, images and JSON; nothing inline, framed or posted.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/ui",
            get(|| async { asset(INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/ui/",
            get(|| async { asset(INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/ui/console.js",
            get(|| async { asset(CONSOLE_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/ui/console.css",
            get(|| async { asset(CONSOLE_CSS, "text/css; charset=utf-8") }),
        )
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // A new binary may ship a new page: revalidate rather than run a stale script.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
