//! [`Broker`]: the operations both front ends (Kafka protocol and HTTP) share — topics,
//! produce, read, offsets — over the metadata service and the log.
//!
//! Topic metadata is cached in memory (every change on one node goes through here), so the
//! produce and fetch paths never wait on the metadata store for a lookup.

use crate::error::{BrokerError, Result};
use crate::metrics::Metrics;
use oxbow_metadata::{BrokerId, MetadataStore, Offset, PartitionId, TopicMetadata, TopicSpec};
use oxbow_segment_writer::{Acks, Appended, LogManager, Partition, PendingAppend, ReadResult};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Settings of the broker's front ends.
#[derive(Clone, Debug)]
pub struct BrokerSettings {
    pub broker_id: BrokerId,
    /// Host clients are told to connect to for the Kafka protocol.
    pub advertised_host: String,
    pub advertised_port: i32,
    /// Create a topic on first produce or metadata request for it (Kafka's
    /// `auto.create.topics.enable`). Convenient in development; typos become topics.
    pub auto_create_topics: bool,
    /// Partitions of an auto-created topic.
    pub default_partitions: i32,
    /// Largest request frame accepted; bounds the memory one client can pin.
    pub max_request_bytes: usize,
    /// Cluster id reported to clients.
    pub cluster_id: String,
}

/// Shared broker state; one per process.
pub struct Broker {
    pub settings: BrokerSettings,
    pub metadata: Arc<dyn MetadataStore>,
    pub log: Arc<LogManager>,
    pub metrics: Metrics,
    /// The group coordinator (every group, on one node).
    pub coordinator: Arc<crate::groups::Coordinator>,
    topics: RwLock<HashMap<String, Arc<TopicMetadata>>>,
    /// The block of producer ids reserved for this broker: (next, end).
    producer_ids: tokio::sync::Mutex<(i64, i64)>,
}

/// Producer ids reserved from the metadata service at a time: one durable write per block.
const PRODUCER_ID_BLOCK: u32 = 1000;

/// How long the first rebalance of an empty group waits for more members (Kafka: 3 s).
/// Shorter, because a lone consumer waiting 3 s at start is the common complaint; fleets
/// that start together still mostly land in one rebalance.
const GROUP_INITIAL_REBALANCE_DELAY: Duration = Duration::from_millis(1000);

/// Timestamp sentinels of ListOffsets.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;

impl Broker {
    /// Builds the broker and loads the topic cache.
    pub async fn new(
        settings: BrokerSettings,
        metadata: Arc<dyn MetadataStore>,
        log: Arc<LogManager>,
    ) -> Result<Arc<Broker>> {
        let topics = metadata
            .list_topics()
            .await?
            .into_iter()
            .map(|t| (t.name.clone(), Arc::new(t)))
            .collect();
        let coordinator = Arc::new(crate::groups::Coordinator::new(
            metadata.clone(),
            crate::groups::CoordinatorSettings {
                initial_rebalance_delay: GROUP_INITIAL_REBALANCE_DELAY,
            },
        ));
        Ok(Arc::new(Broker {
            settings,
            coordinator,
            metadata,
            log,
            metrics: Metrics::default(),
            topics: RwLock::new(topics),
            producer_ids: tokio::sync::Mutex::new((0, 0)),
        }))
    }

    fn cache_put(&self, topic: TopicMetadata) -> Arc<TopicMetadata> {
        let topic = Arc::new(topic);
        if let Ok(mut m) = self.topics.write() {
            m.insert(topic.name.clone(), topic.clone());
        }
        topic
    }

    /// A new producer id, never handed out before (by any broker, across restarts).
    pub async fn next_producer_id(&self) -> Result<i64> {
        let mut ids = self.producer_ids.lock().await;
        if ids.0 >= ids.1 {
            let first = self
                .metadata
                .allocate_producer_ids(PRODUCER_ID_BLOCK)
                .await?;
            *ids = (first, first + i64::from(PRODUCER_ID_BLOCK));
        }
        let id = ids.0;
        ids.0 += 1;
        Ok(id)
    }

    /// A topic by name, if it exists.
    pub fn topic(&self, name: &str) -> Option<Arc<TopicMetadata>> {
        self.topics.read().ok()?.get(name).cloned()
    }

    /// A topic by id, if it exists.
    pub fn topic_by_id(&self, id: uuid::Uuid) -> Option<Arc<TopicMetadata>> {
        self.topics
            .read()
            .ok()?
            .values()
            .find(|t| t.topic_id.0 == id)
            .cloned()
    }

