//! Reads: from the partition's in-memory tail when it holds the offset, else from sealed
//! objects through the read cache (design brief → Read path).

use crate::batch;
use crate::error::{Error, Result};
use crate::log::{LogManager, Partition};
use crate::object;
use crate::partition::ReadPlan;
use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStoreExt;
use oxbow_metadata::{CatalogEntry, Offset};
use std::sync::atomic::Ordering;

/// Catalog entries fetched per lookup when reading from objects.
const CATALOG_ENTRIES_PER_READ: usize = 16;

/// What a read returns.
#[derive(Clone, Debug, Default)]
pub struct ReadResult {
    /// Whole record batches, in offset order; the first may start before the asked offset
    /// (clients skip records below it, as with Kafka).
    pub batches: Vec<Bytes>,
    pub log_start_offset: Offset,
    pub high_watermark: Offset,
}

impl ReadResult {
    pub fn bytes(&self) -> usize {
        self.batches.iter().map(|b| b.len()).sum()
    }
}

impl LogManager {
    /// Reads up to `max_bytes` of whole batches at `offset` (at least one if `min_one`).
    pub async fn read(
        &self,
        partition: &Partition,
        offset: Offset,
        max_bytes: usize,
        min_one: bool,
    ) -> Result<ReadResult> {
        let (plan, log_start_offset, high_watermark, sealed_end) = {
            let s = partition.lock()?;
            (
                s.plan_read(offset, max_bytes, min_one)?,
                s.log_start_offset,
                s.high_watermark,
                s.sealed_end,
            )
        };
        let batches = match plan {
            ReadPlan::Memory(b) => b,
            ReadPlan::Objects => {
                let mut out = Vec::new();
                let mut total = 0usize;
                let mut next = offset;
                'entries: while next < sealed_end && total < max_bytes {
                    let entries = self
                        .metadata
                        .catalog_entries(
                            partition.topic_partition.topic_id,
                            partition.topic_partition.partition,
                            next,
                            CATALOG_ENTRIES_PER_READ,
                        )
                        .await?;
                    if entries.is_empty() {
                        break;
                    }
                    for entry in entries {
                        let range = self.read_entry(&entry).await?;
                        for (h, b) in batch::iter_batches(&range) {
                            if h.last_offset() < next {
                                continue;
                            }
                            if total + b.len() > max_bytes && !(min_one && out.is_empty()) {
                                break 'entries;
                            }
                            total += b.len();
                            next = h.last_offset() + 1;
                            out.push(b);
                        }
                        if next <= entry.last_offset {
                            return Err(Error::Internal(format!(
                                "object {} ends before offset {} its catalog entry promises",
                                entry.object_key, entry.last_offset
                            )));
                        }
                    }
                }
                if total < max_bytes && next >= sealed_end {
                    let s = partition.lock()?;
                    for b in s.read_memory_from(next, max_bytes - total) {
                        out.push(b);
                    }
                }
                out
            }
        };
        Ok(ReadResult {
            batches,
            log_start_offset,
            high_watermark,
        })
    }

    /// The bytes of one catalog entry, from the cache or a ranged GET, checksum-verified.
    pub(crate) async fn read_entry(&self, entry: &CatalogEntry) -> Result<Bytes> {
        if let Some(b) = self
            .cache
            .get(&entry.object_key, entry.byte_start, entry.byte_len)
        {
            self.metrics.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(b);
        }
        self.metrics.object_reads.fetch_add(1, Ordering::Relaxed);
        let path = ObjectPath::from(entry.object_key.as_str());
        let bytes = self
            .objects
            .get_range(&path, entry.byte_start..entry.byte_start + entry.byte_len)
            .await
            .map_err(|e| Error::ObjectStore(format!("GET {}: {e}", entry.object_key)))?;
        if let Err(e) = object::verify_range(entry, &bytes) {
            self.metrics
                .checksum_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::error!(error = %e, "object data failed its checksum; not serving it");
            return Err(e);
        }
        self.cache.insert(
            &entry.object_key,
            entry.byte_start,
            entry.byte_len,
            bytes.clone(),
        );
        Ok(bytes)
    }

    /// The first batch (below the high watermark) whose max timestamp is at or after
    /// `timestamp_ms`; the caller finds the exact record inside it.
    pub async fn find_batch_by_timestamp(
        &self,
        partition: &Partition,
        timestamp_ms: i64,
    ) -> Result<Option<Bytes>> {
        let tp = partition.topic_partition;
        if let Some(entry) = self
            .metadata
            .catalog_find_timestamp(tp.topic_id, tp.partition, timestamp_ms)
            .await?
        {
            let log_start = partition.lock()?.log_start_offset;
            let range = self.read_entry(&entry).await?;
            let found = batch::iter_batches(&range)
                .find(|(h, _)| h.max_timestamp >= timestamp_ms && h.last_offset() >= log_start)
                .map(|(_, b)| b);
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(partition.lock()?.find_timestamp_in_memory(timestamp_ms))
    }
}
