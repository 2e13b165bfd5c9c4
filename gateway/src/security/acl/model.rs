//! The ACL vocabulary, with Kafka's names and wire codes (`org.apache.kafka.common.acl` and
//! `org.apache.kafka.common.resource`): resource types, pattern types, operations,
//! permission types, a binding (pattern + entry) and the filters DescribeAcls and
//! DeleteAcls match bindings with.
//!
//! Pure: parsing, printing and matching, no I/O.

use crate::security::Principal;
use std::fmt;

/// The name of the one CLUSTER resource (Kafka's `CLUSTER_NAME`).
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// A literal resource name matching every resource of its type.
pub const WILDCARD_RESOURCE: &str = "*";
/// An entry host matching every host.
pub const WILDCARD_HOST: &str = "*";
/// An entry principal matching every principal.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// Declares a Kafka enum: variants with their wire code and name, `code`, `from_code`
/// (unknown codes become `Unknown`, as Kafka's `fromCode`), `name` and `parse` (any case).
macro_rules! kafka_enum {
    ($(#[$m:meta])* $ty:ident { $($v:ident = $code:literal, $name:literal;)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $ty { $($v,)* }

        impl $ty {
            pub const ALL: &'static [$ty] = &[$($ty::$v,)*];

            /// The wire code.
            pub fn code(self) -> i8 {
                match self { $($ty::$v => $code,)* }
            }

            /// The value of a wire code; an unknown code is `Unknown`.
            pub fn from_code(code: i8) -> Self {
                match code { $($code => $ty::$v,)* _ => $ty::Unknown }
            }

            /// Kafka's name (`TOPIC`, `LITERAL`, `DESCRIBE_CONFIGS`, `ALLOW`).
            pub fn name(self) -> &'static str {
                match self { $($ty::$v => $name,)* }
            }

            /// By name, in any case, `-` or `_` between words (`describe-configs`,
            /// `TransactionalId`); `None` for an unknown name.
            pub fn parse(s: &str) -> Option<Self> {
                let norm: String = s
                    .chars()
                    .filter(|c| *c != '_' && *c != '-')
                    .map(|c| c.to_ascii_uppercase())
                    .collect();
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| v.name().replace('_', "") == norm)
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

kafka_enum!(
    /// Kafka's `ResourceType`.
    ResourceType {
        Unknown = 0, "UNKNOWN";
        Any = 1, "ANY";
        Topic = 2, "TOPIC";
        Group = 3, "GROUP";
        Cluster = 4, "CLUSTER";
        TransactionalId = 5, "TRANSACTIONAL_ID";
        DelegationToken = 6, "DELEGATION_TOKEN";
        User = 7, "USER";
    }
);

kafka_enum!(
    /// Kafka's `PatternType`: a binding is LITERAL or PREFIXED; a filter may also say ANY
    /// (any pattern type, the name compared exactly) or MATCH (every pattern that would
    /// apply to the named resource).
    PatternType {
        Unknown = 0, "UNKNOWN";
        Any = 1, "ANY";
        Match = 2, "MATCH";
        Literal = 3, "LITERAL";
        Prefixed = 4, "PREFIXED";
    }
);

kafka_enum!(
    /// Kafka's `AclOperation`.
    AclOperation {
        Unknown = 0, "UNKNOWN";
        Any = 1, "ANY";
        All = 2, "ALL";
        Read = 3, "READ";
        Write = 4, "WRITE";
        Create = 5, "CREATE";
        Delete = 6, "DELETE";
        Alter = 7, "ALTER";
        Describe = 8, "DESCRIBE";
        ClusterAction = 9, "CLUSTER_ACTION";
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        AlterConfigs = 11, "ALTER_CONFIGS";
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
        CreateTokens = 13, "CREATE_TOKENS";
        DescribeTokens = 14, "DESCRIBE_TOKENS";
        TwoPhaseCommit = 15, "TWO_PHASE_COMMIT";
    }
);

kafka_enum!(
    /// Kafka's `AclPermissionType`.
    AclPermissionType {
        Unknown = 0, "UNKNOWN";
        Any = 1, "ANY";
        Deny = 2, "DENY";
        Allow = 3, "ALLOW";
    }
);

impl ResourceType {
    /// The name in a stored record's key and in Kafka's `ResourcePattern` printing
    /// (`Topic`, `TransactionalId`).
    pub fn camel_name(self) -> &'static str {
        match self {
            ResourceType::Unknown => "Unknown",
            ResourceType::Any => "Any",
            ResourceType::Topic => "Topic",
            ResourceType::Group => "Group",
            ResourceType::Cluster => "Cluster",
            ResourceType::TransactionalId => "TransactionalId",
            ResourceType::DelegationToken => "DelegationToken",
            ResourceType::User => "User",
        }
    }
}

/// What a binding applies to: a resource type, a name and how the name matches.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourcePattern {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern_type: PatternType,
}

impl ResourcePattern {
    pub fn new(
        resource_type: ResourceType,
        name: impl Into<String>,
        pattern_type: PatternType,
    ) -> Self {
        ResourcePattern {
            resource_type,
            name: name.into(),
            pattern_type,
        }
    }

    /// Whether this (LITERAL or PREFIXED) pattern applies to the resource `name`:
    /// the same name, the literal wildcard `*`, or a prefix of it.
    pub fn applies_to(&self, resource_type: ResourceType, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern_type {
                PatternType::Literal => self.name == name || self.name == WILDCARD_RESOURCE,
                PatternType::Prefixed => name.starts_with(self.name.as_str()),
                _ => false,
            }
    }
}

impl fmt::Display for ResourcePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.resource_type.camel_name(),
            self.pattern_type.name(),
            self.name
        )
    }
}

