//! [`LogManager`]: the partitions this broker leads, their appends, reads and recovery.
//!
//! Lifecycle: [`LogManager::open`] opens the WAL and replays every entry not yet in the
//! catalog back into memory (those batches were acknowledged or may have been); the sealer
//! task ([`crate::seal`]) then uploads them like any other. Partitions are opened lazily on
//! first use, after checking with the metadata service that this broker leads them.
//!
//! Append order: an append holds its partition's order lock while it assigns offsets and
//! queues the WAL write, so the WAL holds each partition's batches in offset order. The WAL
//! writer thread marks batches durable (advancing the high watermark) before it publishes
//! its durable sequence, which the sealer relies on when it trims the WAL.

use crate::batch::{self, BatchHeader};
use crate::error::{Error, Result};
use crate::partition::{PartitionLogState, SequenceCheck};
use crate::wal::{Wal, WalEntry, WalSettings};
use object_store::ObjectStore;
use oxbow_cache::ReadCache;
use oxbow_metadata::{
    BrokerId, LeaseGuard, MetadataStore, Offset, PartitionId, TopicId, TopicMetadata,
    TopicPartition,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{oneshot, watch, Notify};

/// Settings of the log (typed; the CLI maps flags onto them).
#[derive(Clone, Debug)]
pub struct LogSettings {
    pub broker_id: BrokerId,
    pub wal: WalSettings,
    /// Seal and upload at least this often. Shorter means less data in the WAL and fresher
    /// objects for other readers, at the cost of more PUTs (each billed) and smaller objects.
    pub flush_interval: Duration,
    /// Seal early once this much unsealed data is held: bounds memory and object size.
    pub flush_bytes: u64,
    /// Recent (already sealed) data kept in memory per partition for tail reads; larger
    /// serves more lagging readers without a GET, at the cost of broker memory.
    pub partition_tail_bytes: usize,
}

/// How long an `acks` producer waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acks {
    /// Answer once the batch is appended locally (queued for the WAL).
    Leader,
    /// Answer once the batch is durable (fsynced; later also replicated).
    All,
}

/// The result of an append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: Offset,
    /// The broker's timestamp for `LogAppendTime` topics, else -1.
    pub log_append_time_ms: i64,
    /// The batch was a retry of one already appended.
    pub duplicate: bool,
}

/// An append whose batch is queued for the WAL; [`PendingAppend::wait`] resolves once it
/// is as durable as the producer's `acks` asked.
pub struct PendingAppend {
    pub appended: Appended,
    durable: Option<oneshot::Receiver<Result<u64>>>,
    /// Checked again once durable: the lease may have lapsed while the batch waited.
    lease: Option<LeaseGuard>,
}

impl PendingAppend {
    /// Waits for durability (for [`Acks::All`]); immediate otherwise. Fails with
    /// [`Error::NotLeader`] if this broker's lease is no longer certainly alive: another
    /// broker may lead the partition by now, so the batch may never be committed.
    pub async fn wait(self) -> Result<Appended> {
        if let Some(rx) = self.durable {
            match rx.await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(Error::ShuttingDown),
            }
        }
        check_lease(self.lease.as_ref())?;
        Ok(self.appended)
    }
}

fn check_lease(lease: Option<&LeaseGuard>) -> Result<()> {
    match lease {
        Some(g) if !g.is_valid() => Err(Error::LeaseExpired),
        _ => Ok(()),
    }
}

/// A partition this broker leads.
pub struct Partition {
    pub topic_partition: TopicPartition,
    pub topic_name: String,
    pub(crate) state: Mutex<PartitionLogState>,
    /// Serializes appends so WAL order matches offset order (held across the WAL enqueue).
    append_order: tokio::sync::Mutex<()>,
    /// Publishes the high watermark, for long-polling fetches.
    high_watermark_tx: watch::Sender<Offset>,
}

