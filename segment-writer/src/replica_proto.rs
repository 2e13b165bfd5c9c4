//! The internal protocol between brokers (`--internal-addr`): WAL replication and tail
//! recovery. Sans-I/O encoding plus two small async helpers to read and write one frame.
//!
//! Frame: `len u32 | kind u8 | body` (big-endian, `len` counts kind + body). WAL entries
//! travel in the WAL's own framing (`crate::wal`), so a replica checks every entry's CRC
//! and stores the bytes as they came.
//!
//! A replication stream (source → replica): `Hello`, then `Entries`… and `Trim`…; the replica
//! answers `Ack` after each fsync. A recovery request: `FetchTail` → `TailChunk`… `TailEnd`.

use crate::error::{Error, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use oxbow_metadata::BrokerId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Largest frame accepted: a WAL group is at most a few MiB plus one batch (which Kafka
/// bounds by the request size); bounds what a corrupt length can make a reader allocate.
pub const FRAME_BYTES_MAX: usize = 256 << 20;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Starts a replication stream of `source`'s WAL of `incarnation` at `start_sequence`.
    /// `skipped`: sequences the source's WAL never holds — those its restart skipped past
    /// what it kept on disk (`crate::wal`'s module docs) — so a copy that ends inside them
    /// lacks nothing; empty when the source did not restart with entries. Sent after the
    /// other fields; a Hello without it (an older source) skips nothing.
    Hello {
        source: BrokerId,
        incarnation: u64,
        start_sequence: u64,
        skipped: std::ops::Range<u64>,
    },
    /// Whole WAL entries with contiguous sequences starting at `first_sequence`.
    Entries { first_sequence: u64, bytes: Bytes },
    /// Everything before `keep_from` is in the object store; the replica may delete it.
    Trim { keep_from: u64 },
    /// The replica has fsynced every entry of this stream before `durable`.
    Ack { durable: u64 },
    /// Asks for everything held of `source`'s WAL (every incarnation).
    FetchTail { source: BrokerId },
    /// Held entries of one incarnation of the requested WAL.
    TailChunk { incarnation: u64, bytes: Bytes },
    /// End of a tail answer.
    TailEnd,
    /// The peer refuses the request.
    Refused { reason: String },
}

const HELLO: u8 = 1;
const ENTRIES: u8 = 2;
const TRIM: u8 = 3;
const ACK: u8 = 4;
const FETCH_TAIL: u8 = 5;
const TAIL_CHUNK: u8 = 6;
const TAIL_END: u8 = 7;
const REFUSED: u8 = 8;

impl Frame {
    pub fn encode(&self) -> BytesMut {
        let mut b = BytesMut::new();
        b.put_u32(0);
        match self {
            Frame::Hello {
                source,
                incarnation,
                start_sequence,
                skipped,
            } => {
                b.put_u8(HELLO);
                b.put_i32(*source);
                b.put_u64(*incarnation);
                b.put_u64(*start_sequence);
                b.put_u64(skipped.start);
                b.put_u64(skipped.end);
            }
            Frame::Entries {
                first_sequence,
                bytes,
            } => {
                b.put_u8(ENTRIES);
                b.put_u64(*first_sequence);
                b.put_slice(bytes);
            }
            Frame::Trim { keep_from } => {
                b.put_u8(TRIM);
                b.put_u64(*keep_from);
            }
            Frame::Ack { durable } => {
                b.put_u8(ACK);
                b.put_u64(*durable);
            }
            Frame::FetchTail { source } => {
                b.put_u8(FETCH_TAIL);
                b.put_i32(*source);
            }
            Frame::TailChunk { incarnation, bytes } => {
                b.put_u8(TAIL_CHUNK);
                b.put_u64(*incarnation);
                b.put_slice(bytes);
            }
            Frame::TailEnd => b.put_u8(TAIL_END),
            Frame::Refused { reason } => {
                b.put_u8(REFUSED);
                b.put_slice(reason.as_bytes());
            }
        }
        let len = (b.len() - 4) as u32;
        b[0..4].copy_from_slice(&len.to_be_bytes());
        b
    }

    /// Decodes a frame body (after the length prefix).
    pub fn decode(mut body: Bytes) -> Result<Frame> {
        let bad = |what: &str| Error::Replication(format!("malformed {what} frame"));
        if body.is_empty() {
            return Err(bad("empty"));
        }
        let kind = body.get_u8();
        let need = |body: &Bytes, n: usize, what: &str| {
            if body.len() < n {
                Err(bad(what))
            } else {
                Ok(())
            }
        };
        Ok(match kind {
            HELLO => {
                need(&body, 20, "Hello")?;
                let (source, incarnation, start_sequence) =
                    (body.get_i32(), body.get_u64(), body.get_u64());
                let skipped = if body.len() >= 16 {
                    body.get_u64()..body.get_u64()
                } else {
                    0..0
                };
                Frame::Hello {
                    source,
                    incarnation,
                    start_sequence,
                    skipped,
                }
            }
            ENTRIES => {
                need(&body, 8, "Entries")?;
                let first_sequence = body.get_u64();
                Frame::Entries {
                    first_sequence,
                    bytes: body,
                }
            }
            TRIM => {
                need(&body, 8, "Trim")?;
                Frame::Trim {
                    keep_from: body.get_u64(),
                }
            }
            ACK => {
                need(&body, 8, "Ack")?;
                Frame::Ack {
                    durable: body.get_u64(),
                }
            }
            FETCH_TAIL => {
                need(&body, 4, "FetchTail")?;
                Frame::FetchTail {
                    source: body.get_i32(),
                }
            }
            TAIL_CHUNK => {
                need(&body, 8, "TailChunk")?;
                let incarnation = body.get_u64();
                Frame::TailChunk {
                    incarnation,
                    bytes: body,
                }
            }
            TAIL_END => Frame::TailEnd,
            REFUSED => Frame::Refused {
                reason: String::from_utf8_lossy(&body).into_owned(),
            },
            other => return Err(Error::Replication(format!("unknown frame kind {other}"))),
        })
    }
}

/// Reads one frame; `None` at a clean end of stream.
pub async fn read_frame<R: tokio::io::AsyncRead + Unpin>(r: &mut R) -> Result<Option<Frame>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 || len > FRAME_BYTES_MAX {
        return Err(Error::Replication(format!("frame of {len} bytes refused")));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    Frame::decode(Bytes::from(body)).map(Some)
}

/// Writes one frame.
pub async fn write_frame<W: tokio::io::AsyncWrite + Unpin>(w: &mut W, f: &Frame) -> Result<()> {
    w.write_all(&f.encode()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let frames = [
            Frame::Hello {
                source: 3,
                incarnation: 7,
                start_sequence: 42 + 4096,
                skipped: 43..42 + 4096,
            },
            Frame::Entries {
                first_sequence: 9,
                bytes: Bytes::from_static(b"abc"),
            },
            Frame::Trim { keep_from: 5 },
            Frame::Ack { durable: 11 },
            Frame::FetchTail { source: 2 },
            Frame::TailChunk {
                incarnation: 1,
                bytes: Bytes::from_static(b"xyz"),
            },
            Frame::TailEnd,
            Frame::Refused {
                reason: "no".into(),
            },
        ];
        for f in frames {
            let enc = f.encode().freeze();
            assert_eq!(Frame::decode(enc.slice(4..)).expect("decodes"), f);
        }
    }

    #[test]
    fn truncated_and_unknown_frames_are_errors() {
        let enc = Frame::Hello {
            source: 1,
            incarnation: 1,
            start_sequence: 1,
            skipped: 0..0,
        }
        .encode()
        .freeze();
        assert!(Frame::decode(enc.slice(4..10)).is_err());
        // An older source's Hello, without `skipped`: it skips nothing.
        assert_eq!(
            Frame::decode(enc.slice(4..25)).expect("decodes"),
            Frame::Hello {
                source: 1,
                incarnation: 1,
                start_sequence: 1,
                skipped: 0..0,
            }
        );
        assert!(Frame::decode(Bytes::from_static(&[99])).is_err());
        assert!(Frame::decode(Bytes::new()).is_err());
    }

    #[tokio::test]
    async fn an_oversized_length_is_refused_without_allocating() {
        let mut data: &[u8] = &[0xff, 0xff, 0xff, 0xff, 1];
        assert!(read_frame(&mut data).await.is_err());
        let mut empty: &[u8] = &[];
        assert!(read_frame(&mut empty).await.expect("clean end").is_none());
    }
}
