//! The topic rules over [`Kv`]: creating topics and partitions, deleting topics, reading
//! one partition's state, the compare-and-swap of a partition's state (leadership,
//! epochs) and of a topic's config overrides. Split from [`super`] so that module stays the trait's map; each method here is
//! one operation of [`crate::MetadataStore`].

use super::{first, KvStore, CAS_ATTEMPTS};
use crate::error::{Error, Result};
use crate::keys::{self, topic::TopicRecord, Root};
use crate::kv::{Compare, Get, KeyRange, KeyValue, Kv, Op, Txn};
use crate::topic::{
    validate_partition_count, validate_topic_name, PartitionState, TopicConfigs, TopicMetadata,
    TopicSpec,
};
use crate::topic_configs::ConfigAlteration;
use crate::types::{BrokerId, PartitionId, TopicId};
use std::collections::HashMap;

/// A placement needs at least one leader.
fn check_leaders(leaders: &[BrokerId]) -> Result<()> {
    if leaders.is_empty() {
        return Err(Error::InvalidRequest(
            "a placement needs at least one leader".into(),
        ));
    }
    Ok(())
}

fn leader_of(leaders: &[BrokerId], partition: PartitionId) -> BrokerId {
    crate::topic::placed_leader(leaders, partition).expect("leaders checked non-empty")
}

/// A topic record plus its stored partition states → the topic as callers see it.
pub(super) fn assemble(
    root: &Root,
    record: TopicRecord,
    partitions: &[KeyValue],
) -> Result<TopicMetadata> {
    let mut states: Vec<PartitionState> = record
        .initial_leaders
        .iter()
        .enumerate()
        .map(|(i, leader)| PartitionState::new(i as PartitionId, *leader))
        .collect();
    for kv in partitions {
        if keys::partition::deser_key(root, &kv.key)? != record.topic_id {
            continue;
        }
        let state = keys::partition::deser_value(&kv.key, &kv.value)?;
        if let Some(slot) = usize::try_from(state.partition)
            .ok()
            .and_then(|i| states.get_mut(i))
        {
            *slot = state;
        }
    }
    Ok(TopicMetadata {
        name: record.name,
        topic_id: record.topic_id,
        replication_factor: record.replication_factor,
        configs: record.configs,
        partitions: states,
        created_at_ms: record.created_at_ms,
    })
}

impl<K: Kv> KvStore<K> {
    pub(super) async fn create_topic_with_leaders_rules(
        &self,
        spec: TopicSpec,
        leaders: &[BrokerId],
    ) -> Result<TopicMetadata> {
        validate_topic_name(&spec.name)?;
        validate_partition_count(spec.partitions)?;
        let configs = TopicConfigs::validated(spec.configs.clone())?;
        check_leaders(leaders)?;
        let topic = TopicMetadata {
            name: spec.name.clone(),
            topic_id: TopicId(self.rng.uuid()),
            replication_factor: spec.replication_factor,
            configs,
            partitions: (0..spec.partitions)
                .map(|p| PartitionState::new(p, leader_of(leaders, p)))
                .collect(),
            created_at_ms: self.clock.unix_ms(),
        };
        let root = &self.root;
        let topic_key = keys::topic::ser_key(root, &topic.name);
        let txn = Txn::new().when([Compare::absent(topic_key.clone())]).then([
            Op::put(
                topic_key,
                keys::topic::ser_value(&TopicRecord::from_metadata(&topic))?,
            ),
            Op::put(
                keys::topic_id::ser_key(root, topic.topic_id),
                keys::topic_id::ser_value(&topic.name)?,
            ),
        ]);
        if !self.kv.txn(txn).await?.succeeded {
            return Err(Error::TopicExists(topic.name));
        }
        Ok(topic)
    }

