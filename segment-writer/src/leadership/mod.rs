//! Leading a partition, in one place: each decision a pure core (`step(event) -> actions`,
//! no I/O, no clock) beside the driver that carries it out.
//!
//! - This file: [`Leadership`], the one place a broker gives up leading a partition on
//!   purpose — the per-partition append gate and the graceful handoff of a batch of
//!   partitions (ARCHITECTURE.md decision 15). The decisions are [`handoff_state`]'s pure
//!   [`HandoffCore`]; this driver carries out its actions against the [`LogManager`] (seal,
//!   high-watermark watches, catalog) and the metadata store (state reads, the
//!   compare-and-swap), with time from the log's injected clock.
//! - [`fence`]: coming back after the metadata lease was lost (seal under the old epochs,
//!   bump, forget); its core is [`fence_state`].
//! - [`recover`]: a dead broker's (or a lost WAL's) tail read back from its WAL replicas,
//!   before the partitions are served (decision 13); [`recovery_state`]: the recoveries
//!   waiting for a replica to answer, and their backoff (driven by the log's
//!   `LogRecovery`).
//!
//! Who hands off what, and to whom, is the caller's decision (the gateway's topic follower
//! for `transfer_to` requests, its SIGTERM path with placement); this module knows only how.
//!
//! Lifecycle: one [`Leadership`] per broker, beside its [`LogManager`], for the process's
//! life. Every append passes [`Leadership::append_permit`] and holds the permit until its
//! batch is queued for the WAL, so closing a gate waits for appends already past it and
//! the log end is final once every gate of a batch is closed. A gate is dropped when its
//! partition is forgotten ([`Leadership::forget`]), so a partition led here again starts
//! open.

pub mod fence;
pub mod fence_state;
pub mod handoff_state;
pub mod recover;
pub mod recovery_state;

use crate::error::{Error, Result};
use crate::leadership::handoff_state::{
    Action, Event, Handoff, HandoffCore, Kept, Moved, Observed, OpenPartition,
};
use crate::log::{Durability, LogManager};
use oxbow_metadata::{PartitionState, TopicId, TopicPartition};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedRwLockReadGuard, RwLock};

/// Longest a batch waits for its appends to become durable before it is given up (the
/// request is then withdrawn by the controller's timeout and may be asked again). Longer
/// rides out a slow disk or a lagging WAL replica; shorter keeps gates closed (appends
/// refused) for less time when the WAL is stuck.
pub const DURABLE_WAIT: Duration = Duration::from_secs(5);

/// A partition's append gate: `true` = closed.
type Gate = Arc<RwLock<bool>>;

/// Gates and graceful handoff of the partitions one broker leads (see the module docs).
pub struct Leadership {
    log: Arc<LogManager>,
    /// Append gates of partitions; a partition without one is open.
    gates: Mutex<HashMap<TopicPartition, Gate>>,
    /// See [`DURABLE_WAIT`].
    durable_wait: Duration,
}

/// Leave to append to one partition: while held, its gate cannot close. Hold it until the
/// batch is queued for the WAL (`LogManager::enqueue` has returned), then drop it.
#[must_use = "the gate is open only while the permit is held"]
pub struct AppendPermit {
    _open: OwnedRwLockReadGuard<bool>,
}

impl Leadership {
    pub fn new(log: Arc<LogManager>) -> Leadership {
        Leadership {
            log,
            gates: Mutex::new(HashMap::new()),
            durable_wait: DURABLE_WAIT,
        }
    }

    /// [`Leadership::new`] with another bound on the durability wait.
    pub fn with_durable_wait(mut self, durable_wait: Duration) -> Leadership {
        self.durable_wait = durable_wait;
        self
    }

    /// The log this leads for.
    pub fn log(&self) -> &Arc<LogManager> {
        &self.log
    }

    fn gate(&self, tp: TopicPartition) -> Gate {
        let mut g = match self.gates.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        g.entry(tp).or_default().clone()
    }

    /// Leave to append to `tp` (named `name` in errors), or [`Error::NotLeader`] while the
    /// partition is being handed to another broker (clients retry after a metadata
    /// refresh). Waits only while a handoff is closing the gate.
    pub async fn append_permit(&self, tp: TopicPartition, name: &str) -> Result<AppendPermit> {
        let open = self.gate(tp).read_owned().await;
        if *open {
            return Err(Error::NotLeader(format!(
                "{name}-{} (being handed to another broker)",
                tp.partition
            )));
        }
        Ok(AppendPermit { _open: open })
    }

