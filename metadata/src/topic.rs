//! Topics: names, configs (their overrides and typed accessors; the definitions are in
//! [`crate::topic_configs`]) and per-partition state.

use crate::error::{Error, Result};
use crate::leader_epochs::LeaderEpochHistory;
use crate::topic_configs::{lookup, ConfigAlteration, ConfigDef, TOPIC_CONFIGS};
use crate::types::{BrokerId, LeaderEpoch, Offset, PartitionId, TopicId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Longest topic name Kafka accepts (249: room for a partition suffix in a 255-byte file name).
pub const TOPIC_NAME_MAX_CHARS: usize = 249;
/// Most partitions one topic may have. Bounded so one request cannot exhaust metadata memory.
pub const TOPIC_PARTITIONS_MAX: i32 = 10_000;

/// Kafka's internal topics (`org.apache.kafka.common.internals.Topic` and KRaft's metadata
/// log). Oxbow has none of them as topics (group offsets live in the metadata store), and
/// reserves the names so no client data ends up where a Kafka tool expects broker state.
pub const INTERNAL_TOPICS: &[&str] = &[
    "__consumer_offsets",
    "__transaction_state",
    "__share_group_state",
    "__cluster_metadata",
];
/// Names under this prefix are reserved for the broker's own use.
pub const RESERVED_TOPIC_PREFIX: &str = "__oxbow";

/// Whether clients may neither create nor produce to a topic of this name.
pub fn is_internal_topic(name: &str) -> bool {
    INTERNAL_TOPICS.contains(&name) || name.starts_with(RESERVED_TOPIC_PREFIX)
}

/// What a client asks for when it creates a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: i32,
    /// Kept for describe output: in Oxbow durability comes from the WAL replicas and S3, not
    /// from per-topic replicas, so this does not change where data is stored.
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

/// The state of one partition that is changed only by compare-and-swap on `version`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    pub partition: PartitionId,
    pub leader: BrokerId,
    pub leader_epoch: LeaderEpoch,
    /// First offset still readable; raised by retention and DeleteRecords.
    pub log_start_offset: Offset,
    /// Set when leadership moved away from a broker that may have died holding unsealed
    /// data: the new leader must recover that broker's WAL tail for this partition (from
    /// its WAL replicas) before it serves the partition, then clears this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recover_from: Option<BrokerId>,
    /// A graceful move requested (by the controller's balancer or `oxbow partitions
    /// reassign`): the current leader, seeing this through its topic watch, stops appends,
    /// seals, then moves leadership to this broker itself (epoch + 1, field cleared). Only
    /// the leader acts on it, so no acknowledged write is left behind unsealed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_to: Option<BrokerId>,
    /// Where each recent leader epoch's data starts, recorded by each leader when it opens
    /// the partition (see [`crate::leader_epochs`]). Empty for a partition no leader has
    /// opened since this field exists; its first leader records its own epoch then.
    #[serde(default, skip_serializing_if = "LeaderEpochHistory::is_empty")]
    pub leader_epochs: LeaderEpochHistory,
    /// Bumped on every change; the compare in compare-and-swap.
    pub version: u64,
}

impl PartitionState {
    /// A new partition led by `leader` at epoch 0.
    pub fn new(partition: PartitionId, leader: BrokerId) -> PartitionState {
        PartitionState {
            partition,
            leader,
            leader_epoch: 0,
            log_start_offset: 0,
            recover_from: None,
            transfer_to: None,
            leader_epochs: LeaderEpochHistory::default(),
            version: 0,
        }
    }
}

/// The leader of partition `partition` under a placement: `leaders[partition % len]`, so one
/// broker (`&[b]`) leads every partition and a full list gives each its own. `None` if
/// `leaders` is empty.
pub fn placed_leader(leaders: &[BrokerId], partition: PartitionId) -> Option<BrokerId> {
    let i = usize::try_from(partition).ok()? % leaders.len().max(1);
    leaders.get(i).copied()
}

