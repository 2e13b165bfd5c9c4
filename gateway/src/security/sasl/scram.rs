//! The SCRAM server exchange (RFC 5802, RFC 7677), as Kafka's `ScramSaslServer` runs it:
//!
//! 1. client-first `n,[a=authzid],n=user,r=cnonce[,ext=…]` — gs2 flag `n` only (no channel
//!    binding: `y`/`p=` and the reserved `m=` are refused), the authzid absent or the user,
//!    `tokenauth=true` (delegation tokens) refused;
//! 2. server-first `r=cnonce+snonce,s=salt,i=iterations` with the stored salt;
//! 3. client-final `c=base64(gs2 header),r=nonce[,…],p=proof`: the nonce must be the one
//!    sent, the proof must hash to StoredKey (compared in constant time);
//! 4. server-final `v=ServerSignature`.
//!
//! An unknown user gets a server-first with a decoy salt (stable per user) and the usual
//! iterations, and fails at the proof with the message every wrong password gets: an
//! attacker learns nothing about which users exist from the exchange's shape.

use super::{
    constant_time_eq, CredentialSource, SaslError, ScramEntry, ScramHash, TOKEN_BYTES_MAX,
};
use base64::Engine;

/// Most characters of a client nonce (real clients send 20-50).
const NONCE_CHARS_MAX: usize = 512;

/// What the server answers a client message with.
#[derive(Debug, PartialEq, Eq)]
pub enum ScramStep {
    /// Send this and wait for the client's next message.
    Challenge(Vec<u8>),
    /// Authenticated as `user`; send `server_final` with the success.
    Success { user: String, server_final: Vec<u8> },
}

/// One SCRAM exchange, server side.
pub struct ScramServer {
    hash: ScramHash,
    state: State,
}

enum State {
    AwaitingClientFirst { server_nonce: String },
    AwaitingClientFinal(Box<Pending>),
    Finished,
}

/// What the server remembers between its first message and the client's final one.
struct Pending {
    user: String,
    /// The stored credential, or `None` for an unknown user (decoy salt sent).
    entry: Option<ScramEntry>,
    /// `base64(gs2 header)`: what the client-final's `c=` must be.
    channel_binding: String,
    nonce: String,
    client_first_bare: String,
    server_first: String,
}

impl ScramServer {
    /// An exchange that will use `server_nonce` (fresh from a CSPRNG, printable, no comma).
    pub fn new(hash: ScramHash, server_nonce: String) -> Self {
        ScramServer {
            hash,
            state: State::AwaitingClientFirst { server_nonce },
        }
    }

    /// The mechanism being run.
    pub fn mechanism(&self) -> super::Mechanism {
        self.hash.mechanism()
    }

    /// Takes the client's next message.
    pub fn step(
        &mut self,
        token: &[u8],
        credentials: &dyn CredentialSource,
    ) -> Result<ScramStep, SaslError> {
        let state = std::mem::replace(&mut self.state, State::Finished);
        if token.len() > TOKEN_BYTES_MAX {
            return Err(SaslError::Credentials);
        }
        let text = std::str::from_utf8(token).map_err(|_| SaslError::Credentials)?;
        match state {
            State::AwaitingClientFirst { server_nonce } => {
                let (pending, server_first) =
                    self.client_first(text, &server_nonce, credentials)?;
                self.state = State::AwaitingClientFinal(Box::new(pending));
                Ok(ScramStep::Challenge(server_first.into_bytes()))
            }
            State::AwaitingClientFinal(pending) => self.client_final(text, *pending),
            State::Finished => Err(SaslError::Credentials),
        }
    }

