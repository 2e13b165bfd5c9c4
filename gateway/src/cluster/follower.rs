//! Every broker's view of the cluster, kept current from the metadata service.
//!
//! Two background loops per broker, each the loop of [`super::watch_loop`] (subscribe,
//! list, apply events; again when the watch ends or every [`RECONCILE_EVERY`]):
//! - [`run_membership`]: live brokers → [`super::ClusterView`] (Metadata, FindCoordinator,
//!   placement). When membership changes, groups this broker no longer coordinates are
//!   dropped from its coordinator (their members get NOT_COORDINATOR and re-find).
//! - [`run_topic_follower`]: topics and partition states → the broker's topic cache. A
//!   partition this broker has open but no longer leads (another leader, or a newer epoch)
//!   is forgotten at once, so it answers NOT_LEADER_OR_FOLLOWER; a transfer request
//!   (`transfer_to`) on a partition it leads goes to the handoff worker; a partition it
//!   leads but has not opened is opened in the background ([`Opens`]).

use super::handoff::Handoff;
use super::watch_loop::{follow, Followed};
use crate::broker::Broker;
use oxbow_metadata::{BrokerEvent, PartitionState, TopicEvent, TopicId, TopicPartition, Watch};
use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use super::controller::RECONCILE_EVERY;

/// Opens of the partitions this broker is given, in the background: a partition is ready
/// before its first request (a new topic's thousands of partitions, a dead broker's), not
/// opened by it. The log bounds how many do their I/O at once; this keeps one per
/// partition under way (the follower sees a partition again at every relist).
struct Opens {
    tasks: TaskTracker,
    in_flight: Arc<std::sync::Mutex<HashSet<TopicPartition>>>,
    shutdown: CancellationToken,
}

impl Opens {
    /// Opens `tp` unless an open of it is under way. `recovering` (its `recover_from` is
    /// set): finished even on shutdown, so the recovered tail is not left half appended;
    /// a plain open stops at shutdown.
    fn open(&self, broker: &Arc<Broker>, tp: TopicPartition, recovering: bool) {
        let Some(topic) = broker.topic_by_id(tp.topic_id.0) else {
            return;
        };
        let fresh = self
            .in_flight
            .lock()
            .map(|mut in_flight| in_flight.insert(tp))
            .unwrap_or(false);
        if !fresh {
            return;
        }
        let broker = broker.clone();
        let in_flight = self.in_flight.clone();
        let shutdown = self.shutdown.clone();
        self.tasks.spawn(async move {
            let partition = tp.partition;
            let open = broker.log.partition(&topic, partition);
            let outcome = if recovering {
                Some(open.await)
            } else {
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => None,
                    r = open => Some(r),
                }
            };
            if let Some(Err(e)) = outcome {
                let name = format!("{}-{partition}", topic.name);
                if recovering {
                    tracing::warn!(error = %e, partition = %name,
                        "recovering a moved partition failed; retried on first use");
                } else {
                    tracing::debug!(error = %e, partition = %name,
                        "opening a partition led here failed; retried on first use");
                }
            }
            if let Ok(mut in_flight) = in_flight.lock() {
                in_flight.remove(&tp);
            }
        });
    }
}

/// How often [`run_wal_sets`] re-reads the live brokers' WAL replica sets.
const WAL_SETS_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Keeps [`Broker::cluster`]'s copy of the live brokers' WAL replica sets current until
/// `shutdown` (what Metadata reports as a partition's replicas and ISR): one read per live
/// broker every [`WAL_SETS_EVERY`]. A failed read keeps that broker's last copy.
pub async fn run_wal_sets(broker: Arc<Broker>, shutdown: CancellationToken) {
    loop {
        let mut sets = std::collections::BTreeMap::new();
        for id in broker.cluster.live_ids() {
            match broker.metadata.wal_replica_set(id).await {
                Ok(Some(set)) => {
                    sets.insert(
                        id,
                        super::WalCopies {
                            replicas: set.replicas,
                            isr: set.isr,
                            lost: Vec::new(),
                        },
                    );
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(broker = id, error = %e, "reading a WAL replica set failed");
                    sets.insert(id, broker.cluster.wal_copies(id));
                }
            }
        }
        broker.cluster.set_wal_copies(sets);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(WAL_SETS_EVERY) => {}
        }
    }
}