    pub(super) async fn delete_topic_rules(&self, name: &str) -> Result<TopicMetadata> {
        let root = &self.root;
        for _ in 0..CAS_ATTEMPTS {
            let Some((topic, kv)) = self.read_topic(name).await? else {
                return Err(Error::UnknownTopic(name.to_string()));
            };
            let topic_key = keys::topic::ser_key(root, name);
            let txn = Txn::new()
                .when([Compare::unchanged(topic_key.clone(), Some(&kv))])
                .then([
                    Op::delete(KeyRange::key(topic_key)),
                    Op::delete(KeyRange::key(keys::topic_id::ser_key(root, topic.topic_id))),
                    Op::delete(KeyRange::prefix(keys::partition::topic_prefix(
                        root,
                        topic.topic_id,
                    ))),
                    Op::delete(KeyRange::prefix(keys::catalog::topic_prefix(
                        root,
                        topic.topic_id,
                    ))),
                ]);
            if self.kv.txn(txn).await?.succeeded {
                self.index_forget_topic(topic.topic_id);
                self.sweep_objects().await;
                return Ok(topic);
            }
        }
        Err(Error::Conflict(format!("topic '{name}'")))
    }

    pub(super) async fn list_topics_rules(&self) -> Result<Vec<TopicMetadata>> {
        let root = &self.root;
        // One snapshot of the records and every stored partition state.
        let resp = self
            .kv
            .txn(Txn::new().then([
                Op::Get(Get::prefix(keys::topic::prefix(root))),
                Op::Get(Get::prefix(keys::partition::prefix(root))),
            ]))
            .await?;
        let mut by_topic: HashMap<TopicId, Vec<KeyValue>> = HashMap::new();
        for kv in &resp.get(1)?.kvs {
            let id = keys::partition::deser_key(root, &kv.key)?;
            by_topic.entry(id).or_default().push(kv.clone());
        }
        let mut out = Vec::new();
        for kv in &resp.get(0)?.kvs {
            let record = keys::topic::deser_value(&kv.key, &kv.value)?;
            let parts = by_topic.remove(&record.topic_id).unwrap_or_default();
            out.push(assemble(root, record, &parts)?);
        }
        Ok(out)
    }

    pub(super) async fn partition_state_rules(
        &self,
        topic_id: TopicId,
        partition: PartitionId,
    ) -> Result<Option<(TopicMetadata, PartitionState)>> {
        let Some((name, _)) = self.name_of(topic_id).await? else {
            return Ok(None);
        };
        let key = keys::partition::ser_key(&self.root, topic_id, partition);
        let resp = self
            .kv
            .txn(Txn::new().then([
                Op::Get(Get::key(keys::topic::ser_key(&self.root, &name))),
                Op::Get(Get::key(key)),
            ]))
            .await?;
        let Some(record_kv) = first(resp.get(0)?) else {
            return Ok(None);
        };
        let record = keys::topic::deser_value(&record_kv.key, &record_kv.value)?;
        if record.topic_id != topic_id {
            return Ok(None);
        }
        let part = resp.get(1)?.kvs.clone();
        let topic = assemble(&self.root, record, &part)?;
        Ok(topic
            .partition(partition)
            .cloned()
            .map(|state| (topic, state)))
    }

    pub(super) async fn create_partitions_with_leaders_rules(
        &self,
        name: &str,
        total: i32,
        leaders: &[BrokerId],
    ) -> Result<TopicMetadata> {
        validate_partition_count(total)?;
        check_leaders(leaders)?;
        let key = keys::topic::ser_key(&self.root, name);
        for _ in 0..CAS_ATTEMPTS {
            let Some((mut topic, kv)) = self.read_topic(name).await? else {
                return Err(Error::UnknownTopic(name.to_string()));
            };
            let current = topic.partitions.len() as i32;
            if total <= current {
                return Err(Error::InvalidPartitions {
                    count: total,
                    reason: format!(
                        "topic '{name}' already has {current} partitions; partitions can only be added"
                    ),
                });
            }
            topic
                .partitions
                .extend((current..total).map(|p| PartitionState::new(p, leader_of(leaders, p))));
            let mut initial_leaders = keys::topic::deser_value(&kv.key, &kv.value)?.initial_leaders;
            initial_leaders.extend((current..total).map(|p| leader_of(leaders, p)));
            let value = keys::topic::ser_value(&TopicRecord {
                initial_leaders,
                ..TopicRecord::from_metadata(&topic)
            })?;
            let txn = Txn::new()
                .when([Compare::unchanged(key.clone(), Some(&kv))])
                .then([Op::put(key.clone(), value)]);
            if self.kv.txn(txn).await?.succeeded {
                return Ok(topic);
            }
        }
        Err(Error::Conflict(format!("topic '{name}'")))
    }

