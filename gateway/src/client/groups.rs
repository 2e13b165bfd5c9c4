//! Consumer-group admin operations on [`Client`]: find a group's coordinator, list,
//! describe and delete groups, fetch and commit a group's offsets.
//!
//! Routing: ListGroups goes to every broker in the cluster (each lists the groups it
//! coordinates, as Kafka's admin client does) and the answers are merged. Every other group
//! request goes to the group's coordinator, found with FindCoordinator (key type 0, group)
//! and reached over the per-node connection the leader routing uses. When the coordinator
//! answers `NOT_COORDINATOR`, `COORDINATOR_NOT_AVAILABLE` or
//! `COORDINATOR_LOAD_IN_PROGRESS` (it moved, or is loading the group), the coordinator is
//! looked up again after a backoff, up to
//! [`RETRIES_MAX`](super::kafka_client::RETRIES_MAX) times.
//!
//! Offsets are committed "standalone" (generation -1, empty member id), which a
//! coordinator accepts only for a group without active members; that is what
//! `kafka-consumer-groups.sh --reset-offsets` does too. The request builders at the end
//! are sans-I/O and set only fields that exist at the negotiated version.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    DeleteGroupsRequest, DescribeGroupsRequest, FindCoordinatorRequest, GroupId, ListGroupsRequest,
    OffsetCommitRequest, OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::error::ClientError;
use super::kafka_client::{backoff, Client, Target, RETRIES_MAX};

/// FindCoordinator key type for consumer groups (Kafka's `CoordinatorType.GROUP`).
const KEY_TYPE_GROUP: i8 = 0;

/// First FindCoordinator version that batches keys (`coordinator_keys`).
const FIND_COORDINATOR_BATCH_VERSION: i16 = 4;

/// Highest OffsetFetch version used: v8+ moves to a multi-group layout this client does
/// not need.
const OFFSET_FETCH_VERSION_MAX: i16 = 7;

/// First OffsetFetch version where a null topic list means "every committed offset".
const OFFSET_FETCH_ALL_TOPICS_VERSION: i16 = 2;

/// Highest OffsetCommit version used: v9+ is the KIP-848 consumer protocol's layout.
const OFFSET_COMMIT_VERSION_MAX: i16 = 8;

/// One group as ListGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    /// `consumer` for Kafka consumers; empty for groups that only have offsets.
    pub protocol_type: String,
    /// `Stable`, `Empty`, ...; `None` when the broker is too old to say (ListGroups < v4).
    pub state: Option<String>,
}

/// One member of a group, as DescribeGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// The partitions assigned to this member (consumer protocol only; empty otherwise or
    /// while the group is rebalancing).
    pub assignment: Vec<(String, i32)>,
}

/// A group's state and members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    /// `Stable`, `Empty`, `PreparingRebalance`, `CompletingRebalance` or `Dead` (Kafka
    /// reports an unknown group as `Dead`).
    pub state: String,
    pub protocol_type: String,
    /// The assignor in use, e.g. `range`.
    pub protocol: String,
    pub members: Vec<GroupMember>,
}

/// One committed offset of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

