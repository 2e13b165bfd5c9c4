//! ApiVersions: the versions in [`crate::kafka::versions::SUPPORTED`], and for a request of
//! a version we do not know, the KIP-511 fallback in the v0 layout.

use crate::kafka::frame;
use crate::kafka::versions::SUPPORTED;
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::Encodable;

fn api_keys() -> Vec<ApiVersion> {
    SUPPORTED
        .iter()
        .map(|(key, min, max)| {
            ApiVersion::default()
                .with_api_key(*key as i16)
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect()
}

pub fn handle() -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(api_keys())
}

/// The whole response frame for an ApiVersions request of an unsupported version.
pub fn unsupported_version_response(correlation_id: i32) -> Bytes {
    let body = ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(api_keys());
    frame::encode_with(ApiKey::ApiVersions, 0, correlation_id, |buf| {
        body.encode(buf, 0)
    })
    .unwrap_or_default()
}
