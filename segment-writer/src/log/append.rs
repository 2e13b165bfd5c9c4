//! Appending to the partitions this broker leads: [`LogManager::enqueue`] (and
//! [`LogManager::append`], which also waits) for a producer's batch,
//! [`LogManager::write_marker`] for a transaction coordinator's commit/abort marker,
//! `append_recovered` for the batches of a recovered WAL tail.
//!
//! Lifecycle of a producer batch: refused if the lease lapsed or `acks=all` finds too few
//! in-sync WAL copies; validated ([`crate::validate`]); then, under the partition's order
//! lock, refused if the WAL failed (with `--durability direct`: if memory holds the unsealed
//! budget), checked against the producer's sequence (a retry gets its original offset),
//! given its offsets and queued for the WAL. The caller gets a [`PendingAppend`] at once, so
//! a connection goes on to its next request while this one becomes durable;
//! [`PendingAppend::wait`] resolves when the WAL's commit callback has marked the batch
//! durable in its partition (`acks=all`; `acks=1` does not wait), then checks the lease and
//! the in-sync set again. With `--durability direct` there is no WAL: a batch is durable
//! once sealed, when the high watermark passes it. On shutdown,
//! [`LogManager::wait_durable`] lets batches still queued become durable.
//!
//! Append order: an append holds its partition's order lock while it assigns offsets and
//! queues the WAL write, so the WAL holds each partition's batches in offset order. The WAL
//! writer thread marks batches durable (advancing the high watermark) before it publishes
//! its durable sequence, which the sealer relies on when it trims the WAL.

use super::{LogManager, Partition};
use crate::batch::{self, BatchHeader};
use crate::error::{Error, Result};
use crate::partition::{PartitionLogState, SequenceCheck};
use crate::replicate::Replicator;
use crate::txn;
use crate::txn_verify::VerificationGuard;
use crate::validate;
use crate::wal::{BatchCrc, OnDurable};
use oxbow_metadata::{LeaseGuard, LeaseId, Offset};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

/// Longest an `acks=all` write waits for the high watermark to pass it (its upload with
/// `--durability direct`, which the object store being down holds up; its original's
/// commit for a retry): the producer gets a retriable error rather than a hung request.
const COMMIT_WAIT_TIMEOUT: Duration = Duration::from_secs(30);

/// The topic configs an append obeys, read from the caller's current copy of the topic on
/// every append (the gateway's watched cache), so a config changed at runtime applies to the
/// next batch, as in Kafka, not at the partition's next open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendPolicy {
    /// `max.message.bytes`: the largest batch as sent.
    pub max_message_bytes: usize,
    /// `message.timestamp.type=LogAppendTime`: the broker stamps batches.
    pub log_append_time: bool,
    /// `min.insync.replicas`: in-sync WAL copies (this broker's included) `acks=all` needs.
    pub min_insync_replicas: i32,
    /// `message.timestamp.before.max.ms` / `after.max.ms`: how far a `CreateTime` record
    /// may lie from the broker's clock.
    pub timestamp_before_max_ms: i64,
    pub timestamp_after_max_ms: i64,
    /// `cleanup.policy` includes `compact`: every record needs a key.
    pub compacted: bool,
}

impl AppendPolicy {
    pub fn of(configs: &oxbow_metadata::TopicConfigs) -> AppendPolicy {
        AppendPolicy {
            max_message_bytes: configs.max_message_bytes(),
            log_append_time: configs.log_append_time(),
            min_insync_replicas: configs.min_insync_replicas(),
            timestamp_before_max_ms: configs.timestamp_before_max_ms(),
            timestamp_after_max_ms: configs.timestamp_after_max_ms(),
            compacted: configs.compacted(),
        }
    }
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
    pub(super) durable: Option<Durable>,
    /// For `acks=all`: the in-sync set must still be large enough when the ack goes out.
    pub(super) insync_check: Option<(Arc<Replicator>, i32)>,
    /// Checked again once durable: the lease may have lapsed while the batch waited. With
    /// the lease held when the batch was taken (only a renewal of that one vouches for it).
    pub(super) lease: Option<(LeaseGuard, Option<LeaseId>)>,
}

