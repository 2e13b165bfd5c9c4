//! The WAL's file format: entry framing, file names, and reading a file back — including a
//! recycled file's old bytes after its own entries ([`parse_wal_file`]).
//!
//! Entry framing (big-endian): `len u32 | crc32c(payload) u32 | payload`, payload =
//! `sequence u64 | topic id [16] | partition i32 | leader epoch i32 | record batch bytes`.
//! A file `{first_sequence:020}.wal` holds entries `first_sequence, first_sequence + 1, …`
//! in order (the writer numbers entries consecutively and starts a file at its next one), so
//! an entry with any other sequence is not this file's: old bytes of a recycled file
//! (`crate::wal_disk`), whose entries are all older.

use crate::{batch, crc};
use bytes::{Buf, Bytes};
use oxbow_metadata::{LeaderEpoch, TopicId, TopicPartition};

pub(crate) const ENTRY_HEADER_BYTES: usize = 8;
pub(crate) const PAYLOAD_FIXED_BYTES: usize = 8 + 16 + 4 + 4;
/// Largest entry a reader accepts: bounds the allocation a corrupt length can cause.
pub(crate) const ENTRY_MAX_BYTES: usize = 256 << 20;

/// One entry read back from the WAL.
#[derive(Clone, Debug)]
pub struct WalEntry {
    pub sequence: u64,
    pub topic_partition: TopicPartition,
    pub leader_epoch: LeaderEpoch,
    pub batch: Bytes,
}

pub(crate) fn file_name(first_sequence: u64) -> String {
    format!("{first_sequence:020}.wal")
}

/// Bytes of an entry before its batch: the framing and the payload's fixed fields.
pub(crate) const ENTRY_PREFIX_BYTES: usize = ENTRY_HEADER_BYTES + PAYLOAD_FIXED_BYTES;

/// An entry's bytes before its batch, for a batch of `batch_len` bytes: its length, then a
/// zero CRC and sequence ([`seal_prefix`] fills them in), the partition and the epoch.
pub(crate) fn entry_prefix(
    tp: TopicPartition,
    epoch: LeaderEpoch,
    batch_len: usize,
) -> [u8; ENTRY_PREFIX_BYTES] {
    let mut p = [0u8; ENTRY_PREFIX_BYTES];
    let len = (PAYLOAD_FIXED_BYTES + batch_len) as u32;
    p[0..4].copy_from_slice(&len.to_be_bytes());
    p[16..32].copy_from_slice(tp.topic_id.as_bytes());
    p[32..36].copy_from_slice(&tp.partition.to_be_bytes());
    p[36..40].copy_from_slice(&epoch.to_be_bytes());
    p
}

/// Sets an entry prefix's sequence and the CRC of the payload it begins (`batch` after it).
pub(crate) fn seal_prefix(
    prefix: &mut [u8; ENTRY_PREFIX_BYTES],
    sequence: u64,
    batch: &[u8],
    batch_crc: BatchCrc,
) {
    prefix[8..16].copy_from_slice(&sequence.to_be_bytes());
    let fixed = crc32c::crc32c(&prefix[ENTRY_HEADER_BYTES..]);
    let crc = match batch_crc {
        BatchCrc::Verified if batch.len() >= batch::BATCH_HEADER_BYTES => {
            // The batch's own CRC-32C covers its bytes from the attributes on, and was
            // checked against them: only the header before it is new to the checksum.
            let head = crc32c::crc32c_append(fixed, &batch[..batch::CRC_START]);
            let derived = crc::combine(
                head,
                batch::stored_crc(batch),
                (batch.len() - batch::CRC_START) as u64,
            );
            debug_assert_eq!(
                derived,
                crc32c::crc32c_append(fixed, batch),
                "a batch handed to the WAL as verified fails its own CRC"
            );
            derived
        }
        _ => crc32c::crc32c_append(fixed, batch),
    };
    prefix[4..8].copy_from_slice(&crc.to_be_bytes());
}

