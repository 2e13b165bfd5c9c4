//! DescribeClientQuotas (API 48) and AlterClientQuotas (API 49): client quotas per user and
//! client id, as `kafka-configs.sh --entity-type users|clients` reads and sets them.
//! Quotas live in the security keyspace (one record per entity, `security::quota::model`)
//! and every broker's cache; an alteration is a compare-and-swap per entity, retried a few
//! times if another admin changed the same entity meanwhile. Authorized as in Kafka:
//! DESCRIBE_CONFIGS on the cluster to describe, ALTER_CONFIGS on the cluster to alter
//! (CLUSTER_AUTHORIZATION_FAILED otherwise).

use super::str_bytes;
use crate::broker::Broker;
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::security::quota::model::{
    apply_ops, entity_from_components, Filter, QuotaEntity, QuotaError, QuotaKey, QuotaOp,
    QuotaRecord,
};
use crate::security::Session;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    alter_client_quotas_response, describe_client_quotas_response, AlterClientQuotasRequest,
    AlterClientQuotasResponse, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
};
use oxbow_metadata::{ErrorKind, SecurityEvent, SecurityKind};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// Attempts of one entity's compare-and-swap before answering the conflict.
const CAS_ATTEMPTS: usize = 5;
/// Most entries one AlterClientQuotas may carry (a frame could hold millions).
const ENTRIES_MAX: usize = 10_000;

