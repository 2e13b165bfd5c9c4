//! A transaction's offsets in its group: stored pending by TxnOffsetCommit (after the
//! transaction coordinator confirms the group is in the transaction, KIP-890), committed or
//! dropped by the transaction's marker.

use super::*;

impl Coordinator {
    /// TxnOffsetCommit: stores `offsets` (topic, partition, offset, leader epoch, metadata)
    /// as pending for (`group_id`, `producer_id`), merged into what the same transaction
    /// committed before; they become committed offsets with the transaction
    /// ([`Self::complete_txn_offsets`]). `member` (member id, group instance id, generation;
    /// v3+) is fenced as Kafka's `doTxnCommitOffsets` does, each field only when set. A
    /// producer epoch older than the one stored is [`oxbow_metadata::Error::ProducerFenced`];
    /// a newer one, while the earlier transaction's offsets still wait for their marker, a
    /// retriable conflict.
    pub async fn txn_commit_offsets(
        &self,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        member: Option<(&str, Option<&str>, i32)>,
        offsets: Vec<(String, i32, i64, i32, String)>,
    ) -> Result<(), TxnOffsetsError> {
        self.txn_commit_offsets_verified(
            group_id,
            producer_id,
            producer_epoch,
            member,
            offsets,
            async { Ok(()) },
        )
        .await
    }

    /// [`Self::txn_commit_offsets`], storing only once `verified` (the transaction
    /// coordinator's word that the group is in the producer's ongoing transaction, KIP-890)
    /// succeeds. It is awaited under the group's offsets lock, which the transaction's
    /// marker also takes ([`Self::complete_txn_offsets`]): an answer cannot be made stale by
    /// a marker landing between it and the store, which would leave pending offsets no
    /// marker ends (or merge them into the producer's next transaction).
    pub async fn txn_commit_offsets_verified(
        &self,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        member: Option<(&str, Option<&str>, i32)>,
        offsets: Vec<(String, i32, i64, i32, String)>,
        verified: impl std::future::Future<Output = Result<(), TxnOffsetsError>>,
    ) -> Result<(), TxnOffsetsError> {
        if let Some((member_id, instance_id, generation)) = member {
            let checked = match self.existing(group_id) {
                Some(slot) => {
                    Self::lock(&slot)
                        .group
                        .check_txn_commit(member_id, instance_id, generation)
                }
                None => {
                    Group::new(group_id, 0).check_txn_commit(member_id, instance_id, generation)
                }
            };
            checked.map_err(TxnOffsetsError::Group)?;
        }
        let ts = now_wall_ms();
        let offsets: Vec<CommittedOffset> = offsets
            .into_iter()
            .map(
                |(topic, partition, offset, leader_epoch, metadata)| CommittedOffset {
                    topic,
                    partition,
                    offset,
                    leader_epoch,
                    metadata,
                    commit_timestamp_ms: ts,
                },
            )
            .collect();
        let cell = self.offsets_slot(group_id);
        let mut guard = cell.lock().await;
        verified.await?;
        let stored = match self
            .metadata
            .put_txn_offsets(group_id, producer_id, producer_epoch, offsets)
            .await
        {
            Ok(stored) => stored,
            Err(e) => {
                // The write may have landed all the same (a lost answer): a cache without
                // it would serve an unstable offset as stable, so it is read afresh.
                *guard = None;
                return Err(e.into());
            }
        };
        self.loaded(group_id, &mut guard)
            .await?
            .pending
            .insert(producer_id, stored);
        Ok(())
    }

    /// A transaction's marker for the offsets partitions `offsets_partitions`
    /// (WriteTxnMarkers to `__consumer_offsets`): the pending offsets of `producer_id` for
    /// every group in those partitions that this broker coordinates are committed
    /// (`commit`) or dropped, each group in one metadata transaction, and the cache follows.
    /// Records of a newer producer epoch than `producer_epoch` are left alone (a late marker
    /// of an earlier transaction). Idempotent: a retry finds nothing left to do. Groups
    /// coordinated elsewhere come back in [`TxnOffsetsCompletion::not_coordinator`]. One
    /// keys-only read of the pending records (as many as transactions in flight), then one
    /// metadata transaction per group completed.
    pub async fn complete_txn_offsets(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        offsets_partitions: &[i32],
        commit: bool,
    ) -> Result<TxnOffsetsCompletion, oxbow_metadata::Error> {
        let wanted: BTreeSet<i32> = offsets_partitions.iter().copied().collect();
        let groups: BTreeSet<String> = self
            .metadata
            .txn_offsets_groups(producer_id)
            .await?
            .into_iter()
            .filter(|g| wanted.contains(&offsets_partition(g)))
            .collect();
        let mut out = TxnOffsetsCompletion::default();
        for group_id in groups {
            if !(self.coordinates)(&group_id) {
                let partition = offsets_partition(&group_id);
                out.not_coordinator.push((group_id, partition));
                continue;
            }
            let cell = self.offsets_slot(&group_id);
            let mut guard = cell.lock().await;
            let done = self
                .metadata
                .complete_txn_offsets(&group_id, producer_id, producer_epoch, commit)
                .await;
            let done = match done {
                Ok(done) => done,
                Err(e) => {
                    // The write's outcome is unknown: read the group afresh next time.
                    *guard = None;
                    return Err(e);
                }
            };
            let Some(record) = done else {
                // Nothing ended here (gone already, or a newer transaction's): the cache may
                // hold what another path ended, so it is read afresh.
                *guard = None;
                continue;
            };
            if let Some(cached) = guard.as_mut() {
                cached.pending.remove(&producer_id);
                if commit {
                    for o in record.offsets {
                        cached.committed.insert((o.topic.clone(), o.partition), o);
                    }
                }
            }
            out.completed.push(group_id);
        }
        Ok(out)
    }
}