    pub(super) async fn update_partition_rules(
        &self,
        topic_id: TopicId,
        expected_version: u64,
        new: PartitionState,
    ) -> Result<PartitionState> {
        let root = &self.root;
        for _ in 0..CAS_ATTEMPTS {
            let Some((name, id_kv)) = self.name_of(topic_id).await? else {
                return Err(Error::UnknownTopic(topic_id.to_string()));
            };
            // The topic record alone (its partition count), not every partition's state: an
            // update must cost the same whatever the topic's size (a broker opening a
            // thousand partitions records a thousand epochs).
            let Some(record) = self.topic_record(&name).await? else {
                return Err(Error::UnknownTopic(name));
            };
            if usize::try_from(new.partition).map_or(true, |i| i >= record.initial_leaders.len()) {
                return Err(Error::UnknownPartition {
                    topic: name,
                    partition: new.partition,
                });
            }
            // The version compared is the one of the very key state the transaction's
            // compare pins (absent: never changed, version 0).
            let key = keys::partition::ser_key(root, topic_id, new.partition);
            let stored = self.get(key.clone()).await?;
            let current = match first(&stored) {
                Some(kv) => Some(keys::partition::deser_value(&kv.key, &kv.value)?),
                None => None,
            };
            let current_version = current.as_ref().map_or(0, |c| c.version);
            if current_version != expected_version {
                return Err(Error::Conflict(format!(
                    "partition {name}-{} (version {current_version} != expected {expected_version})",
                    new.partition
                )));
            }
            let updated = PartitionState {
                version: expected_version + 1,
                // The log start never moves back: what retention or DeleteRecords removed is
                // gone (its catalog keys and objects may already be deleted).
                log_start_offset: new
                    .log_start_offset
                    .max(current.as_ref().map_or(0, |c| c.log_start_offset)),
                ..new.clone()
            };
            let txn = Txn::new()
                .when([
                    Compare::unchanged(key.clone(), first(&stored)),
                    Compare::unchanged(keys::topic_id::ser_key(root, topic_id), Some(&id_kv)),
                ])
                .then([Op::put(key.clone(), keys::partition::ser_value(&updated)?)]);
            let resp = self.kv.txn(txn).await?;
            if resp.succeeded {
                // The catalog's epoch cut and fences see this change at once.
                self.index_own_put(KeyValue {
                    key: key.into_bytes(),
                    value: keys::partition::ser_value(&updated)?,
                    create_revision: resp.revision,
                    mod_revision: resp.revision,
                    version: 1,
                    lease: 0,
                });
                return Ok(updated);
            }
        }
        Err(Error::Conflict(format!(
            "partition {topic_id}-{}",
            new.partition
        )))
    }

    pub(super) async fn alter_topic_configs_rules(
        &self,
        name: &str,
        alteration: ConfigAlteration,
    ) -> Result<TopicMetadata> {
        let key = keys::topic::ser_key(&self.root, name);
        for _ in 0..CAS_ATTEMPTS {
            let Some((mut topic, kv)) = self.read_topic(name).await? else {
                return Err(Error::UnknownTopic(name.to_string()));
            };
            // Decided on the record as stored now: the compare below pins it, so an
            // alteration racing this one is re-applied on top, never lost.
            let configs = topic.configs.altered(&alteration)?;
            if configs == topic.configs {
                return Ok(topic);
            }
            let record = keys::topic::deser_value(&kv.key, &kv.value)?;
            let value = keys::topic::ser_value(&TopicRecord {
                configs: configs.clone(),
                ..record
            })?;
            let txn = Txn::new()
                .when([Compare::unchanged(key.clone(), Some(&kv))])
                .then([Op::put(key.clone(), value)]);
            if self.kv.txn(txn).await?.succeeded {
                topic.configs = configs;
                return Ok(topic);
            }
        }
        Err(Error::Conflict(format!("topic '{name}'")))
    }
}
