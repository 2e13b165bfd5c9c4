//! The controller's driver: election, watches, and applying [`ControllerCore`]'s actions.
//!
//! Lifecycle: every broker runs [`run_controller`] on its `TaskTracker` until its token is
//! cancelled. It campaigns for the controller post bound to its current lease (so the post
//! is vacated when the lease expires), and otherwise waits on the controller watch for a
//! vacancy. While holding the post it subscribes to broker and topic watches, lists both
//! (subscribe first, then list: nothing falls between), feeds every event to the core, and
//! re-lists every [`RECONCILE_EVERY`] and whenever a watch ends. Each action is one
//! compare-and-swap of a partition; the stored result (or, after a conflict, a re-read) is
//! fed back, so the core decides from what is really stored.
//!
//! Brokers register before they serve (WAL replay comes first), so each newly registered
//! broker is probed with a Kafka ApiVersions round trip (at most one probe per broker in
//! flight, every tick) and only then reported ready to the core.
//!
//! It acts only while this broker's lease is certainly alive: the post is bound to the
//! lease, so with a valid lease no other broker holds it. On losing the lease or the post
//! it goes back to campaigning; on shutdown it resigns.

use super::controller_state::{Action, ControllerCore, ControllerSettings, Event};
use super::ClusterView;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use oxbow_metadata::{
    BrokerEvent, BrokerId, ErrorKind, LeaseGuard, MetadataStore, TopicEvent, Watch,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How often the core sees time pass (transfer timeouts, the balance delay).
const TICK: Duration = Duration::from_millis(250);
/// Full re-list of brokers and topics this often, in case a watch missed something.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(10);
/// Pause before campaigning again after an error or while the lease is not valid.
const RETRY: Duration = Duration::from_millis(500);
/// Compare-and-swaps in flight at once.
const CAS_CONCURRENCY: usize = 16;
/// The controller's watches on `/metrics` (`oxbow_metadata_watch_*{watch}`): their queues
/// are its event queue (Kafka's `EventQueueSize`).
const CONTROLLER_BROKERS: &str = "controller_brokers";
const CONTROLLER_TOPICS: &str = "controller_topics";
/// Bound on one readiness probe (connect + ApiVersions).
const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);

/// Whether the broker at `kafka_addr` answers Kafka requests.
async fn probe(kafka_addr: String) -> bool {
    crate::client::Client::connect(&kafka_addr, PROBE_TIMEOUT)
        .await
        .is_ok()
}

/// Runs the controller loop until `shutdown` (see the module docs).
pub async fn run_controller(
    metadata: Arc<dyn MetadataStore>,
    me: BrokerId,
    lease: LeaseGuard,
    view: Arc<ClusterView>,
    settings: ControllerSettings,
    shutdown: CancellationToken,
) {
    let mut was_controller = false;
    while !shutdown.is_cancelled() {
        let lease_id = match lease.lease_id() {
            Some(id) if lease.is_valid() => id,
            _ => {
                pause(&shutdown, RETRY).await;
                continue;
            }
        };
        match metadata.campaign(me, lease_id).await {
            Ok(winner) if winner == me => {
                view.set_controller(Some(me));
                if !was_controller {
                    tracing::info!(broker = me, "became the controller");
                }
                was_controller = true;
                match lead(&metadata, me, &lease, &settings, &view, &shutdown).await {
                    Ok(()) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "controller loop ended; campaigning again");
                        pause(&shutdown, RETRY).await;
                    }
                }
            }
            Ok(winner) => {
                view.set_controller(Some(winner));
                was_controller = false;
                wait_for_vacancy(&metadata, winner, &view, &shutdown).await;
            }
            Err(e) => {
                tracing::debug!(error = %e, "campaign failed; retrying");
                pause(&shutdown, RETRY).await;
            }
        }
    }
    if was_controller {
        if let Err(e) = metadata.resign(me).await {
            tracing::warn!(error = %e, "resigning the controller post failed; it lapses with the lease");
        }
        tracing::info!(broker = me, "resigned as controller");
    }
}

async fn pause(shutdown: &CancellationToken, d: Duration) {
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = tokio::time::sleep(d) => {}
    }
}

