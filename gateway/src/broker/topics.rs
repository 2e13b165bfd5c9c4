//! Topic administration on the [`Broker`]: creating topics and partitions (placed by
//! `cluster::placement`, or led as a manual assignment says), deleting them, and altering
//! their configs — each updating the topic cache at once.

use super::Broker;
use crate::cluster::placement;
use crate::error::{BrokerError, Result};
use oxbow_metadata::{BrokerId, TopicMetadata, TopicSpec};
use std::collections::BTreeMap;
use std::sync::Arc;

impl Broker {
    /// Leaders for `count` new partitions of a topic whose existing partitions are led by
    /// `existing`, over the live brokers (this broker alone if it sees none).
    fn placement(&self, existing: &[BrokerId], count: usize) -> Vec<BrokerId> {
        let mut nodes = self.cluster.nodes();
        if nodes.is_empty() {
            nodes.push(placement::Node::new(self.settings.broker_id, None));
        }
        let mut load: BTreeMap<BrokerId, usize> = BTreeMap::new();
        for t in self.topics() {
            for p in &t.partitions {
                *load.entry(p.leader).or_default() += 1;
            }
        }
        placement::place_new(&nodes, &load, existing, count)
    }

    /// Creates a topic, its partitions spread over the live brokers (`cluster::placement`).
    pub async fn create_topic(&self, spec: TopicSpec) -> Result<Arc<TopicMetadata>> {
        self.create_topic_led_by(spec, None).await
    }

    /// [`Broker::create_topic`] with partition `p` led by `leaders[p]` when given (a manual
    /// assignment), else by the cluster's placement.
    pub async fn create_topic_led_by(
        &self,
        spec: TopicSpec,
        leaders: Option<Vec<BrokerId>>,
    ) -> Result<Arc<TopicMetadata>> {
        refuse_internal_create(&spec.name)?;
        let name = spec.name.clone();
        let leaders = leaders
            .unwrap_or_else(|| self.placement(&[], usize::try_from(spec.partitions).unwrap_or(0)));
        let leaders = if leaders.is_empty() {
            vec![self.settings.broker_id]
        } else {
            leaders
        };
        let created = self
            .metadata
            .create_topic_with_leaders(spec, &leaders)
            .await?;
        tracing::info!(topic = %name, partitions = created.partitions.len(), "created topic");
        for (key, value) in &created.configs.overrides {
            if let Some(note) = oxbow_metadata::topic::config_note(key, value) {
                tracing::warn!(topic = %name, config = %key, %value, "{note}");
            }
        }
        Ok(self.cache_put(created))
    }

    /// Checks a topic spec without creating it (CreateTopics `validate_only`).
    pub fn validate_topic(&self, spec: &TopicSpec) -> Result<()> {
        oxbow_metadata::topic::validate_topic_name(&spec.name)?;
        refuse_internal_create(&spec.name)?;
        oxbow_metadata::topic::validate_partition_count(spec.partitions)?;
        oxbow_metadata::TopicConfigs::validated(spec.configs.clone())?;
        if self.topic(&spec.name).is_some() {
            return Err(oxbow_metadata::Error::TopicExists(spec.name.clone()).into());
        }
        Ok(())
    }

    /// Deletes a topic and forgets its partitions.
    pub async fn delete_topic(&self, name: &str) -> Result<Arc<TopicMetadata>> {
        let deleted = self.metadata.delete_topic(name).await?;
        self.remove_topic(deleted.topic_id);
        tracing::info!(topic = %name, "deleted topic");
        Ok(Arc::new(deleted))
    }

    /// Grows a topic to `total` partitions, the new ones placed over the live brokers.
    pub async fn create_partitions(&self, name: &str, total: i32) -> Result<Arc<TopicMetadata>> {
        self.create_partitions_led_by(name, total, None).await
    }

