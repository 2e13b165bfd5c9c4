//! Idempotent-producer summaries of sealed objects, and the broker's shared, bounded cache
//! of them: how a broker taking partitions over rebuilds their producer state without
//! reading their batches back.
//!
//! A new leader must know each producer's recent sequences, or a retry of a batch the old
//! leader stored would be stored twice (`log/open.rs`, `restore_producers`). Reading the
//! last few thousand records of every partition taken over costs a ranged GET per catalog
//! entry and partition: measured, a failover of 100 partitions of a 300-partition topic
//! took 45 s, all of it these GETs (9,000, against one S3 server). Every sealed object
//! instead keeps, per partition, the last [`RECENT_PER_PRODUCER`] batches of each producer
//! it holds (the object's producers section, [`crate::object`]); a partition's state is the
//! same rebuilt from these as from its batches (a producer's last five batches overall are
//! among the last five of the object they are in). Partitions taken over together were led
//! by one broker, so their recent entries are in the same objects: [`ProducerSummaries`]
//! fetches each object's section once (two small GETs) and shares it.
//!
//! Rows carried forward (issue 16): a partition's producers that wrote nothing in this object
//! also get rows — their last batches before the chunk, as the leader remembers them, at most
//! [`CARRIED_ROWS_MAX`] per chunk — so a producer idle for more than the rebuild window (the
//! last 4096 records) is still known to the next leader, and its retry after a failover is
//! recognised. A carried row is applied only if it lies before the entry it came with.
//!
//! Open transactions (issue 16): a carried row flagged *open transaction* names a producer
//! whose transaction was open in the partition when the chunk was sealed and began at or
//! before the chunk's last offset (first offset in `base offset`, sequences -1), so a new
//! leader's last stable offset does not run past it (`log/open.rs`). Only the newest entry's
//! rows matter: they are the open set at the end of the catalogue. A broker predating them
//! refuses the section (sequence -1) and reads the batches instead.
//!
//! Markers (issue 16): a transaction marker is a row too (flagged *marker*, sequences -1,
//! its offset in `base offset`), own or carried like a batch, so the epoch a fencing abort
//! bumped survives a takeover and a zombie's batch at the old epoch is still refused.
//!
//! Complete rows and checkpoints (issue 16): a chunk whose carried rows name every
//! producer the leader remembers is *complete*: its rows plus those of the entries after it
//! are the partition's whole producer state. Chunks carry every row while there are at most
//! [`CARRIED_ROWS_MAX`]; past that, one chunk in a while is complete
//! ([`checkpoint_due`]) and the chunks between carry a *checkpoint* row (flagged so,
//! producer id and sequences -1) with the base offset of the last complete one, so a new
//! leader reads back to it however many records came after (`log/open.rs`). A broker
//! predating checkpoints refuses a section with one (producer id -1) and reads batches.
//!
//! Row (32 bytes, big-endian): chunk index u32 | producer id i64 | producer epoch i16 |
//! flags u16 (bit 0: carried; bit 1: open transaction; bit 2: marker; bit 3: checkpoint; other bits ignored) | base sequence
//! i32 | last sequence i32 | base offset i64. Decoding trusts nothing: the row count comes from the section's length,
//! every chunk index is checked against the object's index. Brokers that predate carried
//! rows skip them (they lie before the entry's range).

use crate::batch::{self, BatchHeader};
use crate::error::Error;
use crate::object::{self, FetchIndexError};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::FutureExt;
use object_store::ObjectStore;
use oxbow_metadata::clock::Clock;
use oxbow_metadata::{CatalogEntry, EntryLayout, Offset, TopicPartition};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::OnceCell;

/// Bytes of one row of an object's producers section.
pub const ROW_BYTES: usize = 32;

/// Batches kept per producer and partition in an object: as many as the broker remembers
/// for deduplication (Kafka's in-flight limit for idempotence is five).
pub const RECENT_PER_PRODUCER: usize = crate::partition::PRODUCER_RECENT_BATCHES;

