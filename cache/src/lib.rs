//! Tiered read cache in front of object storage: byte ranges of sealed objects, keyed by
//! object key and range, weighted by size.
//!
//! Lifecycle: one [`ReadCache`] per broker, created at start; readers look a range up before
//! a ranged GET and insert what they fetched. Objects are immutable (create-only), so an
//! entry never goes stale: eviction is the only removal.
//!
//! This first version is foyer's in-memory tier (S3-FIFO eviction keeps one scan by a
//! lagging reader from flushing hot entries). The local-disk tier (foyer's hybrid cache)
//! plugs in behind the same API.

use bytes::Bytes;

/// Cache of object byte ranges.
#[derive(Clone)]
pub struct ReadCache {
    inner: foyer::Cache<String, Bytes>,
}

impl ReadCache {
    /// A cache holding at most `capacity_bytes` of data. More memory means fewer GETs (each
    /// costs latency and money); a broker's recent batches are held elsewhere, so this mainly
    /// serves readers that are behind the tail.
    pub fn new(capacity_bytes: usize) -> Self {
        let inner = foyer::CacheBuilder::new(capacity_bytes.max(1))
            .with_eviction_config(foyer::S3FifoConfig::default())
            .with_weighter(|k: &String, v: &Bytes| k.len() + v.len())
            .build();
        ReadCache { inner }
    }

    fn key(object_key: &str, start: u64, len: u64) -> String {
        format!("{object_key}@{start}+{len}")
    }

    /// The cached bytes of `object_key[start..start+len]`, if present.
    pub fn get(&self, object_key: &str, start: u64, len: u64) -> Option<Bytes> {
        self.inner
            .get(&Self::key(object_key, start, len))
            .map(|e| e.value().clone())
    }

    /// Caches `object_key[start..start+len]`.
    pub fn insert(&self, object_key: &str, start: u64, len: u64, bytes: Bytes) {
        self.inner.insert(Self::key(object_key, start, len), bytes);
    }

    /// Bytes currently held.
    pub fn usage_bytes(&self) -> usize {
        self.inner.usage()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hit_miss_and_bounded_size() {
        let c = ReadCache::new(10_000);
        assert!(c.get("a", 0, 3).is_none());
        c.insert("a", 0, 3, Bytes::from_static(b"abc"));
        assert_eq!(c.get("a", 0, 3).as_deref(), Some(&b"abc"[..]));
        assert!(c.get("a", 1, 3).is_none(), "ranges are distinct keys");
        for i in 0..100 {
            c.insert(&format!("k{i}"), 0, 1000, Bytes::from(vec![0u8; 1000]));
        }
        assert!(c.usage_bytes() <= 12_000, "usage {}", c.usage_bytes());
    }
}
