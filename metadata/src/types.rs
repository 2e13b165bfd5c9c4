//! The shared vocabulary of Oxbow, in Kafka's words: one meaning per word.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A broker's id (`broker.id`, `node.id` in Kafka).
pub type BrokerId = i32;
/// A partition's index within its topic, from 0.
pub type PartitionId = i32;
/// A record's position in its partition: dense, from 0.
pub type Offset = i64;
/// The leader epoch of a partition: bumped on every leadership change, used to fence
/// writers and to truncate divergent tails. "Epoch" means only this in Oxbow.
pub type LeaderEpoch = i32;

/// A topic's identity, stable for its lifetime: a topic deleted and re-created under the same
/// name gets a new id, so nothing of the old one (catalog entries, objects) is ever read as
/// the new one's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TopicId(pub uuid::Uuid);

impl TopicId {
    /// A fresh id from the OS's randomness; stores draw theirs from their injected
    /// [`crate::Rng`].
    pub fn new_random() -> Self {
        use crate::clock::Rng as _;
        TopicId(crate::clock::OsRng.uuid())
    }
    pub fn as_bytes(&self) -> &[u8; 16] {
        self.0.as_bytes()
    }
}

impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A (topic, partition) pair by topic id: the unit of ordering, leadership and storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TopicPartition {
    pub topic_id: TopicId,
    pub partition: PartitionId,
}

impl TopicPartition {
    pub fn new(topic_id: TopicId, partition: PartitionId) -> Self {
        TopicPartition {
            topic_id,
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic_id, self.partition)
    }
}
