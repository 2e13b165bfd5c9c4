//! Admin operations on [`Client`]: create, delete and describe topics, alter their configs.
//!
//! These go to the bootstrap broker. KRaft brokers forward CreateTopics and DeleteTopics
//! to the controller themselves; an older broker that answers `NOT_CONTROLLER` gets the
//! request re-sent to the controller named in metadata. Admin requests are not retried
//! otherwise: "topic already exists" after a blind retry would be misleading.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::CreateTopicsRequest;

use super::error::ClientError;
use super::kafka_client::{Client, Target};
use super::metadata::ConfigEntry;
use super::requests;

/// Replication factor or partition count `-1`: use the broker's default (CreateTopics v4+).
pub const BROKER_DEFAULT: i32 = -1;

/// First CreateTopics version that accepts `-1` for partitions and replication factor.
const CREATE_TOPICS_DEFAULTS_VERSION: i16 = 4;

impl Client {
    /// Creates a topic. `partitions` or `replication_factor` of `-1` take the broker's
    /// defaults. `configs` are topic-level overrides such as `cleanup.policy=compact`.
    pub async fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &[(String, String)],
    ) -> Result<(), ClientError> {
        if partitions == 0 || partitions < BROKER_DEFAULT {
            return Err(ClientError::Invalid(format!(
                "invalid partition count {partitions}: must be at least 1"
            )));
        }
        if replication_factor == 0 || i32::from(replication_factor) < BROKER_DEFAULT {
            return Err(ClientError::Invalid(format!(
                "invalid replication factor {replication_factor}: must be at least 1"
            )));
        }
        let wants_defaults = partitions < 0 || replication_factor < 0;
        let result = self
            .create_topic_on(
                Target::Any,
                name,
                partitions,
                replication_factor,
                configs,
                wants_defaults,
            )
            .await;
        let result = match result {
            Err(err) if err.kafka_error() == Some(ResponseError::NotController) => {
                self.metadata(Some(Vec::new())).await?;
                match self.controller_id {
                    Some(controller) => {
                        self.create_topic_on(
                            Target::Node(controller),
                            name,
                            partitions,
                            replication_factor,
                            configs,
                            wants_defaults,
                        )
                        .await
                    }
                    None => Err(err),
                }
            }
            other => other,
        };
        self.invalidate_topic(name);
        result
    }

    async fn create_topic_on(
        &mut self,
        target: Target,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &[(String, String)],
        wants_defaults: bool,
    ) -> Result<(), ClientError> {
        if wants_defaults
            && self.version_for::<CreateTopicsRequest>(target).await?
                < CREATE_TOPICS_DEFAULTS_VERSION
        {
            return Err(ClientError::Invalid(
                "this broker needs an explicit partition count and replication factor".to_string(),
            ));
        }
        let timeout = self.options.timeout;
        let (_, response) = self
            .call(target, None, timeout, |v| {
                requests::create_topics(v, name, partitions, replication_factor, configs, timeout)
            })
            .await?;
        let result = response
            .topics
            .iter()
            .find(|t| t.name.0.as_str() == name)
            .ok_or_else(|| ClientError::Protocol {
                addr: self.bootstrap_addr().to_string(),
                detail: format!("create topics response has no entry for \"{name}\""),
            })?;
        ClientError::check(result.error_code, result.error_message.as_deref(), || {
            format!("create topic \"{name}\"")
        })
    }

    /// Deletes a topic.
    pub async fn delete_topic(&mut self, name: &str) -> Result<(), ClientError> {
        let timeout = self.options.timeout;
        let (_, response) = self
            .call(Target::Any, None, timeout, |v| {
                requests::delete_topics(v, name, timeout)
            })
            .await?;
        self.invalidate_topic(name);
        let result = response
            .responses
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == name))
            .or_else(|| response.responses.first())
            .ok_or_else(|| ClientError::Protocol {
                addr: self.bootstrap_addr().to_string(),
                detail: format!("delete topics response has no entry for \"{name}\""),
            })?;
        match ResponseError::try_from_code(result.error_code) {
            Some(ResponseError::UnknownTopicOrPartition) => {
                Err(ClientError::UnknownTopic(name.to_string()))
            }
            _ => ClientError::check(result.error_code, result.error_message.as_deref(), || {
                format!("delete topic \"{name}\"")
            }),
        }
    }

    /// All config entries of a topic, defaults included (see [`ConfigEntry::is_default`]).
    pub async fn describe_configs(&mut self, topic: &str) -> Result<Vec<ConfigEntry>, ClientError> {
        let (_, response) = self
            .call(Target::Any, None, std::time::Duration::ZERO, |v| {
                requests::describe_configs(v, topic)
            })
            .await?;
        let result = response
            .results
            .first()
            .ok_or_else(|| ClientError::Protocol {
                addr: self.bootstrap_addr().to_string(),
                detail: format!("describe configs response has no entry for \"{topic}\""),
            })?;
        match ResponseError::try_from_code(result.error_code) {
            Some(ResponseError::UnknownTopicOrPartition) => {
                return Err(ClientError::UnknownTopic(topic.to_string()))
            }
            _ => ClientError::check(result.error_code, result.error_message.as_deref(), || {
                format!("describe configs of topic \"{topic}\"")
            })?,
        }
        let mut entries: Vec<ConfigEntry> = result
            .configs
            .iter()
            .map(ConfigEntry::from_response)
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Changes a topic's configs (IncrementalAlterConfigs): `(key, op, value)` with Kafka's
    /// op ids (0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT).
    pub async fn alter_topic_configs(
        &mut self,
        topic: &str,
        changes: &[(String, i8, Option<String>)],
    ) -> Result<(), ClientError> {
        let (_, response) = self
            .call(Target::Any, None, std::time::Duration::ZERO, |v| {
                requests::incremental_alter_configs(v, topic, changes)
            })
            .await?;
        let result = response
            .responses
            .first()
            .ok_or_else(|| ClientError::Protocol {
                addr: self.bootstrap_addr().to_string(),
                detail: format!("alter configs response has no entry for \"{topic}\""),
            })?;
        match ResponseError::try_from_code(result.error_code) {
            Some(ResponseError::UnknownTopicOrPartition) => {
                Err(ClientError::UnknownTopic(topic.to_string()))
            }
            _ => ClientError::check(result.error_code, result.error_message.as_deref(), || {
                format!("alter configs of topic \"{topic}\"")
            }),
        }
    }
}
