//! Link and mirror-topic operations (issue 20), shared by the HTTP API and so by
//! `oxbow links`: create (after checking the source answers with the link's credentials),
//! pause, resume, delete, describe with lag, and promote.
//!
//! Every write is a compare-and-swap on the record's version, retried on a conflict up to
//! [`CAS_ATTEMPTS`] times, and applied to this broker's copy at once so the caller's next
//! request sees it.
//!
//! Promotion writes the topic's state `promoted`. That alone makes no partition writable:
//! each leader's supervisor, woken by the change, cancels and awaits the partition's task
//! before [`super::Mirrors::check_writable`] lets a produce in, and nothing starts a task
//! for a promoted topic again. With `wait_for_lag_zero`, promotion first waits (bounded)
//! until every partition's destination high watermark reaches the source's.

use super::supervisor::put_topic;
use super::task;
use super::{Mirrors, Versioned};
use crate::broker::Broker;
use crate::client::Client;
use crate::error::BrokerError;
use oxbow_metadata::{
    Link, LinkState, MirrorEvent, MirrorKind, MirrorRecord, MirrorState, MirrorTopic,
};
use std::sync::Arc;
use std::time::Duration;

/// Compare-and-swap attempts before a conflict is reported.
pub const CAS_ATTEMPTS: usize = 8;
/// Longest a promotion waits for lag zero.
pub const PROMOTE_WAIT_MAX: Duration = Duration::from_secs(300);

type Result<T> = std::result::Result<T, BrokerError>;

fn unknown_link(name: &str) -> BrokerError {
    BrokerError::UnknownLink(name.to_string())
}

async fn put_link(broker: &Broker, link: &Link, expected: Option<i64>) -> Result<i64> {
    let value = link.encode()?;
    let version = broker
        .metadata
        .put_mirror_record(MirrorKind::Link, &link.name, value.clone(), expected)
        .await?;
    broker.mirrors.apply(MirrorEvent::Put(MirrorRecord {
        kind: MirrorKind::Link,
        name: link.name.clone(),
        value,
        version,
    }));
    Ok(version)
}

/// Creates a link. Unless `skip_validation`, first connects to the source with the link's
/// credentials and lists its topics, so a wrong address or password is reported here.
pub async fn create_link(broker: &Broker, link: Link, skip_validation: bool) -> Result<i64> {
    link.validate()?;
    if !skip_validation {
        check_source(&link).await?;
    }
    put_link(broker, &link, None).await
}

/// Connects to the link's source and lists its topics.
pub async fn check_source(link: &Link) -> Result<Client> {
    let mut client = task::connect(link)
        .await
        .map_err(|e| BrokerError::InvalidRequest(format!("link '{}': {e}", link.name)))?;
    client.metadata(None).await.map_err(|e| {
        BrokerError::InvalidRequest(format!(
            "link '{}': the source at {} did not answer a metadata request: {e}",
            link.name, link.bootstrap
        ))
    })?;
    Ok(client)
}

/// Pauses or resumes a link.
pub async fn set_link_state(broker: &Broker, name: &str, state: LinkState) -> Result<()> {
    for _ in 0..CAS_ATTEMPTS {
        let current = current_link(broker, name).await?;
        if current.value.state == state {
            return Ok(());
        }
        let updated = Link {
            state,
            ..current.value.clone()
        };
        match put_link(broker, &updated, Some(current.version)).await {
            Ok(_) => return Ok(()),
            Err(BrokerError::Metadata(e)) if e.kind() == oxbow_metadata::ErrorKind::Conflict => {
                continue
            }
            Err(e) => return Err(e),
        }
    }
    Err(BrokerError::InvalidRequest(format!(
        "link '{name}' kept changing; try again"
    )))
}

async fn current_link(broker: &Broker, name: &str) -> Result<Versioned<Link>> {
    // The store, not the copy: a compare-and-swap must start from the latest version.
    let records = broker.metadata.mirror_records(MirrorKind::Link).await?;
    let r = records
        .into_iter()
        .find(|r| r.name == name)
        .ok_or_else(|| unknown_link(name))?;
    Ok(Versioned {
        value: Link::decode(&r.value)?,
        version: r.version,
    })
}

async fn current_topics(broker: &Broker) -> Result<Vec<Versioned<MirrorTopic>>> {
    let records = broker.metadata.mirror_records(MirrorKind::Topic).await?;
    records
        .into_iter()
        .map(|r| {
            Ok(Versioned {
                value: MirrorTopic::decode(&r.value)?,
                version: r.version,
            })
        })
        .collect()
}

/// Deletes a link. Its mirror topics must be promoted first, unless `force`, which also
/// deletes their mirror records (the topics stay, with what they hold, and become ordinary
/// topics once their tasks have stopped).
pub async fn delete_link(broker: &Broker, name: &str, force: bool) -> Result<()> {
    let link = current_link(broker, name).await?;
    let topics: Vec<_> = current_topics(broker)
        .await?
        .into_iter()
        .filter(|t| t.value.link == name)
        .collect();
    let unpromoted: Vec<&str> = topics
        .iter()
        .filter(|t| t.value.state != MirrorState::Promoted)
        .map(|t| t.value.topic.as_str())
        .collect();
    if !unpromoted.is_empty() && !force {
        return Err(BrokerError::InvalidRequest(format!(
            "link '{name}' still mirrors {}; promote them first, or delete with force",
            unpromoted.join(", ")
        )));
    }
    for t in &topics {
        broker
            .metadata
            .delete_mirror_record(MirrorKind::Topic, &t.value.topic, None)
            .await?;
        broker.mirrors.apply(MirrorEvent::Deleted {
            kind: MirrorKind::Topic,
            name: t.value.topic.clone(),
        });
    }
    broker
        .metadata
        .delete_mirror_record(MirrorKind::Link, name, Some(link.version))
        .await?;
    broker.mirrors.apply(MirrorEvent::Deleted {
        kind: MirrorKind::Link,
        name: name.to_string(),
    });
    Ok(())
}

