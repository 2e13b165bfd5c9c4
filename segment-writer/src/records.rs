//! The records inside a RecordBatch v2, walked in place: no record is built, nothing is
//! reserved from a length or count the input claims, and every length is checked against
//! the bytes that are really there.
//!
//! One walker serves produce validation ([`crate::validate`]) and every read that looks
//! inside a batch (HTTP reads, consumer polls, ListOffsets by time), so what was accepted is
//! exactly what can be read back. A compressed batch's records are first decompressed with
//! the bounded [`crate::decompress`]; uncompressed records are borrowed from the batch.
//!
//! Record layout (Kafka's `DefaultRecord`; varints zigzag-encoded): length varint, then
//! `length` bytes of: attributes i8, timestampDelta varlong, offsetDelta varint, keyLength
//! varint + key (negative: null), valueLength varint + value (negative: null),
//! headerCount varint, and per header keyLength varint (≥ 0) + key, valueLength varint +
//! value (negative: null). The body must be consumed exactly, and after `recordCount`
//! records no byte may be left (Kafka: "Incorrect declared batch size").

use crate::batch::{BatchHeader, BATCH_HEADER_BYTES};
use crate::decompress::{decompress, Codec};
use crate::error::{Error, Result};
use std::borrow::Cow;

/// One record, borrowed from its batch's (decompressed) records section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// Number of headers (already checked to decode).
    pub header_count: usize,
    headers: &'a [u8],
    /// The whole encoded record, its length prefix included.
    encoded: &'a [u8],
}

impl<'a> RecordRef<'a> {
    /// The record exactly as encoded in its batch (length prefix included): key compaction
    /// ([`crate::key_compact`]) copies retained records byte for byte.
    pub fn encoded(&self) -> &'a [u8] {
        self.encoded
    }

    /// The record's headers as (key, value). They were checked when the record was walked.
    pub fn headers(&self) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a {
        let mut cur = Cursor::new(self.headers);
        let mut left = self.header_count;
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            let (key, value) = cur.header().ok()?;
            Some((key, value))
        })
    }
}

/// The records section of a batch (after the 61-byte header): borrowed if uncompressed,
/// decompressed within `limit` bytes otherwise.
pub fn records_section<'a>(
    batch: &'a [u8],
    header: &BatchHeader,
    limit: usize,
) -> Result<Cow<'a, [u8]>> {
    let raw = batch.get(BATCH_HEADER_BYTES..header.size).ok_or_else(|| {
        Error::CorruptBatch(format!("batch of {} bytes is cut short", batch.len()))
    })?;
    match Codec::from_attributes(header.attributes)? {
        Codec::None => Ok(Cow::Borrowed(raw)),
        codec => Ok(Cow::Owned(decompress(codec, raw, limit)?)),
    }
}

/// Walks `count` records in `section`, then checks that nothing is left over. Yields an
/// error (once, then stops) at the first record that does not decode.
pub fn walk(section: &[u8], count: i32) -> RecordIter<'_> {
    RecordIter {
        cur: Cursor::new(section),
        count: usize::try_from(count).unwrap_or(0),
        index: 0,
        done: false,
    }
}

/// Iterator of [`walk`].
pub struct RecordIter<'a> {
    cur: Cursor<'a>,
    count: usize,
    index: usize,
    done: bool,
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<RecordRef<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.index == self.count {
            self.done = true;
            let left = self.cur.remaining();
            return (left > 0).then(|| {
                Err(Error::InvalidRecord(format!(
                    "{left} bytes remain after the batch's {} declared records",
                    self.count
                )))
            });
        }
        let index = self.index;
        self.index += 1;
        let record = self.cur.record().map_err(|why| {
            Error::InvalidRecord(format!(
                "record {index} of the batch does not decode: {why}"
            ))
        });
        if record.is_err() {
            self.done = true;
        }
        Some(record)
    }
}