    fn client_first(
        &self,
        text: &str,
        server_nonce: &str,
        credentials: &dyn CredentialSource,
    ) -> Result<(Pending, String), SaslError> {
        // gs2-header: cbind flag "n" (client does not do channel binding), then authzid.
        let rest = text.strip_prefix("n,").ok_or(SaslError::Credentials)?;
        let (authzid, bare) = rest.split_once(',').ok_or(SaslError::Credentials)?;
        let gs2_header = &text[..text.len() - bare.len()];
        let authzid = match authzid {
            "" => None,
            a => Some(sasl_name(
                a.strip_prefix("a=").ok_or(SaslError::Credentials)?,
            )?),
        };
        let mut attrs = bare.split(',');
        let user = sasl_name(attr(attrs.next(), "n")?)?;
        let client_nonce = attr(attrs.next(), "r")?;
        check_nonce(client_nonce)?;
        for ext in attrs {
            let (key, value) = ext.split_once('=').ok_or(SaslError::Credentials)?;
            if key.is_empty() {
                return Err(SaslError::Credentials);
            }
            // Delegation tokens (KIP-48) are not issued here.
            if key == "tokenauth" && value.eq_ignore_ascii_case("true") {
                return Err(SaslError::Credentials);
            }
        }
        if authzid.as_ref().is_some_and(|a| *a != user) {
            return Err(SaslError::Named(
                "Authentication failed: Client requested an authorization id that is different from username".into(),
            ));
        }
        let entry = credentials
            .lookup(&user)
            .and_then(|c| c.get(self.hash).cloned());
        let (salt, iterations) = match &entry {
            Some(e) => (e.salt.clone(), e.iterations),
            None => (
                credentials.decoy_salt(&user),
                credentials.decoy_iterations(self.hash),
            ),
        };
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!("r={nonce},s={},i={iterations}", b64().encode(salt));
        Ok((
            Pending {
                user,
                entry,
                channel_binding: b64().encode(gs2_header),
                nonce,
                client_first_bare: bare.to_string(),
                server_first: server_first.clone(),
            },
            server_first,
        ))
    }

    fn client_final(&self, text: &str, p: Pending) -> Result<ScramStep, SaslError> {
        let (without_proof, proof) = text.rsplit_once(",p=").ok_or(SaslError::Credentials)?;
        let mut attrs = without_proof.split(',');
        let channel_binding = attr(attrs.next(), "c")?;
        let nonce = attr(attrs.next(), "r")?;
        // Exactly the nonce sent, as Kafka checks (librdkafka 2.0 repeats its own nonce in
        // front; Kafka refuses that too).
        if channel_binding != p.channel_binding || nonce != p.nonce {
            return Err(SaslError::Credentials);
        }
        let proof = b64().decode(proof).map_err(|_| SaslError::Credentials)?;
        if proof.len() != self.hash.output_len() {
            return Err(SaslError::Credentials);
        }
        let auth_message = format!(
            "{},{},{}",
            p.client_first_bare, p.server_first, without_proof
        );
        // An unknown user is checked against zero keys (and fails), so both take one path.
        let zero = vec![0u8; self.hash.output_len()];
        let (stored_key, server_key) = match &p.entry {
            Some(e) => (e.stored_key.as_slice(), e.server_key.as_slice()),
            None => (zero.as_slice(), zero.as_slice()),
        };
        let signature = ring::hmac::sign(
            &ring::hmac::Key::new(self.hash.hmac(), stored_key),
            auth_message.as_bytes(),
        );
        let client_key: Vec<u8> = proof
            .iter()
            .zip(signature.as_ref())
            .map(|(a, b)| a ^ b)
            .collect();
        let computed = ring::digest::digest(self.hash.digest(), &client_key);
        let matches = constant_time_eq(computed.as_ref(), stored_key);
        if !matches || p.entry.is_none() {
            return Err(SaslError::Credentials);
        }
        let server_signature = ring::hmac::sign(
            &ring::hmac::Key::new(self.hash.hmac(), server_key),
            auth_message.as_bytes(),
        );
        Ok(ScramStep::Success {
            user: p.user,
            server_final: format!("v={}", b64().encode(server_signature.as_ref())).into_bytes(),
        })
    }
}

fn b64() -> &'static base64::engine::GeneralPurpose {
    &base64::engine::general_purpose::STANDARD
}

/// The value of attribute `name` (`name=value`), which must come next.
fn attr<'a>(part: Option<&'a str>, name: &str) -> Result<&'a str, SaslError> {
    part.and_then(|p| p.strip_prefix(name))
        .and_then(|p| p.strip_prefix('='))
        .ok_or(SaslError::Credentials)
}

/// A printable nonce without commas (RFC 5802 `printable`).
fn check_nonce(nonce: &str) -> Result<(), SaslError> {
    let ok = !nonce.is_empty()
        && nonce.len() <= NONCE_CHARS_MAX
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',');
    if ok {
        Ok(())
    } else {
        Err(SaslError::Credentials)
    }
}

