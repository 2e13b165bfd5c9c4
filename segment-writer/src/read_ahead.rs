//! Read-ahead for sequential readers of sealed data (issue 17): when a read misses the
//! cache, the ranges that follow it in the same partition — what a catch-up consumer asks
//! for next — are fetched in the background into the cache's *scanned* pool, so its next
//! fetches are hits instead of one GET each, in turn.
//!
//! Bounded: at most [`READ_AHEAD_BYTES`] past each miss, ranges already cached skipped,
//! and at most [`READ_AHEAD_TASKS`] prefetches at once per broker; a miss that finds them
//! all busy prefetches nothing (the reader is not held up, and the store not flooded).
//! Every prefetched range is checked against its catalogue checksum before it is cached;
//! one that fails (or a GET that fails) ends that prefetch, and the reader's own read
//! fetches it again and reports the error.

use crate::object;
use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use oxbow_cache::ReadCache;
use oxbow_metadata::CatalogEntry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Bytes prefetched past one miss, at most.
pub const READ_AHEAD_BYTES: u64 = 8 << 20;

/// Prefetches running at once per broker, at most.
pub const READ_AHEAD_TASKS: usize = 4;

/// The broker's read-ahead: where to fetch from, where to put it, and its bound.
pub struct ReadAhead {
    objects: Arc<dyn ObjectStore>,
    cache: ReadCache,
    tasks: Arc<Semaphore>,
    /// Ranges prefetched and cached.
    pub fetched: Arc<AtomicU64>,
}

impl ReadAhead {
    pub fn new(objects: Arc<dyn ObjectStore>, cache: ReadCache) -> Self {
        ReadAhead {
            objects,
            cache,
            tasks: Arc::new(Semaphore::new(READ_AHEAD_TASKS)),
            fetched: Arc::default(),
        }
    }

    /// A read of the range before `next` missed: prefetch the first of `next` (one
    /// partition's, in offset order) that are not cached, up to [`READ_AHEAD_BYTES`].
    pub fn after_miss(&self, next: impl IntoIterator<Item = CatalogEntry>) {
        let mut budget = READ_AHEAD_BYTES;
        let wanted: Vec<CatalogEntry> = next
            .into_iter()
            .take_while(|e| {
                let fits = e.byte_len <= budget;
                budget = budget.saturating_sub(e.byte_len);
                fits
            })
            .filter(|e| !self.cache.contains(&e.object_key, e.byte_start, e.byte_len))
            .collect();
        if wanted.is_empty() {
            return;
        }
        let Ok(permit) = self.tasks.clone().try_acquire_owned() else {
            return;
        };
        let (objects, cache, fetched) = (
            self.objects.clone(),
            self.cache.clone(),
            self.fetched.clone(),
        );
        tokio::spawn(async move {
            let _permit = permit;
            for e in wanted {
                let path = ObjectPath::from(e.object_key.as_str());
                let bytes: Bytes = match objects
                    .get_range(&path, e.byte_start..e.byte_start + e.byte_len)
                    .await
                {
                    Ok(b) => b,
                    Err(err) => {
                        tracing::debug!(object = %e.object_key, error = %err, "read-ahead GET failed; stopping");
                        return;
                    }
                };
                if object::verify_range(&e, &bytes).is_err() {
                    tracing::debug!(object = %e.object_key, "read-ahead range failed its checksum; stopping");
                    return;
                }
                cache.insert_scanned(&e.object_key, e.byte_start, e.byte_len, bytes);
                fetched.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}
