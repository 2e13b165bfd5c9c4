//! One client connection: read frames, run each request's ordered part in turn, and write
//! responses in request order while their waiting parts complete concurrently.
//!
//! Lifecycle: runs until the client closes, a frame is malformed or oversized (the
//! connection is closed, as Kafka does; other connections are untouched), a frame is not
//! complete within `--request-read-timeout` of its first byte ([`super::request_reader`]),
//! the connection is idle for `--connections-max-idle` (Kafka's `connections.max.idle.ms`:
//! no request in flight and no frame arriving; a long-poll fetch or an `acks=all` wait in
//! flight is not idle), or shutdown — then it stops reading, answers every request already
//! read, and closes.

use super::frame::{self, FrameError};
use super::handlers::{self, Reply};
use super::request_reader::RequestReader;
use super::throttle::{self, Gate};
use super::ConnectionLimits;
use crate::broker::Broker;
use crate::security::quota::Throttle;
use crate::security::Session;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{FuturesOrdered, StreamExt};
use futures::FutureExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Most requests of one connection being worked on at once; past it, reading pauses
/// (backpressure to the client instead of unbounded memory).
const IN_FLIGHT_MAX: usize = 128;

/// What a finished request puts on the wire, and how long to read nothing afterwards
/// (a client over its quota, KIP-219).
enum Outgoing {
    Send(Bytes, Throttle),
    /// Nothing (`acks=0`).
    Nothing(Throttle),
    /// The response could not be encoded: close rather than leave the client waiting.
    Close,
}

type Pending = BoxFuture<'static, Outgoing>;

/// Serves one connection over `stream` (plain TCP, or TLS once its handshake is done) as
/// `session`.
pub async fn run<S>(
    stream: S,
    session: Session,
    broker: Arc<Broker>,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) -> anyhow::Result<()>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let peer = session.peer;
    // Both halves are used from this one task, so the split's lock is never contended.
    let (read_half, mut write_half) = tokio::io::split(stream);
    // `RequestReader::next` is cancel-safe, so it can sit in the select below.
    let mut frames = RequestReader::new(
        read_half,
        broker.settings.max_request_bytes,
        limits.request_read_timeout,
    );
    let mut pending: FuturesOrdered<Pending> = FuturesOrdered::new();
    let mut closing = false;
    let mut result = Ok(());
    let mut idle = IdleClock::new(limits.idle_max);
    // Reading resumes at this instant: the connection is muted for a quota's throttle.
    let mut muted_until: Option<Instant> = None;
    loop {
        if closing && pending.is_empty() {
            break;
        }
        let idle_deadline = idle.deadline(pending.is_empty() && !closing && muted_until.is_none());
        tokio::select! {
            biased;
            Some(response) = pending.next(), if !pending.is_empty() => match response {
                Outgoing::Send(bytes, throttle) => {
                    mute(&mut muted_until, throttle);
                    broker.metrics.bytes_out.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    if let Err(e) = write_response(&mut write_half, &bytes, limits.idle_max).await {
                        if e.kind() == std::io::ErrorKind::TimedOut {
                            broker.metrics.connections_idle_closed.fetch_add(1, Ordering::Relaxed);
                        }
                        return Err(e.into());
                    }
                    idle.touch();
                }
                Outgoing::Nothing(throttle) => mute(&mut muted_until, throttle),
                Outgoing::Close => {
                    result = Err(anyhow::anyhow!("a response could not be encoded"));
                    break;
                }
            },
            _ = sleep_until(muted_until), if muted_until.is_some() => muted_until = None,
            frame = frames.next(), if !closing && muted_until.is_none() && pending.len() < IN_FLIGHT_MAX => match frame {
                None => closing = true,
                Some(Err(e)) => {
                    // A client that goes away mid-frame is routine; an oversized or
                    // malformed frame is worth a warning.
                    if matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof) {
                        tracing::debug!(error = %e, "connection dropped mid-frame");
                    } else if e.kind() == std::io::ErrorKind::TimedOut {
                        broker.metrics.connections_read_timed_out.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(%peer, error = %e, "closing connection: request too slow");
                    } else {
                        broker.metrics.request_errors.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(error = %e, "closing connection: bad frame");
                    }
                    result = Err(e.into());
                    closing = true;
                }
                Some(Ok(frame)) => {
                    idle.touch();
                    broker.metrics.bytes_in.fetch_add(frame.len() as u64 + 4, Ordering::Relaxed);
                    match dispatch(&broker, &session, frame.freeze()).await {
                        Ok((p, throttle)) => {
                            // Over quota on arrival (a produce): read nothing more for the
                            // throttle from now, not from when the response goes out, or
                            // a pipelining client would have many more requests read first.
                            mute(&mut muted_until, throttle);
                            pending.push_back(p);
                        }
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
            _ = sleep_until(idle_deadline), if idle_deadline.is_some() => {
                if frames.mid_frame() {
                    // A frame is arriving: its own read timeout bounds it.
                    idle.touch();
                } else {
                    tracing::debug!(%peer, idle_max = ?limits.idle_max, "closing idle connection");
                    broker.metrics.connections_idle_closed.fetch_add(1, Ordering::Relaxed);
                    closing = true;
                }
            }
        }
    }
    let _ = write_half.shutdown().await;
    result
}

/// When a connection with nothing in flight has been idle too long
/// (`--connections-max-idle`). Time starts at accept and restarts at every frame read and
/// every response written.
struct IdleClock {
    idle_max: std::time::Duration,
    since: Instant,
}

impl IdleClock {
    fn new(idle_max: std::time::Duration) -> Self {
        IdleClock {
            idle_max,
            since: Instant::now(),
        }
    }

    fn touch(&mut self) {
        self.since = Instant::now();
    }

    /// When the connection becomes idle too long, if it is idle now (`nothing_in_flight`).
    fn deadline(&self, nothing_in_flight: bool) -> Option<Instant> {
        nothing_in_flight.then(|| self.since + self.idle_max)
    }
}

/// Writes one response. A client that takes none of it for `--connections-max-idle` is
/// not reading: the connection is closed, as Kafka's idle expiry (no socket activity) would.
async fn write_response<W: tokio::io::AsyncWrite + Unpin>(
    write_half: &mut W,
    bytes: &[u8],
    idle_max: std::time::Duration,
) -> std::io::Result<()> {
    let mut written = 0;
    while written < bytes.len() {
        match tokio::time::timeout(idle_max, write_half.write(&bytes[written..])).await {
            Ok(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(Ok(n)) => written += n,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the client read no response bytes for --connections-max-idle",
                ))
            }
        }
    }
    Ok(())
}