/// A topic as the metadata service knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMetadata {
    pub name: String,
    pub topic_id: TopicId,
    pub replication_factor: i16,
    pub configs: TopicConfigs,
    pub partitions: Vec<PartitionState>,
    pub created_at_ms: i64,
}

impl TopicMetadata {
    pub fn partition(&self, partition: PartitionId) -> Option<&PartitionState> {
        usize::try_from(partition)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }
}

pub use crate::topic_configs::COMPRESSION_TYPES;

/// What a topic config means in Oxbow where that differs from Kafka, for DescribeConfigs'
/// documentation and the broker log. Kafka recompresses a batch on the broker when the
/// topic's `compression.type` differs from the producer's; Oxbow stores every batch exactly
/// as the producer sent it (ARCHITECTURE.md decision 1), so any value is kept and described
/// but behaves as `producer`.
pub fn config_note(name: &str, value: &str) -> Option<&'static str> {
    match (name, value.trim()) {
        ("compression.type", "producer") | ("compression.type", "") => None,
        ("compression.type", _) => Some(
            "Oxbow stores batches as the producer compressed them: compression.type is \
             recorded and described, but batches are not recompressed on the broker (it \
             behaves as 'producer'); set the producer's compression.type instead",
        ),
        _ => None,
    }
}

/// A topic's configs: only the values set explicitly are stored; the rest read as defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfigs {
    pub overrides: BTreeMap<String, String>,
}

/// One config as described to a client.
#[derive(Clone, Debug)]
pub struct ConfigValue {
    pub name: &'static str,
    pub value: String,
    pub is_default: bool,
    /// Kafka's definition (type, default, broker-level synonym).
    pub def: &'static ConfigDef,
}

impl TopicConfigs {
    /// Validates every key and value as Kafka does ([`crate::topic_configs`]); unknown keys
    /// are rejected like Kafka does, so a typo never silently leaves a default in place.
    pub fn validated(overrides: BTreeMap<String, String>) -> Result<Self> {
        crate::topic_configs::check_overrides(&overrides)?;
        Ok(TopicConfigs { overrides })
    }

    /// These configs after `alteration` (validated as a whole; see
    /// [`ConfigAlteration::apply`]).
    pub fn altered(&self, alteration: &ConfigAlteration) -> Result<Self> {
        Ok(TopicConfigs {
            overrides: alteration.apply(&self.overrides)?,
        })
    }

    /// The effective value of `name` (the override, else Kafka's default), as stored:
    /// parse it trimmed, as Kafka does. Empty for a name Kafka does not define.
    pub fn value(&self, name: &str) -> &str {
        if let Some(v) = self.overrides.get(name) {
            return v;
        }
        lookup(name).map(|d| d.default).unwrap_or("")
    }

    fn get(&self, name: &str) -> &str {
        self.value(name).trim()
    }

    /// Every config with its effective value, sorted by name.
    pub fn describe(&self) -> Vec<ConfigValue> {
        TOPIC_CONFIGS
            .iter()
            .map(|d| match self.overrides.get(d.name) {
                Some(v) => ConfigValue {
                    name: d.name,
                    value: v.clone(),
                    is_default: false,
                    def: d,
                },
                None => ConfigValue {
                    name: d.name,
                    value: d.default.to_string(),
                    is_default: true,
                    def: d,
                },
            })
            .collect()
    }

    /// Largest record batch (as sent, compressed) a producer may append.
    pub fn max_message_bytes(&self) -> usize {
        self.get("max.message.bytes").parse().unwrap_or(1_048_588)
    }

    /// Whether the broker stamps batches with its own clock (`LogAppendTime`).
    pub fn log_append_time(&self) -> bool {
        self.get("message.timestamp.type") == "LogAppendTime"
    }

    /// Whether `cleanup.policy` includes `compact` (Kafka then requires a key on every
    /// record).
    pub fn compacted(&self) -> bool {
        crate::topic_configs::list_elements(self.get("cleanup.policy")).contains(&"compact")
    }