/// Decodes a `saslname`: `=2C` is `,` and `=3D` is `=`; any other `=`, a NUL or an empty
/// name is refused.
pub fn sasl_name(s: &str) -> Result<String, SaslError> {
    if s.is_empty() || s.contains('\0') {
        return Err(SaslError::Credentials);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        let escape = rest.get(i..i + 3).ok_or(SaslError::Credentials)?;
        out.push(match escape {
            "=2C" => ',',
            "=3D" => '=',
            _ => return Err(SaslError::Credentials),
        });
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Encodes a user name as a `saslname` (the client side's half of [`sasl_name`]).
pub fn to_sasl_name(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::sasl::UserCredentials;
    use std::collections::HashMap;

    /// Users and passwords, derived at 4096 iterations with a fixed salt per user.
    pub(crate) struct Users(pub HashMap<String, UserCredentials>);

    impl CredentialSource for Users {
        fn lookup(&self, user: &str) -> Option<UserCredentials> {
            self.0.get(user).cloned()
        }
        fn decoy_salt(&self, user: &str) -> Vec<u8> {
            format!("decoy-{user}").into_bytes()
        }
    }

    // RFC 7677 section 3: user "user", password "pencil".
    const RFC_SALT_B64: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
    const RFC_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const RFC_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const RFC_SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const RFC_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_users() -> Users {
        let salt = b64().decode(RFC_SALT_B64).expect("salt");
        let mut creds = UserCredentials::default();
        creds.set(
            ScramHash::Sha256,
            Some(ScramEntry::from_password(
                ScramHash::Sha256,
                salt,
                b"pencil",
                4096,
            )),
        );
        Users(HashMap::from([("user".to_string(), creds)]))
    }

    #[test]
    fn rfc_7677_scram_sha_256_exchange() {
        let users = rfc_users();
        let mut server = ScramServer::new(ScramHash::Sha256, RFC_SERVER_NONCE.into());
        assert_eq!(
            server.step(RFC_CLIENT_FIRST.as_bytes(), &users),
            Ok(ScramStep::Challenge(RFC_SERVER_FIRST.as_bytes().to_vec()))
        );
        assert_eq!(
            server.step(RFC_CLIENT_FINAL.as_bytes(), &users),
            Ok(ScramStep::Success {
                user: "user".into(),
                server_final: RFC_SERVER_FINAL.as_bytes().to_vec()
            })
        );
        // Nothing after the end.
        assert!(server.step(RFC_CLIENT_FINAL.as_bytes(), &users).is_err());
    }

    /// A SCRAM-SHA-512 exchange computed independently (Python hashlib/hmac, RFC 5802
    /// formulas): user "alice", password "alice-secret", salt "NaCl-salt-512",
    /// 4096 iterations.
    #[test]
    fn known_scram_sha_512_exchange() {
        let mut creds = UserCredentials::default();
        creds.set(
            ScramHash::Sha512,
            Some(ScramEntry::from_password(
                ScramHash::Sha512,
                b"NaCl-salt-512".to_vec(),
                b"alice-secret",
                4096,
            )),
        );
        let users = Users(HashMap::from([("alice".to_string(), creds)]));
        let mut server = ScramServer::new(ScramHash::Sha512, "SERVERNONCE".into());
        let first = server
            .step(b"n,,n=alice,r=clientnonce", &users)
            .expect("first");
        assert_eq!(
            first,
            ScramStep::Challenge(
                b"r=clientnonceSERVERNONCE,s=TmFDbC1zYWx0LTUxMg==,i=4096".to_vec()
            )
        );
        let end = server
            .step(SHA512_CLIENT_FINAL.as_bytes(), &users)
            .expect("final");
        assert_eq!(
            end,
            ScramStep::Success {
                user: "alice".into(),
                server_final: SHA512_SERVER_FINAL.as_bytes().to_vec()
            }
        );
    }

    const SHA512_CLIENT_FINAL: &str = include_str!("testdata/sha512_client_final.txt");
    const SHA512_SERVER_FINAL: &str = include_str!("testdata/sha512_server_final.txt");

    #[test]
    fn wrong_proof_nonce_or_binding_fails_with_one_error() {
        let users = rfc_users();
        let tampered = [
            // Wrong proof (last byte changed).
            RFC_CLIENT_FINAL.replace("VQ=", "VR="),
            // Nonce not the one sent.
            RFC_CLIENT_FINAL.replace("hNlF$k0", "hNlF$k1"),
            // Channel binding claimed.
            RFC_CLIENT_FINAL.replace("c=biws", "c=eSws"),
            // Proof missing.
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".into(),
            // Proof of the wrong length.
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA".into(),
        ];
        for bad in tampered {
            let mut server = ScramServer::new(ScramHash::Sha256, RFC_SERVER_NONCE.into());
            server
                .step(RFC_CLIENT_FIRST.as_bytes(), &users)
                .expect("first");
            assert_eq!(
                server.step(bad.as_bytes(), &users),
                Err(SaslError::Credentials),
                "{bad}"
            );
        }
    }

    #[test]
    fn an_unknown_user_gets_a_decoy_salt_and_fails_at_the_proof() {
        let users = rfc_users();
        let mut server = ScramServer::new(ScramHash::Sha256, RFC_SERVER_NONCE.into());
        let first = server
            .step(b"n,,n=mallory,r=rOprNGfwEbeRWgbNEkqO", &users)
            .expect("the exchange goes on");
        let ScramStep::Challenge(first) = first else {
            panic!("a challenge")
        };
        let first = String::from_utf8(first).expect("utf8");
        assert!(first.ends_with(&format!(",s={},i=4096", b64().encode("decoy-mallory"))));
        let final_ = RFC_CLIENT_FINAL.to_string();
        assert_eq!(
            server.step(final_.as_bytes(), &users),
            Err(SaslError::Credentials)
        );
        // The same user on another SHA-256 exchange only: a SHA-512 login of a user with
        // SHA-256 credentials alone is unknown too.
        let mut server = ScramServer::new(ScramHash::Sha512, "n".into());
        let ScramStep::Challenge(first) = server.step(b"n,,n=user,r=abc", &users).expect("goes on")
        else {
            panic!("a challenge")
        };
        assert!(String::from_utf8_lossy(&first).contains("s=ZGVjb3ktdXNlcg=="));
    }

    #[test]
    fn client_first_rules() {
        let users = rfc_users();
        let refused = [
            &b"y,,n=user,r=abc"[..],
            b"p=tls-unique,,n=user,r=abc",
            b"n,,m=ext,n=user,r=abc",
            b"n,,n=user",
            b"n,,r=abc,n=user",
            b"n,,n=,r=abc",
            b"n,,n=us=er,r=abc",
            b"n,,n=user,r=a,bc",
            b"n,,n=user,r=",
            b"n,,n=user,r=abc,tokenauth=true",
            b"n,x=user,n=user,r=abc",
            b"n,,n=user,r=ab\xffc",
            b"\xff\xfe",
            b"",
        ];
        for bad in refused {
            let mut server = ScramServer::new(ScramHash::Sha256, "s".into());
            assert_eq!(
                server.step(bad, &users),
                Err(SaslError::Credentials),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let huge = vec![b'a'; TOKEN_BYTES_MAX + 1];
        let mut server = ScramServer::new(ScramHash::Sha256, "s".into());
        assert!(server.step(&huge, &users).is_err());
        // An authzid other than the user is named; the user's own is fine.
        let mut server = ScramServer::new(ScramHash::Sha256, "s".into());
        assert!(matches!(
            server.step(b"n,a=admin,n=user,r=abc", &users),
            Err(SaslError::Named(m)) if m.contains("authorization id")
        ));
        let mut server = ScramServer::new(ScramHash::Sha256, "s".into());
        assert!(server.step(b"n,a=user,n=user,r=abc,ext=1", &users).is_ok());
    }

    proptest::proptest! {
        /// Any bytes at either step fail cleanly (or, by chance, parse): never a panic.
        #[test]
        fn arbitrary_messages_never_panic(
            first in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            last in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            text in "n,(a=[a-z=,]{0,5})?,n=[a-z=2CD,]{0,8},r=[!-~]{0,20}(,[a-z]=[!-~]{0,5}){0,3}",
        ) {
            let users = rfc_users();
            for token in [first.as_slice(), text.as_bytes()] {
                let mut server = ScramServer::new(ScramHash::Sha256, "s".into());
                if server.step(token, &users).is_ok() {
                    let _ = server.step(&last, &users);
                }
            }
            let _ = crate::security::sasl::plain::authenticate(&first, &users);
        }
    }

    #[test]
    fn sasl_names_unescape_and_round_trip() {
        assert_eq!(sasl_name("a=2Cb=3Dc").expect("name"), "a,b=c");
        assert_eq!(to_sasl_name("a,b=c"), "a=2Cb=3Dc");
        for bad in ["", "a=", "a=2", "a=41", "a\0b"] {
            assert!(sasl_name(bad).is_err(), "{bad}");
        }
        assert_eq!(sasl_name("ünïcode").expect("utf-8"), "ünïcode");
    }
}
