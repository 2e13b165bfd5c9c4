//! The PLAIN server (RFC 4616): one message `authzid NUL user NUL password`, checked
//! against the user's stored SCRAM credentials — Hi(password) with each stored
//! mechanism's salt and iterations must give its StoredKey — so PLAIN and SCRAM share one
//! credential store (as Redpanda does) and no password is ever stored.
//!
//! Kafka's `PlainSaslServer` messages are kept: an authzid other than the user, an empty
//! user or password are named; a wrong password or unknown user is "Invalid username or
//! password". An unknown user costs one PBKDF2 with a decoy salt, as a known one does.

use super::credential::salted_password;
use super::{
    constant_time_eq, CredentialSource, SaslError, ScramEntry, ScramHash, TOKEN_BYTES_MAX,
};

/// The failure of a wrong password or an unknown user.
pub const INVALID: &str = "Authentication failed: Invalid username or password";

/// Checks one PLAIN message; the authenticated user on success.
pub fn authenticate(token: &[u8], credentials: &dyn CredentialSource) -> Result<String, SaslError> {
    if token.len() > TOKEN_BYTES_MAX {
        return Err(SaslError::Named(INVALID.into()));
    }
    let mut parts = token.split(|b| *b == 0);
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(SaslError::Named(
            "Invalid SASL/PLAIN response: expected 3 tokens".into(),
        ));
    };
    let user = std::str::from_utf8(user).map_err(|_| SaslError::Named(INVALID.into()))?;
    if user.is_empty() {
        return Err(SaslError::Named(
            "Authentication failed: username not specified".into(),
        ));
    }
    if password.is_empty() {
        return Err(SaslError::Named(
            "Authentication failed: password not specified".into(),
        ));
    }
    if !authzid.is_empty() && authzid != user.as_bytes() {
        return Err(SaslError::Named(
            "Authentication failed: Client requested an authorization id that is different from username".into(),
        ));
    }
    if check_password(user, password, credentials) {
        Ok(user.to_string())
    } else {
        Err(SaslError::Named(INVALID.into()))
    }
}

/// Whether `password` is `user`'s, by the stored SCRAM credentials (every stored
/// mechanism checked, no early exit). An unknown user costs one PBKDF2 with a decoy salt,
/// as a known one does. Shared by PLAIN and HTTP Basic authentication.
pub fn check_password(user: &str, password: &[u8], credentials: &dyn CredentialSource) -> bool {
    match credentials.lookup(user).filter(|c| !c.is_empty()) {
        Some(creds) => {
            let mut any = false;
            for (hash, entry) in creds.mechanisms() {
                any |= verify(hash, entry, password);
            }
            any
        }
        None => {
            let decoy = ScramEntry {
                salt: credentials.decoy_salt(user),
                stored_key: vec![0; ScramHash::Sha512.output_len()],
                server_key: Vec::new(),
                iterations: credentials.decoy_iterations(ScramHash::Sha512),
            };
            verify(ScramHash::Sha512, &decoy, password);
            false
        }
    }
}

/// Whether `password` derives `entry`'s StoredKey.
fn verify(hash: ScramHash, entry: &ScramEntry, password: &[u8]) -> bool {
    let salted = salted_password(hash, &entry.salt, password, entry.iterations);
    let derived = ScramEntry::from_salted_password(hash, Vec::new(), &salted, entry.iterations);
    constant_time_eq(&derived.stored_key, &entry.stored_key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::sasl::UserCredentials;
    use std::collections::HashMap;

    struct Users(HashMap<String, UserCredentials>);
    impl CredentialSource for Users {
        fn lookup(&self, user: &str) -> Option<UserCredentials> {
            self.0.get(user).cloned()
        }
        fn decoy_salt(&self, _: &str) -> Vec<u8> {
            b"decoy".to_vec()
        }
    }

    fn users() -> Users {
        let mut alice = UserCredentials::default();
        alice.set(
            ScramHash::Sha512,
            Some(ScramEntry::from_password(
                ScramHash::Sha512,
                b"s1".to_vec(),
                b"a-pw",
                4096,
            )),
        );
        let mut bob = UserCredentials::default();
        bob.set(
            ScramHash::Sha256,
            Some(ScramEntry::from_password(
                ScramHash::Sha256,
                b"s2".to_vec(),
                b"b-pw",
                4096,
            )),
        );
        Users(HashMap::from([
            ("alice".into(), alice),
            ("bob".into(), bob),
        ]))
    }

    #[test]
    fn plain_checks_the_scram_credentials() {
        let u = users();
        assert_eq!(authenticate(b"\0alice\0a-pw", &u), Ok("alice".into()));
        assert_eq!(authenticate(b"alice\0alice\0a-pw", &u), Ok("alice".into()));
        assert_eq!(authenticate(b"\0bob\0b-pw", &u), Ok("bob".into()));
        assert_eq!(
            authenticate(b"\0alice\0b-pw", &u),
            Err(SaslError::Named(INVALID.into()))
        );
        assert_eq!(
            authenticate(b"\0nobody\0a-pw", &u),
            Err(SaslError::Named(INVALID.into()))
        );
    }

    #[test]
    fn malformed_plain_messages_fail_cleanly() {
        let u = users();
        for bad in [
            &b""[..],
            b"alice",
            b"\0alice",
            b"\0alice\0a-pw\0extra",
            b"\0\0a-pw",
            b"\0alice\0",
            b"bob\0alice\0a-pw",
            b"\0al\xffice\0a-pw",
        ] {
            assert!(
                authenticate(bad, &u).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(authenticate(&vec![0u8; TOKEN_BYTES_MAX + 1], &u).is_err());
        let named = authenticate(b"bob\0alice\0a-pw", &u);
        assert!(matches!(named, Err(SaslError::Named(m)) if m.contains("authorization id")));
    }
}
