//! Graceful leadership transfer, gateway side: deciding WHAT to hand off and to whom.
//!
//! How a partition moves (ARCHITECTURE.md decision 15: close the append gate, wait until
//! durable, seal once, re-check the stored state and the catalog, compare-and-swap to the
//! target at epoch + 1, forget) is segment-writer's [`Leadership::hand_off`]
//! (`segment-writer/src/leadership/mod.rs`, pure core in `leadership/handoff_state.rs`). This module
//! only feeds it: requests from others are a compare-and-swap setting `transfer_to = T` on
//! a partition's state, which this broker sees through its topic watch (`follower`) and
//! queues here; on SIGTERM, [`hand_off_all`] places everything led here on the other live
//! brokers ([`placement::plan_moves`]). The moved partitions' new states go into the topic
//! cache at once, so this broker answers with the new leader before the watch catches up.
//!
//! Lifecycle: [`run_handoffs`] is one background task per broker fed by the topic follower
//! through a bounded queue; [`hand_off_all`] runs once on SIGTERM.
//!
//! [`Leadership::hand_off`]: oxbow_segment_writer::Leadership::hand_off

use super::placement::{self, Slot};
use crate::broker::Broker;
use oxbow_metadata::BrokerId;
pub use oxbow_segment_writer::Handoff;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Capacity of the queue from the topic follower to the handoff worker.
pub const QUEUE_CAPACITY: usize = 1024;

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
        // A partition asked for twice is handed once, to the last target asked.
        let mut batch = vec![first];
        while let Ok(r) = requests.try_recv() {
            batch.push(r);
        }
        let moved = hand_off(&broker, &batch).await;
        if moved > 0 {
            tracing::info!(moved, asked = batch.len(), "handed partitions over");
        }
    }
}

/// Hands `batch` over (segment-writer's [`oxbow_segment_writer::Leadership::hand_off`])
/// and puts the moved partitions' new states in the topic cache; returns how many moved.
pub async fn hand_off(broker: &Broker, batch: &[Handoff]) -> usize {
    let moved = broker.leadership.hand_off(batch).await;
    for m in &moved {
        broker.apply_partition(m.topic_id, m.state.clone());
    }
    moved.len()
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
