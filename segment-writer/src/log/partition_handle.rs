//! [`Partition`]: the handle of one partition this broker leads, shared by its appends,
//! reads, the sealer and the compactor: its pure state ([`crate::partition`]) behind a
//! lock, the order lock appends hold across the WAL enqueue, and the high-watermark watch long
//! polls wait on. The topic's configs are not kept here: each append is given them
//! ([`super::AppendPolicy`]), so a change applies at once.
//!
//! Lifecycle: created by an open (`open.rs`) and put in the log's map; served once its
//! leader epoch has begun ([`Partition::epoch_begun`]); taken out of the map by
//! [`LogManager::forget_where`](super::LogManager::forget_where) (leadership lost or handed
//! off, topic deleted). Whoever still holds the `Arc` finishes with it; later uses open the
//! partition anew.

use crate::error::{Error, Result};
use crate::partition::PartitionLogState;
use oxbow_metadata::{LeaderEpoch, Offset, TopicPartition};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use tokio::sync::watch;

/// A partition this broker leads.
pub struct Partition {
    pub topic_partition: TopicPartition,
    pub topic_name: String,
    pub(crate) state: Mutex<PartitionLogState>,
    /// Serializes appends so WAL order matches offset order (held across the WAL enqueue).
    pub(super) append_order: tokio::sync::Mutex<()>,
    /// Publishes the high watermark, for long-polling fetches.
    pub(crate) high_watermark_tx: watch::Sender<Offset>,
    /// Whether this leader's epoch and its start offset are in the partition's stored
    /// epoch history (`LogManager::begin_epoch`); nothing is served before.
    pub(super) epoch_begun: AtomicBool,
    /// What the catalogue holds of it from its log start, as last counted by a compaction
    /// round's retention pass: record-batch bytes and entries (for `/metrics`).
    pub(super) stored_bytes: AtomicU64,
    pub(super) stored_entries: AtomicU64,
}

impl Partition {
    pub(crate) fn lock(&self) -> Result<std::sync::MutexGuard<'_, PartitionLogState>> {
        self.state
            .lock()
            .map_err(|_| Error::Internal("partition state lock poisoned".into()))
    }

    /// Watches the high watermark (changes when new data becomes visible).
    pub fn subscribe(&self) -> watch::Receiver<Offset> {
        self.high_watermark_tx.subscribe()
    }

    /// Catalogued record-batch bytes and catalog entries from the log start, as counted by
    /// the last compaction round (0 before one ran).
    pub fn stored(&self) -> (u64, u64) {
        (
            self.stored_bytes.load(Ordering::Relaxed),
            self.stored_entries.load(Ordering::Relaxed),
        )
    }

    /// Record-batch bytes held here (memory and WAL) that are not in the object store yet.
    pub fn unsealed_bytes(&self) -> Result<u64> {
        Ok(self.lock()?.unsealed_bytes() as u64)
    }

    /// The idempotent producers this partition remembers, by id (DescribeProducers).
    pub fn active_producers(&self) -> Result<Vec<crate::partition::ActiveProducer>> {
        Ok(self.lock()?.active_producers())
    }

    /// (log start offset, high watermark, log end offset).
    pub fn offsets(&self) -> Result<(Offset, Offset, Offset)> {
        let s = self.lock()?;
        Ok((s.log_start_offset, s.high_watermark, s.log_end_offset))
    }

    /// Where `read_committed` reads stop (ListOffsets LATEST at `read_committed`).
    pub fn last_stable_offset(&self) -> Result<Offset> {
        Ok(self.lock()?.last_stable_offset())
    }

    /// Producers with a transaction open here: (producer id, epoch, first offset).
    pub fn open_txns(&self) -> Result<Vec<(i64, i16, Offset)>> {
        Ok(self.lock()?.open_txns())
    }

    pub fn leader_epoch(&self) -> Result<i32> {
        Ok(self.lock()?.leader_epoch)
    }

    /// OffsetForLeaderEpoch's answer for `requested`: (epoch, end offset), `None` for an
    /// undefined epoch or one newer than this leader's (see
    /// [`oxbow_metadata::LeaderEpochHistory::end_offset_for`]).
    pub fn end_offset_for(&self, requested: LeaderEpoch) -> Result<Option<(LeaderEpoch, Offset)>> {
        Ok(self.lock()?.end_offset_for(requested))
    }

    /// The epoch `offset` was written under, if the history goes back that far.
    pub fn epoch_for_offset(&self, offset: Offset) -> Result<Option<LeaderEpoch>> {
        Ok(self.lock()?.epoch_for_offset(offset))
    }

    pub(super) fn epoch_begun(&self) -> bool {
        self.epoch_begun.load(Ordering::Acquire)
    }

    pub(super) fn on_durable(&self, base_offset: Offset, wal_sequence: Option<u64>) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        if s.mark_durable(base_offset, wal_sequence) {
            let hw = s.high_watermark;
            drop(s);
            self.high_watermark_tx.send_replace(hw);
        }
    }
}
