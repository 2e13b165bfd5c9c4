//! The decision: may this principal, from this host, do this operation on this resource?
//! Kafka's `StandardAuthorizer` semantics (`StandardAuthorizerData.findResult` and
//! `MatchingRuleBuilder`):
//!
//! - a super user (`--super-users`) may do everything;
//! - the ACLs that apply to a resource are those of its literal name, of the literal
//!   wildcard `*`, and of every prefixed pattern its name starts with;
//! - an entry applies to the principal if it names it or `User:*`, to the host if it names
//!   it or `*`, to the operation if it is the operation or ALL; an ALLOW of READ, WRITE,
//!   DELETE or ALTER also allows DESCRIBE, an ALLOW of ALTER_CONFIGS also DESCRIBE_CONFIGS
//!   (a DENY implies nothing);
//! - a DENY that applies beats any ALLOW; else an ALLOW that applies allows;
//! - else, if no ACL at all applies to the resource (whoever it names),
//!   `--allow-everyone-if-no-acl-found` decides (default: deny); else deny.
//!
//! "Any resource of a type" (`authorizeByResourceType`, KIP-679: an idempotent producer
//! needs WRITE on some topic or IDEMPOTENT_WRITE on the cluster) follows Kafka's default
//! `Authorizer.authorizeByResourceType`.
//!
//! The checks read an [`AclIndex`] derived from the security cache and rebuilt only when
//! the cache's generation moves: a check is a few map lookups plus one lookup per distinct
//! prefix length, never I/O.

use super::model::{
    AccessControlEntry, AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType,
    WILDCARD_HOST, WILDCARD_PRINCIPAL, WILDCARD_RESOURCE,
};
use super::store::bindings_of;
use crate::security::cache::SecurityCache;
use crate::security::Principal;
use oxbow_metadata::SecurityKind;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

/// Which authorizer the broker runs (`--authorizer`, Kafka's `authorizer.class.name`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthorizerKind {
    /// No authorization: every request is allowed, as Kafka without an authorizer; the ACL
    /// APIs answer SECURITY_DISABLED.
    #[default]
    None,
    /// Kafka's ACLs (`StandardAuthorizer`), kept in the metadata service.
    Acl,
}

/// The authorizer's settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthorizerSettings {
    pub kind: AuthorizerKind,
    /// Principals allowed everything (`--super-users`, Kafka `super.users`).
    pub super_users: BTreeSet<Principal>,
    /// Allow a resource no ACL names at all (`--allow-everyone-if-no-acl-found`). Off, as
    /// in Kafka: a resource nobody wrote ACLs for is closed.
    pub allow_everyone_if_no_acl_found: bool,
}

/// The ACL entries of the cache, arranged for lookups.
#[derive(Default)]
pub struct AclIndex {
    literal: HashMap<ResourceType, HashMap<String, Vec<AccessControlEntry>>>,
    prefixed: HashMap<ResourceType, HashMap<String, Vec<AccessControlEntry>>>,
    /// The distinct byte lengths of each type's prefixed patterns: a prefix walk looks up
    /// only those.
    prefix_lens: HashMap<ResourceType, BTreeSet<usize>>,
    /// Every binding by type (`authorize_by_type`).
    by_type: HashMap<ResourceType, Vec<AclBinding>>,
}

impl AclIndex {
    pub fn build(bindings: Vec<AclBinding>) -> Self {
        let mut index = AclIndex::default();
        for b in bindings {
            let rt = b.pattern.resource_type;
            let map = match b.pattern.pattern_type {
                PatternType::Literal => index.literal.entry(rt).or_default(),
                PatternType::Prefixed => {
                    index
                        .prefix_lens
                        .entry(rt)
                        .or_default()
                        .insert(b.pattern.name.len());
                    index.prefixed.entry(rt).or_default()
                }
                _ => continue,
            };
            map.entry(b.pattern.name.clone())
                .or_default()
                .push(b.entry.clone());
            index.by_type.entry(rt).or_default().push(b);
        }
        index
    }

    /// The entries of every pattern that applies to the resource.
    fn applicable<'a>(
        &'a self,
        rt: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = &'a AccessControlEntry> + 'a {
        let literal = self.literal.get(&rt);
        let exact = literal.and_then(|m| m.get(name));
        let wildcard = (name != WILDCARD_RESOURCE)
            .then(|| literal.and_then(|m| m.get(WILDCARD_RESOURCE)))
            .flatten();
        let prefixed = self.prefixed.get(&rt);
        let prefixes = self
            .prefix_lens
            .get(&rt)
            .into_iter()
            .flatten()
            .take_while(move |len| **len <= name.len())
            .filter(move |len| name.is_char_boundary(**len))
            .filter_map(move |len| prefixed.and_then(|m| m.get(&name[..*len])));
        exact.into_iter().chain(wildcard).chain(prefixes).flatten()
    }
}

