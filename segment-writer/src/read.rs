//! Reads: from the partition's in-memory tail when it holds the offset, else from sealed
//! objects and segments through the read cache (design brief → Read path).
//!
//! A catalog entry of a sealed object names the range of batches; one of a segment names
//! its index, from which the chunk holding the offset (or timestamp) is found and read —
//! every range checked against its CRC. An object may vanish under a reader that looked
//! its entry up before compaction swapped it out (past the delete delay): NotFound makes
//! the reader look the catalog up again, once per position.

use crate::batch;
use crate::error::{Error, Result};
use crate::log::{LogManager, Partition};
use crate::object;
use crate::partition::ReadPlan;
use crate::read_pieces::{self, Piece, PieceMaps};
pub use crate::read_result::{Isolation, ReadResult, ReadSource};
use crate::segment::SegmentIndex;
use crate::txn::{AbortedTxn, OutcomeScan};
use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStoreExt;
use oxbow_metadata::{AbortWalk, CatalogEntry, EntryLayout, Offset, TopicPartition, WalkStep};
use std::sync::atomic::Ordering;

mod collect;
use collect::Collect;

/// Catalog entries fetched per lookup when reading from objects.
const CATALOG_ENTRIES_PER_READ: usize = 16;

/// Read-ahead bounds of a `read_committed` read that resolves its transactions' outcomes
/// by walking batches ([`OutcomeScan`]): past either, the read is cut before the first
/// transaction whose marker was not reached.
const OUTCOME_SCAN_BYTES_MAX: usize = 16 << 20;
const OUTCOME_SCAN_READS_MAX: usize = 64;
/// One read-ahead step of that walk.
const OUTCOME_SCAN_READ_BYTES: usize = 1 << 20;

/// Catalog entries looked up at a time by a walk of the catalogue's aborted-transaction
/// index ([`oxbow_metadata::AbortWalk`]), and the most one read visits: past it the read
/// walks headers instead. Usually the entry holding the offset, or the next, ends it.
const ABORT_WALK_PAGE: usize = 8;
const ABORT_WALK_ENTRIES_MAX: usize = 64;

/// What the catalogue's aborted-transaction index says for a read.
#[derive(Debug)]
enum IndexedAborts {
    /// Every abort the read must be told of.
    Complete(Vec<AbortedTxn>),
    /// Those whose markers are below `next`: the index ends there (or its walk's bound).
    Through {
        aborts: Vec<AbortedTxn>,
        next: Offset,
    },
    /// An entry on the way has no index.
    Unknown,
}

impl LogManager {
    /// Reads up to `max_bytes` of whole batches at `offset` (at least one if `min_one`).
    pub async fn read(
        &self,
        partition: &Partition,
        offset: Offset,
        max_bytes: usize,
        min_one: bool,
    ) -> Result<ReadResult> {
        let (plan, log_start_offset, high_watermark, sealed_end) = {
            let s = partition.lock()?;
            (
                s.plan_read(offset, max_bytes, min_one)?,
                s.log_start_offset,
                s.high_watermark,
                s.sealed_end,
            )
        };
        let (batches, source, ranges) = match plan {
            ReadPlan::Memory(b) => (b, ReadSource::Tail, Vec::new()),
            ReadPlan::Objects => {
                let tp = partition.topic_partition;
                let mut acc = Collect::new(offset, max_bytes, min_one);
                self.collect_catalogued(tp, sealed_end, &mut acc).await?;
                let mut out = acc.out;
                if acc.total < max_bytes && acc.next >= sealed_end {
                    let s = partition.lock()?;
                    for b in s.read_memory_from(acc.next, max_bytes - acc.total) {
                        out.push(b);
                    }
                }
                (out, acc.source, acc.ranges)
            }
        };
        Ok(ReadResult {
            batches,
            log_start_offset,
            high_watermark,
            last_stable_offset: partition.lock()?.last_stable_offset(),
            aborted: None,
            source,
            ranges,
        })
    }

