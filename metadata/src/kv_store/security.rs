//! Security records ([`crate::security`]): list, compare-and-swap, delete and watch over
//! `security/{kind}/{name}`; a record's version is its key's modification revision.

use super::watch::forward;
use super::KvStore;
use crate::error::Result;
use crate::keys;
use crate::kv::{EventKind, Get, KeyRange, Kv};
use crate::security::{validate, SecurityEvent, SecurityKind, SecurityRecord};
use crate::watch::Watch;

impl<K: Kv> KvStore<K> {
    pub(super) async fn list_security(&self, kind: SecurityKind) -> Result<Vec<SecurityRecord>> {
        let resp = self
            .kv
            .range(Get::prefix(keys::security::kind_prefix(&self.root, kind)))
            .await?;
        resp.kvs
            .iter()
            .map(|kv| {
                let (kind, name) = keys::security::deser_key(&self.root, &kv.key)?;
                Ok(SecurityRecord {
                    kind,
                    name,
                    value: kv.value.clone(),
                    version: kv.mod_revision,
                })
            })
            .collect()
    }

    pub(super) async fn put_security(
        &self,
        kind: SecurityKind,
        name: &str,
        value: Vec<u8>,
        expected_version: Option<i64>,
    ) -> Result<i64> {
        validate(name, &value)?;
        let key = keys::security::ser_key(&self.root, kind, name);
        let what = format!("{} record '{name}'", kind.segment());
        self.put_versioned(key, value, expected_version, &what)
            .await
    }

    pub(super) async fn delete_security(
        &self,
        kind: SecurityKind,
        name: &str,
        expected_version: Option<i64>,
    ) -> Result<()> {
        let key = keys::security::ser_key(&self.root, kind, name);
        let what = format!("{} record '{name}'", kind.segment());
        self.delete_versioned(key, expected_version, &what).await
    }

    pub(super) async fn subscribe_security(&self) -> Result<Watch<SecurityEvent>> {
        let prefix = keys::security::prefix(&self.root);
        let source = self.kv.watch(KeyRange::prefix(prefix), None).await?;
        let root = self.root.clone();
        Ok(forward(source, None, move |e| {
            let event = match keys::security::deser_key(&root, &e.kv.key) {
                Ok((kind, name)) => Some(match e.kind {
                    EventKind::Put => SecurityEvent::Put(SecurityRecord {
                        kind,
                        name,
                        value: e.kv.value,
                        version: e.kv.mod_revision,
                    }),
                    EventKind::Delete => SecurityEvent::Deleted { kind, name },
                }),
                Err(err) => {
                    tracing::error!(error = %err, "skipping an undecodable security record change");
                    None
                }
            };
            std::future::ready(event)
        }))
    }
}
