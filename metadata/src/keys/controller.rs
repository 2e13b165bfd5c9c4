//! `controller` → `{"broker_id"}`, put with the controller's lease only if absent (create
//! revision 0), so exactly one broker holds it and the post is vacated when its lease ends.

use super::Root;
use crate::codec;
use crate::error::Result;
use crate::types::BrokerId;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Controller {
    broker_id: BrokerId,
}

pub fn ser_key(root: &Root) -> String {
    root.join("controller")
}

pub fn ser_value(broker_id: BrokerId) -> Result<Vec<u8>> {
    codec::encode(&Controller { broker_id })
}

pub fn deser_value(key: &[u8], value: &[u8]) -> Result<BrokerId> {
    codec::decode::<Controller>(&super::key_name(key), value).map(|c| c.broker_id)
}