/// Keeps [`Broker::cluster`] current until `shutdown`.
pub async fn run_membership(broker: Arc<Broker>, shutdown: CancellationToken) {
    follow(&Membership { broker }, &shutdown).await
}

struct Membership {
    broker: Arc<Broker>,
}

impl Followed for Membership {
    type Event = BrokerEvent;
    const WHAT: &'static str = "brokers";
    const METRIC: &'static str = "brokers";

    fn metrics(&self) -> &super::watch_metrics::WatchMetrics {
        &self.broker.cluster.watch_metrics
    }

    async fn subscribe(&self) -> oxbow_metadata::Result<Watch<BrokerEvent>> {
        self.broker.metadata.watch_brokers().await
    }

    async fn relist(&self) -> oxbow_metadata::Result<()> {
        let list = self.broker.metadata.list_brokers().await?;
        if self.broker.cluster.set_brokers(list) {
            membership_changed(&self.broker);
        }
        Ok(())
    }

    fn apply(&self, event: BrokerEvent, _watch: &mut Watch<BrokerEvent>) {
        let broker = &self.broker;
        let changed = match event {
            BrokerEvent::Joined(b) => {
                tracing::info!(broker = b.broker_id, az = ?b.az, addr = %b.kafka_addr, "broker joined");
                // It may be the WAL replica a waiting recovery needs.
                broker.log.retry_recoveries_now();
                broker.cluster.joined(b)
            }
            BrokerEvent::Left(id) => {
                tracing::info!(broker = id, "broker left (lease ended)");
                broker.cluster.left(id)
            }
        };
        if changed {
            membership_changed(broker);
        }
    }
}

fn membership_changed(broker: &Broker) {
    let me = broker.settings.broker_id;
    let view = broker.cluster.clone();
    broker
        .coordinator
        .retain_groups(|group| view.coordinator_for(group) == me);
}

/// Keeps the broker's topic cache current until `shutdown`, forgetting partitions it no
/// longer leads and passing transfer requests to `handoffs`.
pub async fn run_topic_follower(
    broker: Arc<Broker>,
    handoffs: mpsc::Sender<Handoff>,
    shutdown: CancellationToken,
) {
    let opens = Opens {
        tasks: TaskTracker::new(),
        in_flight: Arc::default(),
        shutdown: shutdown.clone(),
    };
    let followed = TopicFollower {
        broker: &broker,
        handoffs: &handoffs,
        opens: &opens,
    };
    follow(&followed, &shutdown).await;
    opens.tasks.close();
    opens.tasks.wait().await;
}

struct TopicFollower<'a> {
    broker: &'a Arc<Broker>,
    handoffs: &'a mpsc::Sender<Handoff>,
    opens: &'a Opens,
}