pub fn describe(
    broker: &Arc<Broker>,
    session: &Session,
    req: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    if !broker.authorize(
        session,
        AclOperation::DescribeConfigs,
        ResourceType::Cluster,
        CLUSTER_NAME,
    ) {
        return DescribeClientQuotasResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let components = req.components.iter().map(|c| {
        (
            c.entity_type.as_str(),
            c.match_type,
            c._match.as_ref().map(|m| m.as_str()),
        )
    });
    let filter = match Filter::from_components(components, req.strict) {
        Ok(f) => f,
        Err(e) => {
            let code = match e {
                QuotaError::InvalidRequest(_) => ResponseError::InvalidRequest,
                QuotaError::UnknownEntityType(_) => ResponseError::UnsupportedVersion,
            };
            return DescribeClientQuotasResponse::default()
                .with_error_code(code.code())
                .with_error_message(Some(str_bytes(&e.to_string())));
        }
    };
    let table = broker.quotas.table();
    let entries = table
        .entities()
        .filter(|(entity, _)| filter.matches(entity))
        .map(|(entity, quotas)| {
            describe_client_quotas_response::EntryData::default()
                .with_entity(
                    entity
                        .components()
                        .into_iter()
                        .map(|(t, n)| {
                            describe_client_quotas_response::EntityData::default()
                                .with_entity_type(str_bytes(t))
                                .with_entity_name(n.map(str_bytes))
                        })
                        .collect(),
                )
                .with_values(
                    quotas
                        .iter()
                        .map(|(k, v)| {
                            describe_client_quotas_response::ValueData::default()
                                .with_key(str_bytes(k.name()))
                                .with_value(*v)
                        })
                        .collect(),
                )
        })
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}

pub async fn alter(
    broker: &Arc<Broker>,
    session: &Session,
    req: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let allowed = broker.authorize(
        session,
        AclOperation::AlterConfigs,
        ResourceType::Cluster,
        CLUSTER_NAME,
    );
    let mut seen = HashSet::new();
    let mut entries = Vec::with_capacity(req.entries.len().min(ENTRIES_MAX));
    for (i, entry) in req.entries.into_iter().enumerate() {
        let wire_entity: Vec<alter_client_quotas_response::EntityData> = entry
            .entity
            .iter()
            .map(|e| {
                alter_client_quotas_response::EntityData::default()
                    .with_entity_type(e.entity_type.clone())
                    .with_entity_name(e.entity_name.clone())
            })
            .collect();
        let answer = |code: Option<ResponseError>, message: Option<String>| {
            alter_client_quotas_response::EntryData::default()
                .with_error_code(code.map_or(0, |c| c.code()))
                .with_error_message(message.map(|m| str_bytes(&m)))
                .with_entity(wire_entity.clone())
        };
        if !allowed {
            entries.push(answer(
                Some(ResponseError::ClusterAuthorizationFailed),
                None,
            ));
            continue;
        }
        if i >= ENTRIES_MAX {
            entries.push(answer(
                Some(ResponseError::InvalidRequest),
                Some(format!("more than {ENTRIES_MAX} entries in one request")),
            ));
            continue;
        }
        let entity = match entity_from_components(entry.entity.iter().map(|e| {
            (
                e.entity_type.as_str(),
                e.entity_name.as_ref().map(|n| n.as_str()),
            )
        })) {
            Ok(e) => e,
            Err(e) => {
                entries.push(answer(
                    Some(ResponseError::InvalidRequest),
                    Some(e.to_string()),
                ));
                continue;
            }
        };
        if !seen.insert(entity.clone()) {
            entries.push(answer(
                Some(ResponseError::InvalidRequest),
                Some(format!(
                    "Ignoring duplicate entity {}",
                    describe_entity(&entity)
                )),
            ));
            continue;
        }
        let ops: Vec<QuotaOp> = entry
            .ops
            .iter()
            .map(|o| QuotaOp {
                key: o.key.to_string(),
                value: o.value,
                remove: o.remove,
            })
            .collect();
        entries.push(
            match alter_one(broker, &entity, &ops, req.validate_only).await {
                Ok(()) => answer(None, None),
                Err((code, message)) => answer(Some(code), Some(message)),
            },
        );
    }
    AlterClientQuotasResponse::default().with_entries(entries)
}

fn describe_entity(entity: &QuotaEntity) -> String {
    entity
        .components()
        .into_iter()
        .map(|(t, n)| format!("{t}={}", n.unwrap_or("<default>")))
        .collect::<Vec<_>>()
        .join(",")
}

async fn alter_one(
    broker: &Arc<Broker>,
    entity: &QuotaEntity,
    ops: &[QuotaOp],
    validate_only: bool,
) -> Result<(), (ResponseError, String)> {
    let name = entity.record_name();
    let store_error = |e: oxbow_metadata::Error| {
        let code = match e.kind() {
            ErrorKind::Unavailable => ResponseError::RequestTimedOut,
            ErrorKind::Invalid => ResponseError::InvalidRequest,
            _ => ResponseError::UnknownServerError,
        };
        (code, e.to_string())
    };
    for _ in 0..CAS_ATTEMPTS {
        let held = broker.security.get(SecurityKind::ClientQuota, &name);
        let current: BTreeMap<QuotaKey, f64> = held
            .as_ref()
            .and_then(|r| QuotaRecord::decode(&r.value))
            .map(|r| r.keys())
            .unwrap_or_default();
        let next =
            apply_ops(&current, ops).map_err(|e| (ResponseError::InvalidRequest, e.to_string()))?;
        if validate_only || next == current {
            return Ok(());
        }
        let expected = held.as_ref().map(|r| r.version);
        let written = if next.is_empty() {
            broker
                .metadata
                .delete_security_record(SecurityKind::ClientQuota, &name, expected)
                .await
                .map(|()| None)
        } else {
            let record = QuotaRecord::new(entity.clone(), &next);
            broker
                .metadata
                .put_security_record(SecurityKind::ClientQuota, &name, record.encode(), expected)
                .await
                .map(|version| Some((record, version)))
        };
        match written {
            Ok(None) => {
                broker.security.apply(SecurityEvent::Deleted {
                    kind: SecurityKind::ClientQuota,
                    name,
                });
                return Ok(());
            }
            Ok(Some((record, version))) => {
                broker
                    .security
                    .apply(SecurityEvent::Put(oxbow_metadata::SecurityRecord {
                        kind: SecurityKind::ClientQuota,
                        name,
                        value: record.encode(),
                        version,
                    }));
                return Ok(());
            }
            Err(e) if e.kind() == ErrorKind::Conflict => {
                // Another admin wrote the entity since the cache was read: read it again.
                refresh(broker, &name).await.map_err(store_error)?;
            }
            Err(e) => return Err(store_error(e)),
        }
    }
    Err((
        ResponseError::RequestTimedOut,
        "the quota entity kept changing under concurrent alterations; retry".into(),
    ))
}

/// Reads one entity's record from the store into the cache (or its absence).
async fn refresh(broker: &Arc<Broker>, name: &str) -> oxbow_metadata::Result<()> {
    let stored = broker
        .metadata
        .security_records(SecurityKind::ClientQuota)
        .await?
        .into_iter()
        .find(|r| r.name == name);
    broker.security.apply(match stored {
        Some(r) => SecurityEvent::Put(r),
        None => SecurityEvent::Deleted {
            kind: SecurityKind::ClientQuota,
            name: name.to_string(),
        },
    });
    Ok(())
}
