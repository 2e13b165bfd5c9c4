//! This broker's side of internal-port authentication: [`InternalAuth`] holds its broker
//! id, the cluster secrets (`--internal-auth-secret-file`; none: no handshake, the port is
//! open as before issue 15) and where nonces and deadlines come from, and runs the
//! handshake of [`super`] on every internal connection — those the replica server accepts
//! ([`crate::replica`]) and those the dialers make ([`crate::replicate`],
//! [`crate::leadership::recover`]).
//!
//! Lifecycle: one per broker, made by the [`crate::LogManager`] from its settings and
//! components and cloned into the replicator, the recoveries and the replica server; the
//! clones share one failure counter (`oxbow_internal_auth_failures_total`) and one warning
//! limiter. A failure is warned about at most once per [`WARN_EVERY`] per peer host, so a
//! scanner or a misconfigured peer retrying every few hundred milliseconds cannot flood the
//! log; the rest go to debug, and the counter counts every one.

use super::{client, nonce, server, AuthError, HandshakeError, Secrets};
use crate::error::{Error, Result};
use oxbow_metadata::clock::{Clock, OsRng, Rng, SystemClock};
use oxbow_metadata::BrokerId;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// How long a handshake may take, either side: three small frames, so a peer slower than
/// this is gone or holding a connection slot on purpose.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// At most one warning per peer host this often.
pub const WARN_EVERY: Duration = Duration::from_secs(60);
/// Peer hosts remembered by the warning limiter; past it (a scan from many addresses),
/// failures of new hosts go to debug until old entries expire.
const WARN_HOSTS_MAX: usize = 256;

/// How this broker authenticates its internal connections; clones share counters.
#[derive(Clone, Debug)]
pub struct InternalAuth {
    broker_id: BrokerId,
    /// `None`: no handshake (no `--internal-auth-secret-file`).
    secrets: Option<Secrets>,
    /// Handshake deadlines.
    clock: Arc<dyn Clock>,
    /// Nonces: the OS's in production, seeded in the simulation.
    rng: Arc<dyn Rng>,
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    failures: AtomicU64,
    warned: Mutex<WarnLimiter>,
}

impl InternalAuth {
    pub fn new(
        broker_id: BrokerId,
        secrets: Option<Secrets>,
        clock: Arc<dyn Clock>,
        rng: Arc<dyn Rng>,
    ) -> InternalAuth {
        InternalAuth {
            broker_id,
            secrets,
            clock,
            rng,
            shared: Arc::default(),
        }
    }

    /// No handshake: every connection is served, as without `--internal-auth-secret-file`.
    pub fn disabled(broker_id: BrokerId) -> InternalAuth {
        InternalAuth::new(broker_id, None, Arc::new(SystemClock), Arc::new(OsRng))
    }

    /// The broker this is.
    pub fn broker_id(&self) -> BrokerId {
        self.broker_id
    }

    /// Whether connections must authenticate.
    pub fn enabled(&self) -> bool {
        self.secrets.is_some()
    }

    /// Handshakes that failed, either side, since start (`/metrics`).
    pub fn failures(&self) -> u64 {
        self.shared.failures.load(Ordering::Relaxed)
    }