/// Who may (or may not) do what from where: one ACL entry of a resource pattern.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct AccessControlEntry {
    /// `Type:name`, or `User:*` for everyone.
    pub principal: String,
    /// An IP address, or `*` for every host.
    pub host: String,
    #[serde(with = "op_name")]
    pub operation: AclOperation,
    #[serde(with = "perm_name")]
    pub permission_type: AclPermissionType,
}

/// One ACL: a resource pattern and an entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBinding {
    pub pattern: ResourcePattern,
    pub entry: AccessControlEntry,
}

/// Why a binding cannot be created (Kafka answers INVALID_REQUEST with the message).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidAcl(pub String);

impl AclBinding {
    /// Kafka's checks of a new ACL (`AclControlManager.validateNewAcl`, the CLUSTER name
    /// rule of the broker's CreateAcls).
    pub fn validate(&self) -> Result<(), InvalidAcl> {
        let p = &self.pattern;
        let e = &self.entry;
        match p.resource_type {
            ResourceType::Unknown | ResourceType::Any => {
                return Err(InvalidAcl(format!(
                    "Invalid resourceType {}",
                    p.resource_type
                )))
            }
            _ => {}
        }
        match p.pattern_type {
            PatternType::Literal | PatternType::Prefixed => {}
            other => return Err(InvalidAcl(format!("Invalid patternType {other}"))),
        }
        match e.operation {
            AclOperation::Unknown | AclOperation::Any => {
                return Err(InvalidAcl(format!("Invalid operation {}", e.operation)))
            }
            _ => {}
        }
        match e.permission_type {
            AclPermissionType::Allow | AclPermissionType::Deny => {}
            other => return Err(InvalidAcl(format!("Invalid permissionType {other}"))),
        }
        if p.name.is_empty() {
            return Err(InvalidAcl("Resource name should not be empty".into()));
        }
        if p.resource_type == ResourceType::Cluster && p.name != CLUSTER_NAME {
            return Err(InvalidAcl(format!(
                "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
            )));
        }
        if e.principal.parse::<Principal>().is_err() {
            return Err(InvalidAcl(format!(
                "Could not parse principal from `{}` (expected Type:name)",
                e.principal
            )));
        }
        if e.host.is_empty() {
            return Err(InvalidAcl("Invalid empty host".into()));
        }
        Ok(())
    }
}

