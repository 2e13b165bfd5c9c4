//! The per-partition segment format: one partition's record batches in offset order, with a
//! sparse offset index and a time index, written by compaction ([`crate::compact`]).
//!
//! Layout (format version 2, big-endian):
//! ```text
//! header : magic "OXBOWSEG" [8] | format version u16 | reserved u16 | topic id [16] |
//!          partition i32 | leader epoch i32                                     (36 bytes)
//! data   : the partition's record batches back to back, in offset order, exactly as
//!          stored (never recompressed), grouped into chunks of about
//!          INDEX_INTERVAL_BYTES (a chunk is never empty; one batch larger than that is a
//!          chunk of its own)
//! index  : offset rows u32 | time rows u32 |
//!          offset rows, one per chunk (40 bytes): base offset i64 | last offset i64 |
//!            max timestamp i64 | byte start u64 | byte length u32 | crc32c(chunk) u32
//!          time rows, one per chunk whose max timestamp is larger than every earlier
//!            chunk's (12 bytes): max timestamp i64 | chunk number u32
//! producers: 32-byte producer rows (chunk index 0; the format of a sealed object's,
//!            crate::producer_summary) | row count u32 | crc32c(rows and count) u32
//! footer : index start u64 | index length u32 | crc32c(index) u32 | crc32c(header) u32 |
//!          format version u16 | reserved u16 | magic "OXBOWSGE" [8]            (32 bytes)
//! ```
//! Every byte is covered by a check: the header and the index by the CRCs in the footer,
//! each chunk by its index row's CRC, the footer by its magic, version, reserved zeros and
//! bounds, the producers section by its own CRC. Format version 1 (still read) has no
//! producers section: its index ends where the footer begins. The time index holds running maxima, so "the first chunk holding a timestamp at
//! or after T" is a binary search even though Kafka timestamps (`CreateTime`) are not
//! monotonic.
//!
//! Catalogued as **one** entry per segment ([`oxbow_metadata::EntryLayout::SegmentIndex`]):
//! its byte range and CRC are the index's. A reader fetches the index (a few KiB per GiB
//! of data; cached), picks the chunk, and reads that chunk's range checked against the
//! row's CRC — the same ranged, verified read as a sealed object's chunk
//! ([`SegmentIndex::chunk_entry`] turns a row into such an entry).
//!
//! Naming: `segments/{topic_id}/{partition}/{base_offset:020}-{leader_epoch}-{random}.oxs`,
//! written create-only. The base offset sorts a partition's segments in a listing; the
//! random part keeps two compactors (a deposed and a new leader) from ever writing the same
//! key; the leader epoch is the one every batch inside was written under (compaction never
//! mixes epochs, so the catalog keeps the epoch history).
//!
//! Producers (issue 16): the section holds what the partition's next leader must know of
//! its idempotent and transactional producers at the segment's end — every producer the
//! partition remembered then ([`crate::producer_summary::segment_rows`], at most
//! [`crate::producer_summary::SEGMENT_PRODUCERS_MAX`]), its rows flagged *carried* when they
//! lie before the segment's base offset, and the transactions open at its end. A new
//! leader fetches it with one ranged GET from the index's end ([`fetch_producers`]) instead
//! of reading the segment's batches back. Readers of data never touch it, so brokers
//! predating it read version 2 segments as before.
//!
//! Pure, but for [`fetch_producers`]: encode and decode; I/O is the compactor's and the
//! reader's.

use crate::batch;
use crate::error::{Error, Result};
use crate::object::FetchIndexError;
use crate::producer_summary::{self, ObjectProducers, ProducerBatch};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use oxbow_metadata::{CatalogEntry, EntryLayout, LeaderEpoch, Offset, TopicId, TopicPartition};