/// Most carried rows per chunk (each producer's remembered batches, newest producers first):
/// bounds what a partition with many idle producers adds to every object (8 KiB).
pub const CARRIED_ROWS_MAX: usize = 256;

/// One row of a producers section: the chunk it is for, the batch, and whether it is
/// carried (a batch before the chunk) rather than one of the chunk's own.
pub type Row = (u32, ProducerBatch, bool);

/// How long a fetched summary is reused: opens of one takeover run within seconds.
const REUSE: Duration = Duration::from_secs(30);

/// Most rows held by the cache (about 48 MiB), whatever the objects' partition counts.
const ROWS_MAX: usize = 1 << 20;

/// Flags of a row (see the module docs).
const FLAG_CARRIED: u16 = 1;
const FLAG_OPEN_TXN: u16 = 2;
const FLAG_MARKER: u16 = 4;
const FLAG_CHECKPOINT: u16 = 8;

/// Most carried rows in one object over all its chunks (4 MiB): a complete chunk that
/// does not fit in what is left waits for a later object. Chunks of at most
/// [`CARRIED_ROWS_MAX`] rows are never held back.
pub const OBJECT_CARRIED_ROWS_MAX: usize = 1 << 17;

/// A complete chunk ([`checkpoint_due`]) is due at the latest after this many chunks of a
/// partition: a new leader reads at most this many entries' sections beyond its window.
pub const CHECKPOINT_EVERY_CHUNKS: u32 = 256;

/// Records between complete chunks, at least: inside the rebuild window
/// (`log/open.rs`, 4096 records) a new leader finds the last complete chunk anyway.
pub const CHECKPOINT_RECORDS_MIN: i64 = 2048;

/// Records between complete chunks per carried row, at least: a complete chunk's rows cost
/// at most 8 bytes per record written between them.
pub const CHECKPOINT_RECORDS_PER_ROW: i64 = 4;

/// Whether a partition's next chunk (ending at `last_offset`, with `rows` rows to carry)
/// must be complete, given its last complete chunk began at `checkpoint` (`None`: none
/// since this broker took the partition) and `chunks_since` chunks were sealed after it.
pub fn checkpoint_due(
    checkpoint: Option<Offset>,
    chunks_since: u32,
    last_offset: Offset,
    rows: usize,
) -> bool {
    let Some(at) = checkpoint else {
        return true;
    };
    let spacing =
        CHECKPOINT_RECORDS_MIN.max(CHECKPOINT_RECORDS_PER_ROW.saturating_mul(rows as i64));
    rows <= CARRIED_ROWS_MAX
        || chunks_since >= CHECKPOINT_EVERY_CHUNKS
        || last_offset.saturating_sub(at) >= spacing
}

/// What a [`ProducerBatch`] row stands for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RowKind {
    /// A stored batch of an idempotent producer.
    #[default]
    Batch,
    /// A transaction open from `base_offset` (sequences -1, [`ProducerBatch::open_txn`]).
    OpenTxn,
    /// A transaction marker at `base_offset` (sequences -1, [`ProducerBatch::marker`]): the
    /// producer is known at its epoch, which a fencing abort has bumped.
    Marker,
    /// Not a producer (id and sequences -1): the last complete chunk of the partition began
    /// at `base_offset` ([`ProducerBatch::checkpoint`]).
    Checkpoint,
}

/// One stored batch of an idempotent producer, or (sequences -1) a transaction open from
/// `base_offset` or a marker stored there (see [`RowKind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerBatch {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub last_sequence: i32,
    pub base_offset: Offset,
    pub kind: RowKind,
}

impl ProducerBatch {
    /// The row of a transaction open from `first_offset` (carried with a chunk).
    pub fn open_txn(producer_id: i64, producer_epoch: i16, first_offset: Offset) -> Self {
        ProducerBatch {
            producer_id,
            producer_epoch,
            base_sequence: -1,
            last_sequence: -1,
            base_offset: first_offset,
            kind: RowKind::OpenTxn,
        }
    }

