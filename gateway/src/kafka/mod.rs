//! The Kafka wire protocol server.
//!
//! One long-lived TCP connection per client (TLS on `SSL`/`SASL_SSL` listeners: the
//! handshake runs in the connection's task, under its connection slot and a timeout);
//! requests are pipelined and answered in order.
//! Each request runs in two parts: the ordered part (decode, validate, assign offsets) runs
//! one request at a time per connection, as Kafka does, so two pipelined produces to one
//! partition keep their order; the waiting part (durability for `acks=all`, a fetch's long
//! poll) runs concurrently, and a reorder buffer sends responses in request order.
//!
//! # Layout
//! - [`frame`]: sans-I/O framing and header decoding.
//! - [`request_reader`]: request frames off the socket, bounded in memory and read time.
//! - [`conn`]: one connection's loop (and its idle timeout).
//! - `throttle`: client quotas on the request path (throttle times, muting).
//! - [`versions`]: the API versions advertised, and nothing else is accepted.
//! - `handlers/`: one module per API.

pub mod conn;
pub mod frame;
mod handlers;
pub mod request_latency;
pub mod request_reader;
mod throttle;
pub mod versions;

use crate::broker::Broker;
use crate::security::tls::TlsSource;
use crate::security::{Principal, SecurityProtocol, Session};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Default of `--connections-max`: most concurrent client connections; past it, new
/// connections wait in the kernel's accept backlog (no file descriptor taken) until one
/// closes.
pub const CONNECTIONS_MAX: u32 = 10_000;

/// The bounds on each client connection (flags of `oxbow serve`).
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// Close a connection with no request in flight and no frame arriving for this long
    /// (`--connections-max-idle`, Kafka's `connections.max.idle.ms`).
    pub idle_max: Duration,
    /// A frame must be complete this long after its first byte (`--request-read-timeout`).
    pub request_read_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            idle_max: Duration::from_secs(600),
            request_read_timeout: Duration::from_secs(60),
        }
    }
}

/// Which listener a connection arrived on (`--listeners`).
#[derive(Clone, Debug)]
pub struct ListenerContext {
    pub name: String,
    pub protocol: SecurityProtocol,
    /// The TLS configuration of an `SSL`/`SASL_SSL` listener (`None`: plaintext).
    pub tls: Option<Arc<TlsSource>>,
}

/// Accepts connections on one listener until `shutdown`, then returns; connections finish
/// in-flight requests and close (tracked by `tracker`). `limit` holds one permit per
/// connection the broker may have open, shared by every listener.
pub async fn serve(
    listener: TcpListener,
    context: ListenerContext,
    broker: Arc<Broker>,
    limits: ConnectionLimits,
    limit: Arc<Semaphore>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            p = crate::metrics::connection_slot(&limit, &broker.metrics.connection_slot_waits) => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Usually running out of file descriptors; back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        broker
            .metrics
            .connections_open
            .fetch_add(1, Ordering::Relaxed);
        broker
            .metrics
            .connections_total
            .fetch_add(1, Ordering::Relaxed);
        let broker = broker.clone();
        let shutdown = shutdown.clone();
        let context = context.clone();
        tracker.spawn(async move {
            let mut session = Session {
                peer,
                listener: context.name.clone(),
                protocol: context.protocol,
                principal: Principal::anonymous(),
            };
            let outcome = match &context.tls {
                None => conn::run(stream, session, broker.clone(), limits, shutdown).await,
                Some(tls) => {
                    let timeout = limits
                        .request_read_timeout
                        .min(crate::security::tls::HANDSHAKE_TIMEOUT_MAX);
                    let handshake = tokio::select! {
                        _ = shutdown.cancelled() => None,
                        h = tls.accept(stream, timeout) => Some(h),
                    };
                    match handshake {
                        None => Ok(()),
                        Some(Ok((stream, principal))) => {
                            tracing::debug!(%peer, listener = %context.name, %principal, "TLS connection");
                            session.principal = principal;
                            conn::run(stream, session, broker.clone(), limits, shutdown).await
                        }
                        Some(Err(e)) => {
                            // Plaintext to a TLS port, an untrusted certificate, a stall:
                            // the client's problem, so debug only (and counted).
                            broker
                                .metrics
                                .tls_handshake_failures
                                .fetch_add(1, Ordering::Relaxed);
                            tracing::debug!(%peer, listener = %context.name, error = %e, "TLS connection refused");
                            Ok(())
                        }
                    }
                }
            };
            if let Err(e) = outcome {
                tracing::debug!(%peer, error = %e, "connection closed with an error");
            }
            broker
                .metrics
                .connections_open
                .fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
}
