//! Reading request frames off a Kafka connection: a 4-byte big-endian length, then that
//! many bytes, with two bounds a hostile client cannot get around.
//!
//! - Memory: the buffer grows with the bytes that actually arrived (at most doubling), never
//!   with the length a frame claims, so a client that sends only a 4-byte length claiming
//!   `--max-request-bytes` pins a few KiB, not 100 MiB. (`LengthDelimitedCodec` reserves the
//!   claimed length as soon as it reads it.)
//! - Time: once the first byte of a frame arrived, the rest must arrive within
//!   `--request-read-timeout` (a slow-loris client that sends a length and stalls, or trickles
//!   one byte at a time, is cut off). Waiting for the *first* byte of the next frame is the
//!   connection's idle time, which `conn` bounds with `--connections-max-idle`.

use bytes::{Buf, BytesMut};
use futures::Stream;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::AsyncRead;
use tokio::time::{Instant, Sleep};
use tokio_util::codec::{Decoder, FramedRead};

/// Bytes of a frame's length prefix.
const LENGTH_BYTES: usize = 4;
/// The least a partial frame's buffer grows by, so small frames need one read.
const GROW_MIN_BYTES: usize = 4 << 10;

/// Length-prefixed frames, remembering when the frame being assembled began.
#[derive(Debug)]
pub struct FrameCodec {
    max_frame_bytes: usize,
    /// When the first byte of the frame in progress arrived; `None` between frames.
    started: Option<Instant>,
}

impl FrameCodec {
    pub fn new(max_frame_bytes: usize) -> Self {
        FrameCodec {
            max_frame_bytes,
            started: None,
        }
    }

    /// Changes the largest frame accepted from the next frame on (SASL listeners accept
    /// small frames until the client authenticates).
    pub fn set_max_frame_bytes(&mut self, max_frame_bytes: usize) {
        self.max_frame_bytes = max_frame_bytes;
    }

    /// When the frame being received began, if one is partly received.
    pub fn frame_started(&self) -> Option<Instant> {
        self.started
    }
}

impl Decoder for FrameCodec {
    type Item = BytesMut;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> io::Result<Option<BytesMut>> {
        if src.is_empty() {
            return Ok(None);
        }
        if self.started.is_none() {
            self.started = Some(Instant::now());
        }
        let Some(prefix) = src.get(..LENGTH_BYTES) else {
            return Ok(None);
        };
        let claimed = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
        let len = usize::try_from(claimed).unwrap_or(usize::MAX);
        if len > self.max_frame_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
"request frame of {claimed} bytes is larger than the {} allowed (--max-request-bytes; less before SASL authentication)",
                    self.max_frame_bytes
                ),
            ));
        }
        let total = LENGTH_BYTES + len;
        if src.len() < total {
            // Grow with what arrived, not with what the prefix claims.
            let missing = total - src.len();
            src.reserve(missing.min(src.len().max(GROW_MIN_BYTES)));
            return Ok(None);
        }
        src.advance(LENGTH_BYTES);
        let frame = src.split_to(len);
        // Bytes left over belong to the next frame, which began when they arrived.
        self.started = (!src.is_empty()).then(Instant::now);
        Ok(Some(frame))
    }
}

/// Frames from `R`, failing with `TimedOut` when one is not complete within `read_timeout`
/// of its first byte. Cancel-safe like `FramedRead` (all state is in the struct), so it can
/// sit in a `select!`.
pub struct RequestReader<R> {
    frames: FramedRead<R, FrameCodec>,
    read_timeout: Duration,
    /// Armed while a frame is partly received, at its start + `read_timeout`.
    deadline: Pin<Box<Sleep>>,
}

impl<R: AsyncRead + Unpin> RequestReader<R> {
    pub fn new(reader: R, max_frame_bytes: usize, read_timeout: Duration) -> Self {
        RequestReader {
            frames: FramedRead::new(reader, FrameCodec::new(max_frame_bytes)),
            read_timeout,
            deadline: Box::pin(tokio::time::sleep(read_timeout)),
        }
    }

