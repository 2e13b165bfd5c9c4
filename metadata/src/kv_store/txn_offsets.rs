//! Transactions' pending offsets ([`PendingTxnOffsets`]) over `txn-offsets/{group}/{pid}`:
//! merge by compare-and-swap, list, and completion — on commit the offsets become the
//! group's committed offsets (the keys [`MetadataStore::commit_offsets`] writes) and the
//! record goes, in one transaction, so a coordinator dying between the two leaves either
//! the pending record (the marker is retried) or its result, never half of each.
//!
//! [`MetadataStore::commit_offsets`]: crate::MetadataStore::commit_offsets

use super::{first, KvStore, CAS_ATTEMPTS, TXN_OPS_MAX};
use crate::error::{Error, Result};
use crate::group::{
    validate_group_id, CommittedOffset, PendingTxnOffsets, PENDING_TXN_OFFSETS_BYTES_MAX,
};
use crate::keys;
use crate::kv::{Compare, Get, KeyRange, Kv, Op, Txn};
use std::collections::BTreeMap;

fn validate_producer_id(producer_id: i64) -> Result<()> {
    if producer_id < 0 {
        return Err(Error::InvalidRequest(format!(
            "producer id {producer_id} is negative"
        )));
    }
    Ok(())
}

/// `stored` with `offsets` merged in by a request of `producer_epoch` (see
/// [`crate::MetadataStore::put_txn_offsets`] for the rules).
fn merged(
    group_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    stored: Option<PendingTxnOffsets>,
    offsets: &[CommittedOffset],
) -> Result<PendingTxnOffsets> {
    let kept = match stored {
        Some(s) if s.producer_epoch > producer_epoch => {
            return Err(Error::ProducerFenced {
                producer_id,
                current: s.producer_epoch,
                held: producer_epoch,
            })
        }
        Some(s) if s.producer_epoch == producer_epoch => s.offsets,
        // An earlier transaction's offsets, its marker not applied yet (its transaction
        // coordinator retries it until it lands; a re-initialised producer's abort comes
        // with a newer epoch too). Replacing them could lose a commit, merging could commit
        // an abort: the caller retries once the marker has ended them.
        Some(s) => {
            return Err(Error::Conflict(format!(
                "producer {producer_id} still has offsets of epoch {} pending for group \
                 '{group_id}' (request at epoch {producer_epoch}): waiting for its marker",
                s.producer_epoch
            )))
        }
        None => Vec::new(),
    };
    let mut by_partition: BTreeMap<(String, i32), CommittedOffset> = kept
        .into_iter()
        .map(|o| ((o.topic.clone(), o.partition), o))
        .collect();
    for o in offsets {
        by_partition.insert((o.topic.clone(), o.partition), o.clone());
    }
    Ok(PendingTxnOffsets {
        group_id: group_id.to_string(),
        producer_id,
        producer_epoch,
        offsets: by_partition.into_values().collect(),
    })
}

impl<K: Kv> KvStore<K> {
    pub(super) async fn merge_txn_offsets(
        &self,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        offsets: Vec<CommittedOffset>,
    ) -> Result<PendingTxnOffsets> {
        validate_group_id(group_id)?;
        validate_producer_id(producer_id)?;
        let key = keys::txn_offsets::ser_key(&self.root, group_id, producer_id);
        self.versioned(
            &key,
            &format!("pending offsets of producer {producer_id} for group '{group_id}'"),
            |kv| keys::txn_offsets::deser_value(&kv.key, &kv.value),
            |stored| {
                let record = merged(group_id, producer_id, producer_epoch, stored, &offsets)?;
                let value = keys::txn_offsets::ser_value(&record)?;
                if value.len() > PENDING_TXN_OFFSETS_BYTES_MAX {
                    return Err(Error::InvalidRequest(format!(
                        "pending offsets of producer {producer_id} for group '{group_id}' \
                         would take {} bytes (at most {PENDING_TXN_OFFSETS_BYTES_MAX})",
                        value.len()
                    )));
                }
                Ok((vec![Op::put(key.clone(), value)], record))
            },
        )
        .await
    }

