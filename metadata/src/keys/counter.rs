//! `counters/{name}` → `{"next"}`: monotonic counters advanced by compare-and-swap on the
//! key's mod revision (`producer_id`: the next producer id to hand out).

use super::Root;
use crate::codec;
use crate::error::Result;
use serde::{Deserialize, Serialize};

pub const PRODUCER_ID: &str = "producer_id";

#[derive(Serialize, Deserialize)]
struct Counter {
    next: u64,
}

pub fn ser_key(root: &Root, name: &str) -> String {
    root.join(&format!("counters/{name}"))
}

pub fn ser_value(next: u64) -> Result<Vec<u8>> {
    codec::encode(&Counter { next })
}

pub fn deser_value(key: &[u8], value: &[u8]) -> Result<u64> {
    codec::decode::<Counter>(&super::key_name(key), value).map(|c| c.next)
}