/// What [`LogManager::append_ordered`] did.
pub(super) enum Queued {
    /// A retry of the batch already at this offset.
    Duplicate(Offset),
    /// Held at this offset; durable once this resolves.
    Appended(Offset, Durable),
}

/// What an `acks=all` append waits for.
pub(super) enum Durable {
    /// The WAL's commit callback (local fsync and every in-sync replica).
    Wal(oneshot::Receiver<Result<u64>>),
    /// Committed once the high watermark passes `last_offset`: with `--durability direct`
    /// that is when the batch is sealed; for a producer's retry of a batch already held
    /// (a duplicate) it is when the original is committed, however it is made durable.
    Committed {
        high_watermark: watch::Receiver<Offset>,
        last_offset: Offset,
    },
}

impl Durable {
    async fn wait(self) -> Result<()> {
        match self {
            Durable::Wal(rx) => match rx.await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(Error::ShuttingDown),
            },
            Durable::Committed {
                mut high_watermark,
                last_offset,
            } => {
                let committed = tokio::time::timeout(
                    COMMIT_WAIT_TIMEOUT,
                    high_watermark.wait_for(|hw| *hw > last_offset),
                )
                .await;
                match committed {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(_)) => Err(Error::ShuttingDown),
                    Err(_) => Err(Error::NotCommittedInTime {
                        last_offset,
                        waited: COMMIT_WAIT_TIMEOUT,
                    }),
                }
            }
        }
    }
}

impl PendingAppend {
    /// Waits for durability (for [`Acks::All`]); immediate otherwise. Fails with
    /// [`Error::NotLeader`] if this broker's lease is no longer certainly alive: another
    /// broker may lead the partition by now, so the batch may never be committed.
    pub async fn wait(self) -> Result<Appended> {
        if let Some(durable) = self.durable {
            durable.wait().await?;
        }
        if let Some((guard, lease)) = &self.lease {
            // The batch is written: never answer as if it were not (NOT_LEADER tells a
            // client it was not persisted, and an idempotent producer may then send it again
            // under a new epoch — a duplicate). A lapse that ends with the same lease renewed
            // (the metadata service was unreachable a while) was a pause: nothing took over,
            // so the ack stands. Otherwise the outcome is unknown to this broker.
            if !guard.is_valid() && !guard.wait_renewed(*lease, LEASE_LAPSE_WAIT).await {
                return Err(Error::LeaseLapsedAfterAppend);
            }
        }
        if let Some((replicator, required)) = &self.insync_check {
            let in_sync = replicator.in_sync_copies();
            if (in_sync as i64) < i64::from(*required) {
                return Err(Error::NotEnoughReplicasAfterAppend {
                    in_sync,
                    required: *required,
                });
            }
        }
        Ok(self.appended)
    }
}

pub(super) fn check_lease(lease: Option<&LeaseGuard>) -> Result<()> {
    match lease {
        Some(g) if !g.is_valid() => Err(Error::LeaseExpired),
        _ => Ok(()),
    }
}

/// The guard with the lease it holds now, for a [`PendingAppend`].
pub(super) fn held_lease(lease: Option<&LeaseGuard>) -> Option<(LeaseGuard, Option<LeaseId>)> {
    lease.map(|g| (g.clone(), g.lease_id()))
}

/// Longest a written batch waits for a lapsed lease to be renewed before its producer is
/// told the outcome is unknown (the produce request's own timeout usually answers first).
const LEASE_LAPSE_WAIT: Duration = Duration::from_secs(30);

/// For how long after refusing an append for a lapsed lease a producer's sequence gap is
/// put down to that refusal.
const LEASE_REFUSAL_WINDOW: Duration = Duration::from_secs(30);

