//! Tiered read cache in front of object storage: byte ranges of sealed objects, keyed by
//! object key and range, weighted by size.
//!
//! Lifecycle: one [`ReadCache`] per broker, created at start; readers look a range up before
//! a ranged GET and insert what they fetched. Objects are immutable (create-only), so an
//! entry never goes stale: eviction is the only removal.
//!
//! Two pools, so a reader scanning cold data cannot evict what the tail's readers need
//! (issue 17):
//! - *recent*: what the sealer just uploaded ([`ReadCache::insert_recent`]), for readers a
//!   little behind a partition's in-memory tail. Three quarters of the memory, and the
//!   local disk tier when there is one (`--cache-dir`): foyer's hybrid cache writes what
//!   memory evicts to disk, so a reader minutes behind reads a local file instead of S3.
//! - *scanned*: what readers fetched on a miss and what read-ahead prefetched
//!   ([`ReadCache::insert_scanned`]): a quarter of the memory, LRU. Not S3-FIFO, as it was
//!   at first: S3-FIFO admits a new range into a small queue (a tenth of a shard) and
//!   evicts it unread when more arrive before it is read — which is what a prefetch is
//!   (a window of 8 MiB spread over shards of 16 MiB overflowed it). Scans can only evict
//!   each other here; *recent* is a pool of its own.
//!
//! A range read back from the disk tier is reported as such ([`Hit::from_disk`]): the
//! caller checks it against its catalogue checksum, as it checks a GET (the disk is not
//! trusted more than the network).

use bytes::Bytes;
use foyer::DeviceBuilder;
use std::path::Path;

/// Share of the memory the *scanned* pool gets (the rest is *recent*'s).
const SCANNED_SHARE_DIVISOR: usize = 4;

/// Largest range the disk tier holds (foyer's block size): larger ones stay in memory only.
pub const DISK_BLOCK_BYTES: usize = 16 << 20;

/// Least memory per shard of a pool (foyer spreads a pool over shards, each evicting on
/// its own): a pool of less than this many bytes times 8 gets fewer shards.
const SHARD_BYTES_MIN: usize = 16 << 20;

/// Shards of a pool of `bytes`: up to foyer's default of 8, each at least
/// [`SHARD_BYTES_MIN`].
fn shards_for(bytes: usize) -> usize {
    (bytes / SHARD_BYTES_MIN).clamp(1, 8)
}

/// Largest range a pool of `bytes` takes: half a shard. A shard holds a larger range
/// however small it is (it evicts everything else and keeps the range), so every shard
/// could sit above its share at once and the pool over its budget (seen: a 128 MiB cache
/// holding 248 MiB of a lagging sealer's large chunks). A range past it is not cached:
/// its readers GET it.
fn entry_max_for(bytes: usize) -> usize {
    bytes / shards_for(bytes) / 2
}

/// A cached range, and whether it came from the local disk tier.
#[derive(Clone, Debug)]
pub struct Hit {
    pub bytes: Bytes,
    pub from_disk: bool,
}

/// Why the disk tier could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("read cache disk tier at {dir}: {source}")]
pub struct OpenError {
    dir: String,
    source: foyer::Error,
}

#[derive(Clone)]
enum Recent {
    Memory(foyer::Cache<String, Bytes>),
    Hybrid(foyer::HybridCache<String, Bytes>),
}

/// Cache of object byte ranges.
#[derive(Clone)]
pub struct ReadCache {
    recent: Recent,
    scanned: foyer::Cache<String, Bytes>,
    /// Largest range each pool takes in memory ([`entry_max_for`]).
    recent_entry_max: usize,
    scanned_entry_max: usize,
    /// The disk tier's directory, if there is one.
    dir: Option<std::sync::Arc<std::path::PathBuf>>,
}

fn memory_pool(
    bytes: usize,
    eviction: impl Into<foyer::EvictionConfig>,
) -> foyer::Cache<String, Bytes> {
    foyer::CacheBuilder::new(bytes.max(1))
        .with_shards(shards_for(bytes))
        .with_eviction_config(eviction)
        .with_weighter(|k: &String, v: &Bytes| k.len() + v.len())
        .build()
}

impl ReadCache {
    /// A memory-only cache holding at most `capacity_bytes` of data. More memory means
    /// fewer GETs (each costs latency and money); a broker's recent batches are held
    /// elsewhere, so this mainly serves readers that are behind the tail.
    pub fn new(capacity_bytes: usize) -> Self {
        let scanned = capacity_bytes / SCANNED_SHARE_DIVISOR;
        ReadCache {
            recent: Recent::Memory(memory_pool(
                capacity_bytes - scanned,
                foyer::S3FifoConfig::default(),
            )),
            scanned: memory_pool(scanned, foyer::LruConfig::default()),
            recent_entry_max: entry_max_for(capacity_bytes - scanned),
            scanned_entry_max: entry_max_for(scanned),
            dir: None,
        }
    }

