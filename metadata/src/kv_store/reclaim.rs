//! Which objects of the object store no catalog key names ([`KvStore::unreferenced`]), for
//! the sweep that deletes leaked objects (a crash between a PUT and its catalog commit, or
//! between a compaction swap and its deletes; a deleted topic's objects).
//!
//! An object is kept if anything might still name it: the in-memory catalogue (a sealed
//! object's key, or any per-partition entry) says so, or — for what memory does not know —
//! the store itself does (the object's own catalog key read directly), or its name is not
//! one this code writes. Only a no from both is an answer of "unreferenced".

use super::KvStore;
use crate::error::Result;
use crate::keys;
use crate::kv::{Get, Kv};
use crate::types::{TopicId, TopicPartition};
use std::collections::HashSet;

/// Where a catalog key for object `key` would be, from the object's name: a sealed object
/// `data/b{broker}/…` is filed under its broker; a segment
/// `segments/{topic}/{partition}/{base:020}-{epoch}-{unique}.oxs` under its partition and
/// base offset. `None` for a name of another shape.
enum Filed {
    Sealed(crate::types::BrokerId),
    Segment(TopicPartition, i64),
}

fn filed(key: &str) -> Option<Filed> {
    let parts: Vec<&str> = key.split('/').collect();
    match parts.as_slice() {
        ["data", broker, name] if name.ends_with(".oxb") => {
            let id = broker.strip_prefix('b')?.parse().ok()?;
            Some(Filed::Sealed(id))
        }
        ["segments", topic, partition, name] if name.ends_with(".oxs") => {
            let topic = uuid::Uuid::parse_str(topic).ok().map(TopicId)?;
            let partition = partition.parse().ok()?;
            let base = name.split('-').next()?.parse().ok()?;
            Some(Filed::Segment(TopicPartition::new(topic, partition), base))
        }
        _ => None,
    }
}

impl<K: Kv> KvStore<K> {
    /// The `candidates` (object keys) no catalog key names; see the module docs.
    pub(super) async fn unreferenced(&self, candidates: Vec<String>) -> Result<Vec<String>> {
        let index = self.catalog_index().await?;
        let unknown_to_memory: Vec<(String, Filed)> = {
            let state = index.lock();
            let keyed: HashSet<&str> = state.keyed_object_keys();
            candidates
                .into_iter()
                .filter_map(|key| {
                    let f = filed(&key)?;
                    if keyed.contains(key.as_str()) {
                        return None;
                    }
                    if let Filed::Sealed(broker) = f {
                        let record = keys::object_index::ser_key(&self.root, broker, &key);
                        if state.has_object_record(record.as_bytes()) {
                            return None;
                        }
                    }
                    Some((key, f))
                })
                .collect()
        };
        let mut out = Vec::new();
        for (key, f) in unknown_to_memory {
            let named = match f {
                Filed::Sealed(broker) => {
                    let record = keys::object_index::ser_key(&self.root, broker, &key);
                    !self
                        .kv
                        .range(Get::key(record).keys_only())
                        .await?
                        .kvs
                        .is_empty()
                }
                Filed::Segment(tp, base) => {
                    let k = keys::catalog::ser_key(&self.root, tp.topic_id, tp.partition, base);
                    let resp = self.kv.range(Get::key(k)).await?;
                    match resp.kvs.first() {
                        None => false,
                        // A value that does not decode is kept (and reported by readers).
                        Some(kv) => keys::catalog::deser_value(&kv.key, &kv.value)
                            .map_or(true, |e| e.object_key == key),
                    }
                }
            };
            if !named {
                out.push(key);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_map_to_where_their_catalog_key_is() {
        assert!(matches!(
            filed("data/b7/00000000000000000012-0123456789abcdef0123456789abcdef.oxb"),
            Some(Filed::Sealed(7))
        ));
        let topic = uuid::Uuid::from_u128(5);
        match filed(&format!(
            "segments/{topic}/3/00000000000000000100-2-0123456789abcdef0123456789abcdef.oxs"
        )) {
            Some(Filed::Segment(tp, base)) => {
                assert_eq!(tp, TopicPartition::new(TopicId(topic), 3));
                assert_eq!(base, 100);
            }
            _ => panic!("a segment's name"),
        }
        for other in [
            "data/b7/x.tmp",
            "data/bx/1.oxb",
            "segments/not-a-uuid/3/1-2-u.oxs",
            "wal/1",
            "data/b1/nested/1.oxb",
        ] {
            assert!(filed(other).is_none(), "{other}");
        }
    }
}