/// When this broker last refused an append because its lease had lapsed.
///
/// A client pipelines several requests per partition. While the lease lapses, the first is
/// refused (NOT_LEADER: not written) — and if the lease is renewed before the next arrives,
/// that one carries a sequence past the refused one. Kafka's answer to a gap is
/// OUT_OF_ORDER_SEQUENCE_NUMBER, on which librdkafka bumps its producer epoch and renumbers
/// every unacknowledged message of every partition — including writes whose outcome it had
/// been told is unknown, which then land twice. Such a gap is this broker's doing, so within
/// [`LEASE_REFUSAL_WINDOW`] of a refusal it is answered as the refusal was (NOT_LEADER, not
/// written): the client sends the refused batch again first, in order.
#[derive(Default)]
pub(crate) struct LeaseRefusals {
    last: std::sync::Mutex<Option<Instant>>,
}

impl LeaseRefusals {
    fn record(&self, now: Instant) {
        if let Ok(mut last) = self.last.lock() {
            *last = Some(now);
        }
    }

    fn recent(&self, now: Instant) -> bool {
        self.last
            .lock()
            .ok()
            .and_then(|last| *last)
            .is_some_and(|at| now.saturating_duration_since(at) < LEASE_REFUSAL_WINDOW)
    }
}

impl LogManager {
    /// Appends one producer batch and waits as long as `acks` asks (see [`Self::enqueue`]).
    pub async fn append(
        &self,
        partition: &Arc<Partition>,
        raw: &[u8],
        policy: &AppendPolicy,
        acks: Acks,
    ) -> Result<Appended> {
        self.enqueue(partition, raw, policy, acks)
            .await?
            .wait()
            .await
    }

    /// Appends one producer batch: validate, check sequence, assign offsets and queue the
    /// WAL write. Returns once the batch has its offsets, so a connection can go on to its
    /// next request (keeping per-connection order) while this one becomes durable.
    /// Transactional batches are taken unverified (see [`Self::enqueue_verified`]).
    pub async fn enqueue(
        &self,
        partition: &Arc<Partition>,
        raw: &[u8],
        policy: &AppendPolicy,
        acks: Acks,
    ) -> Result<PendingAppend> {
        self.enqueue_checked(partition, raw, policy, acks, None)
            .await
    }

    /// [`Self::enqueue`] for a Kafka producer's batch under KIP-890 verification: the first
    /// transactional batch of a producer with no transaction open in the partition is
    /// admitted only with the `guard` that [`Self::start_txn_verification`] handed out and
    /// no marker has cleared since; otherwise [`Error::InvalidTxnState`]. A retry of a batch
    /// already appended is answered as usual.
    pub async fn enqueue_verified(
        &self,
        partition: &Arc<Partition>,
        raw: &[u8],
        policy: &AppendPolicy,
        acks: Acks,
        guard: VerificationGuard,
    ) -> Result<PendingAppend> {
        self.enqueue_checked(partition, raw, policy, acks, Some(guard))
            .await
    }

