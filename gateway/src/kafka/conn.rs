//! One client connection: read frames, run each request's ordered part in turn, and write
//! responses in request order while their waiting parts complete concurrently.
//!
//! Lifecycle: runs until the client closes, a frame is malformed or oversized (the
//! connection is closed, as Kafka does; other connections are untouched), or shutdown —
//! then it stops reading, answers every request already read, and closes.

use super::frame::{self, FrameError};
use super::handlers::{self, Reply};
use crate::broker::Broker;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{FuturesOrdered, StreamExt};
use futures::FutureExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

/// Most requests of one connection being worked on at once; past it, reading pauses
/// (backpressure to the client instead of unbounded memory).
const IN_FLIGHT_MAX: usize = 128;

/// What a finished request puts on the wire.
enum Outgoing {
    Send(Bytes),
    /// Nothing (`acks=0`).
    Nothing,
    /// The response could not be encoded: close rather than leave the client waiting.
    Close,
}

type Pending = BoxFuture<'static, Outgoing>;

pub async fn run(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (read_half, mut write_half) = stream.into_split();
    let codec = frame::FrameCodec::new(broker.settings.max_request_bytes);
    // `FramedRead::next` is cancel-safe, so it can sit in the select below.
    let mut frames = FramedRead::new(read_half, codec);
    let mut pending: FuturesOrdered<Pending> = FuturesOrdered::new();
    let mut closing = false;
    let mut result = Ok(());
    loop {
        if closing && pending.is_empty() {
            break;
        }
        tokio::select! {
            biased;
            Some(response) = pending.next(), if !pending.is_empty() => match response {
                Outgoing::Send(bytes) => {
                    broker.metrics.bytes_out.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    write_half.write_all(&bytes).await?;
                }
                Outgoing::Nothing => {}
                Outgoing::Close => {
                    result = Err(anyhow::anyhow!("a response could not be encoded"));
                    break;
                }
            },
            frame = frames.next(), if !closing && pending.len() < IN_FLIGHT_MAX => match frame {
                None => closing = true,
                Some(Err(e)) => {
                    // A client that goes away mid-frame is routine; an oversized or
                    // malformed frame is worth a warning.
                    if matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof) {
                        tracing::debug!(error = %e, "connection dropped mid-frame");
                    } else {
                        broker.metrics.request_errors.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(error = %e, "closing connection: bad frame");
                    }
                    result = Err(e.into());
                    closing = true;
                }
                Some(Ok(frame)) => {
                    broker.metrics.bytes_in.fetch_add(frame.len() as u64 + 4, Ordering::Relaxed);
                    match dispatch(&broker, peer, frame.freeze()).await {
                        Ok(p) => pending.push_back(p),
                        Err(e) => {
                            broker.metrics.request_errors.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(error = %e, "closing connection: request cannot be served");
                            result = Err(e.into());
                            closing = true;
                        }
                    }
                }
            },
            _ = shutdown.cancelled(), if !closing => closing = true,
        }
    }
    let _ = write_half.shutdown().await;
    result
}

/// Runs the ordered part of one request and returns its response-to-be.
async fn dispatch(
    broker: &Arc<Broker>,
    peer: std::net::SocketAddr,
    frame: Bytes,
) -> Result<Pending, FrameError> {
    let p = frame::prelude(&frame)?;
    broker.metrics.count_request(p.api_key);
    let (key, version, header, request) = match frame::decode_request(p, frame)? {
        frame::Request::Decoded {
            key,
            version,
            header,
            body,
        } => (key, version, header, body),
        frame::Request::UnsupportedApiVersions { correlation_id } => {
            let bytes = handlers::api_versions::unsupported_version_response(correlation_id);
            return Ok(async move { Outgoing::Send(bytes) }.boxed());
        }
    };
    let correlation_id = header.correlation_id;
    let reply = handlers::handle(broker, &header, peer, request).await;
    let encode = move |body| match frame::encode_response(key, version, correlation_id, &body) {
        Ok(b) => Outgoing::Send(b),
        Err(e) => {
            tracing::error!(error = %e, ?key, version, "cannot encode response; closing the connection");
            Outgoing::Close
        }
    };
    Ok(match reply {
        Reply::Now(body) => {
            let bytes = encode(*body);
            async move { bytes }.boxed()
        }
        Reply::Later(fut) => async move { encode(fut.await) }.boxed(),
        Reply::NoResponse => async { Outgoing::Nothing }.boxed(),
    })
}
