//! The classic consumer group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! ListGroups, DescribeGroups, DeleteGroups; and offsets: OffsetCommit, OffsetFetch,
//! OffsetDelete, TxnOffsetCommit (a transaction's offsets, pending until its marker).
//! Membership logic lives in [`crate::groups`]; this maps wire fields.
//!
//! In a cluster each group has one coordinator (`cluster::placement::coordinator_for` over
//! the live brokers); every group request for a group this broker does not coordinate is
//! answered NOT_COORDINATOR, which clients handle by asking FindCoordinator again.
//! ListGroups lists only the groups this broker coordinates (clients ask every broker).

use super::{denied, str_bytes, topic_name, Reply};
use crate::broker::Broker;
use crate::groups::group::JoinRequest;
use crate::groups::TxnOffsetsError;
use crate::security::acl::{AclOperation, AuthzView, ResourceType, CLUSTER_NAME};
use crate::security::Session;
use futures::FutureExt;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse, ResponseKind, SyncGroupRequest, SyncGroupResponse,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use std::collections::BTreeMap;
use std::sync::Arc;

mod txn_offsets;
pub use txn_offsets::txn_offset_commit;

fn group_id(id: &str) -> GroupId {
    GroupId(str_bytes(id))
}

/// `Some(NOT_COORDINATOR)` if another broker coordinates `group`.
/// GROUP_AUTHORIZATION_FAILED unless the session may do `op` on the group.
fn group_refusal(broker: &Broker, session: &Session, op: AclOperation, group: &str) -> Option<i16> {
    (!broker.authorize(session, op, ResourceType::Group, group))
        .then(|| denied(ResourceType::Group))
}

fn not_coordinator(broker: &Broker, group: &str) -> Option<i16> {
    (!broker.coordinates(group)).then(|| ResponseError::NotCoordinator.code())
}

pub fn join(
    broker: &Arc<Broker>,
    session: &Session,
    req: JoinGroupRequest,
    version: i16,
    client_id: String,
) -> Reply {
    let broker = broker.clone();
    let peer = session.peer;
    // READ on the group, for every group protocol request (Kafka).
    let refused = group_refusal(&broker, session, AclOperation::Read, &req.group_id.0);
    Reply::Later(
        async move {
            let id = req.group_id.0.to_string();
            if let Some(code) = refused.or_else(|| not_coordinator(&broker, &id)) {
                return ResponseKind::JoinGroup(
                    JoinGroupResponse::default()
                        .with_error_code(code)
                        .with_generation_id(-1)
                        .with_protocol_name((version < 7).then(|| str_bytes("")))
                        .with_member_id(req.member_id.clone()),
                );
            }
            let join = JoinRequest {
                member_id: req.member_id.to_string(),
                instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
                client_id,
                client_host: format!("/{}", peer.ip()),
                session_timeout_ms: u64::try_from(req.session_timeout_ms).unwrap_or(0),
                // v0 has no rebalance timeout: it is the session timeout.
                rebalance_timeout_ms: u64::try_from(if version >= 1 {
                    req.rebalance_timeout_ms
                } else {
                    req.session_timeout_ms
                })
                .unwrap_or(0),
                protocol_type: req.protocol_type.to_string(),
                protocols: req
                    .protocols
                    .iter()
                    .map(|p| (p.name.to_string(), p.metadata.clone()))
                    .collect(),
                require_known_member_id: version >= 4,
            };
            let r = broker.coordinator.join(&id, join).await;
            let members = r
                .members
                .into_iter()
                .map(|(m, instance, metadata)| {
                    JoinGroupResponseMember::default()
                        .with_member_id(str_bytes(&m))
                        .with_group_instance_id(
                            instance.filter(|_| version >= 5).map(|i| str_bytes(&i)),
                        )
                        .with_metadata(metadata)
                })
                .collect();
            let protocol_name = match (version >= 7, r.protocol_name) {
                (true, name) => name.map(|n| str_bytes(&n)),
                // Non-nullable before v7.
                (false, name) => Some(str_bytes(&name.unwrap_or_default())),
            };
            ResponseKind::JoinGroup(
                JoinGroupResponse::default()
                    .with_error_code(r.error)
                    .with_generation_id(r.generation)
                    .with_protocol_type(
                        r.protocol_type
                            .filter(|_| version >= 7)
                            .map(|p| str_bytes(&p)),
                    )
                    .with_protocol_name(protocol_name)
                    .with_leader(str_bytes(&r.leader))
                    .with_member_id(str_bytes(&r.member_id))
                    .with_members(members),
            )
        }
        .boxed(),
    )
}