    /// [`Self::read`] at an isolation level. `read_committed` reads stop before the last
    /// stable offset (from memory and from objects, which are catalogued up to `sealed_end`,
    /// possibly past it) and carry the aborted transactions overlapping what they return:
    /// from the partition's index at or after its `index_floor`, below it from the
    /// catalogue's index ([`Self::indexed_aborts`]), joined by the partition's where the
    /// catalogue ends at or past the floor, and only where neither answers found by walking
    /// the batches (and those after them, bounded: past the bound the read is cut before the
    /// first transaction whose outcome is unknown).
    pub async fn read_isolated(
        &self,
        partition: &Partition,
        offset: Offset,
        max_bytes: usize,
        min_one: bool,
        isolation: Isolation,
    ) -> Result<ReadResult> {
        if isolation == Isolation::ReadUncommitted {
            return self.read(partition, offset, max_bytes, min_one).await;
        }
        let (lso, index_floor) = {
            let s = partition.lock()?;
            (s.last_stable_offset(), s.index_floor())
        };
        let mut r = if offset >= lso {
            // Nothing stable to return; still refuse an offset outside the log.
            let s = partition.lock()?;
            s.plan_read(offset, 0, false)?;
            ReadResult {
                batches: Vec::new(),
                log_start_offset: s.log_start_offset,
                high_watermark: s.high_watermark,
                last_stable_offset: lso,
                aborted: None,
                source: ReadSource::Tail,
                ranges: Vec::new(),
            }
        } else {
            let mut r = self.read(partition, offset, max_bytes, min_one).await?;
            truncate_at(&mut r.batches, lso);
            r.last_stable_offset = lso;
            r
        };
        let aborted = match batches_end(&r.batches) {
            None => Vec::new(),
            Some(end) if offset >= index_floor => partition.lock()?.aborted_in(offset, end),
            Some(end) => {
                // Below the in-memory index: the catalogue's, joined (where it ends at or
                // past the floor) by the in-memory one for markers since the floor.
                match self
                    .indexed_aborts(partition.topic_partition, offset, end)
                    .await?
                {
                    IndexedAborts::Complete(aborted) => aborted,
                    IndexedAborts::Through { mut aborts, next } if next >= index_floor => {
                        aborts.extend(partition.lock()?.aborted_in(offset, end));
                        aborts.sort_by_key(|a| (a.first_offset, a.producer_id));
                        aborts.dedup();
                        aborts
                    }
                    _ => {
                        self.metrics
                            .aborts_by_header_walk
                            .fetch_add(1, Ordering::Relaxed);
                        let hw = r.high_watermark;
                        self.resolve_by_scan(&mut r.batches, end, hw, |next| {
                            self.read(partition, next, OUTCOME_SCAN_READ_BYTES, true)
                        })
                        .await?
                    }
                }
            }
        };
        r.aborted = Some(aborted);
        Ok(r)
    }

    /// The aborts a `read_committed` read of `tp` from `offset` up to `upper` must be told
    /// of, from the catalogue's index ([`oxbow_metadata::catalog_txn`]): lookups in the
    /// in-memory catalogue, at most [`ABORT_WALK_ENTRIES_MAX`] entries.
    async fn indexed_aborts(
        &self,
        tp: TopicPartition,
        offset: Offset,
        upper: Offset,
    ) -> Result<IndexedAborts> {
        let mut walk = AbortWalk::new(offset, upper);
        let mut from = offset;
        let mut visited = 0usize;
        let found = loop {
            let entries = self
                .metadata
                .catalog_entries(tp.topic_id, tp.partition, from, ABORT_WALK_PAGE)
                .await?;
            for e in &entries {
                visited += 1;
                match walk.feed(e) {
                    WalkStep::More => {}
                    WalkStep::Done => break,
                    WalkStep::Unknown => return Ok(IndexedAborts::Unknown),
                }
            }
            if walk.is_done() {
                break IndexedAborts::Complete(walk.aborts());
            }
            let Some(next) = walk.next() else {
                return Ok(IndexedAborts::Unknown);
            };
            if entries.len() < ABORT_WALK_PAGE || visited >= ABORT_WALK_ENTRIES_MAX || next <= from
            {
                break IndexedAborts::Through {
                    aborts: walk.aborts(),
                    next,
                };
            }
            from = next;
        };
        if matches!(found, IndexedAborts::Complete(_)) {
            self.metrics
                .aborts_from_catalog
                .fetch_add(1, Ordering::Relaxed);
        }
        Ok(found)
    }