impl Partition {
    pub(crate) fn lock(&self) -> Result<std::sync::MutexGuard<'_, PartitionLogState>> {
        self.state
            .lock()
            .map_err(|_| Error::Internal("partition state lock poisoned".into()))
    }

    /// Watches the high watermark (changes when new data becomes visible).
    pub fn subscribe(&self) -> watch::Receiver<Offset> {
        self.high_watermark_tx.subscribe()
    }

    /// (log start offset, high watermark, log end offset).
    pub fn offsets(&self) -> Result<(Offset, Offset, Offset)> {
        let s = self.lock()?;
        Ok((s.log_start_offset, s.high_watermark, s.log_end_offset))
    }

    pub fn leader_epoch(&self) -> Result<i32> {
        Ok(self.lock()?.leader_epoch)
    }

    fn on_durable(&self, base_offset: Offset, wal_sequence: Option<u64>) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        if s.mark_durable(base_offset, wal_sequence) {
            let hw = s.high_watermark;
            drop(s);
            self.high_watermark_tx.send_replace(hw);
        }
    }
}

/// Counters exported on `/metrics`.
#[derive(Default)]
pub struct LogMetrics {
    pub appended_batches: AtomicU64,
    pub appended_bytes: AtomicU64,
    pub appended_records: AtomicU64,
    pub objects_uploaded: AtomicU64,
    pub object_bytes_uploaded: AtomicU64,
    pub upload_failures: AtomicU64,
    pub object_reads: AtomicU64,
    pub cache_hits: AtomicU64,
    pub checksum_failures: AtomicU64,
}