    /// Every topic, sorted by name.
    pub fn topics(&self) -> Vec<Arc<TopicMetadata>> {
        let mut all: Vec<_> = self
            .topics
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// A topic by name; created with the defaults if missing and `auto_create` allows it
    /// (and the broker's `auto_create_topics` setting does).
    pub async fn topic_or_create(
        &self,
        name: &str,
        auto_create: bool,
    ) -> Result<Arc<TopicMetadata>> {
        if let Some(t) = self.topic(name) {
            return Ok(t);
        }
        if !(auto_create && self.settings.auto_create_topics) {
            return Err(BrokerError::UnknownTopic(name.to_string()));
        }
        let spec = TopicSpec {
            name: name.to_string(),
            partitions: self.settings.default_partitions,
            replication_factor: 1,
            configs: BTreeMap::new(),
        };
        match self.create_topic(spec).await {
            Ok(t) => Ok(t),
            // Two requests raced to create it: the other one won, which is just as good.
            Err(BrokerError::Metadata(oxbow_metadata::Error::TopicExists(_))) => self
                .refresh_topic(name)
                .await?
                .ok_or_else(|| BrokerError::UnknownTopic(name.to_string())),
            Err(e) => Err(e),
        }
    }

    async fn refresh_topic(&self, name: &str) -> Result<Option<Arc<TopicMetadata>>> {
        Ok(self.metadata.topic(name).await?.map(|t| self.cache_put(t)))
    }

    /// Creates a topic; partitions are led by this broker.
    pub async fn create_topic(&self, spec: TopicSpec) -> Result<Arc<TopicMetadata>> {
        let name = spec.name.clone();
        let created = self
            .metadata
            .create_topic(spec, self.settings.broker_id)
            .await?;
        tracing::info!(topic = %name, partitions = created.partitions.len(), "created topic");
        Ok(self.cache_put(created))
    }

    /// Checks a topic spec without creating it (CreateTopics `validate_only`).
    pub fn validate_topic(&self, spec: &TopicSpec) -> Result<()> {
        oxbow_metadata::topic::validate_topic_name(&spec.name)?;
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
        if let Ok(mut m) = self.topics.write() {
            m.remove(name);
        }
        self.log.drop_topic(deleted.topic_id);
        tracing::info!(topic = %name, "deleted topic");
        Ok(Arc::new(deleted))
    }

    /// Grows a topic to `total` partitions.
    pub async fn create_partitions(&self, name: &str, total: i32) -> Result<Arc<TopicMetadata>> {
        let grown = self
            .metadata
            .create_partitions(name, total, self.settings.broker_id)
            .await?;
        Ok(self.cache_put(grown))
    }

    /// The open partition of a topic this broker leads.
    pub async fn partition(
        &self,
        topic: &TopicMetadata,
        partition: PartitionId,
    ) -> Result<Arc<Partition>> {
        if topic.partition(partition).is_none() {
            return Err(BrokerError::UnknownPartition {
                topic: topic.name.clone(),
                partition,
            });
        }
        Ok(self.log.partition(topic, partition).await?)
    }

    /// Appends one record batch (RecordBatch v2 bytes as a producer sends them) and waits
    /// as long as `acks` asks.
    pub async fn produce(
        &self,
        topic: &TopicMetadata,
        partition: PartitionId,
        batch: &[u8],
        acks: Acks,
    ) -> Result<Appended> {
        Ok(self
            .produce_pending(topic, partition, batch, acks)
            .await?
            .wait()
            .await?)
    }

    /// Appends one record batch, returning once it has its offsets; the returned handle
    /// resolves when it is durable enough for `acks`.
    pub async fn produce_pending(
        &self,
        topic: &TopicMetadata,
        partition: PartitionId,
        batch: &[u8],
        acks: Acks,
    ) -> Result<PendingAppend> {
        let p = self.partition(topic, partition).await?;
        let configs = &topic.configs;
        Ok(self
            .log
            .enqueue(
                &p,
                batch,
                configs.max_message_bytes(),
                configs.log_append_time(),
                acks,
            )
            .await?)
    }

    /// Reads whole batches at `offset`, waiting up to `max_wait` for data if there is none
    /// yet (a long poll). Returns at most `max_bytes`, but at least one batch if `min_one`.
    pub async fn read(
        &self,
        topic: &TopicMetadata,
        partition: PartitionId,
        offset: Offset,
        max_bytes: usize,
        min_one: bool,
        max_wait: Duration,
    ) -> Result<ReadResult> {
        let p = self.partition(topic, partition).await?;
        let mut hw = p.subscribe();
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            let r = self.log.read(&p, offset, max_bytes, min_one).await?;
            if !r.batches.is_empty() || max_wait.is_zero() {
                return Ok(r);
            }
            match tokio::time::timeout_at(deadline, hw.changed()).await {
                Ok(Ok(())) => continue,
                Ok(Err(_)) | Err(_) => return Ok(r),
            }
        }
    }

    /// ListOffsets for one partition: earliest (-2), latest (-1) or the first offset whose
    /// timestamp is at or after `timestamp`. Returns (offset, timestamp), offset -1 if none.
    pub async fn list_offset(
        &self,
        topic: &TopicMetadata,
        partition: PartitionId,
        timestamp: i64,
    ) -> Result<(Offset, i64)> {
        let p = self.partition(topic, partition).await?;
        let (log_start, hw, _) = p.offsets()?;
        match timestamp {
            EARLIEST_TIMESTAMP => Ok((log_start, -1)),
            LATEST_TIMESTAMP => Ok((hw, -1)),
            ts if ts < 0 => Err(BrokerError::InvalidRequest(format!(
                "unsupported ListOffsets timestamp {ts}"
            ))),
            ts => {
                let Some(batch) = self.log.find_batch_by_timestamp(&p, ts).await? else {
                    return Ok((-1, -1));
                };
                Ok(crate::records::first_at_or_after(&batch, ts, log_start).unwrap_or((-1, -1)))
            }
        }
    }
}
