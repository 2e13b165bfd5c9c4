//! One connection's authentication, as Kafka's `SaslServerAuthenticator` and
//! `KafkaChannel` run it (pure: the time and server nonces are handed in).
//!
//! On a SASL listener a connection starts unauthenticated: ApiVersions and SaslHandshake
//! are served, then only SaslAuthenticate until the exchange ends; any other request
//! closes the connection ([`Gate::Close`]). A failure answers SASL_AUTHENTICATION_FAILED
//! after `--connection-failed-authentication-delay`, then closes. Success sets the
//! principal `User:{name}`.
//!
//! Re-authentication (KIP-368): with `--connections-max-reauth` set, a session expires
//! that long after it authenticated; SaslAuthenticate v1+ tells the client so
//! (`session_lifetime_ms`), and a client that authenticated with v1+ may start over with
//! SaslHandshake on the same connection. It must stay the same principal and mechanism
//! (else it fails and the connection closes); success restarts the lifetime. A request
//! other than SaslHandshake/SaslAuthenticate after expiry closes the connection.
//!
//! OAUTHBEARER (RFC 7628, as Kafka's `OAuthBearerSaslServer`): the first SaslAuthenticate
//! carries the client's GS2 message with the token. The driver validates it (which may
//! read the issuer's keys again, so it is async and outside this state machine) when
//! [`Authenticator::awaits_token`] says so, and hands the outcome to
//! [`Authenticator::authenticate_token`]. A malformed message fails at once; a token that
//! does not validate is answered with the error challenge `{"status":"invalid_token"}`,
//! the client acknowledges it with `\x01`, and that fails the authentication. The
//! session also ends when the token expires: its lifetime is the lesser of the token's
//! remaining life and `--connections-max-reauth`.
//!
//! On PLAINTEXT/SSL listeners nothing is required, and SaslHandshake/SaslAuthenticate are
//! answered ILLEGAL_SASL_STATE, as Kafka's request handler does.

use super::scram::{ScramServer, ScramStep};
use super::{CredentialSource, Mechanism, SaslError, SaslSettings};
use crate::security::oauth::{TokenError, Validated};
use crate::security::Principal;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::ApiKey;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Whether and how a request may be served in the connection's state.
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    /// Hand it to its handler.
    Serve,
    /// SaslHandshake/SaslAuthenticate: answered by [`Authenticator::handshake`] /
    /// [`Authenticator::authenticate`].
    Sasl,
    /// Close the connection without answering; the reason is for the log.
    Close(String),
}

/// The answer to a SaslHandshake.
#[derive(Debug, PartialEq, Eq)]
pub struct HandshakeReply {
    pub error: Option<ResponseError>,
    /// The enabled mechanisms (what Kafka lists, success or not).
    pub mechanisms: Vec<&'static str>,
    /// Close the connection after the failed-authentication delay, having answered.
    pub close: bool,
}

/// The answer to a SaslAuthenticate.
#[derive(Debug, PartialEq, Eq)]
pub struct AuthReply {
    pub error: Option<(ResponseError, String)>,
    pub auth_bytes: Vec<u8>,
    /// KIP-368: milliseconds until the session must re-authenticate (0: never, or v0).
    pub session_lifetime_ms: i64,
    /// Close the connection after the failed-authentication delay, having answered.
    pub close: bool,
    /// The principal the connection authenticated as, when this exchange completed it.
    pub authenticated: Option<Principal>,
}

impl AuthReply {
    fn illegal(message: &str) -> Self {
        AuthReply {
            error: Some((ResponseError::IllegalSaslState, message.to_string())),
            auth_bytes: Vec::new(),
            session_lifetime_ms: 0,
            close: false,
            authenticated: None,
        }
    }
}

/// What the driver found of an OAUTHBEARER client's first message: the validated token
/// and the authorization id the client asked for (its GS2 `a=`), or why not.
pub type TokenOutcome = Result<(Validated, Option<String>), TokenError>;

/// The error challenge of a refused token (RFC 7628 §3.2.2, as Kafka answers it).
pub const INVALID_TOKEN_CHALLENGE: &str = r#"{"status":"invalid_token"}"#;

/// Produces fresh server nonces (the OS CSPRNG in production, fixed in tests).
pub type NonceSource = Box<dyn FnMut() -> Option<String> + Send>;

