//! Extractors whose rejection is an [`ApiError`], so that axum's plain-text rejections
//! never reach a client: path parameters, query parameters and the raw body.

use super::error::ApiError;
use super::listener::BodyTimedOut;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use std::collections::HashMap;

/// Path parameters. Every endpoint takes them as `String`s and parses numbers itself, so
/// the only rejection left is a segment that is not UTF-8 once percent-decoded.
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(ApiPath(value)),
            Err(r) if r.status() == StatusCode::INTERNAL_SERVER_ERROR => {
                Err(ApiError::internal(r.body_text()))
            }
            Err(r) => Err(ApiError::invalid_path(r.body_text())),
        }
    }
}

/// Query parameters as raw strings; endpoints parse and range-check each one so the
/// error names the parameter.
pub struct ApiQuery(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for ApiQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| ApiQuery(q))
            .map_err(|r| ApiError::invalid_parameter(r.body_text()))
    }
}

/// The whole request body, bounded by the router's `DefaultBodyLimit`.
pub struct Body(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let too_large = || {
            ApiError::body_too_large(format!(
                "request body larger than {} bytes",
                super::BODY_BYTES_MAX
            ))
        };
        // A declared length over the limit is refused before any of the body is read,
        // rather than after buffering 32 MiB of it.
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > super::BODY_BYTES_MAX as u64) {
            return Err(too_large());
        }
        match Bytes::from_request(req, state).await {
            Ok(bytes) => Ok(Body(bytes)),
            Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(too_large()),
            Err(r) => match timed_out(&r) {
                Some(t) => Err(ApiError::body_timed_out(t.to_string())),
                None => Err(ApiError::unreadable_body(r.body_text())),
            },
        }
    }
}

/// The body timeout behind a failed body read, if that is why it failed.
fn timed_out(rejection: &BytesRejection) -> Option<&BodyTimedOut> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(rejection);
    while let Some(e) = cause {
        if let Some(t) = e.downcast_ref::<BodyTimedOut>() {
            return Some(t);
        }
        cause = e.source();
    }
    None
}

/// Parses a partition path segment. One that is not a non-negative integer names no
/// partition, so it is 404/40402 like an out-of-range one (JAX-RS, which the REST Proxy
/// runs on, also answers 404 when a path parameter does not convert).
pub fn partition_param(topic: &str, raw: &str) -> Result<i32, ApiError> {
    match raw.parse::<i32>() {
        Ok(p) if p >= 0 => Ok(p),
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            40402,
            format!("partition '{raw}' of topic '{topic}' does not exist"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_params() {
        assert_eq!(partition_param("t", "3"), Ok(3));
        for bad in ["-1", "x", "", "99999999999"] {
            let e = partition_param("t", bad).expect_err(bad);
            assert_eq!((e.status(), e.error_code()), (StatusCode::NOT_FOUND, 40402));
        }
    }
}
