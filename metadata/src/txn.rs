//! Transactional ids as the metadata service keeps them: one versioned record per
//! `transactional.id` that its transaction coordinator writes by compare-and-swap, so a
//! broker taking over the id finishes what the last one prepared (issue 16). The contents
//! are the coordinator's (opaque here), as for groups ([`crate::group`]).

use bytes::Bytes;

/// A transactional id's coordinator record; `version` is the compare in compare-and-swap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnRecord {
    pub transactional_id: String,
    /// Starts at 1 on create; bumped on every write.
    pub version: u64,
    /// The coordinator's own encoding of producer id, epoch, state and partitions.
    pub data: Bytes,
}

/// Most characters of a transactional id stored (as for group ids: the key must stay
/// within etcd's request size).
pub const TRANSACTIONAL_ID_MAX_CHARS: usize = crate::group::GROUP_ID_MAX_CHARS;

pub(crate) fn validate_transactional_id(id: &str) -> crate::Result<()> {
    if id.is_empty() || id.chars().count() > TRANSACTIONAL_ID_MAX_CHARS {
        return Err(crate::Error::InvalidRequest(format!(
            "transactional id must have 1 to {TRANSACTIONAL_ID_MAX_CHARS} characters"
        )));
    }
    Ok(())
}