    /// The row of a transaction marker of `producer_id` at `producer_epoch`, at `offset`.
    pub fn marker(producer_id: i64, producer_epoch: i16, offset: Offset) -> Self {
        ProducerBatch {
            producer_id,
            producer_epoch,
            base_sequence: -1,
            last_sequence: -1,
            base_offset: offset,
            kind: RowKind::Marker,
        }
    }

    /// The carried row saying the partition's last complete chunk began at `offset`.
    pub fn checkpoint(offset: Offset) -> Self {
        ProducerBatch {
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            last_sequence: -1,
            base_offset: offset,
            kind: RowKind::Checkpoint,
        }
    }

    /// Whether this row is an open transaction rather than a batch.
    pub fn is_open_txn(&self) -> bool {
        self.kind == RowKind::OpenTxn
    }

    /// Whether this row is a transaction marker rather than a batch.
    pub fn is_marker(&self) -> bool {
        self.kind == RowKind::Marker
    }

    /// The batch's producer sequence, if it is an idempotent producer's, or its epoch if it
    /// is a producer's control batch (only markers are stored: produce refuses the rest).
    pub fn of(h: &BatchHeader) -> Option<ProducerBatch> {
        if h.producer_id < 0 {
            return None;
        }
        if h.is_control() {
            return Some(ProducerBatch::marker(
                h.producer_id,
                h.producer_epoch,
                h.base_offset,
            ));
        }
        (h.base_sequence >= 0).then(|| ProducerBatch {
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            base_sequence: h.base_sequence,
            last_sequence: h.last_sequence(),
            base_offset: h.base_offset,
            kind: RowKind::Batch,
        })
    }
}

/// The last [`RECENT_PER_PRODUCER`] batches of each producer among `batches` (one
/// partition's, in offset order), in offset order.
pub fn recent_of(batches: &[Bytes]) -> Vec<ProducerBatch> {
    let all: Vec<ProducerBatch> = batches
        .iter()
        .filter_map(|b| batch::peek_header(b).ok().flatten())
        .filter_map(|h| ProducerBatch::of(&h))
        .collect();
    let mut seen: HashMap<i64, usize> = HashMap::new();
    let mut keep = vec![false; all.len()];
    for (i, b) in all.iter().enumerate().rev() {
        let n = seen.entry(b.producer_id).or_insert(0);
        if *n < RECENT_PER_PRODUCER {
            *n += 1;
            keep[i] = true;
        }
    }
    all.into_iter()
        .zip(keep)
        .filter_map(|(b, k)| k.then_some(b))
        .collect()
}

/// Most producers a segment carries rows for: as many as a partition remembers
/// ([`crate::producer_state::PRODUCERS_MAX`]), each with up to [`RECENT_PER_PRODUCER`] rows
/// (3.2 MB at most). Sealed chunks carry at most [`CARRIED_ROWS_MAX`] rows of idle producers
/// because one is written every 250 ms per partition; a segment is written about once a
/// compaction interval, so it carries them all (ARCHITECTURE decision 16).
pub const SEGMENT_PRODUCERS_MAX: usize = crate::producer_state::PRODUCERS_MAX;

/// The last [`RECENT_PER_PRODUCER`] rows of each producer among the batches of a run being
/// compacted, seen in offset order. Bounded: past twice [`SEGMENT_PRODUCERS_MAX`] producers,
/// those whose newest row lies furthest back are dropped down to it (a run of invented
/// producer ids cannot grow the compactor's memory).
#[derive(Debug, Default)]
pub struct RunProducers {
    by_producer: HashMap<i64, std::collections::VecDeque<ProducerBatch>>,
}