/// A position in a byte slice; every read is checked against the slice's end.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// Why a record does not decode (the walker adds which record).
type Why = String;

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn byte(&mut self) -> std::result::Result<u8, Why> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| "ends inside a field".to_string())?;
        self.pos += 1;
        Ok(b)
    }

    /// An unsigned LEB128 of at most `max_bytes` bytes (5 for a varint, 10 for a varlong,
    /// as Kafka's `ByteUtils` reads them).
    fn unsigned(&mut self, max_bytes: u32) -> std::result::Result<u64, Why> {
        let mut value = 0u64;
        for i in 0..max_bytes {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!("varint longer than {max_bytes} bytes"))
    }

    fn varint(&mut self) -> std::result::Result<i32, Why> {
        let v = self.unsigned(5)? as u32;
        Ok(((v >> 1) as i32) ^ -((v & 1) as i32))
    }

    fn varlong(&mut self) -> std::result::Result<i64, Why> {
        let v = self.unsigned(10)?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    fn take(&mut self, len: usize) -> std::result::Result<&'a [u8], Why> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|end| *end <= self.buf.len())
            .ok_or_else(|| format!("a length of {len} bytes runs past the record's end"))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// A varint length and that many bytes; a negative length is null.
    fn nullable_bytes(&mut self) -> std::result::Result<Option<&'a [u8]>, Why> {
        let len = self.varint()?;
        match usize::try_from(len) {
            Ok(len) => self.take(len).map(Some),
            Err(_) => Ok(None),
        }
    }

    fn header(&mut self) -> std::result::Result<(&'a [u8], Option<&'a [u8]>), Why> {
        let key_len = self.varint()?;
        let key_len = usize::try_from(key_len)
            .map_err(|_| format!("negative header key length {key_len}"))?;
        let key = self.take(key_len)?;
        let value = self.nullable_bytes()?;
        Ok((key, value))
    }

    fn record(&mut self) -> std::result::Result<RecordRef<'a>, Why> {
        let start = self.pos;
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| format!("negative record length {len}"))?;
        let body = self.take(len)?;
        let mut r = Cursor::new(body);
        let _attributes = r.byte()?;
        let timestamp_delta = r.varlong()?;
        let offset_delta = r.varint()?;
        let key = r.nullable_bytes()?;
        let value = r.nullable_bytes()?;
        let header_count = r.varint()?;
        let header_count = usize::try_from(header_count)
            .map_err(|_| format!("negative header count {header_count}"))?;
        let headers_start = r.pos;
        // Bounded by the body: each header takes at least two bytes.
        for _ in 0..header_count {
            r.header()?;
        }
        let headers = &body[headers_start..r.pos];
        if r.remaining() != 0 {
            return Err(format!(
                "length says {len} bytes, its fields take {}",
                r.pos
            ));
        }
        Ok(RecordRef {
            timestamp_delta,
            offset_delta,
            key,
            value,
            header_count,
            headers,
            encoded: &self.buf[start..self.pos],
        })
    }
}

