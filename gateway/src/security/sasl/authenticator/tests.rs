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
    let salted =
        crate::security::sasl::credential::salted_password(hash, b"salt", user_pw.as_bytes(), 4096);
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
    let quirky = client_final_with_prefix("alice-pw", "n=alice,r=cnonce", &server_first, "cnonce");
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

mod oauthbearer {
    use super::*;
    use crate::security::oauth::tests::{
        good_claims, jwks, key, settings as oauth, sign, Key, NOW,
    };
    use crate::security::oauth::{parse_client_response, validate_with};
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use serde_json::json;

    const NOW_MS: i64 = NOW as i64 * 1000;

    fn bearer(max_reauth: Duration) -> Authenticator {
        let mut a = Authenticator::new(
            Arc::new(SaslSettings {
                enabled: vec![Mechanism::OauthBearer, Mechanism::Plain],
                max_reauth,
                ..SaslSettings::default()
            }),
            true,
            Box::new(|| None),
        );
        assert_eq!(a.handshake("OAUTHBEARER").error, None);
        a
    }

    fn message(token: &str) -> Vec<u8> {
        format!("n,,\x01auth=Bearer {token}\x01\x01").into_bytes()
    }

    /// The driver's part: parse the client's message and validate its token against `k`.
    fn outcome(k: &Key, message: &[u8]) -> TokenOutcome {
        let (token, authzid) = parse_client_response(message)?;
        Ok((validate_with(&jwks(&[k]), &oauth(), &token, NOW)?, authzid))
    }

    fn login(a: &mut Authenticator, k: &Key, message: &[u8], now: Instant) -> AuthReply {
        assert!(a.awaits_token());
        a.authenticate_token(2, outcome(k, message), now, NOW_MS)
    }

    fn claims(f: impl Fn(&mut serde_json::Value)) -> serde_json::Value {
        let mut c = good_claims();
        f(&mut c);
        c
    }

    #[test]
    fn a_good_token_authenticates_its_subject_until_it_expires() {
        let now = Instant::now();
        let k = key("k1");
        let mut a = bearer(Duration::ZERO);
        let r = login(
            &mut a,
            &k,
            &message(&sign(&k, Some("k1"), good_claims())),
            now,
        );
        assert_eq!(r.error, None);
        assert!(r.auth_bytes.is_empty());
        assert_eq!(r.authenticated, Some(Principal::user("alice")));
        // The token's 600 s bound the session even without --connections-max-reauth.
        assert_eq!(r.session_lifetime_ms, 600_000);
        assert_eq!(
            a.gate(ApiKey::Produce, now + Duration::from_secs(600)),
            Gate::Serve
        );
        assert!(matches!(
            a.gate(ApiKey::Produce, now + Duration::from_millis(600_001)),
            Gate::Close(_)
        ));
        // --connections-max-reauth shorter than the token wins.
        let mut a = bearer(Duration::from_secs(60));
        let r = login(
            &mut a,
            &k,
            &message(&sign(&k, Some("k1"), good_claims())),
            now,
        );
        assert_eq!(r.session_lifetime_ms, 60_000);
        // An authorization id equal to the subject is fine.
        let mut a = bearer(Duration::ZERO);
        let m = format!(
            "n,a=alice,\x01auth=Bearer {}\x01\x01",
            sign(&k, Some("k1"), good_claims())
        );
        assert_eq!(login(&mut a, &k, m.as_bytes(), now).error, None);
    }