fn group_id(id: &str) -> GroupId {
    GroupId(StrBytes::from_string(id.to_string()))
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// Errors after which asking FindCoordinator again can help.
fn is_coordinator_error(err: &ClientError) -> bool {
    matches!(
        err.kafka_error(),
        Some(
            ResponseError::NotCoordinator
                | ResponseError::CoordinatorNotAvailable
                | ResponseError::CoordinatorLoadInProgress
        )
    )
}

/// Runs `$op` (an expression using the coordinator node id `$node`) against the group's
/// coordinator, finding it again after coordinator errors. A macro because the operation
/// borrows the client mutably inside an async block.
macro_rules! with_coordinator {
    ($client:expr, $group:expr, |$node:ident| $op:expr) => {{
        let mut attempt = 0;
        loop {
            let result = match $client.find_coordinator($group).await {
                Ok($node) => $op.await,
                Err(err) => Err(err),
            };
            match result {
                Err(err) if is_coordinator_error(&err) && attempt < RETRIES_MAX => {
                    attempt += 1;
                    backoff(attempt).await;
                }
                other => break other,
            }
        }
    }};
}

impl Client {
    /// The node id of the broker coordinating `group`.
    pub async fn find_coordinator(&mut self, group: &str) -> Result<i32, ClientError> {
        let (version, response) = self
            .call(Target::Any, None, Duration::ZERO, |v| {
                find_coordinator_request(v, group)
            })
            .await?;
        let op = || format!("find the coordinator of group \"{group}\"");
        if version >= FIND_COORDINATOR_BATCH_VERSION {
            let found = response
                .coordinators
                .iter()
                .find(|c| c.key.as_str() == group)
                .or_else(|| response.coordinators.first())
                .ok_or_else(|| ClientError::Protocol {
                    addr: self.bootstrap_addr().to_string(),
                    detail: format!("find coordinator response has no entry for \"{group}\""),
                })?;
            ClientError::check(found.error_code, found.error_message.as_deref(), op)?;
            Ok(found.node_id.0)
        } else {
            ClientError::check(response.error_code, response.error_message.as_deref(), op)?;
            Ok(response.node_id.0)
        }
    }

    /// Every group in the cluster, sorted by id: ListGroups sent to each broker, merged.
    pub async fn list_groups(&mut self) -> Result<Vec<GroupListing>, ClientError> {
        let metadata = self.metadata(Some(Vec::new())).await?;
        let mut nodes: Vec<i32> = metadata.brokers.iter().map(|b| b.node_id).collect();
        nodes.sort_unstable();
        let targets: Vec<Target> = if nodes.is_empty() {
            vec![Target::Any]
        } else {
            nodes.into_iter().map(Target::Node).collect()
        };
        let mut groups = BTreeMap::new();
        for target in targets {
            let (version, response) = self
                .call(target, None, Duration::ZERO, |_| {
                    ListGroupsRequest::default()
                })
                .await?;
            ClientError::check(response.error_code, None, || "list groups".to_string())?;
            for g in &response.groups {
                let id = g.group_id.0.to_string();
                groups.insert(
                    id.clone(),
                    GroupListing {
                        group_id: id,
                        protocol_type: g.protocol_type.to_string(),
                        state: (version >= 4).then(|| g.group_state.to_string()),
                    },
                );
            }
        }
        Ok(groups.into_values().collect())
    }

    /// A group's state and members (with their assignments). An unknown group comes back
    /// in state `Dead` with no members, as Kafka reports it.
    pub async fn describe_group(&mut self, group: &str) -> Result<GroupDescription, ClientError> {
        with_coordinator!(self, group, |node| self.describe_group_on(node, group))
    }

    async fn describe_group_on(
        &mut self,
        node: i32,
        group: &str,
    ) -> Result<GroupDescription, ClientError> {
        let (_, response) = self
            .call(Target::Node(node), None, Duration::ZERO, |_| {
                DescribeGroupsRequest::default().with_groups(vec![group_id(group)])
            })
            .await?;
        let found = response
            .groups
            .iter()
            .find(|g| g.group_id.0.as_str() == group)
            .ok_or_else(|| ClientError::Protocol {
                addr: format!("broker {node}"),
                detail: format!("describe groups response has no entry for \"{group}\""),
            })?;
        // DescribeGroups v6 reports an unknown group as GROUP_ID_NOT_FOUND; older versions
        // as state Dead. Callers get the older shape either way.
        if ResponseError::try_from_code(found.error_code) == Some(ResponseError::GroupIdNotFound) {
            return Ok(GroupDescription {
                group_id: group.to_string(),
                state: "Dead".to_string(),
                protocol_type: String::new(),
                protocol: String::new(),
                members: Vec::new(),
            });
        }
        ClientError::check(found.error_code, found.error_message.as_deref(), || {
            format!("describe group \"{group}\"")
        })?;
        let consumer = found.protocol_type.as_str() == crate::groups::protocol::CONSUMER;
        Ok(GroupDescription {
            group_id: group.to_string(),
            state: found.group_state.to_string(),
            protocol_type: found.protocol_type.to_string(),
            protocol: found.protocol_data.to_string(),
            members: found
                .members
                .iter()
                .map(|m| GroupMember {
                    member_id: m.member_id.to_string(),
                    group_instance_id: m.group_instance_id.as_ref().map(|i| i.to_string()),
                    client_id: m.client_id.to_string(),
                    client_host: m.client_host.to_string(),
                    assignment: if consumer {
                        decode_assignment(&m.member_assignment)
                    } else {
                        Vec::new()
                    },
                })
                .collect(),
        })
    }

    /// Deletes a group and its committed offsets. Fails with `NON_EMPTY_GROUP` while it has
    /// members and `GROUP_ID_NOT_FOUND` if it does not exist.
    pub async fn delete_group(&mut self, group: &str) -> Result<(), ClientError> {
        with_coordinator!(self, group, |node| self.delete_group_on(node, group))
    }

    async fn delete_group_on(&mut self, node: i32, group: &str) -> Result<(), ClientError> {
        let (_, response) = self
            .call(Target::Node(node), None, Duration::ZERO, |_| {
                DeleteGroupsRequest::default().with_groups_names(vec![group_id(group)])
            })
            .await?;
        let found = response
            .results
            .iter()
            .find(|r| r.group_id.0.as_str() == group)
            .ok_or_else(|| ClientError::Protocol {
                addr: format!("broker {node}"),
                detail: format!("delete groups response has no entry for \"{group}\""),
            })?;
        ClientError::check(found.error_code, None, || {
            format!("delete group \"{group}\"")
        })
    }

    /// Every offset `group` has committed, sorted by topic and partition.
    pub async fn fetch_offsets(&mut self, group: &str) -> Result<Vec<GroupOffset>, ClientError> {
        with_coordinator!(self, group, |node| self.fetch_offsets_on(node, group))
    }

    async fn fetch_offsets_on(
        &mut self,
        node: i32,
        group: &str,
    ) -> Result<Vec<GroupOffset>, ClientError> {
        let supported = self
            .version_for::<OffsetFetchRequest>(Target::Node(node))
            .await?;
        if supported < OFFSET_FETCH_ALL_TOPICS_VERSION {
            return Err(ClientError::Invalid(format!(
                "the coordinator of group \"{group}\" (broker {node}) only speaks OffsetFetch v{supported}, which cannot list a group's offsets"
            )));
        }
        let (_, response) = self
            .call(
                Target::Node(node),
                Some(OFFSET_FETCH_VERSION_MAX),
                Duration::ZERO,
                |_| offset_fetch_request(group),
            )
            .await?;
        let op = || format!("fetch offsets of group \"{group}\"");
        ClientError::check(response.error_code, None, op)?;
        let mut offsets = Vec::new();
        for t in &response.topics {
            for p in &t.partitions {
                ClientError::check(p.error_code, None, op)?;
                // -1: no offset committed for this partition.
                if p.committed_offset >= 0 {
                    offsets.push(GroupOffset {
                        topic: t.name.0.to_string(),
                        partition: p.partition_index,
                        offset: p.committed_offset,
                    });
                }
            }
        }
        offsets.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(offsets)
    }

    /// Commits `offsets` for `group` outside any generation (generation -1, no member id).
    /// The coordinator accepts this only while the group has no active members.
    pub async fn commit_offsets(
        &mut self,
        group: &str,
        offsets: &[GroupOffset],
    ) -> Result<(), ClientError> {
        with_coordinator!(self, group, |node| self
            .commit_offsets_on(node, group, offsets))
    }

    async fn commit_offsets_on(
        &mut self,
        node: i32,
        group: &str,
        offsets: &[GroupOffset],
    ) -> Result<(), ClientError> {
        let (_, response) = self
            .call(
                Target::Node(node),
                Some(OFFSET_COMMIT_VERSION_MAX),
                Duration::ZERO,
                |_| offset_commit_request(group, offsets),
            )
            .await?;
        for t in &response.topics {
            for p in &t.partitions {
                let topic = t.name.0.as_str();
                let partition = p.partition_index;
                ClientError::check(p.error_code, None, || {
                    format!("commit offset of group \"{group}\" for {topic}-{partition}")
                })?;
            }
        }
        Ok(())
    }
}

/// A consumer-protocol member assignment as (topic, partition) pairs, sorted.
pub fn decode_assignment(assignment: &Bytes) -> Vec<(String, i32)> {
    let mut parts = crate::groups::protocol::assignment_partitions(assignment);
    parts.sort();
    parts
}

/// FindCoordinator for one consumer group.
pub fn find_coordinator_request(version: i16, group: &str) -> FindCoordinatorRequest {
    let key = StrBytes::from_string(group.to_string());
    let request = FindCoordinatorRequest::default();
    let request = if version >= 1 {
        request.with_key_type(KEY_TYPE_GROUP)
    } else {
        request
    };
    if version >= FIND_COORDINATOR_BATCH_VERSION {
        request.with_coordinator_keys(vec![key])
    } else {
        request.with_key(key)
    }
}

/// OffsetFetch (v2–v7 layout) for every offset a group has committed (null topics).
pub fn offset_fetch_request(group: &str) -> OffsetFetchRequest {
    OffsetFetchRequest::default()
        .with_group_id(group_id(group))
        .with_topics(None)
}

/// OffsetCommit of `offsets` outside any generation. Every field used exists in v2–v9
/// (`retention_time_ms` and `committed_leader_epoch` keep their defaults, -1).
pub fn offset_commit_request(group: &str, offsets: &[GroupOffset]) -> OffsetCommitRequest {
    let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for o in offsets {
        by_topic.entry(o.topic.as_str()).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(o.partition)
                .with_committed_offset(o.offset),
        );
    }
    OffsetCommitRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(StrBytes::default())
        .with_topics(
            by_topic
                .into_iter()
                .map(|(topic, partitions)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(topic_name(topic))
                        .with_partitions(partitions)
                })
                .collect(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
    use kafka_protocol::messages::ConsumerProtocolAssignment;
    use kafka_protocol::protocol::Encodable;

    use crate::client::requests::tests::{round_trip, versions};

    #[test]
    fn find_coordinator_encodes_at_every_version() {
        for v in versions::<FindCoordinatorRequest>() {
            let decoded = round_trip(&find_coordinator_request(v, "g"), v);
            if v >= FIND_COORDINATOR_BATCH_VERSION {
                assert_eq!(decoded.coordinator_keys.len(), 1);
            } else {
                assert_eq!(decoded.key.as_str(), "g");
            }
            assert_eq!(decoded.key_type, KEY_TYPE_GROUP);
        }
    }

    #[test]
    fn offset_requests_encode_at_the_versions_used() {
        for v in OFFSET_FETCH_ALL_TOPICS_VERSION..=OFFSET_FETCH_VERSION_MAX {
            let decoded = round_trip(&offset_fetch_request("g"), v);
            assert_eq!(decoded.group_id.0.as_str(), "g");
            assert!(decoded.topics.is_none());
        }
        let offsets = vec![
            GroupOffset {
                topic: "b".into(),
                partition: 1,
                offset: 7,
            },
            GroupOffset {
                topic: "a".into(),
                partition: 0,
                offset: 3,
            },
            GroupOffset {
                topic: "b".into(),
                partition: 0,
                offset: 5,
            },
        ];
        for v in versions::<OffsetCommitRequest>() {
            let decoded = round_trip(&offset_commit_request("g", &offsets), v);
            assert_eq!(decoded.generation_id_or_member_epoch, -1);
            assert!(decoded.member_id.is_empty());
            let names: Vec<&str> = decoded.topics.iter().map(|t| t.name.0.as_str()).collect();
            assert_eq!(names, ["a", "b"]);
            assert_eq!(decoded.topics[1].partitions[0].committed_offset, 7);
        }
        for v in versions::<DescribeGroupsRequest>() {
            round_trip(
                &DescribeGroupsRequest::default().with_groups(vec![group_id("g")]),
                v,
            );
        }
        for v in versions::<DeleteGroupsRequest>() {
            round_trip(
                &DeleteGroupsRequest::default().with_groups_names(vec![group_id("g")]),
                v,
            );
        }
        for v in versions::<ListGroupsRequest>() {
            round_trip(&ListGroupsRequest::default(), v);
        }
    }

    #[test]
    fn assignments_decode_sorted_and_garbage_is_empty() {
        let mut buf = BytesMut::new();
        buf.put_i16(1);
        ConsumerProtocolAssignment::default()
            .with_assigned_partitions(vec![
                TopicPartition::default()
                    .with_topic(topic_name("b"))
                    .with_partitions(vec![2, 0]),
                TopicPartition::default()
                    .with_topic(topic_name("a"))
                    .with_partitions(vec![1]),
            ])
            .encode(&mut buf, 1)
            .expect("encode");
        assert_eq!(
            decode_assignment(&buf.freeze()),
            vec![("a".into(), 1), ("b".into(), 0), ("b".into(), 2)]
        );
        assert!(decode_assignment(&Bytes::new()).is_empty());
        assert!(decode_assignment(&Bytes::from_static(b"\x00\x01\xff")).is_empty());
    }

    /// Against a running broker (Apache Kafka or Oxbow), like `cli/live_tests.rs`:
    /// `OXBOW_LIVE_BOOTSTRAP=127.0.0.1:9092 cargo test -p oxbow-gateway --lib -- --ignored live_`.
    /// A group with only standalone commits: commit, fetch, list, describe, delete.
    #[tokio::test]
    #[ignore = "needs a broker: set OXBOW_LIVE_BOOTSTRAP"]
    async fn live_standalone_group_offsets_round_trip() {
        let bootstrap = std::env::var("OXBOW_LIVE_BOOTSTRAP").expect("OXBOW_LIVE_BOOTSTRAP");
        let mut client = Client::connect(&bootstrap, Duration::from_secs(10))
            .await
            .expect("connect");
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let topic = format!("live-groups-{suffix}");
        let group = format!("live-group-{suffix}");
        client
            .create_topic(&topic, 2, 1, &[])
            .await
            .expect("create topic");
        let offsets = vec![
            GroupOffset {
                topic: topic.clone(),
                partition: 0,
                offset: 0,
            },
            GroupOffset {
                topic: topic.clone(),
                partition: 1,
                offset: 0,
            },
        ];
        // A just-created topic may need a moment before commits to it are accepted.
        let mut attempt = 0;
        loop {
            match client.commit_offsets(&group, &offsets).await {
                Ok(()) => break,
                Err(err) if attempt < RETRIES_MAX && err.is_retriable() => {
                    attempt += 1;
                    backoff(attempt).await;
                }
                Err(err) => panic!("commit: {err}"),
            }
        }
        assert_eq!(client.fetch_offsets(&group).await.expect("fetch"), offsets);
        let listed = client.list_groups().await.expect("list");
        assert!(listed.iter().any(|g| g.group_id == group), "{listed:?}");
        let described = client.describe_group(&group).await.expect("describe");
        assert!(described.members.is_empty(), "{described:?}");
        client.delete_group(&group).await.expect("delete");
        assert!(client
            .fetch_offsets(&group)
            .await
            .expect("fetch after delete")
            .is_empty());
        let err = client
            .delete_group(&group)
            .await
            .expect_err("already deleted");
        assert_eq!(err.kafka_error(), Some(ResponseError::GroupIdNotFound));
        client.delete_topic(&topic).await.expect("delete topic");
    }

    #[test]
    fn coordinator_errors_are_recognised() {
        let err = |code| ClientError::Kafka {
            op: "x".into(),
            code,
            message: None,
        };
        assert!(is_coordinator_error(&err(ResponseError::NotCoordinator)));
        assert!(is_coordinator_error(&err(
            ResponseError::CoordinatorLoadInProgress
        )));
        assert!(!is_coordinator_error(&err(ResponseError::NonEmptyGroup)));
        assert!(!is_coordinator_error(&ClientError::Invalid("x".into())));
    }
}
