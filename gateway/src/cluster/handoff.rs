//! Graceful leadership transfer, carried out by the partition's current leader.
//!
//! Protocol (ARCHITECTURE.md decision 15): someone — the controller's balancer, `oxbow
//! partitions reassign` (AlterPartitionReassignments), or this broker's own SIGTERM — wants
//! partition P moved from its live leader L to broker T. Requests from others are a
//! compare-and-swap setting `transfer_to = T` on P's state; L sees it through its topic
//! watch and runs [`hand_off`] for a batch of such partitions:
//! 1. close each partition's append gate (appends already past it finish enqueueing; later
//!    ones get NOT_LEADER_OR_FOLLOWER, which clients retry after a metadata refresh);
//! 2. wait until everything appended is durable (high watermark = log end), bounded;
//! 3. seal once: one object for the whole batch, catalogued under L's epochs;
//! 4. per partition, re-read the stored state and check: L still leads it at the epoch it
//!    has open, the request still stands (`transfer_to = T`), and the catalog ends where
//!    the partition's log ends (nothing unsealed); then CAS {leader T, epoch + 1,
//!    transfer_to cleared}. `recover_from` stays as it was: nothing of L needs recovering;
//! 5. forget the partition (T opens it at the new epoch from the catalog on first use).
//!
//! Anything failing before the CAS reopens the gate and leaves the request for the
//! controller's timeout to withdraw; nothing acknowledged is ever left only in L's WAL.
//! Lifecycle: [`run_handoffs`] is one background task per broker fed by the topic follower
//! through a bounded queue; [`hand_off_all`] runs once on SIGTERM.

use super::controller_state::transferred_state;
use super::placement::{self, Slot};
use crate::broker::Broker;
use crate::error::Result;
use oxbow_metadata::{BrokerId, PartitionId, TopicId, TopicPartition};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Capacity of the queue from the topic follower to the handoff worker.
pub const QUEUE_CAPACITY: usize = 1024;
/// Longest wait for a batch's appends to become durable before giving up (the request is
/// then withdrawn by the controller's timeout and may be asked again).
const DURABLE_WAIT: Duration = Duration::from_secs(5);

/// Hand partition `partition` of `topic_id` to broker `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handoff {
    pub topic_id: TopicId,
    pub partition: PartitionId,
    pub to: BrokerId,
    /// Asked for through `transfer_to` (which must still stand); `false` for this broker's
    /// own SIGTERM handoff.
    pub requested: bool,
}

impl Handoff {
    fn tp(&self) -> TopicPartition {
        TopicPartition::new(self.topic_id, self.partition)
    }
}

/// Carries out transfer requests until `shutdown`, in batches of whatever is queued.
pub async fn run_handoffs(
    broker: Arc<Broker>,
    mut requests: mpsc::Receiver<Handoff>,
    shutdown: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = requests.recv() => match r {
                Some(r) => r,
                None => return,
            },
        };
        let mut batch: BTreeMap<TopicPartition, Handoff> = BTreeMap::new();
        batch.insert(first.tp(), first);
        while let Ok(r) = requests.try_recv() {
            batch.insert(r.tp(), r);
        }
        let batch: Vec<Handoff> = batch.into_values().collect();
        let moved = hand_off(&broker, &batch).await;
        if moved > 0 {
            tracing::info!(moved, asked = batch.len(), "handed partitions over");
        }
    }
}

/// Runs the protocol of the module docs for `batch`; returns how many partitions moved.
pub async fn hand_off(broker: &Broker, batch: &[Handoff]) -> usize {
    if batch.is_empty() {
        return 0;
    }
    let me = broker.settings.broker_id;
    for h in batch {
        broker.close_gate(h.tp()).await;
    }
    let reopen = |hs: Vec<Handoff>| async move {
        for h in hs {
            broker.open_gate(h.tp()).await;
        }
    };
    if !all_durable(broker, batch).await {
        tracing::warn!(
            partitions = batch.len(),
            "appends did not become durable in time; handoff postponed"
        );
        reopen(batch.to_vec()).await;
        return 0;
    }
    if let Err(e) = broker.log.seal_once().await {
        tracing::warn!(error = %e, "sealing before a handoff failed; handoff postponed");
        reopen(batch.to_vec()).await;
        return 0;
    }
    let mut moved = 0;
    let mut failed = Vec::new();
    for h in batch {
        match move_one(broker, me, h).await {
            Ok(true) => {
                broker.forget_partition(h.tp());
                moved += 1;
            }
            Ok(false) => failed.push(*h),
            Err(e) => {
                tracing::warn!(error = %e, partition = h.partition, to = h.to, "handoff failed; the partition stays here");
                failed.push(*h);
            }
        }
    }
    reopen(failed).await;
    moved
}