    #[test]
    fn bad_tokens_get_the_error_challenge_then_fail_on_the_clients_ack() {
        let now = Instant::now();
        let k = key("k1");
        let forger = key("k1");
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none","kid":"k1"}"#),
            URL_SAFE_NO_PAD.encode(good_claims().to_string())
        );
        let cases = [
            (
                "expired",
                sign(&k, Some("k1"), claims(|c| c["exp"] = json!(NOW - 60))),
            ),
            (
                "not yet valid",
                sign(&k, Some("k1"), claims(|c| c["nbf"] = json!(NOW + 120))),
            ),
            (
                "wrong issuer",
                sign(&k, Some("k1"), claims(|c| c["iss"] = json!("https://evil"))),
            ),
            (
                "wrong audience",
                sign(&k, Some("k1"), claims(|c| c["aud"] = json!("other"))),
            ),
            ("forged", sign(&forger, Some("k1"), good_claims())),
            ("alg none", none),
            ("unknown kid", sign(&k, Some("k9"), good_claims())),
            ("not a JWT", "abc".into()),
        ];
        for (what, token) in cases {
            let mut a = bearer(Duration::ZERO);
            let r = login(&mut a, &k, &message(&token), now);
            assert_eq!(r.error, None, "{what}");
            assert_eq!(r.auth_bytes, INVALID_TOKEN_CHALLENGE.as_bytes(), "{what}");
            assert!(!r.close && r.authenticated.is_none(), "{what}");
            assert_eq!(
                a.gate(ApiKey::Metadata, now),
                Gate::Close(
                    "Unexpected Kafka request of type Metadata during SASL authentication".into()
                )
            );
            assert_eq!(a.gate(ApiKey::SaslAuthenticate, now), Gate::Sasl);
            let ack = a.authenticate(2, b"\x01", &users(), now);
            assert_eq!(
                ack.error,
                Some((
                    ResponseError::SaslAuthenticationFailed,
                    INVALID_TOKEN_CHALLENGE.into()
                )),
                "{what}"
            );
            assert!(ack.close && ack.authenticated.is_none(), "{what}");
            assert!(matches!(a.gate(ApiKey::ApiVersions, now), Gate::Close(_)));
        }
        // A second token instead of the acknowledgement fails too.
        let mut a = bearer(Duration::ZERO);
        login(&mut a, &k, &message("abc"), now);
        let good = message(&sign(&k, Some("k1"), good_claims()));
        let r = a.authenticate(2, &good, &users(), now);
        assert_eq!(
            r.error.map(|e| e.0),
            Some(ResponseError::SaslAuthenticationFailed)
        );
        assert!(r.close);
    }

    #[test]
    fn malformed_messages_and_huge_tokens_fail_at_once() {
        let now = Instant::now();
        let k = key("k1");
        let token = sign(&k, Some("k1"), good_claims());
        let huge = "a".repeat(crate::security::oauth::TOKEN_BYTES_MAX + 1);
        for m in [
            Vec::new(),
            b"\x01".to_vec(),
            format!("n,,\x01auth=Bearer {token}\x01").into_bytes(),
            format!("p=tls-unique,,\x01auth=Bearer {token}\x01\x01").into_bytes(),
            format!("n,,\x01auth=Basic {token}\x01\x01").into_bytes(),
            vec![0xff; 32],
            message(&huge),
        ] {
            let mut a = bearer(Duration::ZERO);
            let r = login(&mut a, &k, &m, now);
            assert_eq!(
                r.error,
                Some((
                    ResponseError::SaslAuthenticationFailed,
                    "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER".into()
                )),
                "{m:?}"
            );
            assert!(r.close);
        }
        // An authorization id other than the subject, as Kafka refuses it.
        let mut a = bearer(Duration::ZERO);
        let m = format!("n,a=bob,\x01auth=Bearer {token}\x01\x01");
        let r = login(&mut a, &k, m.as_bytes(), now);
        assert!(
            matches!(r.error, Some((ResponseError::SaslAuthenticationFailed, m)) if m.contains("authorization id (bob)"))
        );
        assert!(r.close);
    }

    #[test]
    fn the_message_must_go_through_authenticate_token() {
        let k = key("k1");
        let mut a = bearer(Duration::ZERO);
        let r = a.authenticate(
            2,
            &message(&sign(&k, Some("k1"), good_claims())),
            &users(),
            Instant::now(),
        );
        assert_eq!(r.error.map(|e| e.0), Some(ResponseError::IllegalSaslState));
        assert!(r.close && r.authenticated.is_none());
        // And authenticate_token only at that point.
        let mut a = sasl(Duration::ZERO);
        let r = a.authenticate_token(2, Err(TokenError::NoKeys), Instant::now(), NOW_MS);
        assert_eq!(r.error.map(|e| e.0), Some(ResponseError::IllegalSaslState));
    }

    #[test]
    fn re_authentication_takes_a_new_token_of_the_same_subject_only() {
        let t0 = Instant::now();
        let k = key("k1");
        let mut a = bearer(Duration::ZERO);
        let first = login(
            &mut a,
            &k,
            &message(&sign(&k, Some("k1"), good_claims())),
            t0,
        );
        assert_eq!(first.session_lifetime_ms, 600_000);
        // A fresh token later: the session renews, bounded by the new token.
        let t1 = t0 + Duration::from_secs(500);
        assert_eq!(a.handshake("OAUTHBEARER").error, None);
        let later = claims(|c| c["exp"] = json!(NOW + 1200));
        let r = a.authenticate_token(
            2,
            outcome(&k, &message(&sign(&k, Some("k1"), later))),
            t1,
            NOW_MS + 500_000,
        );
        assert_eq!(r.error, None);
        assert_eq!(r.session_lifetime_ms, 700_000);
        assert_eq!(
            a.gate(ApiKey::Fetch, t1 + Duration::from_secs(700)),
            Gate::Serve
        );
        // Another subject's token: Kafka's refusal, and the connection closes.
        assert_eq!(a.handshake("OAUTHBEARER").error, None);
        let bob = claims(|c| c["sub"] = json!("bob"));
        let r = login(&mut a, &k, &message(&sign(&k, Some("k1"), bob)), t1);
        assert!(
            matches!(r.error, Some((ResponseError::SaslAuthenticationFailed, m)) if m.contains("Cannot change principals"))
        );
        assert!(r.close);
    }

    #[test]
    fn a_token_inside_the_skew_gets_the_shortest_session() {
        let now = Instant::now();
        let k = key("k1");
        let mut a = bearer(Duration::ZERO);
        let c = claims(|c| c["exp"] = json!(NOW - 5));
        let r = login(&mut a, &k, &message(&sign(&k, Some("k1"), c)), now);
        assert_eq!(r.error, None);
        assert_eq!(r.session_lifetime_ms, 1);
    }
}