/// Whether an entry applies to a request, and how (Kafka's `findResult`).
fn applies(
    e: &AccessControlEntry,
    principal: &str,
    host: &str,
    op: AclOperation,
) -> Option<AclPermissionType> {
    if e.principal != principal && e.principal != WILDCARD_PRINCIPAL {
        return None;
    }
    if e.host != WILDCARD_HOST && e.host != host {
        return None;
    }
    if e.operation != AclOperation::All {
        let implied = match (e.permission_type, op) {
            (AclPermissionType::Allow, AclOperation::Describe) => matches!(
                e.operation,
                AclOperation::Describe
                    | AclOperation::Read
                    | AclOperation::Write
                    | AclOperation::Delete
                    | AclOperation::Alter
            ),
            (AclPermissionType::Allow, AclOperation::DescribeConfigs) => matches!(
                e.operation,
                AclOperation::DescribeConfigs | AclOperation::AlterConfigs
            ),
            _ => e.operation == op,
        };
        if !implied {
            return None;
        }
    }
    Some(e.permission_type)
}

/// One request's view of the authorizer: checks of many resources share one index.
pub struct AuthzView {
    /// `None`: no authorizer, everything allowed.
    index: Option<Arc<AclIndex>>,
    super_user: bool,
    allow_if_no_acl: bool,
    principal: String,
    host: String,
}

impl AuthzView {
    /// A view that allows everything (`--authorizer none`).
    pub fn allow_all() -> Self {
        AuthzView {
            index: None,
            super_user: false,
            allow_if_no_acl: true,
            principal: String::new(),
            host: String::new(),
        }
    }

    /// Whether the principal may do `op` on the resource.
    pub fn allows(&self, op: AclOperation, rt: ResourceType, name: &str) -> bool {
        let Some(index) = &self.index else {
            return true;
        };
        if self.super_user {
            return true;
        }
        let mut found_any = false;
        let mut allowed = false;
        for e in index.applicable(rt, name) {
            found_any = true;
            match applies(e, &self.principal, &self.host, op) {
                Some(AclPermissionType::Deny) => return false,
                Some(AclPermissionType::Allow) => allowed = true,
                _ => {}
            }
        }
        allowed || (!found_any && self.allow_if_no_acl)
    }

    /// Whether the principal may do `op` on at least one resource of type `rt` (Kafka's
    /// default `Authorizer.authorizeByResourceType`): allowed on a made-up name (super
    /// users, the no-ACL rule), or some ALLOW for the operation not shadowed by a DENY.
    pub fn allows_some(&self, op: AclOperation, rt: ResourceType) -> bool {
        if self.allows(op, rt, "hardcode") {
            return true;
        }
        let Some(index) = &self.index else {
            return true;
        };
        let mut deny_literal = BTreeSet::new();
        let mut deny_prefixed = BTreeSet::new();
        let mut allow = Vec::new();
        for b in index.by_type.get(&rt).into_iter().flatten() {
            let e = &b.entry;
            if e.host != self.host && e.host != WILDCARD_HOST {
                continue;
            }
            if e.principal != self.principal && e.principal != WILDCARD_PRINCIPAL {
                continue;
            }
            if e.operation != op && e.operation != AclOperation::All {
                continue;
            }
            match (e.permission_type, b.pattern.pattern_type) {
                (AclPermissionType::Deny, PatternType::Literal) => {
                    if b.pattern.name == WILDCARD_RESOURCE {
                        return false;
                    }
                    deny_literal.insert(b.pattern.name.as_str());
                }
                (AclPermissionType::Deny, PatternType::Prefixed) => {
                    deny_prefixed.insert(b.pattern.name.as_str());
                }
                (AclPermissionType::Allow, _) => allow.push(&b.pattern),
                _ => {}
            }
        }
        if allow
            .iter()
            .any(|p| p.pattern_type == PatternType::Literal && p.name == WILDCARD_RESOURCE)
        {
            return true;
        }
        allow.iter().any(|p| {
            if p.pattern_type == PatternType::Literal && deny_literal.contains(p.name.as_str()) {
                return false;
            }
            let dominated = p
                .name
                .char_indices()
                .map(|(i, c)| &p.name[..i + c.len_utf8()])
                .any(|prefix| deny_prefixed.contains(prefix));
            !dominated
        })
    }
}

