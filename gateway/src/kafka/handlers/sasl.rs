//! SaslHandshake (v1; v0 refused) and SaslAuthenticate (v0-2): the wire side of a connection's
//! [`Authenticator`], with credentials read from the broker's security cache (never the
//! metadata service: a login costs no round trip) and OAUTHBEARER tokens checked by the
//! broker's validator (`--sasl-oauthbearer-*`).
//!
//! These two are answered by the connection loop itself (`kafka/conn.rs`), which owns the
//! authenticator, not by [`super::handle`]: they change the connection's principal.

use crate::broker::Broker;
use crate::security::oauth::{parse_client_response, TokenError};
use crate::security::password::CacheCredentials;
use crate::security::sasl::authenticator::TokenOutcome;
use crate::security::sasl::{fresh_nonce, AuthReply, Authenticator};
use crate::security::Session;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
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
/// A SCRAM or PLAIN exchange runs on the blocking pool: PLAIN costs a PBKDF2 per stored
/// mechanism (up to 16384 iterations each), which must not stall the async workers' other
/// connections. An OAUTHBEARER token is checked here (one signature verification, and a
/// re-read of the key set when it names an unknown key).
pub async fn authenticate(
    broker: &Broker,
    session: &Session,
    auth: &mut Authenticator,
    version: i16,
    r: SaslAuthenticateRequest,
) -> (SaslAuthenticateResponse, AuthReply) {
    let now = Instant::now();
    let mut reply = if auth.awaits_token() {
        let outcome = validate_token(broker, &r.auth_bytes).await;
        if let Err(why) = &outcome {
            tracing::info!(peer = %session.peer, listener = %session.listener, reason = %why, "OAUTHBEARER token refused");
        }
        auth.authenticate_token(version, outcome, now, wall_clock_ms())
    } else {
        exchange(broker, auth, version, r, now).await
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

/// A SCRAM or PLAIN step, on the blocking pool.
async fn exchange(
    broker: &Broker,
    auth: &mut Authenticator,
    version: i16,
    r: SaslAuthenticateRequest,
    now: Instant,
) -> AuthReply {
    let cache = broker.security.clone();
    let mut running = std::mem::replace(auth, Authenticator::failed(broker.settings.sasl.clone()));
    let joined = tokio::task::spawn_blocking(move || {
        let reply = running.authenticate(version, &r.auth_bytes, &CacheCredentials(&cache), now);
        (running, reply)
    })
    .await;
    match joined {
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
    }
}

/// The token of an OAUTHBEARER client's first message, validated.
async fn validate_token(broker: &Broker, message: &[u8]) -> TokenOutcome {
    let (token, authzid) = parse_client_response(message)?;
    // Startup refuses OAUTHBEARER without a key set, so this is a broker built otherwise.
    let validator = broker.settings.oauth.as_ref().ok_or(TokenError::NoKeys)?;
    Ok((validator.validate(&token).await?, authzid))
}

/// Milliseconds since the epoch, for a token's expiry (a wall-clock time).
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