/// A completed authentication.
#[derive(Clone, Debug)]
struct Session {
    principal: Principal,
    mechanism: Mechanism,
    /// When it must have re-authenticated, if sessions expire.
    expires_at: Option<Instant>,
    /// It authenticated with SaslAuthenticate v1+, so it may re-authenticate (KIP-368).
    can_reauthenticate: bool,
}

enum State {
    /// A SASL listener's connection before SaslHandshake.
    AwaitingHandshake,
    /// The mechanism is chosen; awaiting the first SaslAuthenticate.
    Handshaken(Mechanism),
    /// A SCRAM exchange is under way.
    Exchanging(Box<ScramServer>),
    /// OAUTHBEARER: the token was refused and the error challenge sent; the client's
    /// acknowledgement (`\x01`) fails the authentication.
    TokenRefused,
    /// Authenticated, or on a listener that needs no authentication.
    Ready,
    /// Failed: the connection is closing.
    Failed,
}

/// One connection's authentication state.
pub struct Authenticator {
    settings: Arc<SaslSettings>,
    state: State,
    /// The last completed authentication (kept during a re-authentication).
    session: Option<Session>,
    nonces: NonceSource,
}

impl Authenticator {
    /// For a connection on a listener whose protocol requires SASL (`required`) or not.
    pub fn new(settings: Arc<SaslSettings>, required: bool, nonces: NonceSource) -> Self {
        Authenticator {
            settings,
            state: if required {
                State::AwaitingHandshake
            } else {
                State::Ready
            },
            session: None,
            nonces,
        }
    }

    /// One that refuses everything (a stand-in while the real one is busy elsewhere, or
    /// after it was lost).
    pub fn failed(settings: Arc<SaslSettings>) -> Self {
        Authenticator {
            settings,
            state: State::Failed,
            session: None,
            nonces: Box::new(|| None),
        }
    }

    /// Whether a request of `key` may be served now.
    pub fn gate(&self, key: ApiKey, now: Instant) -> Gate {
        let sasl = matches!(key, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate);
        match &self.state {
            State::Ready if sasl => Gate::Sasl,
            State::Ready => match self.session.as_ref().and_then(|s| s.expires_at) {
                Some(at) if now > at => Gate::Close(format!(
                    "the SASL session expired (--connections-max-reauth) and the client did not re-authenticate; {key:?} refused"
                )),
                _ => Gate::Serve,
            },
            State::AwaitingHandshake => match key {
                ApiKey::ApiVersions if self.session.is_none() => Gate::Serve,
                ApiKey::SaslHandshake => Gate::Sasl,
                _ => Gate::Close(format!(
                    "Unexpected Kafka request of type {key:?} during SASL handshake"
                )),
            },
            State::Handshaken(_) | State::Exchanging(_) | State::TokenRefused => match key {
                ApiKey::SaslAuthenticate => Gate::Sasl,
                _ => Gate::Close(format!(
                    "Unexpected Kafka request of type {key:?} during SASL authentication"
                )),
            },
            State::Failed => Gate::Close("authentication failed".into()),
        }
    }

