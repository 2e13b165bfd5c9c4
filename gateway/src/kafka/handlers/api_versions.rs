//! ApiVersions: the versions in [`crate::kafka::versions::SUPPORTED`], and for a request of
//! a version we do not know, the KIP-511 fallback in the v0 layout.
//!
//! Features (KIP-584, v3+; what `kafka-features.sh describe` shows): only what is true.
//! `transaction.version` is finalized at `--transaction-version` (default 2): level 2
//! (KIP-890's protocol 2: Produce v12 adds a partition to its transaction, TxnOffsetCommit
//! v5 a group, EndTxn v5 bumps the epoch) is what makes Kafka 4 clients switch protocols;
//! level 1 keeps them on protocol 1 (AddPartitionsToTxn and AddOffsetsToTxn from clients,
//! EndTxn without an epoch bump). `group.version` (KIP-848's consumer protocol) is supported at 0
//! only: the classic protocol. `metadata.version` is KRaft's and has no meaning here. The
//! features never change while a broker runs, so their epoch is a constant.

use crate::kafka::frame;
use crate::kafka::versions::SUPPORTED;
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::{Encodable, StrBytes};

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

/// (feature, supported min, supported max, finalized level: 0 for none).
fn features(transaction_version: i16) -> [(&'static str, i16, i16, i16); 2] {
    [
        ("transaction.version", 0, 2, transaction_version),
        ("group.version", 0, 0, 0),
    ]
}

/// The epoch of the finalized features (constant: see the module docs).
const FEATURES_EPOCH: i64 = 1;

/// The response, with `transaction.version` finalized at `transaction_version`.
pub fn handle(transaction_version: i16) -> ApiVersionsResponse {
    let features = features(transaction_version);
    ApiVersionsResponse::default()
        .with_api_keys(api_keys())
        .with_supported_features(
            features
                .iter()
                .map(|(name, min, max, _)| {
                    SupportedFeatureKey::default()
                        .with_name(StrBytes::from_static_str(name))
                        .with_min_version(*min)
                        .with_max_version(*max)
                })
                .collect(),
        )
        .with_finalized_features_epoch(FEATURES_EPOCH)
        .with_finalized_features(
            features
                .iter()
                .filter(|(_, _, _, level)| *level > 0)
                .map(|(name, _, _, level)| {
                    FinalizedFeatureKey::default()
                        .with_name(StrBytes::from_static_str(name))
                        .with_min_version_level(*level)
                        .with_max_version_level(*level)
                })
                .collect(),
        )
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
