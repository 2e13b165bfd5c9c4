//! Opening a partition this broker leads: [`LogManager::partition`], the only way a
//! [`Partition`] comes to be served.
//!
//! Lifecycle of an open (serialized per partition, never behind another partition's; at
//! most `OPENS_AT_ONCE` doing I/O at once, so a takeover's opens run side by side within a
//! bound on metadata requests in flight): refused at once while a recovery it needs backs
//! off (`recovery.rs`); checked against the partition's state as the metadata service
//! holds it now (this broker leads it; the partition opens at the stored leader epoch, at
//! the catalog's end); idempotent-producer state rebuilt from the end of the stored log
//! (from sealed objects' and segments' producer sections); then every tail it is owed appended to this
//! broker's WAL and committed — the entries its own WAL held while the partition was
//! forgotten, this broker's own lost tail, and the `recover_from` broker's tail. The
//! partition enters the log's map before `recover_from` is cleared and its epoch recorded,
//! so what was appended is sealed even if a later step fails; the next open finds it there
//! and finishes those steps. Last, one compare-and-swap clears `recover_from` and records
//! its leader epoch's start in the stored epoch history (`begin_epoch`, ARCHITECTURE
//! decision 19); nothing is appended or answered at the epoch before. WAL replay opens
//! partitions without that last step (clearing `recover_from` alone), which their first
//! use then takes.

