//! Consumer groups as the metadata service keeps them: committed offsets, and one versioned
//! record per group (generation, members, assignment) that the group coordinator writes by
//! compare-and-swap so a new coordinator can take over after a failover.
//!
//! The coordinator owns the record's contents ([`GroupRecord::data`] is opaque here): the
//! metadata service only guarantees that a write based on a stale version fails, so two
//! brokers that both believe they coordinate a group cannot both move its generation.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Most characters of a group id the metadata service stores (Kafka sets no limit; one is
/// needed so a key stays within etcd's request size).
pub const GROUP_ID_MAX_CHARS: usize = 1024;

/// One partition's committed offset (OffsetCommit / OffsetFetch).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedOffset {
    pub topic: String,
    pub partition: i32,
    /// The next offset the group will read.
    pub offset: i64,
    /// Leader epoch of the last consumed record (-1 when unknown), for truncation checks.
    pub leader_epoch: i32,
    /// The client's free-form metadata string.
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

/// The offsets a transaction committed for a group (TxnOffsetCommit), pending until its
/// transaction coordinator's marker: on commit they become the group's committed offsets,
/// on abort they are dropped. One record per (group, producer id): a producer has at most
/// one open transaction, so the records are as many as the transactions in flight.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingTxnOffsets {
    pub group_id: String,
    pub producer_id: i64,
    /// The producer epoch of the transaction's TxnOffsetCommits; a request with an older
    /// one is fenced, one with a newer one waits for this record's marker, and a marker of
    /// an older one leaves the record alone.
    pub producer_epoch: i16,
    /// Sorted by topic and partition, one per partition (a later commit of the same
    /// transaction replaces a partition's offset).
    pub offsets: Vec<CommittedOffset>,
}

/// Most bytes of one stored [`PendingTxnOffsets`] (its versioned JSON): a record is one
/// value in etcd, whose requests are capped at 1.5 MiB by default.
pub const PENDING_TXN_OFFSETS_BYTES_MAX: usize = 1 << 20;

/// A group's coordinator record; `version` is the compare in compare-and-swap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRecord {
    pub group_id: String,
    /// Starts at 1 on create; bumped on every write.
    pub version: u64,
    /// The coordinator's own encoding of generation, protocol, members and assignment.
    pub data: Bytes,
}

/// The stored form of a versioned opaque record (a [`GroupRecord`], a
/// [`crate::txn::TxnRecord`]): the data as base64 inside the JSON envelope.
#[derive(Serialize, Deserialize)]
pub(crate) struct StoredOpaque {
    pub version: u64,
    pub data_b64: String,
}

impl StoredOpaque {
    pub(crate) fn new(version: u64, data: &[u8]) -> Self {
        use base64::Engine as _;
        StoredOpaque {
            version,
            data_b64: base64::engine::general_purpose::STANDARD.encode(data),
        }
    }

    /// (version, data); `what` names the record in a corruption error.
    pub(crate) fn into_parts(self, key: &str, what: &str) -> crate::Result<(u64, Bytes)> {
        use base64::Engine as _;
        let data = base64::engine::general_purpose::STANDARD
            .decode(self.data_b64.as_bytes())
            .map_err(|e| crate::Error::CorruptValue {
                key: key.to_string(),
                reason: format!("{what} data is not base64: {e}"),
            })?;
        Ok((self.version, Bytes::from(data)))
    }

    pub(crate) fn from_record(r: &GroupRecord) -> Self {
        StoredOpaque::new(r.version, &r.data)
    }

    pub(crate) fn into_record(self, group_id: &str, key: &str) -> crate::Result<GroupRecord> {
        let (version, data) = self.into_parts(key, "group")?;
        Ok(GroupRecord {
            group_id: group_id.to_string(),
            version,
            data,
        })
    }
}

pub(crate) fn validate_group_id(group_id: &str) -> crate::Result<()> {
    if group_id.is_empty() || group_id.chars().count() > GROUP_ID_MAX_CHARS {
        return Err(crate::Error::InvalidRequest(format!(
            "group id must have 1 to {GROUP_ID_MAX_CHARS} characters"
        )));
    }
    Ok(())
}
