//! Watches on etcd: one watch stream per subscription, forwarded into a bounded queue by a
//! task owned by the returned [`Watch`] (see [`crate::watch`] for the contract).

use super::EtcdStore;
use crate::error::{Error, Result};
use crate::keys::{self, prefix_end};
use crate::types::BrokerId;
use crate::watch::{BrokerEvent, TopicEvent, Watch, WATCH_CAPACITY};
use crate::MetadataStore;
use etcd_client::{Event, EventType, WatchOptions, WatchStream};
use std::future::Future;
use tokio::sync::mpsc;

impl EtcdStore {
    /// Opens a watch on every key under `prefix` (with previous values, so deletes can say
    /// what was deleted) and waits until etcd confirms it, so no change after this returns
    /// is missed.
    async fn open_watch(&self, prefix: &str) -> Result<WatchStream> {
        let end = prefix_end(prefix.as_bytes()).unwrap_or_default();
        let prefix = prefix.to_string();
        self.call("open watch", |mut c| {
            let (prefix, end) = (prefix.clone(), end.clone());
            async move {
                let mut stream = c
                    .watch(
                        prefix,
                        Some(WatchOptions::new().with_range(end).with_prev_key()),
                    )
                    .await?;
                match stream.message().await? {
                    Some(r) if r.created() => Ok(stream),
                    _ => Err(Error::Unavailable("etcd did not confirm the watch".into()).into()),
                }
            }
        })
        .await
    }

    /// Forwards events of `stream`, mapped by `map`, until the subscriber goes away or the
    /// stream fails.
    fn spawn_forwarder<T, F, Fut>(
        mut stream: WatchStream,
        tx: mpsc::Sender<T>,
        mut map: F,
    ) -> tokio::task::JoinHandle<()>
    where
        T: Send + 'static,
        F: FnMut(Event) -> Fut + Send + 'static,
        Fut: Future<Output = Option<T>> + Send,
    {
        tokio::spawn(async move {
            loop {
                let msg = tokio::select! {
                    _ = tx.closed() => return,
                    msg = stream.message() => msg,
                };
                let resp = match msg {
                    Ok(Some(r)) => r,
                    Ok(None) => {
                        tracing::warn!("etcd watch stream closed; the watch ends");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "etcd watch failed; the watch ends");
                        return;
                    }
                };
                if resp.canceled() {
                    tracing::warn!(
                        reason = resp.cancel_reason(),
                        "etcd canceled a watch; it ends"
                    );
                    return;
                }
                for event in resp.events() {
                    if let Some(item) = map(event.clone()).await {
                        // Bounded: a subscriber that stops reading stops this stream
                        // (etcd buffers, then cancels a slow watcher; the watch ends).
                        if tx.send(item).await.is_err() {
                            return;
                        }
                    }
                }
            }
        })
    }

    pub(super) async fn subscribe_brokers(&self) -> Result<Watch<BrokerEvent>> {
        let stream = self.open_watch(&keys::broker::prefix(&self.root)).await?;
        let (tx, rx) = mpsc::channel(WATCH_CAPACITY);
        let root = self.root.clone();
        let task = Self::spawn_forwarder(stream, tx, move |e| {
            let root = root.clone();
            async move {
                let kv = e.kv()?;
                match e.event_type() {
                    EventType::Put => match keys::broker::deser_value(kv.key(), kv.value()) {
                        Ok(b) => Some(BrokerEvent::Joined(b)),
                        Err(err) => {
                            tracing::error!(error = %err, "skipping an undecodable broker registration");
                            None
                        }
                    },
                    EventType::Delete => keys::broker::deser_key(&root, kv.key())
                        .ok()
                        .map(BrokerEvent::Left),
                }
            }
        });
        Ok(Watch::new(rx, Some(task)))
    }

    pub(super) async fn subscribe_topics(&self) -> Result<Watch<TopicEvent>> {
        // One stream for topic records and partition states, so their relative order holds.
        let stream = self.open_watch(&keys::topics_prefix(&self.root)).await?;
        let (tx, rx) = mpsc::channel(WATCH_CAPACITY);
        let store = self.clone();
        let task = Self::spawn_forwarder(stream, tx, move |e| {
            let store = store.clone();
            async move { store.topic_event(e).await }
        });
        Ok(Watch::new(rx, Some(task)))
    }

    async fn topic_event(&self, e: Event) -> Option<TopicEvent> {
        let root = &self.root;
        let kv = e.kv()?;
        let key = kv.key();
        let topics = keys::topic::prefix(root);
        let partitions = keys::partition::prefix(root);
        let result: Result<Option<TopicEvent>> = if key.starts_with(topics.as_bytes()) {
            match e.event_type() {
                EventType::Put => {
                    // The record alone lacks partition states: read the whole topic now (at
                    // least as new as this event).
                    match keys::topic::deser_key(root, key) {
                        Ok(name) => self.topic(name).await.map(|t| t.map(TopicEvent::Changed)),
                        Err(err) => Err(err),
                    }
                }
                EventType::Delete => match e.prev_kv() {
                    Some(prev) => keys::topic::deser_value(prev.key(), prev.value()).map(|r| {
                        Some(TopicEvent::Deleted {
                            name: r.name,
                            topic_id: r.topic_id,
                        })
                    }),
                    None => Ok(None),
                },
            }
        } else if key.starts_with(partitions.as_bytes()) && e.event_type() == EventType::Put {
            keys::partition::deser_key(root, key).and_then(|topic_id| {
                keys::partition::deser_value(key, kv.value())
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
        let key = keys::controller::ser_key(&self.root);
        let stream = self.open_watch(&key).await?;
        let (tx, rx) = mpsc::channel(WATCH_CAPACITY);
        // Watch first, then read: the current value goes out before any later change.
        let now = self.controller().await?;
        let _ = tx.try_send(now);
        let task = Self::spawn_forwarder(stream, tx, move |e| async move {
            match e.event_type() {
                EventType::Delete => Some(None),
                EventType::Put => {
                    let kv = e.kv()?;
                    keys::controller::deser_value(kv.key(), kv.value())
                        .ok()
                        .map(Some)
                }
            }
        });
        Ok(Watch::new(rx, Some(task)))
    }
}