    /// Closes a gate, waiting for the appends already past it to be enqueued.
    async fn close_gate(&self, tp: TopicPartition) {
        *self.gate(tp).write().await = true;
    }

    async fn open_gate(&self, tp: TopicPartition) {
        *self.gate(tp).write().await = false;
    }

    /// Stops serving a partition this broker no longer leads (it answers
    /// NOT_LEADER_OR_FOLLOWER from now on) and drops its gate.
    pub fn forget(&self, tp: TopicPartition) {
        self.log.forget_where(|x| *x == tp);
        if let Ok(mut g) = self.gates.lock() {
            g.remove(&tp);
        }
    }

    /// Acts on a partition's stored state as the topic follower sees it: a partition open
    /// here but led elsewhere now, or at a newer epoch (this broker was fenced meanwhile), is
    /// forgotten. Returns whether it was.
    pub fn follow_state(&self, topic_id: TopicId, state: &PartitionState) -> bool {
        let tp = TopicPartition::new(topic_id, state.partition);
        let Some(open) = self.log.get(&tp) else {
            return false;
        };
        let open_epoch = open.leader_epoch().unwrap_or(i32::MAX);
        if state.leader == self.log.broker_id() && state.leader_epoch <= open_epoch {
            // Still led here: a log start stored meanwhile (a step whose answer was lost)
            // is this partition's too.
            self.log.follow_log_start(&open, state.log_start_offset);
            return false;
        }
        tracing::info!(
            partition = %format!("{}-{}", open.topic_name, state.partition),
            leader = state.leader, leader_epoch = state.leader_epoch, open_epoch,
            "no longer the leader; stopped serving the partition"
        );
        self.forget(tp);
        true
    }

    /// Forgets every partition of a deleted topic (its unsealed data goes with it).
    pub fn drop_topic(&self, topic_id: TopicId) {
        self.log.drop_topic(topic_id);
        if let Ok(mut g) = self.gates.lock() {
            g.retain(|tp, _| tp.topic_id != topic_id);
        }
    }

    /// Hands `batch` over (decision 15, [`HandoffCore`]); returns the partitions that moved,
    /// with their states as stored. The rest stay here, their gates open.
    pub async fn hand_off(&self, batch: &[Handoff]) -> Vec<Moved> {
        // A partition led here but not open may still have entries in this broker's WAL
        // (replayed after a restart without an open, or held after a lease loss): open it
        // first, so they are in its log and sealed and checked with the rest. Moving it
        // unopened left them behind (found by the simulation, seed 29). One that cannot be
        // opened now stays.
        let me = self.log.broker_id();
        let mut ready = Vec::with_capacity(batch.len());
        for h in batch {
            if self.log.get(&h.topic_partition()).is_none() {
                if let Ok(Some(topic)) = self.log.metadata.topic_by_id(h.topic_id).await {
                    let led_here = topic.partition(h.partition).is_some_and(|s| s.leader == me);
                    if led_here {
                        if let Err(e) = self.log.partition(&topic, h.partition).await {
                            tracing::warn!(partition = %format!("{}-{}", topic.name, h.partition),
                                error = %e, "cannot open the partition to hand it over; it stays");
                            continue;
                        }
                    }
                }
            }
            ready.push(*h);
        }
        let batch = &ready[..];
        let mut core = HandoffCore::new(me, batch);
        let mut events = VecDeque::from([Event::Begin {
            owes_own_tail: self.log.owes_own_tail(),
        }]);
        while let Some(event) = events.pop_front() {
            for action in core.step(event) {
                if let Some(next) = self.apply(action, &mut events).await {
                    return next;
                }
            }
        }
        // The core answers every event of its phase, so the queue empties only after Done.
        tracing::error!("handoff stopped before it finished; nothing more moves");
        Vec::new()
    }

