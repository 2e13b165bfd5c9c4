//! API version negotiation: which version of each request to send to a given broker.
//!
//! After the ApiVersions handshake a connection holds the broker's advertised range per API
//! key. Every later request uses the highest version in the intersection of that range and
//! the range `kafka-protocol` can encode (`Message::VERSIONS`), optionally capped lower by
//! the caller when a newer version needs data the client lacks (topic ids). Pure logic, no
//! I/O.

use std::collections::BTreeMap;

use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::VersionRange;

/// The broker's advertised version range for each API key it supports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApiVersionTable {
    ranges: BTreeMap<i16, VersionRange>,
}

/// No version of `api` is both offered by the broker and encodable by this client.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoCommonVersion {
    pub api: ApiKey,
    /// The broker's range, `None` when the broker does not list the API at all.
    pub broker: Option<VersionRange>,
    pub client: VersionRange,
}

impl ApiVersionTable {
    /// Builds the table from an ApiVersions response (any version).
    pub fn from_response(response: &ApiVersionsResponse) -> Self {
        let ranges = response
            .api_keys
            .iter()
            .map(|k| {
                (
                    k.api_key,
                    VersionRange {
                        min: k.min_version,
                        max: k.max_version,
                    },
                )
            })
            .collect();
        Self { ranges }
    }

    /// Builds a table directly; used by tests and by callers that already know the ranges.
    pub fn from_ranges(ranges: impl IntoIterator<Item = (ApiKey, VersionRange)>) -> Self {
        Self {
            ranges: ranges.into_iter().map(|(k, r)| (k as i16, r)).collect(),
        }
    }

    /// The broker's advertised range for `api`, if it supports it at all.
    pub fn broker_range(&self, api: ApiKey) -> Option<VersionRange> {
        self.ranges.get(&(api as i16)).copied()
    }

    /// The highest version of `api` both sides support, with the client side limited to
    /// `client` (normally the message's `VERSIONS`, possibly with `max` lowered).
    pub fn pick(&self, api: ApiKey, client: VersionRange) -> Result<i16, NoCommonVersion> {
        let broker = self.broker_range(api);
        let Some(range) = broker else {
            return Err(NoCommonVersion {
                api,
                broker,
                client,
            });
        };
        let common = range.intersect(&client);
        if common.is_empty() {
            return Err(NoCommonVersion {
                api,
                broker,
                client,
            });
        }
        Ok(common.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::{FetchRequest, ProduceRequest};
    use kafka_protocol::protocol::Message;

    fn range(min: i16, max: i16) -> VersionRange {
        VersionRange { min, max }
    }

    #[test]
    fn picks_highest_common_version() {
        let table = ApiVersionTable::from_ranges([(ApiKey::Produce, range(0, 11))]);
        // kafka-protocol encodes Produce 3..=13, broker offers 0..=11: 11 wins.
        assert_eq!(
            table.pick(ApiKey::Produce, ProduceRequest::VERSIONS),
            Ok(11)
        );
        // A broker newer than the client is capped at the client's maximum.
        let table = ApiVersionTable::from_ranges([(ApiKey::Fetch, range(4, 99))]);
        assert_eq!(
            table.pick(ApiKey::Fetch, FetchRequest::VERSIONS),
            Ok(FetchRequest::VERSIONS.max)
        );
    }

    #[test]
    fn caller_cap_lowers_the_choice() {
        let table = ApiVersionTable::from_ranges([(ApiKey::Fetch, range(4, 17))]);
        let capped = VersionRange {
            max: 12,
            ..FetchRequest::VERSIONS
        };
        assert_eq!(table.pick(ApiKey::Fetch, capped), Ok(12));
    }

    #[test]
    fn disjoint_or_missing_ranges_are_errors() {
        let table = ApiVersionTable::from_ranges([(ApiKey::Produce, range(0, 2))]);
        let err = table
            .pick(ApiKey::Produce, ProduceRequest::VERSIONS)
            .expect_err("0..=2 and 3..=13 do not overlap");
        assert_eq!(err.broker, Some(range(0, 2)));
        let err = table
            .pick(ApiKey::Fetch, FetchRequest::VERSIONS)
            .expect_err("broker does not list Fetch");
        assert_eq!(err.broker, None);
    }

    #[test]
    fn table_reads_api_versions_response() {
        let mut response = ApiVersionsResponse::default();
        response.api_keys.push(
            ApiVersion::default()
                .with_api_key(ApiKey::Metadata as i16)
                .with_min_version(0)
                .with_max_version(12),
        );
        let table = ApiVersionTable::from_response(&response);
        assert_eq!(table.broker_range(ApiKey::Metadata), Some(range(0, 12)));
        assert_eq!(table.broker_range(ApiKey::Produce), None);
    }
}