impl RunProducers {
    /// Notes one batch of the run (offset order).
    pub fn observe(&mut self, h: &BatchHeader) {
        let Some(b) = ProducerBatch::of(h) else {
            return;
        };
        let recent = self.by_producer.entry(b.producer_id).or_default();
        recent.push_back(b);
        while recent.len() > RECENT_PER_PRODUCER {
            recent.pop_front();
        }
        if self.by_producer.len() > 2 * SEGMENT_PRODUCERS_MAX {
            let mut by_age: Vec<(Offset, i64)> = self
                .by_producer
                .iter()
                .map(|(id, r)| (r.back().map_or(-1, |b| b.base_offset), *id))
                .collect();
            by_age.sort_unstable();
            let drop = by_age.len() - SEGMENT_PRODUCERS_MAX;
            for (_, id) in by_age.into_iter().take(drop) {
                self.by_producer.remove(&id);
            }
        }
    }

    /// The rows noted, in no particular order.
    pub fn into_rows(self) -> impl Iterator<Item = ProducerBatch> {
        self.by_producer.into_values().flatten()
    }
}

/// The producer rows of a segment ending at `last_offset` (issue 16): what a partition's
/// next leader must learn from it. `rows` come from several sources (the last input's
/// rows, the run's own batches, the leader's memory) and may overlap; rows after
/// `last_offset` are left out. Per producer the newest row by offset decides its epoch,
/// and its last [`RECENT_PER_PRODUCER`] rows at that epoch are kept (what
/// [`crate::producer_state`] would remember after applying them all in offset order); at
/// most [`SEGMENT_PRODUCERS_MAX`] producers, those whose newest row lies furthest back going
/// first. An open transaction is kept once per producer, from its earliest first offset.
/// Open transactions come first, then the rest in offset order.
pub fn segment_rows(
    rows: impl IntoIterator<Item = ProducerBatch>,
    last_offset: Offset,
) -> Vec<ProducerBatch> {
    let mut open: std::collections::BTreeMap<i64, ProducerBatch> = Default::default();
    let mut by_producer: HashMap<i64, std::collections::BTreeMap<Offset, ProducerBatch>> =
        HashMap::new();
    for b in rows {
        if b.base_offset > last_offset {
            continue;
        }
        if b.is_open_txn() {
            let o = open.entry(b.producer_id).or_insert(b);
            if b.base_offset < o.base_offset {
                *o = b;
            }
            continue;
        }
        by_producer
            .entry(b.producer_id)
            .or_default()
            .insert(b.base_offset, b);
    }
    let mut producers: Vec<(Offset, i64, Vec<ProducerBatch>)> = by_producer
        .into_iter()
        .filter_map(|(id, rows)| {
            let (&newest, last) = rows.last_key_value()?;
            let epoch = last.producer_epoch;
            let mut kept: Vec<ProducerBatch> = rows
                .values()
                .rev()
                .take_while(|b| b.producer_epoch == epoch)
                .take(RECENT_PER_PRODUCER)
                .copied()
                .collect();
            kept.reverse();
            Some((newest, id, kept))
        })
        .collect();
    producers.sort_unstable_by_key(|(newest, id, _)| (std::cmp::Reverse(*newest), *id));
    producers.truncate(SEGMENT_PRODUCERS_MAX);
    let mut out: Vec<ProducerBatch> = open.into_values().collect();
    let mut rest: Vec<ProducerBatch> = producers.into_iter().flat_map(|(_, _, r)| r).collect();
    rest.sort_unstable_by_key(|b| (b.base_offset, b.producer_id));
    out.extend(rest);
    out
}

/// Appends the rows to an object body.
pub fn encode(rows: &[Row], out: &mut BytesMut) {
    for (chunk, b, carried) in rows {
        out.put_u32(*chunk);
        out.put_i64(b.producer_id);
        out.put_i16(b.producer_epoch);
        let kind = match b.kind {
            RowKind::Batch => 0,
            RowKind::OpenTxn => FLAG_OPEN_TXN,
            RowKind::Marker => FLAG_MARKER,
            RowKind::Checkpoint => FLAG_CHECKPOINT,
        };
        let carried = if *carried { FLAG_CARRIED } else { 0 };
        out.put_u16(carried | kind);
        out.put_i32(b.base_sequence);
        out.put_i32(b.last_sequence);
        out.put_i64(b.base_offset);
    }
}