    /// Every record under `prefix`, in key order (group, then producer id).
    pub(super) async fn pending_txn_offsets(
        &self,
        prefix: String,
    ) -> Result<Vec<PendingTxnOffsets>> {
        let resp = self.kv.range(Get::prefix(prefix)).await?;
        resp.kvs
            .iter()
            .map(|kv| keys::txn_offsets::deser_value(&kv.key, &kv.value))
            .collect()
    }

    pub(super) async fn txn_offsets_groups_of(&self, producer_id: i64) -> Result<Vec<String>> {
        let resp = self
            .kv
            .range(Get::prefix(keys::txn_offsets::prefix(&self.root)).keys_only())
            .await?;
        let mut out = Vec::new();
        for kv in &resp.kvs {
            let (group, pid) = keys::txn_offsets::deser_key(&self.root, &kv.key)?;
            if pid == producer_id {
                out.push(group);
            }
        }
        Ok(out)
    }

    pub(super) async fn finish_txn_offsets(
        &self,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<Option<PendingTxnOffsets>> {
        validate_producer_id(producer_id)?;
        let root = &self.root;
        let key = keys::txn_offsets::ser_key(root, group_id, producer_id);
        'attempt: for _ in 0..CAS_ATTEMPTS {
            let resp = self.get(key.clone()).await?;
            let Some(kv) = first(&resp).cloned() else {
                // Completed already (a retried marker), or never written.
                return Ok(None);
            };
            let record = keys::txn_offsets::deser_value(&kv.key, &kv.value)?;
            if record.producer_epoch > producer_epoch {
                // A newer transaction's offsets: a late marker of an older one is not theirs.
                return Ok(None);
            }
            let mut puts = Vec::new();
            if commit {
                for o in &record.offsets {
                    puts.push(Op::put(
                        keys::offset::ser_key(root, group_id, &o.topic, o.partition),
                        keys::offset::ser_value(o)?,
                    ));
                }
            }
            // Every transaction is guarded by the record being unchanged. Up to
            // TXN_OPS_MAX - 1 partitions (nearly always) that is one transaction, puts and
            // delete together. Beyond etcd's limit the leading chunks write offsets only and
            // the last deletes the record: a failure part-way leaves the record, and the
            // retry writes the same offsets again.
            let split = puts.len().saturating_sub(TXN_OPS_MAX - 1);
            let mut last = puts.split_off(split);
            last.push(Op::delete(KeyRange::key(key.clone())));
            let guard = || [Compare::unchanged(key.clone(), Some(&kv))];
            for chunk in puts.chunks(TXN_OPS_MAX) {
                let txn = Txn::new().when(guard()).then(chunk.to_vec());
                if !self.kv.txn(txn).await?.succeeded {
                    continue 'attempt;
                }
            }
            if self
                .kv
                .txn(Txn::new().when(guard()).then(last))
                .await?
                .succeeded
            {
                return Ok(Some(record));
            }
        }
        Err(Error::Conflict(format!(
            "pending offsets of producer {producer_id} for group '{group_id}'"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(topic: &str, partition: i32, offset: i64) -> CommittedOffset {
        CommittedOffset {
            topic: topic.into(),
            partition,
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
        }
    }

    #[test]
    fn same_epoch_merges_newer_epoch_waits_older_is_fenced() {
        let first = merged("g", 1, 3, None, &[o("t", 1, 5), o("t", 0, 4)]).expect("create");
        assert_eq!(first.offsets, vec![o("t", 0, 4), o("t", 1, 5)], "sorted");
        let more = merged(
            "g",
            1,
            3,
            Some(first.clone()),
            &[o("t", 1, 9), o("u", 0, 1)],
        )
        .expect("merge");
        assert_eq!(more.offsets, vec![o("t", 0, 4), o("t", 1, 9), o("u", 0, 1)]);
        let err = merged("g", 1, 4, Some(more.clone()), &[o("u", 0, 2)]).expect_err("bump");
        assert_eq!(err.kind(), crate::ErrorKind::Conflict, "retriable");
        let err = merged("g", 1, 2, Some(more), &[o("u", 0, 2)]).expect_err("zombie");
        assert_eq!(err.kind(), crate::ErrorKind::Fenced);
    }
}
