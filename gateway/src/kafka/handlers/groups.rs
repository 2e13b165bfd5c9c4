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
/// GROUP_AUTHORIZATION_FAILED, on every partition; per partition, READ on its topic
/// (TOPIC_AUTHORIZATION_FAILED) and its existence (UNKNOWN_TOPIC_OR_PARTITION). Then, for the
/// group: NOT_COORDINATOR if another broker coordinates it, INVALID_GROUP_ID if empty, and
/// from v3 the member fencing of Kafka's `doTxnCommitOffsets` (UNKNOWN_MEMBER_ID,
/// ILLEGAL_GENERATION, FENCED_INSTANCE_ID, each only if the field is set). A producer epoch
/// older than the one of the offsets already pending is INVALID_PRODUCER_EPOCH; a newer one
/// while the producer's previous transaction still waits for its marker is the retriable
/// COORDINATOR_NOT_AVAILABLE (Kafka's CONCURRENT_TRANSACTIONS is fatal to a Java client's
/// TxnOffsetCommit; in Kafka the transaction coordinator keeps that case from arising).
///
/// Not checked here: that the transaction coordinator knows the offsets partition is in
/// the transaction (Kafka's verification for v4+, and the implicit add of v5, KIP-890).
pub async fn txn_offset_commit(
    broker: &Arc<Broker>,
    session: &Session,
    req: TxnOffsetCommitRequest,
    version: i16,
) -> TxnOffsetCommitResponse {
    let id = req.group_id.0.to_string();
    let authz = broker.authz(session);
    let refused = if !authz.allows(
        AclOperation::Write,
        ResourceType::TransactionalId,
        &req.transactional_id.0,
    ) {
        Some(denied(ResourceType::TransactionalId))
    } else if !authz.allows(AclOperation::Read, ResourceType::Group, &id) {
        Some(denied(ResourceType::Group))
    } else {
        None
    };
    let group_error = refused
        .or_else(|| not_coordinator(broker, &id))
        .or_else(|| id.is_empty().then(|| ResponseError::InvalidGroupId.code()));
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
                    if let Some(code) = refused {
                        return code;
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
                    if let Some(code) = group_error {
                        return code;
                    }
                    let metadata = p.committed_metadata.as_deref().unwrap_or("");
                    if metadata.len() > OFFSET_METADATA_MAX_BYTES {
                        return ResponseError::OffsetMetadataTooLarge.code();
                    }
                    to_store.push((
                        name.clone(),
                        p.partition_index,
                        p.committed_offset,
                        if version >= 2 {
                            p.committed_leader_epoch
                        } else {
                            -1
                        },
                        metadata.to_string(),
                    ));
                    0
                })
                .collect(),
        );
    }
    if !to_store.is_empty() {
        let member = (version >= 3).then(|| {
            (
                req.member_id.as_str(),
                req.group_instance_id.as_deref(),
                req.generation_id,
            )
        });
        let verified = crate::transactions::verify::verify_group(
            broker,
            req.transactional_id.as_str(),
            req.producer_id.0,
            req.producer_epoch,
            &id,
            // Protocol 2: the client sends no AddOffsetsToTxn; this adds the group.
            if version >= 5 {
                crate::transactions::verify::Ask::Add
            } else {
                crate::transactions::verify::Ask::Verify
            },
        );
        let stored = broker
            .coordinator
            .txn_commit_offsets_verified(
                &id,
                req.producer_id.0,
                req.producer_epoch,
                member,
                to_store,
                async move { verified.await.map_err(TxnOffsetsError::Txn) },
            )
            .await;
        if let Err(e) = stored {
            let code = match &e {
                TxnOffsetsError::Group(e) => e.code(),
                // Fenced as a stored epoch is (`group_write_error`).
                TxnOffsetsError::Txn(ResponseError::ProducerFenced) => {
                    ResponseError::InvalidProducerEpoch.code()
                }
                TxnOffsetsError::Txn(e) => e.code(),
                TxnOffsetsError::Metadata(e) => {
                    tracing::warn!(group = %id, error = %e, "transactional offset commit failed");
                    crate::error::group_write_error(e).code()
                }
            };
            for c in codes.iter_mut().flatten() {
                if *c == 0 {
                    *c = code;
                }
            }
        }
    }
    let topics = req
        .topics
        .iter()
        .zip(codes)
        .map(|(t, codes)| {
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .zip(codes)
                        .map(|(p, c)| {
                            TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(c)
                        })
                        .collect(),
                )
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

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
mod tests {
    use super::*;
    use crate::groups::offsets_partition;
    use crate::security::acl::model::{
        AccessControlEntry, AclBinding, AclPermissionType, PatternType, ResourcePattern,
    };
    use crate::security::acl::{AuthorizerKind, AuthorizerSettings};
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopics,
    };
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{ProducerId, TransactionalId};
    use oxbow_metadata::TopicSpec;

    /// A broker over a temp dir (embedded metadata, local objects) with topic `t` of two
    /// partitions.
    async fn broker(dir: &std::path::Path, authorization: AuthorizerSettings) -> Arc<Broker> {
        let broker = crate::broker::testing::temp_broker(dir, authorization).await;
        broker
            .create_topic(TopicSpec {
                name: "t".into(),
                partitions: 2,
                replication_factor: 1,
                configs: BTreeMap::new(),
            })
            .await
            .expect("topic");
        broker
    }

    fn session() -> Session {
        Session::plaintext("127.0.0.1:5000".parse().expect("address"))
    }

    /// Begins a transaction of `tx` that commits offsets for `groups` (InitProducerId and
    /// AddOffsetsToTxn, straight to the coordinator): its producer id, at epoch 0.
    async fn begin(broker: &Arc<Broker>, groups: &[&str]) -> i64 {
        use crate::transactions::state::Request;
        let env = crate::transactions::markers::env(broker);
        let init = broker
            .transactions
            .request(
                &env,
                "tx",
                Request::InitProducerId {
                    timeout_ms: 60_000,
                    max_timeout_ms: 900_000,
                    expected: None,
                    fresh_producer_id: None,
                },
            )
            .await;
        let (pid, epoch) = init.producer.expect("a producer id");
        assert_eq!(epoch, 0);
        for g in groups {
            let added = broker
                .transactions
                .request(
                    &env,
                    "tx",
                    Request::AddOffsets {
                        producer_id: pid,
                        producer_epoch: 0,
                        group: g.to_string(),
                    },
                )
                .await;
            assert_eq!(added.error, None);
        }
        pid
    }

    /// A TxnOffsetCommit of `tx`'s transaction for a group it never added: its code.
    async fn begin_other_group(broker: &Arc<Broker>, pid: i64) -> i16 {
        let r = txn_offset_commit(
            broker,
            &session(),
            txn_commit("never-added", pid, 0, &[("t", 0, 1)]),
            3,
        )
        .await;
        codes(&r)[0].2
    }

    /// A TxnOffsetCommit of `tx`/`producer_id` for `group`: (topic, partition, offset) each.
    fn txn_commit(
        group: &str,
        producer_id: i64,
        producer_epoch: i16,
        offsets: &[(&str, i32, i64)],
    ) -> TxnOffsetCommitRequest {
        let mut topics: BTreeMap<&str, Vec<TxnOffsetCommitRequestPartition>> = BTreeMap::new();
        for (t, p, o) in offsets {
            topics.entry(t).or_default().push(
                TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(*p)
                    .with_committed_offset(*o)
                    .with_committed_leader_epoch(4)
                    .with_committed_metadata(Some(str_bytes("m"))),
            );
        }
        TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(str_bytes("tx")))
            .with_group_id(group_id(group))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(producer_epoch)
            .with_generation_id(-1)
            .with_member_id(str_bytes(""))
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, parts)| {
                        TxnOffsetCommitRequestTopic::default()
                            .with_name(topic_name(t))
                            .with_partitions(parts)
                    })
                    .collect(),
            )
    }

    /// Error codes of a response, by (topic, partition), in request order.
    fn codes(r: &TxnOffsetCommitResponse) -> Vec<(String, i32, i16)> {
        r.topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.name.0.to_string(), p.partition_index, p.error_code))
            })
            .collect()
    }

    /// OffsetFetch v8 of `t`-0 for `group`: (offset, error).
    async fn fetch_t0(broker: &Arc<Broker>, group: &str, require_stable: bool) -> (i64, i16) {
        let req = OffsetFetchRequest::default()
            .with_require_stable(require_stable)
            .with_groups(vec![OffsetFetchRequestGroup::default()
                .with_group_id(group_id(group))
                .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                    .with_name(topic_name("t"))
                    .with_partition_indexes(vec![0])]))]);
        let r = fetch(broker, &session(), req, 8).await;
        let p = &r.groups[0].topics[0].partitions[0];
        (p.committed_offset, p.error_code)
    }

    #[tokio::test]
    async fn txn_offsets_are_pending_until_the_marker_and_unstable_meanwhile() {
        let dir = tempfile::tempdir().expect("tmp");
        let broker = broker(dir.path(), AuthorizerSettings::default()).await;
        let g = "app";
        // Not in any transaction yet: refused (KIP-890), nothing stored.
        let r =
            txn_offset_commit(&broker, &session(), txn_commit(g, 7, 0, &[("t", 0, 9)]), 3).await;
        assert_eq!(
            codes(&r),
            vec![(
                "t".into(),
                0,
                ResponseError::InvalidProducerIdMapping.code()
            )]
        );
        let pid = begin(&broker, &[g]).await;
        let other = begin_other_group(&broker, pid).await;
        assert_eq!(other, ResponseError::InvalidTxnState.code());
        let r = txn_offset_commit(
            &broker,
            &session(),
            txn_commit(g, pid, 0, &[("t", 0, 10), ("t", 5, 1), ("nope", 0, 1)]),
            3,
        )
        .await;
        let unknown = ResponseError::UnknownTopicOrPartition.code();
        assert_eq!(
            codes(&r),
            vec![
                ("nope".into(), 0, unknown),
                ("t".into(), 0, 0),
                ("t".into(), 5, unknown)
            ]
        );
        // read_committed consumers wait (retriable); others see what is committed: nothing.
        assert_eq!(
            fetch_t0(&broker, g, true).await,
            (-1, ResponseError::UnstableOffsetCommit.code())
        );
        assert_eq!(fetch_t0(&broker, g, false).await, (-1, 0));
        // A zombie of the producer (an older epoch) is fenced.
        let r = txn_offset_commit(
            &broker,
            &session(),
            txn_commit(g, pid, -1, &[("t", 0, 11)]),
            3,
        )
        .await;
        assert_eq!(
            codes(&r),
            vec![("t".into(), 0, ResponseError::InvalidProducerEpoch.code())]
        );
        // The marker commits them.
        let done = broker
            .coordinator
            .complete_txn_offsets(pid, 0, &[offsets_partition(g)], true)
            .await
            .expect("marker");
        assert_eq!(done.completed, vec![g.to_string()]);
        assert_eq!(fetch_t0(&broker, g, true).await, (10, 0));

        // Member fencing (v3+), only for the fields that are set.
        let ghost = txn_commit(g, pid, 0, &[("t", 1, 3)]).with_member_id(str_bytes("ghost"));
        let r = txn_offset_commit(&broker, &session(), ghost.clone(), 3).await;
        assert_eq!(
            codes(&r),
            vec![("t".into(), 1, ResponseError::UnknownMemberId.code())]
        );
        // Before v3 the request carries no member: the field is not on the wire.
        let r = txn_offset_commit(&broker, &session(), ghost, 2).await;
        assert_eq!(codes(&r), vec![("t".into(), 1, 0)]);
        let wrong_generation = txn_commit(g, pid, 0, &[("t", 1, 3)]).with_generation_id(5);
        let r = txn_offset_commit(&broker, &session(), wrong_generation, 3).await;
        assert_eq!(
            codes(&r),
            vec![("t".into(), 1, ResponseError::IllegalGeneration.code())]
        );
        let r = txn_offset_commit(
            &broker,
            &session(),
            txn_commit("", pid, 0, &[("t", 1, 3)]),
            3,
        )
        .await;
        assert_eq!(
            codes(&r),
            vec![("t".into(), 1, ResponseError::InvalidGroupId.code())]
        );
    }

    #[tokio::test]
    async fn txn_offset_commit_is_authorized_as_kafka_does() {
        let dir = tempfile::tempdir().expect("tmp");
        let settings = AuthorizerSettings {
            kind: AuthorizerKind::Acl,
            ..Default::default()
        };
        let broker = broker(dir.path(), settings).await;
        let allow = |rt: ResourceType, name: &str, op: AclOperation| AclBinding {
            pattern: ResourcePattern::new(rt, name, PatternType::Literal),
            entry: AccessControlEntry {
                principal: "User:ANONYMOUS".into(),
                host: "*".into(),
                operation: op,
                permission_type: AclPermissionType::Allow,
            },
        };
        let grant = |b: AclBinding| {
            let broker = broker.clone();
            async move {
                let r = crate::security::acl::store::create(
                    broker.metadata.as_ref(),
                    &broker.security,
                    &[b],
                )
                .await;
                assert!(r.iter().all(Result::is_ok), "grant");
            }
        };
        let pid = begin(&broker, &["app"]).await;
        let request = || txn_commit("app", pid, 0, &[("t", 0, 10)]);
        let code = |r: TxnOffsetCommitResponse| codes(&r)[0].2;
        let r = txn_offset_commit(&broker, &session(), request(), 3).await;
        assert_eq!(
            code(r),
            ResponseError::TransactionalIdAuthorizationFailed.code()
        );
        grant(allow(
            ResourceType::TransactionalId,
            "tx",
            AclOperation::Write,
        ))
        .await;
        let r = txn_offset_commit(&broker, &session(), request(), 3).await;
        assert_eq!(code(r), ResponseError::GroupAuthorizationFailed.code());
        grant(allow(ResourceType::Group, "app", AclOperation::Read)).await;
        let r = txn_offset_commit(&broker, &session(), request(), 3).await;
        assert_eq!(code(r), ResponseError::TopicAuthorizationFailed.code());
        grant(allow(ResourceType::Topic, "t", AclOperation::Read)).await;
        let r = txn_offset_commit(&broker, &session(), request(), 3).await;
        assert_eq!(code(r), 0);
    }
}