const MAGIC_HEAD: &[u8; 8] = b"OXBOWSEG";
const MAGIC_FOOT: &[u8; 8] = b"OXBOWSGE";
/// The format version written into header and footer.
pub const FORMAT_VERSION: u16 = 2;
/// The first format version (no producers section), still read.
const FORMAT_VERSION_V1: u16 = 1;
/// Row count and CRC after a producers section's rows.
const PRODUCERS_TRAILER_BYTES: usize = 8;
/// Bytes before the first batch.
pub const HEADER_BYTES: u64 = 36;
const FOOTER_BYTES: usize = 32;
const INDEX_COUNTS_BYTES: usize = 8;
const OFFSET_ROW_BYTES: usize = 40;
const TIME_ROW_BYTES: usize = 12;
/// Target bytes of one chunk (one offset-index row). A read fetches at least a whole chunk,
/// so larger chunks mean more bytes per GET for a reader that wants little, and a smaller
/// index; 1 MiB matches a Kafka consumer's default `max.partition.fetch.bytes`, so one
/// fetch is usually one chunk and one GET. A 512 MiB segment has about 512 rows (20 KiB).
pub const INDEX_INTERVAL_BYTES: u64 = 1 << 20;

/// The object key of a new segment (see the module docs); `unique` is a random uuid.
pub fn segment_key(
    tp: TopicPartition,
    base_offset: Offset,
    leader_epoch: LeaderEpoch,
    unique: uuid::Uuid,
) -> String {
    format!(
        "segments/{}/{}/{base_offset:020}-{leader_epoch}-{}.oxs",
        tp.topic_id,
        tp.partition,
        unique.simple()
    )
}

/// Bytes of record batches in the segment a catalog entry names (the index starts right
/// after them); for any other entry, the bytes of its range.
pub fn data_bytes(entry: &CatalogEntry) -> u64 {
    match entry.layout {
        EntryLayout::SegmentIndex => entry.byte_start.saturating_sub(HEADER_BYTES),
        EntryLayout::Batches => entry.byte_len,
    }
}

/// One chunk of a segment, as its offset-index row describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkRow {
    pub base_offset: Offset,
    pub last_offset: Offset,
    pub max_timestamp_ms: i64,
    pub byte_start: u64,
    pub byte_len: u32,
    pub crc32c: u32,
}

/// One time-index row: chunk `chunk` is the first whose max timestamp reaches
/// `max_timestamp_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeRow {
    pub max_timestamp_ms: i64,
    pub chunk: u32,
}

/// A segment's decoded index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentIndex {
    /// One row per chunk, in offset (and byte) order.
    pub chunks: Vec<ChunkRow>,
    /// Running maxima of the chunks' max timestamps, strictly increasing.
    pub times: Vec<TimeRow>,
}

fn corrupt(key: &str, what: impl std::fmt::Display, start: u64, end: u64) -> Error {
    Error::ChecksumMismatch {
        key: format!("{key} ({what})"),
        start,
        end,
    }
}