pub fn sync(broker: &Arc<Broker>, session: &Session, req: SyncGroupRequest, version: i16) -> Reply {
    let broker = broker.clone();
    let refused = group_refusal(&broker, session, AclOperation::Read, &req.group_id.0);
    Reply::Later(
        async move {
            if let Some(code) = refused.or_else(|| not_coordinator(&broker, &req.group_id.0)) {
                return ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(code));
            }
            let r = broker
                .coordinator
                .sync(
                    &req.group_id.0,
                    &req.member_id,
                    req.group_instance_id.as_deref(),
                    req.generation_id,
                    req.assignments
                        .iter()
                        .map(|a| (a.member_id.to_string(), a.assignment.clone()))
                        .collect(),
                )
                .await;
            let v5 = version >= 5;
            ResponseKind::SyncGroup(
                SyncGroupResponse::default()
                    .with_error_code(r.error)
                    .with_protocol_type(r.protocol_type.filter(|_| v5).map(|p| str_bytes(&p)))
                    .with_protocol_name(r.protocol_name.filter(|_| v5).map(|p| str_bytes(&p)))
                    .with_assignment(r.assignment),
            )
        }
        .boxed(),
    )
}

pub fn heartbeat(
    broker: &Arc<Broker>,
    session: &Session,
    req: HeartbeatRequest,
) -> HeartbeatResponse {
    if let Some(code) = group_refusal(broker, session, AclOperation::Read, &req.group_id.0)
        .or_else(|| not_coordinator(broker, &req.group_id.0))
    {
        return HeartbeatResponse::default().with_error_code(code);
    }
    let code = broker.coordinator.heartbeat(
        &req.group_id.0,
        &req.member_id,
        req.group_instance_id.as_deref(),
        req.generation_id,
    );
    HeartbeatResponse::default().with_error_code(code)
}

pub fn leave(
    broker: &Arc<Broker>,
    session: &Session,
    req: LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    let id = req.group_id.0.to_string();
    if let Some(code) = group_refusal(broker, session, AclOperation::Read, &id)
        .or_else(|| not_coordinator(broker, &id))
    {
        return LeaveGroupResponse::default().with_error_code(code);
    }
    if version < 3 {
        let code = broker.coordinator.leave(&id, &req.member_id, None);
        return LeaveGroupResponse::default().with_error_code(code);
    }
    let members = req
        .members
        .iter()
        .map(|m| {
            let code = broker
                .coordinator
                .leave(&id, &m.member_id, m.group_instance_id.as_deref());
            MemberResponse::default()
                .with_member_id(m.member_id.clone())
                .with_group_instance_id(m.group_instance_id.clone())
                .with_error_code(code)
        })
        .collect();
    LeaveGroupResponse::default().with_members(members)
}

pub async fn list(
    broker: &Arc<Broker>,
    session: &Session,
    req: ListGroupsRequest,
    version: i16,
) -> ListGroupsResponse {
    // DESCRIBE on the cluster lists every group; else those the session may describe.
    let authz = broker.authz(session);
    let all = authz.allows(AclOperation::Describe, ResourceType::Cluster, CLUSTER_NAME);
    let states: Vec<String> = req.states_filter.iter().map(|s| s.to_lowercase()).collect();
    match broker.coordinator.list().await {
        Ok(groups) => ListGroupsResponse::default().with_groups(
            groups
                .into_iter()
                .filter(|(_, _, st)| states.is_empty() || states.contains(&st.to_lowercase()))
                .filter(|(id, _, _)| broker.coordinates(id))
                .filter(|(id, _, _)| {
                    all || authz.allows(AclOperation::Describe, ResourceType::Group, id)
                })
                .map(|(id, pt, st)| {
                    let g = ListedGroup::default()
                        .with_group_id(group_id(&id))
                        .with_protocol_type(str_bytes(&pt));
                    let g = if version >= 4 {
                        g.with_group_state(str_bytes(st))
                    } else {
                        g
                    };
                    if version >= 5 {
                        g.with_group_type(str_bytes("classic"))
                    } else {
                        g
                    }
                })
                .collect(),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "listing groups failed");
            ListGroupsResponse::default()
                .with_error_code(ResponseError::CoordinatorNotAvailable.code())
        }
    }
}

