//! Rewriting a run of catalog entries into one segment: reading the entries' batches
//! (cache, else a ranged GET checked against the entry's CRC), building the segment with
//! its producers section, and its create-only PUT. The swap into the catalog is
//! `swap.rs`'s.

use super::*;

impl Compactor {
    /// Rewrites `old` (contiguous entries of one epoch) into one segment and PUTs it; its
    /// swap into the catalog is committed with others ([`Self::commit_swaps`]).
    pub(super) async fn write_segment(
        &mut self,
        tp: TopicPartition,
        leader_epoch: i32,
        old: &[CatalogEntry],
        stats: &mut RoundStats,
    ) -> Result<Option<Swap>> {
        let Some(first) = old.first() else {
            return Ok(None);
        };
        let bytes: u64 = old.iter().map(segment::data_bytes).sum();
        let mut builder = SegmentBuilder::new(
            tp,
            first.leader_epoch,
            self.settings.index_interval_bytes,
            usize::try_from(bytes).unwrap_or(0),
        );
        // Segments may hold key-compacted data, with offsets missing between batches.
        if old.iter().any(|e| e.layout == EntryLayout::SegmentIndex) {
            builder = builder.with_gaps_from(first.base_offset);
        }
        let mut run = RunProducers::default();
        for e in old {
            let pushed = self
                .visit_entry(e, stats, |h, b| {
                    run.observe(h);
                    builder.push(&b).map(|()| true)
                })
                .await;
            if let Err(err) = pushed {
                self.freeze_if_corrupt(tp, e, &err);
                return Err(err);
            }
        }
        self.put_segment(tp, leader_epoch, old, builder, run).await
    }

    /// Never copy (or keep retrying) data that fails its checks: the entry is left where it
    /// is and compacted around.
    pub(super) fn freeze_if_corrupt(&mut self, tp: TopicPartition, e: &CatalogEntry, err: &Error) {
        let corrupt = matches!(
            err.kind(),
            crate::ErrorKind::DataCorruption | crate::ErrorKind::Corrupt
        ) || matches!(
            err,
            Error::InvalidRecord(_) | Error::DecompressedTooLarge { .. }
        );
        if !corrupt {
            return;
        }
        self.metrics
            .checksum_failures
            .fetch_add(1, Ordering::Relaxed);
        if self.frozen.len() < FROZEN_MAX {
            self.frozen.insert((tp, e.base_offset));
        }
        tracing::error!(partition = %tp, base_offset = e.base_offset, key = %e.object_key, error = %err, "catalogued data failed its checks; not compacting it");
    }

    /// Finishes `builder` (the rewrite of `old`, whose batches' producers are `run`) with
    /// its producers section ([`Self::producers_at_end`]) and PUTs it; its swap is
    /// committed later.
    pub(super) async fn put_segment(
        &mut self,
        tp: TopicPartition,
        leader_epoch: LeaderEpoch,
        old: &[CatalogEntry],
        mut builder: SegmentBuilder,
        run: RunProducers,
    ) -> Result<Option<Swap>> {
        let (Some(first), Some(last)) = (old.first(), old.last()) else {
            return Ok(None);
        };
        if builder.next_offset() != Some(last.next_offset()) {
            return Err(Error::Internal(format!(
                "run {}..={} of {tp} rebuilt up to {:?}",
                first.base_offset,
                last.last_offset,
                builder.next_offset()
            )));
        }
        builder.set_producers(self.producers_at_end(tp, last, run).await);
        let key = segment::segment_key(
            tp,
            first.base_offset,
            first.leader_epoch,
            self.log.rng.uuid(),
        );
        let mut built = builder.finish(key)?;
        // Markers stay at their offsets (key compaction copies transactional and control
        // batches verbatim), so the segment's aborts are its inputs'.
        built.entry.txn = oxbow_metadata::catalog_txn::merged(old);
        let size = built.body.len() as u64;
        let path = ObjectPath::from(built.key.as_str());
        let new_ref = ObjectRef {
            topic_partition: tp,
            offset: first.base_offset,
        };
        let put = self
            .log
            .objects
            .put_opts(
                &path,
                PutPayload::from_bytes(built.body.clone()),
                PutOptions {
                    // Create-only, like sealed objects: nothing ever overwrites a key.
                    mode: PutMode::Create,
                    ..Default::default()
                },
            )
            .await;
        if let Err(e) = put {
            // The PUT may have landed all the same; nothing references the key, so it is
            // deleted after the delay if it exists.
            self.note_superseded(built.key.clone(), Some(vec![new_ref]), false);
            return Err(Error::ObjectStore(format!("PUT {}: {e}", built.key)));
        }
        // The index is what the first reader of the segment fetches.
        let index_range = built.entry.byte_start as usize
            ..(built.entry.byte_start + built.entry.byte_len) as usize;
        Ok(Some(Swap {
            tp,
            leader_epoch,
            old: old.to_vec(),
            // A copy: a slice would keep the whole segment's body alive while it waits.
            index: Bytes::copy_from_slice(&built.body[index_range]),
            entry: built.entry,
            size,
            written_at: tokio::time::Instant::now(),
            keyed: false,
        }))
    }