impl SegmentIndex {
    /// The index region's bytes (counts, offset rows, time rows).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            INDEX_COUNTS_BYTES
                + self.chunks.len() * OFFSET_ROW_BYTES
                + self.times.len() * TIME_ROW_BYTES,
        );
        out.put_u32(self.chunks.len() as u32);
        out.put_u32(self.times.len() as u32);
        for c in &self.chunks {
            out.put_i64(c.base_offset);
            out.put_i64(c.last_offset);
            out.put_i64(c.max_timestamp_ms);
            out.put_u64(c.byte_start);
            out.put_u32(c.byte_len);
            out.put_u32(c.crc32c);
        }
        for t in &self.times {
            out.put_i64(t.max_timestamp_ms);
            out.put_u32(t.chunk);
        }
        out
    }

    /// Decodes an index region whose CRC the caller has checked, and checks its shape:
    /// chunks contiguous in offsets and bytes from the end of the header, time rows
    /// increasing and naming existing chunks. `key` names the segment in errors.
    pub fn decode(key: &str, bytes: &[u8]) -> Result<SegmentIndex> {
        let len = bytes.len() as u64;
        let bad = |what: &str| corrupt(key, format!("index: {what}"), 0, len);
        let mut buf = bytes;
        if buf.len() < INDEX_COUNTS_BYTES {
            return Err(bad("too short"));
        }
        let chunk_count = buf.get_u32() as usize;
        let time_count = buf.get_u32() as usize;
        let want = chunk_count
            .checked_mul(OFFSET_ROW_BYTES)
            .and_then(|c| c.checked_add(time_count.checked_mul(TIME_ROW_BYTES)?));
        if want != Some(buf.len()) || chunk_count == 0 {
            return Err(bad("row counts do not match its length"));
        }
        let mut chunks = Vec::with_capacity(chunk_count);
        for _ in 0..chunk_count {
            chunks.push(ChunkRow {
                base_offset: buf.get_i64(),
                last_offset: buf.get_i64(),
                max_timestamp_ms: buf.get_i64(),
                byte_start: buf.get_u64(),
                byte_len: buf.get_u32(),
                crc32c: buf.get_u32(),
            });
        }
        let mut times = Vec::with_capacity(time_count);
        for _ in 0..time_count {
            times.push(TimeRow {
                max_timestamp_ms: buf.get_i64(),
                chunk: buf.get_u32(),
            });
        }
        let mut byte_next = HEADER_BYTES;
        let mut offset_next: Option<Offset> = None;
        for c in &chunks {
            if c.byte_start != byte_next
                || c.byte_len == 0
                || c.last_offset < c.base_offset
                || offset_next.is_some_and(|n| n != c.base_offset)
            {
                return Err(bad("chunks are not contiguous"));
            }
            byte_next += u64::from(c.byte_len);
            offset_next = Some(c.last_offset + 1);
        }
        let mut previous: Option<&TimeRow> = None;
        for t in &times {
            let in_order = previous
                .is_none_or(|p| p.chunk < t.chunk && p.max_timestamp_ms < t.max_timestamp_ms);
            let chunk = chunks.get(t.chunk as usize);
            if !in_order || chunk.is_none_or(|c| c.max_timestamp_ms != t.max_timestamp_ms) {
                return Err(bad("time rows out of order"));
            }
            previous = Some(t);
        }
        Ok(SegmentIndex { chunks, times })
    }

    /// First offset in the segment.
    pub fn base_offset(&self) -> Offset {
        self.chunks.first().map(|c| c.base_offset).unwrap_or(0)
    }

    /// Last offset in the segment (inclusive).
    pub fn last_offset(&self) -> Offset {
        self.chunks.last().map(|c| c.last_offset).unwrap_or(-1)
    }

    /// Bytes of record batches (the data region).
    pub fn data_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| u64::from(c.byte_len)).sum()
    }

    /// Index of the chunk holding `offset`, or of the first chunk after it (`chunks.len()`
    /// if the segment ends before `offset`).
    pub fn chunk_for_offset(&self, offset: Offset) -> usize {
        self.chunks.partition_point(|c| c.last_offset < offset)
    }

    /// Index of the first chunk holding a batch whose max timestamp is at or after
    /// `timestamp_ms`, if any.
    pub fn chunk_for_timestamp(&self, timestamp_ms: i64) -> Option<usize> {
        let i = self
            .times
            .partition_point(|t| t.max_timestamp_ms < timestamp_ms);
        self.times.get(i).map(|t| t.chunk as usize)
    }

    /// A catalog entry (layout [`EntryLayout::Batches`]) for chunk `i` of the segment
    /// `segment` names: the range and CRC a reader fetches and checks.
    pub fn chunk_entry(&self, segment: &CatalogEntry, i: usize) -> Option<CatalogEntry> {
        let c = self.chunks.get(i)?;
        Some(CatalogEntry {
            base_offset: c.base_offset,
            last_offset: c.last_offset,
            max_timestamp_ms: c.max_timestamp_ms,
            byte_start: c.byte_start,
            byte_len: u64::from(c.byte_len),
            crc32c: c.crc32c,
            layout: EntryLayout::Batches,
            txn: None,
            ..segment.clone()
        })
    }
}

