//! `wal_replicas/{broker_id:010}` → [`WalReplicaSet`], replaced by compare-and-swap on the
//! stored version (checked through the key's mod revision). Not bound to a lease: the set
//! must outlive its broker, since it is read to recover the dead broker's WAL tail.

use super::Root;
use crate::codec;
use crate::error::Result;
use crate::types::BrokerId;
use crate::wal_replicas::WalReplicaSet;

pub fn ser_key(root: &Root, broker_id: BrokerId) -> String {
    root.join(&format!("wal_replicas/{broker_id:010}"))
}

pub fn ser_value(set: &WalReplicaSet) -> Result<Vec<u8>> {
    codec::encode(set)
}

pub fn deser_value(key: &[u8], value: &[u8]) -> Result<WalReplicaSet> {
    codec::decode(&super::key_name(key), value)
}