    /// [`Broker::create_partitions`] with the new partitions led by `new_leaders` in order
    /// when given (a manual assignment), else by the cluster's placement.
    pub async fn create_partitions_led_by(
        &self,
        name: &str,
        total: i32,
        new_leaders: Option<Vec<BrokerId>>,
    ) -> Result<Arc<TopicMetadata>> {
        let existing: Vec<BrokerId> = self
            .topic(name)
            .map(|t| t.partitions.iter().map(|p| p.leader).collect())
            .unwrap_or_default();
        let new = usize::try_from(total)
            .unwrap_or(0)
            .saturating_sub(existing.len());
        // Indexed by partition: existing entries are ignored by the store.
        let mut leaders = existing.clone();
        leaders.extend(new_leaders.unwrap_or_else(|| self.placement(&existing, new)));
        if leaders.is_empty() {
            leaders.push(self.settings.broker_id);
        }
        let grown = self
            .metadata
            .create_partitions_with_leaders(name, total, &leaders)
            .await?;
        Ok(self.cache_put(grown))
    }

    /// The broker-level setting a topic config without an override falls back to, where it
    /// differs from Kafka's default: (broker config name, value). DescribeConfigs reports it
    /// as a static broker config, as Kafka reports a `log.retention.ms` in server.properties.
    pub fn static_topic_default(&self, name: &str) -> Option<(&'static str, String)> {
        let s = &self.settings;
        let (broker_name, value, kafka_default) = match name {
            "retention.ms" => ("log.retention.ms", s.log_retention_ms, 604_800_000),
            "retention.bytes" => ("log.retention.bytes", s.log_retention_bytes, -1),
            _ => return None,
        };
        (value != kafka_default).then(|| (broker_name, value.to_string()))
    }

    /// Changes a topic's configs in the metadata service (IncrementalAlterConfigs,
    /// AlterConfigs, `oxbow topics alter-config`, REST v3) and updates the cache at once;
    /// other brokers see it through the topic watch. `validate_only`: checked against the
    /// cached configs, nothing stored.
    pub async fn alter_topic_configs(
        &self,
        name: &str,
        alteration: oxbow_metadata::ConfigAlteration,
        validate_only: bool,
    ) -> Result<Arc<TopicMetadata>> {
        // Created on another broker a moment ago: not in this cache yet, but real.
        let topic = match self.topic(name) {
            Some(t) => t,
            None => self
                .refresh_topic(name)
                .await?
                .ok_or_else(|| BrokerError::UnknownTopic(name.to_string()))?,
        };
        if validate_only {
            topic.configs.altered(&alteration)?;
            return Ok(topic);
        }
        let altered = self.metadata.alter_topic_configs(name, alteration).await?;
        tracing::info!(topic = %name, configs = ?altered.configs.overrides, "altered topic configs");
        for (key, value) in &altered.configs.overrides {
            if let Some(note) = oxbow_metadata::topic::config_note(key, value) {
                tracing::warn!(topic = %name, config = %key, %value, "{note}");
            }
        }
        Ok(self.cache_put(altered))
    }
}

/// CreateTopics of an internal name: INVALID_REQUEST, as Kafka answers for
/// `__cluster_metadata` ("Creation of internal topic ... is prohibited").
fn refuse_internal_create(name: &str) -> Result<()> {
    if name == crate::transactions::markers::OFFSETS_TOPIC {
        // Listed in Metadata (`kafka/handlers/metadata.rs`): it exists, as in Kafka.
        return Err(BrokerError::Metadata(oxbow_metadata::Error::TopicExists(
            name.to_string(),
        )));
    }
    if oxbow_metadata::topic::is_internal_topic(name) {
        return Err(BrokerError::InvalidRequest(format!(
            "creation of internal topic {name} is prohibited (Oxbow keeps group offsets in \
             its metadata store; names starting with {} are reserved)",
            oxbow_metadata::topic::RESERVED_TOPIC_PREFIX
        )));
    }
    Ok(())
}