/// Matches resource patterns: `None` fields and ANY match everything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourcePatternFilter {
    pub resource_type: ResourceType,
    pub name: Option<String>,
    pub pattern_type: PatternType,
}

impl ResourcePatternFilter {
    /// Kafka's `ResourcePatternFilter.matches`.
    pub fn matches(&self, p: &ResourcePattern) -> bool {
        if self.resource_type != ResourceType::Any && self.resource_type != p.resource_type {
            return false;
        }
        if !matches!(self.pattern_type, PatternType::Any | PatternType::Match)
            && self.pattern_type != p.pattern_type
        {
            return false;
        }
        let Some(name) = &self.name else {
            return true;
        };
        if self.pattern_type == PatternType::Match {
            return p.applies_to(p.resource_type, name);
        }
        *name == p.name
    }

    /// Kafka's `findIndefiniteField`: why this filter can match nothing well-defined.
    fn indefinite(&self) -> Option<String> {
        if self.resource_type == ResourceType::Unknown {
            return Some("Unknown resourceType".into());
        }
        if self.pattern_type == PatternType::Unknown {
            return Some("Unknown patternType".into());
        }
        None
    }
}

/// Matches entries: `None` fields and ANY match everything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryFilter {
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: AclOperation,
    pub permission_type: AclPermissionType,
}

impl EntryFilter {
    pub fn matches(&self, e: &AccessControlEntry) -> bool {
        self.principal.as_ref().is_none_or(|p| *p == e.principal)
            && self.host.as_ref().is_none_or(|h| *h == e.host)
            && (self.operation == AclOperation::Any || self.operation == e.operation)
            && (self.permission_type == AclPermissionType::Any
                || self.permission_type == e.permission_type)
    }

    fn indefinite(&self) -> Option<String> {
        if self.operation == AclOperation::Unknown {
            return Some("Unknown operation".into());
        }
        if self.permission_type == AclPermissionType::Unknown {
            return Some("Unknown permissionType".into());
        }
        None
    }
}

/// DescribeAcls' and DeleteAcls' filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclBindingFilter {
    pub pattern: ResourcePatternFilter,
    pub entry: EntryFilter,
}

impl AclBindingFilter {
    pub fn matches(&self, b: &AclBinding) -> bool {
        self.pattern.matches(&b.pattern) && self.entry.matches(&b.entry)
    }

    /// A filter with an unknown field is refused (INVALID_REQUEST), as in Kafka.
    pub fn validate(&self) -> Result<(), InvalidAcl> {
        match self
            .pattern
            .indefinite()
            .or_else(|| self.entry.indefinite())
        {
            Some(why) => Err(InvalidAcl(why)),
            None => Ok(()),
        }
    }

    /// Matches everything.
    pub fn any() -> Self {
        AclBindingFilter {
            pattern: ResourcePatternFilter {
                resource_type: ResourceType::Any,
                name: None,
                pattern_type: PatternType::Any,
            },
            entry: EntryFilter {
                principal: None,
                host: None,
                operation: AclOperation::Any,
                permission_type: AclPermissionType::Any,
            },
        }
    }
}

