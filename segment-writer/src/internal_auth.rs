//! Mutual authentication of brokers on the internal port: the pure core of a
//! challenge–response handshake over a shared cluster secret (issue 15).
//!
//! Lifecycle: the handshake is the first three frames of every internal connection, before
//! any replication, tail or trim frame (`crate::replica_proto`) is read or written:
//!
//! ```text
//! dialer (client)                                   listener (server)
//!   Hello    { magic, version, client_id, nonce_c } ─▶
//!          ◀─ Challenge { magic, version, server_id, nonce_s, proof_s }
//!   Proof    { magic, proof_c }                     ─▶   (verified, else closed)
//! ```
//!
//! `proof_x = HMAC-SHA256(secret, label_x ‖ client_id ‖ server_id ‖ nonce_c ‖ nonce_s)`,
//! with a direction label (`server` / `client`) so that one side's proof can never be
//! reflected as the other's. Both nonces are fresh per connection (each side's own, from
//! the caller's `Rng`, so the simulation stays deterministic), so a recorded proof is
//! worthless on another connection; both broker ids are inside the MAC, so a peer cannot
//! claim to be another broker with a proof made for a different id. Verification is
//! constant-time (`ring::hmac::verify`). The server proves itself first but learns
//! nothing from a client before the client's proof is verified, and sends nothing but its
//! challenge. Frames have fixed sizes, so nothing before the handshake completes can make
//! either side allocate beyond [`CHALLENGE_LEN`] bytes.
//!
//! Rotation: a [`Secrets`] holds the secret a broker proves with and optionally a second
//! one it also accepts (a file's first and second lines). Three rolling restarts move a
//! cluster from `OLD` to `NEW` with no refused connection: `OLD\nNEW`, then `NEW\nOLD`,
//! then `NEW`.
//!
//! Turning it on: there is no mixed mode. A broker with secrets and one without refuse each
//! other (one fails on the other's magic, the other reads it as an oversized frame length),
//! so while a restart rolls the two halves neither replicate to each other nor answer each
//! other's tail requests: `acks=all` with `min.insync.replicas` ≥ 2 is refused and a
//! failover's recovery waits (retried) for a replica of its half. Nothing acknowledged is
//! lost; restart all brokers together, or roll quickly.
//!
//! Wiring: [`InternalAuth`] (`internal_auth/peer.rs`) runs [`client`] and [`server`] for a
//! broker, with its id, secrets, `Clock` and `Rng`, and counts and logs failures.

use ring::hmac;

mod peer;
pub use peer::{InternalAuth, HANDSHAKE_TIMEOUT};

/// First bytes of every handshake frame. An old-protocol frame (a length prefix) never
/// starts with these, so a peer without authentication is refused at its first frame.
pub const MAGIC: [u8; 4] = *b"OXIA";
/// Version of the handshake.
pub const VERSION: u8 = 1;
/// Bytes of a nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes of a proof (HMAC-SHA256).
pub const PROOF_LEN: usize = 32;
/// The smallest secret accepted (bytes of the file's contents, trimmed).
pub const SECRET_LEN_MIN: usize = 32;
/// Bytes of a Hello frame.
pub const HELLO_LEN: usize = 4 + 1 + 4 + NONCE_LEN;
/// Bytes of a Challenge frame.
pub const CHALLENGE_LEN: usize = 4 + 1 + 4 + NONCE_LEN + PROOF_LEN;
/// Bytes of a Proof frame.
pub const PROOF_FRAME_LEN: usize = 4 + PROOF_LEN;

const LABEL_SERVER: &[u8] = b"oxbow-internal-auth-v1 server";
const LABEL_CLIENT: &[u8] = b"oxbow-internal-auth-v1 client";