pub async fn describe(
    broker: &Arc<Broker>,
    session: &Session,
    req: DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let mut groups = Vec::with_capacity(req.groups.len());
    for id in &req.groups {
        if let Some(code) = group_refusal(broker, session, AclOperation::Describe, &id.0)
            .or_else(|| not_coordinator(broker, &id.0))
        {
            groups.push(
                DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_error_code(code),
            );
            continue;
        }
        let view = broker.coordinator.describe(&id.0).await;
        groups.push({
            let d = DescribedGroup::default().with_group_id(id.clone());
            match view {
                None => d.with_group_state(str_bytes("Dead")),
                Some(view) => d
                    .with_group_state(str_bytes(view.state))
                    .with_protocol_type(str_bytes(&view.protocol_type))
                    .with_protocol_data(str_bytes(&view.protocol))
                    .with_members(
                        view.members
                            .iter()
                            .map(|m| {
                                DescribedGroupMember::default()
                                    .with_member_id(str_bytes(&m.id))
                                    .with_group_instance_id(
                                        m.instance_id
                                            .as_ref()
                                            .filter(|_| version >= 4)
                                            .map(|i| str_bytes(i)),
                                    )
                                    .with_client_id(str_bytes(&m.client_id))
                                    .with_client_host(str_bytes(&m.client_host))
                                    .with_member_metadata(
                                        m.protocols
                                            .iter()
                                            .find(|(n, _)| *n == view.protocol)
                                            .map(|(_, meta)| meta.clone())
                                            .unwrap_or_default(),
                                    )
                                    .with_member_assignment(m.assignment.clone())
                            })
                            .collect(),
                    ),
            }
        });
    }
    DescribeGroupsResponse::default().with_groups(groups)
}

