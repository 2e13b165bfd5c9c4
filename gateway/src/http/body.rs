//! Media types, JSON bodies and JSON responses: the pure rules every endpoint shares.
//!
//! - Produce bodies are read by their `Content-Type` ([`produce_format`]); record reads
//!   answer in the format the `Accept` header asks for ([`read_format`]).
//! - [`parse_json`] tells a syntax error (400/40001) from valid JSON of the wrong shape
//!   (422/42201), the REST Proxy distinction clients branch on.
//! - [`compact_json`] is how a JSON-format key or value becomes the bytes that are stored
//!   (and that a key is hashed over).

use super::error::ApiError;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Response type of v2 endpoints without embedded data (topics, produce results).
pub const V2_CONTENT_TYPE: &str = "application/vnd.kafka.v2+json";
/// Embedded JSON format: keys and values are JSON values.
pub const JSON_V2_CONTENT_TYPE: &str = "application/vnd.kafka.json.v2+json";
/// Embedded binary format: keys and values are base64 strings.
pub const BINARY_V2_CONTENT_TYPE: &str = "application/vnd.kafka.binary.v2+json";
/// Plain JSON: v3 admin, health, and every error (parseable by any client).
pub const JSON_CONTENT_TYPE: &str = "application/json";
/// Errors use plain JSON so that any client, whichever `Accept` it sent, can parse them.
pub const ERROR_CONTENT_TYPE: &str = JSON_CONTENT_TYPE;

/// How keys and values are embedded in a v2 request or response body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmbeddedFormat {
    /// Any JSON value; stored as its compact JSON text.
    Json,
    /// A base64 string; stored as the decoded bytes.
    Binary,
}

impl EmbeddedFormat {
    /// The content type of a response carrying records in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            EmbeddedFormat::Json => JSON_V2_CONTENT_TYPE,
            EmbeddedFormat::Binary => BINARY_V2_CONTENT_TYPE,
        }
    }
}

/// The media type of a header value without parameters, lower-cased:
/// `Application/JSON; charset=utf-8` → `application/json`.
fn essence(value: &str) -> String {
    value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

fn content_type(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(essence)
}

/// The embedded format of a produce body, from its `Content-Type`. Plain
/// `application/json` is read as the JSON format, which is what a curl user means.
pub fn produce_format(headers: &HeaderMap) -> Result<EmbeddedFormat, ApiError> {
    match content_type(headers).as_deref() {
        Some(JSON_V2_CONTENT_TYPE | JSON_CONTENT_TYPE) => Ok(EmbeddedFormat::Json),
        Some(BINARY_V2_CONTENT_TYPE) => Ok(EmbeddedFormat::Binary),
        Some(other) => Err(ApiError::unsupported_media_type(format!(
            "unsupported Content-Type '{other}': use {JSON_V2_CONTENT_TYPE} or \
             {BINARY_V2_CONTENT_TYPE} (avro, protobuf and jsonschema need a schema registry)"
        ))),
        None => Err(ApiError::unsupported_media_type(format!(
            "missing Content-Type: use {JSON_V2_CONTENT_TYPE} or {BINARY_V2_CONTENT_TYPE}"
        ))),
    }
}

/// Checks that a v3 body is JSON (`application/json` or any `+json` type).
pub fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    match content_type(headers) {
        Some(t)
            if t == JSON_CONTENT_TYPE
                || (t.starts_with("application/") && t.ends_with("+json")) =>
        {
            Ok(())
        }
        Some(t) => Err(ApiError::unsupported_media_type(format!(
            "unsupported Content-Type '{t}': use {JSON_CONTENT_TYPE}"
        ))),
        None => Err(ApiError::unsupported_media_type(format!(
            "missing Content-Type: use {JSON_CONTENT_TYPE}"
        ))),
    }
}