/// Waits until the post held by `holder` changes hands or is vacated (or a while passes:
/// the watch is an optimisation, campaigning again is always safe).
async fn wait_for_vacancy(
    metadata: &Arc<dyn MetadataStore>,
    holder: BrokerId,
    view: &ClusterView,
    shutdown: &CancellationToken,
) {
    let mut watch = match metadata.watch_controller().await {
        Ok(w) => w,
        Err(_) => {
            pause(shutdown, RETRY).await;
            return;
        }
    };
    let deadline = tokio::time::Instant::now() + RECONCILE_EVERY;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep_until(deadline) => return,
            event = watch.recv() => match event {
                Some(Some(id)) if id == holder => {}
                Some(now) => {
                    view.set_controller(now);
                    return;
                }
                None => return,
            },
        }
    }
}

/// Why leading stopped (other than shutdown).
#[derive(Debug, thiserror::Error)]
enum LeadError {
    #[error(transparent)]
    Metadata(#[from] oxbow_metadata::Error),
    #[error("lost the controller post (now {0:?})")]
    LostPost(Option<BrokerId>),
    #[error("this broker's lease is not certainly alive")]
    LeaseLapsed,
}

struct Leading<'a> {
    metadata: &'a Arc<dyn MetadataStore>,
    lease: &'a LeaseGuard,
    core: ControllerCore,
    start: Instant,
    /// Times each batch of events (`oxbow_controller_event_batch_seconds`).
    batch_time: &'a prometheus_client::metrics::histogram::Histogram,
}

impl Leading<'_> {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Feeds `event` and applies what it asks for, feeding the results back until the
    /// core asks for nothing more.
    async fn feed(&mut self, event: Event) -> Result<(), LeadError> {
        self.feed_all(vec![event]).await
    }

    /// [`Self::feed`] for a burst of events, decided once (see `ControllerCore::step_all`).
    async fn feed_all(&mut self, events: Vec<Event>) -> Result<(), LeadError> {
        let started = Instant::now();
        let fed = self.feed_all_untimed(events).await;
        oxbow_segment_writer::latency::observe(self.batch_time, started.elapsed());
        fed
    }

    async fn feed_all_untimed(&mut self, events: Vec<Event>) -> Result<(), LeadError> {
        let now = self.now_ms();
        let mut actions = self.core.step_all(now, events);
        while !actions.is_empty() {
            if !self.lease.is_valid() {
                return Err(LeadError::LeaseLapsed);
            }
            let metadata = self.metadata.clone();
            let results: Vec<(Action, oxbow_metadata::Result<_>)> =
                futures::stream::iter(actions.into_iter().map(|a| {
                    let metadata = metadata.clone();
                    async move {
                        let r = metadata
                            .update_partition(a.topic_id(), a.expected().version, a.new_state())
                            .await;
                        (a, r)
                    }
                }))
                .buffer_unordered(CAS_CONCURRENCY)
                .collect()
                .await;
            let mut events = Vec::new();
            for (action, result) in results {
                let event = match result {
                    Ok(stored) => {
                        log_applied(&action, &stored);
                        Event::PartitionChanged(action.topic_id(), stored)
                    }
                    Err(e) if e.kind() == ErrorKind::Conflict => {
                        // Someone else changed it: decide again from what is stored.
                        match self.metadata.topic_by_id(action.topic_id()).await? {
                            Some(t) => Event::TopicChanged(t),
                            None => Event::TopicDeleted(action.topic_id()),
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::NotFound => {
                        Event::TopicDeleted(action.topic_id())
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, ?action, "controller action failed; retried later");
                        continue;
                    }
                };
                events.push(event);
            }
            let now = self.now_ms();
            actions = self.core.step_all(now, events);
        }
        Ok(())
    }

    async fn relist(&mut self) -> Result<(), LeadError> {
        let brokers = self.metadata.list_brokers().await?;
        self.feed(Event::Brokers(brokers)).await?;
        let topics = self.metadata.list_topics().await?;
        self.feed(Event::Topics(topics)).await
    }
}

/// Most queued topic events decided together (bounds one decision's input).
const TOPIC_EVENTS_PER_DECISION: usize = 4096;

fn topic_event(t: TopicEvent) -> Event {
    match t {
        TopicEvent::Changed(t) => Event::TopicChanged(t),
        TopicEvent::Deleted { topic_id, .. } => Event::TopicDeleted(topic_id),
        TopicEvent::PartitionChanged { topic_id, state } => {
            Event::PartitionChanged(topic_id, state)
        }
    }
}

