//! The Kafka API versions this broker implements fully, and only those are advertised.

use kafka_protocol::messages::ApiKey;

/// (API, min version, max version) implemented. Lower bounds follow what Kafka 4 still
/// accepts (KIP-896); upper bounds stop before versions whose semantics are not built yet
/// (e.g. Fetch 13+ by topic id is supported through names only up to 12).
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 1, 8),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    // v0 (no pattern types) is gone in Kafka 4 (KIP-896).
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    // v0 (raw tokens after the handshake) is advertised as Kafka 4 does, but refused
    // (handlers/sasl.rs).
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    // Transactions. AddPartitionsToTxn v4+ is brokers verifying or adding for a client
    // (KIP-890; clients stay at v3). Protocol 2 is Produce v12 (a transaction's first batch
    // adds its partition), TxnOffsetCommit v5 (adds its group) and EndTxn v5 (bumps the
    // epoch); clients use them once `transaction.version` 2 is finalized (ApiVersions).
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::WriteTxnMarkers, 1, 1),
    // v4 is KIP-890's (the coordinator adds the group implicitly).
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 2),
    (ApiKey::AlterUserScramCredentials, 0, 0),
];

/// The supported range of `key`, if any.
pub fn range(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, min, max)| (*min, *max))
}

/// Whether `version` of `key` is implemented.
pub fn supports(key: ApiKey, version: i16) -> bool {
    range(key).is_some_and(|(min, max)| (min..=max).contains(&version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertised_versions_are_within_the_codec() {
        for (key, min, max) in SUPPORTED {
            let codec = key.valid_versions();
            assert!(
                codec.min <= *min && *max <= codec.max,
                "{key:?} {min}..={max} outside codec {codec}"
            );
        }
        assert!(supports(ApiKey::ApiVersions, 3));
        assert!(!supports(ApiKey::ApiVersions, 4));
        assert!(!supports(ApiKey::JoinGroup, 10));
    }
}