    /// Carries out one action, queueing the event it reports; `Some` once the batch is done.
    async fn apply(&self, action: Action, events: &mut VecDeque<Event>) -> Option<Vec<Moved>> {
        let text = |e: Error| e.to_string();
        match action {
            Action::CloseGates(tps) => {
                for tp in tps {
                    self.close_gate(tp).await;
                }
                events.push_back(Event::GatesClosed);
            }
            Action::WaitDurable(tps) => events.push_back(if self.wait_durable(&tps).await {
                Event::Durable
            } else {
                Event::DurableTimedOut
            }),
            Action::Seal => {
                let sealed = self.log.seal_once().await.map(|_| ()).map_err(text);
                events.push_back(Event::Sealed(sealed));
            }
            Action::ReadState(h) => events.push_back(Event::StateRead(self.observe(h).await)),
            Action::ReadCatalogEnd {
                topic_partition,
                log_start_offset,
            } => {
                let end = self
                    .log
                    .catalog_end(topic_partition, log_start_offset)
                    .await;
                events.push_back(Event::CatalogEndRead(end.map_err(text)));
            }
            Action::Swap {
                topic_id,
                expected_version,
                next,
            } => {
                let stored = self
                    .log
                    .metadata
                    .update_partition(topic_id, expected_version, next)
                    .await
                    .map_err(|e| e.to_string());
                events.push_back(Event::Swapped(stored));
            }
            Action::Forget(tp) => self.forget(tp),
            Action::ReopenGates(tps) => {
                for tp in tps {
                    self.open_gate(tp).await;
                }
            }
            Action::Done { moved, kept } => {
                self.report(&moved, &kept);
                return Some(moved);
            }
        }
        None
    }

    /// Waits until every open partition of `tps` has its high watermark at its log end
    /// (the gates are closed, so the log end is final), at most [`Self::durable_wait`]
    /// by the log's clock. `false` if the bound passed first.
    async fn wait_durable(&self, tps: &[TopicPartition]) -> bool {
        if self.log.settings.durability == Durability::Direct {
            // No WAL: the seal that follows is what makes these appends durable.
            return true;
        }
        let clock = self.log.clock.clone();
        let deadline = clock.now() + self.durable_wait;
        for tp in tps {
            let Some(p) = self.log.get(tp) else {
                continue; // not open here: nothing appended
            };
            let Ok((_, _, log_end)) = p.offsets() else {
                return false;
            };
            let mut high_watermark = p.subscribe();
            tokio::select! {
                // An error: the partition was dropped meanwhile, so nothing of it waits.
                _ = high_watermark.wait_for(|hw| *hw >= log_end) => {}
                _ = clock.sleep_until(deadline) => return false,
            }
        }
        true
    }

    /// Step 4's reads for `h`: its stored state and this broker's open partition.
    async fn observe(&self, h: Handoff) -> std::result::Result<Observed, String> {
        let stored = self
            .log
            .metadata
            .partition_state(h.topic_id, h.partition)
            .await
            .map_err(|e| e.to_string())?
            .map(|(_, state)| state);
        let open = match self.log.get(&h.topic_partition()) {
            Some(p) => {
                let (_, _, log_end) = p.offsets().map_err(|e| e.to_string())?;
                let leader_epoch = p.leader_epoch().map_err(|e| e.to_string())?;
                Some(OpenPartition {
                    leader_epoch,
                    log_end,
                })
            }
            None => None,
        };
        Ok(Observed { stored, open })
    }

    fn report(&self, moved: &[Moved], kept: &[(Handoff, Kept)]) {
        for m in moved {
            tracing::info!(topic_id = %m.topic_id, partition = m.state.partition,
                to = m.state.leader, leader_epoch = m.state.leader_epoch,
                "handed the partition over");
        }
        for (h, why) in kept {
            match why {
                // Expected outcomes of a changed request, not trouble.
                Kept::Gone
                | Kept::NotLeader { .. }
                | Kept::TargetIsSelf
                | Kept::Withdrawn { .. }
                | Kept::EpochChanged { .. } => {
                    tracing::debug!(topic_id = %h.topic_id, partition = h.partition, to = h.to,
                        reason = ?why, "not handed over")
                }
                Kept::OwesOwnTail => tracing::info!(topic_id = %h.topic_id,
                    partition = h.partition, to = h.to,
                    "handoff postponed: this broker's lost WAL tail is not recovered yet"),
                Kept::NotDurable
                | Kept::SealFailed(_)
                | Kept::Unsealed { .. }
                | Kept::Failed(_) => tracing::warn!(topic_id = %h.topic_id,
                    partition = h.partition, to = h.to, reason = ?why,
                    "handoff postponed; the partition stays here"),
            }
        }
    }
}
