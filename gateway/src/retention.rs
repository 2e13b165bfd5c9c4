//! Each topic's retention for the compactor ([`RetentionPolicies`]), from the broker's topic
//! metadata (which follows config changes through the topic watch): the topic's own
//! `retention.ms` / `retention.bytes`, else the broker's `--log-retention-ms` /
//! `--log-retention-bytes` (Kafka's `log.retention.*`); nothing expires in a topic whose
//! `cleanup.policy` lacks `delete`. Topics whose `cleanup.policy` includes `compact` are
//! key-compacted with their `delete.retention.ms`, `min.compaction.lag.ms`,
//! `max.compaction.lag.ms` and `min.cleanable.dirty.ratio`.

use crate::broker::Broker;
use oxbow_metadata::TopicId;
use oxbow_segment_writer::key_compact::KeyCompaction;
use oxbow_segment_writer::{Retention, RetentionPolicies};
use std::sync::Weak;

/// The broker's topics as retention policies (held weakly: the compactor must not keep the
/// broker alive).
pub struct TopicRetention {
    pub broker: Weak<Broker>,
    /// The broker-wide defaults.
    pub defaults: Retention,
}

impl RetentionPolicies for TopicRetention {
    fn retention(&self, topic_id: TopicId) -> Option<Retention> {
        let topic = self.broker.upgrade()?.topic_by_id(topic_id.0)?;
        let c = &topic.configs;
        if !c.deletes() {
            return Some(Retention { ms: -1, bytes: -1 });
        }
        Some(Retention {
            ms: if c.overrides("retention.ms") {
                c.retention_ms()
            } else {
                self.defaults.ms
            },
            bytes: if c.overrides("retention.bytes") {
                c.retention_bytes()
            } else {
                self.defaults.bytes
            },
        })
    }

    fn key_compaction(&self, topic_id: TopicId) -> Option<KeyCompaction> {
        let topic = self.broker.upgrade()?.topic_by_id(topic_id.0)?;
        let c = &topic.configs;
        c.compacted().then(|| KeyCompaction {
            delete_retention_ms: c.delete_retention_ms(),
            min_lag_ms: c.min_compaction_lag_ms(),
            max_lag_ms: c.max_compaction_lag_ms(),
            min_dirty_ratio: c.min_cleanable_dirty_ratio(),
        })
    }
}
