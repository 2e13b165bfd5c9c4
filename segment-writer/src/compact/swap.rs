//! The compactor's catalog swaps: written segments queue up and are committed
//! [`SWAPS_PER_COMMIT`] at a time, each fenced by its partition's epoch and settled alone.

use super::*;

impl Compactor {
    /// Queues a written segment's swap, committing the queue once it holds
    /// [`SWAPS_PER_COMMIT`].
    pub(super) async fn queue_swap(&mut self, swap: Swap, stats: &mut RoundStats) {
        self.pending.push(swap);
        if self.pending.len() >= SWAPS_PER_COMMIT {
            self.commit_swaps(stats).await;
        }
    }

    /// Commits the pending swaps in one request ([`oxbow_metadata::MetadataStore::replace_catalog_entries_many`]),
    /// each fenced by its partition's leader epoch and settled on its own.
    pub(super) async fn commit_swaps(&mut self, stats: &mut RoundStats) {
        let (swaps, stale): (Vec<Swap>, Vec<Swap>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|s| s.written_at.elapsed() <= SWAP_AGE_MAX);
        for s in stale {
            tracing::warn!(partition = %s.tp, key = %s.entry.object_key,
                "a compacted segment waited too long for its catalog swap; giving it up");
            let r = ObjectRef {
                topic_partition: s.tp,
                offset: s.entry.base_offset,
            };
            self.note_superseded(s.entry.object_key, Some(vec![r]), false);
        }
        if swaps.is_empty() {
            return;
        }
        let replaces = swaps
            .iter()
            .map(|s| CatalogReplace {
                fence: EpochFence {
                    topic_partition: s.tp,
                    leader_epoch: s.leader_epoch,
                },
                old: s.old.clone(),
                new: vec![s.entry.clone()],
            })
            .collect();
        let outcomes = self
            .log
            .metadata
            .replace_catalog_entries_many(replaces)
            .await;
        for (swap, outcome) in swaps.into_iter().zip(outcomes) {
            let tp = swap.tp;
            let key = swap.entry.object_key.clone();
            let new_ref = ObjectRef {
                topic_partition: tp,
                offset: swap.entry.base_offset,
            };
            if let Err(e) = outcome {
                let kind = e.kind();
                // Whatever happened, the new segment is deleted if (and only if) the catalog
                // ends up not referencing it. If the outcome is unknown, the replace may
                // have landed: the old objects are candidates too (gated the same way).
                self.note_superseded(key, Some(vec![new_ref]), true);
                // Its data may not be cleaned: the next due round cleans it from the start.
                self.key_cleaned.remove(&tp);
                match kind {
                    MetadataErrorKind::Fenced => {
                        self.metrics.replace_fenced.fetch_add(1, Ordering::Relaxed);
                        // Another broker leads the partition now; leave it to it.
                        self.fenced.insert(tp, swap.leader_epoch);
                    }
                    MetadataErrorKind::Conflict
                    | MetadataErrorKind::NotFound
                    | MetadataErrorKind::Invalid => {
                        self.metrics
                            .replace_conflicts
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    MetadataErrorKind::Unavailable
                    | MetadataErrorKind::AlreadyExists
                    | MetadataErrorKind::Data
                    | MetadataErrorKind::Internal => self.note_old_objects(tp, &swap.old),
                }
                if kind == MetadataErrorKind::NotFound {
                    // The topic (or partition) was deleted during the round:
                    // nothing to retry and nothing wrong, so neither a failure nor a warning.
                    tracing::debug!(partition = %tp, base_offset = swap.entry.base_offset, error = %e,
                        "compaction's catalog swap found the entries gone");
                    continue;
                }
                self.metrics.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(partition = %tp, base_offset = swap.entry.base_offset, error = %e,
                    "compaction's catalog swap failed; retried next round");
                continue;
            }
            self.log.cache.insert_recent(
                &key,
                swap.entry.byte_start,
                swap.entry.byte_len,
                swap.index,
            );
            if swap.keyed {
                // Reads of these offsets must get the compacted batches, not the memory
                // tail's originals.
                let open = self.log.open_partitions();
                if let Some(p) = open.iter().find(|p| p.topic_partition == tp) {
                    if let Ok(mut s) = p.lock() {
                        s.evict_through(swap.entry.last_offset);
                    }
                }
            }
            self.note_old_objects(tp, &swap.old);
            stats.segments_written += 1;
            stats.entries_replaced += swap.old.len() as u64;
            self.metrics
                .segments_written
                .fetch_add(1, Ordering::Relaxed);
            self.metrics
                .segment_bytes_written
                .fetch_add(swap.size, Ordering::Relaxed);
            self.metrics
                .entries_replaced
                .fetch_add(swap.old.len() as u64, Ordering::Relaxed);
            tracing::debug!(partition = %tp, %key, bytes = swap.size, replaced = swap.old.len(), "compacted");
        }
    }
}