mod op_name {
    use super::AclOperation;
    pub fn serialize<S: serde::Serializer>(v: &AclOperation, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(v.name())
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<AclOperation, D::Error> {
        let s: String = serde::Deserialize::deserialize(d)?;
        AclOperation::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown operation {s}")))
    }
}

mod perm_name {
    use super::AclPermissionType;
    pub fn serialize<S: serde::Serializer>(v: &AclPermissionType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(v.name())
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<AclPermissionType, D::Error> {
        let s: String = serde::Deserialize::deserialize(d)?;
        AclPermissionType::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown permission type {s}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(principal: &str, op: AclOperation) -> AccessControlEntry {
        AccessControlEntry {
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission_type: AclPermissionType::Allow,
        }
    }

    #[test]
    fn codes_and_names_are_kafkas() {
        assert_eq!(ResourceType::Topic.code(), 2);
        assert_eq!(ResourceType::TransactionalId.code(), 5);
        assert_eq!(PatternType::Prefixed.code(), 4);
        assert_eq!(AclOperation::IdempotentWrite.code(), 12);
        assert_eq!(AclPermissionType::Allow.code(), 3);
        assert_eq!(AclOperation::from_code(99), AclOperation::Unknown);
        for op in AclOperation::ALL {
            assert_eq!(AclOperation::from_code(op.code()), *op);
            assert_eq!(AclOperation::parse(op.name()), Some(*op));
        }
        assert_eq!(
            AclOperation::parse("describe-configs"),
            Some(AclOperation::DescribeConfigs)
        );
        assert_eq!(
            ResourceType::parse("TransactionalId"),
            Some(ResourceType::TransactionalId)
        );
        assert_eq!(AclOperation::parse("frobnicate"), None);
    }

    #[test]
    fn filters_match_as_kafkas() {
        let lit = ResourcePattern::new(ResourceType::Topic, "orders", PatternType::Literal);
        let wild = ResourcePattern::new(ResourceType::Topic, "*", PatternType::Literal);
        let pre = ResourcePattern::new(ResourceType::Topic, "ord", PatternType::Prefixed);
        let filter = |name: Option<&str>, pt| ResourcePatternFilter {
            resource_type: ResourceType::Topic,
            name: name.map(str::to_string),
            pattern_type: pt,
        };
        let m = filter(Some("orders"), PatternType::Match);
        assert!(m.matches(&lit) && m.matches(&wild) && m.matches(&pre));
        let any = filter(Some("orders"), PatternType::Any);
        assert!(any.matches(&lit) && !any.matches(&wild) && !any.matches(&pre));
        let prefixed = filter(None, PatternType::Prefixed);
        assert!(prefixed.matches(&pre) && !prefixed.matches(&lit));
        let groups = ResourcePatternFilter {
            resource_type: ResourceType::Group,
            ..filter(None, PatternType::Any)
        };
        assert!(!groups.matches(&lit));
        let e = EntryFilter {
            principal: Some("User:alice".into()),
            host: None,
            operation: AclOperation::Any,
            permission_type: AclPermissionType::Allow,
        };
        assert!(e.matches(&entry("User:alice", AclOperation::Read)));
        assert!(!e.matches(&entry("User:bob", AclOperation::Read)));
    }

    #[test]
    fn new_bindings_are_validated_as_kafka_does() {
        let ok = AclBinding {
            pattern: ResourcePattern::new(ResourceType::Topic, "t", PatternType::Literal),
            entry: entry("User:alice", AclOperation::Read),
        };
        assert!(ok.validate().is_ok());
        let mut any_pattern = ok.clone();
        any_pattern.pattern.pattern_type = PatternType::Any;
        assert!(any_pattern.validate().is_err());
        let mut any_op = ok.clone();
        any_op.entry.operation = AclOperation::Any;
        assert!(any_op.validate().is_err());
        let mut bad_principal = ok.clone();
        bad_principal.entry.principal = "alice".into();
        assert!(bad_principal.validate().is_err());
        let mut cluster = ok.clone();
        cluster.pattern = ResourcePattern::new(ResourceType::Cluster, "c", PatternType::Literal);
        assert!(cluster.validate().is_err());
        let mut empty = ok;
        empty.pattern.name.clear();
        assert!(empty.validate().is_err());
        let mut f = AclBindingFilter::any();
        assert!(f.validate().is_ok());
        f.entry.operation = AclOperation::Unknown;
        assert!(f.validate().is_err());
    }
}
