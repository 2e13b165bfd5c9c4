//! The sweep that deletes objects nothing will ever read: what a crash leaked (between a
//! PUT and its catalog commit, or between a compaction swap and its deletes, whose
//! in-memory deletion ledger died with the process) and the objects of deleted topics. The
//! per-seal and per-swap deletions ([`crate::seal`], [`crate::compact`]) handle the normal
//! path; this finds what they could not.
//!
//! One sweep lists a bounded page of `data/` and `segments/` from where the last one
//! stopped (a cursor, so a large bucket is covered over several sweeps), takes the objects
//! older than the grace period as candidates, asks the metadata service which of them no
//! catalog key names ([`oxbow_metadata::MetadataStore::unreferenced_objects`]: memory first,
//! the store itself for the rest) and deletes those.
//!
//! Safety: an object is catalogued within seconds of its PUT (a seal commits right after,
//! and the compactor never commits a swap whose segment is older than
//! [`crate::compact::SWAP_AGE_MAX`]), so an object older than the grace period that nothing
//! names will never be named: deleting it loses nothing a reader could be sent to. The grace
//! period must stay well above those bounds (the default, an hour, is).

use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use oxbow_metadata::MetadataStore;
use std::time::{Duration, SystemTime};

/// Prefixes swept, in turn.
const PREFIXES: [&str; 2] = ["data/", "segments/"];
/// Objects listed per sweep (pages of the listing; the cursor resumes after the last).
pub const LISTED_PER_SWEEP: usize = 50_000;
/// Candidates checked against the catalogue per sweep.
pub const CANDIDATES_PER_SWEEP: usize = 5_000;

/// What one sweep did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepStats {
    pub listed: usize,
    pub candidates: usize,
    pub deleted: usize,
}

/// The sweeper of one broker (the controller runs it), with its place in the listing.
pub struct OrphanSweeper {
    grace: Duration,
    /// Which prefix, and the last key listed under it.
    prefix: usize,
    after: Option<ObjectPath>,
}

impl OrphanSweeper {
    pub fn new(grace: Duration) -> Self {
        OrphanSweeper {
            grace,
            prefix: 0,
            after: None,
        }
    }

    /// One sweep at `now` (see the module docs).
    pub async fn sweep(
        &mut self,
        objects: &dyn ObjectStore,
        metadata: &dyn MetadataStore,
        now: SystemTime,
    ) -> crate::Result<SweepStats> {
        let mut stats = SweepStats::default();
        let cutoff = now
            .checked_sub(self.grace)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut candidates = Vec::new();
        // Each prefix at most once per sweep.
        for _ in 0..PREFIXES.len() {
            let prefix = ObjectPath::from(PREFIXES[self.prefix]);
            let mut listing = match &self.after {
                Some(after) => objects.list_with_offset(Some(&prefix), after),
                None => objects.list(Some(&prefix)),
            };
            let mut finished = true;
            while let Some(meta) = listing.next().await {
                let meta =
                    meta.map_err(|e| crate::Error::ObjectStore(format!("LIST {prefix}: {e}")))?;
                stats.listed += 1;
                let modified: SystemTime = meta.last_modified.into();
                if modified < cutoff {
                    candidates.push(meta.location.to_string());
                }
                self.after = Some(meta.location);
                if stats.listed >= LISTED_PER_SWEEP || candidates.len() >= CANDIDATES_PER_SWEEP {
                    finished = false;
                    break;
                }
            }
            if !finished {
                break;
            }
            self.prefix = (self.prefix + 1) % PREFIXES.len();
            self.after = None;
        }
        stats.candidates = candidates.len();
        if candidates.is_empty() {
            return Ok(stats);
        }
        let gone = metadata.unreferenced_objects(candidates).await?;
        for key in gone {
            match objects.delete(&ObjectPath::from(key.as_str())).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                    stats.deleted += 1;
                    tracing::info!(%key, "deleted an object no catalog entry names");
                }
                Err(e) => {
                    tracing::warn!(%key, error = %e, "deleting an unreferenced object failed; the next sweep retries")
                }
            }
        }
        Ok(stats)
    }
}
