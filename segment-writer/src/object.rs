//! The sealed object format: one object holds many partitions' record batches.
//!
//! Layout (format version 2, big-endian):
//! ```text
//! header    : magic "OXBOWOBJ" [8] | format version u16 | reserved u16 | broker id i32
//! chunks    : per partition, its record batches back to back, exactly as stored
//! index     : one 64-byte row per chunk: topic id [16] | partition i32 | base offset i64 |
//!             last offset i64 | max timestamp i64 | byte start u64 | byte length u64 |
//!             crc32c(chunk) u32
//! producers : one 32-byte row per idempotent batch kept, the chunk's own and those carried
//!             for its partition's idle producers (crate::producer_summary)
//! footer    : index start u64 | index length u32 | crc32c(index) u32 |
//!             producers length u32 | crc32c(producers) u32 | magic "OXBOWEN2" [8]
//! ```
//! Format version 1 (still read) has no producers section and a 24-byte footer ending in
//! "OXBOWEND": index start | index length | crc32c(index) | magic.
//!
//! Readers normally need only the catalog (object key, byte range, CRC of the range) and
//! verify the CRC on every read, so a flipped bit is reported and never served as data. The
//! index and footer make an object self-describing, for compaction and for re-cataloguing
//! an object whose catalog commit never happened. The producers section lets a broker
//! taking partitions over rebuild their idempotent-producer state with one small read per
//! object instead of reading back every partition's batches ([`fetch_producers`]).
//!
//! Naming: `data/b{broker id}/{seal sequence:020}-{random}.oxb`, written create-only so a
//! zombie writer can never overwrite an object someone else catalogued.

use crate::error::{Error, Result};
use crate::producer_summary::{self, ObjectProducers, ProducerBatch};
use crate::{batch, crc};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use oxbow_metadata::{CatalogEntry, EntryLayout, LeaderEpoch, Offset, TopicId, TopicPartition};

const MAGIC_HEAD: &[u8; 8] = b"OXBOWOBJ";
const MAGIC_FOOT_V1: &[u8; 8] = b"OXBOWEND";
const MAGIC_FOOT: &[u8; 8] = b"OXBOWEN2";
pub const FORMAT_VERSION: u16 = 2;
const HEADER_BYTES: usize = 16;
const INDEX_ROW_BYTES: usize = 64;
const FOOTER_BYTES_V1: usize = 24;
const FOOTER_BYTES: usize = 32;

