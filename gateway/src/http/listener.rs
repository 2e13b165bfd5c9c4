//! The HTTP listener: accepts connections up to a cap and serves each with hyper (HTTP/1.1),
//! closing the ones that hold a file descriptor without using it.
//!
//! `axum::serve` has neither a header-read nor an idle timeout nor a connection cap: 400
//! slow-loris and 10,050 idle connections all stayed open, and ~20k of them exhausted the
//! file descriptors the Kafka listener and the WAL share. Here each connection moves through
//! [`Phase`]s, and the phase it is in says how long it may stay there:
//!
//! | phase | from | bounded by |
//! |-------|------|------------|
//! | a request head arriving | accept, or the first byte after an idle wait | `--http-header-timeout` from its start (slow loris) |
//! | idle between keep-alive requests | the end of the last response | `--http-idle-timeout` |
//! | a request in the application, its response being written | the head parsed | not at all: long polls (`timeout=`) are legitimate |
//! | its body being read by a handler | the head parsed | `--http-body-timeout` for the whole body |
//! | its response not taken by the client (writes blocked) | a write that did not complete | `--http-idle-timeout` |
//!
//! Idle time counts from the last response byte the client took, so a slow but steady
//! download is never cut, while a client that stops reading is.
//!
//! Past `--http-connections-max`, connections wait in the kernel's accept backlog (no file
//! descriptor taken here) until one closes. On shutdown, idle connections close at once and
//! busy ones finish their request (hyper's graceful shutdown).

use crate::broker::Broker;
use crate::security::tls::TlsSource;
use crate::security::Principal;
use axum::Router;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::service::Service as _;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Default of `--http-connections-max`.
pub const CONNECTIONS_MAX: u32 = 4_096;
/// Most header lines hyper parses. Requests with more than [`super::HEADERS_MAX`] but at most
/// this many get the JSON 431 from the router; past it (or past [`HEADER_BYTES_MAX`]) hyper
/// answers 431 itself, without a body. Parsing more costs a heap allocation per request.
pub const HEADERS_PARSE_MAX: usize = 1_000;
/// Most bytes of a request head (request line and headers) hyper buffers.
pub const HEADER_BYTES_MAX: usize = 64 << 10;

/// The bounds on each HTTP connection (flags of `oxbow serve`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Most concurrent connections (`--http-connections-max`).
    pub connections_max: usize,
    /// A request head must be complete this long after its first byte, or after accept
    /// (`--http-header-timeout`).
    pub header_timeout: Duration,
    /// A keep-alive connection with no request is closed after this long (`--http-idle-timeout`).
    pub idle_timeout: Duration,
    /// A request body must be read whole this long after its head (`--http-body-timeout`).
    pub body_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            connections_max: CONNECTIONS_MAX as usize,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(60),
        }
    }
}

/// What a connection is doing, as far as its timeouts care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A request head is arriving (or awaited right after accept) since `since`.
    Head { since: Instant },
    /// Waiting for the first byte of the next request since `since`.
    Idle { since: Instant },
    /// `requests` are in the application or writing their responses; `write_stalled`:
    /// since when the socket has taken no response bytes (the client is not reading).
    Busy {
        requests: usize,
        write_stalled: Option<Instant>,
    },
}

/// Why a connection was closed by its timeouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expiry {
    /// Too slow sending a request head.
    Head,
    /// Idle too long between requests.
    Idle,
    /// Not reading its response for as long as a connection may be idle.
    Write,
}

impl Phase {
    fn deadline(self, limits: &HttpLimits) -> Option<(Instant, Expiry)> {
        match self {
            Phase::Head { since } => Some((since + limits.header_timeout, Expiry::Head)),
            Phase::Idle { since } => Some((since + limits.idle_timeout, Expiry::Idle)),
            Phase::Busy {
                write_stalled: Some(since),
                ..
            } => Some((since + limits.idle_timeout, Expiry::Write)),
            Phase::Busy {
                write_stalled: None,
                ..
            } => None,
        }
    }

