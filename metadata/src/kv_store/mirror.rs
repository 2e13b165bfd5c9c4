//! Mirror records ([`crate::mirror`]): list, compare-and-swap, delete and watch over
//! `mirror/{kind}/{name}`; a record's version is its key's modification revision.

use super::watch::forward;
use super::KvStore;
use crate::error::Result;
use crate::keys;
use crate::kv::{EventKind, Get, KeyRange, Kv};
use crate::mirror::{validate_record, MirrorEvent, MirrorKind, MirrorRecord};
use crate::watch::Watch;

impl<K: Kv> KvStore<K> {
    pub(super) async fn list_mirror(&self, kind: MirrorKind) -> Result<Vec<MirrorRecord>> {
        let resp = self
            .kv
            .range(Get::prefix(keys::mirror::kind_prefix(&self.root, kind)))
            .await?;
        resp.kvs
            .iter()
            .map(|kv| {
                let (kind, name) = keys::mirror::deser_key(&self.root, &kv.key)?;
                Ok(MirrorRecord {
                    kind,
                    name,
                    value: kv.value.clone(),
                    version: kv.mod_revision,
                })
            })
            .collect()
    }

    pub(super) async fn put_mirror(
        &self,
        kind: MirrorKind,
        name: &str,
        value: Vec<u8>,
        expected_version: Option<i64>,
    ) -> Result<i64> {
        validate_record(name, &value)?;
        let key = keys::mirror::ser_key(&self.root, kind, name);
        let what = format!("mirror {} record '{name}'", kind.segment());
        self.put_versioned(key, value, expected_version, &what)
            .await
    }

    pub(super) async fn delete_mirror(
        &self,
        kind: MirrorKind,
        name: &str,
        expected_version: Option<i64>,
    ) -> Result<()> {
        let key = keys::mirror::ser_key(&self.root, kind, name);
        let what = format!("mirror {} record '{name}'", kind.segment());
        self.delete_versioned(key, expected_version, &what).await
    }

    pub(super) async fn subscribe_mirror(&self) -> Result<Watch<MirrorEvent>> {
        let prefix = keys::mirror::prefix(&self.root);
        let source = self.kv.watch(KeyRange::prefix(prefix), None).await?;
        let root = self.root.clone();
        Ok(forward(source, None, move |e| {
            let event = match keys::mirror::deser_key(&root, &e.kv.key) {
                Ok((kind, name)) => Some(match e.kind {
                    EventKind::Put => MirrorEvent::Put(MirrorRecord {
                        kind,
                        name,
                        value: e.kv.value,
                        version: e.kv.mod_revision,
                    }),
                    EventKind::Delete => MirrorEvent::Deleted { kind, name },
                }),
                Err(err) => {
                    tracing::error!(error = %err, "skipping an undecodable mirror record change");
                    None
                }
            };
            std::future::ready(event)
        }))
    }
}