/// What the WAL may assume about a batch's own CRC-32C.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchCrc {
    /// It matches the batch's bytes (checked or computed by the caller): the entry's CRC
    /// is derived from it ([`crc::combine`]) instead of read off every byte again. A batch
    /// wrongly called verified gets an entry that reads back as corrupt, so only callers
    /// that checked may say so: a producer's batch (`validate.rs`), a marker the broker
    /// built, a mirrored batch (`mirror.rs`).
    Verified,
    /// Not known (a recovered tail's batches): the entry's CRC is computed from every byte.
    Unchecked,
}

/// A whole entry (tests write WAL files with it).
#[cfg(test)]
pub(crate) fn encode_payload_for_test(
    sequence: u64,
    tp: TopicPartition,
    epoch: LeaderEpoch,
    batch: &[u8],
) -> Vec<u8> {
    let mut prefix = entry_prefix(tp, epoch, batch.len());
    seal_prefix(&mut prefix, sequence, batch, BatchCrc::Unchecked);
    let mut p = Vec::with_capacity(ENTRY_PREFIX_BYTES + batch.len());
    p.extend_from_slice(&prefix);
    p.extend_from_slice(batch);
    p
}

/// Parses the entries of one file. Returns the entries and the length of the valid prefix;
/// anything after it is a torn or corrupt tail.
pub(crate) fn parse_file(data: &[u8]) -> (Vec<WalEntry>, usize) {
    let mut entries = Vec::new();
    let mut pos = 0usize;
    while data.len() - pos >= ENTRY_HEADER_BYTES {
        let mut h = &data[pos..pos + ENTRY_HEADER_BYTES];
        let len = h.get_u32() as usize;
        let crc = h.get_u32();
        if !(PAYLOAD_FIXED_BYTES..=ENTRY_MAX_BYTES).contains(&len) {
            break;
        }
        let start = pos + ENTRY_HEADER_BYTES;
        let Some(payload) = data.get(start..start + len) else {
            break;
        };
        if crc32c::crc32c(payload) != crc {
            break;
        }
        let mut p = payload;
        let sequence = p.get_u64();
        let mut id = [0u8; 16];
        p.copy_to_slice(&mut id);
        let partition = p.get_i32();
        let leader_epoch = p.get_i32();
        entries.push(WalEntry {
            sequence,
            topic_partition: TopicPartition::new(TopicId(uuid::Uuid::from_bytes(id)), partition),
            leader_epoch,
            batch: Bytes::copy_from_slice(p),
        });
        pos = start + len;
    }
    (entries, pos)
}

/// What follows the entries [`parse_wal_file`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tail {
    /// Nothing: the file ends with its last entry.
    None,
    /// Bytes that are not this file's entries: zeros or a recycled file's old entries (each
    /// older than this file), possibly after a torn last write.
    Stale,
    /// An entry of this file is damaged with a later entry of this file intact after it:
    /// entries were lost in the middle, not at the end.
    Corrupt,
}

/// The entries of WAL file `{first:020}.wal` (see the module docs), the length of their
/// prefix, and what follows it.
pub(crate) fn parse_wal_file(data: &[u8], first: u64) -> (Vec<WalEntry>, usize, Tail) {
    let (mut entries, mut valid) = parse_file(data);
    // Stop at the first entry that is not this file's next one.
    if let Some(i) = entries
        .iter()
        .zip(first..)
        .position(|(e, expected)| e.sequence != expected)
    {
        valid = entry_offsets(data).get(i).copied().unwrap_or(valid);
        entries.truncate(i);
    }
    let tail = if valid == data.len() {
        Tail::None
    } else if later_entry_intact(data, valid, first + entries.len() as u64) {
        Tail::Corrupt
    } else {
        Tail::Stale
    };
    (entries, valid, tail)
}

/// Where each whole entry of `data` begins, as [`parse_file`] walks them.
fn entry_offsets(data: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while let Some(len) = frame_len(data, pos) {
        out.push(pos);
        pos += ENTRY_HEADER_BYTES + len;
    }
    out
}