/// Why a handshake failed. Every variant closes the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("not an internal-auth frame (bad magic); the peer may run without a secret")]
    BadMagic,
    #[error("unsupported internal-auth version {0}")]
    BadVersion(u8),
    #[error("handshake frame of {got} bytes, expected {expected}")]
    BadLength { got: usize, expected: usize },
    #[error("peer's proof does not match any configured secret (wrong secret, replay or forged broker id)")]
    BadProof,
    #[error("secret of {0} bytes; at least {SECRET_LEN_MIN} required")]
    SecretTooShort(usize),
    #[error("{0} secrets given; at most two (the one to prove with, then one more to accept)")]
    TooManySecrets(usize),
}

/// The cluster secrets a broker knows: the one it proves with (`current`) and optionally
/// one more it accepts (`previous`, during a rotation).
#[derive(Clone)]
pub struct Secrets {
    current: hmac::Key,
    previous: Option<hmac::Key>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print secret material.
        f.debug_struct("Secrets")
            .field("previous", &self.previous.is_some())
            .finish_non_exhaustive()
    }
}

impl Secrets {
    /// From raw secrets (e.g. file contents with surrounding whitespace trimmed).
    pub fn new(current: &[u8], previous: Option<&[u8]>) -> Result<Self, AuthError> {
        let key = |s: &[u8]| {
            if s.len() < SECRET_LEN_MIN {
                Err(AuthError::SecretTooShort(s.len()))
            } else {
                Ok(hmac::Key::new(hmac::HMAC_SHA256, s))
            }
        };
        Ok(Secrets {
            current: key(current)?,
            previous: previous.map(key).transpose()?,
        })
    }

    /// From a secret file's contents: the first non-empty line is the secret to prove
    /// with, an optional second non-empty line one more to accept (for rotation). A third
    /// is refused: it is a mistake (a rotation half done by hand), not a secret to ignore.
    pub fn from_file_contents(contents: &[u8]) -> Result<Self, AuthError> {
        let lines: Vec<&[u8]> = contents
            .split(|b| *b == b'\n')
            .map(|l| l.trim_ascii())
            .filter(|l| !l.is_empty())
            .collect();
        match lines.as_slice() {
            [] => Secrets::new(&[], None),
            [current] => Secrets::new(current, None),
            [current, previous] => Secrets::new(current, Some(previous)),
            more => Err(AuthError::TooManySecrets(more.len())),
        }
    }

    fn prove(&self, label: &[u8], t: &Transcript) -> [u8; PROOF_LEN] {
        let tag = hmac::sign(&self.current, &t.message(label));
        let mut out = [0u8; PROOF_LEN];
        out.copy_from_slice(tag.as_ref());
        out
    }

    fn verify(&self, label: &[u8], t: &Transcript, proof: &[u8]) -> Result<(), AuthError> {
        let msg = t.message(label);
        let ok = hmac::verify(&self.current, &msg, proof).is_ok()
            || self
                .previous
                .as_ref()
                .is_some_and(|k| hmac::verify(k, &msg, proof).is_ok());
        if ok {
            Ok(())
        } else {
            Err(AuthError::BadProof)
        }
    }
}

/// What both proofs are computed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Transcript {
    client_id: u32,
    server_id: u32,
    nonce_c: [u8; NONCE_LEN],
    nonce_s: [u8; NONCE_LEN],
}

impl Transcript {
    fn message(&self, label: &[u8]) -> Vec<u8> {
        let mut m = Vec::with_capacity(label.len() + 8 + 2 * NONCE_LEN);
        m.extend_from_slice(label);
        m.extend_from_slice(&self.client_id.to_be_bytes());
        m.extend_from_slice(&self.server_id.to_be_bytes());
        m.extend_from_slice(&self.nonce_c);
        m.extend_from_slice(&self.nonce_s);
        m
    }
}

fn check_header(frame: &[u8], expected: usize) -> Result<(), AuthError> {
    if frame.len() >= 4 && frame[..4] != MAGIC {
        return Err(AuthError::BadMagic);
    }
    if frame.len() != expected {
        return Err(AuthError::BadLength {
            got: frame.len(),
            expected,
        });
    }
    Ok(())
}

