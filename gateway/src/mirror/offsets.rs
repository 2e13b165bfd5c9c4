//! Copying consumer offsets through a link (issue 20): the committed offsets of the source
//! groups a link selects, for its mirror topics, committed unchanged at the destination
//! (offsets are identical, so nothing is translated).
//!
//! Runs on every broker for the groups it coordinates (so the coordinator's cache and the
//! metadata service stay one story), every reconcile round. Two rules keep a consumer safe:
//! - a group with members on the destination is never moved (it is consuming here: its
//!   own commits win);
//! - an offset is capped at what the destination has (its high watermark if led here,
//!   else the catalog's end, which is at or below it): a group failing over never starts
//!   past data the mirror has not got, so nothing is skipped; it may read again what it
//!   read at the source between the cap and its committed offset (at-least-once, as any
//!   Kafka consumer after a failover).
//!
//! A destination offset already at or past the source's is left alone (never moves a
//! group backwards).

use super::Mirrors;
use crate::broker::Broker;
use crate::client::Client;
use oxbow_metadata::{Link, MirrorState};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Most groups one link syncs per round (a source with more is synced in name order up to
/// it; raise deliberately, each costs an OffsetFetch per round).
pub const GROUPS_PER_ROUND_MAX: usize = 1000;

/// One round for `link` over `client` (connected to its source). Errors are logged and
/// reported as the link's last error; the next round tries again.
pub async fn sync_groups(
    broker: &Arc<Broker>,
    mirrors: &Arc<Mirrors>,
    link: &Link,
    client: &mut Client,
) {
    if link.groups.is_empty() {
        return;
    }
    let groups = match client.list_groups().await {
        Ok(g) => g,
        Err(e) => {
            mirrors.set_link_error(&link.name, Some(format!("listing source groups: {e}")));
            return;
        }
    };
    let mirrored: BTreeMap<String, String> = mirrors
        .topics()
        .into_iter()
        .filter(|t| t.value.link == link.name && t.value.state != MirrorState::Failed)
        .map(|t| (t.value.source_topic.clone(), t.value.topic.clone()))
        .collect();
    let mut selected: Vec<String> = groups
        .into_iter()
        .map(|g| g.group_id)
        .filter(|g| link.selects_group(g) && broker.coordinates(g))
        .collect();
    selected.sort();
    selected.truncate(GROUPS_PER_ROUND_MAX);
    for group in selected {
        if let Err(e) = sync_group(broker, client, &group, &mirrored).await {
            tracing::warn!(link = %link.name, group = %group, error = %e, "offset sync failed");
            mirrors.set_link_error(&link.name, Some(format!("group '{group}': {e}")));
        }
    }
}

async fn sync_group(
    broker: &Arc<Broker>,
    client: &mut Client,
    group: &str,
    mirrored: &BTreeMap<String, String>,
) -> Result<(), String> {
    if let Some(view) = broker.coordinator.describe(group).await {
        if !view.members.is_empty() {
            return Ok(());
        }
    }
    let source = client
        .fetch_offsets(group)
        .await
        .map_err(|e| format!("source OffsetFetch: {e}"))?;
    let current = broker
        .coordinator
        .fetch_offsets(group)
        .await
        .map_err(|e| e.to_string())?;
    let mut commit = Vec::new();
    for o in source {
        let Some(dest_topic) = mirrored.get(&o.topic) else {
            continue;
        };
        if o.offset < 0 {
            continue;
        }
        let Some(topic) = broker.topic(dest_topic) else {
            continue;
        };
        let Some(p) = topic.partition(o.partition) else {
            continue;
        };
        let have = if p.leader == broker.settings.broker_id {
            broker
                .list_offset(&topic, o.partition, crate::client::LATEST_TIMESTAMP)
                .await
        } else {
            broker
                .list_offset_elsewhere(&topic, o.partition, crate::client::LATEST_TIMESTAMP)
                .await
        }
        .map_err(|e| e.to_string())?
        .0;
        let offset = o.offset.min(have);
        let held = current
            .get(&(dest_topic.clone(), o.partition))
            .map(|c| c.offset);
        if held.is_some_and(|h| h >= offset) {
            continue;
        }
        commit.push((dest_topic.clone(), o.partition, offset, -1, String::new()));
    }
    if commit.is_empty() {
        return Ok(());
    }
    // Checked again just before writing: a consumer may have joined meanwhile.
    if let Some(view) = broker.coordinator.describe(group).await {
        if !view.members.is_empty() {
            return Ok(());
        }
    }
    let n = commit.len();
    broker
        .coordinator
        .commit_offsets(group, commit)
        .await
        .map_err(|e| e.to_string())?;
    tracing::debug!(group, partitions = n, "mirrored committed offsets");
    Ok(())
}