    fn enabled_names(&self) -> Vec<&'static str> {
        self.settings.enabled.iter().map(|m| m.name()).collect()
    }

    /// Answers SaslHandshake (its gate said [`Gate::Sasl`]).
    pub fn handshake(&mut self, mechanism: &str) -> HandshakeReply {
        let mechanisms = self.enabled_names();
        let chosen = self
            .settings
            .enabled
            .iter()
            .copied()
            .find(|m| m.name() == mechanism);
        match &self.state {
            State::AwaitingHandshake => match chosen {
                Some(m) => {
                    self.state = State::Handshaken(m);
                    HandshakeReply {
                        error: None,
                        mechanisms,
                        close: false,
                    }
                }
                None => {
                    self.state = State::Failed;
                    HandshakeReply {
                        error: Some(ResponseError::UnsupportedSaslMechanism),
                        mechanisms,
                        close: true,
                    }
                }
            },
            // KIP-368: an authenticated client starting over, with the same mechanism.
            State::Ready => match &self.session {
                Some(s) if s.can_reauthenticate => match chosen {
                    Some(m) if m == s.mechanism => {
                        self.state = State::Handshaken(m);
                        HandshakeReply {
                            error: None,
                            mechanisms,
                            close: false,
                        }
                    }
                    other => {
                        self.state = State::Failed;
                        HandshakeReply {
                            error: Some(match other {
                                None => ResponseError::UnsupportedSaslMechanism,
                                Some(_) => ResponseError::IllegalSaslState,
                            }),
                            mechanisms,
                            close: true,
                        }
                    }
                },
                // Not a SASL listener, or a client that cannot re-authenticate: Kafka's
                // request handler answers this.
                _ => HandshakeReply {
                    error: Some(ResponseError::IllegalSaslState),
                    mechanisms,
                    close: false,
                },
            },
            // The gate closes the connection before these.
            State::Handshaken(_) | State::Exchanging(_) | State::TokenRefused | State::Failed => {
                self.state = State::Failed;
                HandshakeReply {
                    error: Some(ResponseError::IllegalSaslState),
                    mechanisms,
                    close: true,
                }
            }
        }
    }

    /// Refuses a SaslHandshake the broker cannot go on from (v0, whose raw-token framing is
    /// not served): answered with `error` and the enabled list, then the connection closes.
    pub fn refuse_handshake(&mut self, error: ResponseError) -> HandshakeReply {
        self.state = State::Failed;
        HandshakeReply {
            error: Some(error),
            mechanisms: self.enabled_names(),
            close: true,
        }
    }

    /// Answers SaslAuthenticate of `version` carrying `token` (its gate said
    /// [`Gate::Sasl`]).
    pub fn authenticate(
        &mut self,
        version: i16,
        token: &[u8],
        credentials: &dyn CredentialSource,
        now: Instant,
    ) -> AuthReply {
        let state = std::mem::replace(&mut self.state, State::Failed);
        let (mechanism, outcome) = match state {
            State::Ready => {
                self.state = State::Ready;
                return AuthReply::illegal(
                    "SaslAuthenticate request received after successful authentication",
                );
            }
            State::AwaitingHandshake => {
                return self.fail(
                    ResponseError::IllegalSaslState,
                    "Unexpected SaslAuthenticate before SaslHandshake".into(),
                )
            }
            State::Failed => {
                return self.fail(
                    ResponseError::IllegalSaslState,
                    "authentication already failed".into(),
                )
            }
            // The driver validates the token first (`authenticate_token`).
            State::Handshaken(Mechanism::OauthBearer) => {
                return self.fail(
                    ResponseError::IllegalSaslState,
                    "the OAUTHBEARER token was not validated".into(),
                )
            }
            // Kafka fails on the client's `\x01`; any other answer to the error challenge
            // fails too (Kafka would take it as a new first message: one token per
            // exchange here).
            State::TokenRefused => {
                return self.fail(
                    ResponseError::SaslAuthenticationFailed,
                    INVALID_TOKEN_CHALLENGE.into(),
                )
            }
            State::Handshaken(Mechanism::Plain) => (
                Mechanism::Plain,
                super::plain::authenticate(token, credentials).map(|user| (user, Vec::new())),
            ),
            State::Handshaken(m) => {
                let Some(hash) = m.scram() else {
                    return self.fail(ResponseError::IllegalSaslState, "no SCRAM hash".into());
                };
                let Some(nonce) = (self.nonces)() else {
                    return self.fail(
                        ResponseError::SaslAuthenticationFailed,
                        "the server could not draw a nonce".into(),
                    );
                };
                let mut server = Box::new(ScramServer::new(hash, nonce));
                match server.step(token, credentials) {
                    Ok(ScramStep::Challenge(bytes)) => {
                        self.state = State::Exchanging(server);
                        return AuthReply {
                            error: None,
                            auth_bytes: bytes,
                            session_lifetime_ms: 0,
                            close: false,
                            authenticated: None,
                        };
                    }
                    Ok(ScramStep::Success { user, server_final }) => (m, Ok((user, server_final))),
                    Err(e) => (m, Err(e)),
                }
            }
            State::Exchanging(mut server) => {
                let mechanism = server.mechanism();
                match server.step(token, credentials) {
                    Ok(ScramStep::Success { user, server_final }) => {
                        (mechanism, Ok((user, server_final)))
                    }
                    Ok(ScramStep::Challenge(_)) => (mechanism, Err(SaslError::Credentials)),
                    Err(e) => (mechanism, Err(e)),
                }
            }
        };
        match outcome {
            Err(SaslError::Credentials) => self.fail(
                ResponseError::SaslAuthenticationFailed,
                format!(
                    "Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
                ),
            ),
            Err(SaslError::Named(message)) => {
                self.fail(ResponseError::SaslAuthenticationFailed, message)
            }
            Ok((user, auth_bytes)) => {
                self.complete(Principal::user(user), mechanism, version, now, None, auth_bytes)
            }
        }
    }

    /// Whether the exchange is at OAUTHBEARER's first message: the driver validates its
    /// token and calls [`Authenticator::authenticate_token`] instead of `authenticate`.
    pub fn awaits_token(&self) -> bool {
        matches!(self.state, State::Handshaken(Mechanism::OauthBearer))
    }

    /// Answers the first OAUTHBEARER SaslAuthenticate of `version`, given what validating
    /// its token gave (`now_ms`: the wall clock, against the token's expiry).
    pub fn authenticate_token(
        &mut self,
        version: i16,
        outcome: TokenOutcome,
        now: Instant,
        now_ms: i64,
    ) -> AuthReply {
        if !self.awaits_token() {
            return self.fail(
                ResponseError::IllegalSaslState,
                "no OAUTHBEARER token is awaited".into(),
            );
        }
        match outcome {
            // Kafka's answer to a client message it cannot parse (a SaslException).
            Err(TokenError::Malformed(_)) => self.fail(
                ResponseError::SaslAuthenticationFailed,
                format!(
                    "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                    Mechanism::OauthBearer
                ),
            ),
            Err(_) => {
                self.state = State::TokenRefused;
                AuthReply {
                    error: None,
                    auth_bytes: INVALID_TOKEN_CHALLENGE.as_bytes().to_vec(),
                    session_lifetime_ms: 0,
                    close: false,
                    authenticated: None,
                }
            }
            Ok((token, authzid)) => {
                if let Some(a) = authzid.filter(|a| *a != token.subject) {
                    let message = format!(
                        "Authentication failed: Client requested an authorization id ({a}) that is different from the token's principal name ({})",
                        token.subject
                    );
                    return self.fail(ResponseError::SaslAuthenticationFailed, message);
                }
                // A token valid only thanks to the clock skew gets the shortest session
                // that still tells the client to re-authenticate.
                let remaining_ms = token.expires_at_ms.saturating_sub(now_ms).max(1);
                let remaining = Duration::from_millis(u64::try_from(remaining_ms).unwrap_or(1));
                self.complete(
                    Principal::user(token.subject),
                    Mechanism::OauthBearer,
                    version,
                    now,
                    Some(remaining),
                    Vec::new(),
                )
            }
        }
    }

    /// Ends an exchange that proved `principal`: the session starts (or, re-authenticating,
    /// renews if it is the same principal). Its lifetime is `--connections-max-reauth`,
    /// bounded by the credential's own (`credential_lifetime`, a token's), as Kafka's
    /// `SaslServerAuthenticator` computes it.
    fn complete(
        &mut self,
        principal: Principal,
        mechanism: Mechanism,
        version: i16,
        now: Instant,
        credential_lifetime: Option<Duration>,
        auth_bytes: Vec<u8>,
    ) -> AuthReply {
        if let Some(previous) = &self.session {
            if previous.principal != principal {
                let message = format!(
                    "Cannot change principals during re-authentication from {}: {}",
                    previous.principal, principal
                );
                return self.fail(ResponseError::SaslAuthenticationFailed, message);
            }
        }
        let max_reauth = (!self.settings.max_reauth.is_zero()).then_some(self.settings.max_reauth);
        let lifetime = match (credential_lifetime, max_reauth) {
            (Some(c), Some(m)) => Some(c.min(m)),
            (c, m) => c.or(m),
        };
        self.session = Some(Session {
            principal: principal.clone(),
            mechanism,
            expires_at: lifetime.map(|l| now + l),
            can_reauthenticate: version >= 1,
        });
        self.state = State::Ready;
        AuthReply {
            error: None,
            auth_bytes,
            session_lifetime_ms: match lifetime {
                Some(l) if version >= 1 => i64::try_from(l.as_millis()).unwrap_or(i64::MAX),
                _ => 0,
            },
            close: false,
            authenticated: Some(principal),
        }
    }

    fn fail(&mut self, code: ResponseError, message: String) -> AuthReply {
        self.state = State::Failed;
        AuthReply {
            error: Some((code, message)),
            auth_bytes: Vec::new(),
            session_lifetime_ms: 0,
            close: true,
            authenticated: None,
        }
    }
}

#[cfg(test)]
mod tests;
