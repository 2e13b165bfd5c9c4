//! The Kafka wire protocol server.
//!
//! One long-lived TCP connection per client; requests are pipelined and answered in order.
//! Each request runs in two parts: the ordered part (decode, validate, assign offsets) runs
//! one request at a time per connection, as Kafka does, so two pipelined produces to one
//! partition keep their order; the waiting part (durability for `acks=all`, a fetch's long
//! poll) runs concurrently, and a reorder buffer sends responses in request order.
//!
//! # Layout
//! - [`frame`]: sans-I/O framing and header decoding.
//! - [`conn`]: one connection's loop.
//! - [`versions`]: the API versions advertised, and nothing else is accepted.
//! - `handlers/`: one module per API.

pub mod conn;
pub mod frame;
mod handlers;
pub mod versions;

use crate::broker::Broker;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Most concurrent client connections; past it, new connections wait in the accept backlog.
pub const CONNECTIONS_MAX: usize = 10_000;

/// Accepts connections until `shutdown`, then returns; connections finish in-flight
/// requests and close (tracked by `tracker`).
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    let limit = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            p = limit.clone().acquire_owned() => match p {
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
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
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
        tracker.spawn(async move {
            if let Err(e) = conn::run(stream, peer, broker.clone(), shutdown).await {
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