/// Decodes a producers section of an object of `chunks` chunks; `None` if it is not one.
pub fn decode(mut section: &[u8], chunks: usize) -> Option<Vec<Row>> {
    if !section.len().is_multiple_of(ROW_BYTES) {
        return None;
    }
    let mut rows = Vec::with_capacity(section.len() / ROW_BYTES);
    while section.has_remaining() {
        let chunk = section.get_u32();
        let producer_id = section.get_i64();
        let producer_epoch = section.get_i16();
        let flags = section.get_u16();
        let carried = flags & FLAG_CARRIED != 0;
        let kind = match (
            flags & FLAG_OPEN_TXN != 0,
            flags & FLAG_MARKER != 0,
            flags & FLAG_CHECKPOINT != 0,
        ) {
            (false, false, false) => RowKind::Batch,
            (true, false, false) => RowKind::OpenTxn,
            (false, true, false) => RowKind::Marker,
            (false, false, true) => RowKind::Checkpoint,
            _ => return None,
        };
        let b = ProducerBatch {
            producer_id,
            producer_epoch,
            base_sequence: section.get_i32(),
            last_sequence: section.get_i32(),
            base_offset: section.get_i64(),
            kind,
        };
        // Sequences -1 are an open transaction's or a marker's, and only allowed for them;
        // an open transaction is always carried.
        let no_sequences = b.base_sequence == -1 && b.last_sequence == -1;
        let fits = match kind {
            RowKind::Batch => b.base_sequence >= 0 && b.producer_id >= 0,
            RowKind::OpenTxn => no_sequences && carried && b.producer_id >= 0,
            RowKind::Marker => no_sequences && b.producer_id >= 0,
            RowKind::Checkpoint => {
                no_sequences && carried && b.producer_id == -1 && b.base_offset >= 0
            }
        };
        if chunk as usize >= chunks || !fits {
            return None;
        }
        rows.push((chunk, b, carried));
    }
    Some(rows)
}

/// An object's producers section, by partition (each partition's batches in offset order).
#[derive(Debug, Default)]
pub struct ObjectProducers {
    by_partition: HashMap<TopicPartition, Vec<ProducerBatch>>,
    carried: HashMap<TopicPartition, Vec<ProducerBatch>>,
    open_txns: HashMap<TopicPartition, Vec<ProducerBatch>>,
    checkpoints: HashMap<TopicPartition, Offset>,
    rows: usize,
}

impl ObjectProducers {
    /// From (partition, batch, carried) rows.
    pub fn new(rows: impl IntoIterator<Item = (TopicPartition, ProducerBatch, bool)>) -> Self {
        let mut out = ObjectProducers::default();
        for (tp, b, carried) in rows {
            if b.kind == RowKind::Checkpoint {
                out.checkpoints.insert(tp, b.base_offset);
                continue;
            }
            let map = if b.is_open_txn() {
                &mut out.open_txns
            } else if carried {
                &mut out.carried
            } else {
                &mut out.by_partition
            };
            map.entry(tp).or_default().push(b);
            out.rows += 1;
        }
        out
    }

    /// The batches kept for `tp` (none if the object holds no idempotent batch of it).
    pub fn of(&self, tp: &TopicPartition) -> &[ProducerBatch] {
        self.by_partition.get(tp).map_or(&[], Vec::as_slice)
    }

    /// The batches carried for `tp`: other producers' remembered batches before its chunk.
    pub fn carried_of(&self, tp: &TopicPartition) -> &[ProducerBatch] {
        self.carried.get(tp).map_or(&[], Vec::as_slice)
    }

    /// Where `tp`'s last complete chunk began, if its chunk here is not one and says so.
    pub fn checkpoint_of(&self, tp: &TopicPartition) -> Option<Offset> {
        self.checkpoints.get(tp).copied()
    }