    /// A catalog entry's byte range, by a ranged GET (unchecked: callers verify its CRC).
    pub(crate) async fn get_entry_range(&self, entry: &CatalogEntry) -> Result<Bytes> {
        self.get_object_range(&entry.object_key, entry.byte_start, entry.byte_len)
            .await
    }

    /// `len` bytes of object `key` from `start`, by a ranged GET (unchecked).
    async fn get_object_range(&self, key: &str, start: u64, len: u64) -> Result<Bytes> {
        let path = ObjectPath::from(key);
        self.objects
            .get_range(&path, start..start + len)
            .await
            .map_err(|e| match e {
                object_store::Error::NotFound { .. } => Error::ObjectNotFound(key.to_string()),
                e => Error::ObjectStore(format!("GET {key}: {e}")),
            })
    }

    /// Finds the aborted transactions of `batches` (ending at `end`) by walking them and,
    /// while some transaction's marker is missing, the batches after them up to `upper`
    /// (`read_ahead(next)` reads from `next`), within the scan bounds; cuts `batches` before
    /// the first transaction whose outcome stays unknown.
    async fn resolve_by_scan<F, Fut>(
        &self,
        batches: &mut Vec<Bytes>,
        end: Offset,
        upper: Offset,
        read_ahead: F,
    ) -> Result<Vec<AbortedTxn>>
    where
        F: Fn(Offset) -> Fut,
        Fut: std::future::Future<Output = Result<ReadResult>>,
    {
        let mut scan = OutcomeScan::default();
        for b in batches.iter() {
            if let Some(h) = batch::peek_header(b)? {
                scan.returned(&h, b);
            }
        }
        let mut next = end;
        let (mut reads, mut bytes) = (0usize, 0usize);
        while !scan.resolved()
            && next < upper
            && reads < OUTCOME_SCAN_READS_MAX
            && bytes < OUTCOME_SCAN_BYTES_MAX
        {
            let ahead = read_ahead(next).await?;
            reads += 1;
            let Some(ahead_end) = batches_end(&ahead.batches) else {
                break;
            };
            for b in &ahead.batches {
                bytes += b.len();
                if let Some(h) = batch::peek_header(b)? {
                    if h.last_offset() >= next {
                        scan.ahead(&h, b);
                    }
                }
            }
            if ahead_end <= next {
                break;
            }
            next = ahead_end;
        }
        let outcomes = scan.finish();
        if let Some(cut) = outcomes.cut_at {
            truncate_at(batches, cut);
        }
        Ok(outcomes.aborted)
    }

    /// [`Self::read_catalogued`] at an isolation level. A broker that does not lead the
    /// partition does not know its open transactions: a `read_committed` read is told of
    /// aborts by the catalogue's index ([`Self::indexed_aborts`]) when it reaches an entry
    /// whose stop hint passes what it returns; else it walks the batches for their outcomes
    /// up to the catalogue's end, and stops before any transaction whose marker is not
    /// catalogued yet.
    pub async fn read_catalogued_isolated(
        &self,
        tp: TopicPartition,
        log_start_offset: Offset,
        offset: Offset,
        max_bytes: usize,
        min_one: bool,
        isolation: Isolation,
    ) -> Result<ReadResult> {
        let mut r = self
            .read_catalogued(tp, log_start_offset, offset, max_bytes, min_one)
            .await?;
        if isolation == Isolation::ReadUncommitted {
            return Ok(r);
        }
        let aborted = match batches_end(&r.batches) {
            None => Vec::new(),
            Some(end) => match self.indexed_aborts(tp, offset, end).await? {
                IndexedAborts::Complete(aborted) => aborted,
                _ => {
                    self.metrics
                        .aborts_by_header_walk
                        .fetch_add(1, Ordering::Relaxed);
                    let upper = r.high_watermark;
                    self.resolve_by_scan(&mut r.batches, end, upper, |next| {
                        self.read_catalogued(
                            tp,
                            log_start_offset,
                            next,
                            OUTCOME_SCAN_READ_BYTES,
                            true,
                        )
                    })
                    .await?
                }
            },
        };
        // What it could show: everything before the first unknown outcome.
        r.last_stable_offset =
            batches_end(&r.batches).map_or(offset.max(log_start_offset), |e| e.max(offset));
        r.aborted = Some(aborted);
        Ok(r)
    }