/// One partition's position on both sides.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PartitionPosition {
    pub partition: i32,
    /// The source's high watermark (-1 if the source did not answer).
    pub source_end: i64,
    /// The destination's high watermark (the catalog's end for partitions led elsewhere).
    pub destination_end: i64,
    /// `source_end - destination_end`, at least 0 (-1 if unknown).
    pub lag_records: i64,
}

/// Where each partition of mirror topic `m` stands, asking the source over `client`.
pub async fn positions(
    broker: &Broker,
    client: &mut Client,
    m: &MirrorTopic,
) -> Result<Vec<PartitionPosition>> {
    let topic = broker
        .topic(&m.topic)
        .ok_or_else(|| BrokerError::UnknownTopic(m.topic.clone()))?;
    let mut out = Vec::with_capacity(topic.partitions.len());
    for p in &topic.partitions {
        let dest = if p.leader == broker.settings.broker_id {
            broker
                .list_offset(&topic, p.partition, crate::client::LATEST_TIMESTAMP)
                .await
        } else {
            broker
                .list_offset_elsewhere(&topic, p.partition, crate::client::LATEST_TIMESTAMP)
                .await
        }
        .map(|(o, _)| o)
        .unwrap_or(-1);
        let source = client
            .list_offsets(
                &m.source_topic,
                p.partition,
                crate::client::LATEST_TIMESTAMP,
            )
            .await
            .unwrap_or(-1);
        let lag = if source < 0 || dest < 0 {
            -1
        } else {
            (source - dest).max(0)
        };
        out.push(PartitionPosition {
            partition: p.partition,
            source_end: source,
            destination_end: dest,
            lag_records: lag,
        });
    }
    Ok(out)
}

/// What promoting one topic did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Promoted {
    pub topic: String,
    /// `promoted`, or why not.
    pub outcome: String,
    /// Records the source was ahead by when the topic was promoted (-1: not measured), the
    /// data this promotion gives up (the RPO).
    pub lag_records_at_promotion: i64,
    pub duration_ms: u64,
}

/// Promotes `topics` of link `name` (every mirror topic of it when empty).
pub async fn promote(
    broker: &Broker,
    name: &str,
    topics: &[String],
    wait_for_lag_zero: Option<Duration>,
) -> Result<Vec<Promoted>> {
    let link = current_link(broker, name).await?.value;
    let all: Vec<_> = current_topics(broker)
        .await?
        .into_iter()
        .filter(|t| t.value.link == name)
        .collect();
    let chosen: Vec<_> = if topics.is_empty() {
        all
    } else {
        for t in topics {
            if !all.iter().any(|m| &m.value.topic == t) {
                return Err(BrokerError::InvalidRequest(format!(
                    "topic '{t}' is not a mirror topic of link '{name}'"
                )));
            }
        }
        all.into_iter()
            .filter(|m| topics.contains(&m.value.topic))
            .collect()
    };
    let mut client = task::connect(&link).await.ok();
    let mut out = Vec::new();
    for m in chosen {
        let started = tokio::time::Instant::now();
        if m.value.state == MirrorState::Promoted {
            out.push(Promoted {
                topic: m.value.topic.clone(),
                outcome: "promoted".into(),
                lag_records_at_promotion: -1,
                duration_ms: 0,
            });
            continue;
        }
        let mut lag = -1;
        if let Some(c) = client.as_mut() {
            let deadline = started + wait_for_lag_zero.unwrap_or_default().min(PROMOTE_WAIT_MAX);
            loop {
                let pos = positions(broker, c, &m.value).await?;
                lag = if pos.iter().any(|p| p.lag_records < 0) {
                    -1
                } else {
                    pos.iter().map(|p| p.lag_records).sum()
                };
                if wait_for_lag_zero.is_none() || lag == 0 {
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(BrokerError::InvalidRequest(format!(
                        "topic '{}' still {lag} records behind its source after {:?}; not promoted",
                        m.value.topic,
                        wait_for_lag_zero.unwrap_or_default()
                    )));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        } else if wait_for_lag_zero.is_some() {
            return Err(BrokerError::InvalidRequest(format!(
                "link '{name}': the source does not answer, so lag zero cannot be waited for"
            )));
        }
        let outcome = promote_one(broker, &broker.mirrors, &m.value.topic).await;
        out.push(Promoted {
            topic: m.value.topic.clone(),
            outcome: match outcome {
                Ok(()) => "promoted".into(),
                Err(e) => e.to_string(),
            },
            lag_records_at_promotion: lag,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        });
    }
    Ok(out)
}

async fn promote_one(broker: &Broker, mirrors: &Arc<Mirrors>, topic: &str) -> Result<()> {
    for _ in 0..CAS_ATTEMPTS {
        let current = current_topics(broker)
            .await?
            .into_iter()
            .find(|t| t.value.topic == topic)
            .ok_or_else(|| BrokerError::UnknownTopic(topic.to_string()))?;
        if current.value.state == MirrorState::Promoted {
            return Ok(());
        }
        let updated = MirrorTopic {
            state: MirrorState::Promoted,
            error: None,
            ..current.value.clone()
        };
        match put_topic(
            broker.metadata.as_ref(),
            mirrors,
            &updated,
            Some(current.version),
        )
        .await
        {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == oxbow_metadata::ErrorKind::Conflict => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(BrokerError::InvalidRequest(format!(
        "mirror topic '{topic}' kept changing; try again"
    )))
}
