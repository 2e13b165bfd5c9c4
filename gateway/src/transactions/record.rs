//! How a transactional id's [`Transaction`] is stored in its metadata record
//! (`txns/{id}`, opaque to the metadata service): versioned JSON, so a field added later is
//! read by older brokers as absent rather than as corruption. Decoding trusts nothing: a
//! record that does not parse, or names an unknown state, is an error the coordinator
//! reports (`COORDINATOR_NOT_AVAILABLE`) rather than a panic or a guess.

use super::state::{Transaction, TxnState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The record format written by this broker.
const FORMAT: u32 = 1;

/// Most partitions and groups a stored transaction may name (bounds what one record read
/// from the metadata service can make this broker hold and write markers to).
pub const MEMBERS_MAX: usize = 100_000;

#[derive(Serialize, Deserialize)]
struct Stored {
    format: u32,
    producer_id: i64,
    producer_epoch: i16,
    timeout_ms: i32,
    state: String,
    partitions: Vec<(String, i32)>,
    groups: Vec<String>,
    start_ms: i64,
    updated_ms: i64,
}

fn state_of(name: &str) -> Option<TxnState> {
    TxnState::ALL.into_iter().find(|s| s.name() == name)
}

pub fn encode(t: &Transaction) -> Vec<u8> {
    let stored = Stored {
        format: FORMAT,
        producer_id: t.producer_id,
        producer_epoch: t.producer_epoch,
        timeout_ms: t.timeout_ms,
        state: t.state.name().to_string(),
        partitions: t.partitions.iter().cloned().collect(),
        groups: t.groups.iter().cloned().collect(),
        start_ms: t.start_ms,
        updated_ms: t.updated_ms,
    };
    serde_json::to_vec(&stored).expect("a struct of plain fields always serializes")
}

pub fn decode(data: &[u8]) -> Result<Transaction, String> {
    let s: Stored = serde_json::from_slice(data).map_err(|e| format!("unreadable: {e}"))?;
    if s.format != FORMAT {
        return Err(format!("format {} is not {FORMAT}", s.format));
    }
    let state = state_of(&s.state).ok_or_else(|| format!("unknown state '{}'", s.state))?;
    if s.partitions.len() > MEMBERS_MAX || s.groups.len() > MEMBERS_MAX {
        return Err("names too many partitions or groups".to_string());
    }
    if s.producer_id < 0 || s.producer_epoch < 0 {
        return Err("negative producer id or epoch".to_string());
    }
    Ok(Transaction {
        producer_id: s.producer_id,
        producer_epoch: s.producer_epoch,
        timeout_ms: s.timeout_ms,
        state,
        partitions: s.partitions.into_iter().collect::<BTreeSet<_>>(),
        groups: s.groups.into_iter().collect(),
        start_ms: s.start_ms,
        updated_ms: s.updated_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_it_cannot_trust() {
        let t = Transaction {
            producer_id: 7,
            producer_epoch: 3,
            timeout_ms: 60_000,
            state: TxnState::PrepareCommit,
            partitions: [("a".to_string(), 0), ("b".to_string(), 2)].into(),
            groups: ["g".to_string()].into(),
            start_ms: 10,
            updated_ms: 20,
        };
        assert_eq!(decode(&encode(&t)), Ok(t.clone()));
        assert!(decode(b"not json").is_err());
        let bad = String::from_utf8(encode(&t))
            .expect("utf-8")
            .replace("PrepareCommit", "Sideways");
        assert!(decode(bad.as_bytes()).is_err());
        let future = String::from_utf8(encode(&t))
            .expect("utf-8")
            .replace("\"format\":1", "\"format\":9");
        assert!(decode(future.as_bytes()).is_err());
    }
}