    /// A write found the socket full (`true`) or wrote bytes (`false`). Returns whether
    /// the phase changed.
    fn on_write(&mut self, blocked: bool, now: Instant) -> bool {
        match self {
            Phase::Busy { write_stalled, .. } => match (blocked, *write_stalled) {
                (true, None) => {
                    *write_stalled = Some(now);
                    true
                }
                (false, Some(_)) => {
                    *write_stalled = None;
                    true
                }
                (true, Some(_)) | (false, None) => false,
            },
            // hyper may still be flushing the last response: the connection is idle only
            // from the last byte the client took.
            Phase::Idle { since } if !blocked => {
                *since = now;
                true
            }
            Phase::Idle { .. } | Phase::Head { .. } => false,
        }
    }

    /// Bytes arrived: a request head begins if the connection was idle.
    fn on_read(&mut self, now: Instant) -> bool {
        match *self {
            Phase::Idle { .. } => {
                *self = Phase::Head { since: now };
                true
            }
            Phase::Head { .. } | Phase::Busy { .. } => false,
        }
    }

    fn on_request(&mut self) {
        *self = match *self {
            Phase::Busy {
                requests,
                write_stalled,
            } => Phase::Busy {
                requests: requests + 1,
                write_stalled,
            },
            Phase::Head { .. } | Phase::Idle { .. } => Phase::Busy {
                requests: 1,
                write_stalled: None,
            },
        };
    }

    fn on_response_done(&mut self, now: Instant) {
        *self = match *self {
            Phase::Busy {
                requests,
                write_stalled,
            } if requests > 1 => Phase::Busy {
                requests: requests - 1,
                write_stalled,
            },
            Phase::Busy { .. } | Phase::Head { .. } | Phase::Idle { .. } => {
                Phase::Idle { since: now }
            }
        };
    }
}

/// One connection's phase, shared by its socket, its requests and its watchdog.
type Clock = Arc<watch::Sender<Phase>>;

