//! The compactor's key compaction of partitions of compacted topics (the rules are pure, in
//! [`crate::key_compact`]; this drives them over the catalogue and the object store).

use super::*;

impl Compactor {
    /// Key compaction of one partition of a compacted topic ([`crate::key_compact`]), if
    /// due: the map from the dirty part of its cleanable entries, then every run of
    /// cleanable entries up to what the map covers rewritten into a segment of the same
    /// span (its swap committed with the others). Returns whether it was due.
    pub(super) async fn key_compact_partition(
        &mut self,
        tp: TopicPartition,
        leader_epoch: LeaderEpoch,
        sealed_end: Offset,
        kc: KeyCompaction,
        stats: &mut RoundStats,
        stop: &CancellationToken,
    ) -> Result<bool> {
        // From the log start: the clean part loses the keys the dirty part overwrites.
        let mut entries = self.scan_from(tp, 0, sealed_end).await?;
        // Frozen data stays where it is, and so does everything after it (nothing may be
        // cleaned against keys that cannot be read).
        let readable = entries
            .iter()
            .take_while(|e| !self.frozen.contains(&(tp, e.base_offset)))
            .count();
        entries.truncate(readable);
        let now_ms = self.log.clock.unix_ms();
        let info: Vec<CleanableEntry> = entries
            .iter()
            .map(|e| CleanableEntry {
                last_offset: e.last_offset,
                max_timestamp_ms: e.max_timestamp_ms,
                bytes: segment::data_bytes(e),
            })
            .collect();
        let cleanable = key_compact::cleanable_len(&info, now_ms, &kc);
        entries.truncate(cleanable);
        let dirty_from = self.key_cleaned.get(&tp).copied().unwrap_or(Offset::MIN);
        if !key_compact::due(&info[..cleanable], dirty_from, now_ms, &kc) {
            tracing::trace!(partition = %tp, entries = info.len(), cleanable, dirty_from, "key compaction not due");
            return Ok(false);
        }
        let limit = self.log.max_decompressed_batch_bytes();
        // Pass 1: the offset map, a chunk at a time, until it is full.
        let mut map = OffsetMap::with_budget(self.settings.key_map_bytes);
        let mut covered_to = None;
        let mut full = false;
        for e in entries.iter().filter(|e| e.last_offset >= dirty_from) {
            if full || stop.is_cancelled() || !self.has_budget(stats) {
                break;
            }
            let added = self
                .visit_entry(e, stats, |_, b| {
                    let p = map.add(std::slice::from_ref(&b), dirty_from, limit)?;
                    covered_to = p.covered_to.or(covered_to);
                    full = p.full;
                    Ok(!full)
                })
                .await;
            if let Err(err) = added {
                self.freeze_if_corrupt(tp, e, &err);
                return Err(err);
            }
        }
        let Some(cleaned_to) = covered_to else {
            return Ok(true);
        };
        // Pass 2: runs of one epoch, each at most a segment of input, up to the map's end.
        let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
        let mut run_bytes = 0u64;
        for (i, e) in entries.iter().enumerate() {
            if e.base_offset > cleaned_to {
                break;
            }
            let bytes = segment::data_bytes(e);
            let extends = runs.last().is_some_and(|r| {
                let prev = &entries[r.end - 1];
                prev.leader_epoch == e.leader_epoch
                    && r.len() < ENTRIES_PER_RUN_MAX
                    && run_bytes.saturating_add(bytes) <= self.settings.segment_bytes
            });
            match runs.last_mut() {
                Some(r) if extends => {
                    r.end = i + 1;
                    run_bytes += bytes;
                }
                _ => {
                    runs.push(i..i + 1);
                    run_bytes = bytes;
                }
            }
        }
        let params = RunParams {
            cleaned_to,
            now_ms,
            delete_retention_ms: kc.delete_retention_ms,
            max_decompressed_batch_bytes: limit,
        };
        let mut complete = true;
        for run in runs {
            if stop.is_cancelled() || !self.has_budget(stats) {
                complete = false;
                break;
            }
            let old = &entries[run];
            match self
                .clean_run(tp, leader_epoch, old, &map, params, stats)
                .await
            {
                Ok(Some(swap)) => self.queue_swap(swap, stats).await,
                Ok(None) => {}
                Err(e) => {
                    complete = false;
                    self.metrics.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(partition = %tp, base_offset = old[0].base_offset, error = %e, "key compaction of a run failed; retried next round");
                }
            }
        }
        if complete {
            self.metrics.key_cleanings.fetch_add(1, Ordering::Relaxed);
            self.key_cleaned.insert(tp, cleaned_to + 1);
        }
        Ok(true)
    }

    /// Rewrites one run of entries against the map into a segment with the same span and
    /// PUTs it; `None` if nothing would change (one segment, no record removed).
    pub(super) async fn clean_run(
        &mut self,
        tp: TopicPartition,
        leader_epoch: LeaderEpoch,
        old: &[CatalogEntry],
        map: &OffsetMap,
        params: RunParams,
        stats: &mut RoundStats,
    ) -> Result<Option<Swap>> {
        let (Some(first), Some(last)) = (old.first(), old.last()) else {
            return Ok(None);
        };
        let mut batches: Vec<Bytes> = Vec::new();
        for e in old {
            let fetched = self
                .visit_entry(e, stats, |_, b| {
                    batches.push(b);
                    Ok(true)
                })
                .await;
            if let Err(err) = fetched {
                self.freeze_if_corrupt(tp, e, &err);
                return Err(err);
            }
        }
        let cleaned = match key_compact::clean_run(&batches, map, params) {
            Ok(c) => c,
            Err(err) => {
                // Which entry holds the bad batch is not known here: freeze the run.
                for e in old {
                    self.freeze_if_corrupt(tp, e, &err);
                }
                return Err(err);
            }
        };
        // The producers of the batches as written, whatever cleaning keeps of them (the
        // segment's producers section, issue 16).
        let mut run = crate::producer_summary::RunProducers::default();
        for b in &batches {
            if let Some(h) = crate::batch::peek_header(b)? {
                run.observe(&h);
            }
        }
        drop(batches);
        if !cleaned.changed && old.len() == 1 && first.layout == EntryLayout::SegmentIndex {
            return Ok(None);
        }
        self.metrics.key_records_removed.fetch_add(
            cleaned.records_in.saturating_sub(cleaned.records_out),
            Ordering::Relaxed,
        );
        let mut builder = SegmentBuilder::new(
            tp,
            first.leader_epoch,
            self.settings.index_interval_bytes,
            usize::try_from(cleaned.bytes_out).unwrap_or(0),
        )
        .with_gaps_from(first.base_offset);
        for b in &cleaned.batches {
            builder.push(b)?;
        }
        if builder.next_offset() != Some(last.next_offset()) {
            return Err(Error::Internal(format!(
                "key-compacted run {}..={} of {tp} ends at {:?}",
                first.base_offset,
                last.last_offset,
                builder.next_offset()
            )));
        }
        let swap = self
            .put_segment(tp, leader_epoch, old, builder, run)
            .await?;
        Ok(swap.map(|s| Swap { keyed: true, ..s }))
    }
}
