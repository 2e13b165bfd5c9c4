//! ACL storage: one `SecurityKind::Acl` record per resource pattern, named
//! `{ResourceType}:{PatternType}:{name}` (e.g. `Topic:LITERAL:orders`, split at the first
//! two `:`, so a resource name may hold more), whose value is a small versioned JSON
//! document of that pattern's entries:
//! `{"version":1,"acls":[{"principal":"User:alice","host":"*","operation":"READ","permission_type":"ALLOW"}]}`.
//!
//! Creating and deleting bindings is a read-modify-write of each pattern's record with
//! compare-and-swap, retried a bounded number of times against concurrent writers; each
//! write is applied to this broker's cache at once. Why one record per pattern: a check
//! needs every entry of a pattern together, Kafka's ACL counts per pattern are small, and
//! one record bounds (by `SECURITY_RECORD_BYTES_MAX`) what one pattern can pin on every
//! broker.

use super::model::{
    AccessControlEntry, AclBinding, AclBindingFilter, PatternType, ResourcePattern, ResourceType,
};
use crate::security::cache::SecurityCache;
use oxbow_metadata::{
    ErrorKind, MetadataStore, SecurityEvent, SecurityKind, SecurityRecord,
    SECURITY_RECORD_BYTES_MAX,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Version of the record's JSON document.
const VALUE_VERSION: u32 = 1;

/// Compare-and-swap attempts per pattern before giving up (another admin writing the same
/// pattern at the same moment, every time).
const CAS_ATTEMPTS_MAX: usize = 8;

#[derive(serde::Serialize, serde::Deserialize)]
struct Value {
    version: u32,
    acls: Vec<AccessControlEntry>,
}

/// The record name of a pattern.
pub fn record_name(p: &ResourcePattern) -> String {
    p.to_string()
}

/// The pattern a record name stands for; `None` for a name this version cannot read.
pub fn parse_record_name(name: &str) -> Option<ResourcePattern> {
    let mut parts = name.splitn(3, ':');
    let rt = parts.next()?;
    let pt = parts.next()?;
    let resource = parts.next()?;
    let resource_type = ResourceType::ALL
        .iter()
        .copied()
        .find(|t| t.camel_name() == rt)?;
    let pattern_type = PatternType::parse(pt)?;
    let pattern = ResourcePattern::new(resource_type, resource, pattern_type);
    (matches!(pattern_type, PatternType::Literal | PatternType::Prefixed)
        && !matches!(resource_type, ResourceType::Any | ResourceType::Unknown)
        && !resource.is_empty())
    .then_some(pattern)
}

/// The entries of a stored value.
pub fn decode_entries(value: &[u8]) -> Result<Vec<AccessControlEntry>, String> {
    let v: Value = serde_json::from_slice(value).map_err(|e| e.to_string())?;
    if v.version != VALUE_VERSION {
        return Err(format!(
            "ACL record version {} is not {VALUE_VERSION}",
            v.version
        ));
    }
    Ok(v.acls)
}

/// A stored value of `entries` (sorted, so equal sets are equal bytes).
pub fn encode_entries(entries: &BTreeSet<AccessControlEntry>) -> Vec<u8> {
    let v = Value {
        version: VALUE_VERSION,
        acls: entries.iter().cloned().collect(),
    };
    // Serializing plain strings into memory cannot fail.
    serde_json::to_vec(&v).unwrap_or_default()
}

/// Every binding of the stored records (a record this version cannot read is skipped with
/// a warning: it denies nothing and allows nothing).
pub fn bindings_of(records: &[SecurityRecord]) -> Vec<AclBinding> {
    let mut out = Vec::new();
    for r in records {
        let Some(pattern) = parse_record_name(&r.name) else {
            tracing::warn!(name = %r.name, "ignoring an ACL record whose name cannot be read");
            continue;
        };
        match decode_entries(&r.value) {
            Ok(entries) => out.extend(entries.into_iter().map(|entry| AclBinding {
                pattern: pattern.clone(),
                entry,
            })),
            Err(e) => {
                tracing::warn!(name = %r.name, error = %e, "ignoring an ACL record that cannot be decoded")
            }
        }
    }
    out
}

/// Why an ACL write failed.
#[derive(Debug, thiserror::Error)]
pub enum AclWriteError {
    #[error(transparent)]
    Metadata(#[from] oxbow_metadata::Error),
    #[error("the ACLs of {0} changed concurrently {CAS_ATTEMPTS_MAX} times in a row; retry")]
    Contended(String),
    #[error("the ACLs of {0} would exceed {SECURITY_RECORD_BYTES_MAX} bytes")]
    TooLarge(String),
}

impl AclWriteError {
    /// The Kafka error code of the failure.
    pub fn code(&self) -> i16 {
        use kafka_protocol::error::ResponseError;
        match self {
            AclWriteError::Metadata(e) => crate::error::map_metadata(e).kafka.code(),
            // Retriable, as the metadata service's own conflicts.
            AclWriteError::Contended(_) => ResponseError::RequestTimedOut.code(),
            AclWriteError::TooLarge(_) => ResponseError::InvalidRequest.code(),
        }
    }
}

/// One pattern's change: a pure function from its current entries to the new ones.
async fn modify(
    metadata: &dyn MetadataStore,
    cache: &SecurityCache,
    pattern: &ResourcePattern,
    change: &(dyn Fn(&mut BTreeSet<AccessControlEntry>) + Sync),
) -> Result<(), AclWriteError> {
    let name = record_name(pattern);
    // The cached copy is the first guess; a conflict re-reads the store.
    let mut current = cache.get(SecurityKind::Acl, &name);
    for _ in 0..CAS_ATTEMPTS_MAX {
        let mut entries: BTreeSet<AccessControlEntry> = match &current {
            Some(r) => decode_entries(&r.value)
                .unwrap_or_default()
                .into_iter()
                .collect(),
            None => BTreeSet::new(),
        };
        let before = entries.clone();
        change(&mut entries);
        if entries == before && current.is_some() {
            return Ok(());
        }
        if entries.is_empty() {
            if current.is_none() {
                return Ok(());
            }
            let expected = current.as_ref().map(|r| r.version);
            match metadata
                .delete_security_record(SecurityKind::Acl, &name, expected)
                .await
            {
                Ok(()) => {
                    cache.apply(SecurityEvent::Deleted {
                        kind: SecurityKind::Acl,
                        name,
                    });
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::Conflict => {}
                Err(e) => return Err(e.into()),
            }
        } else {
            let value = encode_entries(&entries);
            if value.len() > SECURITY_RECORD_BYTES_MAX {
                return Err(AclWriteError::TooLarge(name));
            }
            let expected = current.as_ref().map(|r| r.version);
            match metadata
                .put_security_record(SecurityKind::Acl, &name, value.clone(), expected)
                .await
            {
                Ok(version) => {
                    cache.apply(SecurityEvent::Put(SecurityRecord {
                        kind: SecurityKind::Acl,
                        name,
                        value,
                        version,
                    }));
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::Conflict => {}
                Err(e) => return Err(e.into()),
            }
        }
        current = metadata
            .security_records(SecurityKind::Acl)
            .await?
            .into_iter()
            .find(|r| r.name == name);
    }
    Err(AclWriteError::Contended(name))
}

/// Adds bindings (one already there is no change, as in Kafka). One result per binding,
/// in order.
pub async fn create(
    metadata: &dyn MetadataStore,
    cache: &SecurityCache,
    bindings: &[AclBinding],
) -> Vec<Result<(), Arc<AclWriteError>>> {
    let mut by_pattern: BTreeMap<&ResourcePattern, Vec<usize>> = BTreeMap::new();
    for (i, b) in bindings.iter().enumerate() {
        by_pattern.entry(&b.pattern).or_default().push(i);
    }
    let mut results: Vec<Option<Result<(), Arc<AclWriteError>>>> =
        bindings.iter().map(|_| None).collect();
    for (pattern, idx) in by_pattern {
        let add: Vec<AccessControlEntry> = idx.iter().map(|i| bindings[*i].entry.clone()).collect();
        let r = modify(metadata, cache, pattern, &|entries| {
            entries.extend(add.iter().cloned())
        })
        .await
        .map_err(Arc::new);
        for i in idx {
            results[i] = Some(r.clone());
        }
    }
    results.into_iter().map(|r| r.unwrap_or(Ok(()))).collect()
}

/// Deletes the bindings matching `filter` (of the current cached copy; each pattern's
/// record is re-checked by compare-and-swap). Returns the bindings deleted.
pub async fn delete(
    metadata: &dyn MetadataStore,
    cache: &SecurityCache,
    filter: &AclBindingFilter,
) -> Result<Vec<AclBinding>, AclWriteError> {
    let matching: Vec<AclBinding> = bindings_of(&cache.records(SecurityKind::Acl))
        .into_iter()
        .filter(|b| filter.matches(b))
        .collect();
    let patterns: BTreeSet<&ResourcePattern> = matching.iter().map(|b| &b.pattern).collect();
    let mut deleted = Vec::new();
    for pattern in patterns {
        let removed = std::sync::Mutex::new(Vec::new());
        modify(metadata, cache, pattern, &|entries| {
            let mut gone = Vec::new();
            entries.retain(|e| {
                let b = AclBinding {
                    pattern: pattern.clone(),
                    entry: e.clone(),
                };
                let hit = filter.matches(&b);
                if hit {
                    gone.push(b);
                }
                !hit
            });
            *removed.lock().unwrap_or_else(|p| p.into_inner()) = gone;
        })
        .await?;
        deleted.extend(removed.into_inner().unwrap_or_else(|p| p.into_inner()));
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::super::model::{AclOperation, AclPermissionType};
    use super::*;

    fn binding(pt: PatternType, name: &str, principal: &str, op: AclOperation) -> AclBinding {
        AclBinding {
            pattern: ResourcePattern::new(ResourceType::Topic, name, pt),
            entry: AccessControlEntry {
                principal: principal.into(),
                host: "*".into(),
                operation: op,
                permission_type: AclPermissionType::Allow,
            },
        }
    }

    #[test]
    fn record_names_round_trip_and_hold_colons() {
        let p = ResourcePattern::new(ResourceType::TransactionalId, "a:b", PatternType::Prefixed);
        assert_eq!(record_name(&p), "TransactionalId:PREFIXED:a:b");
        assert_eq!(parse_record_name(&record_name(&p)), Some(p));
        for bad in [
            "",
            "Topic",
            "Topic:LITERAL:",
            "Topic:ANY:x",
            "Nope:LITERAL:x",
            "Any:LITERAL:x",
        ] {
            assert_eq!(parse_record_name(bad), None, "{bad}");
        }
        assert!(decode_entries(b"{\"version\":2,\"acls\":[]}").is_err());
        assert!(decode_entries(b"not json").is_err());
    }

    #[tokio::test]
    async fn adding_twice_is_one_entry_and_delete_takes_what_the_filter_matches() {
        let store: Arc<dyn MetadataStore> =
            Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("store"));
        let cache = SecurityCache::load(store.as_ref()).await.expect("load");
        let a = binding(
            PatternType::Literal,
            "orders",
            "User:alice",
            AclOperation::Read,
        );
        let b = binding(
            PatternType::Literal,
            "orders",
            "User:bob",
            AclOperation::Write,
        );
        let c = binding(
            PatternType::Prefixed,
            "ord",
            "User:alice",
            AclOperation::Read,
        );
        for r in create(
            store.as_ref(),
            &cache,
            &[a.clone(), a.clone(), b.clone(), c.clone()],
        )
        .await
        {
            r.expect("created");
        }
        for r in create(store.as_ref(), &cache, std::slice::from_ref(&a)).await {
            r.expect("created again");
        }
        let stored = store
            .security_records(SecurityKind::Acl)
            .await
            .expect("list");
        let mut all = bindings_of(&stored);
        all.sort();
        let mut want = vec![a.clone(), b.clone(), c.clone()];
        want.sort();
        assert_eq!(all, want, "the store holds each binding once");
        assert_eq!(
            bindings_of(&cache.records(SecurityKind::Acl)).len(),
            3,
            "cache applied"
        );

        let mut alice = AclBindingFilter::any();
        alice.entry.principal = Some("User:alice".into());
        let mut deleted = delete(store.as_ref(), &cache, &alice)
            .await
            .expect("delete");
        deleted.sort();
        let mut want = vec![a, c];
        want.sort();
        assert_eq!(deleted, want);
        let left = bindings_of(
            &store
                .security_records(SecurityKind::Acl)
                .await
                .expect("list"),
        );
        assert_eq!(left, vec![b]);
        let stored = store
            .security_records(SecurityKind::Acl)
            .await
            .expect("list");
        assert_eq!(
            stored.len(),
            1,
            "a pattern left without entries has no record"
        );
    }

    #[tokio::test]
    async fn a_stale_cache_is_mended_by_compare_and_swap() {
        let store: Arc<dyn MetadataStore> =
            Arc::new(oxbow_metadata::EmbeddedStore::in_memory().expect("store"));
        let stale = SecurityCache::load(store.as_ref()).await.expect("load");
        let fresh = SecurityCache::load(store.as_ref()).await.expect("load");
        let a = binding(PatternType::Literal, "t", "User:a", AclOperation::Read);
        let b = binding(PatternType::Literal, "t", "User:b", AclOperation::Read);
        create(store.as_ref(), &fresh, std::slice::from_ref(&a))
            .await
            .remove(0)
            .expect("a");
        // `stale` never saw `a`: its create conflicts, re-reads, and keeps both.
        create(store.as_ref(), &stale, std::slice::from_ref(&b))
            .await
            .remove(0)
            .expect("b");
        let mut all = bindings_of(
            &store
                .security_records(SecurityKind::Acl)
                .await
                .expect("list"),
        );
        all.sort();
        assert_eq!(all, vec![a, b]);
    }
}