/// Resolves when the connection has stayed in a timed phase past its bound.
async fn expiry(mut phase: watch::Receiver<Phase>, limits: HttpLimits) -> Expiry {
    loop {
        let current = *phase.borrow_and_update();
        match current.deadline(&limits) {
            None => {
                if phase.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
            Some((at, why)) => tokio::select! {
                biased;
                changed = phase.changed() => if changed.is_err() {
                    return std::future::pending().await;
                },
                _ = tokio::time::sleep_until(at) => return why,
            },
        }
    }
}

/// A connection's byte stream: the socket, or TLS over it (`--http-tls`).
trait HttpIo: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> HttpIo for T {}

/// The socket, telling the clock when bytes arrive.
struct Watched {
    stream: Box<dyn HttpIo>,
    clock: Clock,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let now = Instant::now();
            self.clock.send_if_modified(|p| p.on_read(now));
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.on_write(&polled);
        polled
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.on_write(&polled);
        polled
    }
    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl Watched {
    fn on_write(&self, polled: &Poll<io::Result<usize>>) {
        let blocked = match polled {
            Poll::Pending => true,
            Poll::Ready(Ok(n)) if *n > 0 => false,
            Poll::Ready(_) => return,
        };
        let now = Instant::now();
        self.clock.send_if_modified(|p| p.on_write(blocked, now));
    }
}

/// Marks a request done when dropped (its response body written, or abandoned).
struct RequestGuard(Clock);

impl RequestGuard {
    fn start(clock: &Clock) -> Self {
        clock.send_modify(Phase::on_request);
        RequestGuard(clock.clone())
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let now = Instant::now();
        self.0.send_modify(|p| p.on_response_done(now));
    }
}

/// A response body that keeps its request busy until hyper has taken all of it.
struct GuardedBody<B> {
    inner: B,
    _guard: RequestGuard,
}

impl<B: HttpBody + Unpin> HttpBody for GuardedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body not received whole by `--http-body-timeout` after its head.
#[derive(Debug, thiserror::Error)]
#[error("request body not received within --http-body-timeout ({})", humantime::format_duration(*.0))]
pub struct BodyTimedOut(pub Duration);

/// A request body that fails with [`BodyTimedOut`] once its deadline passes.
struct TimedBody {
    inner: Incoming,
    timeout: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match this.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.timeout))))),
            Poll::Pending => Poll::Pending,
        }
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Accepts connections until `shutdown`, then returns; connections finish their request
/// and close (tracked by `tracker`). With `tls` (`--http-tls`) each connection first runs
/// the TLS handshake, within `--http-header-timeout` (the same bound as a request head).
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<TlsSource>>,
    router: Router,
    broker: Arc<Broker>,
    limits: HttpLimits,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    let permits = Arc::new(Semaphore::new(limits.connections_max.max(1)));
    broker
        .metrics
        .http_connections_max
        .store(limits.connections_max.max(1) as u64, Ordering::Relaxed);
    let routed = TowerToHyperService::new(router);
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            p = crate::metrics::connection_slot(&permits, &broker.metrics.http_connection_slot_waits) => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Usually out of file descriptors; back off instead of spinning.
                tracing::warn!(error = %e, "HTTP accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (stream, peer) = stream;
        let _ = stream.set_nodelay(true);
        broker
            .metrics
            .http_connections_open
            .fetch_add(1, Ordering::Relaxed);
        let broker = broker.clone();
        let routed = routed.clone();
        let shutdown = shutdown.clone();
        let tls = tls.clone();
        tracker.spawn(async move {
            let stream: Option<(Box<dyn HttpIo>, Option<Principal>)> = match &tls {
                None => Some((Box::new(stream), None)),
                Some(tls) => {
                    let handshake = tokio::select! {
                        _ = shutdown.cancelled() => None,
                        h = tls.accept(stream, limits.header_timeout) => Some(h),
                    };
                    match handshake {
                        None => None,
                        Some(Ok((stream, principal))) => Some((Box::new(stream), Some(principal))),
                        Some(Err(e)) => {
                            broker
                                .metrics
                                .tls_handshake_failures
                                .fetch_add(1, Ordering::Relaxed);
                            tracing::debug!(error = %e, "HTTPS connection refused");
                            None
                        }
                    }
                }
            };
            if let Some((stream, principal)) = stream {
                serve_connection(stream, peer, principal, routed, &broker, limits, shutdown).await;
            }
            broker
                .metrics
                .http_connections_open
                .fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
}

async fn serve_connection(
    stream: Box<dyn HttpIo>,
    peer: std::net::SocketAddr,
    tls_principal: Option<Principal>,
    routed: TowerToHyperService<Router>,
    broker: &Broker,
    limits: HttpLimits,
    shutdown: CancellationToken,
) {
    let (clock, phase) = watch::channel(Phase::Head {
        since: Instant::now(),
    });
    let clock = Arc::new(clock);
    let io = TokioIo::new(Watched {
        stream,
        clock: clock.clone(),
    });
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let guard = RequestGuard::start(&clock);
        let mut request = request;
        // Who is asking (ACL host matching): `http::authz`.
        request
            .extensions_mut()
            .insert(super::authz::PeerAddr(peer));
        // Over HTTPS, the client certificate's principal (`http::authn`).
        if let Some(p) = &tls_principal {
            request
                .extensions_mut()
                .insert(super::authn::TlsPrincipal(p.clone()));
        }
        let request = request.map(|inner| TimedBody {
            inner,
            timeout: limits.body_timeout,
            deadline: Box::pin(tokio::time::sleep(limits.body_timeout)),
        });
        let answer = routed.call(request);
        async move {
            let response = answer.await?;
            Ok::<_, Infallible>(response.map(|inner| GuardedBody {
                inner,
                _guard: guard,
            }))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .max_headers(HEADERS_PARSE_MAX)
        .max_header_size(HEADER_BYTES_MAX)
        // The watchdog below times the head (and the idle wait, which hyper's own
        // header timeout would cut at the same length).
        .header_read_timeout(None);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let expired = expiry(phase, limits);
    tokio::pin!(expired);
    let mut draining = false;
    loop {
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!(error = %e, "HTTP connection ended with an error");
                }
                return;
            }
            why = &mut expired => {
                let counter = match why {
                    Expiry::Head => &broker.metrics.http_connections_read_timed_out,
                    Expiry::Idle | Expiry::Write => &broker.metrics.http_connections_idle_closed,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(?why, "closing HTTP connection");
                // Dropping the connection closes the socket.
                return;
            }
            _ = shutdown.cancelled(), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> HttpLimits {
        HttpLimits {
            connections_max: 10,
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(7),
        }
    }

    #[test]
    fn phases_move_with_reads_requests_and_responses() {
        let t0 = Instant::now();
        let l = limits();
        let mut p = Phase::Head { since: t0 };
        assert_eq!(p.deadline(&l), Some((t0 + l.header_timeout, Expiry::Head)));
        // More bytes of the same head do not restart its clock (slow loris).
        assert!(!p.on_read(t0 + Duration::from_secs(4)));
        assert_eq!(p.deadline(&l), Some((t0 + l.header_timeout, Expiry::Head)));
        p.on_request();
        assert_eq!(p.deadline(&l), None, "a request in flight has no deadline");
        p.on_request();
        let t1 = t0 + Duration::from_secs(100);
        p.on_response_done(t1);
        assert_eq!(p.deadline(&l), None, "one of two still in flight");
        p.on_response_done(t1);
        assert_eq!(p.deadline(&l), Some((t1 + l.idle_timeout, Expiry::Idle)));
        let t2 = t1 + Duration::from_secs(20);
        assert!(p.on_read(t2), "the first byte of the next request");
        assert_eq!(p.deadline(&l), Some((t2 + l.header_timeout, Expiry::Head)));
        // A response the client does not read: bounded like idleness, from the first
        // blocked write, and cleared by any progress.
        p.on_request();
        let t3 = t2 + Duration::from_secs(1);
        assert!(p.on_write(true, t3));
        assert!(
            !p.on_write(true, t3 + Duration::from_secs(5)),
            "still the first stall"
        );
        assert_eq!(p.deadline(&l), Some((t3 + l.idle_timeout, Expiry::Write)));
        assert!(p.on_write(false, t3 + Duration::from_secs(6)));
        assert_eq!(p.deadline(&l), None);
        // Once the response is handed to hyper, its flush still counts as activity.
        let t4 = t3 + Duration::from_secs(7);
        p.on_response_done(t4);
        assert!(p.on_write(false, t4 + Duration::from_secs(50)));
        assert_eq!(
            p.deadline(&l),
            Some((t4 + Duration::from_secs(50) + l.idle_timeout, Expiry::Idle))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_watchdog_fires_only_in_timed_phases() {
        let l = limits();
        let start = Instant::now();
        let (clock, rx) = watch::channel(Phase::Head { since: start });
        let clock = Arc::new(clock);
        let watchdog = tokio::spawn(expiry(rx, l));
        // A request starts before the head timeout; a long poll of 10 minutes follows.
        tokio::time::advance(Duration::from_secs(4)).await;
        let guard = RequestGuard::start(&clock);
        tokio::time::advance(Duration::from_secs(600)).await;
        assert!(!watchdog.is_finished(), "busy connections never expire");
        drop(guard);
        let idle_from = Instant::now();
        let why = watchdog.await.expect("watchdog");
        assert_eq!(why, Expiry::Idle);
        assert_eq!(idle_from.elapsed(), l.idle_timeout);

        // A head trickling in is cut at the header timeout from its first byte.
        let (clock, rx) = watch::channel(Phase::Idle {
            since: Instant::now(),
        });
        let watchdog = tokio::spawn(expiry(rx, l));
        tokio::time::advance(Duration::from_secs(10)).await;
        let first_byte = Instant::now();
        clock.send_if_modified(|p| p.on_read(first_byte));
        for _ in 0..4 {
            tokio::time::advance(Duration::from_secs(1)).await;
            clock.send_if_modified(|p| p.on_read(Instant::now()));
        }
        let why = watchdog.await.expect("watchdog");
        assert_eq!(why, Expiry::Head);
        assert_eq!(first_byte.elapsed(), l.header_timeout);
    }
}
