//! The key schema of every backend (etcd's; the embedded file holds the same keys under
//! `/oxbow/default/`, see [`crate::embedded`]): one module per key kind, each with
//! `ser_key` (and the prefixes its scans need) and `ser_value`/`deser_value`. Every key
//! lives under the cluster root `/oxbow/{cluster}/`, so several clusters can share one etcd.
//!
//! | module          | key (under the root)                                   | value                      | bound to a lease |
//! |-----------------|--------------------------------------------------------|----------------------------|------------------|
//! | [`broker`]      | `brokers/{broker_id:010}`                              | `BrokerRegistration`       | yes              |
//! | [`topic`]       | `topics/names/{name}`                                  | [`topic::TopicRecord`]     | no               |
//! | [`topic_id`]    | `topics/ids/{topic_id}`                                | `{"name"}`                 | no               |
//! | [`partition`]   | `topics/partitions/{topic_id}/{partition:010}`         | `PartitionState`           | no               |
//! | [`catalog`]     | `catalog/{topic_id}/{partition:010}/{base_offset:020}` | `CatalogEntry` (segments)  | no               |
//! | [`object_index`]| `catalog/objects/{broker_id:010}/{object}`             | `ObjectIndex` (binary)     | no               |
//! | [`counter`]     | `counters/{name}`                                      | `{"next"}`                 | no               |
//! | [`offset`]      | `offsets/{group}/{topic}/{partition:010}`              | `CommittedOffset`          | no               |
//! | [`group`]       | `groups/{group}`                                       | group record               | no               |
//! | [`txn`]         | `txns/{transactional id}`                              | transaction record         | no               |
//! | [`txn_offsets`] | `txn-offsets/{group}/{producer_id:020}`                | `PendingTxnOffsets`        | no               |
//! | [`wal_replicas`]| `wal_replicas/{broker_id:010}`                         | `WalReplicaSet`            | no               |
//! | [`controller`]  | `controller`                                           | `{"broker_id"}`            | yes              |
//! | [`mirror`]      | `mirror/{links,topics}/{name}`                         | JSON ([`crate::mirror`])  | no               |
//! | [`security`]    | `security/{acls,scram,quotas}/{name}`                  | opaque (the broker's JSON) | no               |
//!
//! Topics, their ids and their partition states share the `topics/` prefix so one etcd
//! watch sees all their changes in revision order, and none of the (far more frequent)
//! catalog or offset writes.
//!
//! Numbers are zero-padded decimal so a key range scan returns them in numeric order (a
//! partition's catalog in offset order); they are never negative. Topic names cannot hold
//! `/` (Kafka's rules), but group ids can hold anything, so they are percent-escaped
//! ([`escape`]) to keep one group's keys from being a prefix of another's.
//!
//! Values are the versioned JSON of [`crate::codec`] (`{"v":1,...}`); a corrupt value or an
//! unknown version gives [`crate::Error::CorruptValue`] naming the key.
//!
//! A partition key is written only once its state first changes: until then the partition
//! is at epoch 0 led by the broker recorded in the topic record. That keeps topic creation
//! one small transaction whatever the partition count (etcd caps a transaction at
//! `--max-txn-ops` operations, 128 by default).

pub mod broker;
pub mod catalog;
pub mod controller;
pub mod counter;
pub mod group;
pub mod mirror;
pub mod object_index;
pub mod offset;
pub mod partition;
pub mod security;
pub mod topic;
pub mod topic_id;
pub mod txn;
pub mod txn_offsets;
pub mod wal_replicas;

use crate::error::{Error, Result};

/// Prefix of every key a topic watch needs (names, ids, partition states).
pub fn topics_prefix(root: &Root) -> String {
    root.join("topics/")
}

/// The cluster root, `/oxbow/{cluster}/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Root(String);

impl Root {
    pub fn new(cluster: &str) -> Self {
        Root(format!("/oxbow/{cluster}/"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub(crate) fn join(&self, rest: &str) -> String {
        format!("{}{rest}", self.0)
    }
}

/// Escapes `%` and `/` so an arbitrary string is one key segment.
pub fn escape(s: &str) -> String {
    s.replace('%', "%25").replace('/', "%2F")
}

/// Reverses [`escape`].
pub fn unescape(s: &str) -> String {
    s.replace("%2F", "/").replace("%25", "%")
}

/// The exclusive upper bound of the keys starting with `prefix` (for range scans and range
/// deletes): the prefix with its last byte that is not 0xff incremented.
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A key as text for error messages (keys are ASCII or UTF-8 by construction).
pub fn key_name(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

/// The last `/`-separated segment of a key under `prefix`.
pub(crate) fn segments_after<'k>(key: &'k [u8], prefix: &str) -> Result<Vec<&'k str>> {
    let text = std::str::from_utf8(key).map_err(|_| Error::CorruptValue {
        key: key_name(key),
        reason: "key is not UTF-8".into(),
    })?;
    let rest = text
        .strip_prefix(prefix)
        .ok_or_else(|| Error::CorruptValue {
            key: text.to_string(),
            reason: format!("key is not under {prefix}"),
        })?;
    Ok(rest.split('/').collect())
}

pub(crate) fn parse_num<T: std::str::FromStr>(key: &[u8], s: &str) -> Result<T> {
    s.parse().map_err(|_| Error::CorruptValue {
        key: key_name(key),
        reason: format!("'{s}' is not a number"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_round_trips_and_removes_slashes() {
        for s in ["plain", "a/b", "100%", "%2F/", ""] {
            let e = escape(s);
            assert!(!e.contains('/'));
            assert_eq!(unescape(&e), s);
        }
    }

    #[test]
    fn catalog_keys_sort_by_offset() {
        let root = Root::new("c");
        let id = crate::TopicId::new_random();
        let a = catalog::ser_key(&root, id, 3, 9);
        let b = catalog::ser_key(&root, id, 3, 10);
        let c = catalog::ser_key(&root, id, 3, 100_000_000_000);
        assert!(a < b && b < c, "{a} {b} {c}");
        assert!(a.starts_with(&catalog::partition_prefix(&root, id, 3)));
    }
}