/// The fixed fields of a segment's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub topic_partition: TopicPartition,
    pub leader_epoch: LeaderEpoch,
}

/// A segment ready to upload and the catalog entry that describes it.
#[derive(Clone, Debug)]
pub struct BuiltSegment {
    pub key: String,
    pub body: Bytes,
    pub entry: CatalogEntry,
    pub index: SegmentIndex,
}

/// The open chunk of a [`SegmentBuilder`].
#[derive(Clone, Copy, Debug)]
struct OpenChunk {
    byte_start: usize,
    base_offset: Offset,
    last_offset: Offset,
    max_timestamp_ms: i64,
}

/// Builds one segment from whole batches pushed in offset order.
pub struct SegmentBuilder {
    header: SegmentHeader,
    index_interval_bytes: u64,
    body: BytesMut,
    index: SegmentIndex,
    open: Option<OpenChunk>,
    next_offset: Option<Offset>,
    /// Whether batches may skip offsets (key-compacted data, [`Self::with_gaps_from`]).
    gaps: bool,
    /// The producers section's rows ([`Self::set_producers`]).
    producers: Vec<ProducerBatch>,
}

impl SegmentBuilder {
    /// An empty segment of `tp` whose batches were written under `leader_epoch`; chunks of
    /// about `index_interval_bytes`; `capacity_bytes` preallocated.
    pub fn new(
        tp: TopicPartition,
        leader_epoch: LeaderEpoch,
        index_interval_bytes: u64,
        capacity_bytes: usize,
    ) -> Self {
        let mut body = BytesMut::with_capacity(capacity_bytes + HEADER_BYTES as usize);
        let header = SegmentHeader {
            topic_partition: tp,
            leader_epoch,
        };
        body.put_slice(&encode_header(&header));
        SegmentBuilder {
            header,
            index_interval_bytes: index_interval_bytes.max(1),
            body,
            index: SegmentIndex::default(),
            open: None,
            next_offset: None,
            gaps: false,
            producers: Vec::new(),
        }
    }

    /// The same builder for key-compacted batches ([`crate::key_compact`]): the segment
    /// covers offsets from `first_offset` on and a batch may start after the previous one
    /// ends (whole batches were dropped), never before. Chunk rows stay contiguous in
    /// offsets — a chunk covers from where the previous one ended — so the index, the
    /// catalog and readers see the same dense spans as for any segment; only the batches
    /// inside have gaps, as in a Kafka compacted segment.
    pub fn with_gaps_from(mut self, first_offset: Offset) -> Self {
        self.gaps = true;
        self.next_offset = Some(first_offset);
        self
    }

    /// The rows of the producers section: the producers at the segment's end
    /// ([`producer_summary::segment_rows`]).
    pub fn set_producers(&mut self, rows: Vec<ProducerBatch>) {
        self.producers = rows;
    }

    /// Bytes of batches pushed so far.
    pub fn data_bytes(&self) -> u64 {
        self.body.len() as u64 - HEADER_BYTES
    }

    /// The offset the next batch must start at (`None` before the first).
    pub fn next_offset(&self) -> Option<Offset> {
        self.next_offset
    }