/// Mutes reading for `throttle` from now, unless it already is for longer.
fn mute(muted_until: &mut Option<Instant>, throttle: Throttle) {
    if throttle.ms == 0 {
        return;
    }
    let until = Instant::now() + std::time::Duration::from_millis(throttle.ms);
    if muted_until.is_none_or(|m| m < until) {
        *muted_until = Some(until);
    }
}

/// Sleeps until `deadline`; never wakes without one (the select guards that branch).
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Runs the ordered part of one request and returns its response-to-be, and the throttle
/// of its quota if known on arrival.
async fn dispatch(
    broker: &Arc<Broker>,
    session: &Session,
    frame: Bytes,
) -> Result<(Pending, Throttle), FrameError> {
    let frame_bytes = frame.len();
    let p = frame::prelude(&frame)?;
    broker.metrics.count_request(p.api_key);
    let (key, version, header, mut request) = match frame::decode_request(p, frame)? {
        frame::Request::Decoded {
            key,
            version,
            header,
            body,
        } => (key, version, header, body),
        frame::Request::UnsupportedApiVersions { correlation_id } => {
            let bytes = handlers::api_versions::unsupported_version_response(correlation_id);
            let out = async move { Outgoing::Send(bytes, Throttle::none()) }.boxed();
            return Ok((out, Throttle::none()));
        }
    };
    let correlation_id = header.correlation_id;
    let encode = move |body, throttle| match frame::encode_response(
        key,
        version,
        correlation_id,
        &body,
    ) {
        Ok(b) => Outgoing::Send(b, throttle),
        Err(e) => {
            tracing::error!(error = %e, ?key, version, "cannot encode response; closing the connection");
            Outgoing::Close
        }
    };
    let user = session.principal.name.clone();
    let client_id = header.client_id.as_deref().unwrap_or("").to_string();
    let mut request_throttle = Throttle::none();
    if let Gate::Answer(body, throttle) = throttle::before(
        broker,
        &user,
        &client_id,
        frame_bytes,
        &mut request,
        &mut request_throttle,
    ) {
        let out = encode(*body, throttle);
        return Ok((async move { out }.boxed(), Throttle::none()));
    }
    let reply = handlers::handle(broker, &header, session, request).await;
    let pending = match reply {
        Reply::Now(mut body) => {
            let throttle = throttle::after(broker, &user, &client_id, &mut body, request_throttle);
            let bytes = encode(*body, throttle);
            async move { bytes }.boxed()
        }
        Reply::Later(fut) => {
            let broker = broker.clone();
            async move {
                let mut body = fut.await;
                let throttle =
                    throttle::after(&broker, &user, &client_id, &mut body, request_throttle);
                encode(body, throttle)
            }
            .boxed()
        }
        Reply::NoResponse => async move { Outgoing::Nothing(request_throttle) }.boxed(),
    };
    Ok((pending, request_throttle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncReadExt;

    #[tokio::test(start_paused = true)]
    async fn a_client_that_reads_no_response_is_cut_off_after_the_idle_max() {
        let idle_max = Duration::from_secs(600);
        let (mut server, mut client) = tokio::io::duplex(1024);
        let response = vec![7u8; 4096];
        // A slow reader that keeps reading is served in full.
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 4096];
            for chunk in got.chunks_mut(512) {
                tokio::time::sleep(Duration::from_secs(100)).await;
                client.read_exact(chunk).await.expect("read");
            }
            (client, got)
        });
        write_response(&mut server, &response, idle_max)
            .await
            .expect("a slow reader is not idle");
        let (client, got) = reader.await.expect("reader");
        assert_eq!(got, response);
        // One that stops reading is cut off `idle_max` after its last progress.
        let stalled = Instant::now();
        let e = write_response(&mut server, &response, idle_max)
            .await
            .expect_err("the client stopped reading");
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(stalled.elapsed(), idle_max);
        drop(client);
    }

    #[test]
    fn idle_time_counts_only_with_nothing_in_flight() {
        let clock = IdleClock::new(Duration::from_secs(5));
        assert_eq!(clock.deadline(false), None);
        assert_eq!(
            clock.deadline(true),
            Some(clock.since + Duration::from_secs(5))
        );
    }
}