/// Appends `v` as a zigzag varlong (a varint's encoding too, for values that fit 32 bits).
pub(crate) fn put_varlong(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// `encoded` (one whole record as [`RecordRef::encoded`] gives it, already walked) with its
/// timestamp delta replaced by `timestamp_delta`; everything after the delta is copied.
/// For a batch whose base timestamp changes (the cleaner's delete horizon): the record's
/// timestamp stays what it was.
pub(crate) fn with_timestamp_delta(encoded: &[u8], timestamp_delta: i64) -> Result<Vec<u8>> {
    let why = |why: Why| Error::InvalidRecord(format!("record does not re-encode: {why}"));
    let mut c = Cursor::new(encoded);
    let len = c.varint().map_err(why)?;
    let len = usize::try_from(len).map_err(|_| why(format!("negative record length {len}")))?;
    let body = c.take(len).map_err(why)?;
    let mut r = Cursor::new(body);
    let attributes = r.byte().map_err(why)?;
    r.varlong().map_err(why)?;
    let rest = &body[r.pos..];
    let mut new_body = Vec::with_capacity(body.len() + 10);
    new_body.push(attributes);
    put_varlong(&mut new_body, timestamp_delta);
    new_body.extend_from_slice(rest);
    let mut out = Vec::with_capacity(new_body.len() + 5);
    put_varlong(&mut out, new_body.len() as i64);
    out.extend_from_slice(&new_body);
    Ok(out)
}

/// Record encoding for tests (here and in [`crate::validate`]'s).
#[cfg(test)]
pub(crate) mod testing {
    pub(crate) use super::put_varlong;

    pub fn put_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) {
        match b {
            Some(b) => {
                put_varlong(out, b.len() as i64);
                out.extend_from_slice(b);
            }
            None => put_varlong(out, -1),
        }
    }

    /// One encoded record (length prefix included).
    pub fn record(
        timestamp_delta: i64,
        offset_delta: i32,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) -> Vec<u8> {
        let mut body = vec![0u8];
        put_varlong(&mut body, timestamp_delta);
        put_varlong(&mut body, i64::from(offset_delta));
        put_bytes(&mut body, key);
        put_bytes(&mut body, value);
        put_varlong(&mut body, headers.len() as i64);
        for (k, v) in headers {
            put_bytes(&mut body, Some(k));
            put_bytes(&mut body, *v);
        }
        let mut out = Vec::new();
        put_varlong(&mut out, body.len() as i64);
        out.extend_from_slice(&body);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn walks_records_and_headers() {
        let mut section = record(
            0,
            0,
            Some(b"k"),
            Some(b"v"),
            &[(b"h1", Some(b"x")), (b"h2", None)],
        );
        section.extend(record(5, 1, None, None, &[]));
        let records: Vec<_> = walk(&section, 2).collect::<Result<_>>().expect("walks");
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].key, Some(&b"k"[..]));
        assert_eq!(records[0].value, Some(&b"v"[..]));
        let headers: Vec<_> = records[0].headers().collect();
        assert_eq!(
            headers,
            vec![(&b"h1"[..], Some(&b"x"[..])), (&b"h2"[..], None)]
        );
        assert_eq!(
            (records[1].timestamp_delta, records[1].offset_delta),
            (5, 1)
        );
        assert_eq!((records[1].key, records[1].value), (None, None));
    }

    fn first_error(section: &[u8], count: i32) -> String {
        match walk(section, count).find_map(|r| r.err()) {
            Some(Error::InvalidRecord(why)) => why,
            other => panic!("expected an invalid record, got {other:?}"),
        }
    }

    #[test]
    fn a_new_timestamp_delta_keeps_every_other_field() {
        let original = record(3, 7, Some(b"key"), Some(b"value"), &[(b"h", Some(b"x"))]);
        // Deltas whose varlong is shorter, longer and negative.
        for delta in [0, 300, -70_000, i64::MIN / 2] {
            let again = with_timestamp_delta(&original, delta).expect("re-encode");
            let r = walk(&again, 1).next().expect("one").expect("walks");
            assert_eq!(r.timestamp_delta, delta);
            assert_eq!(r.offset_delta, 7);
            assert_eq!((r.key, r.value), (Some(&b"key"[..]), Some(&b"value"[..])));
            assert_eq!(
                r.headers().collect::<Vec<_>>(),
                vec![(&b"h"[..], Some(&b"x"[..]))]
            );
            assert_eq!(r.encoded(), &again[..]);
        }
        assert!(
            with_timestamp_delta(&original[..3], 0).is_err(),
            "cut short"
        );
    }

    #[test]
    fn count_must_match_the_records() {
        let one = record(0, 0, None, Some(b"v"), &[]);
        assert!(first_error(&one, 2).contains("record 1"));
        let mut two = one.clone();
        two.extend(record(0, 1, None, Some(b"v"), &[]));
        assert!(first_error(&two, 1).contains("remain"));
        // A huge claimed count walks only what is there: no reservation, one error.
        assert_eq!(walk(&one, i32::MAX).filter(|r| r.is_err()).count(), 1);
    }

    #[test]
    fn bad_varints_and_lengths_are_invalid() {
        // Varint longer than 5 bytes.
        assert!(first_error(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01], 1).contains("longer"));
        // Negative record length.
        assert!(first_error(&[0x01], 1).contains("negative"));
        // Length past the end.
        assert!(first_error(&[0x40, 0, 0], 1).contains("past"));
        let good = record(0, 0, Some(b"key"), Some(b"value"), &[(b"h", Some(b"v"))]);
        // Key length pointing past the body: rewrite keyLength (after len, attrs, ts, off).
        let mut bad_key = good.clone();
        bad_key[4] = 0x7e; // 63
        assert!(first_error(&bad_key, 1).contains("past"));
        // Body longer than its fields.
        let mut padded = good.clone();
        padded[0] += 2;
        padded.push(0);
        assert!(first_error(&padded, 1).contains("its fields take"));
        // Negative header count / header key length.
        let neg_count = {
            let mut body = vec![0u8, 0, 0, 1, 1];
            body.push(0x01); // header count -1
            let mut r = vec![(body.len() as u8) << 1];
            r.extend(body);
            r
        };
        assert!(first_error(&neg_count, 1).contains("header count"));
        let neg_key = {
            let mut body = vec![0u8, 0, 0, 1, 1, 2];
            body.extend([0x01, 0x01]); // header key length -1, value null
            let mut r = vec![(body.len() as u8) << 1];
            r.extend(body);
            r
        };
        assert!(first_error(&neg_key, 1).contains("header key"));
        // Truncated anywhere: every prefix of a good record is an error, never a panic.
        for cut in 0..good.len() {
            assert!(walk(&good[..cut], 1).any(|r| r.is_err()), "cut at {cut}");
        }
    }

    /// Seeded mutations of a valid section: walking never panics and never yields more
    /// records than declared (a property test without a framework).
    #[test]
    fn mutations_never_panic() {
        let mut base = Vec::new();
        for i in 0..8 {
            base.extend(record(
                i,
                i as i32,
                Some(b"key"),
                Some(b"value-value"),
                &[(b"h", Some(b"x"))],
            ));
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let mut m = base.clone();
            for _ in 0..(next() % 4 + 1) {
                let at = (next() as usize) % m.len();
                m[at] = next() as u8;
            }
            let cut = (next() as usize) % (m.len() + 1);
            let count = (next() % 12) as i32;
            let n = walk(&m[..cut], count).count();
            assert!(n <= count as usize + 1);
        }
    }
}
