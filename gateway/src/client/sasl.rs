//! The client side of SASL: after the ApiVersions handshake, SaslHandshake (v1) and
//! SaslAuthenticate with SCRAM-SHA-256/512 (RFC 5802, verifying the server's signature, so
//! a server that does not hold the credential is not believed) or PLAIN.
//!
//! [`ScramClient`] is the pure exchange; [`authenticate`] drives it over a [`Connection`].
//! The password lives only in [`SaslCredentials`], whose `Debug` never prints it.

use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;

use super::connection::Connection;
use super::error::ClientError;
use crate::security::sasl::credential::salted_password;
use crate::security::sasl::scram::to_sasl_name;
use crate::security::sasl::{Mechanism, ScramHash};

/// Who a client logs in as.
#[derive(Clone)]
pub struct SaslCredentials {
    pub mechanism: Mechanism,
    pub username: String,
    password: String,
}

impl std::fmt::Debug for SaslCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslCredentials")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl SaslCredentials {
    pub fn new(mechanism: Mechanism, username: String, password: String) -> Self {
        SaslCredentials {
            mechanism,
            username,
            password,
        }
    }
}

fn b64() -> &'static base64::engine::GeneralPurpose {
    &base64::engine::general_purpose::STANDARD
}

/// One SCRAM exchange, client side.
pub struct ScramClient {
    hash: ScramHash,
    password: Vec<u8>,
    client_nonce: String,
    client_first_bare: String,
    /// After the client-final: (AuthMessage, ServerKey) to check the server's signature.
    expected: Option<(String, Vec<u8>)>,
}

impl ScramClient {
    /// `client_nonce`: fresh, printable, no comma.
    pub fn new(hash: ScramHash, user: &str, password: &str, client_nonce: String) -> Self {
        ScramClient {
            hash,
            password: password.as_bytes().to_vec(),
            client_first_bare: format!("n={},r={client_nonce}", to_sasl_name(user)),
            client_nonce,
            expected: None,
        }
    }

    /// `n,,n=user,r=nonce`.
    pub fn client_first(&self) -> String {
        format!("n,,{}", self.client_first_bare)
    }

    /// The client-final message answering `server_first`.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<String, String> {
        let server_first = std::str::from_utf8(server_first)
            .map_err(|_| "the server-first message is not UTF-8")?;
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for attr in server_first.split(',') {
            match attr.split_once('=') {
                Some(("r", v)) => nonce = Some(v),
                Some(("s", v)) => salt = b64().decode(v).ok(),
                Some(("i", v)) => iterations = v.parse::<u32>().ok(),
                Some(("e", v)) => return Err(format!("the server refused: {v}")),
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err("the server-first message lacks r=, s= or i=".into());
        };
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err("the server's nonce does not extend ours".into());
        }
        // A server asking for more work than Kafka allows is not obeyed (CPU bound).
        if !(ScramHash::ITERATIONS_MIN..=ScramHash::ITERATIONS_MAX).contains(&iterations) {
            return Err(format!("the server asks for {iterations} iterations"));
        }
        let salted = salted_password(self.hash, &salt, &self.password, iterations);
        let key = ring::hmac::Key::new(self.hash.hmac(), &salted);
        let client_key = ring::hmac::sign(&key, b"Client Key");
        let stored_key = ring::digest::digest(self.hash.digest(), client_key.as_ref());
        let server_key = ring::hmac::sign(&key, b"Server Key");
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let signature = ring::hmac::sign(
            &ring::hmac::Key::new(self.hash.hmac(), stored_key.as_ref()),
            auth_message.as_bytes(),
        );
        let proof: Vec<u8> = client_key
            .as_ref()
            .iter()
            .zip(signature.as_ref())
            .map(|(a, b)| a ^ b)
            .collect();
        self.expected = Some((auth_message, server_key.as_ref().to_vec()));
        Ok(format!("{without_proof},p={}", b64().encode(proof)))
    }

    /// Checks the server-final `v=ServerSignature`.
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), String> {
        let (auth_message, server_key) =
            self.expected.as_ref().ok_or("no client-final was sent")?;
        let text =
            std::str::from_utf8(server_final).map_err(|_| "the server-final is not UTF-8")?;
        if let Some(e) = text.strip_prefix("e=") {
            return Err(format!("the server refused: {e}"));
        }
        let signature = text
            .strip_prefix("v=")
            .and_then(|v| b64().decode(v).ok())
            .ok_or("the server-final message has no v=")?;
        ring::hmac::verify(
            &ring::hmac::Key::new(self.hash.hmac(), server_key),
            auth_message.as_bytes(),
            &signature,
        )
        .map_err(|_| {
            "the server's signature does not verify: it does not hold this user's credential"
                .to_string()
        })
    }
}