    /// Appends one whole stored batch. It must start right after the previous one (a
    /// segment is dense, like the log), or after it for a builder [`Self::with_gaps_from`].
    pub fn push(&mut self, raw: &[u8]) -> Result<()> {
        let h = batch::peek_header(raw)?
            .filter(|h| h.size == raw.len())
            .ok_or_else(|| {
                Error::CorruptBatch(format!(
                    "{} bytes are not exactly one record batch",
                    raw.len()
                ))
            })?;
        if let Some(next) = self.next_offset {
            let in_order = h.base_offset == next || (self.gaps && h.base_offset > next);
            if !in_order {
                return Err(Error::Internal(format!(
                    "segment of {} expects offset {next}, got a batch at {}",
                    self.header.topic_partition, h.base_offset
                )));
            }
        }
        if let Some(open) = self.open {
            let open_bytes = (self.body.len() - open.byte_start) as u64;
            if open_bytes + raw.len() as u64 > self.index_interval_bytes {
                self.close_chunk();
            }
        }
        let byte_start = self.body.len();
        // A chunk covers from where the previous one ended (the same as the batch's base
        // offset unless whole batches were compacted away before it).
        let covered_from = self.next_offset.unwrap_or(h.base_offset);
        let open = self.open.get_or_insert(OpenChunk {
            byte_start,
            base_offset: covered_from,
            last_offset: h.last_offset(),
            max_timestamp_ms: h.max_timestamp,
        });
        open.last_offset = h.last_offset();
        open.max_timestamp_ms = open.max_timestamp_ms.max(h.max_timestamp);
        self.body.put_slice(raw);
        self.next_offset = Some(h.last_offset() + 1);
        Ok(())
    }

    fn close_chunk(&mut self) {
        let Some(open) = self.open.take() else {
            return;
        };
        let bytes = &self.body[open.byte_start..];
        let chunk = self.index.chunks.len() as u32;
        self.index.chunks.push(ChunkRow {
            base_offset: open.base_offset,
            last_offset: open.last_offset,
            max_timestamp_ms: open.max_timestamp_ms,
            byte_start: open.byte_start as u64,
            byte_len: bytes.len() as u32,
            crc32c: crc32c::crc32c(bytes),
        });
        let running_max = self.index.times.last().map(|t| t.max_timestamp_ms);
        if running_max.is_none_or(|m| open.max_timestamp_ms > m) {
            self.index.times.push(TimeRow {
                max_timestamp_ms: open.max_timestamp_ms,
                chunk,
            });
        }
    }

    /// Seals the segment under `key`: index, footer, and its catalog entry. Fails if no
    /// batch was pushed.
    pub fn finish(mut self, key: String) -> Result<BuiltSegment> {
        self.close_chunk();
        let (Some(first), Some(last)) = (self.index.chunks.first(), self.index.chunks.last())
        else {
            return Err(Error::Internal(format!("empty segment {key}")));
        };
        let (base_offset, last_offset) = (first.base_offset, last.last_offset);
        let max_timestamp_ms = self
            .index
            .times
            .last()
            .map(|t| t.max_timestamp_ms)
            .unwrap_or(-1);
        let index_bytes = self.index.encode();
        let index_start = self.body.len() as u64;
        let index_crc = crc32c::crc32c(&index_bytes);
        let header_crc = crc32c::crc32c(&self.body[..HEADER_BYTES as usize]);
        self.body.put_slice(&index_bytes);
        let producers_start = self.body.len();
        let rows: Vec<producer_summary::Row> = self
            .producers
            .iter()
            .map(|b| (0, *b, b.is_open_txn() || b.base_offset < base_offset))
            .collect();
        producer_summary::encode(&rows, &mut self.body);
        self.body.put_u32(rows.len() as u32);
        let producers_crc = crc32c::crc32c(&self.body[producers_start..]);
        self.body.put_u32(producers_crc);
        self.body.put_u64(index_start);
        self.body.put_u32(index_bytes.len() as u32);
        self.body.put_u32(index_crc);
        self.body.put_u32(header_crc);
        self.body.put_u16(FORMAT_VERSION);
        self.body.put_u16(0);
        self.body.put_slice(MAGIC_FOOT);
        let tp = self.header.topic_partition;
        let entry = CatalogEntry {
            topic_id: tp.topic_id,
            partition: tp.partition,
            base_offset,
            last_offset,
            max_timestamp_ms,
            object_key: key.clone(),
            byte_start: index_start,
            byte_len: index_bytes.len() as u64,
            crc32c: index_crc,
            leader_epoch: self.header.leader_epoch,
            layout: EntryLayout::SegmentIndex,
            txn: None,
        };
        Ok(BuiltSegment {
            key,
            body: self.body.freeze(),
            entry,
            index: self.index,
        })
    }
}

