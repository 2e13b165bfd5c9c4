//! The sealer: turns what every partition holds durably in the WAL into one object in the
//! object store, catalogues it, then trims the WAL (design brief → Write path, step 5).
//!
//! Lifecycle: one task per broker ([`run_sealer`]); it wakes every `flush_interval`, or
//! early once `flush_bytes` of unsealed data is held, and once more on shutdown so a clean
//! stop leaves nothing in the WAL. A failed upload or catalog commit leaves everything in
//! place (memory and WAL) and is retried on the next tick; nothing is trimmed before its
//! catalog commit succeeded.

use crate::error::{Error, Result};
use crate::log::LogManager;
use crate::object::{self, Chunk};
use object_store::path::Path as ObjectPath;
use object_store::{PutMode, PutOptions, PutPayload};
use oxbow_metadata::{CatalogCommit, EpochFence, ErrorKind as MetadataErrorKind};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Runs the sealer until `shutdown`, then seals one last time.
pub async fn run_sealer(log: Arc<LogManager>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(log.settings.flush_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
            _ = log.seal_wanted.notified() => {}
        }
        if let Err(e) = log.seal_once().await {
            tracing::warn!(error = %e, "sealing failed; data stays in the WAL and is retried");
        }
    }
    // Drain: everything durable goes to the object store before the broker exits.
    for attempt in 1..=3 {
        match log.seal_once().await {
            Ok(_) => break,
            Err(e) => {
                tracing::warn!(error = %e, attempt, "final seal failed; the WAL keeps the data for the next start");
            }
        }
    }
}

impl LogManager {
    /// Seals everything durable and unsealed into one object. Returns the bytes sealed.
    pub async fn seal_once(&self) -> Result<u64> {
        let durable_sequence = self.wal.durable_sequence();
        let mut chunks = Vec::new();
        let mut fences = Vec::new();
        for p in self.open_partitions() {
            let s = p.lock()?;
            let batches = s.unsealed();
            let (Some(first), Some(last)) = (batches.first(), batches.last()) else {
                continue;
            };
            fences.push(EpochFence {
                topic_partition: p.topic_partition,
                leader_epoch: s.leader_epoch,
            });
            chunks.push(Chunk {
                topic_partition: p.topic_partition,
                leader_epoch: s.leader_epoch,
                base_offset: first.base_offset,
                last_offset: last.last_offset,
                max_timestamp_ms: batches
                    .iter()
                    .map(|b| b.max_timestamp_ms)
                    .max()
                    .unwrap_or(-1),
                batches: batches.into_iter().map(|b| b.bytes).collect(),
            });
        }
        if chunks.is_empty() {
            self.trim_wal(durable_sequence)?;
            return Ok(0);
        }
        let seq = self.seal_sequence.fetch_add(1, Ordering::AcqRel);
        let key = format!(
            "data/b{}/{seq:020}-{}.oxb",
            self.settings.broker_id,
            uuid::Uuid::new_v4().simple()
        );
        let sealed = object::build(key, self.settings.broker_id, &chunks);
        let size = sealed.body.len() as u64;
        let path = ObjectPath::from(sealed.key.as_str());
        let put = self
            .objects
            .put_opts(
                &path,
                PutPayload::from_bytes(sealed.body.clone()),
                PutOptions {
                    // Create-only: a zombie writer can never overwrite a catalogued object.
                    mode: PutMode::Create,
                    ..Default::default()
                },
            )
            .await;
        if let Err(e) = put {
            self.metrics.upload_failures.fetch_add(1, Ordering::Relaxed);
            return Err(Error::ObjectStore(format!("PUT {}: {e}", sealed.key)));
        }
        // The bytes we just wrote are the likeliest next reads by lagging consumers.
        for e in &sealed.entries {
            let range = e.byte_start as usize..(e.byte_start + e.byte_len) as usize;
            self.cache.insert(
                &e.object_key,
                e.byte_start,
                e.byte_len,
                sealed.body.slice(range),
            );
        }
        let commit = CatalogCommit {
            entries: sealed.entries.clone(),
            fences,
        };
        if let Err(e) = self.metadata.commit_catalog(commit).await {
            self.metrics.upload_failures.fetch_add(1, Ordering::Relaxed);
            if e.kind() == MetadataErrorKind::Fenced {
                // Another broker leads one of these partitions now: stop serving them all;
                // the new leader recovers their tail.
                tracing::error!(error = %e, "fenced while sealing; dropping partitions of this object");
                self.forget_where(|tp| chunks.iter().any(|c| c.topic_partition == *tp));
            }
            return Err(Error::Metadata(e));
        }
        for c in &chunks {
            if let Some(p) = self.get(&c.topic_partition) {
                let mut s = p.lock()?;
                let before = s.unsealed_bytes();
                s.mark_sealed(c.last_offset);
                s.evict(self.settings.partition_tail_bytes);
                let sealed_bytes = (before - s.unsealed_bytes()) as u64;
                self.unsealed_bytes
                    .fetch_sub(sealed_bytes, Ordering::AcqRel);
            }
        }
        self.metrics
            .objects_uploaded
            .fetch_add(1, Ordering::Relaxed);
        self.metrics
            .object_bytes_uploaded
            .fetch_add(size, Ordering::Relaxed);
        tracing::debug!(key = %sealed.key, bytes = size, partitions = chunks.len(), "sealed object");
        self.trim_wal(durable_sequence)?;
        Ok(size)
    }

    fn trim_wal(&self, durable_sequence: u64) -> Result<()> {
        let keep_from = self
            .open_partitions()
            .iter()
            .filter_map(|p| p.lock().ok()?.min_unsealed_wal_sequence())
            .min()
            .unwrap_or(durable_sequence)
            .min(durable_sequence);
        self.wal.trim(keep_from)
    }
}
