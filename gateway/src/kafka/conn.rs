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
//!
//! The loop owns the connection's [`Session`] and its SASL [`Authenticator`]: requests
//! are dispatched in order, so the authenticator sees them in order and every handler
//! gets the session as it is when its request is read. On SASL listeners only
//! ApiVersions/SaslHandshake/SaslAuthenticate pass until the client authenticates (in
//! frames of at most [`handlers::sasl::UNAUTHENTICATED_FRAME_BYTES_MAX`]); a failed
//! authentication is answered after `--connection-failed-authentication-delay` and the
//! connection closes.

use super::frame::{self, FrameError, ResponseFrame};
use super::handlers::{self, Reply};
use super::request_latency::Timing;
use super::request_reader::RequestReader;
use super::throttle;
use super::ConnectionLimits;
use crate::broker::Broker;
use crate::security::quota::Throttle;
use crate::security::sasl::{Authenticator, Gate};
use crate::security::Session;
use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::stream::{FuturesOrdered, StreamExt};
use futures::FutureExt;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Most requests of one connection being worked on at once; past it, reading pauses
/// (backpressure to the client instead of unbounded memory).
const IN_FLIGHT_MAX: usize = 128;

/// What a finished request puts on the wire, and how long to read nothing afterwards
/// (a client over its quota, KIP-219).
enum Outgoing {
    /// A response, its throttle, and its stage times if its kind is timed.
    Send(ResponseFrame, Throttle, Option<Timing>),
    /// Nothing (`acks=0`).
    Nothing(Throttle),
    /// Send this, then close (a failed authentication's answer).
    SendThenClose(ResponseFrame),
    /// Close without answering: the response could not be encoded (rather than leave the
    /// client waiting), or the request is refused in the connection's SASL state.
    Close(String),
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
    let mut session = session;
    let mut auth = handlers::sasl::authenticator(&broker, &session);
    // Both halves are used from this one task, so the split's lock is never contended.
    let (read_half, mut write_half) = tokio::io::split(stream);
    // `RequestReader::next` is cancel-safe, so it can sit in the select below.
    let mut frames = RequestReader::new(
        read_half,
        if session.protocol.is_sasl() {
            broker
                .settings
                .max_request_bytes
                .min(handlers::sasl::UNAUTHENTICATED_FRAME_BYTES_MAX)
        } else {
            broker.settings.max_request_bytes
        },
        limits.request_read_timeout,
    );
    let mut pending: FuturesOrdered<Pending> = FuturesOrdered::new();
    // Each request's share of the request memory, in `pending`'s order.
    let mut held: VecDeque<Option<OwnedSemaphorePermit>> = VecDeque::new();
    let mut closing = false;
    let mut result = Ok(());
    let mut idle = IdleClock::new(limits.idle_max);
    // Reading resumes at this instant: the connection is muted for a quota's throttle.
    let mut muted_until: Option<Instant> = None;
    // A frame read that waits for room in the request memory (reading pauses meanwhile),
    // and the wait; then the frame to dispatch, with its share of the request memory.
    let mut waiting: Option<(BytesMut, Instant)> = None;
    let mut room: Option<BoxFuture<'static, Option<OwnedSemaphorePermit>>> = None;
    let mut ready: Option<(BytesMut, Instant, Option<OwnedSemaphorePermit>)> = None;
    loop {
        if let Some((frame, read_at, permit)) = ready.take() {
            match dispatch(&broker, &mut session, &mut auth, frame.freeze(), read_at).await {
                Ok(d) => {
                    // Over quota on arrival (a produce): read nothing more for the
                    // throttle from now, not from when the response goes out, or a
                    // pipelining client would have many more requests read first.
                    mute(&mut muted_until, d.throttle);
                    pending.push_back(d.pending);
                    // Given back when its answer comes out of `pending` (in order).
                    held.push_back(permit);
                    if d.authenticated {
                        frames.set_max_frame_bytes(broker.settings.max_request_bytes);
                    }
                    closing |= d.last;
                }
                Err(e) => {
                    broker
                        .metrics
                        .request_errors
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "closing connection: request cannot be served");
                    result = Err(e.into());
                    closing = true;
                }
            }
        }
        if closing && pending.is_empty() && room.is_none() {
            break;
        }
        let idle_deadline = idle
            .deadline(pending.is_empty() && !closing && muted_until.is_none() && room.is_none());
        tokio::select! {
            biased;
            // An answer out: its request's memory is given back (`held` is in its order).
            Some(response) = pending.next(), if !pending.is_empty() => match (held.pop_front(), response).1 {
                Outgoing::Send(frame, throttle, timing) => {
                    mute(&mut muted_until, throttle);
                    broker.metrics.bytes_out.fetch_add(frame.len() as u64, Ordering::Relaxed);
                    let send_at = Instant::now();
                    if let Err(e) = write_response(&mut write_half, &frame, limits.idle_max).await {
                        if e.kind() == std::io::ErrorKind::TimedOut {
                            broker.metrics.connections_idle_closed.fetch_add(1, Ordering::Relaxed);
                        }
                        return Err(e.into());
                    }
                    if let Some(t) = timing {
                        broker.metrics.request_latency.finish(&t, send_at, Instant::now());
                    }
                    idle.touch();
                }
                Outgoing::Nothing(throttle) => mute(&mut muted_until, throttle),
                Outgoing::SendThenClose(frame) => {
                    broker.metrics.bytes_out.fetch_add(frame.len() as u64, Ordering::Relaxed);
                    let _ = write_response(&mut write_half, &frame, limits.idle_max).await;
                    result = Err(anyhow::anyhow!("SASL authentication failed"));
                    break;
                }
                Outgoing::Close(why) => {
                    result = Err(anyhow::anyhow!(why));
                    break;
                }
            },
            _ = sleep_until(muted_until), if muted_until.is_some() => muted_until = None,
            permit = wait_for_room(&mut room), if room.is_some() => {
                room = None;
                if let Some((frame, read_at)) = waiting.take() {
                    ready = Some((frame, read_at, permit));
                }
            }
            frame = frames.next(), if !closing && muted_until.is_none() && room.is_none() && pending.len() < IN_FLIGHT_MAX => match frame {
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
                    let read_at = Instant::now();
                    broker.metrics.bytes_in.fetch_add(frame.len() as u64 + 4, Ordering::Relaxed);
                    match limits.request_memory.try_take(frame.len()) {
                        Some(permit) => ready = Some((frame, read_at, Some(permit))),
                        None => {
                            broker.metrics.requests_waited_for_memory.fetch_add(1, Ordering::Relaxed);
                            let (memory, bytes) = (limits.request_memory.clone(), frame.len());
                            room = Some(async move { memory.take(bytes).await }.boxed());
                            waiting = Some((frame, read_at));
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

/// Pieces of a response handed to one vectored write (a fetch of many partitions has a few
/// per partition; the kernel takes up to 1024).
const WRITE_PIECES_MAX: usize = 64;

/// Writes one response, its pieces with vectored writes (on plain TCP one `writev` per up
/// to [`WRITE_PIECES_MAX`] pieces; a stream without vectored writes takes them one at a
/// time). A client that takes none of it for `--connections-max-idle` is not reading: the
/// connection is closed, as Kafka's idle expiry (no socket activity) would.
async fn write_response<W: tokio::io::AsyncWrite + Unpin>(
    write_half: &mut W,
    frame: &ResponseFrame,
    idle_max: std::time::Duration,
) -> std::io::Result<()> {
    let parts = frame.parts();
    // Where writing stands: `parts[part][at..]` is next.
    let (mut part, mut at) = (0usize, 0usize);
    while part < parts.len() {
        let mut slices = [std::io::IoSlice::new(&[]); WRITE_PIECES_MAX];
        let (mut n, mut want) = (0, 0);
        for (i, p) in parts[part..].iter().take(WRITE_PIECES_MAX).enumerate() {
            let rest = if i == 0 { &p[at..] } else { &p[..] };
            slices[i] = std::io::IoSlice::new(rest);
            want += rest.len();
            n = i + 1;
        }
        if want == 0 {
            // Only empty pieces were left.
            break;
        }
        let mut written =
            match tokio::time::timeout(idle_max, write_half.write_vectored(&slices[..n])).await {
                Ok(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(Ok(n)) => n,
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(idle_write_timeout()),
            };
        // Advance past what was written; an empty piece is stepped over.
        while part < parts.len() && written >= parts[part].len() - at {
            written -= parts[part].len() - at;
            part += 1;
            at = 0;
        }
        at += written;
    }
    // A TLS stream may hold the tail of what it accepted until flushed.
    match tokio::time::timeout(idle_max, write_half.flush()).await {
        Ok(r) => r,
        Err(_) => Err(idle_write_timeout()),
    }
}

fn idle_write_timeout() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the client read no response bytes for --connections-max-idle",
    )
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

/// Waits for the request memory `room` asks for; never wakes without a wait (the select
/// guards that branch).
async fn wait_for_room(
    room: &mut Option<BoxFuture<'static, Option<OwnedSemaphorePermit>>>,
) -> Option<OwnedSemaphorePermit> {
    match room {
        Some(wait) => wait.await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `deadline`; never wakes without one (the select guards that branch).
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// A dispatched request.
struct Dispatched {
    /// Its response-to-be.
    pending: Pending,
    /// Read no further request: the connection closes after this one.
    last: bool,
    /// It completed a SASL authentication (full-size frames from now on).
    authenticated: bool,
    /// Its quota's throttle, known on arrival (mute reading now).
    throttle: Throttle,
}

impl Dispatched {
    fn of(pending: Pending) -> Self {
        Dispatched {
            pending,
            last: false,
            authenticated: false,
            throttle: Throttle::none(),
        }
    }

    fn close(peer: std::net::SocketAddr, why: String) -> Self {
        tracing::info!(%peer, reason = %why, "closing connection");
        Dispatched {
            pending: async move { Outgoing::Close(why) }.boxed(),
            last: true,
            authenticated: false,
            throttle: Throttle::none(),
        }
    }
}

/// Runs the ordered part of one request and returns its response-to-be.
async fn dispatch(
    broker: &Arc<Broker>,
    session: &mut Session,
    auth: &mut Authenticator,
    frame: Bytes,
    read_at: Instant,
) -> Result<Dispatched, FrameError> {
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
            if let Gate::Close(why) = auth.gate(ApiKey::ApiVersions, Instant::now()) {
                return Ok(Dispatched::close(session.peer, why));
            }
            let bytes = handlers::api_versions::unsupported_version_response(correlation_id);
            return Ok(Dispatched::of(
                async move { Outgoing::Send(bytes.into(), Throttle::none(), None) }.boxed(),
            ));
        }
    };
    let correlation_id = header.correlation_id;
    match auth.gate(key, Instant::now()) {
        Gate::Serve => {}
        Gate::Close(why) => return Ok(Dispatched::close(session.peer, why)),
        Gate::Sasl => {
            return Ok(sasl(
                broker,
                session,
                auth,
                (key, version, correlation_id),
                request,
            )
            .await)
        }
    }
    let encode = move |body, throttle, timing| match frame::encode_response_frame(
        key,
        version,
        correlation_id,
        &body,
    ) {
        Ok(b) => Outgoing::Send(b, throttle, timing),
        Err(e) => {
            tracing::error!(error = %e, ?key, version, "cannot encode response; closing the connection");
            Outgoing::Close("a response could not be encoded".into())
        }
    };
    // Quotas are per user (the principal's name) and client id, as in Kafka.
    let user = session.principal.name.clone();
    let client_id = header.client_id.as_deref().unwrap_or("").to_string();
    let mut request_throttle = Throttle::none();
    if let throttle::Gate::Answer(body, throttle) = throttle::before(
        broker,
        &user,
        &client_id,
        frame_bytes,
        &mut request,
        &mut request_throttle,
    ) {
        let out = encode(*body, throttle, None);
        return Ok(Dispatched::of(async move { out }.boxed()));
    }
    let started = std::time::Instant::now();
    let mut timing = broker
        .metrics
        .request_latency
        .start(key, read_at, Instant::now());
    let reply = handlers::handle(broker, &header, session, request).await;
    let handled_at = Instant::now();
    if let Some(t) = &mut timing {
        t.handled_at = handled_at;
        t.ready_at = handled_at;
    }
    request_throttle = request_throttle.max(throttle::handler_time(
        broker,
        &user,
        &client_id,
        started.elapsed(),
    ));
    let pending = match reply {
        Reply::Now(mut body) => {
            let throttle = throttle::after(broker, &user, &client_id, &mut body, request_throttle);
            let bytes = encode(*body, throttle, timing);
            async move { bytes }.boxed()
        }
        Reply::Later(fut) => {
            let broker = broker.clone();
            async move {
                let mut body = fut.await;
                if let Some(t) = &mut timing {
                    t.ready_at = Instant::now();
                }
                let throttle =
                    throttle::after(&broker, &user, &client_id, &mut body, request_throttle);
                encode(body, throttle, timing)
            }
            .boxed()
        }
        Reply::NoResponse => async move { Outgoing::Nothing(request_throttle) }.boxed(),
    };
    Ok(Dispatched {
        throttle: request_throttle,
        ..Dispatched::of(pending)
    })
}

/// Answers SaslHandshake/SaslAuthenticate through the connection's authenticator; a
/// failure is answered after `--connection-failed-authentication-delay`, then the
/// connection closes.
async fn sasl(
    broker: &Arc<Broker>,
    session: &mut Session,
    auth: &mut Authenticator,
    (key, version, correlation_id): (ApiKey, i16, i32),
    request: RequestKind,
) -> Dispatched {
    let mut authenticated = false;
    let (body, close) = match request {
        RequestKind::SaslHandshake(r) => {
            let (response, close) = handlers::sasl::handshake(auth, version, r);
            (ResponseKind::SaslHandshake(response), close)
        }
        RequestKind::SaslAuthenticate(r) => {
            let (response, reply) =
                handlers::sasl::authenticate(broker, session, auth, version, r).await;
            if let Some(principal) = reply.authenticated {
                session.principal = principal;
                authenticated = true;
            }
            (ResponseKind::SaslAuthenticate(response), reply.close)
        }
        _ => return Dispatched::close(session.peer, format!("{key:?} is not a SASL request")),
    };
    let bytes: ResponseFrame = match frame::encode_response(key, version, correlation_id, &body) {
        Ok(b) => b.into(),
        Err(e) => {
            return Dispatched::close(session.peer, format!("cannot encode a SASL response: {e}"))
        }
    };
    let pending = if close {
        let delay = broker.settings.sasl.failed_authentication_delay;
        async move {
            tokio::time::sleep(delay).await;
            Outgoing::SendThenClose(bytes)
        }
        .boxed()
    } else {
        async move { Outgoing::Send(bytes, Throttle::none(), None) }.boxed()
    };
    Dispatched {
        pending,
        last: close,
        authenticated,
        throttle: Throttle::none(),
    }
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
        let response = ResponseFrame::from(Bytes::from(vec![7u8; 4096]));
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
        assert_eq!(got, response.to_bytes());
        // One that stops reading is cut off `idle_max` after its last progress.
        let stalled = Instant::now();
        let e = write_response(&mut server, &response, idle_max)
            .await
            .expect_err("the client stopped reading");
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(stalled.elapsed(), idle_max);
        drop(client);
    }

    /// A frame of many pieces, some empty and more than one vectored write takes, arrives
    /// whole and in order through a pipe that accepts a few bytes at a time.
    #[tokio::test]
    async fn a_frame_of_many_pieces_is_written_in_order() {
        let mut whole = BytesMut::new();
        let mut parts = Vec::new();
        for i in 0..200u32 {
            let piece = Bytes::from(vec![(i % 251) as u8; (i as usize * 37) % 300]);
            whole.extend_from_slice(&piece);
            parts.push(piece);
        }
        let mut frame_bytes = BytesMut::new();
        for p in &parts {
            frame_bytes.extend_from_slice(p);
        }
        let frame = pieces(parts);
        let (mut server, mut client) = tokio::io::duplex(7);
        let expected = whole.len();
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; expected];
            client.read_exact(&mut got).await.expect("read");
            got
        });
        write_response(&mut server, &frame, Duration::from_secs(5))
            .await
            .expect("written");
        assert_eq!(reader.await.expect("reader"), whole.freeze());
        assert_eq!(frame.to_bytes(), frame_bytes.freeze());
    }

    /// A frame of these pieces (as a Fetch response's are made).
    fn pieces(parts: Vec<Bytes>) -> ResponseFrame {
        let mut frame = ResponseFrame::default();
        for p in parts {
            frame = frame.with_piece(p);
        }
        frame
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
