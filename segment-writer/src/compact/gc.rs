//! The compactor's deletion of superseded objects: candidates noted as swaps and retention
//! steps land, their references settled against the catalogue, deleted after the delete
//! delay ([`crate::compact_state::DeletionLedger`] is the pure part).

use super::*;

impl Compactor {
    pub(super) fn note_superseded(
        &mut self,
        key: String,
        refs: Option<Vec<ObjectRef>>,
        recheck: bool,
    ) {
        if !self.ledger.superseded(key.clone(), refs, recheck) {
            tracing::warn!(%key, "too many objects awaiting deletion; leaving this one behind");
        }
    }

    /// The objects of replaced entries become deletion candidates.
    pub(super) fn note_old_objects(&mut self, tp: TopicPartition, old: &[CatalogEntry]) {
        let mut seen = BTreeSet::new();
        for e in old {
            if !seen.insert(e.object_key.clone()) {
                continue;
            }
            let refs = match e.layout {
                // A sealed object is referenced by every partition its index lists.
                EntryLayout::Batches => None,
                // A segment holds one partition and is catalogued by one entry.
                EntryLayout::SegmentIndex => Some(vec![ObjectRef {
                    topic_partition: tp,
                    offset: e.base_offset,
                }]),
            };
            self.note_superseded(e.object_key.clone(), refs, false);
        }
    }

    /// Whether `r`'s partition is served anything from object `key` at or after `r`'s offset.
    pub(super) async fn references(&self, key: &str, r: ObjectRef) -> Result<bool> {
        let tp = r.topic_partition;
        // The object's range for the partition starts at `r.offset`; what is served from it
        // may be clipped to start later (see `oxbow_metadata::catalog_view`), behind a few
        // entries of other objects that outrank it at the front.
        let entries = self
            .log
            .metadata
            .catalog_entries(tp.topic_id, tp.partition, r.offset, REFERENCE_LOOKAHEAD)
            .await?;
        Ok(entries.iter().any(|e| e.object_key == key))
    }

    /// Learns candidates' references, looks them up, and deletes objects unreferenced for
    /// `delete_delay` by `now`. Returns how many were deleted.
    pub async fn collect_garbage(&mut self, now: Instant, stop: &CancellationToken) -> Result<u64> {
        for key in self.ledger.needing_refs(GC_INDEX_READS_MAX) {
            if stop.is_cancelled() {
                return Ok(0);
            }
            match object::fetch_index(self.log.objects.as_ref(), &key).await {
                Ok(rows) => {
                    let refs = rows
                        .iter()
                        .map(|row| ObjectRef {
                            topic_partition: row.topic_partition(),
                            offset: row.base_offset,
                        })
                        .collect();
                    self.ledger.set_refs(&key, refs);
                }
                Err(object::FetchIndexError::Store(object_store::Error::NotFound { .. })) => {
                    self.ledger.forget(&key);
                }
                Err(object::FetchIndexError::Object(e)) => {
                    // Without its index no one can tell who references it: keep it.
                    tracing::error!(%key, error = %e, "superseded object has no readable index; leaving it");
                    self.ledger.forget(&key);
                }
                Err(object::FetchIndexError::Store(e)) => {
                    tracing::debug!(%key, error = %e, "reading a superseded object's index failed; retried next round");
                }
            }
        }
        // One catalog read per partition settles every pending reference into it.
        let mut by_partition: BTreeMap<TopicPartition, Vec<(String, ObjectRef)>> = BTreeMap::new();
        for (key, r) in self.ledger.lookups(GC_REFS_MAX) {
            by_partition
                .entry(r.topic_partition)
                .or_default()
                .push((key, r));
        }
        for (tp, refs) in by_partition.into_iter().take(GC_CATALOG_READS_MAX) {
            if stop.is_cancelled() {
                break;
            }
            let from = refs.iter().map(|(_, r)| r.offset).min().unwrap_or(0);
            let entries = self
                .log
                .metadata
                .catalog_entries(tp.topic_id, tp.partition, from, GC_CATALOG_PAGE)
                .await?;
            let complete = entries.len() < GC_CATALOG_PAGE;
            let end = entries.last().map(|e| e.last_offset);
            for (key, r) in refs {
                let holder = entries
                    .iter()
                    .find(|e| e.base_offset <= r.offset && r.offset <= e.last_offset);
                let gone = match holder {
                    Some(e) => e.object_key != key,
                    // Past this page: unknown until a later round reads further.
                    None if !complete && end.is_some_and(|end| r.offset > end) => false,
                    // Not in the catalog at all (retention, a deleted topic).
                    None => true,
                };
                if gone {
                    self.ledger.unreferenced(&key, r, now);
                }
            }
        }
        let mut deleted = 0;
        for due in self.ledger.due(now, self.settings.delete_delay) {
            let mut referenced = false;
            for r in &due.recheck {
                referenced |= self.references(&due.key, *r).await?;
            }
            if referenced {
                // A replace whose outcome was unknown did land: the object is live.
                self.ledger.forget(&due.key);
                continue;
            }
            let path = ObjectPath::from(due.key.as_str());
            match self.log.objects.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                    self.ledger.forget(&due.key);
                    deleted += 1;
                    self.metrics.objects_deleted.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(key = %due.key, "deleted superseded object");
                }
                Err(e) => {
                    tracing::warn!(key = %due.key, error = %e, "deleting a superseded object failed; retried next round");
                }
            }
        }
        Ok(deleted)
    }
}
