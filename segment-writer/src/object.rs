//! The sealed object format: one object holds many partitions' record batches.
//!
//! Layout (format version 1, big-endian):
//! ```text
//! header  : magic "OXBOWOBJ" [8] | format version u16 | reserved u16 | broker id i32
//! chunks  : per partition, its record batches back to back, exactly as stored
//! index   : one 64-byte row per chunk: topic id [16] | partition i32 | base offset i64 |
//!           last offset i64 | max timestamp i64 | byte start u64 | byte length u64 |
//!           crc32c(chunk) u32
//! footer  : index start u64 | index length u32 | crc32c(index) u32 | magic "OXBOWEND" [8]
//! ```
//! Readers normally need only the catalog (object key, byte range, CRC of the range) and
//! verify the CRC on every read, so a flipped bit is reported and never served as data. The
//! index and footer make an object self-describing, for compaction and for re-cataloguing
//! an object whose catalog commit never happened.
//!
//! Naming: `data/b{broker id}/{seal sequence:020}-{random}.oxb`, written create-only so a
//! zombie writer can never overwrite an object someone else catalogued.

use crate::error::{Error, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use oxbow_metadata::{CatalogEntry, LeaderEpoch, Offset, TopicId, TopicPartition};

const MAGIC_HEAD: &[u8; 8] = b"OXBOWOBJ";
const MAGIC_FOOT: &[u8; 8] = b"OXBOWEND";
pub const FORMAT_VERSION: u16 = 1;
const HEADER_BYTES: usize = 16;
const INDEX_ROW_BYTES: usize = 64;
const FOOTER_BYTES: usize = 24;

/// One partition's batches to put into an object.
pub struct Chunk {
    pub topic_partition: TopicPartition,
    pub leader_epoch: LeaderEpoch,
    pub base_offset: Offset,
    pub last_offset: Offset,
    pub max_timestamp_ms: i64,
    pub batches: Vec<Bytes>,
}

/// An object ready to upload and the catalog entries that describe it.
pub struct SealedObject {
    pub key: String,
    pub body: Bytes,
    pub entries: Vec<CatalogEntry>,
}

/// Builds the object body and its catalog entries.
pub fn build(key: String, broker_id: i32, chunks: &[Chunk]) -> SealedObject {
    let data_bytes: usize = chunks
        .iter()
        .flat_map(|c| c.batches.iter())
        .map(|b| b.len())
        .sum();
    let mut body = BytesMut::with_capacity(
        HEADER_BYTES + data_bytes + chunks.len() * INDEX_ROW_BYTES + FOOTER_BYTES,
    );
    body.put_slice(MAGIC_HEAD);
    body.put_u16(FORMAT_VERSION);
    body.put_u16(0);
    body.put_i32(broker_id);
    let mut entries = Vec::with_capacity(chunks.len());
    for c in chunks {
        let start = body.len();
        for b in &c.batches {
            body.put_slice(b);
        }
        let end = body.len();
        entries.push(CatalogEntry {
            topic_id: c.topic_partition.topic_id,
            partition: c.topic_partition.partition,
            base_offset: c.base_offset,
            last_offset: c.last_offset,
            max_timestamp_ms: c.max_timestamp_ms,
            object_key: key.clone(),
            byte_start: start as u64,
            byte_len: (end - start) as u64,
            crc32c: crc32c::crc32c(&body[start..end]),
            leader_epoch: c.leader_epoch,
        });
    }
    let index_start = body.len();
    for e in &entries {
        body.put_slice(e.topic_id.as_bytes());
        body.put_i32(e.partition);
        body.put_i64(e.base_offset);
        body.put_i64(e.last_offset);
        body.put_i64(e.max_timestamp_ms);
        body.put_u64(e.byte_start);
        body.put_u64(e.byte_len);
        body.put_u32(e.crc32c);
    }
    let index_crc = crc32c::crc32c(&body[index_start..]);
    let index_len = (body.len() - index_start) as u32;
    body.put_u64(index_start as u64);
    body.put_u32(index_len);
    body.put_u32(index_crc);
    body.put_slice(MAGIC_FOOT);
    SealedObject {
        key,
        body: body.freeze(),
        entries,
    }
}

/// Checks a byte range read for a catalog entry against the entry's CRC.
pub fn verify_range(entry: &CatalogEntry, bytes: &[u8]) -> Result<()> {
    if bytes.len() as u64 != entry.byte_len || crc32c::crc32c(bytes) != entry.crc32c {
        return Err(Error::ChecksumMismatch {
            key: entry.object_key.clone(),
            start: entry.byte_start,
            end: entry.byte_start + entry.byte_len,
        });
    }
    Ok(())
}

/// Reads a whole object's index back (used by compaction and repair tools, and tests).
pub fn read_index(key: &str, body: &[u8]) -> Result<Vec<CatalogEntry>> {
    let corrupt = |what: &str| Error::ChecksumMismatch {
        key: format!("{key} ({what})"),
        start: 0,
        end: body.len() as u64,
    };
    if body.len() < HEADER_BYTES + FOOTER_BYTES || &body[..8] != MAGIC_HEAD {
        return Err(corrupt("bad header"));
    }
    let version = u16::from_be_bytes([body[8], body[9]]);
    if version != FORMAT_VERSION {
        return Err(corrupt(&format!("unknown format version {version}")));
    }
    let mut foot = &body[body.len() - FOOTER_BYTES..];
    let index_start = foot.get_u64() as usize;
    let index_len = foot.get_u32() as usize;
    let index_crc = foot.get_u32();
    if foot != MAGIC_FOOT {
        return Err(corrupt("bad footer"));
    }
    let index = body
        .get(index_start..index_start.saturating_add(index_len))
        .filter(|_| index_start + index_len == body.len() - FOOTER_BYTES)
        .ok_or_else(|| corrupt("index out of bounds"))?;
    if crc32c::crc32c(index) != index_crc || index.len() % INDEX_ROW_BYTES != 0 {
        return Err(corrupt("index checksum"));
    }
    let mut out = Vec::new();
    let mut rows = index;
    while rows.has_remaining() {
        let mut id = [0u8; 16];
        rows.copy_to_slice(&mut id);
        out.push(CatalogEntry {
            topic_id: TopicId(uuid::Uuid::from_bytes(id)),
            partition: rows.get_i32(),
            base_offset: rows.get_i64(),
            last_offset: rows.get_i64(),
            max_timestamp_ms: rows.get_i64(),
            byte_start: rows.get_u64(),
            byte_len: rows.get_u64(),
            crc32c: rows.get_u32(),
            object_key: key.to_string(),
            leader_epoch: -1,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_and_read_back() {
        let tp = |p| TopicPartition::new(TopicId(uuid::Uuid::from_u128(1)), p);
        let chunks = vec![
            Chunk {
                topic_partition: tp(0),
                leader_epoch: 3,
                base_offset: 0,
                last_offset: 4,
                max_timestamp_ms: 99,
                batches: vec![Bytes::from_static(b"aaaa"), Bytes::from_static(b"bb")],
            },
            Chunk {
                topic_partition: tp(1),
                leader_epoch: 3,
                base_offset: 10,
                last_offset: 10,
                max_timestamp_ms: 5,
                batches: vec![Bytes::from_static(b"c")],
            },
        ];
        let obj = build("k".into(), 1, &chunks);
        assert_eq!(obj.entries.len(), 2);
        let e0 = &obj.entries[0];
        let range = &obj.body[e0.byte_start as usize..(e0.byte_start + e0.byte_len) as usize];
        assert_eq!(range, b"aaaabb");
        verify_range(e0, range).expect("crc ok");
        let mut flipped = range.to_vec();
        flipped[0] ^= 1;
        assert!(verify_range(e0, &flipped).is_err());
        let index = read_index("k", &obj.body).expect("index");
        assert_eq!(index.len(), 2);
        assert_eq!(index[1].base_offset, 10);
        assert_eq!(index[1].crc32c, obj.entries[1].crc32c);
        let mut bad = obj.body.to_vec();
        let n = bad.len();
        bad[n - FOOTER_BYTES - 1] ^= 1;
        assert!(read_index("k", &bad).is_err());
    }
}
