//! [`ApiError`]: every error the HTTP API returns, always as the REST Proxy error JSON
//! `{"error_code": N, "message": "..."}` (the code table is in the [module docs](super)).
//!
//! Broker failures keep the one mapping of `crate::error` (`BrokerError::mapped`); only the
//! failures that exist solely over HTTP (media types, JSON syntax and shape, base64, query
//! parameters, limits) get their codes here.

use crate::error::BrokerError;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// The error body of the Confluent REST Proxy.
#[derive(Debug, Serialize)]
struct ErrorBody<'a> {
    error_code: u32,
    message: &'a str,
}

/// An HTTP status plus the REST Proxy `error_code` (status × 100 + detail) and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    status: StatusCode,
    error_code: u32,
    message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, error_code: u32, message: impl Into<String>) -> Self {
        ApiError {
            status,
            error_code,
            message: message.into(),
        }
    }

    /// A status with no finer classification: `error_code` is the status × 100.
    pub fn from_status(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError::new(status, u32::from(status.as_u16()) * 100, message)
    }

    /// The body is not JSON at all (syntax error, truncated, empty).
    pub fn malformed_json(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, 40001, message)
    }

    /// The body could not be read (client went away mid-body, bad chunked encoding).
    pub fn unreadable_body(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, 40002, message)
    }

    /// The path has bytes that are not UTF-8 after percent-decoding.
    pub fn invalid_path(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, 40003, message)
    }

    /// No route serves this path.
    pub fn no_route(path: &str) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            40400,
            format!("no endpoint at '{path}'"),
        )
    }

    /// A v3 cluster id that is not this cluster's.
    pub fn unknown_cluster(cluster_id: &str) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            40404,
            format!("cluster '{cluster_id}' does not exist"),
        )
    }

    /// A v3 consumer group this cluster does not know.
    pub fn unknown_group(group: &str) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            40406,
            format!("consumer group '{group}' does not exist"),
        )
    }

    /// A v3 broker id that is not a live broker of this cluster.
    pub fn unknown_broker(broker_id: &str) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            40407,
            format!("broker '{broker_id}' is not a live broker of this cluster"),
        )
    }

    /// The `Accept` header asks for nothing this endpoint produces.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_ACCEPTABLE, 40601, message)
    }

    /// The body did not arrive whole within `--http-body-timeout`.
    pub fn body_timed_out(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::REQUEST_TIMEOUT, 40801, message)
    }

    /// More header lines than the API accepts.
    pub fn too_many_headers(count: usize, max: usize) -> Self {
        ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            43101,
            format!("the request has {count} header lines; at most {max} are accepted"),
        )
    }

    /// JSON nested deeper than the API accepts.
    pub fn json_too_deep(max: usize) -> Self {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            42210,
            format!("request body nests JSON arrays or objects deeper than {max} levels"),
        )
    }

    /// The body is larger than the router's body limit.
    pub fn body_too_large(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, 41301, message)
    }

    /// The `Content-Type` is missing or not one this endpoint reads.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, 41501, message)
    }

    /// Valid JSON of the wrong shape (missing field, wrong type, empty `records`).
    pub fn invalid_body(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, 42201, message)
    }

    /// A binary-format key or value that is not valid base64.
    pub fn invalid_base64(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, 42203, message)
    }

    /// A missing or invalid query parameter.
    pub fn invalid_parameter(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, 42204, message)
    }

    /// A request over a per-request limit (records per produce).
    pub fn over_limit(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, 42209, message)
    }

    /// A failure of ours that no client action fixes.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, 50001, message)
    }

    /// No valid credentials (`--http-authentication`): 401, Confluent REST's 40101. The
    /// caller adds the `WWW-Authenticate` challenges.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNAUTHORIZED, 40101, message)
    }

    /// Too much work queued to take this request now (password checks): 503, retry.
    pub fn busy(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, 50301, message)
    }

    /// Refused by the authorizer (`--authorizer acl`): 403, REST Proxy's 40301.
    pub fn forbidden(rt: crate::security::acl::ResourceType, message: impl Into<String>) -> Self {
        let m = crate::error::authorization_failed(rt);
        let status = StatusCode::from_u16(m.http_status).unwrap_or(StatusCode::FORBIDDEN);
        ApiError::new(status, m.rest_code, message)
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn error_code(&self) -> u32 {
        self.error_code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The JSON body, as sent.
    pub fn body_json(&self) -> String {
        serde_json::to_string(&ErrorBody {
            error_code: self.error_code,
            message: &self.message,
        })
        // A struct of a number and a string always serializes.
        .unwrap_or_else(|_| format!("{{\"error_code\":{}}}", self.error_code))
    }
}

impl From<BrokerError> for ApiError {
    fn from(e: BrokerError) -> Self {
        let m = e.mapped();
        let status =
            StatusCode::from_u16(m.http_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        ApiError::new(status, m.rest_code, e.to_string())
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.status, self.error_code, self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // Logged here because this is where the error is handled (turned into a reply).
        if self.status.is_server_error() {
            tracing::warn!(status = %self.status, error_code = self.error_code, message = %self.message, "http request failed");
        } else {
            tracing::debug!(status = %self.status, error_code = self.error_code, message = %self.message, "http request rejected");
        }
        let mut response = (self.status, self.body_json()).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(super::body::ERROR_CONTENT_TYPE),
        );
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_is_rest_proxy_json() {
        let e = ApiError::invalid_body("records: \"quoted\"");
        let v: serde_json::Value = serde_json::from_str(&e.body_json()).expect("json");
        assert_eq!(v["error_code"], 42201);
        assert_eq!(v["message"], "records: \"quoted\"");
        assert_eq!(e.status(), StatusCode::UNPROCESSABLE_ENTITY);
    }

    #[test]
    fn broker_errors_keep_their_mapping() {
        let e = ApiError::from(BrokerError::UnknownTopic("t".into()));
        assert_eq!((e.status(), e.error_code()), (StatusCode::NOT_FOUND, 40401));
        let e = ApiError::from(BrokerError::UnknownPartition {
            topic: "t".into(),
            partition: 3,
        });
        assert_eq!((e.status(), e.error_code()), (StatusCode::NOT_FOUND, 40402));
    }

    #[test]
    fn from_status_derives_the_code() {
        let e = ApiError::from_status(StatusCode::METHOD_NOT_ALLOWED, "no");
        assert_eq!(e.error_code(), 40500);
    }

    #[test]
    fn response_is_json() {
        let r = ApiError::unsupported_media_type("x").into_response();
        assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(
            r.headers().get(header::CONTENT_TYPE).map(|v| v.as_bytes()),
            Some(super::super::body::ERROR_CONTENT_TYPE.as_bytes())
        );
    }
}
