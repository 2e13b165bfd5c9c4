//! Watches: how a broker's in-memory view of brokers, topics, partition states and the
//! controller stays current.
//!
//! A [`Watch`] is a bounded `tokio::sync::mpsc` receiver of events, plus the task that
//! feeds it (mapping the backend's key-value watch, [`crate::kv::Kv::watch`]), aborted when
//! the `Watch` is dropped. Why mpsc and not `tokio::sync::watch` or `broadcast`: the
//! subscribers need every change in order (a partition's epoch bumps, a broker leaving),
//! not only the latest value, and a bounded queue keeps a slow subscriber from growing
//! memory without limit.
//!
//! Contract, the same for every backend:
//! - Subscribe first, then list: a change made between the two shows up in both, and every
//!   event is a full new state (never a delta), so applying it twice is harmless.
//! - Events of one watch arrive in the order the changes were made.
//! - A watch **ends** ([`Watch::recv`] returns `None`) when its subscriber falls more than
//!   [`WATCH_CAPACITY`] events (plus the key-value watch's own queue) behind, or when the backend loses its stream (etcd restarted,
//!   connection lost past the retry window, history compacted). The subscriber then
//!   subscribes again and re-lists. Ending instead of blocking keeps one slow subscriber from
//!   stalling every writer (embedded) and keeps backpressure honest (etcd).

use crate::store::BrokerRegistration;
use crate::topic::{PartitionState, TopicMetadata};
use crate::types::{BrokerId, TopicId};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Most undelivered events a watch holds before it is ended (see the module docs).
pub const WATCH_CAPACITY: usize = 1024;

/// A stream of events; ends when the backend can no longer guarantee it is complete.
pub struct Watch<T> {
    rx: mpsc::Receiver<T>,
    /// The task feeding `rx`, if any; aborted on drop so it never outlives its subscriber.
    task: Option<JoinHandle<()>>,
    /// Events the feeding task has taken from the backend that the subscriber has not
    /// received yet (see [`WatchQueue`]).
    queued: WatchQueue,
}

/// How far a subscriber is behind its watch: events the metadata service delivered that it
/// has not taken yet (those in the queue, and one its feeding task waits to queue). A
/// cheap handle for metrics; reads 0 once the watch is dropped. At
/// [`WATCH_CAPACITY`] the watch ends and the subscriber lists everything again.
#[derive(Clone, Debug, Default)]
pub struct WatchQueue(Arc<AtomicUsize>);

impl WatchQueue {
    /// Events waiting for the subscriber now.
    pub fn queued(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// One more event on its way to the subscriber (counted before it is queued, so the
    /// subscriber's receipt never comes first).
    pub(crate) fn add(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// One fewer on its way: taken by the subscriber, or not queued after all (the
    /// feeding side's send failed and the watch ends).
    pub(crate) fn taken(&self) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }
}

impl<T> Watch<T> {
    /// A watch whose feeding task counts what it queues in `queued`.
    pub(crate) fn counted(
        rx: mpsc::Receiver<T>,
        task: Option<JoinHandle<()>>,
        queued: WatchQueue,
    ) -> Self {
        Watch { rx, task, queued }
    }

    /// The next event, or `None` once the watch has ended (re-subscribe and re-list).
    pub async fn recv(&mut self) -> Option<T> {
        let event = self.rx.recv().await;
        if event.is_some() {
            self.queued.taken();
        }
        event
    }

    /// The next event if one is queued.
    pub fn try_recv(&mut self) -> Option<T> {
        let event = self.rx.try_recv().ok();
        if event.is_some() {
            self.queued.taken();
        }
        event
    }

    /// A handle on how far behind this watch its subscriber is.
    pub fn queue(&self) -> WatchQueue {
        self.queued.clone()
    }
}

impl<T> Drop for Watch<T> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.queued.0.store(0, Ordering::Relaxed);
    }
}

/// A change of broker membership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BrokerEvent {
    /// A broker registered (or re-registered with a new lease).
    Joined(BrokerRegistration),
    /// A broker's lease expired or was revoked.
    Left(BrokerId),
}

/// A change of a topic or of one of its partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopicEvent {
    /// A topic was created or grew partitions: its whole current state.
    Changed(TopicMetadata),
    /// A topic was deleted.
    Deleted { name: String, topic_id: TopicId },
    /// One partition's state changed (leader, leader epoch, log start offset).
    PartitionChanged {
        topic_id: TopicId,
        state: PartitionState,
    },
}
