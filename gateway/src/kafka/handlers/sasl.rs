//! SaslHandshake (v1; v0 refused) and SaslAuthenticate (v0-2): the wire side of a connection's
//! [`Authenticator`], with credentials read from the broker's security cache (never the
//! metadata service: a login costs no round trip).
//!
//! These two are answered by the connection loop itself (`kafka/conn.rs`), which owns the
//! authenticator, not by [`super::handle`]: they change the connection's principal.

use crate::broker::Broker;
use crate::security::sasl::{
    fresh_nonce, AuthReply, Authenticator, CredentialSource, ScramHash, UserCredentials,
};
use crate::security::Session;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use oxbow_metadata::SecurityKind;
use std::sync::OnceLock;
use tokio::time::Instant;

/// Most bytes a SASL listener accepts in one frame before the client authenticates
/// (Kafka's `sasl.server.max.receive.size` default): an anonymous peer cannot make the
/// broker buffer a --max-request-bytes frame.
pub const UNAUTHENTICATED_FRAME_BYTES_MAX: usize = 512 << 10;

/// A new connection's authenticator: SASL required on SASL_* listeners.
pub fn authenticator(broker: &Broker, session: &Session) -> Authenticator {
    let rng = ring::rand::SystemRandom::new();
    Authenticator::new(
        broker.settings.sasl.clone(),
        session.protocol.is_sasl(),
        Box::new(move || fresh_nonce(&rng)),
    )
}

/// Answers SaslHandshake of `version`; whether to close (after the failed-authentication
/// delay).
///
/// v0 is advertised, as Kafka 4 still does (older librdkafka, e.g. 2.0.2 in kcat 1.7.1,
/// will not authenticate unless v0 is in range, then uses v1), but refused: after a v0
/// handshake the client sends raw SASL tokens instead of SaslAuthenticate, which only
/// pre-1.0 clients do.
pub fn handshake(
    auth: &mut Authenticator,
    version: i16,
    r: SaslHandshakeRequest,
) -> (SaslHandshakeResponse, bool) {
    let reply = if version == 0 {
        auth.refuse_handshake(ResponseError::UnsupportedVersion)
    } else {
        auth.handshake(r.mechanism.as_str())
    };
    let response = SaslHandshakeResponse::default()
        .with_error_code(reply.error.map_or(0, |e| e.code()))
        .with_mechanisms(reply.mechanisms.into_iter().map(super::str_bytes).collect());
    (response, reply.close)
}

/// Answers SaslAuthenticate of `version`, and what it did to the connection.
///
/// The exchange runs on the blocking pool: PLAIN costs a PBKDF2 per stored mechanism (up
/// to 16384 iterations each), which must not stall the async workers' other connections.
pub async fn authenticate(
    broker: &Broker,
    session: &Session,
    auth: &mut Authenticator,
    version: i16,
    r: SaslAuthenticateRequest,
) -> (SaslAuthenticateResponse, AuthReply) {
    let cache = broker.security.clone();
    let now = Instant::now();
    let mut running = std::mem::replace(auth, Authenticator::failed(broker.settings.sasl.clone()));
    let joined = tokio::task::spawn_blocking(move || {
        let reply = running.authenticate(version, &r.auth_bytes, &CacheCredentials(&cache), now);
        (running, reply)
    })
    .await;
    let mut reply = match joined {
        Ok((back, reply)) => {
            *auth = back;
            reply
        }
        // The task panicked or the runtime is shutting down: the connection fails (its
        // authenticator stays the refusing stand-in).
        Err(e) => {
            tracing::error!(error = %e, "a SASL exchange did not complete");
            AuthReply {
                error: Some((
                    ResponseError::SaslAuthenticationFailed,
                    "Authentication failed: internal error".into(),
                )),
                auth_bytes: Vec::new(),
                session_lifetime_ms: 0,
                close: true,
                authenticated: None,
            }
        }
    };
    match (&reply.error, &reply.authenticated) {
        (Some((code, message)), _) => {
            tracing::info!(peer = %session.peer, listener = %session.listener, ?code, %message, "SASL authentication failed");
        }
        (None, Some(principal)) => {
            tracing::debug!(peer = %session.peer, %principal, "SASL authenticated");
        }
        (None, None) => {}
    }
    let response = SaslAuthenticateResponse::default()
        .with_error_code(reply.error.as_ref().map_or(0, |(e, _)| e.code()))
        .with_error_message(reply.error.as_ref().map(|(_, m)| super::str_bytes(m)))
        .with_auth_bytes(std::mem::take(&mut reply.auth_bytes).into())
        .with_session_lifetime_ms(reply.session_lifetime_ms);
    (response, reply)
}

/// Credentials from the broker's copy of `security/scram/*`.
struct CacheCredentials<'a>(&'a crate::security::cache::SecurityCache);

impl CredentialSource for CacheCredentials<'_> {
    fn lookup(&self, user: &str) -> Option<UserCredentials> {
        let record = self.0.get(SecurityKind::ScramCredential, user)?;
        match UserCredentials::decode(&record.value) {
            Ok(c) => Some(c),
            Err(why) => {
                tracing::error!(user, %why, "the stored SCRAM credential record is unreadable; the user cannot log in until it is rewritten");
                None
            }
        }
    }

    /// As long as a real user's salt (the tools differ: Kafka's ~26 bytes, ours 32).
    fn decoy_salt(&self, user: &str) -> Vec<u8> {
        let len = self
            .sample(None)
            .map_or(DECOY_SALT_BYTES, |(salt_len, _)| salt_len)
            .clamp(1, 32);
        let tag = ring::hmac::sign(decoy_key(), user.as_bytes());
        tag.as_ref()[..len].to_vec()
    }

    fn decoy_iterations(&self, hash: ScramHash) -> u32 {
        self.sample(Some(hash))
            .map_or(ScramHash::ITERATIONS_MIN, |(_, iterations)| iterations)
    }
}

/// A decoy salt's length when no user exists to copy it from.
const DECOY_SALT_BYTES: usize = 24;

impl CacheCredentials<'_> {
    /// (salt length, iterations) of the first stored user with a credential of `hash` (any
    /// mechanism if `None`): what a decoy should look like.
    fn sample(&self, hash: Option<ScramHash>) -> Option<(usize, u32)> {
        self.0
            .first_records(SecurityKind::ScramCredential, 8)
            .iter()
            .filter_map(|r| UserCredentials::decode(&r.value).ok())
            .find_map(|c| {
                c.mechanisms()
                    .find(|(h, _)| hash.is_none_or(|want| *h == want))
                    .map(|(_, e)| (e.salt.len(), e.iterations))
            })
    }
}

/// This process's secret for decoy salts (random at start: a decoy is stable per user on
/// one broker, and unpredictable).
fn decoy_key() -> &'static ring::hmac::Key {
    static KEY: OnceLock<ring::hmac::Key> = OnceLock::new();
    KEY.get_or_init(|| {
        let rng = ring::rand::SystemRandom::new();
        ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng).unwrap_or_else(|_| {
            // The OS generator failing leaves a fixed key: decoys stay stable per user,
            // only predictable.
            ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"oxbow decoy salt")
        })
    })
}