impl Followed for TopicFollower<'_> {
    type Event = TopicEvent;
    const WHAT: &'static str = "topics";
    const METRIC: &'static str = "topics";

    fn metrics(&self) -> &super::watch_metrics::WatchMetrics {
        &self.broker.cluster.watch_metrics
    }

    async fn subscribe(&self) -> oxbow_metadata::Result<Watch<TopicEvent>> {
        self.broker.metadata.watch_topics().await
    }

    async fn relist(&self) -> oxbow_metadata::Result<()> {
        let list = self.broker.metadata.list_topics().await?;
        let (kept, missing) = self.broker.replace_topics(list);
        for t in kept {
            for p in &t.partitions {
                follow_partition(self.broker, t.topic_id, p, self.handoffs, self.opens);
            }
        }
        // Missing from the list: gone, or created while it was read. Ask.
        for id in missing {
            if let Ok(None) = self.broker.metadata.topic_by_id(id).await {
                self.broker.remove_topic(id);
            }
        }
        Ok(())
    }

    fn apply(&self, first: TopicEvent, watch: &mut Watch<TopicEvent>) {
        // A burst (a broker opening or taking over thousands of partitions) is applied in
        // one copy of a topic per run of its partitions' changes, not one per change: each
        // copy costs the topic's whole partition list.
        let mut burst = vec![first];
        while burst.len() < TOPIC_EVENTS_PER_BURST {
            match watch.try_recv() {
                Some(e) => burst.push(e),
                None => break,
            }
        }
        apply_burst(self.broker, burst, self.handoffs, self.opens);
    }
}

/// Most queued topic events taken in one burst.
const TOPIC_EVENTS_PER_BURST: usize = 4096;

/// Applies topic events in order; consecutive changes of one topic's partitions go in one
/// copy of the topic. Then follows each partition touched.
fn apply_burst(
    broker: &Arc<Broker>,
    burst: Vec<TopicEvent>,
    handoffs: &mpsc::Sender<Handoff>,
    opens: &Opens,
) {
    let mut run: Option<(TopicId, Vec<PartitionState>)> = None;
    let flush = |run: &mut Option<(TopicId, Vec<PartitionState>)>| {
        let Some((topic_id, states)) = run.take() else {
            return;
        };
        let partitions: Vec<i32> = states.iter().map(|s| s.partition).collect();
        if let Some(t) = broker.apply_partitions(topic_id, states) {
            for i in partitions {
                if let Some(p) = t.partition(i) {
                    follow_partition(broker, topic_id, p, handoffs, opens);
                }
            }
        }
    };
    for event in burst {
        match event {
            TopicEvent::PartitionChanged { topic_id, state } => match &mut run {
                Some((id, states)) if *id == topic_id => states.push(state),
                _ => {
                    flush(&mut run);
                    run = Some((topic_id, vec![state]));
                }
            },
            TopicEvent::Changed(t) => {
                flush(&mut run);
                let t = broker.apply_topic(t);
                for p in &t.partitions {
                    follow_partition(broker, t.topic_id, p, handoffs, opens);
                }
            }
            TopicEvent::Deleted { topic_id, .. } => {
                flush(&mut run);
                broker.remove_topic(topic_id);
            }
        }
    }
    flush(&mut run);
}

/// Acts on one partition's current state: forget it if led elsewhere (or at a newer
/// epoch), hand it over if asked to.
fn follow_partition(
    broker: &Arc<Broker>,
    topic_id: TopicId,
    state: &PartitionState,
    handoffs: &mpsc::Sender<Handoff>,
    opens: &Opens,
) {
    let me = broker.settings.broker_id;
    let tp = TopicPartition::new(topic_id, state.partition);
    broker.leadership.follow_state(topic_id, state);
    if state.leader == me && broker.log.get(&tp).is_none() {
        if state.recover_from.is_some() {
            // Given a possibly dead broker's partition: recover its tail now, so the dead
            // broker's replicas can let go of it and the partition is ready when clients
            // come back.
            opens.open(broker, tp, true);
        } else if state.transfer_to.is_none() {
            opens.open(broker, tp, false);
        }
    }
    if state.leader == me {
        if let Some(to) = state.transfer_to.filter(|t| *t != me) {
            let request = Handoff {
                topic_id,
                partition: state.partition,
                to,
                requested: true,
            };
            if handoffs.try_send(request).is_err() {
                // Full: the controller withdraws the request after its timeout and asks
                // again; nothing is lost by dropping it here.
                tracing::warn!(
                    partition = state.partition,
                    "handoff queue full; transfer request dropped"
                );
            }
        }
    }
}
