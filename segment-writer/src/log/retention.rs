//! Moving a partition's log start offset (retention, DeleteRecords): the one durable step,
//! a compare-and-swap of the partition's state fenced by this broker's leadership, after
//! which nothing below the new start is served by any broker (the catalogue's view drops
//! the entries wholly below it, and the metadata sweep deletes their keys). The objects
//! they lived in are deleted by the compactor's ledger once nothing references them.
//!
//! Never past what is catalogued: a log start inside the WAL tail would leave a new leader
//! recovering a tail from an offset no batch starts at (see `crate::leadership::recover::chain`), so
//! DeleteRecords waits for the seal first ([`LogManager::wait_sealed`]).

use super::{LogManager, Partition};
use crate::error::{Error, Result};
use crate::retention::{expired_prefix_end, RetainedEntry, Retention};
use oxbow_metadata::{CatalogEntry, ErrorKind as MetadataErrorKind, Offset};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Compare-and-swap attempts when another change of the partition's state races.
const CAS_ATTEMPTS: usize = 8;
/// Catalog entries looked at per partition per retention check (the rest wait for the
/// next round).
const RETENTION_SCAN_MAX: usize = 10_000;
const RETENTION_PAGE: usize = 1_000;
/// How often [`LogManager::wait_sealed`] looks.
const SEALED_POLL: Duration = Duration::from_millis(25);

impl LogManager {
    /// Raises `p`'s log start offset to `to` (at most its sealed end), durably: a
    /// compare-and-swap of the partition's state that holds only while this broker leads
    /// it at the epoch it opened it with. Returns the log start now (at least `to`).
    pub async fn advance_log_start(&self, p: &Partition, to: Offset) -> Result<Offset> {
        let tp = p.topic_partition;
        let me = self.settings.broker_id;
        let (epoch, current, sealed_end) = {
            let s = p.lock()?;
            (s.leader_epoch, s.log_start_offset, s.sealed_end)
        };
        if to <= current {
            return Ok(current);
        }
        if to > sealed_end {
            return Err(Error::OffsetOutOfRange {
                offset: to,
                log_start: current,
                log_end: sealed_end,
            });
        }
        for _ in 0..CAS_ATTEMPTS {
            let state = self.stored_state(p).await?;
            if state.leader != me || state.leader_epoch != epoch {
                return Err(Error::NotLeader(format!(
                    "{}-{} (leader is broker {} at epoch {}, this broker opened it at {epoch})",
                    p.topic_name, tp.partition, state.leader, state.leader_epoch
                )));
            }
            if state.log_start_offset >= to {
                return Ok(self.set_log_start(p, state.log_start_offset));
            }
            let mut next = state.clone();
            next.log_start_offset = to;
            match self
                .metadata
                .update_partition(tp.topic_id, state.version, next)
                .await
            {
                Ok(stored) => {
                    tracing::info!(partition = %format!("{}-{}", p.topic_name, tp.partition),
                        from = state.log_start_offset, to = stored.log_start_offset, "log start offset advanced");
                    return Ok(self.set_log_start(p, stored.log_start_offset));
                }
                Err(e) if e.kind() == MetadataErrorKind::Conflict => continue,
                Err(e) => {
                    // The outcome may be unknown (a timeout whose write landed): learn what
                    // is stored, if it can be read, before answering.
                    if e.kind() == MetadataErrorKind::Unavailable {
                        if let Ok(stored) = self.stored_state(p).await {
                            self.set_log_start(p, stored.log_start_offset);
                        }
                    }
                    return Err(e.into());
                }
            }
        }
        Err(Error::Metadata(oxbow_metadata::Error::Conflict(format!(
            "{}-{}: the partition's state kept changing while the log start moved; retry",
            p.topic_name, tp.partition
        ))))
    }

    /// Raises `p`'s log start to one the metadata service holds (never lowers it): a step
    /// whose answer was lost may have landed, and from then on the catalogue serves
    /// nothing below it, so this leader must not claim an earlier start (found by the
    /// simulation, seed 152: ListOffsets said 16 while the data began at 55).
    pub fn follow_log_start(&self, p: &Partition, stored: Offset) {
        self.set_log_start(p, stored);
    }