fn log_applied(action: &Action, stored: &oxbow_metadata::PartitionState) {
    let e = action.expected();
    match action {
        Action::Failover { .. } => tracing::info!(
            topic_id = %action.topic_id(), partition = e.partition, from = e.leader,
            to = stored.leader, leader_epoch = stored.leader_epoch,
            "failover: moved the partition of a broker without a lease"
        ),
        Action::RequestTransfer { to, .. } => tracing::info!(
            topic_id = %action.topic_id(), partition = e.partition, from = e.leader, to,
            "balance: asked the leader to hand the partition over"
        ),
        Action::CancelTransfer { .. } => tracing::info!(
            topic_id = %action.topic_id(), partition = e.partition, leader = e.leader,
            "withdrew a transfer request that did not happen in time"
        ),
    }
}

/// Runs the controller while this broker holds the post.
async fn lead(
    metadata: &Arc<dyn MetadataStore>,
    me: BrokerId,
    lease: &LeaseGuard,
    settings: &ControllerSettings,
    view: &ClusterView,
    shutdown: &CancellationToken,
) -> Result<(), LeadError> {
    let mut state = Leading {
        metadata,
        lease,
        core: ControllerCore::new(settings.clone()),
        start: Instant::now(),
        batch_time: &view.watch_metrics.controller_batch,
    };
    let metrics = &view.watch_metrics;
    let mut controller_watch = metadata.watch_controller().await?;
    let mut brokers: Watch<BrokerEvent> = metadata.watch_brokers().await?;
    metrics.watching(CONTROLLER_BROKERS, brokers.queue());
    let mut topics: Watch<TopicEvent> = metadata.watch_topics().await?;
    metrics.watching(CONTROLLER_TOPICS, topics.queue());
    state.relist().await?;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_relist = Instant::now();
    let mut probes: FuturesUnordered<BoxFuture<'static, (BrokerId, bool)>> =
        FuturesUnordered::new();
    let mut probing: BTreeSet<BrokerId> = BTreeSet::new();
    // A failed probe is repeated no sooner than a tick later.
    let mut next_probe: BTreeMap<BrokerId, Instant> = BTreeMap::new();
    loop {
        let now = Instant::now();
        for b in state.core.unready() {
            let due = next_probe.get(&b.broker_id).is_none_or(|t| *t <= now);
            if due && probing.insert(b.broker_id) {
                let id = b.broker_id;
                probes.push(probe(b.kafka_addr.clone()).map(move |ok| (id, ok)).boxed());
            }
        }
        let event = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            Some((id, ok)) = probes.next(), if !probes.is_empty() => {
                probing.remove(&id);
                if !ok {
                    next_probe.insert(id, Instant::now() + TICK);
                    continue;
                }
                next_probe.remove(&id);
                Event::BrokerReady(id)
            }
            c = controller_watch.recv() => match c {
                Some(Some(id)) if id == me => continue,
                Some(other) => {
                    view.set_controller(other);
                    return Err(LeadError::LostPost(other));
                }
                None => {
                    controller_watch = metadata.watch_controller().await?;
                    continue;
                }
            },
            b = brokers.recv() => match b {
                Some(BrokerEvent::Joined(reg)) => Event::BrokerJoined(reg),
                Some(BrokerEvent::Left(id)) => Event::BrokerLeft(id),
                None => {
                    metrics.ended(CONTROLLER_BROKERS);
                    brokers = metadata.watch_brokers().await?;
                    metrics.watching(CONTROLLER_BROKERS, brokers.queue());
                    state.relist().await?;
                    continue;
                }
            },
            t = topics.recv() => match t {
                Some(t) => {
                    // A burst of topic events (thousands of partitions changing at once)
                    // is decided once: take what is queued with it.
                    let mut burst = vec![topic_event(t)];
                    while burst.len() < TOPIC_EVENTS_PER_DECISION {
                        match topics.try_recv() {
                            Some(t) => burst.push(topic_event(t)),
                            None => break,
                        }
                    }
                    if !lease.is_valid() {
                        return Err(LeadError::LeaseLapsed);
                    }
                    state.feed_all(burst).await?;
                    continue;
                }
                None => {
                    metrics.ended(CONTROLLER_TOPICS);
                    topics = metadata.watch_topics().await?;
                    metrics.watching(CONTROLLER_TOPICS, topics.queue());
                    state.relist().await?;
                    continue;
                }
            },
            _ = tick.tick() => {
                if last_relist.elapsed() >= RECONCILE_EVERY {
                    last_relist = Instant::now();
                    state.relist().await?;
                    continue;
                }
                Event::Tick
            }
        };
        if !lease.is_valid() {
            return Err(LeadError::LeaseLapsed);
        }
        state.feed(event).await?;
    }
}
