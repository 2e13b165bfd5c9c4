//! Transactional ids' coordinator records ([`crate::txn`]) over `txns/{id}`: read,
//! compare-and-swap on the record's version, delete, list — the rules of group records.

use super::{first, KvStore};
use crate::error::{Error, Result};
use crate::keys;
use crate::kv::{Get, KeyRange, Kv, Op};
use crate::txn::{validate_transactional_id, TxnRecord};
use bytes::Bytes;

impl<K: Kv> KvStore<K> {
    pub(super) async fn read_transaction(&self, id: &str) -> Result<Option<TxnRecord>> {
        let resp = self.get(keys::txn::ser_key(&self.root, id)).await?;
        first(&resp)
            .map(|kv| keys::txn::deser_value(id, &kv.key, &kv.value))
            .transpose()
    }

    pub(super) async fn write_transaction(
        &self,
        id: &str,
        expected_version: Option<u64>,
        data: Bytes,
    ) -> Result<TxnRecord> {
        validate_transactional_id(id)?;
        let key = keys::txn::ser_key(&self.root, id);
        self.versioned(
            &key,
            &format!("transactional id '{id}'"),
            |kv| keys::txn::deser_value(id, &kv.key, &kv.value),
            |current| {
                let current = current.map(|t| t.version);
                if current != expected_version {
                    return Err(Error::Conflict(format!(
                        "transactional id '{id}' (version {current:?}, expected {expected_version:?})"
                    )));
                }
                let record = TxnRecord {
                    transactional_id: id.to_string(),
                    version: expected_version.unwrap_or(0) + 1,
                    data: data.clone(),
                };
                Ok((
                    vec![Op::put(key.clone(), keys::txn::ser_value(&record)?)],
                    record,
                ))
            },
        )
        .await
    }

    pub(super) async fn remove_transaction(&self, id: &str, expected_version: u64) -> Result<()> {
        let key = keys::txn::ser_key(&self.root, id);
        self.versioned(
            &key,
            &format!("transactional id '{id}'"),
            |kv| keys::txn::deser_value(id, &kv.key, &kv.value),
            |current| match current {
                None => Err(Error::UnknownTransactionalId(id.to_string())),
                Some(t) if t.version != expected_version => Err(Error::Conflict(format!(
                    "transactional id '{id}' (version {}, expected {expected_version})",
                    t.version
                ))),
                Some(_) => Ok((vec![Op::delete(KeyRange::key(key.clone()))], ())),
            },
        )
        .await
    }

    pub(super) async fn transactional_ids(&self) -> Result<Vec<String>> {
        let resp = self
            .kv
            .range(Get::prefix(keys::txn::prefix(&self.root)).keys_only())
            .await?;
        resp.kvs
            .iter()
            .map(|kv| keys::txn::deser_key(&self.root, &kv.key))
            .collect()
    }
}