    /// The transactions open in `tp` when its chunk was sealed (rows flagged so).
    pub fn open_txns_of(&self, tp: &TopicPartition) -> &[ProducerBatch] {
        self.open_txns.get(tp).map_or(&[], Vec::as_slice)
    }
}

type Slot = Arc<OnceCell<Arc<ObjectProducers>>>;

/// Summaries fetched recently, shared by the opens of a takeover: one fetch per object
/// however many partitions ask for it at once, reused for [`REUSE`], at most [`ROWS_MAX`]
/// rows held (the oldest go first).
pub struct ProducerSummaries {
    clock: Arc<dyn Clock>,
    slots: Mutex<HashMap<String, (tokio::time::Instant, Slot)>>,
}

/// Why no summary could be had for an object or segment: it has none (format version 1), it is gone,
/// or it could not be read or checked. Callers read the partition's batches instead.
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    #[error("the object has no producers section")]
    Absent,
    #[error(transparent)]
    Fetch(#[from] FetchIndexError),
}

impl ProducerSummaries {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        ProducerSummaries {
            clock,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The producers section of the object or segment `entry` names (a sealed object's,
    /// [`object::fetch_producers`], or a segment's, [`crate::segment::fetch_producers`]),
    /// fetched once for all callers asking meanwhile.
    pub async fn of(
        &self,
        store: &Arc<dyn ObjectStore>,
        entry: &CatalogEntry,
    ) -> std::result::Result<Arc<ObjectProducers>, SummaryError> {
        let slot = self.slot(&entry.object_key)?;
        let fetched = slot
            .get_or_try_init(|| {
                let store = store.clone();
                let entry = entry.clone();
                async move {
                    let fetched = match entry.layout {
                        EntryLayout::Batches => {
                            object::fetch_producers(store.as_ref(), &entry.object_key).await
                        }
                        EntryLayout::SegmentIndex => {
                            crate::segment::fetch_producers(store.as_ref(), &entry).await
                        }
                    };
                    match fetched {
                        Ok(Some(p)) => Ok(Arc::new(p)),
                        Ok(None) => Err(SummaryError::Absent),
                        Err(e) => Err(SummaryError::Fetch(e)),
                    }
                }
                .boxed()
            })
            .await?
            .clone();
        self.trim();
        Ok(fetched)
    }

    fn slot(&self, key: &str) -> std::result::Result<Slot, SummaryError> {
        let mut slots = self.slots.lock().map_err(|_| {
            SummaryError::Fetch(FetchIndexError::Object(Error::Internal(
                "producer summary lock poisoned".into(),
            )))
        })?;
        let now = self.clock.now();
        slots.retain(|_, (at, _)| now.saturating_duration_since(*at) < REUSE);
        Ok(slots
            .entry(key.to_string())
            .or_insert_with(|| (now, Arc::new(OnceCell::new())))
            .1
            .clone())
    }

    /// Drops the oldest summaries (by fetch time, then key: deterministic) while more than
    /// [`ROWS_MAX`] rows are held.
    fn trim(&self) {
        let Ok(mut slots) = self.slots.lock() else {
            return;
        };
        let rows = |slots: &HashMap<String, (tokio::time::Instant, Slot)>| -> usize {
            slots
                .values()
                .filter_map(|(_, s)| s.get().map(|p| p.rows))
                .sum()
        };
        let mut held = rows(&slots);
        if held <= ROWS_MAX {
            return;
        }
        let mut by_age: Vec<(tokio::time::Instant, String, usize)> = slots
            .iter()
            .filter_map(|(k, (at, s))| s.get().map(|p| (*at, k.clone(), p.rows)))
            .collect();
        by_age.sort();
        for (_, key, n) in by_age {
            if held <= ROWS_MAX {
                break;
            }
            slots.remove(&key);
            held -= n;
        }
    }
}

impl From<SummaryError> for Error {
    fn from(e: SummaryError) -> Error {
        Error::ObjectStore(e.to_string())
    }
}

#[cfg(test)]
mod tests;
