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
//! On PLAINTEXT/SSL listeners nothing is required, and SaslHandshake/SaslAuthenticate are
//! answered ILLEGAL_SASL_STATE, as Kafka's request handler does.

use super::scram::{ScramServer, ScramStep};
use super::{CredentialSource, Mechanism, SaslError, SaslSettings};
use crate::security::Principal;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::ApiKey;
use std::sync::Arc;
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
            State::Handshaken(_) | State::Exchanging(_) => match key {
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
            State::Handshaken(_) | State::Exchanging(_) | State::Failed => {
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
                let principal = Principal::user(user);
                if let Some(previous) = &self.session {
                    if previous.principal != principal {
                        let message = format!(
                            "Cannot change principals during re-authentication from {}: {}",
                            previous.principal, principal
                        );
                        return self.fail(ResponseError::SaslAuthenticationFailed, message);
                    }
                }
                let lifetime = self.settings.max_reauth;
                let expires = !lifetime.is_zero();
                self.session = Some(Session {
                    principal: principal.clone(),
                    mechanism,
                    expires_at: expires.then(|| now + lifetime),
                    can_reauthenticate: version >= 1,
                });
                self.state = State::Ready;
                AuthReply {
                    error: None,
                    auth_bytes,
                    session_lifetime_ms: if expires && version >= 1 {
                        i64::try_from(lifetime.as_millis()).unwrap_or(i64::MAX)
                    } else {
                        0
                    },
                    close: false,
                    authenticated: Some(principal),
                }
            }
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
mod tests {
    use super::*;
    use crate::security::sasl::{ScramEntry, ScramHash, UserCredentials};
    use base64::Engine;
    use std::collections::HashMap;
    use std::time::Duration;

    struct Users(HashMap<String, UserCredentials>);
    impl CredentialSource for Users {
        fn lookup(&self, user: &str) -> Option<UserCredentials> {
            self.0.get(user).cloned()
        }
        fn decoy_salt(&self, user: &str) -> Vec<u8> {
            user.as_bytes().to_vec()
        }
    }

    fn users() -> Users {
        let mut map = HashMap::new();
        for (name, pw) in [("alice", "alice-pw"), ("bob", "bob-pw")] {
            let mut c = UserCredentials::default();
            for h in ScramHash::ALL {
                c.set(
                    h,
                    Some(ScramEntry::from_password(
                        h,
                        b"salt".to_vec(),
                        pw.as_bytes(),
                        4096,
                    )),
                );
            }
            map.insert(name.to_string(), c);
        }
        Users(map)
    }

    fn settings(max_reauth: Duration) -> Arc<SaslSettings> {
        Arc::new(SaslSettings {
            enabled: vec![Mechanism::ScramSha256, Mechanism::Plain],
            max_reauth,
            ..SaslSettings::default()
        })
    }

    fn sasl(max_reauth: Duration) -> Authenticator {
        Authenticator::new(
            settings(max_reauth),
            true,
            Box::new(|| Some("SERVERNONCE".to_string())),
        )
    }

    /// A SCRAM-SHA-256 client's final message for `server_first`.
    fn client_final(user_pw: &str, client_first_bare: &str, server_first: &str) -> String {
        client_final_with_prefix(user_pw, client_first_bare, server_first, "")
    }

    /// Like [`client_final`], with `prefix` before the nonce (librdkafka 2.0's bug).
    fn client_final_with_prefix(
        user_pw: &str,
        client_first_bare: &str,
        server_first: &str,
        prefix: &str,
    ) -> String {
        let hash = ScramHash::Sha256;
        let b64 = base64::engine::general_purpose::STANDARD;
        let salted = crate::security::sasl::credential::salted_password(
            hash,
            b"salt",
            user_pw.as_bytes(),
            4096,
        );
        let key = ring::hmac::Key::new(hash.hmac(), &salted);
        let client_key = ring::hmac::sign(&key, b"Client Key");
        let stored = ring::digest::digest(hash.digest(), client_key.as_ref());
        let nonce = server_first
            .split(',')
            .next()
            .and_then(|r| r.strip_prefix("r="))
            .expect("nonce");
        let without_proof = format!("c=biws,r={prefix}{nonce}");
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let sig = ring::hmac::sign(
            &ring::hmac::Key::new(hash.hmac(), stored.as_ref()),
            auth_message.as_bytes(),
        );
        let proof: Vec<u8> = client_key
            .as_ref()
            .iter()
            .zip(sig.as_ref())
            .map(|(a, b)| a ^ b)
            .collect();
        format!("{without_proof},p={}", b64.encode(proof))
    }

    /// Runs a whole SCRAM-SHA-256 login; the final reply.
    fn scram_login(a: &mut Authenticator, user: &str, pw: &str, now: Instant) -> AuthReply {
        let u = users();
        assert_eq!(a.gate(ApiKey::SaslHandshake, now), Gate::Sasl);
        let h = a.handshake("SCRAM-SHA-256");
        assert_eq!(h.error, None);
        let bare = format!("n={user},r=cnonce");
        let first = a.authenticate(2, format!("n,,{bare}").as_bytes(), &u, now);
        assert_eq!(first.error, None);
        let server_first = String::from_utf8(first.auth_bytes).expect("utf8");
        assert_eq!(a.gate(ApiKey::SaslAuthenticate, now), Gate::Sasl);
        a.authenticate(
            2,
            client_final(pw, &bare, &server_first).as_bytes(),
            &u,
            now,
        )
    }

    #[test]
    fn only_sasl_requests_before_authentication() {
        let now = Instant::now();
        let a = sasl(Duration::ZERO);
        assert_eq!(a.gate(ApiKey::ApiVersions, now), Gate::Serve);
        assert!(
            matches!(a.gate(ApiKey::Metadata, now), Gate::Close(m) if m.contains("during SASL handshake"))
        );
        assert!(matches!(
            a.gate(ApiKey::SaslAuthenticate, now),
            Gate::Close(_)
        ));
        let mut a = sasl(Duration::ZERO);
        a.handshake("SCRAM-SHA-256");
        assert!(
            matches!(a.gate(ApiKey::Produce, now), Gate::Close(m) if m.contains("during SASL authentication"))
        );
        assert!(matches!(a.gate(ApiKey::SaslHandshake, now), Gate::Close(_)));
        assert!(matches!(a.gate(ApiKey::ApiVersions, now), Gate::Close(_)));
    }

    #[test]
    fn a_mechanism_not_enabled_is_refused_with_the_enabled_list() {
        let mut a = sasl(Duration::ZERO);
        let h = a.handshake("SCRAM-SHA-512");
        assert_eq!(h.error, Some(ResponseError::UnsupportedSaslMechanism));
        assert_eq!(h.mechanisms, ["SCRAM-SHA-256", "PLAIN"]);
        assert!(h.close);
        assert!(matches!(
            a.gate(ApiKey::ApiVersions, Instant::now()),
            Gate::Close(_)
        ));
    }

    #[test]
    fn scram_success_sets_the_principal_and_a_wrong_password_fails_and_closes() {
        let now = Instant::now();
        let mut a = sasl(Duration::ZERO);
        let done = scram_login(&mut a, "alice", "alice-pw", now);
        assert_eq!(done.error, None);
        assert_eq!(done.authenticated, Some(Principal::user("alice")));
        assert!(done.auth_bytes.starts_with(b"v="));
        assert_eq!(done.session_lifetime_ms, 0);
        assert_eq!(
            a.gate(ApiKey::Produce, now + Duration::from_secs(86400)),
            Gate::Serve
        );
        // After success SaslAuthenticate is ILLEGAL_SASL_STATE, not a close.
        let again = a.authenticate(2, b"x", &users(), now);
        assert_eq!(
            again.error.map(|e| e.0),
            Some(ResponseError::IllegalSaslState)
        );
        assert!(!again.close);

        for (user, pw) in [("alice", "wrong"), ("mallory", "alice-pw")] {
            let mut a = sasl(Duration::ZERO);
            let failed = scram_login(&mut a, user, pw, now);
            assert_eq!(
                failed.error,
                Some((
                    ResponseError::SaslAuthenticationFailed,
                    "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256".into()
                )),
                "{user}"
            );
            assert!(failed.close && failed.authenticated.is_none());
            assert!(matches!(a.gate(ApiKey::ApiVersions, now), Gate::Close(_)));
        }
    }

    #[test]
    fn a_nonce_mismatch_fails() {
        let now = Instant::now();
        let u = users();
        let mut a = sasl(Duration::ZERO);
        a.handshake("SCRAM-SHA-256");
        a.authenticate(2, b"n,,n=alice,r=cnonce", &u, now);
        let forged = client_final(
            "alice-pw",
            "n=alice,r=cnonce",
            "r=cnonceOTHER,s=c2FsdA==,i=4096",
        );
        let r = a.authenticate(2, forged.as_bytes(), &u, now);
        assert_eq!(
            r.error.map(|e| e.0),
            Some(ResponseError::SaslAuthenticationFailed)
        );
        assert!(r.close);
    }

    #[test]
    fn a_nonce_with_the_clients_repeated_in_front_fails_as_in_kafka() {
        let now = Instant::now();
        let u = users();
        let mut a = sasl(Duration::ZERO);
        a.handshake("SCRAM-SHA-256");
        let first = a.authenticate(2, b"n,,n=alice,r=cnonce", &u, now);
        let server_first = String::from_utf8(first.auth_bytes).expect("utf8");
        let quirky =
            client_final_with_prefix("alice-pw", "n=alice,r=cnonce", &server_first, "cnonce");
        let r = a.authenticate(2, quirky.as_bytes(), &u, now);
        assert_eq!(
            r.error.map(|e| e.0),
            Some(ResponseError::SaslAuthenticationFailed)
        );
    }

    #[test]
    fn plain_logs_in_in_one_step() {
        let now = Instant::now();
        let mut a = sasl(Duration::ZERO);
        a.handshake("PLAIN");
        let r = a.authenticate(1, b"\0bob\0bob-pw", &users(), now);
        assert_eq!(r.authenticated, Some(Principal::user("bob")));
        let mut a = sasl(Duration::ZERO);
        a.handshake("PLAIN");
        let r = a.authenticate(1, b"\0bob\0alice-pw", &users(), now);
        assert_eq!(
            r.error,
            Some((
                ResponseError::SaslAuthenticationFailed,
                super::super::plain::INVALID.into()
            ))
        );
    }

    #[test]
    fn sessions_expire_and_re_authentication_renews_them_as_the_same_principal() {
        let t0 = Instant::now();
        let lifetime = Duration::from_secs(3);
        let mut a = sasl(lifetime);
        let done = scram_login(&mut a, "alice", "alice-pw", t0);
        assert_eq!(done.session_lifetime_ms, 3000);
        assert_eq!(a.gate(ApiKey::Fetch, t0 + lifetime), Gate::Serve);
        assert!(matches!(
            a.gate(ApiKey::Fetch, t0 + lifetime + Duration::from_millis(1)),
            Gate::Close(m) if m.contains("expired")
        ));
        // Re-authenticating (even past expiry) renews the session.
        let t1 = t0 + Duration::from_secs(10);
        let again = scram_login(&mut a, "alice", "alice-pw", t1);
        assert_eq!(again.error, None);
        assert_eq!(
            a.gate(ApiKey::Fetch, t1 + Duration::from_secs(2)),
            Gate::Serve
        );
        // As someone else: refused and closed.
        let other = scram_login(&mut a, "bob", "bob-pw", t1);
        assert!(
            matches!(other.error, Some((ResponseError::SaslAuthenticationFailed, m)) if m.contains("Cannot change principals"))
        );
        assert!(other.close);
        assert!(matches!(a.gate(ApiKey::Fetch, t1), Gate::Close(_)));
    }

    #[test]
    fn re_authentication_keeps_the_mechanism_and_needs_authenticate_v1() {
        let now = Instant::now();
        let mut a = sasl(Duration::from_secs(60));
        scram_login(&mut a, "alice", "alice-pw", now);
        let h = a.handshake("PLAIN");
        assert_eq!(h.error, Some(ResponseError::IllegalSaslState));
        assert!(h.close);

        // A v0 client gets no lifetime and cannot start over (ILLEGAL_SASL_STATE, kept
        // open, as Kafka's request handler answers).
        let mut a = sasl(Duration::from_secs(60));
        a.handshake("PLAIN");
        let r = a.authenticate(0, b"\0bob\0bob-pw", &users(), now);
        assert_eq!(r.session_lifetime_ms, 0);
        let h = a.handshake("PLAIN");
        assert_eq!(h.error, Some(ResponseError::IllegalSaslState));
        assert!(!h.close);
    }

    #[test]
    fn plaintext_listeners_answer_sasl_requests_illegal_state() {
        let mut a = Authenticator::new(settings(Duration::ZERO), false, Box::new(|| None));
        let now = Instant::now();
        assert_eq!(a.gate(ApiKey::Produce, now), Gate::Serve);
        assert_eq!(a.gate(ApiKey::SaslHandshake, now), Gate::Sasl);
        let h = a.handshake("PLAIN");
        assert_eq!(h.error, Some(ResponseError::IllegalSaslState));
        assert!(!h.close);
        let r = a.authenticate(1, b"\0bob\0bob-pw", &users(), now);
        assert_eq!(r.error.map(|e| e.0), Some(ResponseError::IllegalSaslState));
        assert!(!r.close && r.authenticated.is_none());
        assert_eq!(a.gate(ApiKey::Produce, now), Gate::Serve);
    }

    #[test]
    fn hostile_tokens_fail_cleanly() {
        let now = Instant::now();
        for token in [
            vec![0xffu8; 64],
            vec![b'n'; super::super::TOKEN_BYTES_MAX + 1],
            b"n,,".to_vec(),
            Vec::new(),
        ] {
            let mut a = sasl(Duration::ZERO);
            a.handshake("SCRAM-SHA-256");
            let r = a.authenticate(2, &token, &users(), now);
            assert_eq!(
                r.error.map(|e| e.0),
                Some(ResponseError::SaslAuthenticationFailed)
            );
            assert!(r.close);
        }
    }
}