pub async fn delete(
    broker: &Arc<Broker>,
    session: &Session,
    req: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(req.groups_names.len());
    for id in &req.groups_names {
        let refused = group_refusal(broker, session, AclOperation::Delete, &id.0);
        let code = match refused.or_else(|| not_coordinator(broker, &id.0)) {
            Some(code) => code,
            None => broker.coordinator.delete(&id.0).await,
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(id.clone())
                .with_error_code(code),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}

pub async fn commit(
    broker: &Arc<Broker>,
    session: &Session,
    req: OffsetCommitRequest,
    version: i16,
) -> OffsetCommitResponse {
    let id = req.group_id.0.to_string();
    let authz = broker.authz(session);
    // READ on the group, then READ on each topic (Kafka).
    let group_allowed = authz.allows(AclOperation::Read, ResourceType::Group, &id);
    let check = match not_coordinator(broker, &id) {
        _ if !group_allowed => Err(ResponseError::GroupAuthorizationFailed),
        Some(_) => Err(ResponseError::NotCoordinator),
        None => broker.coordinator.check_commit(
            &id,
            &req.member_id,
            req.group_instance_id.as_deref(),
            req.generation_id_or_member_epoch,
        ),
    };
    let mut codes: Vec<Vec<i16>> = Vec::with_capacity(req.topics.len());
    let mut to_store = Vec::new();
    for t in &req.topics {
        let name = t.name.0.to_string();
        let topic = broker.topic(&name);
        let topic_allowed = authz.allows(AclOperation::Read, ResourceType::Topic, &name);
        codes.push(
            t.partitions
                .iter()
                .map(|p| {
                    if let Err(e) = check {
                        return e.code();
                    }
                    if !topic_allowed {
                        return denied(ResourceType::Topic);
                    }
                    if topic
                        .as_ref()
                        .and_then(|t| t.partition(p.partition_index))
                        .is_none()
                    {
                        return ResponseError::UnknownTopicOrPartition.code();
                    }
                    to_store.push((
                        name.clone(),
                        p.partition_index,
                        p.committed_offset,
                        if version >= 6 {
                            p.committed_leader_epoch
                        } else {
                            -1
                        },
                        p.committed_metadata.as_deref().unwrap_or("").to_string(),
                    ));
                    0
                })
                .collect(),
        );
    }
    if !to_store.is_empty() {
        if let Err(e) = broker.coordinator.commit_offsets(&id, to_store).await {
            tracing::warn!(group = %id, error = %e, "offset commit failed");
            for c in codes.iter_mut().flatten() {
                if *c == 0 {
                    *c = ResponseError::CoordinatorNotAvailable.code();
                }
            }
        }
    }
    let topics = req
        .topics
        .iter()
        .zip(codes)
        .map(|(t, codes)| {
            OffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .zip(codes)
                        .map(|(p, c)| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(c)
                        })
                        .collect(),
                )
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// Most bytes of an offset's metadata string a transactional commit stores (Kafka's
/// `offset.metadata.max.bytes` default); longer is OFFSET_METADATA_TOO_LARGE. Bounds the
/// pending record a transaction leaves in the metadata service.
const OFFSET_METADATA_MAX_BYTES: usize = 4096;

/// TxnOffsetCommit (API 28): a transaction's offsets for a group, stored pending for
/// (group, producer id) until the transaction coordinator's marker commits or drops them
/// ([`crate::groups::Coordinator::complete_txn_offsets`]).
///
/// As Kafka's `handleTxnOffsetCommitRequest`: WRITE on the transactional id, else
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED, then READ on the group, else
/// Offsets of one group: the requested partitions (or all committed ones when `None`).
///
/// DESCRIBE on the group, else GROUP_AUTHORIZATION_FAILED; a requested topic the session
/// may not describe answers TOPIC_AUTHORIZATION_FAILED per partition, and an all-topics
/// fetch leaves such topics out (Kafka's `handleOffsetFetchRequest`). With
/// `require_stable` (v7+; the Java consumer sets it under `isolation.level=read_committed`)
/// a partition an open transaction holds a pending offset for answers the retriable
/// UNSTABLE_OFFSET_COMMIT instead of its committed offset, as Kafka's
/// `GroupMetadata.hasPendingOffsetCommitsForTopicPartition` makes it.
async fn offsets_for(
    broker: &Arc<Broker>,
    authz: &AuthzView,
    group: &str,
    wanted: Option<Vec<(String, Vec<i32>)>>,
    version: i16,
    require_stable: bool,
) -> Result<Vec<(String, Vec<OffsetRow>)>, i16> {
    if !authz.allows(AclOperation::Describe, ResourceType::Group, group) {
        return Err(denied(ResourceType::Group));
    }
    if let Some(code) = not_coordinator(broker, group) {
        return Err(code);
    }
    let (stored, pending) = broker
        .coordinator
        .fetch_offsets_and_pending(group)
        .await
        .map_err(|e| {
            tracing::warn!(group, error = %e, "offset fetch failed");
            ResponseError::CoordinatorNotAvailable.code()
        })?;
    let unstable = |t: &str, p: i32| require_stable && pending.contains(&(t.to_string(), p));
    let unstable_row = |p: i32| OffsetRow {
        partition: p,
        offset: -1,
        leader_epoch: -1,
        metadata: String::new(),
        error: ResponseError::UnstableOffsetCommit.code(),
    };
    let epoch = |e: i32| if version >= 5 { e } else { -1 };
    Ok(match wanted {
        Some(topics) => topics
            .into_iter()
            .map(|(t, parts)| {
                let allowed = authz.allows(AclOperation::Describe, ResourceType::Topic, &t);
                let rows = parts
                    .into_iter()
                    .map(|p| match stored.get(&(t.clone(), p)) {
                        _ if !allowed => OffsetRow {
                            partition: p,
                            offset: -1,
                            leader_epoch: -1,
                            metadata: String::new(),
                            error: denied(ResourceType::Topic),
                        },
                        _ if unstable(&t, p) => unstable_row(p),
                        Some(o) => OffsetRow {
                            partition: p,
                            offset: o.offset,
                            leader_epoch: epoch(o.leader_epoch),
                            metadata: o.metadata.clone(),
                            error: 0,
                        },
                        None => OffsetRow {
                            partition: p,
                            offset: -1,
                            leader_epoch: -1,
                            metadata: String::new(),
                            error: 0,
                        },
                    })
                    .collect();
                (t, rows)
            })
            .collect(),
        None => {
            let mut by_topic: BTreeMap<String, Vec<OffsetRow>> = BTreeMap::new();
            for ((t, p), o) in stored {
                if !authz.allows(AclOperation::Describe, ResourceType::Topic, &t) {
                    continue;
                }
                if unstable(&t, p) {
                    by_topic.entry(t).or_default().push(unstable_row(p));
                    continue;
                }
                by_topic.entry(t).or_default().push(OffsetRow {
                    partition: p,
                    offset: o.offset,
                    leader_epoch: epoch(o.leader_epoch),
                    metadata: o.metadata,
                    error: 0,
                });
            }
            by_topic.into_iter().collect()
        }
    })
}

/// One partition's answer of OffsetFetch.
struct OffsetRow {
    partition: i32,
    offset: i64,
    leader_epoch: i32,
    metadata: String,
    error: i16,
}

pub async fn fetch(
    broker: &Arc<Broker>,
    session: &Session,
    req: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    let authz = broker.authz(session);
    if version >= 8 {
        let mut groups = Vec::with_capacity(req.groups.len());
        for g in &req.groups {
            let wanted = g.topics.as_ref().map(|ts| {
                ts.iter()
                    .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                    .collect()
            });
            let r = OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
            groups.push(
                match offsets_for(
                    broker,
                    &authz,
                    &g.group_id.0,
                    wanted,
                    version,
                    req.require_stable,
                )
                .await
                {
                    Err(code) => r.with_error_code(code),
                    Ok(topics) => r.with_topics(
                        topics
                            .into_iter()
                            .map(|(t, rows)| {
                                OffsetFetchResponseTopics::default()
                                    .with_name(topic_name(&t))
                                    .with_partitions(
                                        rows.into_iter()
                                            .map(|r| {
                                                OffsetFetchResponsePartitions::default()
                                                    .with_partition_index(r.partition)
                                                    .with_committed_offset(r.offset)
                                                    .with_committed_leader_epoch(r.leader_epoch)
                                                    .with_metadata(Some(str_bytes(&r.metadata)))
                                                    .with_error_code(r.error)
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
                },
            );
        }
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let wanted = req.topics.as_ref().map(|ts| {
        ts.iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
            .collect()
    });
    // `require_stable` is v7+; the codec leaves it false before.
    let require_stable = req.require_stable;
    match offsets_for(
        broker,
        &authz,
        &req.group_id.0,
        wanted.clone(),
        version,
        require_stable,
    )
    .await
    {
        Err(code) => {
            let r = OffsetFetchResponse::default();
            if version >= 2 {
                r.with_error_code(code)
            } else {
                // v1 has no top-level error: each requested partition carries it.
                r.with_topics(
                    wanted
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(t, parts)| {
                            OffsetFetchResponseTopic::default()
                                .with_name(topic_name(&t))
                                .with_partitions(
                                    parts
                                        .into_iter()
                                        .map(|p| {
                                            OffsetFetchResponsePartition::default()
                                                .with_partition_index(p)
                                                .with_committed_offset(-1)
                                                .with_committed_leader_epoch(-1)
                                                .with_metadata(Some(str_bytes("")))
                                                .with_error_code(code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                )
            }
        }
        Ok(topics) => OffsetFetchResponse::default().with_topics(
            topics
                .into_iter()
                .map(|(t, rows)| {
                    OffsetFetchResponseTopic::default()
                        .with_name(topic_name(&t))
                        .with_partitions(
                            rows.into_iter()
                                .map(|r| {
                                    OffsetFetchResponsePartition::default()
                                        .with_partition_index(r.partition)
                                        .with_committed_offset(r.offset)
                                        .with_committed_leader_epoch(r.leader_epoch)
                                        .with_metadata(Some(str_bytes(&r.metadata)))
                                        .with_error_code(r.error)
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
    }
}

pub async fn delete_offsets(
    broker: &Arc<Broker>,
    session: &Session,
    req: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    let authz = broker.authz(session);
    // DELETE on the group; READ on each topic, else that topic's partitions are
    // refused and kept (Kafka).
    if !authz.allows(AclOperation::Delete, ResourceType::Group, &req.group_id.0) {
        return OffsetDeleteResponse::default().with_error_code(denied(ResourceType::Group));
    }
    let mut refused: Vec<(String, i32)> = Vec::new();
    let mut wanted: Vec<(String, i32)> = Vec::new();
    for t in &req.topics {
        let name = t.name.0.to_string();
        let allowed = authz.allows(AclOperation::Read, ResourceType::Topic, &name);
        for p in &t.partitions {
            let tp = (name.clone(), p.partition_index);
            if allowed {
                wanted.push(tp);
            } else {
                refused.push(tp);
            }
        }
    }
    if let Some(code) = not_coordinator(broker, &req.group_id.0) {
        return OffsetDeleteResponse::default().with_error_code(code);
    }
    match broker
        .coordinator
        .delete_offsets(&req.group_id.0, wanted)
        .await
    {
        Err(e) => {
            tracing::warn!(error = %e, "offset delete failed");
            OffsetDeleteResponse::default()
                .with_error_code(ResponseError::CoordinatorNotAvailable.code())
        }
        Ok(results) => {
            let mut by_topic: BTreeMap<String, Vec<OffsetDeleteResponsePartition>> =
                BTreeMap::new();
            let refused = refused
                .into_iter()
                .map(|(t, p)| (t, p, denied(ResourceType::Topic)));
            for (t, p, code) in results.into_iter().chain(refused) {
                by_topic.entry(t).or_default().push(
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(code),
                );
            }
            OffsetDeleteResponse::default().with_topics(
                by_topic
                    .into_iter()
                    .map(|(t, parts)| {
                        OffsetDeleteResponseTopic::default()
                            .with_name(topic_name(&t))
                            .with_partitions(parts)
                    })
                    .collect(),
            )
        }
    }
}

#[cfg(test)]
mod tests;
