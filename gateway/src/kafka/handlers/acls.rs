//! CreateAcls, DescribeAcls and DeleteAcls (what `kafka-acls.sh` and `oxbow acls` send):
//! Kafka's validation and error codes, over `security::acl::store`. With `--authorizer
//! none` each answers SECURITY_DISABLED, as Kafka without an authorizer. Themselves
//! authorized: ALTER on the cluster to create or delete, DESCRIBE to describe.

use super::str_bytes;
use crate::broker::Broker;
use crate::security::acl::model::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, AclPermissionType, EntryFilter,
    PatternType, ResourcePattern, ResourcePatternFilter, ResourceType, CLUSTER_NAME,
};
use crate::security::acl::store;
use crate::security::Session;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use oxbow_metadata::SecurityKind;
use std::collections::BTreeMap;
use std::sync::Arc;

const DISABLED: &str = "no authorizer is configured on the broker (start it with --authorizer acl)";

fn cluster_denied(what: &str) -> (i16, String) {
    (
        crate::error::authorization_failed(ResourceType::Cluster)
            .kafka
            .code(),
        format!(
            "{what} needs {} on the cluster",
            if what == "DescribeAcls" {
                "DESCRIBE"
            } else {
                "ALTER"
            }
        ),
    )
}

/// The refusal of the whole request, if any.
fn refusal(
    broker: &Broker,
    session: &Session,
    op: AclOperation,
    what: &str,
) -> Option<(i16, String)> {
    if !broker.authorizer.enabled() {
        return Some((ResponseError::SecurityDisabled.code(), DISABLED.into()));
    }
    if !broker.authorize(session, op, ResourceType::Cluster, CLUSTER_NAME) {
        return Some(cluster_denied(what));
    }
    None
}

fn filter_of(
    rt: i8,
    name: Option<&str>,
    pt: i8,
    principal: Option<&str>,
    host: Option<&str>,
    op: i8,
    perm: i8,
) -> AclBindingFilter {
    AclBindingFilter {
        pattern: ResourcePatternFilter {
            resource_type: ResourceType::from_code(rt),
            name: name.map(str::to_string),
            pattern_type: PatternType::from_code(pt),
        },
        entry: EntryFilter {
            principal: principal.map(str::to_string),
            host: host.map(str::to_string),
            operation: AclOperation::from_code(op),
            permission_type: AclPermissionType::from_code(perm),
        },
    }
}

pub async fn create(
    broker: &Arc<Broker>,
    session: &Session,
    req: CreateAclsRequest,
) -> CreateAclsResponse {
    let result = |code: i16, message: Option<String>| {
        AclCreationResult::default()
            .with_error_code(code)
            .with_error_message(message.map(|m| str_bytes(&m)))
    };
    if let Some((code, message)) = refusal(broker, session, AclOperation::Alter, "CreateAcls") {
        return CreateAclsResponse::default().with_results(
            req.creations
                .iter()
                .map(|_| result(code, Some(message.clone())))
                .collect(),
        );
    }
    let mut results: Vec<Option<AclCreationResult>> = Vec::with_capacity(req.creations.len());
    let mut valid = Vec::new();
    let mut valid_at = Vec::new();
    for (i, c) in req.creations.iter().enumerate() {
        let binding = AclBinding {
            pattern: ResourcePattern::new(
                ResourceType::from_code(c.resource_type),
                c.resource_name.to_string(),
                PatternType::from_code(c.resource_pattern_type),
            ),
            entry: AccessControlEntry {
                principal: c.principal.to_string(),
                host: c.host.to_string(),
                operation: AclOperation::from_code(c.operation),
                permission_type: AclPermissionType::from_code(c.permission_type),
            },
        };
        match binding.validate() {
            Ok(()) => {
                results.push(None);
                valid.push(binding);
                valid_at.push(i);
            }
            Err(e) => results.push(Some(result(
                ResponseError::InvalidRequest.code(),
                Some(e.to_string()),
            ))),
        }
    }
    let written = store::create(broker.metadata.as_ref(), &broker.security, &valid).await;
    for (i, w) in valid_at.into_iter().zip(written) {
        results[i] = Some(match w {
            Ok(()) => result(0, None),
            Err(e) => {
                tracing::warn!(error = %e, "creating an ACL failed");
                result(e.code(), Some(e.to_string()))
            }
        });
    }
    CreateAclsResponse::default().with_results(
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| result(0, None)))
            .collect(),
    )
}