fn encode_header(h: &SegmentHeader) -> [u8; HEADER_BYTES as usize] {
    let mut out = [0u8; HEADER_BYTES as usize];
    let mut buf = &mut out[..];
    buf.put_slice(MAGIC_HEAD);
    buf.put_u16(FORMAT_VERSION);
    buf.put_u16(0);
    buf.put_slice(h.topic_partition.topic_id.as_bytes());
    buf.put_i32(h.topic_partition.partition);
    buf.put_i32(h.leader_epoch);
    out
}

/// Decodes and checks a whole segment: header, footer, index CRC and shape, every chunk's
/// CRC, and that each chunk's batches cover exactly its offsets. For tests, tools, and
/// anyone holding a whole body; readers check only what they fetch.
pub fn verify(key: &str, body: &[u8]) -> Result<(SegmentHeader, SegmentIndex)> {
    let len = body.len() as u64;
    let bad = |what: &str| corrupt(key, what, 0, len);
    if body.len() < HEADER_BYTES as usize + FOOTER_BYTES {
        return Err(bad("shorter than header and footer"));
    }
    let mut foot = &body[body.len() - FOOTER_BYTES..];
    let index_start = foot.get_u64();
    let index_len = foot.get_u32() as u64;
    let index_crc = foot.get_u32();
    let header_crc = foot.get_u32();
    let version = foot.get_u16();
    let reserved = foot.get_u16();
    if foot != MAGIC_FOOT || reserved != 0 {
        return Err(bad("bad footer (truncated?)"));
    }
    if version != FORMAT_VERSION && version != FORMAT_VERSION_V1 {
        return Err(bad(&format!("unknown format version {version}")));
    }
    let header = &body[..HEADER_BYTES as usize];
    if crc32c::crc32c(header) != header_crc {
        return Err(bad("header checksum"));
    }
    let mut h = header;
    let mut magic = [0u8; 8];
    h.copy_to_slice(&mut magic);
    let header_version = h.get_u16();
    let header_reserved = h.get_u16();
    if &magic != MAGIC_HEAD || header_version != version || header_reserved != 0 {
        return Err(bad("bad header"));
    }
    let mut id = [0u8; 16];
    h.copy_to_slice(&mut id);
    let topic_partition = TopicPartition::new(TopicId(uuid::Uuid::from_bytes(id)), h.get_i32());
    let leader_epoch = h.get_i32();
    // The index ends where the producers section (version 2) or the footer begins.
    let index_end = index_start
        .checked_add(index_len)
        .filter(|&end| end <= len - FOOTER_BYTES as u64);
    let Some(index_end) = index_end.filter(|_| index_start >= HEADER_BYTES) else {
        return Err(bad("index out of bounds"));
    };
    decode_tail(
        key,
        &body[index_end as usize..],
        (index_start, index_len, index_crc),
    )?;
    let index_bytes = &body[index_start as usize..(index_start + index_len) as usize];
    if crc32c::crc32c(index_bytes) != index_crc {
        return Err(corrupt(
            key,
            "index checksum",
            index_start,
            index_start + index_len,
        ));
    }
    let index = SegmentIndex::decode(key, index_bytes)?;
    if HEADER_BYTES + index.data_bytes() != index_start {
        return Err(bad("chunks do not fill the data region"));
    }
    for c in &index.chunks {
        let (start, end) = (c.byte_start, c.byte_start + u64::from(c.byte_len));
        let bytes = Bytes::copy_from_slice(&body[start as usize..end as usize]);
        if crc32c::crc32c(&bytes) != c.crc32c {
            return Err(corrupt(key, "chunk checksum", start, end));
        }
        // Batches in order; key-compacted segments may skip offsets between batches.
        let mut next = c.base_offset;
        let mut seen = 0usize;
        for (bh, b) in batch::iter_batches(&bytes) {
            if bh.base_offset < next {
                return Err(corrupt(key, "batches out of order", start, end));
            }
            next = bh.last_offset() + 1;
            seen += b.len();
        }
        if seen != bytes.len() || next != c.last_offset + 1 {
            return Err(corrupt(key, "chunk does not hold its offsets", start, end));
        }
    }
    Ok((
        SegmentHeader {
            topic_partition,
            leader_epoch,
        },
        index,
    ))
}

