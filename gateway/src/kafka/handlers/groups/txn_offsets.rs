//! TxnOffsetCommit: a transaction's offsets, pending in the group until the transaction's
//! marker (`crate::groups`' `txn_commit_offsets_verified`).

use super::*;

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
