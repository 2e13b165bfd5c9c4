//! Consumer groups and their committed offsets: `groups/{group}` (the coordinator's
//! versioned record) and `offsets/{group}/{topic}/{partition}` (one key per partition, so
//! a commit writes only what it names). Split out of `mod.rs` along the record-kind seam.

use super::{first, KvStore, TXN_OPS_MAX};
use crate::error::{Error, Result};
use crate::group::{validate_group_id, CommittedOffset, GroupRecord};
use crate::keys;
use crate::kv::{Get, KeyRange, Kv, Op, Txn};
use crate::types::PartitionId;
use bytes::Bytes;
use std::collections::BTreeSet;

impl<K: Kv> KvStore<K> {
    pub(super) async fn store_offsets(
        &self,
        group_id: &str,
        offsets: Vec<CommittedOffset>,
    ) -> Result<()> {
        validate_group_id(group_id)?;
        let root = &self.root;
        let mut puts = Vec::with_capacity(offsets.len());
        for o in &offsets {
            puts.push(Op::put(
                keys::offset::ser_key(root, group_id, &o.topic, o.partition),
                keys::offset::ser_value(o)?,
            ));
        }
        // One transaction per TXN_OPS_MAX partitions: a larger commit is atomic per chunk
        // only (each partition's offset is still written whole).
        let txns = puts
            .chunks(TXN_OPS_MAX)
            .map(|ops| self.kv.txn(Txn::new().then(ops.to_vec())));
        for r in futures::future::join_all(txns).await {
            r?;
        }
        Ok(())
    }

    pub(super) async fn read_offsets(&self, group_id: &str) -> Result<Vec<CommittedOffset>> {
        let prefix = keys::offset::group_prefix(&self.root, group_id);
        let resp = self.kv.range(Get::prefix(prefix)).await?;
        let mut out = resp
            .kvs
            .iter()
            .map(|kv| keys::offset::deser_value(&kv.key, &kv.value))
            .collect::<Result<Vec<_>>>()?;
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(out)
    }

    pub(super) async fn remove_offsets(
        &self,
        group_id: &str,
        partitions: Option<Vec<(String, PartitionId)>>,
    ) -> Result<()> {
        let root = &self.root;
        let ops: Vec<Op> = match &partitions {
            None => vec![Op::delete(KeyRange::prefix(keys::offset::group_prefix(
                root, group_id,
            )))],
            Some(list) => list
                .iter()
                .map(|(t, p)| {
                    Op::delete(KeyRange::key(keys::offset::ser_key(root, group_id, t, *p)))
                })
                .collect(),
        };
        for chunk in ops.chunks(TXN_OPS_MAX) {
            self.kv.txn(Txn::new().then(chunk.to_vec())).await?;
        }
        Ok(())
    }

    pub(super) async fn read_group(&self, group_id: &str) -> Result<Option<GroupRecord>> {
        let resp = self.get(keys::group::ser_key(&self.root, group_id)).await?;
        first(&resp)
            .map(|kv| keys::group::deser_value(group_id, &kv.key, &kv.value))
            .transpose()
    }

    pub(super) async fn write_group(
        &self,
        group_id: &str,
        expected_version: Option<u64>,
        data: Bytes,
    ) -> Result<GroupRecord> {
        validate_group_id(group_id)?;
        let key = keys::group::ser_key(&self.root, group_id);
        self.versioned(
            &key,
            &format!("group '{group_id}'"),
            |kv| keys::group::deser_value(group_id, &kv.key, &kv.value),
            |current| {
                let current = current.map(|g| g.version);
                if current != expected_version {
                    return Err(Error::Conflict(format!(
                        "group '{group_id}' (version {current:?}, expected {expected_version:?})"
                    )));
                }
                let record = GroupRecord {
                    group_id: group_id.to_string(),
                    version: expected_version.unwrap_or(0) + 1,
                    data: data.clone(),
                };
                Ok((
                    vec![Op::put(key.clone(), keys::group::ser_value(&record)?)],
                    record,
                ))
            },
        )
        .await
    }

    pub(super) async fn remove_group(&self, group_id: &str, expected_version: u64) -> Result<()> {
        let root = &self.root;
        let key = keys::group::ser_key(root, group_id);
        let offsets = keys::offset::group_prefix(root, group_id);
        self.versioned(
            &key,
            &format!("group '{group_id}'"),
            |kv| keys::group::deser_value(group_id, &kv.key, &kv.value),
            |current| match current {
                None => Err(Error::UnknownGroup(group_id.to_string())),
                Some(g) if g.version != expected_version => Err(Error::Conflict(format!(
                    "group '{group_id}' (version {}, expected {expected_version})",
                    g.version
                ))),
                Some(_) => Ok((
                    vec![
                        Op::delete(KeyRange::key(key.clone())),
                        Op::delete(KeyRange::prefix(offsets.clone())),
                    ],
                    (),
                )),
            },
        )
        .await
    }

    pub(super) async fn group_names(&self) -> Result<Vec<String>> {
        let root = &self.root;
        let resp = self
            .kv
            .txn(Txn::new().then([
                Op::Get(Get::prefix(keys::group::prefix(root)).keys_only()),
                Op::Get(Get::prefix(keys::offset::prefix(root)).keys_only()),
            ]))
            .await?;
        let mut out = BTreeSet::new();
        for kv in &resp.get(0)?.kvs {
            out.insert(keys::group::deser_key(root, &kv.key)?);
        }
        for kv in &resp.get(1)?.kvs {
            out.insert(keys::offset::deser_key(root, &kv.key)?);
        }
        Ok(out.into_iter().collect())
    }
}