    /// See [`FrameCodec::set_max_frame_bytes`].
    pub fn set_max_frame_bytes(&mut self, max_frame_bytes: usize) {
        self.frames
            .decoder_mut()
            .set_max_frame_bytes(max_frame_bytes);
    }

    /// Whether a frame is partly received (the connection is not idle).
    pub fn mid_frame(&self) -> bool {
        self.frames.decoder().frame_started().is_some() || !self.frames.read_buffer().is_empty()
    }
}

impl<R: AsyncRead + Unpin> Stream for RequestReader<R> {
    type Item = io::Result<BytesMut>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Poll::Ready(item) = Pin::new(&mut this.frames).poll_next(cx) {
            return Poll::Ready(item);
        }
        let Some(started) = this.frames.decoder().frame_started() else {
            return Poll::Pending;
        };
        let due = started + this.read_timeout;
        if this.deadline.deadline() != due {
            this.deadline.as_mut().reset(due);
        }
        match this.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "request frame not complete within --request-read-timeout ({})",
                    humantime::format_duration(this.read_timeout)
                ),
            )))),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use tokio::io::AsyncWriteExt;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn a_claimed_length_reserves_only_what_arrived() {
        let mut codec = FrameCodec::new(100 << 20);
        let mut buf = BytesMut::from(&(100u32 << 20).to_be_bytes()[..]);
        assert!(codec.decode(&mut buf).expect("decode").is_none());
        assert!(buf.capacity() < 64 << 10, "reserved {}", buf.capacity());
        assert!(codec.frame_started().is_some());
    }

    #[test]
    fn frames_split_and_oversized_ones_fail() {
        let mut codec = FrameCodec::new(8);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&frame(b"abc"));
        buf.extend_from_slice(&frame(b"de")[..3]);
        assert_eq!(
            codec.decode(&mut buf).expect("one").as_deref(),
            Some(&b"abc"[..])
        );
        assert!(codec.frame_started().is_some(), "the next frame has begun");
        assert!(codec.decode(&mut buf).expect("partial").is_none());
        buf.extend_from_slice(&frame(b"de")[3..]);
        assert_eq!(
            codec.decode(&mut buf).expect("two").as_deref(),
            Some(&b"de"[..])
        );
        assert!(codec.frame_started().is_none());
        let mut big = BytesMut::from(&frame(b"123456789")[..]);
        let e = codec.decode(&mut big).expect_err("over the max");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_half_frame_times_out_but_idle_waiting_does_not() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let timeout = Duration::from_secs(10);
        let mut reader = RequestReader::new(server, 1 << 20, timeout);

        // Idle for far longer than the read timeout: no frame has begun, nothing fires.
        let idle = tokio::time::timeout(Duration::from_secs(600), reader.next()).await;
        assert!(idle.is_err(), "idle waiting must not time out here");
        assert!(!reader.mid_frame());

        // A whole frame is read.
        client.write_all(&frame(b"hello")).await.expect("write");
        let got = reader.next().await.expect("frame").expect("ok");
        assert_eq!(&got[..], b"hello");

        // The length, then a trickle: cut off `timeout` after the first byte.
        let began = Instant::now();
        client.write_all(&20u32.to_be_bytes()).await.expect("write");
        let mut next = Box::pin(reader.next());
        for _ in 0..3 {
            assert!(futures::poll!(next.as_mut()).is_pending());
            tokio::time::advance(Duration::from_secs(3)).await;
            client.write_all(b"x").await.expect("write");
        }
        let e = next.await.expect("an item").expect_err("timed out");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(began.elapsed(), timeout);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_but_timely_frame_is_read() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut reader = RequestReader::new(server, 1 << 20, Duration::from_secs(10));
        let bytes = frame(b"0123456789");
        let mut next = Box::pin(reader.next());
        for b in &bytes {
            assert!(futures::poll!(next.as_mut()).is_pending());
            tokio::time::advance(Duration::from_millis(500)).await;
            client.write_all(&[*b]).await.expect("write");
        }
        let got = next.await.expect("frame").expect("ok");
        assert_eq!(&got[..], b"0123456789");
    }
}
