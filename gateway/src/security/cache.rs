//! Every broker's current copy of the security keyspace (ACL bindings, SCRAM credentials,
//! client quotas): listed at start, kept current by one watch, re-listed when the watch
//! ends and every [`crate::cluster::controller::RECONCILE_EVERY`].
//!
//! Readers never touch the metadata service on a request's path: they read the copy, or
//! a view derived from it (the ACL index, the quota table) which they rebuild when
//! [`SecurityCache::generation`] moves. A write made through this broker is applied to
//! the copy at once ([`SecurityCache::apply`]), so the admin who made it sees it on the
//! next request; other brokers see it when their watch delivers it (milliseconds), as
//! Kafka's brokers see an ACL change when their metadata log does.

use crate::cluster::watch_loop::{follow, Followed};
use oxbow_metadata::{MetadataStore, SecurityEvent, SecurityKind, SecurityRecord, Watch};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use tokio_util::sync::CancellationToken;

/// The cached records, by kind and name.
#[derive(Default)]
pub struct SecurityCache {
    records: RwLock<BTreeMap<(SecurityKind, String), SecurityRecord>>,
    /// Moves on every change: derived views compare it to the one they were built at.
    generation: AtomicU64,
    /// Whether the first listing has landed (before it, the copy is empty, not "no ACLs").
    loaded: std::sync::atomic::AtomicBool,
}

impl SecurityCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// A cache loaded from the store now (the broker's start: the first request is
    /// checked against the cluster's ACLs, never against an empty copy).
    pub async fn load(metadata: &dyn MetadataStore) -> oxbow_metadata::Result<Self> {
        let cache = Self::new();
        cache.replace(list_all(metadata).await?);
        Ok(cache)
    }

    /// Changes whenever a record is added, replaced or removed.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether the copy reflects the store (it was listed at least once).
    pub fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// One record.
    pub fn get(&self, kind: SecurityKind, name: &str) -> Option<SecurityRecord> {
        let records = self.records.read().unwrap_or_else(|p| p.into_inner());
        records.get(&(kind, name.to_string())).cloned()
    }

    /// Every record of a kind, by name.
    pub fn records(&self, kind: SecurityKind) -> Vec<SecurityRecord> {
        let records = self.records.read().unwrap_or_else(|p| p.into_inner());
        records
            .range((kind, String::new())..)
            .take_while(|((k, _), _)| *k == kind)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// The first `n` records of a kind, by name (a sample, without copying them all).
    pub fn first_records(&self, kind: SecurityKind, n: usize) -> Vec<SecurityRecord> {
        let records = self.records.read().unwrap_or_else(|p| p.into_inner());
        records
            .range((kind, String::new())..)
            .take_while(|((k, _), _)| *k == kind)
            .take(n)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// Applies one change (from the watch, or a write this broker just made). A record
    /// older than the one held is ignored, so a late watch event cannot undo a newer
    /// write applied locally.
    pub fn apply(&self, event: SecurityEvent) {
        let mut records = self.records.write().unwrap_or_else(|p| p.into_inner());
        let changed = match event {
            SecurityEvent::Put(r) => {
                let key = (r.kind, r.name.clone());
                match records.get(&key) {
                    Some(held) if held.version >= r.version => false,
                    _ => {
                        records.insert(key, r);
                        true
                    }
                }
            }
            SecurityEvent::Deleted { kind, name } => records.remove(&(kind, name)).is_some(),
        };
        if changed {
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Replaces the whole copy with a fresh listing.
    pub fn replace(&self, listed: Vec<SecurityRecord>) {
        let fresh: BTreeMap<_, _> = listed
            .into_iter()
            .map(|r| ((r.kind, r.name.clone()), r))
            .collect();
        let mut records = self.records.write().unwrap_or_else(|p| p.into_inner());
        if *records != fresh {
            *records = fresh;
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        self.loaded.store(true, Ordering::Release);
    }
}

async fn list_all(metadata: &dyn MetadataStore) -> oxbow_metadata::Result<Vec<SecurityRecord>> {
    let mut all = Vec::new();
    for kind in SecurityKind::ALL {
        all.extend(metadata.security_records(kind).await?);
    }
    Ok(all)
}

/// Keeps `cache` current until `shutdown` (the loop of [`crate::cluster::watch_loop`]).
pub async fn run_security_follower(
    metadata: Arc<dyn MetadataStore>,
    cache: Arc<SecurityCache>,
    view: Arc<crate::cluster::ClusterView>,
    shutdown: CancellationToken,
) {
    let followed = SecurityFollower {
        metadata,
        cache,
        view,
    };
    follow(&followed, &shutdown).await
}

struct SecurityFollower {
    metadata: Arc<dyn MetadataStore>,
    cache: Arc<SecurityCache>,
    /// Where the watch's queue is reported.
    view: Arc<crate::cluster::ClusterView>,
}

impl Followed for SecurityFollower {
    type Event = SecurityEvent;
    const WHAT: &'static str = "security records";
    const METRIC: &'static str = "security";

    fn metrics(&self) -> &crate::cluster::watch_metrics::WatchMetrics {
        &self.view.watch_metrics
    }

    async fn subscribe(&self) -> oxbow_metadata::Result<Watch<SecurityEvent>> {
        self.metadata.watch_security().await
    }

    async fn relist(&self) -> oxbow_metadata::Result<()> {
        self.cache.replace(list_all(self.metadata.as_ref()).await?);
        Ok(())
    }

    fn apply(&self, first: SecurityEvent, _watch: &mut Watch<SecurityEvent>) {
        self.cache.apply(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: SecurityKind, name: &str, version: i64) -> SecurityRecord {
        SecurityRecord {
            kind,
            name: name.to_string(),
            value: version.to_be_bytes().to_vec(),
            version,
        }
    }

    #[test]
    fn a_late_event_never_undoes_a_newer_record() {
        let cache = SecurityCache::new();
        let g0 = cache.generation();
        cache.apply(SecurityEvent::Put(record(SecurityKind::Acl, "t", 5)));
        assert!(cache.generation() > g0);
        let g1 = cache.generation();
        cache.apply(SecurityEvent::Put(record(SecurityKind::Acl, "t", 3)));
        assert_eq!(cache.generation(), g1, "an older version changes nothing");
        assert_eq!(
            cache.get(SecurityKind::Acl, "t").map(|r| r.version),
            Some(5)
        );
        cache.apply(SecurityEvent::Deleted {
            kind: SecurityKind::Acl,
            name: "t".into(),
        });
        assert!(cache.get(SecurityKind::Acl, "t").is_none());
        assert!(cache.generation() > g1);
    }

    #[test]
    fn records_of_a_kind_come_alone_and_a_same_listing_is_no_change() {
        let cache = SecurityCache::new();
        assert!(!cache.is_loaded());
        let listing = vec![
            record(SecurityKind::Acl, "b", 1),
            record(SecurityKind::ScramCredential, "alice", 2),
            record(SecurityKind::Acl, "a", 3),
            record(SecurityKind::ClientQuota, "q", 4),
        ];
        cache.replace(listing.clone());
        assert!(cache.is_loaded());
        let names: Vec<_> = cache
            .records(SecurityKind::Acl)
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(cache.records(SecurityKind::ScramCredential).len(), 1);
        let first: Vec<_> = cache
            .first_records(SecurityKind::Acl, 1)
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(first, ["a"]);
        let g = cache.generation();
        cache.replace(listing);
        assert_eq!(cache.generation(), g);
    }
}