/// The payload length of a plausible frame at `pos` whose bytes are all there.
fn frame_len(data: &[u8], pos: usize) -> Option<usize> {
    let mut h = data.get(pos..pos + ENTRY_HEADER_BYTES)?;
    let len = h.get_u32() as usize;
    if !(PAYLOAD_FIXED_BYTES..=ENTRY_MAX_BYTES).contains(&len) {
        return None;
    }
    data.get(pos + ENTRY_HEADER_BYTES..pos + ENTRY_HEADER_BYTES + len)?;
    Some(len)
}

/// Whether, past a damaged entry at `at` whose length field still reads, the entry after it
/// is intact and has sequence `expected + 1` — the damage is in the middle of this file's
/// entries. Old bytes never have that sequence: every old entry is older than the file.
fn later_entry_intact(data: &[u8], at: usize, expected: u64) -> bool {
    let Some(len) = frame_len(data, at) else {
        return false;
    };
    let next = at + ENTRY_HEADER_BYTES + len;
    let Some(rest) = data.get(next..) else {
        return false;
    };
    let (entries, _) = parse_file(rest);
    entries.first().is_some_and(|e| e.sequence == expected + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(sequence: u64) -> Vec<u8> {
        encode_payload_for_test(
            sequence,
            TopicPartition::new(TopicId(uuid::Uuid::nil()), 0),
            1,
            b"batch",
        )
    }

    fn file(sequences: &[u64]) -> Vec<u8> {
        sequences.iter().flat_map(|s| entry(*s)).collect()
    }

    fn sequences(entries: &[WalEntry]) -> Vec<u64> {
        entries.iter().map(|e| e.sequence).collect()
    }

    #[test]
    fn a_file_of_its_own_entries_has_no_tail() {
        let data = file(&[10, 11, 12]);
        let (e, valid, tail) = parse_wal_file(&data, 10);
        assert_eq!(sequences(&e), vec![10, 11, 12]);
        assert_eq!((valid, tail), (data.len(), Tail::None));
    }

    #[test]
    fn a_recycled_files_old_entries_and_zeros_are_a_stale_tail() {
        let mut data = file(&[20, 21]);
        let own = data.len();
        // The recycled file held 3..=7; entries 20 and 21 overwrote its first two.
        data.extend(file(&[5, 6, 7]));
        let (e, valid, tail) = parse_wal_file(&data, 20);
        assert_eq!(sequences(&e), vec![20, 21]);
        assert_eq!((valid, tail), (own, Tail::Stale));
        // A zero-filled file.
        let mut zeroed = file(&[20]);
        let own = zeroed.len();
        zeroed.extend(vec![0u8; 4096]);
        let (e, valid, tail) = parse_wal_file(&zeroed, 20);
        assert_eq!((sequences(&e), valid, tail), (vec![20], own, Tail::Stale));
        // A torn last write over old entries.
        let mut torn = file(&[20]);
        let own = torn.len();
        let next = entry(21);
        torn.extend_from_slice(&next[..next.len() / 2]);
        torn.extend(file(&[9, 10]));
        let (e, valid, tail) = parse_wal_file(&torn, 20);
        assert_eq!((sequences(&e), valid, tail), (vec![20], own, Tail::Stale));
    }

    #[test]
    fn an_old_entry_with_a_valid_crc_is_not_taken_for_the_files_own() {
        // Old bytes that happen to be whole entries right where the next one would start.
        let mut data = file(&[30]);
        data.extend(file(&[29, 30, 31]));
        let (e, _, tail) = parse_wal_file(&data, 30);
        assert_eq!(sequences(&e), vec![30]);
        assert_eq!(tail, Tail::Stale);
    }

    #[test]
    fn a_damaged_entry_before_intact_ones_is_corruption() {
        let mut data = file(&[40, 41, 42]);
        let second = entry(40).len();
        // Flip a byte in the middle of 41's payload: its CRC fails, 42 is intact after it.
        data[second + 20] ^= 0xff;
        let (e, valid, tail) = parse_wal_file(&data, 40);
        assert_eq!(
            (sequences(&e), valid, tail),
            (vec![40], second, Tail::Corrupt)
        );
    }
}