/// The embedded format a record read answers in, from the `Accept` header: the first
/// media range (in the order sent; q-values are not weighed) this API can produce.
/// No header, `*/*` or `application/*` mean binary, the lossless default (and the REST
/// Proxy's); `application/json` means the JSON format.
pub fn read_format(headers: &HeaderMap) -> Result<EmbeddedFormat, ApiError> {
    let values: Vec<&str> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter(|v| !v.trim().is_empty())
        .collect();
    if values.is_empty() {
        return Ok(EmbeddedFormat::Binary);
    }
    for range in &values {
        match essence(range).as_str() {
            BINARY_V2_CONTENT_TYPE | V2_CONTENT_TYPE | "*/*" | "application/*" => {
                return Ok(EmbeddedFormat::Binary)
            }
            JSON_V2_CONTENT_TYPE | JSON_CONTENT_TYPE => return Ok(EmbeddedFormat::Json),
            _ => {}
        }
    }
    Err(ApiError::not_acceptable(format!(
        "cannot answer with any of '{}': accept {BINARY_V2_CONTENT_TYPE} or {JSON_V2_CONTENT_TYPE}",
        values.join(",").trim()
    )))
}

/// Deepest nesting of arrays and objects a JSON body may have. serde_json stops at 128
/// levels when it builds values, but a key or value kept as raw JSON text (produce) is
/// skipped without that limit, so a 10,000-deep array was stored as a key; every consumer
/// that parses it then fails or recurses that deep. 64 is far more than any record needs.
pub const JSON_DEPTH_MAX: usize = 64;

/// Whether the JSON text nests arrays and objects deeper than `max`. A byte scan that
/// skips strings; it does not validate (the parser does that next), it only bounds depth.
pub fn json_nested_deeper_than(text: &[u8], max: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in text {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Parses a JSON body: a syntax error, truncation or empty body is 400/40001; JSON that
/// parses but does not fit `T` is 422/42201; nesting deeper than [`JSON_DEPTH_MAX`] is
/// 422/42210.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    use serde_json::error::Category;
    if json_nested_deeper_than(body, JSON_DEPTH_MAX) {
        return Err(ApiError::json_too_deep(JSON_DEPTH_MAX));
    }
    serde_json::from_slice(body).map_err(|e| match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => {
            ApiError::malformed_json(format!("request body is not valid JSON: {e}"))
        }
        Category::Data => ApiError::invalid_body(format!("invalid request body: {e}")),
    })
}

/// Removes the insignificant whitespace of a valid JSON text, keeping everything else as
/// written (object key order, number spelling). This is the compact form the REST Proxy's
/// JSON serializer stores, except that it re-spells numbers (`1.50` → `1.5`); keeping the
/// client's spelling is the less surprising choice, and it is what keyed partitioning
/// hashes, so it must not depend on a parser's map ordering.
pub fn compact_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    out
}

/// A JSON response with the given status and content type.
pub fn json_response<T: Serialize>(
    status: StatusCode,
    content_type: &'static str,
    body: &T,
) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => {
            let mut response = (status, bytes).into_response();
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            response
        }
        Err(e) => {
            ApiError::internal(format!("could not serialize the response: {e}")).into_response()
        }
    }
}

/// A 200 response of a v2 endpoint.
pub fn v2_ok<T: Serialize>(body: &T) -> Response {
    json_response(StatusCode::OK, V2_CONTENT_TYPE, body)
}