fn id_and_nonce(frame: &[u8]) -> Result<(u32, [u8; NONCE_LEN]), AuthError> {
    if frame[4] != VERSION {
        return Err(AuthError::BadVersion(frame[4]));
    }
    let mut id = [0u8; 4];
    id.copy_from_slice(&frame[5..9]);
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(&frame[9..9 + NONCE_LEN]);
    Ok((u32::from_be_bytes(id), nonce))
}

/// The dialing side of a handshake.
#[derive(Debug)]
pub struct ClientHandshake {
    secrets: Secrets,
    client_id: u32,
    nonce_c: [u8; NONCE_LEN],
}

impl ClientHandshake {
    /// Starts a handshake; returns the Hello frame to send.
    pub fn start(secrets: Secrets, client_id: u32, nonce_c: [u8; NONCE_LEN]) -> (Self, Vec<u8>) {
        let mut hello = Vec::with_capacity(HELLO_LEN);
        hello.extend_from_slice(&MAGIC);
        hello.push(VERSION);
        hello.extend_from_slice(&client_id.to_be_bytes());
        hello.extend_from_slice(&nonce_c);
        (
            ClientHandshake {
                secrets,
                client_id,
                nonce_c,
            },
            hello,
        )
    }

    /// Verifies the server's Challenge (its proof); returns the server's broker id and
    /// the Proof frame to send, after which the connection is authenticated.
    pub fn on_challenge(self, challenge: &[u8]) -> Result<(u32, Vec<u8>), AuthError> {
        check_header(challenge, CHALLENGE_LEN)?;
        let (server_id, nonce_s) = id_and_nonce(challenge)?;
        let t = Transcript {
            client_id: self.client_id,
            server_id,
            nonce_c: self.nonce_c,
            nonce_s,
        };
        self.secrets
            .verify(LABEL_SERVER, &t, &challenge[9 + NONCE_LEN..])?;
        let mut proof = Vec::with_capacity(PROOF_FRAME_LEN);
        proof.extend_from_slice(&MAGIC);
        proof.extend_from_slice(&self.secrets.prove(LABEL_CLIENT, &t));
        Ok((server_id, proof))
    }
}

/// The accepting side of a handshake, after it has answered a Hello.
#[derive(Debug)]
pub struct ServerHandshake {
    secrets: Secrets,
    transcript: Transcript,
}

impl ServerHandshake {
    /// Answers a client's Hello; returns the Challenge frame to send.
    pub fn on_hello(
        secrets: Secrets,
        server_id: u32,
        nonce_s: [u8; NONCE_LEN],
        hello: &[u8],
    ) -> Result<(Self, Vec<u8>), AuthError> {
        check_header(hello, HELLO_LEN)?;
        let (client_id, nonce_c) = id_and_nonce(hello)?;
        let transcript = Transcript {
            client_id,
            server_id,
            nonce_c,
            nonce_s,
        };
        let mut challenge = Vec::with_capacity(CHALLENGE_LEN);
        challenge.extend_from_slice(&MAGIC);
        challenge.push(VERSION);
        challenge.extend_from_slice(&server_id.to_be_bytes());
        challenge.extend_from_slice(&nonce_s);
        challenge.extend_from_slice(&secrets.prove(LABEL_SERVER, &transcript));
        Ok((
            ServerHandshake {
                secrets,
                transcript,
            },
            challenge,
        ))
    }

    /// Verifies the client's Proof; returns the client's now-authenticated broker id.
    pub fn on_proof(self, proof: &[u8]) -> Result<u32, AuthError> {
        check_header(proof, PROOF_FRAME_LEN)?;
        self.secrets
            .verify(LABEL_CLIENT, &self.transcript, &proof[4..])?;
        Ok(self.transcript.client_id)
    }
}

/// A fresh nonce from the broker's `Rng` (the OS's in production, seeded in the simulation).
pub fn nonce(rng: &dyn oxbow_metadata::clock::Rng) -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    for chunk in n.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next_u64().to_be_bytes());
    }
    n
}

