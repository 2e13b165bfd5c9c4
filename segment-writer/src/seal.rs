//! The sealer: turns what every partition holds durably in the WAL into one object in the
//! object store, catalogues it, then trims the WAL (design brief → Write path, step 5).
//!
//! Lifecycle: one task per broker ([`run_sealer`]); it wakes every `flush_interval`, or
//! early once `flush_bytes` of unsealed data is held, and once more on shutdown so a clean
//! stop leaves nothing in the WAL. A failed upload or catalog commit leaves everything in
//! place (memory and WAL) and is retried on the next tick; nothing is trimmed before its
//! catalog commit succeeded.
//!
//! The catalog commit is one metadata key per object whatever its partition count, fenced
//! by this broker's lease ([`oxbow_metadata::CatalogCommit`]); an object holds at most
//! [`oxbow_metadata::OBJECT_PARTITIONS_MAX`] partitions so that key fits one metadata
//! request. What an object holds and what follows from each outcome are decided by the
//! pure [`crate::seal_state`]; this module carries it out.
//!
//! One object holds at most [`OBJECT_BYTES_MAX`] (or `flush_bytes` if larger) of batches: a
//! backlog (after an object-store outage, up to the whole WAL budget) is uploaded as several
//! objects in turn, so no single PUT has to carry gigabytes within the client's request
//! timeout, and a failed attempt rebuilds at most one object's worth in memory.

use crate::error::{Error, Result};
use crate::latency::observe;
use crate::log::LogManager;
use crate::object::{self, Chunk};
use crate::producer_summary::OBJECT_CARRIED_ROWS_MAX;
use crate::seal_state::{
    catalogued_up_to, plan_object, Action, CatalogueEnd, CommitOutcome, Event, Offered, SealRound,
};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use oxbow_metadata::catalog_txn::OBJECT_ABORTS_MAX;
use oxbow_metadata::{CatalogCommit, EpochFence, ErrorKind as MetadataErrorKind, WriterFence};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// How often the sealed floor is recomputed between seals.
const FLOOR_REFRESH: std::time::Duration = std::time::Duration::from_millis(200);

/// Most batch bytes in one sealed object unless `flush_bytes` is larger.
pub const OBJECT_BYTES_MAX: u64 = 64 << 20;

