//! The replica side of WAL replication: the `--internal-addr` server. It stores other
//! brokers' WAL streams ([`crate::replica_store`]), fsyncs and acknowledges them, trims
//! them when their source says so, and answers tail requests from brokers recovering a dead
//! source's partitions.
//!
//! Lifecycle: [`serve_internal`] accepts until shutdown; each connection first runs the
//! internal-auth handshake ([`crate::internal_auth`], with `--internal-auth-secret-file`):
//! a peer that fails it is closed having been sent nothing but the challenge, before any
//! frame of it is read. Then each connection is one replication stream (first frame
//! `Hello`, whose source must be the broker the peer authenticated as) or one tail request
//! (`FetchTail`, from any authenticated broker: recoveries ask everyone). A stream's
//! frames are read by one task and written by another, so everything that arrived while
//! the previous fsync ran shares the next one (group commit, as in the WAL).

use crate::error::{Error, Result};
use crate::internal_auth::InternalAuth;
use crate::replica_proto::{read_frame, write_frame, Frame};
use crate::replica_store::ReplicaStore;
use crate::transport::{BoxConn, ReplicaListener};
use oxbow_metadata::BrokerId;
use std::sync::Arc;
use tokio::io::{ReadHalf, WriteHalf};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Most concurrent internal connections (a stream per source broker plus recoveries).
const CONNECTIONS_MAX: usize = 256;
/// Frames queued between a stream's reader and its writer (backpressure beyond).
const STREAM_QUEUE_FRAMES: usize = 64;

/// Serves the internal protocol until `shutdown`, as broker `auth.broker_id()`.
pub async fn serve_internal<L: ReplicaListener>(
    mut listener: L,
    auth: InternalAuth,
    store: Arc<ReplicaStore>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
) {
    let limit = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let accepted = tokio::select! {
            // Polled in order (shutdown first): tokio's random branch order would make the
            // simulation's runs differ for one seed.
            biased;
            _ = shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        let (socket, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "internal accept failed");
                continue;
            }
        };
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "too many internal connections; refusing");
            continue;
        };
        let store = store.clone();
        let auth = auth.clone();
        let stop = shutdown.clone();
        tasks.spawn(async move {
            let _permit = permit;
            tokio::select! {
                // Polled in order (shutdown first): tokio's random branch order would make the
                // simulation's runs differ for one seed.
                biased;
                _ = stop.cancelled() => {}
                r = connection(socket, &peer, &auth, store) => {
                    if let Err(e) = r {
                        tracing::info!(%peer, error = %e, "internal connection ended");
                    }
                }
            }
        });
    }
}

async fn connection(
    mut socket: BoxConn,
    peer: &str,
    auth: &InternalAuth,
    store: Arc<ReplicaStore>,
) -> Result<()> {
    let me = auth.broker_id();
    // Counted and logged (rate-limited) inside; the connection just closes.
    let Ok(authenticated) = auth.accept(&mut socket, peer).await else {
        return Ok(());
    };
    let (mut rd, mut wr) = tokio::io::split(socket);
    match read_frame(&mut rd).await? {
        Some(Frame::Hello {
            source,
            incarnation,
            start_sequence,
            skipped,
        }) => {
            // A broker may stream (and trim) only its own WAL's copy: closed unanswered
            // otherwise, like any other failed authentication.
            if !auth.may_act_for(authenticated, source, peer) {
                return Ok(());
            }
            if source == me {
                write_frame(
                    &mut wr,
                    &Frame::Refused {
                        reason: format!("broker {me} does not replicate its own WAL"),
                    },
                )
                .await?;
                return Ok(());
            }
            tracing::info!(
                source,
                incarnation,
                start_sequence,
                "WAL replication stream started"
            );
            stream(
                rd,
                wr,
                source,
                incarnation,
                (start_sequence, skipped),
                store,
            )
            .await
        }
        Some(Frame::FetchTail { source }) => {
            let held = oxbow_metadata::blocking::run_blocking(move || {
                let mut held = store.tail(source)?;
                if source == me {
                    held.extend(store.own_tail()?);
                }
                Ok::<_, Error>(held)
            })
            .await
            .map_err(|e| Error::Internal(format!("tail read task: {e}")))??;
            for (incarnation, bytes) in held {
                write_frame(&mut wr, &Frame::TailChunk { incarnation, bytes }).await?;
            }
            write_frame(&mut wr, &Frame::TailEnd).await
        }
        Some(other) => Err(Error::Replication(format!(
            "unexpected first frame {:?}",
            frame_name(&other)
        ))),
        None => Ok(()),
    }
}

fn frame_name(f: &Frame) -> &'static str {
    match f {
        Frame::Hello { .. } => "Hello",
        Frame::Entries { .. } => "Entries",
        Frame::Trim { .. } => "Trim",
        Frame::Ack { .. } => "Ack",
        Frame::FetchTail { .. } => "FetchTail",
        Frame::TailChunk { .. } => "TailChunk",
        Frame::TailEnd => "TailEnd",
        Frame::Refused { .. } => "Refused",
    }
}

async fn stream(
    mut rd: ReadHalf<BoxConn>,
    mut wr: WriteHalf<BoxConn>,
    source: BrokerId,
    incarnation: u64,
    (start_sequence, skipped): (u64, std::ops::Range<u64>),
    store: Arc<ReplicaStore>,
) -> Result<()> {
    let log = store.log(source, incarnation)?;
    log.lock()
        .map_err(|_| Error::Internal("replica log lock poisoned".into()))?
        .stream_begins(start_sequence, skipped);
    let (tx, mut rx) = mpsc::channel::<Frame>(STREAM_QUEUE_FRAMES);
    let reader = async move {
        while let Some(f) = read_frame(&mut rd).await? {
            if tx.send(f).await.is_err() {
                break;
            }
        }
        Ok::<(), Error>(())
    };
    let writer = async move {
        while let Some(first) = rx.recv().await {
            let mut frames = vec![first];
            while let Ok(f) = rx.try_recv() {
                frames.push(f);
            }
            let log = log.clone();
            let durable = oxbow_metadata::blocking::run_blocking(move || {
                let mut log = log
                    .lock()
                    .map_err(|_| Error::Internal("replica log lock poisoned".into()))?;
                let mut entries = Vec::new();
                let mut trim = None;
                for f in frames {
                    match f {
                        Frame::Entries { bytes, .. } => entries.extend_from_slice(&bytes),
                        Frame::Trim { keep_from } => trim = Some(keep_from),
                        other => {
                            return Err(Error::Replication(format!(
                                "unexpected {} frame in a stream",
                                frame_name(&other)
                            )))
                        }
                    }
                }
                let durable = if entries.is_empty() {
                    None
                } else {
                    Some(log.append(&entries)?)
                };
                if let Some(k) = trim {
                    log.trim(k)?;
                }
                Ok(durable)
            })
            .await
            .map_err(|e| Error::Internal(format!("replica write task: {e}")))??;
            if let Some(durable) = durable {
                write_frame(&mut wr, &Frame::Ack { durable }).await?;
            }
        }
        Ok::<(), Error>(())
    };
    tokio::select! {
        // Polled in order (shutdown first): tokio's random branch order would make the
        // simulation's runs differ for one seed.
        biased;
        r = reader => r,
        r = writer => r,
    }
}