/// Why a connection's handshake ended it.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error("internal-auth handshake timed out")]
    Timeout,
    /// The peer proved the secret but is not the broker the dialer meant to reach.
    #[error("authenticated as broker {authenticated}, expected broker {expected}")]
    WrongBroker { expected: i32, authenticated: i32 },
    /// The peer proved the secret as one broker, then claimed another broker's WAL.
    #[error("authenticated as broker {authenticated}, but claims broker {claimed}'s WAL")]
    ClaimsAnother { authenticated: i32, claimed: i32 },
    /// The peer closed the connection before sending a byte of its frame.
    #[error("the peer closed the connection at the handshake")]
    Closed,
    #[error("internal-auth handshake: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads exactly one fixed-size handshake frame: no length comes from the peer. The magic
/// is read and checked first, so a peer speaking the old protocol (a frame's length prefix
/// first, and frames shorter than a handshake's) is refused at once, not at the deadline.
async fn read_frame<C: tokio::io::AsyncRead + Unpin>(
    conn: &mut C,
    len: usize,
) -> Result<Vec<u8>, HandshakeError> {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; len];
    let first = conn.read(&mut buf[..MAGIC.len()]).await?;
    if first == 0 {
        return Err(HandshakeError::Closed);
    }
    conn.read_exact(&mut buf[first..MAGIC.len()]).await?;
    if buf[..MAGIC.len()] != MAGIC {
        return Err(AuthError::BadMagic.into());
    }
    conn.read_exact(&mut buf[MAGIC.len()..]).await?;
    Ok(buf)
}

/// Runs the dialer's side on a fresh connection, bounded by `deadline` (from the broker's
/// `Clock`); returns the server's authenticated broker id.
pub async fn client<C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    conn: &mut C,
    secrets: Secrets,
    client_id: u32,
    nonce_c: [u8; NONCE_LEN],
    deadline: oxbow_metadata::clock::Sleep,
) -> Result<u32, HandshakeError> {
    use tokio::io::AsyncWriteExt;
    let run = async {
        let (hs, hello) = ClientHandshake::start(secrets, client_id, nonce_c);
        conn.write_all(&hello).await?;
        let challenge = read_frame(conn, CHALLENGE_LEN).await?;
        let (server_id, proof) = hs.on_challenge(&challenge)?;
        conn.write_all(&proof).await?;
        conn.flush().await?;
        Ok(server_id)
    };
    tokio::select! {
        // Polled in order: tokio's random branch order would make the simulation's runs
        // differ for one seed.
        biased;
        r = run => r,
        () = deadline => Err(HandshakeError::Timeout),
    }
}

/// Runs the listener's side on an accepted connection, bounded by `deadline`; returns the
/// client's authenticated broker id. On an error the caller closes the connection without
/// reading or answering anything else.
pub async fn server<C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    conn: &mut C,
    secrets: Secrets,
    server_id: u32,
    nonce_s: [u8; NONCE_LEN],
    deadline: oxbow_metadata::clock::Sleep,
) -> Result<u32, HandshakeError> {
    use tokio::io::AsyncWriteExt;
    let run = async {
        let hello = read_frame(conn, HELLO_LEN).await?;
        let (hs, challenge) = ServerHandshake::on_hello(secrets, server_id, nonce_s, &hello)?;
        conn.write_all(&challenge).await?;
        conn.flush().await?;
        // A peer gone after our challenge tried and gave up (say, on our proof): a
        // failed handshake, unlike a connection closed before its first byte.
        let proof = read_frame(conn, PROOF_FRAME_LEN)
            .await
            .map_err(|e| match e {
                HandshakeError::Closed => HandshakeError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the peer closed the connection after the challenge",
                )),
                e => e,
            })?;
        Ok(hs.on_proof(&proof)?)
    };
    tokio::select! {
        // Polled in order: tokio's random branch order would make the simulation's runs
        // differ for one seed.
        biased;
        r = run => r,
        () = deadline => Err(HandshakeError::Timeout),
    }
}

#[cfg(test)]
mod tests;