    /// The guard `producer_id`'s next transactional batch to `partition` must carry
    /// ([`crate::txn_verify`]); [`VerificationGuard::SENTINEL`] when its transaction is open
    /// there already and the coordinator need not be asked.
    pub fn start_txn_verification(
        &self,
        partition: &Arc<Partition>,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<VerificationGuard> {
        Ok(partition
            .lock()?
            .start_txn_verification(producer_id, producer_epoch))
    }

    async fn enqueue_checked(
        &self,
        partition: &Arc<Partition>,
        raw: &[u8],
        policy: &AppendPolicy,
        acks: Acks,
        verification: Option<VerificationGuard>,
    ) -> Result<PendingAppend> {
        let log_append_time = policy.log_append_time;
        if let Err(e) = check_lease(self.lease.get()) {
            self.lease_refusals.record(self.clock.now());
            return Err(e);
        }
        // With direct durability an acknowledged write is in the object store, which keeps
        // its own copies: min.insync.replicas is about WAL copies, of which there are none.
        let check_insync = acks == Acks::All && self.wal.is_some();
        if check_insync {
            let in_sync = self.replicator.in_sync_copies();
            if (in_sync as i64) < i64::from(policy.min_insync_replicas) {
                return Err(Error::NotEnoughReplicas {
                    in_sync,
                    required: policy.min_insync_replicas,
                });
            }
        }
        let now = self.clock.unix_ms();
        let rules = validate::ProduceRules {
            max_message_bytes: policy.max_message_bytes,
            log_append_time,
            max_decompressed_batch_bytes: self.settings.max_decompressed_batch_bytes,
            now_ms: now,
            timestamp_before_max_ms: policy.timestamp_before_max_ms,
            timestamp_after_max_ms: policy.timestamp_after_max_ms,
            compacted: policy.compacted,
        };
        let validated = validate::validate_produced(raw, &rules)?;
        let mut header: BatchHeader = validated.header;
        let corrected;
        let raw = if !log_append_time && validated.max_timestamp != header.max_timestamp {
            corrected = batch::with_max_timestamp(raw, validated.max_timestamp);
            header.max_timestamp = validated.max_timestamp;
            &corrected[..]
        } else {
            raw
        };
        let log_append_time_ms = if log_append_time { now } else { -1 };
        let queued = self
            .append_ordered(
                partition,
                &header,
                raw,
                log_append_time.then_some(log_append_time_ms),
                |s| {
                    let check = match s.check_sequence(&header) {
                        Err(Error::OutOfOrderSequence { expected, got, .. })
                            if got > expected && self.lease_refusals.recent(self.clock.now()) =>
                        {
                            return Err(Error::LeaseExpired);
                        }
                        other => other?,
                    };
                    if let (SequenceCheck::Append, Some(guard)) = (check, verification) {
                        s.check_txn_verification(&header, guard)?;
                    }
                    Ok(check)
                },
            )
            .await?;
        let (base_offset, durable) = match queued {
            Queued::Duplicate(base_offset) => {
                // A retry of a batch held here is answered with the original's offset once
                // the original is committed, as Kafka's delayed produce waits for the high
                // watermark to pass a duplicate: the original may still be on its way to
                // the disk and the replicas (its own request timed out, say), and an ack
                // before that could be for a batch a crash then loses.
                let durable = (acks == Acks::All).then(|| Durable::Committed {
                    high_watermark: partition.subscribe(),
                    last_offset: base_offset + i64::from(header.last_offset_delta),
                });
                return Ok(PendingAppend {
                    appended: Appended {
                        base_offset,
                        log_append_time_ms,
                        duplicate: true,
                    },
                    durable,
                    insync_check: check_insync
                        .then(|| (self.replicator.clone(), policy.min_insync_replicas)),
                    lease: held_lease(self.lease.get()),
                });
            }
            Queued::Appended(base_offset, durable) => (base_offset, durable),
        };
        self.metrics.count_append(raw.len(), header.record_count);
        Ok(PendingAppend {
            appended: Appended {
                base_offset,
                log_append_time_ms,
                duplicate: false,
            },
            durable: (acks == Acks::All).then_some(durable),
            insync_check: check_insync
                .then(|| (self.replicator.clone(), policy.min_insync_replicas)),
            lease: held_lease(self.lease.get()),
        })
    }

    /// Writes the COMMIT (`commit`) or ABORT marker ending `producer_id`'s transaction in
    /// `partition` (the transaction coordinator, once its decision is durable) and waits
    /// until the marker is durable, as an `acks=all` produce: the same order lock, lease and
    /// in-sync checks and WAL (or, with `--durability direct`, the seal), but no client
    /// validation and no sequence check. Returns the marker's offset. Refused with
    /// [`Error::ProducerFenced`] if the partition remembers the producer at a newer epoch
    /// than `producer_epoch`. A marker for a producer with nothing open here is written
    /// all the same (Kafka does): it ends nothing.
    pub async fn write_marker(
        &self,
        partition: &Arc<Partition>,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
        policy: &AppendPolicy,
    ) -> Result<Offset> {
        let pending = self
            .enqueue_marker(
                partition,
                producer_id,
                producer_epoch,
                commit,
                coordinator_epoch,
                policy,
            )
            .await?;
        Ok(pending.wait().await?.base_offset)
    }

    /// [`Self::write_marker`] up to its WAL enqueue: the caller waits on the returned
    /// append (so a handoff's gate need only be held until here, as for a produce).
    pub async fn enqueue_marker(
        &self,
        partition: &Arc<Partition>,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
        policy: &AppendPolicy,
    ) -> Result<PendingAppend> {
        check_lease(self.lease.get())?;
        let check_insync = self.wal.is_some();
        if check_insync {
            let in_sync = self.replicator.in_sync_copies();
            if (in_sync as i64) < i64::from(policy.min_insync_replicas) {
                return Err(Error::NotEnoughReplicas {
                    in_sync,
                    required: policy.min_insync_replicas,
                });
            }
        }
        let raw = txn::marker_batch(
            producer_id,
            producer_epoch,
            txn::Marker {
                commit,
                coordinator_epoch,
            },
            self.clock.unix_ms(),
        );
        let header = batch::peek_header(&raw)?
            .ok_or_else(|| Error::Internal("a marker batch is not whole".into()))?;
        let queued = self
            .append_ordered(partition, &header, &raw, None, |s| {
                match s.producer_epoch(producer_id) {
                    Some(current) if current > producer_epoch => Err(Error::ProducerFenced {
                        producer_id,
                        current,
                        got: producer_epoch,
                    }),
                    _ => Ok(SequenceCheck::Append),
                }
            })
            .await?;
        let Queued::Appended(offset, durable) = queued else {
            return Err(Error::Internal("a marker was taken for a retry".into()));
        };
        Ok(PendingAppend {
            appended: Appended {
                base_offset: offset,
                log_append_time_ms: -1,
                duplicate: false,
            },
            durable: Some(durable),
            insync_check: check_insync
                .then(|| (self.replicator.clone(), policy.min_insync_replicas)),
            lease: held_lease(self.lease.get()),
        })
    }

    /// The ordered part of an append: under the partition's order lock, refuses if the WAL
    /// failed (direct: if memory holds the unsealed budget), asks `admit` (the sequence
    /// check, or a marker's epoch check), stamps the batch with its offset and the leader
    /// epoch (and `log_append_time_ms`), holds it in the partition and queues its WAL write.
    pub(super) async fn append_ordered(
        &self,
        partition: &Arc<Partition>,
        header: &BatchHeader,
        raw: &[u8],
        log_append_time_ms: Option<i64>,
        admit: impl FnOnce(&PartitionLogState) -> Result<SequenceCheck>,
    ) -> Result<Queued> {
        let (base_offset, durable) = {
            let _order = partition.append_order.lock().await;
            match &self.wal {
                Some(wal) => {
                    if let Err(e) = wal.check_accepting() {
                        if matches!(e, Error::WalFailed(_)) {
                            self.metrics
                                .storage_refusals
                                .fetch_add(1, Ordering::Relaxed);
                        }
                        return Err(e);
                    }
                }
                // Direct: memory holds what awaits upload; bound it like the WAL budget.
                None if self.unsealed_bytes() >= self.settings.wal.budget_bytes => {
                    return Err(Error::UnsealedFull {
                        budget_bytes: self.settings.wal.budget_bytes,
                    });
                }
                None => {}
            }
            let (base_offset, epoch, stamped) = {
                let mut s = partition.lock()?;
                if let SequenceCheck::Duplicate(base_offset) = admit(&s)? {
                    return Ok(Queued::Duplicate(base_offset));
                }
                let stamped =
                    batch::stamp(raw, s.next_offset(), s.leader_epoch, log_append_time_ms);
                let base = s.append(header, stamped.clone());
                (base, s.leader_epoch, stamped)
            };
            let durable = match &self.wal {
                Some(wal) => {
                    let (tx, rx) = oneshot::channel();
                    let queued = wal
                        .append(
                            partition.topic_partition,
                            epoch,
                            stamped.clone(),
                            // Every caller checked or built the batch's CRC: a producer's
                            // batch was validated, a marker built here, a mirrored batch
                            // checked; stamping keeps it valid.
                            BatchCrc::Verified,
                            self.durability_callback(partition.clone(), base_offset, tx),
                        )
                        .await;
                    if let Err(e) = queued {
                        partition.lock()?.undo_last_append(base_offset);
                        return Err(e);
                    }
                    Durable::Wal(rx)
                }
                // Direct: durable once sealed; the sealer's high watermark says when.
                None => Durable::Committed {
                    high_watermark: partition.subscribe(),
                    last_offset: base_offset + i64::from(header.last_offset_delta),
                },
            };
            (base_offset, durable)
        };
        let size = raw.len() as u64;
        let unsealed = self.unsealed_bytes.fetch_add(size, Ordering::AcqRel) + size;
        if unsealed >= self.settings.flush_bytes {
            self.seal_wanted.notify_one();
        }
        Ok(Queued::Appended(base_offset, durable))
    }

    /// Waits until every batch appended so far is durable in the WAL (or `timeout`
    /// passes); used on shutdown so `acks=1` writes still queued are not dropped.
    pub async fn wait_durable(&self, timeout: Duration) -> bool {
        let deadline = self.clock.now() + timeout;
        loop {
            let pending = self.open_partitions().iter().any(|p| {
                p.lock()
                    .map(|s| s.has_pending_durability())
                    .unwrap_or(false)
            });
            if !pending {
                return true;
            }
            let Some(wal) = &self.wal else {
                // Direct: the final seal is what makes pending writes durable.
                return true;
            };
            if self.clock.now() >= deadline || wal.check_accepting().is_err() {
                return false;
            }
            self.clock.sleep(Duration::from_millis(5)).await;
        }
    }

    /// Appends the batches of `tail` that continue `partition` from `from` to this broker's
    /// WAL, and waits until they are committed.
    pub(super) async fn append_recovered(
        &self,
        partition: &Arc<Partition>,
        tail: &crate::leadership::recover::Tail,
        from: Offset,
    ) -> Result<()> {
        let batches = crate::leadership::recover::chain(tail, partition.topic_partition, from)?;
        if batches.is_empty() {
            return Ok(());
        }
        let mut waits = Vec::with_capacity(batches.len());
        let mut bytes = 0u64;
        {
            let _order = partition.append_order.lock().await;
            for b in &batches {
                let Some(h) = batch::peek_header(b)? else {
                    continue;
                };
                let base = {
                    let mut s = partition.lock()?;
                    if h.base_offset != s.next_offset() {
                        return Err(Error::Internal(format!(
                            "recovered batch at {} does not continue the log at {}",
                            h.base_offset,
                            s.next_offset()
                        )));
                    }
                    s.append(&h, b.clone())
                };
                let (tx, rx) = oneshot::channel();
                let p = partition.clone();
                self.wal()?
                    .append(
                        partition.topic_partition,
                        h.partition_leader_epoch,
                        b.clone(),
                        BatchCrc::Unchecked,
                        self.durability_callback(p, base, tx),
                    )
                    .await?;
                waits.push(rx);
                bytes += b.len() as u64;
            }
        }
        self.unsealed_bytes.fetch_add(bytes, Ordering::AcqRel);
        for rx in waits {
            match rx.await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(Error::ShuttingDown),
            }
        }
        tracing::info!(
            partition = %format!("{}-{}", partition.topic_name, partition.topic_partition.partition),
            batches = batches.len(), bytes, from, "recovered a WAL tail"
        );
        Ok(())
    }

    /// The WAL callback of an append: once the entry is committed (fsynced here and on every
    /// in-sync replica), mark it durable in its partition and answer the waiter.
    fn durability_callback(
        &self,
        partition: Arc<Partition>,
        base_offset: Offset,
        tx: oneshot::Sender<Result<u64>>,
    ) -> OnDurable {
        self.commit.gate(Box::new(move |result| {
            if let Ok(seq) = &result {
                partition.on_durable(base_offset, Some(*seq));
            }
            let _ = tx.send(result);
        }))
    }
}
