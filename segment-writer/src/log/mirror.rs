//! The mirror append (issue 20, ARCHITECTURE decision 34): [`LogManager::enqueue_mirrored`]
//! takes one record batch fetched from a mirror topic's source cluster and holds it at the
//! source's offset, as durable as an `acks=all` produce (the same lease and in-sync checks,
//! the same WAL and replicas), so a destination leader's failover loses nothing it reported
//! mirrored. The pure rules are in [`crate::mirror`]: the batch is checked (CRC and counts,
//! never trusted), skipped if already held, refused if it straddles the log end, and a gap
//! before it is covered by empty batches.
//!
//! Unlike a produce there is no client validation (timestamps may be old, control batches
//! are the source's transaction markers) and no sequence check (the source already
//! deduplicated); producer and transaction state are recorded as an append does
//! ([`crate::partition::PartitionLogState::append`]), so after promotion idempotent
//! producers continue their sequences and `read_committed` reads stop at the right place.
//!
//! Only the mirror task of the partition's leader calls this, and the gateway refuses
//! produce to a mirror topic, so nothing else appends meanwhile; the order lock and the
//! log-end checks under it make a concurrent append fail instead of interleaving.

use super::append::{check_lease, Queued};
use super::{LogManager, Partition, PendingAppend};
use crate::batch;
use crate::error::{Error, Result};
use crate::mirror::{self, MirrorStep};
use crate::partition::SequenceCheck;
use crate::Appended;
use oxbow_metadata::Offset;
use std::sync::Arc;

/// What [`LogManager::enqueue_mirrored`] did with one source batch.
pub enum Mirrored {
    /// Already held: every offset of it is below the log end.
    Skipped,
    /// Queued at its source offsets; wait on every append for durability (gap fillers
    /// first, then the batch itself).
    Queued(Vec<PendingAppend>),
}

impl LogManager {
    /// Holds one source batch (`raw`, exactly one RecordBatch v2 of at most `max_bytes`) at
    /// its own offset in the mirror `partition`; see the module docs. `min_insync_replicas`
    /// is the mirror topic's.
    pub async fn enqueue_mirrored(
        &self,
        partition: &Arc<Partition>,
        raw: &[u8],
        max_bytes: usize,
        min_insync_replicas: i32,
    ) -> Result<Mirrored> {
        let header = mirror::check_source_batch(raw, max_bytes)?;
        let step = mirror::plan(partition.lock()?.next_offset(), &header)?;
        let mut pending = Vec::new();
        match step {
            MirrorStep::Skip => return Ok(Mirrored::Skipped),
            MirrorStep::Append => {}
            MirrorStep::FillThenAppend { from, to } => {
                for filler in mirror::gap_filler(from, to) {
                    let h = batch::peek_header(&filler)?
                        .ok_or_else(|| Error::Internal("a gap filler is not whole".into()))?;
                    pending.push(
                        self.enqueue_at(partition, &h, &filler, min_insync_replicas)
                            .await?,
                    );
                }
            }
        }
        pending.push(
            self.enqueue_at(partition, &header, raw, min_insync_replicas)
                .await?,
        );
        Ok(Mirrored::Queued(pending))
    }

    /// Queues one batch whose base offset must be the log end when the order lock is held.
    async fn enqueue_at(
        &self,
        partition: &Arc<Partition>,
        header: &batch::BatchHeader,
        raw: &[u8],
        min_insync_replicas: i32,
    ) -> Result<PendingAppend> {
        check_lease(self.lease.get())?;
        let check_insync = self.wal.is_some();
        if check_insync {
            let in_sync = self.replicator.in_sync_copies();
            if (in_sync as i64) < i64::from(min_insync_replicas) {
                return Err(Error::NotEnoughReplicas {
                    in_sync,
                    required: min_insync_replicas,
                });
            }
        }
        let expected: Offset = header.base_offset;
        let queued = self
            .append_ordered(partition, header, raw, None, |s| {
                if s.next_offset() != expected {
                    return Err(Error::Internal(format!(
                        "mirror partition's log end moved to {} while appending at {expected}",
                        s.next_offset()
                    )));
                }
                Ok(SequenceCheck::Append)
            })
            .await?;
        let Queued::Appended(base_offset, durable) = queued else {
            return Err(Error::Internal(
                "a mirrored batch was taken for a retry".into(),
            ));
        };
        self.metrics.count_append(raw.len(), header.record_count);
        Ok(PendingAppend {
            appended: Appended {
                base_offset,
                log_append_time_ms: -1,
                duplicate: false,
            },
            durable: Some(durable),
            insync_check: check_insync.then(|| (self.replicator.clone(), min_insync_replicas)),
            lease: super::append::held_lease(self.lease.get()),
        })
    }
}