/// The broker's authorizer: settings plus the index, rebuilt when the cache moves.
pub struct Authorizer {
    settings: AuthorizerSettings,
    /// (cache generation it was built at, index).
    index: RwLock<Option<(u64, Arc<AclIndex>)>>,
}

impl Authorizer {
    pub fn new(settings: AuthorizerSettings) -> Self {
        Authorizer {
            settings,
            index: RwLock::new(None),
        }
    }

    /// Whether ACLs are enforced (`--authorizer acl`).
    pub fn enabled(&self) -> bool {
        self.settings.kind == AuthorizerKind::Acl
    }

    pub fn settings(&self) -> &AuthorizerSettings {
        &self.settings
    }

    /// The index of the cache's current ACLs (built again only if it changed since).
    pub fn index(&self, cache: &SecurityCache) -> Arc<AclIndex> {
        let generation = cache.generation();
        if let Some((g, idx)) = &*self.index.read().unwrap_or_else(|p| p.into_inner()) {
            if *g == generation {
                return idx.clone();
            }
        }
        // Read at `generation` or later: if the cache moved meanwhile, the next check
        // rebuilds again (the stored generation is older than the cache's).
        let built = Arc::new(AclIndex::build(bindings_of(
            &cache.records(SecurityKind::Acl),
        )));
        let mut slot = self.index.write().unwrap_or_else(|p| p.into_inner());
        match &*slot {
            Some((g, idx)) if *g > generation => idx.clone(),
            _ => {
                *slot = Some((generation, built.clone()));
                built
            }
        }
    }

    /// A view for one request of `principal` from `host`.
    pub fn view(&self, cache: &SecurityCache, principal: &Principal, host: &str) -> AuthzView {
        if !self.enabled() {
            return AuthzView::allow_all();
        }
        AuthzView {
            index: Some(self.index(cache)),
            super_user: self.settings.super_users.contains(principal),
            allow_if_no_acl: self.settings.allow_everyone_if_no_acl_found,
            principal: principal.to_string(),
            host: host.to_string(),
        }
    }
}

