//! [`Broker`]: the operations both front ends (Kafka protocol and HTTP) share — topics,
//! produce, read, offsets — over the metadata service and the log.
//!
//! Topic metadata is cached in memory, so the produce and fetch paths never wait on the
//! metadata store for a lookup. The cache is kept current by this broker's own changes and
//! by the topic watch (`cluster::follower`), so topics created and leadership moved by other
//! brokers show up within a watch round trip.
//!
//! Appends pass their partition's append gate ([`Leadership::append_permit`]): a graceful
//! handoff (segment-writer's `leadership`, started by `cluster::handoff`) closes it, so
//! nothing is appended between the final seal and the leadership move.

use crate::cluster::ClusterView;
use crate::error::{BrokerError, Result};
use crate::metrics::Metrics;
use oxbow_metadata::{
    BrokerId, MetadataStore, Offset, PartitionId, PartitionState, TopicId, TopicMetadata,
    TopicPartition, TopicSpec,
};
use oxbow_segment_writer::txn_verify::VerificationGuard;
use oxbow_segment_writer::{
    Acks, Appended, Isolation, Leadership, LogManager, Partition, PendingAppend, ReadResult,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

#[cfg(test)]
pub(crate) mod testing;
mod topics;
mod writes;

/// Settings of the broker's front ends.
#[derive(Clone, Debug)]
pub struct BrokerSettings {
    pub broker_id: BrokerId,
    /// Host clients are told to connect to for the Kafka protocol.
    /// (On the inter-broker listener: what this broker registers as its `kafka_addr`.)
    pub advertised_host: String,
    pub advertised_port: i32,
    /// Every listener's advertised (host, port) by name: what a client asking through that
    /// listener is told this broker's address is.
    pub listeners: BTreeMap<String, (String, i32)>,
    /// Create a topic on first produce or metadata request for it (Kafka's
    /// `auto.create.topics.enable`). Convenient in development; typos become topics.
    pub auto_create_topics: bool,
    /// Partitions of an auto-created topic.
    pub default_partitions: i32,
    /// Largest request frame accepted; bounds the memory one client can pin.
    pub max_request_bytes: usize,
    /// Cluster id reported to clients.
    pub cluster_id: String,
    /// The broker-wide `log.retention.ms` / `log.retention.bytes` (`--log-retention-*`):
    /// what a topic that sets no `retention.*` is retained by, and described with.
    pub log_retention_ms: i64,
    pub log_retention_bytes: i64,
    /// Who may do what (`--authorizer`, `--super-users`, `--allow-everyone-if-no-acl-found`).
    pub authorization: crate::security::acl::AuthorizerSettings,
    /// SASL on SASL_* listeners (`--sasl-enabled-mechanisms` and friends).
    pub sasl: Arc<crate::security::sasl::SaslSettings>,
    /// OAUTHBEARER token validation (`--sasl-oauthbearer-*`), when a JWKS is configured;
    /// shared by SASL OAUTHBEARER and HTTP bearer authentication.
    pub oauth: Option<Arc<crate::security::oauth::Validator>>,
    /// Where sealed data lives, as DescribeLogDirs names it: `s3://bucket/prefix` or a
    /// directory (never credentials).
    pub object_store_location: String,
    /// The transaction coordinator's timeouts and expiration.
    pub transactions: crate::transactions::coordinator::TxnSettings,
}

/// Shared broker state; one per process.
pub struct Broker {
    pub settings: BrokerSettings,
    pub metadata: Arc<dyn MetadataStore>,
    pub log: Arc<LogManager>,
    /// Append gates and graceful handoff of the partitions led here.
    pub leadership: Leadership,
    pub metrics: Metrics,
    /// Recent lag and rate samples for the console (`crate::samples`).
    pub samples: crate::samples::Samples,
    /// The group coordinator (of the groups [`ClusterView::coordinator_for`] gives this
    /// broker; every group on one node).
    pub coordinator: Arc<crate::groups::Coordinator>,
    /// The transaction coordinator (of the transactional ids
    /// [`ClusterView::coordinator_for`] gives this broker).
    pub transactions: Arc<crate::transactions::coordinator::TxnCoordinators>,
    /// Live brokers and the controller, as this broker sees them.
    pub cluster: Arc<ClusterView>,
    /// ACL bindings, SCRAM credentials and client quotas, as the metadata service holds
    /// them (kept current by `security::cache::run_security_follower`).
    pub security: Arc<crate::security::cache::SecurityCache>,
    /// Cluster links and mirror topics, and the mirror tasks running here (issue 20).
    pub mirrors: Arc<crate::mirror::Mirrors>,
    /// Client quotas and their meters (derived from `security`).
    pub quotas: crate::security::quota::Quotas,
    /// ACL decisions over `security` (see [`Broker::authz`]).
    pub authorizer: crate::security::acl::Authorizer,
    /// Kafka clients to other brokers, one per broker, for HTTP produce requests to
    /// partitions they lead (the REST front end of any broker takes any partition).
    forwarders:
        tokio::sync::Mutex<HashMap<BrokerId, Arc<tokio::sync::Mutex<crate::client::Client>>>>,
    /// Connections to other brokers for transaction markers (`transactions::markers`).
    pub(crate) marker_peers: crate::transactions::peers::PeerPool,
    /// Connections to other brokers' transaction coordinators for KIP-890 verification
    /// (`transactions::verify`), apart from the markers' so neither waits on the other.
    pub(crate) verify_peers: crate::transactions::peers::PeerPool,
    topics: RwLock<HashMap<String, Arc<TopicMetadata>>>,
    /// The block of producer ids reserved for this broker: (next, end, the mirror
    /// promotion count when it was reserved; see [`Broker::next_producer_id`]).
    producer_ids: tokio::sync::Mutex<(i64, i64, u64)>,
}

/// Producer ids reserved from the metadata service at a time: one durable write per block.
const PRODUCER_ID_BLOCK: u32 = 1000;

/// How long the first rebalance of an empty group waits for more members (Kafka: 3 s).
/// Shorter, because a lone consumer waiting 3 s at start is the common complaint; fleets
/// that start together still mostly land in one rebalance.
const GROUP_INITIAL_REBALANCE_DELAY: Duration = Duration::from_millis(1000);

/// Bound on a forwarded produce's network waits.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a read of a partition led elsewhere looks at the catalog while it waits.
const ELSEWHERE_POLL: Duration = Duration::from_millis(200);

/// Timestamp sentinels of ListOffsets.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// The record with the largest timestamp (ListOffsets v7+, KIP-734).
pub const MAX_TIMESTAMP: i64 = -3;
/// The earliest offset on the broker's local log (v8+, KIP-405): the log start here, where
/// nothing is tiered away from a local log.
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
/// The latest offset in tiered storage (v9+, KIP-1005): Kafka answers offset -1 when the
/// topic has no tiered storage, and so does Oxbow.
pub const LATEST_TIERED_TIMESTAMP: i64 = -5;

/// Most catalog entries one MAX_TIMESTAMP lookup walks (in memory; compaction keeps a
/// partition's entries far fewer). Past it the lookup is refused rather than guessed.
const MAX_TIMESTAMP_ENTRIES_MAX: usize = 100_000;
/// Catalog entries read per page of a MAX_TIMESTAMP lookup.
const MAX_TIMESTAMP_PAGE: usize = 1024;
/// Bytes read per step over the uncatalogued tail of a MAX_TIMESTAMP lookup.
const MAX_TIMESTAMP_TAIL_READ_BYTES: usize = 1 << 20;

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
        let cluster = Arc::new(ClusterView::new(
            settings.broker_id,
            metadata.list_brokers().await?,
        ));
        let security =
            Arc::new(crate::security::cache::SecurityCache::load(metadata.as_ref()).await?);
        let mirrors = Arc::new(crate::mirror::Mirrors::load(metadata.as_ref()).await?);
        let (view, me) = (cluster.clone(), settings.broker_id);
        let coordinator = Arc::new(
            crate::groups::Coordinator::new(
                metadata.clone(),
                crate::groups::CoordinatorSettings {
                    initial_rebalance_delay: GROUP_INITIAL_REBALANCE_DELAY,
                },
            )
            // The same rule as `Broker::coordinates`, for transaction markers.
            .with_coordinates(move |group| view.coordinator_for(group) == me),
        );
        let authorizer = crate::security::acl::Authorizer::new(settings.authorization.clone());
        let transactions = crate::transactions::coordinator::TxnCoordinators::new(
            metadata.clone(),
            settings.transactions.clone(),
        );
        Ok(Arc::new(Broker {
            authorizer,
            transactions,
            settings,
            coordinator,
            cluster,
            quotas: crate::security::quota::Quotas::new(security.clone()),
            security,
            mirrors,
            metadata,
            leadership: Leadership::new(log.clone()),
            log,
            metrics: Metrics::default(),
            samples: Default::default(),
            topics: RwLock::new(topics),
            producer_ids: tokio::sync::Mutex::new((0, 0, 0)),
            forwarders: tokio::sync::Mutex::new(HashMap::new()),
            marker_peers: crate::transactions::peers::PeerPool::new(
                "oxbow-txn-markers",
                crate::transactions::markers::REMOTE_TIMEOUT,
            ),
            verify_peers: crate::transactions::peers::PeerPool::new(
                "oxbow-txn-verify",
                crate::transactions::verify::REMOTE_TIMEOUT,
            ),
        }))
    }

    fn cache_put(&self, topic: TopicMetadata) -> Arc<TopicMetadata> {
        let topic = Arc::new(topic);
        if let Ok(mut m) = self.topics.write() {
            // Keep the newer state of each partition: a watch event may have landed first.
            let merged = match m.get(&topic.name) {
                Some(old) if old.topic_id == topic.topic_id => {
                    let mut t = (*topic).clone();
                    for (p, o) in t.partitions.iter_mut().zip(old.partitions.iter()) {
                        if o.version > p.version {
                            *p = o.clone();
                        }
                    }
                    Arc::new(t)
                }
                _ => topic,
            };
            m.insert(merged.name.clone(), merged.clone());
            return merged;
        }
        topic
    }

    /// A topic's whole state from the metadata service (created or grown elsewhere, or
    /// re-listed).
    pub fn apply_topic(&self, topic: TopicMetadata) -> Arc<TopicMetadata> {
        self.cache_put(topic)
    }

    /// Replaces the whole cache (a re-list after a watch ended): topics deleted meanwhile go.
    pub fn replace_topics(
        &self,
        topics: Vec<TopicMetadata>,
    ) -> (Vec<Arc<TopicMetadata>>, Vec<TopicId>) {
        let names: std::collections::HashSet<String> =
            topics.iter().map(|t| t.name.clone()).collect();
        // Not removed here: a topic created while the list was being read is missing from it
        // but alive, and removing a live topic would drop its unsealed data. The caller
        // confirms each one is gone first.
        let missing: Vec<TopicId> = self
            .topics()
            .iter()
            .filter(|t| !names.contains(&t.name))
            .map(|t| t.topic_id)
            .collect();
        let kept = topics.into_iter().map(|t| self.cache_put(t)).collect();
        (kept, missing)
    }

    /// One partition's new state; returns the updated topic (`None`: unknown topic, or an
    /// older state than the cached one).
    pub fn apply_partition(
        &self,
        topic_id: TopicId,
        state: PartitionState,
    ) -> Option<Arc<TopicMetadata>> {
        self.apply_partitions(topic_id, vec![state])
    }

    /// [`Self::apply_partition`] for several partitions of one topic, in one copy of it
    /// (each copy costs the whole partition list). A state older than the one held is
    /// skipped; `None` if the topic is unknown or nothing changed.
    pub fn apply_partitions(
        &self,
        topic_id: TopicId,
        states: Vec<PartitionState>,
    ) -> Option<Arc<TopicMetadata>> {
        let mut m = self.topics.write().ok()?;
        let old = m.values().find(|t| t.topic_id == topic_id)?.clone();
        let mut t: Option<TopicMetadata> = None;
        for state in states {
            let Some(i) = usize::try_from(state.partition).ok() else {
                continue;
            };
            let current = t.as_ref().map_or(&old.partitions, |t| &t.partitions);
            match current.get(i) {
                Some(held) if held.version <= state.version => {}
                _ => continue,
            }
            t.get_or_insert_with(|| (*old).clone()).partitions[i] = state;
        }
        let t = Arc::new(t?);
        m.insert(t.name.clone(), t.clone());
        Some(t)
    }

    /// A topic deleted (here or elsewhere): forget it and its open partitions.
    pub fn remove_topic(&self, topic_id: TopicId) {
        if let Ok(mut m) = self.topics.write() {
            m.retain(|_, t| t.topic_id != topic_id);
        }
        self.leadership.drop_topic(topic_id);
    }

    /// Stops serving a partition this broker no longer leads (it answers
    /// NOT_LEADER_OR_FOLLOWER from now on).
    pub fn forget_partition(&self, tp: TopicPartition) {
        self.leadership.forget(tp);
    }

    /// Whether this broker coordinates `group_id` (always, on one node).
    pub fn coordinates(&self, group_id: &str) -> bool {
        self.cluster.coordinator_for(group_id) == self.settings.broker_id
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
        if oxbow_metadata::topic::is_internal_topic(name) {
            return Err(internal_topic(name, "created"));
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

    /// The open partition of a topic this broker leads.
    pub async fn partition(
        &self,
        topic: &TopicMetadata,
        partition: PartitionId,
    ) -> Result<Arc<Partition>> {
        let Some(state) = topic.partition(partition) else {
            return Err(BrokerError::UnknownPartition {
                topic: topic.name.clone(),
                partition,
            });
        };
        let tp = TopicPartition::new(topic.topic_id, partition);
        // Led elsewhere as far as this broker knows: say so without asking the metadata
        // service (a stale cache costs the client one retry, not a wrong answer: opening a
        // partition always checks the stored leader).
        if state.leader != self.settings.broker_id && self.log.get(&tp).is_none() {
            return Err(not_leader(topic, partition, state.leader));
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
        self.produce_pending_verified(topic, partition, batch, acks, None)
            .await
    }

    /// The guard a transactional producer's next batch to this partition must carry
    /// (KIP-890 part 1, `transactions::verify`): `SENTINEL` when its transaction is open
    /// there already.
    pub async fn start_txn_verification(
        &self,
        topic: &TopicMetadata,
        partition: PartitionId,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<VerificationGuard> {
        if oxbow_metadata::topic::is_internal_topic(&topic.name) {
            return Err(internal_topic(&topic.name, "produced to"));
        }
        let p = self.partition(topic, partition).await?;
        Ok(self
            .log
            .start_txn_verification(&p, producer_id, producer_epoch)?)
    }

    /// [`Self::produce_pending`] for a Kafka producer: with `guard`, a transaction's first
    /// batch must carry the one its verification handed out
    /// ([`oxbow_segment_writer::LogManager::enqueue_verified`]).
    pub async fn produce_pending_verified(
        &self,
        topic: &TopicMetadata,
        partition: PartitionId,
        batch: &[u8],
        acks: Acks,
        guard: Option<VerificationGuard>,
    ) -> Result<PendingAppend> {
        if oxbow_metadata::topic::is_internal_topic(&topic.name) {
            return Err(internal_topic(&topic.name, "produced to"));
        }
        self.check_writable(&topic.name, partition)?;
        let tp = TopicPartition::new(topic.topic_id, partition);
        // Held until the batch is queued: a handoff closing the gate waits for it.
        let permit = self.leadership.append_permit(tp, &topic.name).await?;
        let p = self.partition(topic, partition).await?;
        // The topic's configs as this broker's watched copy holds them now.
        let policy = oxbow_segment_writer::AppendPolicy::of(&topic.configs);
        let pending = match guard {
            Some(g) => {
                self.log
                    .enqueue_verified(&p, batch, &policy, acks, g)
                    .await?
            }
            None => self.log.enqueue(&p, batch, &policy, acks).await?,
        };
        drop(permit);
        Ok(pending)
    }

    /// Writes the COMMIT (`commit`) or ABORT marker of `producer_id`'s transaction into a
    /// partition this broker leads (the transaction coordinator, once its decision is
    /// durable) and returns the marker's offset once it is durable
    /// ([`oxbow_segment_writer::LogManager::write_marker`]). Internal topics take no
    /// transactional data, so no markers either.
    pub async fn write_txn_marker(
        &self,
        topic: &TopicMetadata,
        partition: PartitionId,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
    ) -> Result<Offset> {
        if oxbow_metadata::topic::is_internal_topic(&topic.name) {
            return Err(internal_topic(
                &topic.name,
                "written a transaction marker to",
            ));
        }
        let tp = TopicPartition::new(topic.topic_id, partition);
        // Held until the marker is queued, as a produce's batch: a handoff closing the gate
        // waits for it, then makes what is queued durable before handing over.
        let permit = self.leadership.append_permit(tp, &topic.name).await?;
        let p = self.partition(topic, partition).await?;
        let policy = oxbow_segment_writer::AppendPolicy::of(&topic.configs);
        let pending = self
            .log
            .enqueue_marker(
                &p,
                producer_id,
                producer_epoch,
                commit,
                coordinator_epoch,
                &policy,
            )
            .await?;
        drop(permit);
        Ok(pending.wait().await?.base_offset)
    }

    /// Reads whole batches at `offset`, waiting up to `max_wait` for data if there is none
    /// yet (a long poll). Returns at most `max_bytes`, but at least one batch if `min_one`;
    /// at `isolation` (`read_committed`: below the last stable offset, with the aborted
    /// transactions, see [`oxbow_segment_writer::LogManager::read_isolated`]).
    #[allow(clippy::too_many_arguments)]
    pub async fn read(
        &self,
        topic: &TopicMetadata,
        partition: PartitionId,
        offset: Offset,
        max_bytes: usize,
        min_one: bool,
        max_wait: Duration,
        isolation: Isolation,
    ) -> Result<ReadResult> {
        let p = match self.partition(topic, partition).await {
            Ok(p) => p,
            // Led by another broker: serve what the object store holds (HTTP reads only;
            // Kafka fetches go to the leader, as clients expect).
            Err(e) if e.code() == kafka_protocol::ResponseError::NotLeaderOrFollower.code() => {
                return self
                    .read_elsewhere(
                        topic, partition, offset, max_bytes, min_one, max_wait, isolation,
                    )
                    .await;
            }
            Err(e) => return Err(e),
        };
        let mut hw = p.subscribe();
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            // A read_committed read waits on the high watermark too: the last stable offset
            // moves only when a marker becomes durable, which moves the high watermark.
            let r = self
                .log
                .read_isolated(&p, offset, max_bytes, min_one, isolation)
                .await?;
            if !r.batches.is_empty() || max_wait.is_zero() {
                return Ok(r);
            }
            match tokio::time::timeout_at(deadline, hw.changed()).await {
                Ok(Ok(())) => continue,
                Ok(Err(_)) | Err(_) => return Ok(r),
            }
        }
    }

    /// Produces records to a partition `leader` leads, through a Kafka client connected to
    /// it (HTTP produce on a broker that does not lead the partition). Returns the base
    /// offset. Errors are retriable: the leader may be moving.
    pub async fn forward_produce(
        &self,
        leader: BrokerId,
        topic: &str,
        partition: PartitionId,
        records: &[crate::client::records::ProduceRecord],
    ) -> Result<Offset> {
        let forwarding = |e: String| {
            BrokerError::Log(oxbow_segment_writer::Error::Replication(format!(
                "forwarding to broker {leader}: {e}"
            )))
        };
        let client = {
            let mut forwarders = self.forwarders.lock().await;
            match forwarders.get(&leader) {
                Some(c) => c.clone(),
                None => {
                    let addr = self
                        .cluster
                        .broker(leader)
                        .map(|b| b.kafka_addr)
                        .ok_or_else(|| forwarding("it is not registered".into()))?;
                    let c = crate::client::Client::connect(&addr, FORWARD_TIMEOUT)
                        .await
                        .map_err(|e| forwarding(e.to_string()))?;
                    let c = Arc::new(tokio::sync::Mutex::new(c));
                    forwarders.insert(leader, c.clone());
                    c
                }
            }
        };
        let mut client = client.lock().await;
        let options = crate::client::ProduceOptions {
            acks: crate::client::records::Acks::All,
            ..Default::default()
        };
        match client.produce(topic, partition, records, options).await {
            Ok(Some(offset)) => Ok(offset),
            Ok(None) => Err(forwarding("no offset in the answer".into())),
            Err(e) => {
                drop(client);
                // A broken connection is not reused.
                self.forwarders.lock().await.remove(&leader);
                Err(forwarding(e.to_string()))
            }
        }
    }

    /// [`Self::read`] of a partition led by another broker: catalogued data only, polled
    /// every [`ELSEWHERE_POLL`] while waiting.
    #[allow(clippy::too_many_arguments)]
    async fn read_elsewhere(
        &self,
        topic: &TopicMetadata,
        partition: PartitionId,
        offset: Offset,
        max_bytes: usize,
        min_one: bool,
        max_wait: Duration,
        isolation: Isolation,
    ) -> Result<ReadResult> {
        let log_start = topic.partition(partition).map_or(0, |p| p.log_start_offset);
        let tp = TopicPartition::new(topic.topic_id, partition);
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            let r = self
                .log
                .read_catalogued_isolated(tp, log_start, offset, max_bytes, min_one, isolation)
                .await?;
            if !r.batches.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(r);
            }
            tokio::time::sleep(ELSEWHERE_POLL.min(deadline - tokio::time::Instant::now())).await;
        }
    }

    /// Earliest or latest offset of a partition led by another broker, from the metadata
    /// service (latest: the catalog's end, which lags the leader by a flush interval).
    pub async fn list_offset_elsewhere(
        &self,
        topic: &TopicMetadata,
        partition: PartitionId,
        timestamp: i64,
    ) -> Result<(Offset, i64)> {
        let log_start = topic.partition(partition).map_or(0, |p| p.log_start_offset);
        match timestamp {
            EARLIEST_TIMESTAMP => Ok((log_start, -1)),
            LATEST_TIMESTAMP => {
                let tp = TopicPartition::new(topic.topic_id, partition);
                Ok((self.log.catalog_end(tp, log_start).await?, -1))
            }
            ts => self.list_offset(topic, partition, ts).await,
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
            EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => Ok((log_start, -1)),
            LATEST_TIMESTAMP => Ok((hw, -1)),
            LATEST_TIERED_TIMESTAMP => Ok((-1, -1)),
            MAX_TIMESTAMP => match self.max_timestamp(&p, log_start, hw).await? {
                Some(ts) => self.first_at_or_after(&p, ts, log_start).await,
                None => Ok((-1, -1)),
            },
            ts if ts < 0 => Err(BrokerError::InvalidRequest(format!(
                "unsupported ListOffsets timestamp {ts}"
            ))),
            ts => self.first_at_or_after(&p, ts, log_start).await,
        }
    }

    /// The first record at or after `ts` (and the log start): (offset, timestamp), or
    /// (-1, -1).
    async fn first_at_or_after(
        &self,
        p: &Partition,
        ts: i64,
        log_start: Offset,
    ) -> Result<(Offset, i64)> {
        let Some(batch) = self.log.find_batch_by_timestamp(p, ts).await? else {
            return Ok((-1, -1));
        };
        let max_decompressed = self.log.max_decompressed_batch_bytes();
        let found = crate::records::first_at_or_after(&batch, ts, log_start, max_decompressed)?;
        Ok(found.unwrap_or((-1, -1)))
    }

    /// The largest timestamp of a record below the high watermark, `None` for an empty log:
    /// from the catalog entries' `max_timestamp_ms` (in memory), then the batch headers of
    /// the tail not catalogued yet. The first record at or after it is then MAX_TIMESTAMP's
    /// answer, as Kafka gives it (the first record carrying the largest timestamp).
    async fn max_timestamp(
        &self,
        p: &Partition,
        log_start: Offset,
        hw: Offset,
    ) -> Result<Option<i64>> {
        let tp = p.topic_partition;
        let mut max: Option<i64> = None;
        let mut next = log_start;
        let mut walked = 0usize;
        while next < hw {
            let page = self
                .metadata
                .catalog_entries(tp.topic_id, tp.partition, next, MAX_TIMESTAMP_PAGE)
                .await?;
            let Some(last) = page.last() else { break };
            let end = last.next_offset();
            for e in page.iter().filter(|e| e.base_offset < hw) {
                max = max.max(Some(e.max_timestamp_ms));
            }
            walked += page.len();
            if walked > MAX_TIMESTAMP_ENTRIES_MAX {
                return Err(BrokerError::InvalidRequest(format!(
                    "{}-{} has more than {MAX_TIMESTAMP_ENTRIES_MAX} catalog entries: \
                     MAX_TIMESTAMP is not answered for it",
                    p.topic_name, tp.partition
                )));
            }
            if end <= next || page.len() < MAX_TIMESTAMP_PAGE {
                next = next.max(end);
                break;
            }
            next = end;
        }
        // The tail not catalogued yet (held in memory, bounded by the unsealed bytes).
        while next < hw {
            let r = self
                .log
                .read(p, next, MAX_TIMESTAMP_TAIL_READ_BYTES, true)
                .await?;
            let before = next;
            for b in &r.batches {
                for (h, _) in oxbow_segment_writer::batch::iter_batches(b) {
                    if h.base_offset >= hw {
                        break;
                    }
                    if !h.is_control() {
                        max = max.max(Some(h.max_timestamp));
                    }
                    next = next.max(h.last_offset() + 1);
                }
            }
            if next <= before {
                break;
            }
        }
        Ok(max)
    }
}

fn not_leader(topic: &TopicMetadata, partition: PartitionId, leader: BrokerId) -> BrokerError {
    BrokerError::Log(oxbow_segment_writer::Error::NotLeader(format!(
        "{}-{partition} (leader is broker {leader})",
        topic.name
    )))
}

/// An internal topic name used where a client may not use it: INVALID_TOPIC_EXCEPTION, as
/// Kafka answers a produce to `__consumer_offsets` ("Cannot append to internal topic").
fn internal_topic(name: &str, what: &str) -> BrokerError {
    BrokerError::Metadata(oxbow_metadata::Error::InvalidTopicName {
        name: name.to_string(),
        reason: format!("it is an internal topic name and cannot be {what} by clients"),
    })
}