    fn set_log_start(&self, p: &Partition, start: Offset) -> Offset {
        match p.lock() {
            Ok(mut s) => {
                s.log_start_offset = s.log_start_offset.max(start);
                // Aborts wholly below the log start are never asked about again.
                let log_start = s.log_start_offset;
                s.trim_txns_below(log_start);
                log_start
            }
            Err(_) => start,
        }
    }

    /// Waits until `p`'s data below `offset` is sealed, for at most `timeout`; returns the
    /// sealed end (below `offset` if the wait timed out).
    pub async fn wait_sealed(
        &self,
        p: &Partition,
        offset: Offset,
        timeout: Duration,
    ) -> Result<Offset> {
        let deadline = self.clock.now() + timeout;
        loop {
            let sealed_end = p.lock()?.sealed_end;
            if sealed_end >= offset || self.clock.now() >= deadline {
                return Ok(sealed_end);
            }
            self.clock.sleep(SEALED_POLL).await;
        }
    }

    /// Applies `retention` to `p` (led here) at `now_ms`: advances its log start past the
    /// expired prefix of its catalogued entries. Returns the entries that left (their
    /// objects may be deleted once nothing references them). Also counts what the
    /// catalogue holds of `p` ([`Partition::stored`]).
    pub async fn apply_retention(
        &self,
        p: &Partition,
        retention: Retention,
        now_ms: i64,
    ) -> Result<Vec<CatalogEntry>> {
        let (log_start, unsealed) = {
            let s = p.lock()?;
            (s.log_start_offset, s.unsealed_bytes() as u64)
        };
        let mut entries = self.catalogued(p).await?;
        let summary: Vec<RetainedEntry> = entries
            .iter()
            .map(|e| RetainedEntry {
                last_offset: e.last_offset,
                max_timestamp_ms: e.max_timestamp_ms,
                bytes: crate::segment::data_bytes(e),
            })
            .collect();
        p.stored_bytes
            .store(summary.iter().map(|e| e.bytes).sum(), Ordering::Relaxed);
        p.stored_entries
            .store(summary.len() as u64, Ordering::Relaxed);
        if retention.keeps_everything() {
            return Ok(Vec::new());
        }
        let Some(end) = expired_prefix_end(&summary, unsealed, now_ms, retention) else {
            return Ok(Vec::new());
        };
        if end <= log_start {
            return Ok(Vec::new());
        }
        let start = self.advance_log_start(p, end).await?;
        entries.retain(|e| e.last_offset < start);
        Ok(entries)
    }

    /// The catalogue entries of `p` from its log start to what is sealed (at most
    /// [`RETENTION_SCAN_MAX`]), from the in-memory catalogue.
    async fn catalogued(&self, p: &Partition) -> Result<Vec<CatalogEntry>> {
        let tp = p.topic_partition;
        let (log_start, sealed_end) = {
            let s = p.lock()?;
            (s.log_start_offset, s.sealed_end)
        };
        let mut entries: Vec<CatalogEntry> = Vec::new();
        let mut next = log_start;
        while next < sealed_end && entries.len() < RETENTION_SCAN_MAX {
            let page = self
                .metadata
                .catalog_entries(tp.topic_id, tp.partition, next, RETENTION_PAGE)
                .await?;
            let Some(last) = page.last() else { break };
            next = last.next_offset();
            entries.extend(page.into_iter().filter(|e| e.last_offset < sealed_end));
        }
        Ok(entries)
    }

    /// Record-batch bytes `p` holds in the object store from its log start (counted now,
    /// and kept for `/metrics` as a compaction round would).
    pub async fn stored_bytes(&self, p: &Partition) -> Result<u64> {
        let entries = self.catalogued(p).await?;
        let bytes = entries.iter().map(crate::segment::data_bytes).sum();
        p.stored_bytes.store(bytes, Ordering::Relaxed);
        p.stored_entries
            .store(entries.len() as u64, Ordering::Relaxed);
        Ok(bytes)
    }
}