async fn all_durable(broker: &Broker, batch: &[Handoff]) -> bool {
    let deadline = tokio::time::Instant::now() + DURABLE_WAIT;
    loop {
        let pending = batch.iter().any(|h| {
            broker
                .log
                .get(&h.tp())
                .is_some_and(|p| p.offsets().map(|(_, hw, end)| hw < end).unwrap_or(false))
        });
        if !pending {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Step 4 of the protocol for one partition: `Ok(true)` if leadership moved.
async fn move_one(broker: &Broker, me: BrokerId, h: &Handoff) -> Result<bool> {
    let Some(topic) = broker.metadata.topic_by_id(h.topic_id).await? else {
        return Ok(false);
    };
    let Some(state) = topic.partition(h.partition).cloned() else {
        return Ok(false);
    };
    if state.leader != me || h.to == me {
        return Ok(false);
    }
    if h.requested && state.transfer_to != Some(h.to) {
        return Ok(false); // withdrawn or re-targeted meanwhile
    }
    if broker.log.owes_own_tail() {
        // This broker lost its WAL and has not recovered the old one's tail yet: nothing in
        // the partition's state says so, so a move now would leave that tail behind. (If it
        // dies instead, failover sets `recover_from` and the new leader recovers it.)
        tracing::info!(partition = %format!("{}-{}", topic.name, h.partition),
            "handoff postponed: this broker's lost WAL tail is not recovered yet");
        return Ok(false);
    }
    if let Some(open) = broker.log.get(&h.tp()) {
        if open.leader_epoch()? != state.leader_epoch {
            return Ok(false); // fenced: the follower forgets it
        }
        let (_, _, log_end) = open.offsets()?;
        let sealed_end = broker
            .log
            .catalog_end(open.topic_partition, state.log_start_offset)
            .await?;
        if log_end > sealed_end {
            tracing::warn!(
                partition = %format!("{}-{}", topic.name, h.partition), log_end, sealed_end,
                "not everything is sealed; handoff postponed"
            );
            return Ok(false);
        }
    }
    let next = transferred_state(&state, h.to);
    let stored = broker
        .metadata
        .update_partition(h.topic_id, state.version, next)
        .await?;
    tracing::info!(
        partition = %format!("{}-{}", topic.name, h.partition), to = h.to,
        leader_epoch = stored.leader_epoch, "handed the partition over"
    );
    broker.apply_partition(h.topic_id, stored);
    Ok(true)
}

/// What the SIGTERM handoff achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownHandoff {
    /// No other broker is live: nothing can take over; leave as a single node does.
    NoPeers,
    /// This broker leads nothing any more.
    Done { moved: usize },
    /// Some partitions are still led here (they fail over after the lease ends).
    Partial { moved: usize, left: usize },
}

/// Hands every partition this broker leads to the other live brokers, placed by
/// [`placement::plan_moves`] (a requested target is honoured if live).
pub async fn hand_off_all(broker: &Broker) -> ShutdownHandoff {
    let me = broker.settings.broker_id;
    let others: Vec<placement::Node> = broker
        .cluster
        .nodes()
        .into_iter()
        .filter(|n| n.id != me)
        .collect();
    if others.is_empty() {
        return ShutdownHandoff::NoPeers;
    }
    let topics = match broker.metadata.list_topics().await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "listing topics for the shutdown handoff failed");
            return ShutdownHandoff::Partial { moved: 0, left: 0 };
        }
    };
    let mut assignment = BTreeMap::new();
    let mut requested = BTreeMap::new();
    for t in &topics {
        for p in &t.partitions {
            let slot = Slot {
                topic_id: t.topic_id,
                partition: p.partition,
            };
            assignment.insert(slot, p.leader);
            if let Some(to) = p.transfer_to {
                requested.insert(slot, to);
            }
        }
    }
    let live: Vec<BrokerId> = others.iter().map(|n| n.id).collect();
    let batch: Vec<Handoff> = placement::plan_moves(&others, &assignment, 0)
        .into_iter()
        .filter(|m| m.from == me)
        .map(|m| Handoff {
            topic_id: m.slot.topic_id,
            partition: m.slot.partition,
            to: requested
                .get(&m.slot)
                .copied()
                .filter(|t| live.contains(t))
                .unwrap_or(m.to),
            requested: false,
        })
        .collect();
    let asked = batch.len();
    let moved = hand_off(broker, &batch).await;
    if moved == asked {
        ShutdownHandoff::Done { moved }
    } else {
        ShutdownHandoff::Partial {
            moved,
            left: asked - moved,
        }
    }
}