    /// Reads catalogued batches of `tp` before `end` into `acc`, following the catalog.
    async fn collect_catalogued(
        &self,
        tp: TopicPartition,
        end: Offset,
        acc: &mut Collect,
    ) -> Result<()> {
        // Where the catalog was last looked up again after a NotFound.
        let mut relooked_at: Option<Offset> = None;
        while acc.next < end && acc.total < acc.max_bytes && !acc.stopped {
            let entries = self
                .metadata
                .catalog_entries(
                    tp.topic_id,
                    tp.partition,
                    acc.next,
                    CATALOG_ENTRIES_PER_READ,
                )
                .await?;
            if entries.is_empty() {
                break;
            }
            match self.read_entries(&entries, acc).await {
                Ok(()) => {}
                // Compaction replaced these entries and deleted their object after its
                // grace period: the catalog names where the data is now. Look it up again,
                // once per position.
                Err(Error::ObjectNotFound(key)) if relooked_at != Some(acc.next) => {
                    tracing::debug!(%key, offset = acc.next, "object gone; looking the catalog up again");
                    relooked_at = Some(acc.next);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// [`Self::catalog_end`] after bringing the catalog up to date with everything
    /// committed before now (lookups are served from memory; another broker's last commits
    /// may not have arrived yet): for a broker taking the partition over.
    pub async fn synced_catalog_end(
        &self,
        tp: TopicPartition,
        log_start_offset: Offset,
    ) -> Result<Offset> {
        self.metadata
            .sync_catalog(tp.topic_id, tp.partition)
            .await?;
        self.catalog_end(tp, log_start_offset).await
    }

    /// Where the catalogued log of `tp` ends (one past its last catalogued offset; the log
    /// start when nothing at or after it is catalogued).
    pub async fn catalog_end(
        &self,
        tp: TopicPartition,
        log_start_offset: Offset,
    ) -> Result<Offset> {
        Ok(self
            .metadata
            .catalog_last(tp.topic_id, tp.partition)
            .await?
            .map_or(log_start_offset, |e| e.next_offset())
            .max(log_start_offset))
    }

    /// Reads a partition this broker does not lead, from the object store alone: every
    /// broker can serve what is catalogued (it lags the leader by at most a flush
    /// interval), so the HTTP front end of any broker can read any partition. The high
    /// watermark returned is the catalog's end.
    pub async fn read_catalogued(
        &self,
        tp: TopicPartition,
        log_start_offset: Offset,
        offset: Offset,
        max_bytes: usize,
        min_one: bool,
    ) -> Result<ReadResult> {
        let end = self.catalog_end(tp, log_start_offset).await?;
        if offset < log_start_offset || offset > end {
            return Err(Error::OffsetOutOfRange {
                offset,
                log_start: log_start_offset,
                log_end: end,
            });
        }
        let mut acc = Collect::new(offset, max_bytes, min_one);
        self.collect_catalogued(tp, end, &mut acc).await?;
        Ok(ReadResult {
            batches: acc.out,
            log_start_offset,
            high_watermark: end,
            last_stable_offset: end,
            aborted: None,
            source: acc.source,
            ranges: acc.ranges,
        })
    }

    /// The bytes of one catalog entry, from the cache or a ranged GET, checksum-verified.
    /// A range read back from the cache's disk tier is checked like a GET; one that fails
    /// is fetched again.
    pub(crate) async fn read_entry(&self, entry: &CatalogEntry) -> Result<Bytes> {
        Ok(self.read_entry_from(entry, entry.base_offset).await?.0)
    }

    /// [`Self::read_entry`], with where the bytes came from; `from` is where the reader
    /// will read them from (what of a large range fetched is cached, see
    /// [`crate::read_ahead::ReadAhead::cache_read`]).
    async fn read_entry_from(
        &self,
        entry: &CatalogEntry,
        from: Offset,
    ) -> Result<(Bytes, ReadSource)> {
        let hit = self
            .cache
            .get(&entry.object_key, entry.byte_start, entry.byte_len)
            .await;
        if let Some(found) = self.cache_hit(hit, |b| self.checked(entry, b)) {
            return Ok(found);
        }
        // Being fetched (prefetched, or read by another reader): wait for that GET (its
        // bytes are checked) rather than send a second one.
        let claim = match self.read_ahead.join_or_claim(entry).settle().await {
            Ok(bytes) => return Ok((bytes, ReadSource::ObjectStore)),
            Err(claim) => claim,
        };
        self.metrics.object_reads.fetch_add(1, Ordering::Relaxed);
        let bytes = self.get_entry_range(entry).await?;
        self.checked(entry, &bytes)?;
        self.read_ahead.cache_read(entry, &bytes, from);
        if let Some(claim) = claim {
            claim.land(&bytes);
        }
        Ok((bytes, ReadSource::ObjectStore))
    }

    /// `bytes` against `entry`'s checksum, counted and logged when they fail it.
    /// A cache hit, counted, with where it came from; one read back from the disk tier is
    /// served only if `verify` passes (memory holds only what was checked going in).
    fn cache_hit(
        &self,
        hit: Option<oxbow_cache::Hit>,
        verify: impl FnOnce(&Bytes) -> Result<()>,
    ) -> Option<(Bytes, ReadSource)> {
        let hit = hit?;
        if hit.from_disk && verify(&hit.bytes).is_err() {
            return None;
        }
        self.metrics.cache_hits.fetch_add(1, Ordering::Relaxed);
        let source = if hit.from_disk {
            ReadSource::CacheDisk
        } else {
            ReadSource::CacheMemory
        };
        Some((hit.bytes, source))
    }

    fn checked(&self, entry: &CatalogEntry, bytes: &Bytes) -> Result<()> {
        object::verify_range(entry, bytes).inspect_err(|e| {
            self.metrics
                .checksum_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::error!(error = %e, object = %entry.object_key,
                "object data failed its checksum; not serving it");
        })
    }

    /// Reads the batches of `entries` (one partition's, in offset order) from `acc.next` on
    /// into `acc`, until it is full. A segment entry is read through its index: the chunks
    /// from the one holding `acc.next`.
    /// Each range read keeps the read-ahead window after it fetched ([`crate::read_ahead`]).
    async fn read_entries(&self, entries: &[CatalogEntry], acc: &mut Collect) -> Result<()> {
        for (at, entry) in entries.iter().enumerate() {
            match entry.layout {
                EntryLayout::Batches => {
                    self.read_ahead.ahead(
                        acc.next,
                        entry,
                        entries[at + 1..]
                            .iter()
                            .take_while(|e| e.layout == EntryLayout::Batches)
                            .cloned(),
                    );
                    self.read_range_into(entry, acc).await?
                }
                EntryLayout::SegmentIndex => {
                    let (index, source) = self.segment_index_from(entry).await?;
                    acc.source = acc.source.max(source);
                    let mut i = index.chunk_for_offset(acc.next);
                    // A clipped entry serves only up to its last offset (see
                    // `oxbow_metadata::catalog_view`).
                    while let Some(mut chunk) = index.chunk_entry(entry, i) {
                        if acc.stopped || acc.total >= acc.max_bytes || acc.next > entry.last_offset
                        {
                            return Ok(());
                        }
                        self.read_ahead.ahead(
                            acc.next,
                            &chunk,
                            (i + 1..).map_while(|j| index.chunk_entry(entry, j)),
                        );
                        chunk.last_offset = chunk.last_offset.min(entry.last_offset);
                        self.read_range_into(&chunk, acc).await?;
                        i += 1;
                    }
                }
            }
            if acc.stopped || acc.total >= acc.max_bytes {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Ranges read-ahead fetched into the cache so far.
    pub fn read_ahead_fetched(&self) -> u64 {
        self.read_ahead.fetched.load(Ordering::Relaxed)
    }

    /// Reads one range of batches (a sealed object's chunk or a segment's chunk) into `acc`.
    /// A range too large to cache whole is read as pieces once it was cut
    /// ([`crate::read_pieces`]); a piece failing its CRC makes it read whole again, checked
    /// against the catalogue's CRC.
    async fn read_range_into(&self, entry: &CatalogEntry, acc: &mut Collect) -> Result<()> {
        if entry.layout == EntryLayout::Batches && PieceMaps::wants(&self.cache, entry) {
            if let Some(cut) = self.read_ahead.pieces.get(entry) {
                match self.read_pieces_into(entry, &cut, acc).await {
                    Err(Error::ChecksumMismatch { .. }) => {
                        // Counted and logged in `piece_bytes`; the whole range decides.
                        self.read_ahead.pieces.forget(entry);
                    }
                    done => return done,
                }
            }
        }
        let (range, source) = self.read_entry_from(entry, acc.next).await?;
        acc.source = acc.source.max(source);
        acc.take_range(entry, &range)
    }

    /// [`Self::read_range_into`] from the pieces of `entry`'s range (`cut`), from the one
    /// holding `acc.next` on, each from the cache or fetched alone.
    async fn read_pieces_into(
        &self,
        entry: &CatalogEntry,
        cut: &[Piece],
        acc: &mut Collect,
    ) -> Result<()> {
        let from = read_pieces::piece_at(cut, acc.next);
        for p in cut[from..]
            .iter()
            .take_while(|p| p.first_offset <= entry.last_offset)
        {
            if acc.total >= acc.max_bytes && !acc.out.is_empty() {
                // Full: the next piece would not be read from.
                return Ok(());
            }
            let (bytes, source) = self.piece_bytes(entry, p).await?;
            acc.source = acc.source.max(source);
            if acc.take_batches(entry, &bytes) {
                return Ok(());
            }
        }
        acc.check_reached(entry)
    }

    /// The bytes of piece `p` of `entry`'s range: from the cache (read back from its disk
    /// tier, checked like a GET), a prefetch in flight, or a ranged GET of the piece alone,
    /// checked against the piece's CRC and cached.
    async fn piece_bytes(&self, entry: &CatalogEntry, p: &Piece) -> Result<(Bytes, ReadSource)> {
        let hit = self.cache.get(&entry.object_key, p.start, p.len).await;
        if let Some(found) = self.cache_hit(hit, |b| p.verify(&entry.object_key, b)) {
            return Ok(found);
        }
        let claim = match self.read_ahead.join_or_claim_piece(entry, p).settle().await {
            Ok(bytes) => return Ok((bytes, ReadSource::ObjectStore)),
            Err(claim) => claim,
        };
        self.metrics.object_reads.fetch_add(1, Ordering::Relaxed);
        let bytes = self
            .get_object_range(&entry.object_key, p.start, p.len)
            .await?;
        p.verify(&entry.object_key, &bytes).inspect_err(|e| {
            self.metrics
                .checksum_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::error!(error = %e, object = %entry.object_key,
                "a piece of object data failed its checksum; reading its range whole");
        })?;
        self.cache
            .insert_scanned(&entry.object_key, p.start, p.len, bytes.clone());
        if let Some(claim) = claim {
            claim.land(&bytes);
        }
        Ok((bytes, ReadSource::ObjectStore))
    }

    /// The index of the segment a catalog entry names: fetched through the cache and
    /// checked against the entry's CRC, like any range.
    pub(crate) async fn segment_index(&self, entry: &CatalogEntry) -> Result<SegmentIndex> {
        Ok(self.segment_index_from(entry).await?.0)
    }

    /// [`Self::segment_index`], with where its bytes came from.
    async fn segment_index_from(&self, entry: &CatalogEntry) -> Result<(SegmentIndex, ReadSource)> {
        let (bytes, source) = self.read_entry_from(entry, entry.base_offset).await?;
        let index = SegmentIndex::decode(&entry.object_key, &bytes)?;
        // The entry may be clipped to part of the segment, never more than it.
        if index.base_offset() > entry.base_offset || index.last_offset() < entry.last_offset {
            return Err(Error::ChecksumMismatch {
                key: format!(
                    "{} (index does not match its catalog entry)",
                    entry.object_key
                ),
                start: entry.byte_start,
                end: entry.byte_start + entry.byte_len,
            });
        }
        Ok((index, source))
    }

    /// The first batch (below the high watermark) whose max timestamp is at or after
    /// `timestamp_ms`; the caller finds the exact record inside it.
    pub async fn find_batch_by_timestamp(
        &self,
        partition: &Partition,
        timestamp_ms: i64,
    ) -> Result<Option<Bytes>> {
        let mut relooked = false;
        loop {
            match self.find_sealed_by_timestamp(partition, timestamp_ms).await {
                Ok(Some(b)) => return Ok(Some(b)),
                Ok(None) => break,
                // Compacted away under us: the catalog names the new segment (see `read`).
                Err(Error::ObjectNotFound(_)) if !relooked => relooked = true,
                Err(e) => return Err(e),
            }
        }
        Ok(partition.lock()?.find_timestamp_in_memory(timestamp_ms))
    }

    async fn find_sealed_by_timestamp(
        &self,
        partition: &Partition,
        timestamp_ms: i64,
    ) -> Result<Option<Bytes>> {
        let tp = partition.topic_partition;
        let Some(entry) = self
            .metadata
            .catalog_find_timestamp(tp.topic_id, tp.partition, timestamp_ms)
            .await?
        else {
            return Ok(None);
        };
        let log_start = partition.lock()?.log_start_offset;
        // The offsets the entry serves (it may be clipped; see `oxbow_metadata::catalog_view`).
        let (serve_first, serve_last) = (entry.base_offset, entry.last_offset);
        let chunks = match entry.layout {
            EntryLayout::Batches => vec![entry],
            EntryLayout::SegmentIndex => {
                // The time index names the first chunk reaching the timestamp; later chunks
                // only matter if that one's batches all lie below the log start.
                let index = self.segment_index(&entry).await?;
                match index.chunk_for_timestamp(timestamp_ms) {
                    Some(first) => (first..index.chunks.len())
                        .filter_map(|i| index.chunk_entry(&entry, i))
                        .collect(),
                    None => Vec::new(),
                }
            }
        };
        for chunk in chunks {
            let range = self.read_entry(&chunk).await?;
            let found = batch::iter_batches(&range)
                .take_while(|(h, _)| h.base_offset <= serve_last)
                .find(|(h, _)| {
                    h.max_timestamp >= timestamp_ms && h.last_offset() >= log_start.max(serve_first)
                })
                .map(|(_, b)| b);
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }
}

/// One past the last offset of `batches` (whole batches in offset order).
fn batches_end(batches: &[Bytes]) -> Option<Offset> {
    let last = batches.last()?;
    batch::peek_header(last)
        .ok()
        .flatten()
        .map(|h| h.last_offset() + 1)
}

/// Drops the batches from the first one reaching `upper` on.
fn truncate_at(batches: &mut Vec<Bytes>, upper: Offset) {
    let keep = batches
        .iter()
        .position(|b| {
            batch::peek_header(b)
                .ok()
                .flatten()
                .is_none_or(|h| h.last_offset() >= upper)
        })
        .unwrap_or(batches.len());
    batches.truncate(keep);
}