/// Parses `--super-users` (Kafka `super.users`): principals separated by `;`.
pub fn parse_super_users(s: &str) -> Result<BTreeSet<Principal>, String> {
    s.split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse::<Principal>()
                .map_err(|e| format!("--super-users: {e}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::model::{ResourcePattern, CLUSTER_NAME};
    use super::*;
    use oxbow_metadata::{SecurityEvent, SecurityRecord};

    const TOPIC: ResourceType = ResourceType::Topic;
    const HOST: &str = "10.0.0.1";

    fn acl(
        pt: PatternType,
        name: &str,
        principal: &str,
        host: &str,
        op: AclOperation,
        perm: AclPermissionType,
    ) -> AclBinding {
        AclBinding {
            pattern: ResourcePattern::new(TOPIC, name, pt),
            entry: AccessControlEntry {
                principal: principal.into(),
                host: host.into(),
                operation: op,
                permission_type: perm,
            },
        }
    }

    fn allow(pt: PatternType, name: &str, principal: &str, op: AclOperation) -> AclBinding {
        acl(pt, name, principal, "*", op, AclPermissionType::Allow)
    }

    fn deny(pt: PatternType, name: &str, principal: &str, op: AclOperation) -> AclBinding {
        acl(pt, name, principal, "*", op, AclPermissionType::Deny)
    }

    fn view(bindings: Vec<AclBinding>, who: &str, settings: AuthorizerSettings) -> AuthzView {
        AuthzView {
            index: Some(Arc::new(AclIndex::build(bindings))),
            super_user: settings
                .super_users
                .contains(&who.parse::<Principal>().expect("principal")),
            allow_if_no_acl: settings.allow_everyone_if_no_acl_found,
            principal: who.into(),
            host: HOST.into(),
        }
    }

    fn acl_settings() -> AuthorizerSettings {
        AuthorizerSettings {
            kind: AuthorizerKind::Acl,
            ..Default::default()
        }
    }

    use AclOperation::*;
    use PatternType::{Literal, Prefixed};

    #[test]
    fn deny_beats_allow_wherever_it_comes_from() {
        let v = view(
            vec![
                allow(Literal, "orders", "User:alice", Read),
                deny(Prefixed, "ord", "User:*", Read),
            ],
            "User:alice",
            acl_settings(),
        );
        assert!(!v.allows(Read, TOPIC, "orders"));
        let v = view(
            vec![
                allow(Prefixed, "ord", "User:alice", All),
                deny(Literal, "*", "User:alice", Write),
            ],
            "User:alice",
            acl_settings(),
        );
        assert!(v.allows(Read, TOPIC, "orders"));
        assert!(!v.allows(Write, TOPIC, "orders"));
    }

    #[test]
    fn literal_prefixed_and_wildcard_names_apply_as_in_kafka() {
        let v = view(
            vec![
                allow(Literal, "orders", "User:alice", Read),
                allow(Prefixed, "pay", "User:alice", Read),
                allow(Literal, "*", "User:alice", Describe),
                allow(Prefixed, "wörk", "User:alice", Read),
            ],
            "User:alice",
            acl_settings(),
        );
        assert!(v.allows(Read, TOPIC, "orders"));
        assert!(!v.allows(Read, TOPIC, "orders2"), "literal is exact");
        assert!(v.allows(Read, TOPIC, "payments"));
        assert!(v.allows(Read, TOPIC, "pay"));
        assert!(!v.allows(Read, TOPIC, "pa"));
        assert!(v.allows(Read, TOPIC, "wörker"));
        assert!(
            !v.allows(Read, TOPIC, "wö"),
            "no prefix cut inside a character"
        );
        assert!(v.allows(Describe, TOPIC, "anything"));
        assert!(
            !v.allows(Read, ResourceType::Group, "orders"),
            "types do not mix"
        );
    }

    #[test]
    fn principal_and_host_wildcards() {
        let bindings = vec![
            allow(Literal, "t", "User:*", Read),
            acl(
                Literal,
                "t",
                "User:bob",
                "10.9.9.9",
                Write,
                AclPermissionType::Allow,
            ),
            acl(
                Literal,
                "t",
                "User:bob",
                HOST,
                Delete,
                AclPermissionType::Allow,
            ),
        ];
        let bob = view(bindings.clone(), "User:bob", acl_settings());
        assert!(bob.allows(Read, TOPIC, "t"));
        assert!(!bob.allows(Write, TOPIC, "t"), "another host");
        assert!(bob.allows(Delete, TOPIC, "t"), "this host");
        let carol = view(bindings, "User:carol", acl_settings());
        assert!(carol.allows(Read, TOPIC, "t"));
        assert!(!carol.allows(Delete, TOPIC, "t"));
    }

    #[test]
    fn operations_imply_describe_and_all_covers_all_but_deny_implies_nothing() {
        for op in [Read, Write, Delete, Alter] {
            let v = view(
                vec![allow(Literal, "t", "User:a", op)],
                "User:a",
                acl_settings(),
            );
            assert!(v.allows(Describe, TOPIC, "t"), "{op} implies DESCRIBE");
        }
        let v = view(
            vec![allow(Literal, "t", "User:a", Create)],
            "User:a",
            acl_settings(),
        );
        assert!(
            !v.allows(Describe, TOPIC, "t"),
            "CREATE does not imply DESCRIBE"
        );
        let v = view(
            vec![allow(Literal, "t", "User:a", AlterConfigs)],
            "User:a",
            acl_settings(),
        );
        assert!(v.allows(DescribeConfigs, TOPIC, "t"));
        assert!(!v.allows(Describe, TOPIC, "t"));
        let v = view(
            vec![allow(Literal, "t", "User:a", All)],
            "User:a",
            acl_settings(),
        );
        for op in [
            Read,
            Write,
            Create,
            Delete,
            Alter,
            Describe,
            DescribeConfigs,
            AlterConfigs,
        ] {
            assert!(v.allows(op, TOPIC, "t"), "ALL covers {op}");
        }
        let v = view(
            vec![
                allow(Literal, "t", "User:a", All),
                deny(Literal, "t", "User:a", Read),
            ],
            "User:a",
            acl_settings(),
        );
        assert!(!v.allows(Read, TOPIC, "t"));
        assert!(
            v.allows(Describe, TOPIC, "t"),
            "a DENY of READ does not deny DESCRIBE"
        );
    }

    #[test]
    fn no_acl_rule_both_ways_and_any_acl_on_the_resource_closes_it() {
        let open = AuthorizerSettings {
            allow_everyone_if_no_acl_found: true,
            ..acl_settings()
        };
        let v = view(vec![], "User:a", acl_settings());
        assert!(!v.allows(Read, TOPIC, "t"), "default: closed");
        let v = view(vec![], "User:a", open.clone());
        assert!(v.allows(Read, TOPIC, "t"));
        let v = view(vec![allow(Literal, "t", "User:b", Write)], "User:a", open);
        assert!(
            !v.allows(Read, TOPIC, "t"),
            "an ACL for someone else closes it"
        );
        assert!(v.allows(Read, TOPIC, "u"), "another topic stays open");
    }

    #[test]
    fn super_users_may_do_everything_even_when_denied() {
        let settings = AuthorizerSettings {
            super_users: parse_super_users("User:admin; User:ops").expect("parse"),
            ..acl_settings()
        };
        let v = view(
            vec![deny(Literal, "*", "User:*", All)],
            "User:ops",
            settings.clone(),
        );
        assert!(v.allows(Delete, TOPIC, "t"));
        let v = view(
            vec![deny(Literal, "*", "User:*", All)],
            "User:bob",
            settings,
        );
        assert!(!v.allows(Read, TOPIC, "t"));
        assert!(parse_super_users("User:a;nope").is_err());
        assert!(parse_super_users("").expect("empty").is_empty());
        assert!(AuthzView::allow_all().allows(Delete, ResourceType::Cluster, CLUSTER_NAME));
    }

    #[test]
    fn by_resource_type_write_on_any_topic() {
        let v = view(
            vec![allow(Literal, "t", "User:a", Write)],
            "User:a",
            acl_settings(),
        );
        assert!(v.allows_some(Write, TOPIC));
        assert!(
            !v.allows_some(Read, TOPIC),
            "no implication across operations"
        );
        let v = view(
            vec![
                allow(Literal, "t", "User:a", Write),
                deny(Literal, "t", "User:a", Write),
            ],
            "User:a",
            acl_settings(),
        );
        assert!(!v.allows_some(Write, TOPIC));
        let v = view(
            vec![
                allow(Literal, "orders", "User:a", Write),
                deny(Prefixed, "or", "User:*", Write),
            ],
            "User:a",
            acl_settings(),
        );
        assert!(!v.allows_some(Write, TOPIC), "a prefix DENY dominates");
        let v = view(
            vec![
                allow(Prefixed, "x", "User:a", Write),
                deny(Literal, "*", "User:a", All),
            ],
            "User:a",
            acl_settings(),
        );
        assert!(!v.allows_some(Write, TOPIC), "a wildcard DENY denies all");
        let v = view(
            vec![allow(Literal, "t", "User:b", Write)],
            "User:a",
            acl_settings(),
        );
        assert!(!v.allows_some(Write, TOPIC));
    }

    /// Cost figures (debug build; run with `--ignored --nocapture`): building the index of
    /// 10 000 bindings, and a check against it.
    #[test]
    #[ignore]
    fn figures() {
        let mut bindings = Vec::new();
        for i in 0..9_000 {
            bindings.push(allow(
                Literal,
                &format!("topic-{i}"),
                &format!("User:u{}", i % 50),
                Read,
            ));
        }
        for i in 0..1_000 {
            bindings.push(allow(Prefixed, &format!("team-{i}-"), "User:u1", Write));
        }
        let started = std::time::Instant::now();
        let index = Arc::new(AclIndex::build(bindings));
        let built = started.elapsed();
        let v = AuthzView {
            index: Some(index),
            super_user: false,
            allow_if_no_acl: false,
            principal: "User:u1".into(),
            host: HOST.into(),
        };
        let n = 100_000;
        let started = std::time::Instant::now();
        let mut allowed = 0;
        for i in 0..n {
            allowed += usize::from(v.allows(Write, TOPIC, &format!("team-{}-orders", i % 2000)));
        }
        let per_check = started.elapsed() / n;
        assert_eq!(allowed, n as usize / 2);
        println!("index of 10000 bindings built in {built:?}; one check {per_check:?}");
    }

    #[test]
    fn the_index_is_rebuilt_when_the_cache_moves_and_only_then() {
        let cache = SecurityCache::new();
        let auth = Authorizer::new(acl_settings());
        let alice: Principal = "User:alice".parse().expect("principal");
        let first = auth.index(&cache);
        assert!(
            Arc::ptr_eq(&first, &auth.index(&cache)),
            "same generation, same index"
        );
        assert!(!auth.view(&cache, &alice, HOST).allows(Read, TOPIC, "t"));
        let b = allow(Literal, "t", "User:alice", Read);
        let entries: BTreeSet<_> = [b.entry.clone()].into();
        cache.apply(SecurityEvent::Put(SecurityRecord {
            kind: SecurityKind::Acl,
            name: super::super::store::record_name(&b.pattern),
            value: super::super::store::encode_entries(&entries),
            version: 1,
        }));
        assert!(!Arc::ptr_eq(&first, &auth.index(&cache)));
        assert!(auth.view(&cache, &alice, HOST).allows(Read, TOPIC, "t"));
        let none = Authorizer::new(AuthorizerSettings::default());
        assert!(none.view(&cache, &alice, HOST).allows(Write, TOPIC, "t"));
    }
}
