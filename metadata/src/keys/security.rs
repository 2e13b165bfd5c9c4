//! `security/{kind}/{name}` → a security record's opaque value
//! ([`crate::security::SecurityRecord`]); its version is the key's modification revision.

use super::{escape, unescape, Root};
use crate::error::{Error, Result};
use crate::security::SecurityKind;

/// Prefix of every security record (one watch sees every kind, in order).
pub fn prefix(root: &Root) -> String {
    root.join("security/")
}

pub fn kind_prefix(root: &Root, kind: SecurityKind) -> String {
    root.join(&format!("security/{}/", kind.segment()))
}

pub fn ser_key(root: &Root, kind: SecurityKind, name: &str) -> String {
    root.join(&format!("security/{}/{}", kind.segment(), escape(name)))
}

/// The kind and name a key names.
pub fn deser_key(root: &Root, key: &[u8]) -> Result<(SecurityKind, String)> {
    let segs = super::segments_after(key, &prefix(root))?;
    match segs.as_slice() {
        [kind, name] => SecurityKind::from_segment(kind)
            .map(|k| (k, unescape(name)))
            .ok_or_else(|| Error::CorruptValue {
                key: super::key_name(key),
                reason: format!("'{kind}' is not a security record kind"),
            }),
        _ => Err(Error::CorruptValue {
            key: super::key_name(key),
            reason: "expected security/{kind}/{name}".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_names_cannot_escape_their_kind() {
        let root = Root::new("c");
        for name in [
            "User:alice",
            "Topic:LITERAL:a/b",
            "%2F",
            "user=x/client-id=y",
        ] {
            let key = ser_key(&root, SecurityKind::Acl, name);
            assert!(key.starts_with(&kind_prefix(&root, SecurityKind::Acl)));
            assert_eq!(
                deser_key(&root, key.as_bytes()).expect("key"),
                (SecurityKind::Acl, name.to_string())
            );
        }
        assert!(deser_key(&root, b"/oxbow/c/security/nope/x").is_err());
        assert!(deser_key(&root, b"/oxbow/c/security/acls").is_err());
    }
}