/// The partitions this broker leads, with the WAL, object store and catalog behind them.
pub struct LogManager {
    pub(crate) settings: LogSettings,
    pub(crate) metadata: Arc<dyn MetadataStore>,
    pub(crate) objects: Arc<dyn ObjectStore>,
    pub(crate) cache: ReadCache,
    pub(crate) wal: Wal,
    pub(crate) partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// Wakes the sealer early when enough unsealed data is held.
    pub(crate) seal_wanted: Notify,
    pub(crate) unsealed_bytes: AtomicU64,
    pub(crate) seal_sequence: AtomicU64,
    /// This broker's lease (see [`LogManager::set_lease_guard`]); no guard: never fenced.
    pub(crate) lease: std::sync::OnceLock<LeaseGuard>,
    pub metrics: LogMetrics,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl LogManager {
    /// Opens the WAL and replays every durable entry not yet catalogued.
    pub async fn open(
        settings: LogSettings,
        metadata: Arc<dyn MetadataStore>,
        objects: Arc<dyn ObjectStore>,
        cache: ReadCache,
    ) -> Result<Arc<LogManager>> {
        let (wal, entries) = Wal::open(settings.wal.clone())?;
        let manager = Arc::new(LogManager {
            settings,
            metadata,
            objects,
            cache,
            wal,
            partitions: RwLock::new(HashMap::new()),
            seal_wanted: Notify::new(),
            unsealed_bytes: AtomicU64::new(0),
            seal_sequence: AtomicU64::new(now_ms() as u64),
            lease: std::sync::OnceLock::new(),
            metrics: LogMetrics::default(),
        });
        manager.replay(entries).await?;
        Ok(manager)
    }

    async fn replay(&self, entries: Vec<WalEntry>) -> Result<()> {
        let count = entries.len();
        let mut replayed = 0usize;
        for e in entries {
            let Some(topic) = self
                .metadata
                .topic_by_id(e.topic_partition.topic_id)
                .await?
            else {
                continue; // deleted since: its data goes with it
            };
            let partition = match self.partition(&topic, e.topic_partition.partition).await {
                Ok(p) => p,
                Err(err) => {
                    tracing::warn!(error = %err, "skipping WAL entry of a partition this broker cannot open");
                    continue;
                }
            };
            let Some(h) = batch::peek_header(&e.batch)? else {
                return Err(Error::Internal(format!(
                    "WAL entry {} holds no whole batch",
                    e.sequence
                )));
            };
            let size = e.batch.len() as u64;
            let applied = partition.lock()?.replay(&h, e.batch, e.sequence)?;
            if applied {
                replayed += 1;
                self.unsealed_bytes.fetch_add(size, Ordering::AcqRel);
                let hw = partition.lock()?.high_watermark;
                partition.high_watermark_tx.send_replace(hw);
            }
        }
        if count > 0 {
            tracing::info!(entries = count, replayed, "recovered WAL");
        }
        Ok(())
    }

    pub fn broker_id(&self) -> BrokerId {
        self.settings.broker_id
    }

    /// Ties acknowledgements to this broker's metadata lease: once `guard` is invalid,
    /// appends fail with [`Error::NotLeader`] instead of being acknowledged. Set once,
    /// before serving; later calls are ignored.
    pub fn set_lease_guard(&self, guard: LeaseGuard) {
        let _ = self.lease.set(guard);
    }

    /// The partition if this broker has it open.
    pub fn get(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        self.partitions.read().ok()?.get(tp).cloned()
    }

    /// Opens (or returns) a partition of `topic`, checking that this broker leads it.
    pub async fn partition(
        &self,
        topic: &TopicMetadata,
        partition: PartitionId,
    ) -> Result<Arc<Partition>> {
        let tp = TopicPartition::new(topic.topic_id, partition);
        if let Some(p) = self.get(&tp) {
            return Ok(p);
        }
        // The caller's topic may come from a cache; a partition must open at the epoch the
        // metadata service holds now (it moves when a lease is lost, see `fence.rs`), or its
        // first seal is fenced.
        let fresh = self
            .metadata
            .topic_by_id(topic.topic_id)
            .await?
            .ok_or_else(|| Error::UnknownPartition(format!("{}-{partition}", topic.name)))?;
        let state = fresh
            .partition(partition)
            .ok_or_else(|| Error::UnknownPartition(format!("{}-{partition}", topic.name)))?;
        if state.leader != self.settings.broker_id {
            return Err(Error::NotLeader(format!(
                "{}-{partition} (leader is broker {})",
                topic.name, state.leader
            )));
        }
        let log_end = self
            .metadata
            .catalog_last(topic.topic_id, partition)
            .await?
            .map(|e| e.next_offset())
            .unwrap_or(state.log_start_offset)
            .max(state.log_start_offset);
        let opened = Arc::new(Partition {
            topic_partition: tp,
            topic_name: topic.name.clone(),
            state: Mutex::new(PartitionLogState::new(
                state.leader_epoch,
                state.log_start_offset,
                log_end,
            )),
            append_order: tokio::sync::Mutex::new(()),
            high_watermark_tx: watch::channel(log_end).0,
        });
        let mut map = self
            .partitions
            .write()
            .map_err(|_| Error::Internal("partition map lock poisoned".into()))?;
        Ok(map.entry(tp).or_insert(opened).clone())
    }

    /// Forgets every partition of a deleted topic.
    pub fn drop_topic(&self, topic_id: TopicId) {
        self.forget_where(|tp| tp.topic_id == topic_id);
    }

    /// Stops serving the partitions `which` selects; their unsealed data is dropped (the
    /// topic is gone, or a new leader recovers it from the WAL replicas). Their WAL entries
    /// stop holding back WAL trimming: once leadership can move (the cluster issue), a
    /// fenced broker must keep them until the new leader has recovered the tail.
    pub fn forget_where(&self, which: impl Fn(&TopicPartition) -> bool) {
        if let Ok(mut map) = self.partitions.write() {
            map.retain(|tp, p| {
                if !which(tp) {
                    return true;
                }
                if let Ok(s) = p.state.lock() {
                    self.unsealed_bytes
                        .fetch_sub(s.unsealed_bytes() as u64, Ordering::AcqRel);
                }
                false
            });
        }
    }

    /// Appends one producer batch and waits as long as `acks` asks (see [`Self::enqueue`]).
    pub async fn append(
        &self,
        partition: &Arc<Partition>,
        raw: &[u8],
        max_message_bytes: usize,
        log_append_time: bool,
        acks: Acks,
    ) -> Result<Appended> {
        self.enqueue(partition, raw, max_message_bytes, log_append_time, acks)
            .await?
            .wait()
            .await
    }

    /// Appends one producer batch: validate, check sequence, assign offsets and queue the
    /// WAL write. Returns once the batch has its offsets, so a connection can go on to its
    /// next request (keeping per-connection order) while this one becomes durable.
    pub async fn enqueue(
        &self,
        partition: &Arc<Partition>,
        raw: &[u8],
        max_message_bytes: usize,
        log_append_time: bool,
        acks: Acks,
    ) -> Result<PendingAppend> {
        check_lease(self.lease.get())?;
        let header: BatchHeader = batch::validate_produced(raw, max_message_bytes)?;
        let log_append_time_ms = if log_append_time { now_ms() } else { -1 };
        let (base_offset, durable_rx) = {
            let _order = partition.append_order.lock().await;
            self.wal.check_accepting()?;
            let (base_offset, epoch, stamped) = {
                let mut s = partition.lock()?;
                match s.check_sequence(&header)? {
                    SequenceCheck::Duplicate(base_offset) => {
                        // The original is at least queued; a retry waits for nothing more.
                        return Ok(PendingAppend {
                            appended: Appended {
                                base_offset,
                                log_append_time_ms,
                                duplicate: true,
                            },
                            durable: None,
                            lease: self.lease.get().cloned(),
                        });
                    }
                    SequenceCheck::Append => {}
                }
                let stamped = batch::stamp(
                    raw,
                    s.next_offset(),
                    s.leader_epoch,
                    log_append_time.then_some(log_append_time_ms),
                );
                let base = s.append(&header, stamped.clone());
                (base, s.leader_epoch, stamped)
            };
            let (tx, rx) = oneshot::channel();
            let on_durable_partition = partition.clone();
            let queued = self
                .wal
                .append(
                    partition.topic_partition,
                    epoch,
                    &stamped,
                    Box::new(move |result| {
                        if let Ok(seq) = &result {
                            on_durable_partition.on_durable(base_offset, Some(*seq));
                        }
                        let _ = tx.send(result);
                    }),
                )
                .await;
            if let Err(e) = queued {
                partition.lock()?.undo_last_append(base_offset);
                return Err(e);
            }
            (base_offset, rx)
        };
        let size = raw.len() as u64;
        self.metrics
            .appended_batches
            .fetch_add(1, Ordering::Relaxed);
        self.metrics
            .appended_bytes
            .fetch_add(size, Ordering::Relaxed);
        self.metrics
            .appended_records
            .fetch_add(header.record_count as u64, Ordering::Relaxed);
        let unsealed = self.unsealed_bytes.fetch_add(size, Ordering::AcqRel) + size;
        if unsealed >= self.settings.flush_bytes {
            self.seal_wanted.notify_one();
        }
        Ok(PendingAppend {
            appended: Appended {
                base_offset,
                log_append_time_ms,
                duplicate: false,
            },
            durable: (acks == Acks::All).then_some(durable_rx),
            lease: self.lease.get().cloned(),
        })
    }

    /// Waits until every batch appended so far is durable in the WAL (or `timeout`
    /// passes); used on shutdown so `acks=1` writes still queued are not dropped.
    pub async fn wait_durable(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let pending = self.open_partitions().iter().any(|p| {
                p.lock()
                    .map(|s| s.has_pending_durability())
                    .unwrap_or(false)
            });
            if !pending {
                return true;
            }
            if tokio::time::Instant::now() >= deadline || self.wal.check_accepting().is_err() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Bytes the WAL holds on disk.
    pub fn wal_bytes(&self) -> u64 {
        self.wal.bytes()
    }

    /// Bytes held in memory not yet uploaded.
    pub fn unsealed_bytes(&self) -> u64 {
        self.unsealed_bytes.load(Ordering::Acquire)
    }

    /// Every open partition.
    pub fn open_partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Bytes of sealed object data held in the read cache.
    pub fn cache_usage_bytes(&self) -> usize {
        self.cache.usage_bytes()
    }
}
