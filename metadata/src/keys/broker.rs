//! `brokers/{broker_id:010}` → [`BrokerRegistration`], put with the broker's lease so it
//! disappears when the broker does.

use super::{parse_num, segments_after, Root};
use crate::codec;
use crate::error::{Error, Result};
use crate::store::BrokerRegistration;
use crate::types::BrokerId;

pub fn prefix(root: &Root) -> String {
    root.join("brokers/")
}

pub fn ser_key(root: &Root, broker_id: BrokerId) -> String {
    root.join(&format!("brokers/{broker_id:010}"))
}

/// The broker id a key names (delete events carry only the key).
pub fn deser_key(root: &Root, key: &[u8]) -> Result<BrokerId> {
    let segs = segments_after(key, &prefix(root))?;
    match segs.as_slice() {
        [id] => parse_num(key, id),
        _ => Err(Error::CorruptValue {
            key: super::key_name(key),
            reason: "not a broker key".into(),
        }),
    }
}

pub fn ser_value(b: &BrokerRegistration) -> Result<Vec<u8>> {
    codec::encode(b)
}

pub fn deser_value(key: &[u8], value: &[u8]) -> Result<BrokerRegistration> {
    codec::decode(&super::key_name(key), value)
}