    /// A cache with `memory_bytes` of memory and a disk tier of `disk_bytes` in `dir`
    /// (created if missing; what an earlier run left there is reused: objects never
    /// change, and every range read back is checked by the caller).
    pub async fn with_disk(
        memory_bytes: usize,
        dir: &Path,
        disk_bytes: u64,
    ) -> Result<Self, OpenError> {
        let err = |source| OpenError {
            dir: dir.display().to_string(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(|e| err(foyer::Error::io_error(e)))?;
        let scanned = memory_bytes / SCANNED_SHARE_DIVISOR;
        let device = foyer::FsDeviceBuilder::new(dir)
            .with_capacity(usize::try_from(disk_bytes).unwrap_or(usize::MAX))
            .build()
            .map_err(err)?;
        let hybrid = foyer::HybridCacheBuilder::new()
            .with_name("oxbow-read-cache")
            .with_policy(foyer::HybridCachePolicy::WriteOnEviction)
            .memory((memory_bytes - scanned).max(1))
            .with_shards(shards_for(memory_bytes - scanned))
            .with_eviction_config(foyer::S3FifoConfig::default())
            .with_weighter(|k: &String, v: &Bytes| k.len() + v.len())
            .storage()
            .with_io_engine_config(foyer::PsyncIoEngineConfig::new())
            .with_engine_config(
                foyer::BlockEngineConfig::new(device).with_block_size(DISK_BLOCK_BYTES),
            )
            .with_recover_mode(foyer::RecoverMode::Quiet)
            .build()
            .await
            .map_err(err)?;
        Ok(ReadCache {
            recent: Recent::Hybrid(hybrid),
            scanned: memory_pool(scanned, foyer::LruConfig::default()),
            recent_entry_max: entry_max_for(memory_bytes - scanned),
            scanned_entry_max: entry_max_for(scanned),
            dir: Some(std::sync::Arc::new(dir.to_path_buf())),
        })
    }

    fn key(object_key: &str, start: u64, len: u64) -> String {
        format!("{object_key}@{start}+{len}")
    }

    /// The cached bytes of `object_key[start..start+len]`, if present (a failed disk read
    /// is a miss).
    pub async fn get(&self, object_key: &str, start: u64, len: u64) -> Option<Hit> {
        let key = Self::key(object_key, start, len);
        if let Some(e) = self.scanned.get(&key) {
            return Some(Hit {
                bytes: e.value().clone(),
                from_disk: false,
            });
        }
        match &self.recent {
            Recent::Memory(m) => m.get(&key).map(|e| Hit {
                bytes: e.value().clone(),
                from_disk: false,
            }),
            Recent::Hybrid(h) => {
                let in_memory = h.memory().contains(&key);
                match h.get(&key).await {
                    Ok(found) => found.map(|e| Hit {
                        bytes: e.value().clone(),
                        from_disk: !in_memory,
                    }),
                    Err(e) => {
                        tracing::debug!(error = %e, "read cache disk tier read failed; a miss");
                        None
                    }
                }
            }
        }
    }

    /// Whether the range is cached in either pool (memory, or the disk tier's index).
    pub fn contains(&self, object_key: &str, start: u64, len: u64) -> bool {
        let key = Self::key(object_key, start, len);
        self.scanned.contains(&key)
            || match &self.recent {
                Recent::Memory(m) => m.contains(&key),
                Recent::Hybrid(h) => h.contains(&key),
            }
    }

    /// Caches `object_key[start..start+len]` just sealed, for readers near the tail.
    pub fn insert_recent(&self, object_key: &str, start: u64, len: u64, bytes: Bytes) {
        if bytes.len() > self.recent_entry_max {
            return;
        }
        let key = Self::key(object_key, start, len);
        match &self.recent {
            Recent::Memory(m) => {
                m.insert(key, bytes);
            }
            Recent::Hybrid(h) => {
                h.insert(key, bytes);
            }
        }
    }

    /// Caches `object_key[start..start+len]` fetched by a reader (or read-ahead) on a miss.
    pub fn insert_scanned(&self, object_key: &str, start: u64, len: u64, bytes: Bytes) {
        if bytes.len() > self.scanned_entry_max {
            return;
        }
        self.scanned
            .insert(Self::key(object_key, start, len), bytes);
    }

    /// Whether the *scanned* pool takes a range of `len` bytes ([`entry_max_for`]): what
    /// it would refuse is not worth prefetching.
    pub fn scanned_takes(&self, len: u64) -> bool {
        usize::try_from(len).is_ok_and(|len| len <= self.scanned_entry_max)
    }

    /// The largest range the *scanned* pool takes.
    pub fn scanned_entry_max_bytes(&self) -> usize {
        self.scanned_entry_max
    }

    /// The memory of the *scanned* pool (a quarter of the cache's): what read-ahead may
    /// fill for all readers together before it evicts its own prefetches.
    pub fn scanned_capacity_bytes(&self) -> usize {
        self.scanned.capacity()
    }

    /// Bytes currently held in memory (both pools).
    pub fn usage_bytes(&self) -> usize {
        self.scanned.usage()
            + match &self.recent {
                Recent::Memory(m) => m.usage(),
                Recent::Hybrid(h) => h.memory().usage(),
            }
    }

    /// The disk tier's directory, if there is one.
    pub fn disk_dir(&self) -> Option<&Path> {
        self.dir.as_deref().map(|d| d.as_path())
    }

    /// Whether there is a disk tier.
    pub fn has_disk(&self) -> bool {
        matches!(&self.recent, Recent::Hybrid(h) if h.is_hybrid())
    }

    /// Flushes and closes the disk tier (at shutdown).
    pub async fn close(&self) {
        if let Recent::Hybrid(h) = &self.recent {
            if let Err(e) = h.close().await {
                tracing::warn!(error = %e, "closing the read cache's disk tier failed");
            }
        }
    }
}

#[cfg(test)]
mod tests;
