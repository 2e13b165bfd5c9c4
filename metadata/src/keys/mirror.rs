//! `mirror/{kind}/{name}` → a link's or mirror topic's JSON ([`crate::mirror`]); its
//! version is the key's modification revision.

use super::{escape, unescape, Root};
use crate::error::{Error, Result};
use crate::mirror::MirrorKind;

/// Prefix of every mirror record (one watch sees every kind, in order).
pub fn prefix(root: &Root) -> String {
    root.join("mirror/")
}

pub fn kind_prefix(root: &Root, kind: MirrorKind) -> String {
    root.join(&format!("mirror/{}/", kind.segment()))
}

pub fn ser_key(root: &Root, kind: MirrorKind, name: &str) -> String {
    root.join(&format!("mirror/{}/{}", kind.segment(), escape(name)))
}

/// The kind and name a key names.
pub fn deser_key(root: &Root, key: &[u8]) -> Result<(MirrorKind, String)> {
    let segs = super::segments_after(key, &prefix(root))?;
    match segs.as_slice() {
        [kind, name] => MirrorKind::from_segment(kind)
            .map(|k| (k, unescape(name)))
            .ok_or_else(|| Error::CorruptValue {
                key: super::key_name(key),
                reason: format!("'{kind}' is not a mirror record kind"),
            }),
        _ => Err(Error::CorruptValue {
            key: super::key_name(key),
            reason: "expected mirror/{kind}/{name}".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        let root = Root::new("c");
        for kind in MirrorKind::ALL {
            let key = ser_key(&root, kind, "a.b-c");
            assert!(key.starts_with(&kind_prefix(&root, kind)));
            assert_eq!(
                deser_key(&root, key.as_bytes()).expect("key"),
                (kind, "a.b-c".to_string())
            );
        }
        assert!(deser_key(&root, b"/oxbow/c/mirror/nope/x").is_err());
    }
}
