//! Security records: what authentication, authorization and quotas need the whole cluster
//! to agree on (issue 15) — ACL bindings, SCRAM credentials, client quotas — kept as small
//! opaque documents, one per entity, under `security/{kind}/{name}`.
//!
//! The store knows nothing of their contents (the broker's `security` module encodes
//! them); it gives each record a version (the key's last modification revision) for
//! compare-and-swap, lists a kind, and watches every kind so each broker keeps a cached,
//! current copy. Why one generic keyspace rather than a method family per kind: the three
//! share one shape (few entities, read whole, changed rarely by admins, cached on every
//! broker), and one watch keeps their relative order.

use crate::error::{Error, Result};

/// Most bytes of one record's value: a record is an entity's whole state, read on every
/// broker (an ACL resource with a few thousand entries fits well within it).
pub const SECURITY_RECORD_BYTES_MAX: usize = 1 << 20;

/// The kinds of security record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SecurityKind {
    /// The ACL entries of one resource pattern.
    Acl,
    /// One user's SCRAM credentials (every mechanism).
    ScramCredential,
    /// One client-quota entity's quotas.
    ClientQuota,
}

impl SecurityKind {
    pub const ALL: [SecurityKind; 3] = [
        SecurityKind::Acl,
        SecurityKind::ScramCredential,
        SecurityKind::ClientQuota,
    ];

    /// The key segment of the kind.
    pub fn segment(self) -> &'static str {
        match self {
            SecurityKind::Acl => "acls",
            SecurityKind::ScramCredential => "scram",
            SecurityKind::ClientQuota => "quotas",
        }
    }

    pub fn from_segment(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.segment() == s)
    }
}

/// One stored record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecurityRecord {
    pub kind: SecurityKind,
    /// The entity's name (any string: escaped in the key).
    pub name: String,
    pub value: Vec<u8>,
    /// Changes whenever the record is written (the key's modification revision); what
    /// [`crate::MetadataStore::put_security_record`] compares against.
    pub version: i64,
}

/// A change of a security record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecurityEvent {
    /// Created or replaced: the whole new record.
    Put(SecurityRecord),
    /// Deleted.
    Deleted { kind: SecurityKind, name: String },
}

/// Refuses a record the store will not hold.
pub(crate) fn validate(name: &str, value: &[u8]) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidRequest(
            "a security record needs a name".into(),
        ));
    }
    if value.len() > SECURITY_RECORD_BYTES_MAX {
        return Err(Error::InvalidRequest(format!(
            "security record '{name}' is {} bytes, more than {SECURITY_RECORD_BYTES_MAX}",
            value.len()
        )));
    }
    Ok(())
}
