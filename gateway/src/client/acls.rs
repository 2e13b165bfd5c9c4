//! ACL admin on [`Client`]: CreateAcls, DescribeAcls, DeleteAcls (what `kafka-acls.sh`
//! sends), over the model of `security::acl::model`.

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::StrBytes;
use std::time::Duration;

use super::error::ClientError;
use super::kafka_client::{Client, Target};
use crate::security::acl::model::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType,
    ResourcePattern, ResourceType,
};

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

#[allow(clippy::too_many_arguments)]
fn binding_of(
    rt: i8,
    name: &str,
    pt: i8,
    principal: &str,
    host: &str,
    op: i8,
    perm: i8,
) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern::new(
            ResourceType::from_code(rt),
            name,
            PatternType::from_code(pt),
        ),
        entry: AccessControlEntry {
            principal: principal.to_string(),
            host: host.to_string(),
            operation: AclOperation::from_code(op),
            permission_type: AclPermissionType::from_code(perm),
        },
    }
}

impl Client {
    /// Creates the bindings (one already there is no change).
    pub async fn create_acls(&mut self, bindings: &[AclBinding]) -> Result<(), ClientError> {
        let creations = bindings
            .iter()
            .map(|b| {
                AclCreation::default()
                    .with_resource_type(b.pattern.resource_type.code())
                    .with_resource_name(sb(&b.pattern.name))
                    .with_resource_pattern_type(b.pattern.pattern_type.code())
                    .with_principal(sb(&b.entry.principal))
                    .with_host(sb(&b.entry.host))
                    .with_operation(b.entry.operation.code())
                    .with_permission_type(b.entry.permission_type.code())
            })
            .collect::<Vec<_>>();
        let (_, response) = self
            .call(Target::Any, None, Duration::ZERO, |_| {
                CreateAclsRequest::default().with_creations(creations)
            })
            .await?;
        for (b, r) in bindings.iter().zip(&response.results) {
            ClientError::check(r.error_code, r.error_message.as_deref(), || {
                format!("create ACL {} {}", b.pattern, b.entry.principal)
            })?;
        }
        Ok(())
    }

    /// The bindings matching `filter`.
    pub async fn describe_acls(
        &mut self,
        filter: &AclBindingFilter,
    ) -> Result<Vec<AclBinding>, ClientError> {
        let f = filter.clone();
        let (_, response) = self
            .call(Target::Any, None, Duration::ZERO, |_| {
                DescribeAclsRequest::default()
                    .with_resource_type_filter(f.pattern.resource_type.code())
                    .with_resource_name_filter(f.pattern.name.as_deref().map(sb))
                    .with_pattern_type_filter(f.pattern.pattern_type.code())
                    .with_principal_filter(f.entry.principal.as_deref().map(sb))
                    .with_host_filter(f.entry.host.as_deref().map(sb))
                    .with_operation(f.entry.operation.code())
                    .with_permission_type(f.entry.permission_type.code())
            })
            .await?;
        ClientError::check(
            response.error_code,
            response.error_message.as_deref(),
            || "describe ACLs".to_string(),
        )?;
        let mut out = Vec::new();
        for r in &response.resources {
            for a in &r.acls {
                out.push(binding_of(
                    r.resource_type,
                    &r.resource_name,
                    r.pattern_type,
                    &a.principal,
                    &a.host,
                    a.operation,
                    a.permission_type,
                ));
            }
        }
        Ok(out)
    }

    /// Deletes the bindings matching `filter`; returns them.
    pub async fn delete_acls(
        &mut self,
        filter: &AclBindingFilter,
    ) -> Result<Vec<AclBinding>, ClientError> {
        let f = filter.clone();
        let (_, response) = self
            .call(Target::Any, None, Duration::ZERO, |_| {
                DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
                    .with_resource_type_filter(f.pattern.resource_type.code())
                    .with_resource_name_filter(f.pattern.name.as_deref().map(sb))
                    .with_pattern_type_filter(f.pattern.pattern_type.code())
                    .with_principal_filter(f.entry.principal.as_deref().map(sb))
                    .with_host_filter(f.entry.host.as_deref().map(sb))
                    .with_operation(f.entry.operation.code())
                    .with_permission_type(f.entry.permission_type.code())])
            })
            .await?;
        let mut out = Vec::new();
        for r in &response.filter_results {
            ClientError::check(r.error_code, r.error_message.as_deref(), || {
                "delete ACLs".to_string()
            })?;
            for m in &r.matching_acls {
                ClientError::check(m.error_code, m.error_message.as_deref(), || {
                    "delete ACL".to_string()
                })?;
                out.push(binding_of(
                    m.resource_type,
                    &m.resource_name,
                    m.pattern_type,
                    &m.principal,
                    &m.host,
                    m.operation,
                    m.permission_type,
                ));
            }
        }
        Ok(out)
    }
}
