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

/// Default of `--queued-max-request-bytes`.
pub const QUEUED_MAX_REQUEST_BYTES: usize = 256 << 20;

/// The bounds on each client connection (flags of `oxbow serve`).
#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    /// Close a connection with no request in flight and no frame arriving for this long
    /// (`--connections-max-idle`, Kafka's `connections.max.idle.ms`).
    pub idle_max: Duration,
    /// A frame must be complete this long after its first byte (`--request-read-timeout`).
    pub request_read_timeout: Duration,
    /// The bytes of requests read and not yet answered, all connections together
    /// (`--queued-max-request-bytes`).
    pub request_memory: RequestMemory,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            idle_max: Duration::from_secs(600),
            request_read_timeout: Duration::from_secs(60),
            request_memory: RequestMemory::new(QUEUED_MAX_REQUEST_BYTES),
        }
    }
}

/// Kafka's `queued.max.request.bytes`: the request bytes every connection together may
/// hold between reading a frame and answering it. A frame read while the pool is spent
/// waits for room before it is dispatched, and its connection reads nothing more
/// meanwhile, so past the budget the broker holds at most one more frame per connection
/// (each at most `--max-request-bytes`). A frame larger than the whole budget takes all of
/// it. Counted in KiB, so any budget fits a semaphore's permits.
#[derive(Clone, Debug)]
pub struct RequestMemory {
    permits: Arc<Semaphore>,
    budget_kib: u32,
}

impl RequestMemory {
    pub fn new(budget_bytes: usize) -> Self {
        let budget_kib = u32::try_from(budget_bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize) as u32);
        RequestMemory {
            permits: Arc::new(Semaphore::new(budget_kib as usize)),
            budget_kib,
        }
    }

    fn kib_of(&self, frame_bytes: usize) -> u32 {
        u32::try_from(frame_bytes.div_ceil(1024).max(1))
            .unwrap_or(u32::MAX)
            .min(self.budget_kib)
    }

    /// Room for a frame of `frame_bytes` now, if there is.
    pub fn try_take(&self, frame_bytes: usize) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.permits
            .clone()
            .try_acquire_many_owned(self.kib_of(frame_bytes))
            .ok()
    }

    /// Room for a frame of `frame_bytes`, once there is (never closed: `None` only if it
    /// were).
    pub async fn take(&self, frame_bytes: usize) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.permits
            .clone()
            .acquire_many_owned(self.kib_of(frame_bytes))
            .await
            .ok()
    }

    /// Bytes of requests held now (in KiB steps).
    pub fn used_bytes(&self) -> u64 {
        u64::from(self.budget_kib).saturating_sub(self.permits.available_permits() as u64) * 1024
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
        let limits = limits.clone();
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

#[cfg(test)]
mod tests {
    use super::RequestMemory;
    use std::time::Duration;

    #[tokio::test]
    async fn request_memory_is_a_budget_of_bytes_a_frame_larger_than_all_of_it_takes_all() {
        let memory = RequestMemory::new(10 << 10);
        let first = memory.try_take(6 << 10).expect("room for 6 KiB");
        assert_eq!(memory.used_bytes(), 6 << 10);
        assert!(memory.try_take(5 << 10).is_none(), "4 KiB left");
        // A frame larger than the whole budget waits for all of it, then passes alone.
        let big = {
            let memory = memory.clone();
            tokio::spawn(async move { memory.take(1 << 20).await.map(|_permit| ()) })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!big.is_finished(), "waits while 6 KiB are held");
        drop(first);
        let got = tokio::time::timeout(Duration::from_secs(5), big)
            .await
            .expect("room once released")
            .expect("task");
        assert!(got.is_some());
        assert_eq!(memory.used_bytes(), 0, "given back when dropped");
        // Partial KiB round up; an empty frame still counts.
        let a = memory.try_take(1).expect("1 byte");
        assert_eq!(memory.used_bytes(), 1 << 10);
        drop(a);
    }
}