    /// The producers a segment replacing a run that ends with `last` carries (issue 16):
    /// what a new leader would have learned from `last` (its own, carried and
    /// open-transaction rows, a sealed chunk's or a segment's), the run's own batches
    /// (`run`), and every producer this leader remembers whose newest batch lies within the
    /// run, with the transactions open at its end — merged by
    /// [`producer_summary::segment_rows`]. A source that cannot be had (a section that
    /// cannot be fetched, a partition no longer open) is left out: the others still hold
    /// what the catalogue's entries did.
    pub(super) async fn producers_at_end(
        &self,
        tp: TopicPartition,
        last: &CatalogEntry,
        run: RunProducers,
    ) -> Vec<producer_summary::ProducerBatch> {
        let mut rows: Vec<producer_summary::ProducerBatch> = Vec::new();
        match self
            .log
            .producer_summaries
            .of(&self.log.objects, last)
            .await
        {
            Ok(summary) => {
                rows.extend(summary.of(&tp).iter().filter(|b| {
                    b.base_offset >= last.base_offset && b.base_offset <= last.last_offset
                }));
                rows.extend(
                    summary
                        .carried_of(&tp)
                        .iter()
                        .filter(|b| b.base_offset < last.base_offset),
                );
                rows.extend(summary.open_txns_of(&tp));
            }
            Err(e) => {
                tracing::debug!(partition = %tp, object = %last.object_key, error = %e, "no producer rows of the run's last entry");
            }
        }
        rows.extend(run.into_rows());
        if let Some(p) = self.log.get(&tp) {
            if let Ok(s) = p.lock() {
                rows.extend(s.carried_producers(
                    last.last_offset + 1,
                    producer_summary::SEGMENT_PRODUCERS_MAX * producer_summary::RECENT_PER_PRODUCER,
                ));
                rows.extend(s.open_txns_at(last.last_offset).into_iter().map(
                    |(id, epoch, first)| {
                        producer_summary::ProducerBatch::open_txn(id, epoch, first)
                    },
                ));
            }
        }
        producer_summary::segment_rows(rows, last.last_offset)
    }

    /// Hands the batches of one old entry to `f`, a chunk at a time, checking that they are
    /// exactly the entry's offsets; `f` returns whether to go on. A sealed object's batches
    /// are dense (as produced); a segment's may skip offsets between batches (key
    /// compaction dropped whole batches), never go back, and its chunks still end where
    /// they say.
    pub(super) async fn visit_entry(
        &self,
        e: &CatalogEntry,
        stats: &mut RoundStats,
        mut f: impl FnMut(&batch::BatchHeader, Bytes) -> Result<bool>,
    ) -> Result<()> {
        let gaps = e.layout == EntryLayout::SegmentIndex;
        let chunks = match e.layout {
            EntryLayout::Batches => vec![e.clone()],
            EntryLayout::SegmentIndex => {
                let bytes = self.fetch(e).await?;
                let index = SegmentIndex::decode(&e.object_key, &bytes)?;
                // The entry may be clipped to part of the segment, never more than it.
                if index.base_offset() > e.base_offset || index.last_offset() < e.last_offset {
                    return Err(Error::ChecksumMismatch {
                        key: format!("{} (index does not match its catalog entry)", e.object_key),
                        start: e.byte_start,
                        end: e.byte_start + e.byte_len,
                    });
                }
                (0..index.chunks.len())
                    .filter_map(|i| index.chunk_entry(e, i))
                    .collect()
            }
        };
        // Only the offsets the entry serves go into the segment: an entry may be clipped
        // (see `oxbow_metadata::catalog_view`), its range holding batches before or after.
        let mut next = e.base_offset;
        for c in &chunks {
            if c.last_offset < next {
                continue;
            }
            if next > e.last_offset {
                break;
            }
            let bytes = self.fetch(c).await?;
            stats.bytes_read += bytes.len() as u64;
            let mut whole = true;
            let from = next;
            for (h, b) in batch::iter_batches(&bytes).skip_while(|(h, _)| h.last_offset() < from) {
                if h.base_offset > e.last_offset {
                    break;
                }
                if !(h.base_offset == next || (gaps && h.base_offset > next)) {
                    whole = false;
                    break;
                }
                next = h.last_offset() + 1;
                if !f(&h, b)? {
                    return Ok(());
                }
            }
            // The chunk must hold every offset it promises within the entry's.
            if !whole || next <= c.last_offset.min(e.last_offset) {
                return Err(Error::ChecksumMismatch {
                    key: format!(
                        "{} (range does not hold offsets {}..={} as its catalog entry says)",
                        c.object_key, c.base_offset, c.last_offset
                    ),
                    start: c.byte_start,
                    end: c.byte_start + c.byte_len,
                });
            }
        }
        Ok(())
    }

    /// The bytes of a catalog entry's range: from the read cache if there, else a ranged GET
    /// checked against the entry's CRC (not inserted into the cache: a compaction scan must
    /// not evict what readers use).
    pub(super) async fn fetch(&self, entry: &CatalogEntry) -> Result<Bytes> {
        if let Some(hit) = self
            .log
            .cache
            .get(&entry.object_key, entry.byte_start, entry.byte_len)
            .await
        {
            // The disk tier is checked like the network.
            if !hit.from_disk || object::verify_range(entry, &hit.bytes).is_ok() {
                return Ok(hit.bytes);
            }
        }
        let bytes = self.log.get_entry_range(entry).await?;
        object::verify_range(entry, &bytes)?;
        Ok(bytes)
    }
}