/// Authenticates `conn` (just handshaken) as `credentials`.
pub(super) async fn authenticate(
    conn: &mut Connection,
    credentials: &SaslCredentials,
) -> Result<(), ClientError> {
    let addr = conn.addr().to_string();
    let mechanism = credentials.mechanism.name();
    let failed = |detail: String| ClientError::Protocol {
        addr: addr.clone(),
        detail: format!("SASL {mechanism} authentication: {detail}"),
    };
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
    let version = conn.pick_version::<SaslHandshakeRequest>(Some(1))?;
    let response = conn.send(version, &handshake, Duration::ZERO).await?;
    ClientError::check(response.error_code, None, || {
        format!(
            "SASL handshake with {addr} for {mechanism} (the broker offers {})",
            response
                .mechanisms
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let version = conn.pick_version::<SaslAuthenticateRequest>(None)?;
    async fn step(
        conn: &mut Connection,
        version: i16,
        mechanism: &str,
        token: Vec<u8>,
    ) -> Result<Bytes, ClientError> {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
        let response = conn.send(version, &request, Duration::ZERO).await?;
        ClientError::check(
            response.error_code,
            response.error_message.as_deref(),
            || format!("SASL {mechanism} authentication with {}", conn.addr()),
        )?;
        Ok(response.auth_bytes)
    }
    if credentials.mechanism == Mechanism::OauthBearer {
        return Err(failed(
            "OAUTHBEARER is not supported by oxbow's client".into(),
        ));
    }
    match credentials.mechanism.scram() {
        None => {
            let mut token = vec![0u8];
            token.extend_from_slice(credentials.username.as_bytes());
            token.push(0);
            token.extend_from_slice(credentials.password.as_bytes());
            step(conn, version, mechanism, token).await?;
        }
        Some(hash) => {
            let rng = ring::rand::SystemRandom::new();
            let nonce = crate::security::sasl::fresh_nonce(&rng)
                .ok_or_else(|| failed("the OS random generator failed".into()))?;
            let mut client =
                ScramClient::new(hash, &credentials.username, &credentials.password, nonce);
            let server_first =
                step(conn, version, mechanism, client.client_first().into_bytes()).await?;
            let client_final = client.client_final(&server_first).map_err(&failed)?;
            let server_final = step(conn, version, mechanism, client_final.into_bytes()).await?;
            client.verify_server_final(&server_final).map_err(&failed)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::sasl::scram::{ScramServer, ScramStep};
    use crate::security::sasl::{CredentialSource, ScramEntry, UserCredentials};

    struct One(UserCredentials);
    impl CredentialSource for One {
        fn lookup(&self, user: &str) -> Option<UserCredentials> {
            (user == "a,b=c").then(|| self.0.clone())
        }
        fn decoy_salt(&self, _: &str) -> Vec<u8> {
            b"decoy".to_vec()
        }
    }

    #[test]
    fn rfc_7677_client_messages() {
        let mut c = ScramClient::new(
            ScramHash::Sha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO".into(),
        );
        assert_eq!(c.client_first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let final_ = c
            .client_final(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .expect("final");
        assert_eq!(final_, "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=");
        c.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .expect("server signature");
        assert!(c
            .verify_server_final(b"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .is_err());
        assert!(c.verify_server_final(b"e=invalid-proof").is_err());
    }

    #[test]
    fn the_client_and_server_agree_and_names_are_escaped() {
        for hash in ScramHash::ALL {
            let mut creds = UserCredentials::default();
            creds.set(
                hash,
                Some(ScramEntry::from_password(
                    hash,
                    b"salt".to_vec(),
                    b"pw",
                    4096,
                )),
            );
            let store = One(creds);
            let mut client = ScramClient::new(hash, "a,b=c", "pw", "cn".into());
            let mut server = ScramServer::new(hash, "sn".into());
            let ScramStep::Challenge(first) = server
                .step(client.client_first().as_bytes(), &store)
                .expect("first")
            else {
                panic!("challenge")
            };
            let final_ = client.client_final(&first).expect("final");
            let ScramStep::Success { user, server_final } =
                server.step(final_.as_bytes(), &store).expect("success")
            else {
                panic!("success")
            };
            assert_eq!(user, "a,b=c");
            client.verify_server_final(&server_final).expect("verifies");
        }
    }

    #[test]
    fn a_hostile_server_first_is_refused() {
        for bad in [
            &b"r=other,s=c2FsdA==,i=4096"[..],
            b"r=cn,s=c2FsdA==,i=4096",
            b"r=cnX,s=c2FsdA==,i=100000000",
            b"r=cnX,s=!!,i=4096",
            b"r=cnX,i=4096",
            b"e=unknown-user",
            b"\xff",
        ] {
            let mut c = ScramClient::new(ScramHash::Sha256, "u", "p", "cn".into());
            assert!(
                c.client_final(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let debug = format!(
            "{:?}",
            SaslCredentials::new(Mechanism::Plain, "u".into(), "hunter2".into())
        );
        assert!(!debug.contains("hunter2"), "{debug}");
    }
}