pub fn describe(
    broker: &Arc<Broker>,
    session: &Session,
    req: DescribeAclsRequest,
) -> DescribeAclsResponse {
    let fail = |code: i16, message: String| {
        DescribeAclsResponse::default()
            .with_error_code(code)
            .with_error_message(Some(str_bytes(&message)))
    };
    if let Some((code, message)) = refusal(broker, session, AclOperation::Describe, "DescribeAcls")
    {
        return fail(code, message);
    }
    let filter = filter_of(
        req.resource_type_filter,
        req.resource_name_filter.as_deref(),
        req.pattern_type_filter,
        req.principal_filter.as_deref(),
        req.host_filter.as_deref(),
        req.operation,
        req.permission_type,
    );
    if let Err(e) = filter.validate() {
        return fail(ResponseError::InvalidRequest.code(), e.to_string());
    }
    let mut by_pattern: BTreeMap<ResourcePattern, Vec<AccessControlEntry>> = BTreeMap::new();
    for b in store::bindings_of(&broker.security.records(SecurityKind::Acl)) {
        if filter.matches(&b) {
            by_pattern.entry(b.pattern).or_default().push(b.entry);
        }
    }
    DescribeAclsResponse::default().with_resources(
        by_pattern
            .into_iter()
            .map(|(p, entries)| {
                DescribeAclsResource::default()
                    .with_resource_type(p.resource_type.code())
                    .with_resource_name(str_bytes(&p.name))
                    .with_pattern_type(p.pattern_type.code())
                    .with_acls(
                        entries
                            .into_iter()
                            .map(|e| {
                                AclDescription::default()
                                    .with_principal(str_bytes(&e.principal))
                                    .with_host(str_bytes(&e.host))
                                    .with_operation(e.operation.code())
                                    .with_permission_type(e.permission_type.code())
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

pub async fn delete(
    broker: &Arc<Broker>,
    session: &Session,
    req: DeleteAclsRequest,
) -> DeleteAclsResponse {
    let fail = |code: i16, message: String| {
        DeleteAclsFilterResult::default()
            .with_error_code(code)
            .with_error_message(Some(str_bytes(&message)))
    };
    if let Some((code, message)) = refusal(broker, session, AclOperation::Alter, "DeleteAcls") {
        return DeleteAclsResponse::default().with_filter_results(
            req.filters
                .iter()
                .map(|_| fail(code, message.clone()))
                .collect(),
        );
    }
    let mut results = Vec::with_capacity(req.filters.len());
    for f in &req.filters {
        let filter = filter_of(
            f.resource_type_filter,
            f.resource_name_filter.as_deref(),
            f.pattern_type_filter,
            f.principal_filter.as_deref(),
            f.host_filter.as_deref(),
            f.operation,
            f.permission_type,
        );
        if let Err(e) = filter.validate() {
            results.push(fail(ResponseError::InvalidRequest.code(), e.to_string()));
            continue;
        }
        match store::delete(broker.metadata.as_ref(), &broker.security, &filter).await {
            Ok(deleted) => results.push(
                DeleteAclsFilterResult::default().with_matching_acls(
                    deleted
                        .into_iter()
                        .map(|b| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(b.pattern.resource_type.code())
                                .with_resource_name(str_bytes(&b.pattern.name))
                                .with_pattern_type(b.pattern.pattern_type.code())
                                .with_principal(str_bytes(&b.entry.principal))
                                .with_host(str_bytes(&b.entry.host))
                                .with_operation(b.entry.operation.code())
                                .with_permission_type(b.entry.permission_type.code())
                        })
                        .collect(),
                ),
            ),
            Err(e) => {
                tracing::warn!(error = %e, "deleting ACLs failed");
                results.push(fail(e.code(), e.to_string()));
            }
        }
    }
    DeleteAclsResponse::default().with_filter_results(results)
}