use super::{LogManager, Partition};
use crate::batch;
use crate::error::{Error, ErrorKind, Result};
use crate::leadership::recovery_state::RecoveryKey;
use crate::partition::PartitionLogState;
use crate::producer_summary::{ObjectProducers, ProducerBatch, SummaryError};
use oxbow_metadata::{
    CatalogEntry, ErrorKind as MetadataErrorKind, Offset, PartitionId, PartitionState, TopicId,
    TopicMetadata, TopicPartition,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// How far back a newly opened partition looks to rebuild idempotent-producer state: a
/// producer retries only its last few in-flight batches.
const PRODUCER_STATE_WINDOW_RECORDS: i64 = 4096;
const PRODUCER_STATE_WINDOW_BYTES: usize = 8 << 20;
/// Catalog entries looked up at a time while rebuilding producer state (from memory).
const PRODUCER_STATE_ENTRIES_PER_READ: usize = 64;
/// Most catalog entries a rebuild reads before its window: a checkpoint is never further
/// back than [`crate::producer_summary::CHECKPOINT_EVERY_CHUNKS`] chunks, and one that says
/// otherwise (a damaged or hostile section) costs no more than this.
const PRODUCER_STATE_ENTRIES_BEFORE_WINDOW: usize = 2 * 256;
/// Objects' producer sections one open fetches at once.
const SUMMARY_FETCHES_AT_ONCE: usize = 16;
/// How long an open waits for a recovered tail to be sealed when no WAL replica is in
/// sync ([`LogManager::recovered_tail_kept`]), and how often it looks.
const RECOVERED_SEAL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
const RECOVERED_SEAL_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// How often recording a new epoch's start retries a compare-and-swap lost to another
/// change of the partition's state (a transfer request, say) that left the leader alone.
const BEGIN_EPOCH_ATTEMPTS: usize = 5;

impl LogManager {
    /// Opens (or returns) a partition of `topic`, checking that this broker leads it. It is
    /// returned only once its epoch's start is in the stored epoch history. Fails with
    /// [`Error::RecoveryPending`] while a WAL tail it needs cannot be recovered yet.
    pub async fn partition(
        &self,
        topic: &TopicMetadata,
        partition: PartitionId,
    ) -> Result<Arc<Partition>> {
        self.open_partition(topic, partition, true, false).await
    }

    /// [`Self::partition`]; with `begin` false (WAL replay, which appends after the open), a
    /// newly opened partition is left for its first use to record its epoch's start.
    /// `recovering`: called by the recovery driver, which may attempt a recovery that is
    /// backing off (clients are answered at once instead).
    /// The lock serializing opens of `tp`, shared by every open of it under way (dropped
    /// from the map by the last, [`OpeningGuard`]).
    fn opening_lock(&self, tp: TopicPartition) -> Result<Arc<tokio::sync::Mutex<()>>> {
        let mut opening = self
            .opening
            .lock()
            .map_err(|_| Error::Internal("opening map lock poisoned".into()))?;
        Ok(opening.entry(tp).or_default().clone())
    }

    pub(super) async fn open_partition(
        &self,
        topic: &TopicMetadata,
        partition: PartitionId,
        begin: bool,
        recovering: bool,
    ) -> Result<Arc<Partition>> {
        let tp = TopicPartition::new(topic.topic_id, partition);
        if let Some(p) = self.get(&tp) {
            if p.epoch_begun() || !begin {
                return Ok(p);
            }
        }
        if !recovering {
            self.recovery.check_open(topic, partition)?;
        }
        let started = self.clock.now();
        let opening = OpeningGuard {
            log: self,
            tp,
            lock: self.opening_lock(tp)?,
        };
        let _opening = opening.lock.lock().await;
        let step = |what: &'static str| {
            tracing::debug!(partition = %format!("{}-{partition}", topic.name),
                elapsed_ms = (self.clock.now() - started).as_millis() as u64, "open: {what}");
        };
        step("partition lock held");
        if let Some(p) = self.get(&tp) {
            if !p.epoch_begun() && begin {
                // An earlier open recovered a tail into `p` and may have failed to clear
                // `recover_from`: cleared with the epoch's start (nothing is served before).
                let stored = self.stored_state(&p).await?;
                let clear = stored.recover_from.is_some();
                if clear {
                    self.recovered_tail_kept(&p, &topic.name).await?;
                }
                self.begin_epoch(&p, Some(stored), clear).await?;
            }
            return Ok(p);
        }
        let _permit = self
            .open_permits
            .acquire()
            .await
            .map_err(|_| Error::ShuttingDown)?;
        step("permit held");
        // The caller's topic may come from a cache; a partition must open at the epoch the
        // metadata service holds now (it moves when a lease is lost, see `fence.rs`), or its
        // first seal is fenced.
        // The partition's own state only: reading the whole topic per open would make a
        // broker opening a thousand partitions read a million states.
        let (_topic, state) = self
            .metadata
            .partition_state(topic.topic_id, partition)
            .await?
            .ok_or_else(|| Error::UnknownPartition(format!("{}-{partition}", topic.name)))?;
        let state = &state;
        if state.leader != self.settings.broker_id {
            return Err(Error::NotLeader(format!(
                "{}-{partition} (leader is broker {})",
                topic.name, state.leader
            )));
        }
        // Opens run side by side, those recovering a dead broker's tail too (they share
        // one fetch of it, `LogRecovery::tail_of`): a failover hands a broker thousands of
        // partitions at once. Those appending this broker's own earlier entries (held, or a
        // previous incarnation's) run one at a time.
        let held_from = self.held.lock().ok().and_then(|h| h.get(&tp).copied());
        let own_previous = self.recovery.own_previous();
        let _recovering = match (held_from, &own_previous) {
            (None, None) => None,
            _ => Some(self.open_lock.lock().await),
        };
        // Synced: the previous leader's last commits may not have reached this broker's
        // in-memory catalogue yet, and the log must continue exactly where they end.
        step("state read");
        let log_end = self.synced_catalog_end(tp, state.log_start_offset).await?;
        step("catalogue synced");
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
            epoch_begun: AtomicBool::new(false),
            stored_bytes: Default::default(),
            stored_entries: Default::default(),
        });
        opened.lock()?.leader_epochs = state.leader_epochs.clone();
        if self.wal.is_none() {
            opened.lock()?.set_direct();
        }
        if let Err(e) = self.restore_producers(&opened).await {
            if e.kind() == ErrorKind::DataCorruption {
                // Corrupt stored data stays unreadable (reads answer the corruption): new
                // writes are still taken, with only the producers' state read so far.
                tracing::warn!(error = %e, "could not rebuild idempotent producer state from the corrupt log");
            } else {
                // Serving without the producers' recent sequences would store a retry of a
                // batch written before this open a second time (found by the simulation,
                // seed 26: a handoff during an object-store outage). Not served until the
                // log reads again.
                tracing::warn!(error = %e, "could not rebuild idempotent producer state from the log; the partition is not served yet");
                return Err(e);
            }
        }
        self.establish_txn_index(&opened).await;
        step("producer state restored");
        if let (Some(from_seq), Some(wal)) = (held_from, &self.wal) {
            // This broker forgot the partition with unsealed data (fenced, or a lost lease)
            // and leads it again: its own WAL still holds that data.
            let wal = wal.clone();
            let incarnation = wal.incarnation();
            let entries = oxbow_metadata::blocking::run_blocking(move || wal.read_from(from_seq))
                .await
                .map_err(|e| Error::Internal(format!("WAL read task: {e}")))??;
            let tail: crate::leadership::recover::Tail =
                entries.into_iter().map(|e| (incarnation, e)).collect();
            let log_end = opened.offsets()?.2;
            // Still held until the partition is in the map (`insert_opened`): if a later step
            // fails, `opened` is dropped, and the next open must append these entries again
            // (found by the simulation, seed 80: a reopen whose `recover_from` step failed
            // lost the entries it had taken back from its own WAL).
            self.append_recovered(&opened, &tail, log_end).await?;
        }
        if let Some(previous) = own_previous {
            let me = self.settings.broker_id;
            let skip = Some(self.wal()?.incarnation());
            let tail = self.recovery.tail_of(me, Some(&previous), skip).await?;
            self.append_recovered(&opened, &tail, log_end).await?;
        }
        let latest = state.clone();
        if let Some(source) = state.recover_from {
            let key = RecoveryKey::Partition(tp);
            let named = Some((topic.topic_id, topic.name.clone()));
            let record = self.metadata.wal_replica_set(source).await?;
            let tail = match self.recovery.tail_of(source, record.as_ref(), None).await {
                Ok(tail) => tail,
                Err(e) => return Err(self.recovery.failed(key, source, named, &e)),
            };
            self.recovery.done(key);
            step("tail fetched");
            let log_end = opened.offsets()?.2;
            self.append_recovered(&opened, &tail, log_end).await?;
            step("tail appended");
            // In the map before `recover_from` is cleared: if clearing fails — or succeeds
            // with its answer lost — the recovered batches stay in this partition's log
            // (sealed, or held if it is forgotten) and the next open finishes the job,
            // instead of opening a fresh log without them (found by the simulation, seed 8).
            let inserted = self.insert_opened(tp, opened)?;
            self.recovered_tail_kept(&inserted, &topic.name).await?;
            if begin {
                // One compare-and-swap for both: `recover_from` cleared, the epoch begun.
                self.begin_epoch(&inserted, Some(state.clone()), true)
                    .await?;
                step("recover_from cleared, epoch begun");
            } else {
                self.clear_recover_from(topic.topic_id, state.clone())
                    .await?;
                step("recover_from cleared");
            }
            return Ok(inserted);
        }
        // In the map before the epoch is recorded: what recovery appended to the WAL is then
        // sealed (or held, if the partition is forgotten) even if recording fails, since
        // `recover_from` is already cleared. A later use retries the recording.
        let opened = self.insert_opened(tp, opened)?;
        if begin {
            self.begin_epoch(&opened, Some(latest), false).await?;
        }
        Ok(opened)
    }

    /// Waits, before `recover_from` is cleared, until a recovered tail is as safe as it was:
    /// it lay on the dead broker's in-sync replicas, and once cleared nothing reads it from
    /// there again. Appended to this broker's WAL it is on this broker's in-sync replicas too
    /// — unless none is in sync, when it would rest on this disk alone: then the tail must
    /// be sealed first (found by the simulation, seed 80: a new leader whose replicas could
    /// not be chosen recovered a tail, served it, and lost its disk). Bounded: the open fails
    /// retriably and the next one waits again (the partition stays in the map, unbegun).
    async fn recovered_tail_kept(&self, p: &Partition, name: &str) -> Result<()> {
        if self.wal.is_none() || self.replicator.in_sync_copies() > 1 {
            return Ok(());
        }
        let deadline = self.clock.now() + RECOVERED_SEAL_WAIT;
        loop {
            let (sealed_end, log_end) = {
                let s = p.lock()?;
                (s.sealed_end, s.log_end_offset)
            };
            if sealed_end >= log_end {
                return Ok(());
            }
            // Now, not at the next flush interval (which may be long: `--flush-interval`).
            self.seal_wanted.notify_one();
            if self.clock.now() >= deadline {
                return Err(Error::RecoveryPending(format!(
                    "{name}-{}: the recovered WAL tail up to offset {log_end} waits to be sealed (no WAL replica is in sync to hold it)",
                    p.topic_partition.partition
                )));
            }
            self.clock.sleep(RECOVERED_SEAL_POLL).await;
        }
    }

    /// Puts a newly opened partition in the map (or returns the one already there). Its
    /// held WAL entries, if any, were appended to it: the partition tracks them now.
    fn insert_opened(&self, tp: TopicPartition, opened: Arc<Partition>) -> Result<Arc<Partition>> {
        let inserted = {
            let mut map = self
                .partitions
                .write()
                .map_err(|_| Error::Internal("partition map lock poisoned".into()))?;
            map.entry(tp).or_insert(opened).clone()
        };
        if let Ok(mut h) = self.held.lock() {
            h.remove(&tp);
        }
        Ok(inserted)
    }

    /// Clears `recover_from` of `state` by compare-and-swap: the recovered tail is in this
    /// broker's WAL, so the dead broker's copy is no longer needed for the partition.
    async fn clear_recover_from(
        &self,
        topic_id: TopicId,
        state: PartitionState,
    ) -> Result<PartitionState> {
        let mut cleared = state.clone();
        cleared.recover_from = None;
        Ok(self
            .metadata
            .update_partition(topic_id, state.version, cleared)
            .await?)
    }

    /// Records this leader's epoch as starting at the partition's log end in the stored
    /// epoch history (decision 19), by compare-and-swap on the partition's state (`known`, or
    /// read afresh). Called once the log end is final for the open: after any recovered tail
    /// (whose batches keep their older epoch) and WAL replay, before anything is appended or
    /// answered at this epoch. Fails with [`Error::NotLeader`] if leadership or the epoch
    /// moved meanwhile.
    /// With `clear_recover_from`, the same swap clears the partition's `recover_from` (its
    /// recovered tail is in this broker's WAL): one metadata write instead of two.
    async fn begin_epoch(
        &self,
        p: &Partition,
        known: Option<PartitionState>,
        clear_recover_from: bool,
    ) -> Result<()> {
        let tp = p.topic_partition;
        let me = self.settings.broker_id;
        let epoch = p.leader_epoch()?;
        let mut state = match known {
            Some(s) => s,
            None => self.stored_state(p).await?,
        };
        for _ in 0..BEGIN_EPOCH_ATTEMPTS {
            if state.leader != me || state.leader_epoch != epoch {
                return Err(Error::NotLeader(format!(
                    "{}-{} (leader is broker {} at epoch {}; opened at epoch {epoch})",
                    p.topic_name, tp.partition, state.leader, state.leader_epoch
                )));
            }
            let log_end = p.offsets()?.2;
            let mut next = state.clone();
            let clearing = clear_recover_from && next.recover_from.take().is_some();
            if !next.leader_epochs.assign(epoch, log_end) && !clearing {
                p.lock()?.leader_epochs = next.leader_epochs;
                p.epoch_begun.store(true, Ordering::Release);
                return Ok(());
            }
            match self
                .metadata
                .update_partition(tp.topic_id, state.version, next)
                .await
            {
                Ok(stored) => {
                    tracing::info!(
                        partition = %format!("{}-{}", p.topic_name, tp.partition),
                        leader_epoch = epoch, start_offset = log_end, "leader epoch begins"
                    );
                    p.lock()?.leader_epochs = stored.leader_epochs;
                    p.epoch_begun.store(true, Ordering::Release);
                    return Ok(());
                }
                Err(e) if e.kind() == MetadataErrorKind::Conflict => {
                    state = self.stored_state(p).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::NotLeader(format!(
            "{}-{}: its state kept changing while the leader epoch was recorded",
            p.topic_name, tp.partition
        )))
    }

    /// The partition's state as the metadata service holds it now.
    pub(super) async fn stored_state(&self, p: &Partition) -> Result<PartitionState> {
        let tp = p.topic_partition;
        self.metadata
            .partition_state(tp.topic_id, tp.partition)
            .await?
            .map(|(_, state)| state)
            .ok_or_else(|| Error::UnknownPartition(format!("{}-{}", p.topic_name, tp.partition)))
    }

    /// Rebuilds idempotent-producer state from the end of the stored log (the entries
    /// holding its last [`PRODUCER_STATE_WINDOW_RECORDS`] records), so a producer retrying a
    /// batch the previous leader stored gets the original offset instead of a duplicate.
    /// A sealed object's or a segment's entry is taken from its producers section, fetched
    /// once for every partition opened meanwhile ([`crate::producer_summary`]); its carried
    /// rows bring the producers idle for longer than the window — every one the partition
    /// remembered for a segment or a complete chunk (issue 16; the catalogue's last entry is
    /// always in the window, so a partition compacted to its end is rebuilt from its last
    /// segment's rows). A last chunk that is not complete names the last one that was
    /// (its checkpoint row), and the rebuild starts there if that is before the window. An entry without a section (an object or segment of format version
    /// 1, or one whose section cannot be read) has its batches read, at most
    /// [`PRODUCER_STATE_WINDOW_BYTES`] of them in all. What is found
    /// is applied per producer in offset order, each batch once however many rows name it.
    ///
    /// Open transactions likewise (issue 16): the open set at the end of the catalogue is the
    /// newest summarised entry's open-transaction rows, updated by the batches of any later
    /// entry read back (transactional data opens, a marker ends), so this leader's last
    /// stable offset does not run past a transaction the previous leader left open.
    async fn restore_producers(&self, partition: &Partition) -> Result<()> {
        let mut found: BTreeMap<i64, BTreeMap<Offset, ProducerBatch>> = BTreeMap::new();
        let mut open_txns: BTreeMap<i64, (i16, Offset)> = BTreeMap::new();
        let scanned = self
            .scan_producers(partition, &mut found, &mut open_txns)
            .await;
        let mut s = partition.lock()?;
        for batches in found.values() {
            for b in batches.values() {
                s.restore_producer(b);
            }
        }
        for (&producer_id, &(epoch, first)) in &open_txns {
            s.restore_open_txn(producer_id, epoch, first);
        }
        scanned
    }

    /// The batches [`Self::restore_producers`] applies, by producer and offset.
    async fn scan_producers(
        &self,
        partition: &Partition,
        found: &mut BTreeMap<i64, BTreeMap<Offset, ProducerBatch>>,
        open_txns: &mut BTreeMap<i64, (i16, Offset)>,
    ) -> Result<()> {
        let mut note = |b: &ProducerBatch| {
            found
                .entry(b.producer_id)
                .or_default()
                .insert(b.base_offset, *b);
        };
        let tp = partition.topic_partition;
        let (log_start, _, log_end) = partition.offsets()?;
        let window = (log_end - PRODUCER_STATE_WINDOW_RECORDS).max(log_start);
        let mut next = match self.producer_checkpoint(&tp).await {
            Some(at) => at.clamp(log_start, window),
            None => window,
        };
        let mut bytes = 0usize;
        let mut entries_before_window = 0usize;
        while next < log_end {
            if next < window && entries_before_window > PRODUCER_STATE_ENTRIES_BEFORE_WINDOW {
                tracing::warn!(partition = %tp, from = next, window,
                    "the producer checkpoint is further back than any leader leaves it; rebuilding from the window");
                next = window;
            }
            let entries = self
                .metadata
                .catalog_entries(
                    tp.topic_id,
                    tp.partition,
                    next,
                    PRODUCER_STATE_ENTRIES_PER_READ,
                )
                .await?;
            let before = next;
            // This page's objects' sections, fetched side by side (each once for all).
            // A segment's (issue 16) names the producers at its end.
            let mut keyed: Vec<&CatalogEntry> =
                entries.iter().filter(|e| e.last_offset >= next).collect();
            keyed.sort_unstable_by(|a, b| a.object_key.cmp(&b.object_key));
            keyed.dedup_by(|a, b| a.object_key == b.object_key);
            let mut summaries: HashMap<String, Arc<ObjectProducers>> = HashMap::new();
            for chunk in keyed.chunks(SUMMARY_FETCHES_AT_ONCE) {
                let fetched = futures::future::join_all(
                    chunk
                        .iter()
                        .map(|e| self.producer_summaries.of(&self.objects, e)),
                )
                .await;
                for (e, fetched) in chunk.iter().zip(fetched) {
                    let key = &e.object_key;
                    match fetched {
                        Ok(s) => {
                            summaries.insert(key.clone(), s);
                        }
                        Err(SummaryError::Absent) => {}
                        Err(e) => tracing::debug!(error = %e, object = %key,
                            "no producer summary; reading the batches"),
                    }
                }
            }
            for entry in &entries {
                if entry.last_offset < next {
                    continue;
                }
                if entry.last_offset < window {
                    entries_before_window += 1;
                }
                let summary = summaries.get(entry.object_key.as_str());
                if let Some(summary) = summary {
                    for b in summary.of(&tp) {
                        // A clipped entry serves only up to its last offset.
                        if b.base_offset >= entry.base_offset && b.base_offset <= entry.last_offset
                        {
                            note(b);
                        }
                    }
                    // Carried rows describe batches before the entry (sealed earlier).
                    for b in summary.carried_of(&tp) {
                        if b.base_offset < entry.base_offset {
                            note(b);
                        }
                    }
                    // The transactions open at the end of its chunk (begun within what the
                    // entry serves or before).
                    open_txns.clear();
                    for b in summary.open_txns_of(&tp) {
                        if b.base_offset <= entry.last_offset {
                            open_txns.insert(b.producer_id, (b.producer_epoch, b.base_offset));
                        }
                    }
                    next = entry.last_offset + 1;
                    continue;
                }
                while next <= entry.last_offset && bytes < PRODUCER_STATE_WINDOW_BYTES {
                    let r = self.read(partition, next, 1 << 20, true).await?;
                    let read_from = next;
                    for b in &r.batches {
                        let Some(h) = batch::peek_header(b)? else {
                            continue;
                        };
                        bytes += b.len();
                        next = h.last_offset() + 1;
                        if let Some(p) = ProducerBatch::of(&h) {
                            note(&p);
                        }
                        if h.last_offset() >= read_from {
                            note_txn(open_txns, &h, b);
                        }
                    }
                    if next <= read_from {
                        return Ok(());
                    }
                }
                if bytes >= PRODUCER_STATE_WINDOW_BYTES {
                    return Ok(());
                }
            }
            if next <= before {
                break;
            }
        }
        Ok(())
    }
}

impl LogManager {
    /// Where the partition's last complete chunk began, as its last catalog entry says
    /// (`producer_summary`, checkpoints); `None` if the entry is complete itself, predates
    /// checkpoints or cannot be read.
    async fn producer_checkpoint(&self, tp: &oxbow_metadata::TopicPartition) -> Option<Offset> {
        let last = match self.metadata.catalog_last(tp.topic_id, tp.partition).await {
            Ok(last) => last?,
            Err(e) => {
                tracing::debug!(partition = %tp, error = %e, "no catalogue end for the producer checkpoint");
                return None;
            }
        };
        let summary = self
            .producer_summaries
            .of(&self.objects, &last)
            .await
            .ok()?;
        summary.checkpoint_of(tp)
    }

    /// Makes `partition`'s transaction state exact ([`crate::txn::PartitionTxns::set_exact`])
    /// if the catalogue proves which transactions are open at its end: nothing catalogued, or
    /// the last entry's index says where the oldest open transaction began — none (its stop
    /// hint is its end), or one at `S`, and the batches from `S` to the end (at most
    /// [`TXN_OPEN_SCAN_BYTES_MAX`]) name them all. Otherwise (data sealed before the index,
    /// a leader that was not exact, a failed read) the partition stays as restored, and its
    /// sealed chunks' entries carry no index: readers walk headers there, as before.
    async fn establish_txn_index(&self, partition: &Partition) {
        let tp = partition.topic_partition;
        let open = match self.open_txns_at_catalogue_end(partition).await {
            Ok(open) => open,
            Err(e) => {
                tracing::debug!(partition = %tp, error = %e, "could not prove the open transactions; no aborted index for this leadership");
                None
            }
        };
        if let Some(open) = open {
            if let Ok(mut s) = partition.lock() {
                s.set_txns_exact(open);
            }
        }
    }

    async fn open_txns_at_catalogue_end(
        &self,
        partition: &Partition,
    ) -> Result<Option<BTreeMap<i64, (i16, Offset)>>> {
        let tp = partition.topic_partition;
        let (log_start, _, log_end) = partition.offsets()?;
        let Some(last) = self
            .metadata
            .catalog_last(tp.topic_id, tp.partition)
            .await?
        else {
            return Ok(Some(BTreeMap::new()));
        };
        if last.next_offset() != log_end {
            return Ok(None);
        }
        let Some(stable_end) = last.txn.as_ref().and_then(|t| t.stable_end) else {
            return Ok(None);
        };
        let mut open = BTreeMap::new();
        // A transaction begun below the log start is seen from its first batch after it:
        // nothing below the log start is ever read.
        let mut next = stable_end.max(log_start);
        let mut bytes = 0usize;
        while next < log_end {
            if bytes >= TXN_OPEN_SCAN_BYTES_MAX {
                return Ok(None);
            }
            let r = self.read(partition, next, 1 << 20, true).await?;
            let read_from = next;
            for b in &r.batches {
                let Some(h) = batch::peek_header(b)? else {
                    continue;
                };
                bytes += b.len();
                next = h.last_offset() + 1;
                if h.last_offset() >= read_from {
                    note_txn(&mut open, &h, b);
                }
            }
            if next <= read_from {
                return Ok(None);
            }
        }
        Ok(Some(open))
    }
}

/// Most bytes [`LogManager::establish_txn_index`] reads to find the transactions open at the
/// catalogue's end (from the oldest one's first batch).
const TXN_OPEN_SCAN_BYTES_MAX: usize = 16 << 20;

/// A batch read back while rebuilding: transactional data opens its producer's
/// transaction (or joins it), a marker ends it.
fn note_txn(open_txns: &mut BTreeMap<i64, (i16, Offset)>, h: &batch::BatchHeader, raw: &[u8]) {
    if h.is_control() {
        if crate::txn::parse_marker(raw, h).is_some() {
            open_txns.remove(&h.producer_id);
        }
    } else if h.is_transactional() && h.producer_id >= 0 {
        open_txns
            .entry(h.producer_id)
            .or_insert((h.producer_epoch, h.base_offset));
    }
}

/// Holds one open's share of its partition's lock; the last one drops the lock from the
/// map (under the map's mutex, so a newcomer either shares it or makes a new one).
struct OpeningGuard<'a> {
    log: &'a LogManager,
    tp: TopicPartition,
    lock: Arc<tokio::sync::Mutex<()>>,
}

impl Drop for OpeningGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut opening) = self.log.opening.lock() {
            // The map's and this guard's: nobody else waits.
            if Arc::strong_count(&self.lock) <= 2 {
                opening.remove(&self.tp);
            }
        }
    }
}
