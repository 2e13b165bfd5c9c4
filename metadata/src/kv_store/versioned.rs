//! Versioned records under one key each (security records, mirror records): created only if
//! absent, replaced or deleted only at the version the caller read (the key's modification
//! revision), so two writers never overwrite each other unseen.

use super::KvStore;
use crate::error::{Error, Result};
use crate::kv::{CmpOp, Compare, KeyRange, Kv, Op, Target, Txn};

/// Holds iff the record at `key` is at `version` (its modification revision).
fn at_version(key: &str, version: i64) -> Compare {
    Compare::new(
        KeyRange::key(key),
        Target::ModRevision(version),
        CmpOp::Equal,
    )
}

/// The conflict error for `what` (e.g. "mirror links record 'l'") at `expected_version`.
fn conflict(what: &str, expected_version: Option<i64>) -> Error {
    Error::Conflict(format!("{what} (expected version {expected_version:?})"))
}

impl<K: Kv> KvStore<K> {
    /// Writes `value` at `key`: created if `expected_version` is `None` (and the key is
    /// absent), else replaced if the record is still at that version. Returns the
    /// revision written; [`Error::Conflict`] naming `what` if the condition failed.
    pub(super) async fn put_versioned(
        &self,
        key: String,
        value: Vec<u8>,
        expected_version: Option<i64>,
        what: &str,
    ) -> Result<i64> {
        let when = match expected_version {
            None => Compare::absent(key.clone()),
            Some(v) => at_version(&key, v),
        };
        let resp = self
            .kv
            .txn(Txn::new().when([when]).then([Op::put(key, value)]))
            .await?;
        if !resp.succeeded {
            return Err(conflict(what, expected_version));
        }
        Ok(resp.revision)
    }

    /// Deletes `key`: unconditionally if `expected_version` is `None`, else only while
    /// the record is at that version ([`Error::Conflict`] naming `what` otherwise).
    pub(super) async fn delete_versioned(
        &self,
        key: String,
        expected_version: Option<i64>,
        what: &str,
    ) -> Result<()> {
        let txn = match expected_version {
            None => Txn::new().then([Op::delete(KeyRange::key(key))]),
            Some(v) => Txn::new()
                .when([at_version(&key, v)])
                .then([Op::delete(KeyRange::key(key))]),
        };
        if !self.kv.txn(txn).await?.succeeded {
            return Err(conflict(what, expected_version));
        }
        Ok(())
    }
}