/// A plain-JSON response (v3 admin, health).
pub fn json<T: Serialize>(status: StatusCode, body: &T) -> Response {
    json_response(status, JSON_CONTENT_TYPE, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    fn headers(name: header::HeaderName, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).expect("header value"));
        h
    }

    #[test]
    fn produce_format_from_content_type() {
        let ct = |v| produce_format(&headers(header::CONTENT_TYPE, v));
        assert_eq!(ct(JSON_V2_CONTENT_TYPE), Ok(EmbeddedFormat::Json));
        assert_eq!(
            ct("Application/JSON; charset=utf-8"),
            Ok(EmbeddedFormat::Json)
        );
        assert_eq!(ct(BINARY_V2_CONTENT_TYPE), Ok(EmbeddedFormat::Binary));
        let e = ct("application/vnd.kafka.avro.v2+json").expect_err("avro");
        assert_eq!(e.error_code(), 41501);
        let e = produce_format(&HeaderMap::new()).expect_err("missing");
        assert_eq!(e.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }

    #[test]
    fn read_format_from_accept() {
        assert_eq!(read_format(&HeaderMap::new()), Ok(EmbeddedFormat::Binary));
        let accept = |v| read_format(&headers(header::ACCEPT, v));
        assert_eq!(accept("*/*"), Ok(EmbeddedFormat::Binary));
        assert_eq!(accept(JSON_V2_CONTENT_TYPE), Ok(EmbeddedFormat::Json));
        assert_eq!(accept("application/json"), Ok(EmbeddedFormat::Json));
        assert_eq!(
            accept("text/html, application/vnd.kafka.binary.v2+json;q=0.9"),
            Ok(EmbeddedFormat::Binary)
        );
        assert_eq!(accept("text/html").expect_err("html").error_code(), 40601);
    }

    #[test]
    fn require_json_for_v3() {
        assert!(require_json(&headers(header::CONTENT_TYPE, "application/json")).is_ok());
        assert!(require_json(&headers(header::CONTENT_TYPE, "application/vnd.api+json")).is_ok());
        assert!(require_json(&headers(header::CONTENT_TYPE, "text/plain")).is_err());
        assert!(require_json(&HeaderMap::new()).is_err());
    }

    #[derive(Debug, Deserialize)]
    struct Shape {
        #[allow(dead_code)]
        n: i32,
    }

    #[test]
    fn syntax_errors_and_shape_errors_differ() {
        let e = parse_json::<Shape>(b"{\"n\": ").expect_err("truncated");
        assert_eq!(
            (e.status(), e.error_code()),
            (StatusCode::BAD_REQUEST, 40001)
        );
        let e = parse_json::<Shape>(b"").expect_err("empty");
        assert_eq!(e.error_code(), 40001);
        let e = parse_json::<Shape>(b"{nope}").expect_err("syntax");
        assert_eq!(e.error_code(), 40001);
        let e = parse_json::<Shape>(b"{\"n\": \"x\"}").expect_err("type");
        assert_eq!(
            (e.status(), e.error_code()),
            (StatusCode::UNPROCESSABLE_ENTITY, 42201)
        );
        let e = parse_json::<Shape>(b"[]").expect_err("array");
        assert_eq!(e.error_code(), 42201);
        assert!(parse_json::<Shape>(b" {\"n\": 1} ").is_ok());
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(!json_nested_deeper_than(deep(64).as_bytes(), 64));
        assert!(json_nested_deeper_than(deep(65).as_bytes(), 64));
        // Brackets inside strings (escaped quotes included) do not count.
        let s = format!("{{\"k\":\"{}\\\"{}\"}}", "[".repeat(100), "{".repeat(100));
        assert!(!json_nested_deeper_than(s.as_bytes(), 2));
        let body = format!("{{\"records\":[{{\"key\":{}}}]}}", deep(10_000));
        let e = parse_json::<serde_json::Value>(body.as_bytes()).expect_err("too deep");
        assert_eq!(
            (e.status(), e.error_code()),
            (StatusCode::UNPROCESSABLE_ENTITY, 42210)
        );
    }

    #[test]
    fn compact_keeps_strings_and_order() {
        assert_eq!(
            compact_json("{ \"b\" : [1, 2 ],\n\t\"a\": \"x y \\\" z\" }"),
            "{\"b\":[1,2],\"a\":\"x y \\\" z\"}"
        );
        assert_eq!(compact_json("\"a\\\\\" "), "\"a\\\\\"");
        assert_eq!(compact_json(" 1.50 "), "1.50");
    }
}
