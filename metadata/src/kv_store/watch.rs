//! The store's watches over [`Kv::watch`]: one key-value watch per subscription, its events
//! mapped to [`BrokerEvent`]s, [`TopicEvent`]s or controller changes by a task owned by the
//! returned [`Watch`] (aborted when it is dropped; see [`crate::watch`] for the contract).
//!
//! The mapping task forwards with backpressure: a subscriber that stops reading fills its
//! queue, then the key-value watch's queue, which ends the key-value watch and so, once the
//! queued events are drained, this one.

use super::KvStore;
use crate::error::Result;
use crate::keys;
use crate::kv::{EventKind, KeyRange, Kv, WatchEvent};
use crate::types::BrokerId;
use crate::watch::{BrokerEvent, TopicEvent, Watch, WatchQueue, WATCH_CAPACITY};
use std::future::Future;
use tokio::sync::mpsc;

/// Maps every event of `source` through `map` into a new watch, after `first` if given.
pub(super) fn forward<T, F, Fut>(
    mut source: Watch<Vec<WatchEvent>>,
    first: Option<T>,
    mut map: F,
) -> Watch<T>
where
    T: Send + 'static,
    F: FnMut(WatchEvent) -> Fut + Send + 'static,
    Fut: Future<Output = Option<T>> + Send,
{
    let (tx, rx) = mpsc::channel(WATCH_CAPACITY);
    let queued = WatchQueue::default();
    if let Some(first) = first {
        // A fresh channel has room for one event.
        queued.add();
        let _ = tx.try_send(first);
    }
    let counter = queued.clone();
    let task = tokio::spawn(async move {
        loop {
            let batch = tokio::select! {
                // Polled in order: tokio's random branch order would make the simulation's
                // runs differ for one seed.
                biased;
                _ = tx.closed() => return,
                batch = source.recv() => batch,
            };
            let Some(batch) = batch else { return };
            for event in batch {
                if let Some(item) = map(event).await {
                    counter.add();
                    if tx.send(item).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    Watch::counted(rx, Some(task), queued)
}

impl<K: Kv> KvStore<K> {
    pub(super) async fn subscribe_brokers(&self) -> Result<Watch<BrokerEvent>> {
        let prefix = keys::broker::prefix(&self.root);
        let source = self.kv.watch(KeyRange::prefix(prefix), None).await?;
        let root = self.root.clone();
        Ok(forward(source, None, move |e| {
            let event = match e.kind {
                EventKind::Put => match keys::broker::deser_value(&e.kv.key, &e.kv.value) {
                    Ok(b) => Some(BrokerEvent::Joined(b)),
                    Err(err) => {
                        tracing::error!(error = %err, "skipping an undecodable broker registration");
                        None
                    }
                },
                EventKind::Delete => keys::broker::deser_key(&root, &e.kv.key)
                    .ok()
                    .map(BrokerEvent::Left),
            };
            std::future::ready(event)
        }))
    }

    pub(super) async fn subscribe_topics(&self) -> Result<Watch<TopicEvent>> {
        // One watch for topic records and partition states, so their relative order holds.
        let prefix = keys::topics_prefix(&self.root);
        let source = self.kv.watch(KeyRange::prefix(prefix), None).await?;
        let store = self.clone();
        Ok(forward(source, None, move |e| {
            let store = store.clone();
            async move { store.topic_event(e).await }
        }))
    }

    async fn topic_event(&self, e: WatchEvent) -> Option<TopicEvent> {
        let root = &self.root;
        let key = e.kv.key.as_slice();
        let topics = keys::topic::prefix(root);
        let partitions = keys::partition::prefix(root);
        let result: Result<Option<TopicEvent>> = if key.starts_with(topics.as_bytes()) {
            match e.kind {
                EventKind::Put => {
                    // The record alone lacks partition states: read the whole topic now (at
                    // least as new as this event).
                    match keys::topic::deser_key(root, key) {
                        Ok(name) => self
                            .read_topic(name)
                            .await
                            .map(|t| t.map(|(t, _)| TopicEvent::Changed(t))),
                        Err(err) => Err(err),
                    }
                }
                EventKind::Delete => match &e.prev {
                    Some(prev) => keys::topic::deser_value(&prev.key, &prev.value).map(|r| {
                        Some(TopicEvent::Deleted {
                            name: r.name,
                            topic_id: r.topic_id,
                        })
                    }),
                    None => Ok(None),
                },
            }
        } else if key.starts_with(partitions.as_bytes()) && e.kind == EventKind::Put {
            keys::partition::deser_key(root, key).and_then(|topic_id| {
                keys::partition::deser_value(key, &e.kv.value)
                    .map(|state| Some(TopicEvent::PartitionChanged { topic_id, state }))
            })
        } else {
            Ok(None)
        };
        match result {
            Ok(ev) => ev,
            Err(err) => {
                tracing::error!(error = %err, "skipping a topic change that cannot be decoded");
                None
            }
        }
    }

    pub(super) async fn subscribe_controller(&self) -> Result<Watch<Option<BrokerId>>> {
        // Read, then watch from the next revision: the current holder goes out first, then
        // every change after it, none twice and none missed.
        let (now, revision) = self.read_controller().await?;
        let key = keys::controller::ser_key(&self.root);
        let source = self
            .kv
            .watch(KeyRange::key(key), Some(revision + 1))
            .await?;
        Ok(forward(source, Some(now), |e| {
            let event = match e.kind {
                EventKind::Delete => Some(None),
                EventKind::Put => keys::controller::deser_value(&e.kv.key, &e.kv.value)
                    .ok()
                    .map(Some),
            };
            std::future::ready(event)
        }))
    }
}