/// The producers section of a segment, from `tail` — its bytes from the index's end to the
/// object's — checked: the footer's magic and version, that it names the index the catalog
/// entry does (`index`: its start, length and CRC), the section's CRC and rows. Rows
/// are (row, carried: before the segment's base offset or an open transaction). `None` for
/// format version 1 (no section).
pub fn decode_tail(
    key: &str,
    tail: &[u8],
    index: (u64, u64, u32),
) -> Result<Option<Vec<(ProducerBatch, bool)>>> {
    let len = tail.len() as u64;
    let bad = |what: &str| corrupt(key, format!("producers: {what}"), 0, len);
    let Some(section_len) = tail.len().checked_sub(FOOTER_BYTES) else {
        return Err(bad("shorter than a footer"));
    };
    let (section, mut foot) = tail.split_at(section_len);
    let names_index = (foot.get_u64(), u64::from(foot.get_u32()), foot.get_u32()) == index;
    // The header's CRC is checked by whoever reads the header (`verify`).
    let _header_crc = foot.get_u32();
    let version = foot.get_u16();
    let reserved = foot.get_u16();
    if foot != MAGIC_FOOT || reserved != 0 || !names_index {
        return Err(bad("bad footer"));
    }
    match version {
        FORMAT_VERSION_V1 if section.is_empty() => return Ok(None),
        FORMAT_VERSION => {}
        _ => return Err(bad("unknown format version or trailing bytes")),
    }
    let Some(rows_len) = section.len().checked_sub(PRODUCERS_TRAILER_BYTES) else {
        return Err(bad("no row count"));
    };
    let (rows, mut trailer) = section.split_at(rows_len);
    let count = trailer.get_u32() as usize;
    let crc = trailer.get_u32();
    if crc32c::crc32c(&section[..rows_len + 4]) != crc {
        return Err(bad("checksum"));
    }
    if count.checked_mul(producer_summary::ROW_BYTES) != Some(rows_len) {
        return Err(bad("row count does not match its length"));
    }
    let rows = producer_summary::decode(rows, 1).ok_or_else(|| bad("rows"))?;
    Ok(Some(rows.into_iter().map(|(_, b, c)| (b, c)).collect()))
}

/// Fetches and checks the producers section of the segment a catalog entry names (one
/// ranged GET from its index's end); `None` for a segment of format version 1.
pub async fn fetch_producers(
    store: &dyn object_store::ObjectStore,
    entry: &CatalogEntry,
) -> std::result::Result<Option<ObjectProducers>, FetchIndexError> {
    use object_store::{GetOptions, GetRange};
    let key = entry.object_key.as_str();
    let path = object_store::path::Path::from(key);
    let got = store
        .get_opts(
            &path,
            GetOptions {
                range: Some(GetRange::Offset(entry.byte_start + entry.byte_len)),
                ..Default::default()
            },
        )
        .await?;
    let tail = got.bytes().await?;
    let index = (entry.byte_start, entry.byte_len, entry.crc32c);
    let rows = decode_tail(key, &tail, index)?;
    let tp = entry.topic_partition();
    Ok(rows.map(|rows| ObjectProducers::new(rows.into_iter().map(|(b, c)| (tp, b, c)))))
}

#[cfg(test)]
mod tests;