/// Runs the sealer until `shutdown`, then seals one last time.
pub async fn run_sealer(log: Arc<LogManager>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(log.settings.flush_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The sealed floor also moves without a seal (nothing unsealed left, or new entries
    // committed): replicas waiting to rejoin the in-sync set need to see it promptly.
    let mut floor_tick = tokio::time::interval(FLOOR_REFRESH);
    floor_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Expired producers are looked for every 10 minutes, or twice per expiration if shorter.
    let expiry_check = crate::log::PRODUCER_EXPIRATION_CHECK
        .min((log.settings.producer_id_expiration / 2).max(std::time::Duration::from_secs(1)));
    let mut expiry_tick = tokio::time::interval(expiry_check);
    expiry_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    expiry_tick.tick().await;
    loop {
        tokio::select! {
            // Polled in order (shutdown first): tokio's random branch order would make the
            // simulation's runs differ for one seed.
            biased;
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
            _ = log.seal_wanted.notified() => {}
            _ = floor_tick.tick() => {
                log.refresh_sealed_floor();
                continue;
            }
            _ = expiry_tick.tick() => {
                log.expire_producers();
                continue;
            }
        }
        if let Err(e) = log.seal_once().await {
            tracing::warn!(error = %e, "sealing failed; data stays in the WAL and is retried");
        }
        if let Err(e) = log.release_holds().await {
            tracing::warn!(error = %e, "could not check held WAL entries; keeping them");
        }
        log.delete_uncatalogued(log.clock.now()).await;
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
    /// Seals everything durable and unsealed, in objects of at most [`OBJECT_BYTES_MAX`]
    /// (usually one). Returns the bytes uploaded.
    pub async fn seal_once(&self) -> Result<u64> {
        let _sealing = self.seal_lock.lock().await;
        let mut total = 0;
        loop {
            let (bytes, more) = self.seal_one_object().await?;
            total += bytes;
            if !more {
                return Ok(total);
            }
        }
    }

    /// Seals one object's worth; also says whether more was left out for lack of room. The
    /// decisions are [`SealRound`]'s; this carries them out.
    async fn seal_one_object(&self) -> Result<(u64, bool)> {
        let durable_sequence = self.wal.as_ref().map_or(0, |w| w.durable_sequence());
        let (chunks, fences, more) = self.plan_object()?;
        // Shared with the blocking pool, where the object is built.
        let chunks = Arc::new(chunks);
        let mut round = SealRound::new();
        let mut events = VecDeque::from([Event::Planned {
            partitions: chunks.len(),
            more,
        }]);
        let mut sealed = None;
        let mut failure = None;
        let mut commit = None;
        let mut filed_under = 0;
        while let Some(event) = events.pop_front() {
            for action in round.step(event) {
                match action {
                    Action::TrimWal => self.trim_wal(durable_sequence)?,
                    Action::Upload => {
                        let seq = self.seal_sequence.fetch_add(1, Ordering::AcqRel);
                        let key = format!(
                            "data/b{}/{seq:020}-{}.oxb",
                            self.settings.broker_id,
                            self.rng.uuid().simple()
                        );
                        let started = tokio::time::Instant::now();
                        // Copying and checksumming up to OBJECT_BYTES_MAX takes milliseconds:
                        // not on an async worker, where it would hold up connections.
                        let (broker_id, of) = (self.settings.broker_id, chunks.clone());
                        let object = oxbow_metadata::blocking::run_blocking(move || {
                            object::build(key, broker_id, &of)
                        })
                        .await
                        .map_err(|e| Error::Internal(format!("building a sealed object: {e}")))?;
                        let built = tokio::time::Instant::now();
                        observe(&self.metrics.seal_latency.seal_build, built - started);
                        let put = self
                            .objects
                            .put_opts(
                                &ObjectPath::from(object.key.as_str()),
                                PutPayload::from_bytes(object.body.clone()),
                                PutOptions {
                                    // Create-only: a zombie writer can never overwrite a
                                    // catalogued object.
                                    mode: PutMode::Create,
                                    ..Default::default()
                                },
                            )
                            .await;
                        observe(&self.metrics.seal_latency.seal_upload, built.elapsed());
                        if let Err(e) = &put {
                            failure = Some(Error::ObjectStore(format!("PUT {}: {e}", object.key)));
                        }
                        events.push_back(Event::Uploaded { ok: put.is_ok() });
                        sealed = Some(object);
                    }
                    Action::FillCache => {
                        let Some(object) = &sealed else { continue };
                        for e in &object.entries {
                            let range = e.byte_start as usize..(e.byte_start + e.byte_len) as usize;
                            self.cache.insert_recent(
                                &e.object_key,
                                e.byte_start,
                                e.byte_len,
                                object.body.slice(range),
                            );
                        }
                    }
                    Action::Commit => {
                        let Some(object) = &sealed else { continue };
                        let c = CatalogCommit {
                            entries: object.entries.clone(),
                            fences: fences.clone(),
                            // The commit lands only while this broker's registration holds
                            // this lease: a broker whose lease expired catalogues nothing
                            // more (ARCHITECTURE decision 23).
                            writer: self.lease.get().and_then(|g| g.lease_id()).map(|lease_id| {
                                WriterFence {
                                    broker_id: self.settings.broker_id,
                                    lease_id,
                                }
                            }),
                        };
                        // The broker the catalog key is filed under (0 without a writer fence).
                        filed_under = c.writer.map_or(0, |w| w.broker_id);
                        let started = tokio::time::Instant::now();
                        let committed = self.metadata.commit_catalog(c).await;
                        observe(&self.metrics.seal_latency.seal_commit, started.elapsed());
                        let outcome = match committed {
                            Ok(_) => CommitOutcome::Landed,
                            Err(e) => {
                                let outcome = match e.kind() {
                                    MetadataErrorKind::Fenced => CommitOutcome::Fenced,
                                    MetadataErrorKind::Conflict => CommitOutcome::Conflict,
                                    _ => CommitOutcome::Failed,
                                };
                                failure = Some(Error::Metadata(e));
                                outcome
                            }
                        };
                        commit = Some(outcome);
                        events.push_back(Event::Committed(outcome));
                    }
                    Action::MarkSealed => {
                        for c in chunks.iter() {
                            self.mark_chunk_sealed(c.topic_partition, c.last_offset)?;
                            if let Some(p) = self.get(&c.topic_partition) {
                                p.lock()?
                                    .note_chunk_sealed(c.base_offset, c.producers_complete);
                            }
                        }
                        self.enforce_tail_budget()?;
                    }
                    Action::CountUploaded => {
                        let size = sealed.as_ref().map_or(0, |o| o.body.len() as u64);
                        self.metrics
                            .objects_uploaded
                            .fetch_add(1, Ordering::Relaxed);
                        self.metrics
                            .object_bytes_uploaded
                            .fetch_add(size, Ordering::Relaxed);
                        tracing::debug!(key = ?sealed.as_ref().map(|o| &o.key), bytes = size,
                            partitions = chunks.len(), "sealed object");
                    }
                    Action::CountFailure => {
                        self.metrics.upload_failures.fetch_add(1, Ordering::Relaxed);
                    }
                    Action::NoteUncatalogued => {
                        // The next seal puts these batches in a new object: this one is
                        // deleted unless the commit landed after all (`delete_uncatalogued`).
                        if let Some(object) = &sealed {
                            self.uncatalogued.note(
                                self.clock.now(),
                                filed_under,
                                object.key.clone(),
                            );
                        }
                    }
                    Action::ForgetPartitions => {
                        tracing::error!(error = ?failure.as_ref().map(|e| e.to_string()),
                            "fenced while sealing; dropping partitions of this object");
                        self.forget_where(|tp| chunks.iter().any(|c| c.topic_partition == *tp));
                    }
                    Action::Reconcile => self.reconcile_with_catalog(&chunks).await,
                    Action::Done { more } => {
                        let size = match commit {
                            Some(CommitOutcome::Landed) => {
                                sealed.as_ref().map_or(0, |o| o.body.len() as u64)
                            }
                            _ => 0,
                        };
                        return Ok((size, more));
                    }
                    Action::Fail => {
                        return Err(failure.unwrap_or_else(|| {
                            Error::ObjectStore("sealing failed for an unrecorded reason".into())
                        }))
                    }
                }
            }
        }
        // The core answers every event until Done or Fail.
        Err(Error::ObjectStore(
            "sealing stopped before it finished".into(),
        ))
    }

    /// What the next object holds ([`plan_object`]): the oldest unsealed batches in the WAL,
    /// as one chunk per partition, with the epoch fences its commit needs, and whether some
    /// were left out.
    fn plan_object(&self) -> Result<(Vec<Chunk>, Vec<EpochFence>, bool)> {
        let partitions = self.open_partitions();
        let mut offered = Vec::with_capacity(partitions.len());
        let mut firsts = Vec::with_capacity(partitions.len());
        for p in &partitions {
            let s = p.lock()?;
            let batches = s.unsealed();
            firsts.push(batches.first().map(|b| b.base_offset));
            offered.push(
                batches
                    .iter()
                    .map(|b| Offered {
                        sequence: b.wal_sequence,
                        len: b.bytes.len() as u64,
                    })
                    .collect::<Vec<_>>(),
            );
        }
        let plan = plan_object(&offered, self.settings.flush_bytes.max(OBJECT_BYTES_MAX));
        let mut more = plan.more;
        let mut chunks = Vec::new();
        let mut fences = Vec::new();
        let mut aborts = 0usize;
        let mut carried_rows = 0usize;
        for ((p, n), first_planned) in partitions.iter().zip(plan.take).zip(firsts) {
            if n == 0 {
                continue;
            }
            let s = p.lock()?;
            let mut batches = s.unsealed();
            // Planned on what the partition held a moment ago: appends since only add at
            // the end. Should its unsealed batches start elsewhere now (its leadership
            // changed meanwhile), it waits for the next object.
            if batches.first().map(|b| b.base_offset) != first_planned {
                more = true;
                continue;
            }
            batches.truncate(n);
            let (Some(first), Some(last)) = (batches.first(), batches.last()) else {
                continue;
            };
            fences.push(EpochFence {
                topic_partition: p.topic_partition,
                leader_epoch: s.leader_epoch,
            });
            // The chunk's aborted-transaction index, within the object's budget of aborts
            // (past it the entry has none, and its readers walk headers).
            let txn = s
                .txn_index_for(first.base_offset, last.last_offset)
                .filter(|t| aborts + t.aborts.len() <= OBJECT_ABORTS_MAX);
            aborts += txn.as_ref().map_or(0, |t| t.aborts.len());
            // The partition's other producers, so its next leader knows them however long
            // they have been idle (`producer_summary`: carried rows, checkpoints), within
            // the object's budget. Its open transactions first, so its next leader's last
            // stable offset does not run past them (open-transaction rows). Open as of the
            // chunk's end: a marker appended after it (not in this chunk) does not close
            // its transaction for the chunk's readers.
            let carried = s.carried_rows(
                first.base_offset,
                last.last_offset,
                OBJECT_CARRIED_ROWS_MAX.saturating_sub(carried_rows),
            );
            carried_rows += carried.rows.len();
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
                carried_producers: carried.rows,
                producers_complete: carried.complete,
                txn,
            });
        }
        Ok((chunks, fences, more))
    }

    /// What each partition's memory tail may hold: `--partition-tail-bytes`, or an equal
    /// share of `--tail-memory-bytes` when the open partitions would not fit in it at that.
    pub(crate) fn tail_keep_bytes(&self) -> usize {
        let open = self.partitions.read().map_or(1, |m| m.len().max(1));
        self.settings
            .partition_tail_bytes
            .min(self.settings.tail_memory_bytes / open)
    }

    /// Trims every partition's tail to its share once the tails together hold more than
    /// `--tail-memory-bytes`: partitions kept a larger share while there were fewer of
    /// them, and an idle one is not sealed again to be trimmed by [`Self::mark_chunk_sealed`].
    /// Walks the partitions only when their count could pass the budget at all.
    fn enforce_tail_budget(&self) -> Result<()> {
        let partitions = self.open_partitions();
        let fits = self
            .settings
            .partition_tail_bytes
            .saturating_mul(partitions.len());
        if fits <= self.settings.tail_memory_bytes {
            return Ok(());
        }
        let mut held = 0usize;
        for p in &partitions {
            held += p.lock()?.sealed_memory_bytes();
        }
        if held <= self.settings.tail_memory_bytes {
            return Ok(());
        }
        let keep = self.tail_keep_bytes();
        for p in &partitions {
            p.lock()?.evict(keep);
        }
        Ok(())
    }

    /// Marks `tp`'s batches up to `last_offset` sealed (catalogued).
    fn mark_chunk_sealed(
        &self,
        tp: oxbow_metadata::TopicPartition,
        last_offset: oxbow_metadata::Offset,
    ) -> Result<()> {
        if let Some(p) = self.get(&tp) {
            let mut s = p.lock()?;
            let before = s.unsealed_bytes();
            if s.mark_sealed(last_offset) {
                // Direct durability: sealed is durable; waiting producers and readers learn
                // it through the high watermark.
                p.high_watermark_tx.send_replace(s.high_watermark);
            }
            s.evict(self.tail_keep_bytes());
            let sealed_bytes = (before - s.unsealed_bytes()) as u64;
            self.unsealed_bytes
                .fetch_sub(sealed_bytes, Ordering::AcqRel);
        }
        Ok(())
    }

    /// After a commit refused because a partition's catalogue already goes past where its
    /// chunk starts: an earlier seal of the same batches whose commit failed with an
    /// unknown outcome landed after all (its object is kept, `delete_uncatalogued` asks the
    /// store). Those batches are sealed, under this broker's epoch (one writer per epoch):
    /// marked so, the next seal starts after them instead of being refused forever (found
    /// by the simulation, seed 53).
    async fn reconcile_with_catalog(&self, chunks: &[Chunk]) {
        for c in chunks {
            let tp = c.topic_partition;
            let last = match self.metadata.sync_catalog(tp.topic_id, tp.partition).await {
                Ok(()) => self.metadata.catalog_last(tp.topic_id, tp.partition).await,
                Err(e) => Err(e),
            };
            match last {
                Ok(last) => {
                    let end = last.as_ref().map(|l| CatalogueEnd {
                        last_offset: l.last_offset,
                        leader_epoch: l.leader_epoch,
                    });
                    let Some(up_to) =
                        catalogued_up_to(c.base_offset, c.last_offset, c.leader_epoch, end)
                    else {
                        continue;
                    };
                    tracing::info!(partition = %tp, up_to, key = ?last.map(|l| l.object_key),
                        "batches being sealed were catalogued by an earlier seal; marked sealed");
                    if let Err(e) = self.mark_chunk_sealed(tp, up_to) {
                        tracing::warn!(partition = %tp, error = %e, "marking batches sealed failed");
                    }
                }
                Err(e) => {
                    tracing::debug!(partition = %tp, error = %e, "reading where the catalogue ends failed; the next seal retries")
                }
            }
        }
    }

    /// The first WAL sequence that may not be in the object store yet.
    fn sealed_floor(&self, durable_sequence: u64) -> u64 {
        // Entries fsynced here but not yet committed (waiting for replicas) are not marked in
        // their partitions yet: never go past what the commit tracker has applied.
        let applied = durable_sequence.min(self.commit.applied());
        self.open_partitions()
            .iter()
            .filter_map(|p| p.lock().ok()?.min_unsealed_wal_sequence())
            .chain(self.held_floor())
            .min()
            .unwrap_or(applied)
            .min(applied)
    }

    /// Tells replication where the sealed floor is now (no trim).
    pub(crate) fn refresh_sealed_floor(&self) {
        if let Some(wal) = &self.wal {
            let floor = self.sealed_floor(wal.durable_sequence());
            self.replicator.set_sealed_floor(floor);
        }
    }

    fn trim_wal(&self, durable_sequence: u64) -> Result<()> {
        let Some(wal) = &self.wal else {
            return Ok(());
        };
        let keep_from = self.sealed_floor(durable_sequence);
        wal.trim(keep_from)?;
        // Replicas may drop what is sealed, and a replica whose stream started at or
        // before this point holds everything still unsealed.
        self.replicator.set_sealed_floor(keep_from);
        Ok(())
    }
}

/// How long the object of a failed seal is kept before it is checked and deleted: an
/// unknown outcome (a commit that timed out) has long settled by then.
pub const UNCATALOGUED_DELETE_DELAY: std::time::Duration = std::time::Duration::from_secs(60);
/// Most objects of failed seals remembered (past it, the oldest are left behind, logged).
const UNCATALOGUED_MAX: usize = 10_000;
/// Most of them checked and deleted per tick.
const UNCATALOGUED_PER_TICK: usize = 64;

/// The objects of seals whose catalog commit failed, oldest first. Each failed attempt
/// PUT its object and the next seals the same batches in a new one, so without this an
/// outage of the metadata service (or a fenced broker) leaves an object per tick behind.
#[derive(Default)]
pub struct Uncatalogued {
    objects: std::sync::Mutex<std::collections::VecDeque<(tokio::time::Instant, Uncommitted)>>,
}

/// An object whose commit failed, and the broker its catalog key would be filed under.
#[derive(Clone, Debug)]
struct Uncommitted {
    broker_id: oxbow_metadata::BrokerId,
    key: String,
}

impl Uncatalogued {
    fn note(&self, at: tokio::time::Instant, broker_id: oxbow_metadata::BrokerId, key: String) {
        let Ok(mut objects) = self.objects.lock() else {
            return;
        };
        if objects.len() >= UNCATALOGUED_MAX {
            if let Some((_, dropped)) = objects.pop_front() {
                tracing::warn!(object = %dropped.key, "too many objects of failed seals; leaving one behind");
            }
        }
        objects.push_back((at, Uncommitted { broker_id, key }));
    }

    /// Takes up to `n` objects noted before `before`.
    fn due(&self, before: tokio::time::Instant, n: usize) -> Vec<Uncommitted> {
        let Ok(mut objects) = self.objects.lock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while out.len() < n && objects.front().is_some_and(|(at, _)| *at <= before) {
            if let Some((_, key)) = objects.pop_front() {
                out.push(key);
            }
        }
        out
    }

    /// Puts back objects that could not be settled (checked again next tick).
    fn retry(&self, keys: Vec<Uncommitted>, at: tokio::time::Instant) {
        if let Ok(mut objects) = self.objects.lock() {
            for key in keys.into_iter().rev() {
                objects.push_front((at, key));
            }
        }
    }

    pub fn len(&self) -> usize {
        self.objects.lock().map_or(0, |o| o.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl LogManager {
    /// Deletes the objects of seals that failed at least [`UNCATALOGUED_DELETE_DELAY`]
    /// before `now` and whose catalog key is not stored (checked in the metadata service
    /// itself). One whose key is there was catalogued after all and stays (the catalogue's
    /// own sweep and compaction look after it). Run by the sealer every tick; tests pass the
    /// time.
    pub async fn delete_uncatalogued(&self, now: tokio::time::Instant) {
        let Some(before) = now.checked_sub(UNCATALOGUED_DELETE_DELAY) else {
            return;
        };
        let due = self.uncatalogued.due(before, UNCATALOGUED_PER_TICK);
        let mut unsettled = Vec::new();
        for object in due {
            let key = object.key.as_str();
            match self
                .metadata
                .sealed_object_catalogued(object.broker_id, key)
                .await
            {
                Ok(true) => {}
                Ok(false) => match self.objects.delete(&ObjectPath::from(key)).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                        self.metrics
                            .uncatalogued_objects_deleted
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(object = %key, "deleted the object of a failed seal");
                    }
                    Err(e) => {
                        tracing::debug!(object = %key, error = %e, "could not delete the object of a failed seal; retrying");
                        unsettled.push(object.clone());
                    }
                },
                Err(e) => {
                    tracing::debug!(object = %key, error = %e, "could not check the object of a failed seal; retrying");
                    unsettled.push(object.clone());
                }
            }
        }
        self.uncatalogued.retry(unsettled, before);
    }
}
