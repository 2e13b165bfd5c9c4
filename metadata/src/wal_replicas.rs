//! WAL replica sets: per broker, which other brokers hold copies of its WAL and which of
//! them are in sync (design brief → Write path, step 3).
//!
//! Lifecycle: written only by the WAL's own broker (its replicator), by compare-and-swap on
//! [`WalReplicaSet::version`], so a replicator acting on a stale view cannot overwrite a
//! newer set; read by whoever recovers that broker's tail after it dies; deleted (again by
//! compare-and-swap) when the broker's WAL is retired.
//!
//! Stored as versioned JSON ([`crate::codec`]): in the embedded backend's `wal_replicas`
//! table keyed by broker id, in etcd under `wal_replicas/{broker_id:010}`
//! ([`crate::keys::wal_replicas`]).

use crate::error::{Error, Result};
use crate::types::BrokerId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Which brokers hold copies of a broker's WAL, and which of them are in sync (design brief
/// → Write path, step 3). Written only by the WAL's own broker (its replicator), read by
/// whoever recovers that broker's tail after it dies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalReplicaSet {
    pub broker_id: BrokerId,
    /// Identifies one life of the broker's WAL directory (a new one after the disk is lost);
    /// WAL sequences restart in a new incarnation.
    pub incarnation: u64,
    /// Brokers that receive the WAL stream (never `broker_id` itself).
    pub replicas: Vec<BrokerId>,
    /// The replicas holding every WAL entry from the broker's trim point on: acknowledged
    /// entries are on all of them. A subset of `replicas`.
    pub isr: Vec<BrokerId>,
    /// Replicas that left `isr` while entries they hold were not all sealed: (replica,
    /// WAL sequence it holds everything acknowledged below). They stay eligible to answer
    /// for the tail — as KIP-966's eligible leader replicas do for Kafka's partitions — so
    /// a recovery whose in-sync set shrank meanwhile still finds the acknowledged entries.
    /// Dropped once everything below the sequence is sealed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub eligible: Vec<(BrokerId, u64)>,
    /// Bumped on every change; the compare in compare-and-swap.
    pub version: u64,
}

impl WalReplicaSet {
    /// Checks the set's invariants (those of the field docs above): broker ids are not
    /// negative (they are zero-padded into etcd keys), `broker_id ∉ replicas`, no
    /// duplicates in `replicas` or `isr`, and `isr ⊆ replicas`. Both backends call it before
    /// writing, so a set that breaks them is never stored.
    pub(crate) fn validate(&self) -> Result<()> {
        let invalid = |reason: String| {
            Err(Error::InvalidRequest(format!(
                "WAL replica set of broker {}: {reason}",
                self.broker_id
            )))
        };
        if self.broker_id < 0 {
            return invalid("broker id is negative".into());
        }
        let mut replicas = BTreeSet::new();
        for &r in &self.replicas {
            if r < 0 {
                return invalid(format!("replica {r} is negative"));
            }
            if r == self.broker_id {
                return invalid("a broker cannot replicate its own WAL".into());
            }
            if !replicas.insert(r) {
                return invalid(format!("replica {r} is listed twice"));
            }
        }
        let mut isr = BTreeSet::new();
        for &r in &self.isr {
            if !replicas.contains(&r) {
                return invalid(format!("in-sync replica {r} is not a replica"));
            }
            if !isr.insert(r) {
                return invalid(format!("in-sync replica {r} is listed twice"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn set(replicas: &[BrokerId], isr: &[BrokerId]) -> WalReplicaSet {
        WalReplicaSet {
            broker_id: 1,
            incarnation: 7,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            eligible: Vec::new(),
            version: 0,
        }
    }

    #[test]
    fn validation() {
        assert!(set(&[], &[]).validate().is_ok());
        assert!(set(&[2, 3], &[3]).validate().is_ok());
        for bad in [
            set(&[1, 2], &[]),
            set(&[2, 2], &[]),
            set(&[2, 3], &[4]),
            set(&[2, 3], &[2, 2]),
            set(&[-2], &[]),
        ] {
            let err = bad.validate().expect_err("invalid");
            assert_eq!(err.kind(), ErrorKind::Invalid, "{bad:?}");
        }
    }
}