    /// Whether `cleanup.policy` includes `delete`: retention and DeleteRecords apply.
    pub fn deletes(&self) -> bool {
        self.get("cleanup.policy")
            .split(',')
            .any(|p| p.trim() == "delete")
    }

    /// Whether `retention.ms` / `retention.bytes` are set on the topic itself (otherwise
    /// the broker's `log.retention.*` defaults apply).
    pub fn overrides(&self, name: &str) -> bool {
        self.overrides.contains_key(name)
    }

    /// How far in the future (by the broker's clock) a `CreateTime` record may be.
    pub fn timestamp_after_max_ms(&self) -> i64 {
        self.get("message.timestamp.after.max.ms")
            .parse()
            .unwrap_or(3_600_000)
    }

    /// How far in the past (by the broker's clock) a `CreateTime` record may be.
    pub fn timestamp_before_max_ms(&self) -> i64 {
        self.get("message.timestamp.before.max.ms")
            .parse()
            .unwrap_or(i64::MAX)
    }

    pub fn min_insync_replicas(&self) -> i32 {
        self.get("min.insync.replicas").parse().unwrap_or(1)
    }

    pub fn retention_ms(&self) -> i64 {
        self.get("retention.ms").parse().unwrap_or(604_800_000)
    }

    pub fn retention_bytes(&self) -> i64 {
        self.get("retention.bytes").parse().unwrap_or(-1)
    }

    /// `delete.retention.ms`: how long a compacted topic keeps a key's latest tombstone.
    pub fn delete_retention_ms(&self) -> i64 {
        self.get("delete.retention.ms")
            .parse()
            .unwrap_or(86_400_000)
    }

    /// `min.compaction.lag.ms`: how old a record must be before compaction may remove it.
    pub fn min_compaction_lag_ms(&self) -> i64 {
        self.get("min.compaction.lag.ms").parse().unwrap_or(0)
    }

    /// `max.compaction.lag.ms`: how old uncompacted data may get before compaction runs
    /// whatever the dirty ratio.
    pub fn max_compaction_lag_ms(&self) -> i64 {
        self.get("max.compaction.lag.ms")
            .parse()
            .unwrap_or(i64::MAX)
    }

    /// `min.cleanable.dirty.ratio`: the share of a compacted log that must be uncompacted
    /// before compaction runs.
    pub fn min_cleanable_dirty_ratio(&self) -> f64 {
        self.get("min.cleanable.dirty.ratio").parse().unwrap_or(0.5)
    }
}

