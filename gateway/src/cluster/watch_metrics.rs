//! How far behind the metadata service this broker's copies of it are, for `/metrics`:
//! per watch (the broker's followers, and the controller's while it holds the post), the
//! events delivered but not applied yet, and how often a watch ended (it fell
//! [`oxbow_metadata::watch::WATCH_CAPACITY`] events behind, or the service lost its
//! stream) and was replaced by a full re-list; and the time the controller takes to decide
//! and apply one batch of events.
//!
//! Why events and not revisions: a watch covers one key range, and the store's revision
//! moves with every key, so "latest revision − applied revision" would count changes the
//! watch never carries. Events queued are exactly the changes this broker has been told of
//! and has not acted on (Kafka's controller `EventQueueSize`); a watch the service stops
//! feeding shows as ends, not as a queue.
//!
//! Lifecycle: a loop registers its watch under its name after each subscribe
//! ([`WatchMetrics::watching`]); a dropped watch reads 0, so a controller that lost its
//! post shows empty queues.

use oxbow_metadata::WatchQueue;
use prometheus_client::metrics::histogram::Histogram;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The watches of one broker (see the module docs).
pub struct WatchMetrics {
    /// Name → (the current watch's queue, ends so far).
    watches: Mutex<BTreeMap<&'static str, (WatchQueue, u64)>>,
    /// One batch of controller events decided and applied (its compare-and-swaps included).
    pub controller_batch: Histogram,
}

impl Default for WatchMetrics {
    fn default() -> Self {
        WatchMetrics {
            watches: Mutex::default(),
            controller_batch: oxbow_segment_writer::latency::latency_histogram(),
        }
    }
}

impl WatchMetrics {
    /// `name`'s loop subscribed: `queue` is its watch's from now on.
    pub fn watching(&self, name: &'static str, queue: WatchQueue) {
        if let Ok(mut w) = self.watches.lock() {
            w.entry(name).or_default().0 = queue;
        }
    }

    /// `name`'s watch ended (the loop re-subscribes and re-lists).
    pub fn ended(&self, name: &'static str) {
        if let Ok(mut w) = self.watches.lock() {
            w.entry(name).or_default().1 += 1;
        }
    }

    /// (name, events queued, ends), by name.
    pub fn snapshot(&self) -> Vec<(&'static str, usize, u64)> {
        self.watches.lock().map_or_else(
            |_| Vec::new(),
            |w| w.iter().map(|(n, (q, e))| (*n, q.queued(), *e)).collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_watch_keeps_its_ends_and_reads_its_new_queue() {
        let m = WatchMetrics::default();
        m.watching("topics", WatchQueue::default());
        m.ended("topics");
        m.watching("topics", WatchQueue::default());
        m.watching("brokers", WatchQueue::default());
        assert_eq!(m.snapshot(), vec![("brokers", 0, 0), ("topics", 0, 1)]);
    }
}