    /// Authenticates a fresh connection this broker dialled to reach broker `expected` at
    /// `addr`: the peer must prove the secret *and* be that broker. Without secrets, at
    /// once. An error is a [`Error::Replication`] (retriable); the caller drops the
    /// connection.
    pub async fn dial<C>(&self, conn: &mut C, expected: BrokerId, addr: &str) -> Result<()>
    where
        C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let Some(secrets) = &self.secrets else {
            return Ok(());
        };
        let r = client(
            conn,
            secrets.clone(),
            to_wire(self.broker_id),
            nonce(&*self.rng),
            self.clock.sleep(HANDSHAKE_TIMEOUT),
        )
        .await
        .and_then(|id| match from_wire(id) {
            id if id == expected => Ok(()),
            authenticated => Err(HandshakeError::WrongBroker {
                expected,
                authenticated,
            }),
        });
        r.map_err(|e| {
            let e = match e {
                // The peer hung up on our Hello: it runs without a secret (it read our
                // magic as an oversized frame length) or refused us.
                HandshakeError::Closed => HandshakeError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the peer closed the connection at the handshake (it may run without --internal-auth-secret-file)",
                )),
                e => e,
            };
            self.failed(addr, &e);
            Error::Replication(format!(
                "internal-auth handshake with broker {expected} at {addr}: {e}"
            ))
        })
    }

    /// Authenticates a connection the replica server accepted from `peer`: the broker id
    /// the peer proved (`None` without secrets). On an error the caller closes the
    /// connection having sent nothing but (perhaps) the challenge; the failure is already
    /// counted and logged.
    pub async fn accept<C>(
        &self,
        conn: &mut C,
        peer: &str,
    ) -> std::result::Result<Option<BrokerId>, HandshakeError>
    where
        C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let Some(secrets) = &self.secrets else {
            return Ok(None);
        };
        let r = server(
            conn,
            secrets.clone(),
            to_wire(self.broker_id),
            nonce(&*self.rng),
            self.clock.sleep(HANDSHAKE_TIMEOUT),
        )
        .await;
        match r {
            Ok(id) => Ok(Some(from_wire(id))),
            // A connection closed before its first byte tried nothing (a port probe, or a
            // dialer that gave up): not a failed authentication.
            Err(HandshakeError::Closed) => {
                tracing::debug!(%peer, "internal connection closed before its handshake");
                Err(HandshakeError::Closed)
            }
            Err(e) => {
                self.failed(peer, &e);
                Err(e)
            }
        }
    }

    /// Whether a peer that authenticated as `authenticated` may act for broker `claimed`
    /// (the source of a replication stream): only for itself. Always, without secrets.
    pub fn may_act_for(
        &self,
        authenticated: Option<BrokerId>,
        claimed: BrokerId,
        peer: &str,
    ) -> bool {
        match authenticated {
            Some(id) if id != claimed => {
                self.failed(
                    peer,
                    &HandshakeError::ClaimsAnother {
                        authenticated: id,
                        claimed,
                    },
                );
                false
            }
            _ => true,
        }
    }

    fn failed(&self, peer: &str, e: &HandshakeError) {
        self.shared.failures.fetch_add(1, Ordering::Relaxed);
        let warn = self
            .shared
            .warned
            .lock()
            .map(|mut w| w.should_warn(host(peer), self.clock.now()))
            .unwrap_or(false);
        let hint = match e {
            HandshakeError::Auth(AuthError::BadMagic) => {
                "the peer does not authenticate: does it run without --internal-auth-secret-file?"
            }
            HandshakeError::Auth(AuthError::BadProof) => {
                "the peer's secret differs (check both brokers' --internal-auth-secret-file)"
            }
            _ => "",
        };
        if warn {
            tracing::warn!(%peer, error = %e, hint,
                "internal-port authentication failed; connection closed (further failures from this host are logged at debug for {WARN_EVERY:?})");
        } else {
            tracing::debug!(%peer, error = %e, "internal-port authentication failed");
        }
    }
}

/// Broker ids are `i32` in Kafka; the handshake carries their 32 bits as they are.
fn to_wire(id: BrokerId) -> u32 {
    u32::from_be_bytes(id.to_be_bytes())
}

fn from_wire(id: u32) -> BrokerId {
    BrokerId::from_be_bytes(id.to_be_bytes())
}

/// The host of a peer name (`ip:port`, `[v6]:port`, or the simulation's `zone:n`): one
/// broker's reconnects come from new ports, so the port is not part of who it is.
fn host(peer: &str) -> &str {
    peer.rsplit_once(':').map_or(peer, |(h, _)| h)
}

/// When each peer host was last warned about (pure; time passed in).
#[derive(Debug, Default)]
struct WarnLimiter {
    last: BTreeMap<String, Instant>,
}

impl WarnLimiter {
    fn should_warn(&mut self, host: &str, now: Instant) -> bool {
        let recent = |t: &Instant| now.saturating_duration_since(*t) < WARN_EVERY;
        if let Some(t) = self.last.get(host) {
            if recent(t) {
                return false;
            }
        } else if self.last.len() >= WARN_HOSTS_MAX {
            self.last.retain(|_, t| recent(t));
            if self.last.len() >= WARN_HOSTS_MAX {
                return false;
            }
        }
        self.last.insert(host.to_owned(), now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_per_host_per_interval_and_a_bounded_memory() {
        let t0 = Instant::now();
        let mut w = WarnLimiter::default();
        assert!(w.should_warn("10.0.0.1", t0));
        assert!(!w.should_warn("10.0.0.1", t0 + Duration::from_secs(1)));
        assert!(w.should_warn("10.0.0.2", t0 + Duration::from_secs(1)));
        assert!(w.should_warn("10.0.0.1", t0 + WARN_EVERY));
        // A scan from many hosts fills the table, then goes quiet until entries expire.
        for i in 0..WARN_HOSTS_MAX * 2 {
            w.should_warn(&format!("192.168.{}.{}", i / 256, i % 256), t0 + WARN_EVERY);
        }
        assert_eq!(w.last.len(), WARN_HOSTS_MAX);
        assert!(!w.should_warn("172.16.0.1", t0 + WARN_EVERY));
        assert!(w.should_warn("172.16.0.1", t0 + WARN_EVERY * 2));
        assert!(w.last.len() <= WARN_HOSTS_MAX);
    }

    #[test]
    fn hosts_and_wire_ids() {
        assert_eq!(host("127.0.0.1:4000"), "127.0.0.1");
        assert_eq!(host("[::1]:4000"), "[::1]");
        assert_eq!(host("az1:7"), "az1");
        assert_eq!(host("nohost"), "nohost");
        for id in [0, 1, -1, i32::MAX, i32::MIN] {
            assert_eq!(from_wire(to_wire(id)), id);
        }
    }
}