/// One partition's batches to put into an object.
pub struct Chunk {
    pub topic_partition: TopicPartition,
    pub leader_epoch: LeaderEpoch,
    pub base_offset: Offset,
    pub last_offset: Offset,
    pub max_timestamp_ms: i64,
    pub batches: Vec<Bytes>,
    /// Producers of the partition with no batch here: their remembered batches before
    /// `base_offset`, carried in the producers section (all of them, or
    /// [`producer_summary::CARRIED_ROWS_MAX`] and a checkpoint row); first, the partition's
    /// open transactions begun by `last_offset` ([`ProducerBatch::open_txn`]).
    pub carried_producers: Vec<ProducerBatch>,
    /// `carried_producers` names every producer the leader remembers (a checkpoint).
    pub producers_complete: bool,
    /// The chunk's aborted-transaction index for its catalog entry (`None`: not known).
    pub txn: Option<oxbow_metadata::TxnIndex>,
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
    let producers: Vec<producer_summary::Row> = chunks
        .iter()
        .enumerate()
        .flat_map(|(i, c)| {
            let own = producer_summary::recent_of(&c.batches)
                .into_iter()
                .map(move |b| (i as u32, b, false));
            // Open transactions may have begun inside the chunk; batches lie before it.
            let carried = c
                .carried_producers
                .iter()
                .filter(|b| {
                    if b.is_open_txn() {
                        b.base_offset <= c.last_offset
                    } else {
                        b.base_offset < c.base_offset
                    }
                })
                .map(move |b| (i as u32, *b, true));
            own.chain(carried)
        })
        .collect();
    let mut body = BytesMut::with_capacity(
        HEADER_BYTES
            + data_bytes
            + chunks.len() * INDEX_ROW_BYTES
            + producers.len() * producer_summary::ROW_BYTES
            + FOOTER_BYTES,
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
            crc32c: chunk_crc(&c.batches, &body[start..end]),
            leader_epoch: c.leader_epoch,
            layout: EntryLayout::Batches,
            txn: c.txn.clone(),
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
    let producers_start = body.len();
    producer_summary::encode(&producers, &mut body);
    let producers_crc = crc32c::crc32c(&body[producers_start..]);
    let producers_len = (body.len() - producers_start) as u32;
    body.put_u64(index_start as u64);
    body.put_u32(index_len);
    body.put_u32(index_crc);
    body.put_u32(producers_len);
    body.put_u32(producers_crc);
    body.put_slice(MAGIC_FOOT);
    SealedObject {
        key,
        body: body.freeze(),
        entries,
    }
}

/// The CRC-32C of a chunk (`batches` back to back, `copied` into the body), derived from
/// each batch's own CRC-32C with [`crc::combine`] rather than read off every byte again:
/// every batch a partition holds had its CRC checked or computed when it entered the log
/// (`validate.rs` for a producer's, `txn::marker_batch`, `mirror.rs`), and the WAL entry and
/// replica framing that carried it since are checksummed over the same bytes. A batch whose
/// bytes no longer match its CRC (memory corrupted after the check) makes the range fail
/// its catalogue CRC on every read instead of being served. Shorter pieces than a batch
/// header (only tests build such chunks) are read whole.
fn chunk_crc(batches: &[Bytes], copied: &[u8]) -> u32 {
    let mut chunk = 0u32;
    for b in batches {
        let own = if b.len() >= batch::BATCH_HEADER_BYTES {
            crc::combine(
                crc32c::crc32c(&b[..batch::CRC_START]),
                batch::stored_crc(b),
                (b.len() - batch::CRC_START) as u64,
            )
        } else {
            crc32c::crc32c(b)
        };
        chunk = crc::combine(chunk, own, b.len() as u64);
    }
    debug_assert_eq!(
        chunk,
        crc32c::crc32c(copied),
        "a sealed batch fails its own CRC"
    );
    chunk
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

/// Reads a whole object's index back (used by repair tools and tests; compaction uses
/// [`fetch_index`], which reads only the object's ends).
pub fn read_index(key: &str, body: &[u8]) -> Result<Vec<CatalogEntry>> {
    let len = body.len() as u64;
    if body.len() < HEADER_BYTES + FOOTER_BYTES_V1 {
        return Err(corrupt_object(key, "bad header", len));
    }
    let tail = &body[body.len().saturating_sub(FOOTER_BYTES)..];
    let foot = parse_footer(key, tail, len)?;
    check_header(key, &body[..HEADER_BYTES], len, foot.version)?;
    let index = &body[foot.index_start as usize..(foot.index_start + foot.index_len) as usize];
    index_rows(key, index, foot.index_crc, len)
}

/// Reads an object's index with three small ranged GETs (footer, header, index) instead of
/// the whole object: what compaction needs to know which partitions an object holds.
pub async fn fetch_index(
    store: &dyn object_store::ObjectStore,
    key: &str,
) -> std::result::Result<Vec<CatalogEntry>, FetchIndexError> {
    let path = object_store::path::Path::from(key);
    let foot = fetch_footer(store, key).await?;
    let len = foot.object_len;
    let header =
        object_store::ObjectStoreExt::get_range(store, &path, 0..HEADER_BYTES as u64).await?;
    check_header(key, &header, len, foot.version)?;
    let index = object_store::ObjectStoreExt::get_range(
        store,
        &path,
        foot.index_start..foot.index_start + foot.index_len,
    )
    .await?;
    Ok(index_rows(key, &index, foot.index_crc, len)?)
}

/// The idempotent-producer batches an object keeps per partition (its producers section),
/// read with two small ranged GETs (footer, then index and producers together); `None` for
/// an object of format version 1, which has no such section.
pub async fn fetch_producers(
    store: &dyn object_store::ObjectStore,
    key: &str,
) -> std::result::Result<Option<ObjectProducers>, FetchIndexError> {
    let foot = fetch_footer(store, key).await?;
    let Some((producers_len, producers_crc)) = foot.producers else {
        return Ok(None);
    };
    let path = object_store::path::Path::from(key);
    let end = foot.index_start + foot.index_len + producers_len;
    let tail = object_store::ObjectStoreExt::get_range(store, &path, foot.index_start..end).await?;
    let len = foot.object_len;
    if tail.len() as u64 != foot.index_len + producers_len {
        return Err(corrupt_object(key, "short read of index and producers", len).into());
    }
    let (index, producers) = tail.split_at(foot.index_len as usize);
    let chunks = index_rows(key, index, foot.index_crc, len)?;
    if crc32c::crc32c(producers) != producers_crc {
        return Err(corrupt_object(key, "producers checksum", len).into());
    }
    let rows = producer_summary::decode(producers, chunks.len())
        .ok_or_else(|| corrupt_object(key, "producers section", len))?;
    Ok(Some(ObjectProducers::new(rows.into_iter().map(
        |(chunk, b, carried)| (chunks[chunk as usize].topic_partition(), b, carried),
    ))))
}

/// Reads and checks an object's footer (a suffix GET).
async fn fetch_footer(
    store: &dyn object_store::ObjectStore,
    key: &str,
) -> std::result::Result<Footer, FetchIndexError> {
    use object_store::{GetOptions, GetRange};
    let path = object_store::path::Path::from(key);
    let footer = store
        .get_opts(
            &path,
            GetOptions {
                range: Some(GetRange::Suffix(FOOTER_BYTES as u64)),
                ..Default::default()
            },
        )
        .await?;
    let len = footer.meta.size;
    let footer = footer.bytes().await?;
    if len < (HEADER_BYTES + FOOTER_BYTES_V1) as u64
        || footer.len() as u64 != len.min(FOOTER_BYTES as u64)
    {
        return Err(corrupt_object(key, "bad header", len).into());
    }
    Ok(parse_footer(key, &footer, len)?)
}

/// Why [`fetch_index`] failed: the object store (the object may be gone) or the object.
#[derive(Debug, thiserror::Error)]
pub enum FetchIndexError {
    #[error(transparent)]
    Store(#[from] object_store::Error),
    #[error(transparent)]
    Object(#[from] Error),
}

fn corrupt_object(key: &str, what: &str, len: u64) -> Error {
    Error::ChecksumMismatch {
        key: format!("{key} ({what})"),
        start: 0,
        end: len,
    }
}

/// Checks the header, and that its format version is the one the footer has.
fn check_header(key: &str, header: &[u8], len: u64, version_of_footer: u16) -> Result<()> {
    if header.len() < HEADER_BYTES || &header[..8] != MAGIC_HEAD {
        return Err(corrupt_object(key, "bad header", len));
    }
    let version = u16::from_be_bytes([header[8], header[9]]);
    if version != version_of_footer {
        return Err(corrupt_object(
            key,
            &format!("format version {version} with a footer of version {version_of_footer}"),
            len,
        ));
    }
    Ok(())
}

/// What an object's footer says.
struct Footer {
    version: u16,
    object_len: u64,
    index_start: u64,
    index_len: u64,
    index_crc: u32,
    /// (length, CRC) of the producers section (version 2).
    producers: Option<(u64, u32)>,
}

/// Parses the footer at the end of `tail` (the last bytes of an object of `len` bytes: at
/// least a version 1 footer's), checked to lie between the header and the footer.
fn parse_footer(key: &str, tail: &[u8], len: u64) -> Result<Footer> {
    let bad = || corrupt_object(key, "bad footer", len);
    let magic = tail.get(tail.len().wrapping_sub(8)..).ok_or_else(bad)?;
    let (version, footer_bytes) = if magic == MAGIC_FOOT {
        (2, FOOTER_BYTES)
    } else if magic == MAGIC_FOOT_V1 {
        (1, FOOTER_BYTES_V1)
    } else {
        return Err(bad());
    };
    let mut foot = tail
        .get(tail.len().wrapping_sub(footer_bytes)..)
        .ok_or_else(bad)?;
    let index_start = foot.get_u64();
    let index_len = u64::from(foot.get_u32());
    let index_crc = foot.get_u32();
    let producers = (version == 2).then(|| (u64::from(foot.get_u32()), foot.get_u32()));
    let sections = index_len + producers.map_or(0, |(l, _)| l);
    if index_start < HEADER_BYTES as u64
        || len < (HEADER_BYTES + footer_bytes) as u64
        || index_start.checked_add(sections) != Some(len - footer_bytes as u64)
    {
        return Err(corrupt_object(key, "index out of bounds", len));
    }
    Ok(Footer {
        version,
        object_len: len,
        index_start,
        index_len,
        index_crc,
        producers,
    })
}

fn index_rows(key: &str, index: &[u8], index_crc: u32, len: u64) -> Result<Vec<CatalogEntry>> {
    if crc32c::crc32c(index) != index_crc
        || !index.chunks_exact(INDEX_ROW_BYTES).remainder().is_empty()
    {
        return Err(corrupt_object(key, "index checksum", len));
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
            layout: EntryLayout::Batches,
            txn: None,
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
                carried_producers: Vec::new(),
                producers_complete: false,
                txn: None,
            },
            Chunk {
                topic_partition: tp(1),
                leader_epoch: 3,
                base_offset: 10,
                last_offset: 10,
                max_timestamp_ms: 5,
                batches: vec![Bytes::from_static(b"c")],
                carried_producers: Vec::new(),
                producers_complete: false,
                txn: None,
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
        for cut in 1..obj.body.len() {
            assert!(read_index("k", &obj.body[..obj.body.len() - cut]).is_err());
        }
    }

    #[tokio::test]
    async fn fetch_index_reads_only_the_ends() {
        use object_store::{memory::InMemory, ObjectStoreExt};
        let tp = TopicPartition::new(TopicId(uuid::Uuid::from_u128(1)), 4);
        let obj = build(
            "k".into(),
            1,
            &[Chunk {
                topic_partition: tp,
                leader_epoch: 0,
                base_offset: 7,
                last_offset: 8,
                max_timestamp_ms: 1,
                batches: vec![Bytes::from_static(b"batchbytes")],
                carried_producers: Vec::new(),
                producers_complete: false,
                txn: None,
            }],
        );
        let store = InMemory::new();
        let path = object_store::path::Path::from("k");
        store
            .put(&path, obj.body.clone().into())
            .await
            .expect("put");
        let rows = fetch_index(&store, "k").await.expect("index");
        assert_eq!(rows, read_index("k", &obj.body).expect("whole"));
        assert_eq!(rows[0].topic_partition(), tp);
        let mut bad = obj.body.to_vec();
        let n = bad.len();
        bad[n - FOOTER_BYTES - 2] ^= 1;
        store
            .put(&path, Bytes::from(bad).into())
            .await
            .expect("put");
        assert!(matches!(
            fetch_index(&store, "k").await,
            Err(FetchIndexError::Object(_))
        ));
        assert!(matches!(
            fetch_index(&store, "gone").await,
            Err(FetchIndexError::Store(object_store::Error::NotFound { .. }))
        ));
    }

    /// `obj` rewritten in format version 1 (no producers section, the 24-byte footer), as
    /// brokers before format version 2 wrote it.
    fn as_version_1(obj: &SealedObject) -> Bytes {
        let body = &obj.body;
        let foot = parse_footer("k", &body[body.len() - FOOTER_BYTES..], body.len() as u64)
            .expect("v2 footer");
        let mut out = BytesMut::from(&body[..(foot.index_start + foot.index_len) as usize]);
        out[8..10].copy_from_slice(&1u16.to_be_bytes());
        out.put_u64(foot.index_start);
        out.put_u32(foot.index_len as u32);
        out.put_u32(foot.index_crc);
        out.put_slice(MAGIC_FOOT_V1);
        out.freeze()
    }

    fn idempotent(records: i32, pid: i64, seq: i32, base: Offset) -> Bytes {
        let b = crate::batch::testing::make_idempotent_batch(records, 1, pid, 0, seq);
        crate::batch::stamp(&b, base, 0, None)
    }

    #[tokio::test]
    async fn producers_section_round_trips_and_version_1_is_still_read() {
        use object_store::{memory::InMemory, ObjectStoreExt};
        let tp = |p| TopicPartition::new(TopicId(uuid::Uuid::from_u128(1)), p);
        let chunk = |p, batches: Vec<Bytes>, base, last| Chunk {
            topic_partition: tp(p),
            leader_epoch: 0,
            base_offset: base,
            last_offset: last,
            max_timestamp_ms: 1,
            batches,
            carried_producers: Vec::new(),
            producers_complete: false,
            txn: None,
        };
        let seven: Vec<Bytes> = (0..7)
            .map(|i| idempotent(2, 40, i * 2, 10 + i64::from(i) * 2))
            .collect();
        let obj = build(
            "k".into(),
            1,
            &[
                chunk(0, seven, 10, 23),
                chunk(
                    3,
                    vec![
                        idempotent(1, 41, 5, 0),
                        Bytes::from(crate::batch::testing::make_batch(1, 1)),
                    ],
                    0,
                    1,
                ),
            ],
        );
        let store = InMemory::new();
        let path = object_store::path::Path::from("k");
        store
            .put(&path, obj.body.clone().into())
            .await
            .expect("put");
        let p = fetch_producers(&store, "k")
            .await
            .expect("fetch")
            .expect("a section");
        let seqs: Vec<i32> = p.of(&tp(0)).iter().map(|b| b.base_sequence).collect();
        assert_eq!(seqs, vec![4, 6, 8, 10, 12], "the last five of the producer");
        assert_eq!(p.of(&tp(0))[4].base_offset, 22);
        assert_eq!(
            p.of(&tp(3)).len(),
            1,
            "the non-idempotent batch is not kept"
        );
        assert_eq!(p.of(&tp(3))[0].producer_id, 41);
        assert_eq!(
            read_index("k", &obj.body).expect("index"),
            fetch_index(&store, "k").await.expect("index")
        );

        // A flipped bit in the producers section: refused, not misread.
        let mut bad = obj.body.to_vec();
        let n = bad.len();
        bad[n - FOOTER_BYTES - 3] ^= 1;
        store
            .put(&path, Bytes::from(bad).into())
            .await
            .expect("put");
        assert!(fetch_producers(&store, "k").await.is_err());
        assert!(
            fetch_index(&store, "k").await.is_ok(),
            "the index is intact"
        );

        // Format version 1: no section; the index reads as before.
        let v1 = as_version_1(&obj);
        store.put(&path, v1.clone().into()).await.expect("put");
        assert!(fetch_producers(&store, "k").await.expect("fetch").is_none());
        assert_eq!(
            fetch_index(&store, "k").await.expect("v1 index"),
            read_index("k", &obj.body).expect("index")
        );
        assert_eq!(
            read_index("k", &v1).expect("v1"),
            read_index("k", &obj.body).expect("v2")
        );
        for cut in 1..v1.len() {
            assert!(read_index("k", &v1[..v1.len() - cut]).is_err());
        }
        // A version-1 header with a version-2 footer (or the reverse) is corrupt.
        let mut mixed = obj.body.to_vec();
        mixed[8..10].copy_from_slice(&1u16.to_be_bytes());
        assert!(read_index("k", &mixed).is_err());
    }
}