/// Checks a topic name against Kafka's rules: 1–249 characters of `[a-zA-Z0-9._-]`, not `.`
/// or `..`.
pub fn validate_topic_name(name: &str) -> Result<()> {
    let invalid = |reason: &str| {
        Err(Error::InvalidTopicName {
            name: name.to_string(),
            reason: reason.to_string(),
        })
    };
    if name.is_empty() {
        return invalid("must not be empty");
    }
    if name == "." || name == ".." {
        return invalid("must not be '.' or '..'");
    }
    if name.chars().count() > TOPIC_NAME_MAX_CHARS {
        return invalid("longer than 249 characters");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
    {
        return invalid("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

/// Checks a requested partition count.
pub fn validate_partition_count(count: i32) -> Result<()> {
    if count < 1 {
        return Err(Error::InvalidPartitions {
            count,
            reason: "must be at least 1".into(),
        });
    }
    if count > TOPIC_PARTITIONS_MAX {
        return Err(Error::InvalidPartitions {
            count,
            reason: format!("at most {TOPIC_PARTITIONS_MAX} partitions per topic"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_x-2").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name(".").is_err());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("bad/name").is_err());
        assert!(validate_topic_name("spaces no").is_err());
        assert!(validate_topic_name(&"a".repeat(249)).is_ok());
        assert!(validate_topic_name(&"a".repeat(250)).is_err());
    }

    #[test]
    fn configs_are_validated_and_defaulted() {
        let mut m = BTreeMap::new();
        m.insert("max.message.bytes".to_string(), "1000".to_string());
        let c = TopicConfigs::validated(m).expect("valid");
        assert_eq!(c.max_message_bytes(), 1000);
        assert_eq!(c.retention_ms(), 604_800_000);
        assert!(!c.log_append_time());

        let mut bad = BTreeMap::new();
        bad.insert("retention.ms".to_string(), "soon".to_string());
        assert!(TopicConfigs::validated(bad).is_err());
        let mut unknown = BTreeMap::new();
        unknown.insert("no.such.config".to_string(), "1".to_string());
        assert!(TopicConfigs::validated(unknown).is_err());
        let described = TopicConfigs::default().describe();
        assert!(described.iter().all(|c| c.is_default));
        assert!(described.windows(2).all(|w| w[0].name < w[1].name));
    }

    #[test]
    fn compaction_configs_have_kafkas_defaults_and_ranges() {
        let d = TopicConfigs::default();
        assert_eq!(d.delete_retention_ms(), 86_400_000);
        assert_eq!(d.min_compaction_lag_ms(), 0);
        assert_eq!(d.max_compaction_lag_ms(), i64::MAX);
        assert_eq!(d.min_cleanable_dirty_ratio(), 0.5);
        let one = |k: &str, v: &str| {
            TopicConfigs::validated(BTreeMap::from([(k.to_string(), v.to_string())]))
        };
        let c = one("min.cleanable.dirty.ratio", "0.01").expect("valid");
        assert_eq!(c.min_cleanable_dirty_ratio(), 0.01);
        assert!(one("min.cleanable.dirty.ratio", "1.5").is_err());
        assert!(one("delete.retention.ms", "-1").is_err());
        assert!(one("max.compaction.lag.ms", "0").is_err());
        assert!(one("min.compaction.lag.ms", "100").is_ok());
        assert!(one("segment.ms", "100").is_ok());
    }

    #[test]
    fn internal_names_are_reserved() {
        for name in [
            "__consumer_offsets",
            "__transaction_state",
            "__oxbow",
            "__oxbow_x",
        ] {
            assert!(is_internal_topic(name), "{name}");
        }
        for name in [
            "consumer_offsets",
            "_schemas",
            "__confluent.support",
            "t__oxbow",
        ] {
            assert!(!is_internal_topic(name), "{name}");
        }
    }

    #[test]
    fn compression_types_are_kafkas() {
        for v in COMPRESSION_TYPES {
            let mut m = BTreeMap::new();
            m.insert("compression.type".to_string(), v.to_string());
            assert!(TopicConfigs::validated(m).is_ok(), "{v}");
        }
        for bad in ["none", "ZSTD", "brotli", ""] {
            let mut m = BTreeMap::new();
            m.insert("compression.type".to_string(), bad.to_string());
            let e = TopicConfigs::validated(m).expect_err(bad);
            assert!(matches!(e, Error::InvalidConfig { .. }));
        }
        assert!(config_note("compression.type", "zstd").is_some());
        assert!(config_note("compression.type", "producer").is_none());
    }

    #[test]
    fn partition_states_from_before_epoch_histories_read_as_empty() {
        let old = r#"{"partition":3,"leader":2,"leader_epoch":7,"log_start_offset":0,"version":9}"#;
        let p: PartitionState = serde_json::from_str(old).expect("old state");
        assert!(p.leader_epochs.is_empty());
        let mut p = p;
        p.leader_epochs.assign(7, 100);
        let json = serde_json::to_string(&p).expect("encode");
        assert!(
            json.contains(r#""leader_epochs":[{"epoch":7,"start_offset":100}]"#),
            "{json}"
        );
        let back: PartitionState = serde_json::from_str(&json).expect("decode");
        assert_eq!(back, p);
        let empty = serde_json::to_string(&PartitionState::new(0, 1)).expect("encode");
        assert!(!empty.contains("leader_epochs"), "{empty}");
    }

    #[test]
    fn partition_counts_are_bounded() {
        assert!(validate_partition_count(0).is_err());
        assert!(validate_partition_count(1).is_ok());
        assert!(validate_partition_count(TOPIC_PARTITIONS_MAX + 1).is_err());
    }
}
