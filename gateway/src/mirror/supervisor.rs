//! Starting and stopping mirror tasks where this broker leads mirror partitions, and, on
//! the controller, reconciling each active link with its source cluster (issue 20).
//!
//! Every [`TICK`] and on every change of the mirror records: a task runs for each partition
//! of a mirroring topic (its link active) that this broker leads per its topic cache; a
//! task whose partition moved away, whose link paused or changed, or whose topic was
//! promoted is cancelled and awaited, and only then forgotten ([`Mirrors::stopped`]), which
//! is what lets produce in after a promotion. A task that ends failed marks its topic
//! `failed` with the reason (compare-and-swap on the record).
//!
//! The reconciler (controller only, every [`RECONCILE_EVERY`]): for each active link, the
//! source's topics that the link selects get a mirror record (first, so the topic is never
//! writable) and then a destination topic of the same partition count with the source's
//! topic configs that Oxbow knows; a source topic that grew is followed by growing the
//! mirror; one that shrank or disappeared fails its mirror topic with the reason; then the
//! selected groups' offsets are copied ([`super::offsets`]).

use super::task::{self, Ended, Task};
use super::Mirrors;
use crate::broker::Broker;
use oxbow_metadata::{
    Link, LinkState, MetadataStore, MirrorKind, MirrorState, MirrorTopic, TopicSpec,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How often leadership is compared with the running tasks (besides on every change).
pub const TICK: Duration = Duration::from_secs(1);
/// How often the controller compares each active link with its source.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(5);

struct Running {
    stop: CancellationToken,
    handle: JoinHandle<Ended>,
    link: Link,
}

/// Runs until `shutdown`, then stops and awaits every task.
pub async fn run_supervisor(broker: Arc<Broker>, shutdown: CancellationToken) {
    let mirrors = broker.mirrors.clone();
    let mut tasks: HashMap<(String, i32), Running> = HashMap::new();
    let mut last_reconcile: Option<tokio::time::Instant> = None;
    loop {
        supervise(&broker, &mirrors, &mut tasks).await;
        if last_reconcile.is_none_or(|t| t.elapsed() >= RECONCILE_EVERY) {
            last_reconcile = Some(tokio::time::Instant::now());
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = reconcile_links(&broker, &mirrors) => {}
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = mirrors.changed.notified() => {}
            _ = tokio::time::sleep(TICK) => {}
        }
    }
    for ((topic, partition), r) in tasks.drain() {
        r.stop.cancel();
        let _ = r.handle.await;
        mirrors.stopped(&topic, partition);
    }
}

async fn supervise(
    broker: &Arc<Broker>,
    mirrors: &Arc<Mirrors>,
    tasks: &mut HashMap<(String, i32), Running>,
) {
    let me = broker.settings.broker_id;
    // Stop what should not run; collect what ended.
    let keys: Vec<(String, i32)> = tasks.keys().cloned().collect();
    for key in keys {
        let Some(r) = tasks.get(&key) else { continue };
        let leads = broker
            .topic(&key.0)
            .and_then(|t| t.partition(key.1).map(|p| p.leader == me))
            .unwrap_or(false);
        let keep = leads && !r.handle.is_finished() && mirrors.still_wanted(&key.0, &r.link);
        if keep {
            continue;
        }
        let Some(r) = tasks.remove(&key) else {
            continue;
        };
        r.stop.cancel();
        let ended = r.handle.await;
        mirrors.stopped(&key.0, key.1);
        if let Ok(Ended::Failed(why)) = ended {
            tracing::error!(topic = %key.0, partition = key.1, error = %why, "mirror failed");
            fail_topic(broker.metadata.as_ref(), mirrors, &key.0, &why).await;
        }
    }
    // Start what should run.
    for m in mirrors.topics() {
        if m.value.state != MirrorState::Mirroring {
            continue;
        }
        let Some(topic) = broker.topic(&m.value.topic) else {
            continue;
        };
        for p in &topic.partitions {
            if p.leader != me || tasks.contains_key(&(topic.name.clone(), p.partition)) {
                continue;
            }
            let Some((link, source_topic, lag)) = mirrors.try_start(&topic.name, p.partition)
            else {
                continue;
            };
            let stop = CancellationToken::new();
            let t = Task {
                broker: broker.clone(),
                mirrors: mirrors.clone(),
                topic: topic.name.clone(),
                partition: p.partition,
                bytes: mirrors.bytes_counter(&link.name),
                link: link.clone(),
                source_topic,
                lag,
            };
            let handle = tokio::spawn(t.run(stop.clone()));
            tasks.insert(
                (topic.name.clone(), p.partition),
                Running { stop, handle, link },
            );
        }
    }
}

/// Marks `topic` failed with `why` (unless it was promoted meanwhile).
pub async fn fail_topic(metadata: &dyn MetadataStore, mirrors: &Mirrors, topic: &str, why: &str) {
    let Some(current) = mirrors.topic(topic) else {
        return;
    };
    if current.value.state != MirrorState::Mirroring {
        return;
    }
    let updated = MirrorTopic {
        state: MirrorState::Failed,
        error: Some(why.to_string()),
        ..current.value.clone()
    };
    let _ = put_topic(metadata, mirrors, &updated, Some(current.version)).await;
}

/// Writes a mirror topic record and applies it to this broker's copy at once.
pub async fn put_topic(
    metadata: &dyn MetadataStore,
    mirrors: &Mirrors,
    t: &MirrorTopic,
    expected_version: Option<i64>,
) -> oxbow_metadata::Result<i64> {
    let value = t.encode()?;
    let version = metadata
        .put_mirror_record(MirrorKind::Topic, &t.topic, value.clone(), expected_version)
        .await?;
    mirrors.apply(oxbow_metadata::MirrorEvent::Put(
        oxbow_metadata::MirrorRecord {
            kind: MirrorKind::Topic,
            name: t.topic.clone(),
            value,
            version,
        },
    ));
    Ok(version)
}

/// One round over the active links: on the controller, their topics ([`reconcile_topics`]);
/// on every broker, the offsets of the groups it coordinates ([`super::offsets`]).
async fn reconcile_links(broker: &Arc<Broker>, mirrors: &Arc<Mirrors>) {
    let controller = broker.cluster.controller() == Some(broker.settings.broker_id);
    for link in mirrors.links() {
        let link = &link.value;
        if link.state != LinkState::Active || (!controller && link.groups.is_empty()) {
            continue;
        }
        let mut client = match task::connect(link).await {
            Ok(c) => c,
            Err(why) => {
                tracing::warn!(link = %link.name, error = %why, "link reconcile failed");
                mirrors.set_link_error(&link.name, Some(why));
                continue;
            }
        };
        if controller {
            if let Err(why) = reconcile_topics(broker, mirrors, link, &mut client).await {
                tracing::warn!(link = %link.name, error = %why, "link reconcile failed");
                mirrors.set_link_error(&link.name, Some(why));
            }
        }
        super::offsets::sync_groups(broker, mirrors, link, &mut client).await;
    }
}

async fn reconcile_topics(
    broker: &Arc<Broker>,
    mirrors: &Arc<Mirrors>,
    link: &Link,
    client: &mut crate::client::Client,
) -> Result<(), String> {
    let source = client
        .metadata(None)
        .await
        .map_err(|e| format!("listing the source's topics: {e}"))?;
    let source_topics: BTreeMap<String, usize> = source
        .topics
        .iter()
        .filter(|t| t.error.is_none() && !t.is_internal && !t.name.starts_with("__"))
        .map(|t| (t.name.clone(), t.partitions.len()))
        .collect();
    // Mirror topics whose source is gone, or shrank.
    for name in mirrors.topics_of(&link.name) {
        let Some(m) = mirrors.topic(&name) else {
            continue;
        };
        if m.value.state != MirrorState::Mirroring {
            continue;
        }
        match source_topics.get(&m.value.source_topic) {
            None => {
                fail_topic(
                    broker.metadata.as_ref(),
                    mirrors,
                    &name,
                    &format!(
                        "source topic '{}' no longer exists on the link's cluster",
                        m.value.source_topic
                    ),
                )
                .await
            }
            Some(&n) => {
                let have = broker.topic(&name).map(|t| t.partitions.len());
                match have {
                    Some(have) if n < have => {
                        fail_topic(
                            broker.metadata.as_ref(),
                            mirrors,
                            &name,
                            &format!(
                            "source topic '{}' has {n} partitions, fewer than the mirror's {have}",
                            m.value.source_topic
                        ),
                        )
                        .await
                    }
                    Some(have) if n > have => {
                        let total = i32::try_from(n).map_err(|e| e.to_string())?;
                        broker
                            .create_partitions(&name, total)
                            .await
                            .map_err(|e| format!("growing mirror topic '{name}' to {n}: {e}"))?;
                        tracing::info!(topic = %name, partitions = n, "mirror topic grown with its source");
                    }
                    Some(_) => {
                        follow_configs(broker, mirrors, link, client, &name, &m.value.source_topic)
                            .await
                    }
                    None => {
                        create_mirror_topic(broker, client, &name, &m.value.source_topic, n).await?
                    }
                }
            }
        }
    }
    // Source topics the link selects that have no mirror yet.
    for (name, &n) in &source_topics {
        if !link.selects_topic(name) || mirrors.topic(name).is_some() {
            continue;
        }
        if broker.topic(name).is_some() {
            // Never turn an existing (written) topic into a mirror: its offsets differ.
            mirrors.set_link_error(
                &link.name,
                Some(format!(
                    "topic '{name}' already exists here and is not a mirror; not mirrored"
                )),
            );
            continue;
        }
        let m = MirrorTopic {
            topic: name.clone(),
            link: link.name.clone(),
            source_topic: name.clone(),
            state: MirrorState::Mirroring,
            error: None,
        };
        // The record first: from now on produce to the topic is refused.
        match put_topic(broker.metadata.as_ref(), mirrors, &m, None).await {
            Ok(_) => {}
            Err(e) if e.kind() == oxbow_metadata::ErrorKind::Conflict => continue,
            Err(e) => return Err(format!("recording mirror topic '{name}': {e}")),
        }
        create_mirror_topic(broker, client, name, name, n).await?;
    }
    Ok(())
}

/// The source topic's own overrides, where Oxbow knows the config.
async fn source_overrides(
    client: &mut crate::client::Client,
    source_topic: &str,
) -> Option<BTreeMap<String, String>> {
    let entries = client.describe_configs(source_topic).await.ok()?;
    Some(
        entries
            .into_iter()
            .filter(|e| {
                matches!(e.source, crate::client::ConfigSource::DynamicTopic)
                    && !e.is_sensitive
                    && oxbow_metadata::topic_configs::lookup(&e.name).is_some()
            })
            .filter_map(|e| e.value.map(|v| (e.name, v)))
            .collect(),
    )
}

/// A mirror topic's overrides are its source's (those Oxbow knows): a change at the source
/// is applied here by the next round; overrides set only here are replaced.
async fn follow_configs(
    broker: &Arc<Broker>,
    mirrors: &Arc<Mirrors>,
    link: &Link,
    client: &mut crate::client::Client,
    name: &str,
    source_topic: &str,
) {
    let (Some(desired), Some(topic)) = (
        source_overrides(client, source_topic).await,
        broker.topic(name),
    ) else {
        return;
    };
    let current: BTreeMap<String, String> = topic
        .configs
        .describe()
        .into_iter()
        .filter(|c| !c.is_default)
        .map(|c| (c.name.to_string(), c.value))
        .collect();
    if desired == current {
        return;
    }
    match broker
        .alter_topic_configs(
            name,
            oxbow_metadata::ConfigAlteration::Replace(desired),
            false,
        )
        .await
    {
        Ok(_) => tracing::info!(topic = %name, "mirror topic configs follow the source's"),
        Err(e) => mirrors.set_link_error(
            &link.name,
            Some(format!(
                "source configs of '{source_topic}' not applied to '{name}': {e}"
            )),
        ),
    }
}

async fn create_mirror_topic(
    broker: &Arc<Broker>,
    client: &mut crate::client::Client,
    name: &str,
    source_topic: &str,
    partitions: usize,
) -> Result<(), String> {
    let configs = source_overrides(client, source_topic)
        .await
        .unwrap_or_default();
    let spec = TopicSpec {
        name: name.to_string(),
        partitions: i32::try_from(partitions).map_err(|e| e.to_string())?,
        replication_factor: 1,
        configs,
    };
    let created = match broker.create_topic(spec.clone()).await {
        Err(e)
            if !spec.configs.is_empty()
                && e.code() == kafka_protocol::error::ResponseError::InvalidConfig.code() =>
        {
            tracing::warn!(topic = %name, error = %e, "source configs refused here; mirror topic created with defaults");
            broker
                .create_topic(TopicSpec {
                    configs: BTreeMap::new(),
                    ..spec
                })
                .await
        }
        other => other,
    };
    match created {
        Ok(_) => {
            tracing::info!(topic = %name, partitions, "mirror topic created");
            Ok(())
        }
        Err(e) if e.code() == kafka_protocol::error::ResponseError::TopicAlreadyExists.code() => {
            Ok(())
        }
        Err(e) => Err(format!("creating mirror topic '{name}': {e}")),
    }
}
