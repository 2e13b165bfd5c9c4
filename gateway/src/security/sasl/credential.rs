//! A user's stored SCRAM credentials: the value of `security/scram/{user}` (one record per
//! user, every mechanism in it, so one compare-and-swap changes a user atomically).
//!
//! Format (JSON, version 1; binary fields base64):
//! `{"version":1,"SCRAM-SHA-256":{"salt":"…","stored_key":"…","server_key":"…","iterations":4096},"SCRAM-SHA-512":{…}}`
//! — per mechanism what RFC 5802 lets a server keep (never the password nor the salted
//! password): salt and iterations to send, StoredKey to check a proof, ServerKey to sign.
//! Kafka keeps the same four fields (`ScramCredential`).

use super::ScramHash;
use base64::Engine;
use serde::{Deserialize, Serialize};

/// The only record version written and read.
const VERSION: u32 = 1;
/// Most bytes of a record parsed: two mechanisms are ~400 bytes.
const RECORD_BYTES_MAX: usize = 16 << 10;
/// Most bytes of a salt accepted from an admin or a record (Kafka's tools use 20-30).
pub const SALT_BYTES_MAX: usize = 1024;

/// One mechanism's credential.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramEntry {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

// Keys are not passwords, but a StoredKey and ServerKey let an attacker impersonate the
// server and run offline guessing: never printed.
impl std::fmt::Debug for ScramEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramEntry")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramEntry {
    /// The entry for `salted_password` (what AlterUserScramCredentials carries: Kafka's
    /// client computes Hi(password, salt, i) itself, so the password never travels).
    pub fn from_salted_password(
        hash: ScramHash,
        salt: Vec<u8>,
        salted_password: &[u8],
        iterations: u32,
    ) -> Self {
        let key = ring::hmac::Key::new(hash.hmac(), salted_password);
        let client_key = ring::hmac::sign(&key, b"Client Key");
        let stored_key = ring::digest::digest(hash.digest(), client_key.as_ref());
        let server_key = ring::hmac::sign(&key, b"Server Key");
        ScramEntry {
            salt,
            stored_key: stored_key.as_ref().to_vec(),
            server_key: server_key.as_ref().to_vec(),
            iterations,
        }
    }

    /// The entry for a password: Hi() then the keys.
    pub fn from_password(hash: ScramHash, salt: Vec<u8>, password: &[u8], iterations: u32) -> Self {
        let salted = salted_password(hash, &salt, password, iterations);
        Self::from_salted_password(hash, salt, &salted, iterations)
    }

    /// Whether the entry's lengths and iterations are ones a server can use.
    fn check(&self, hash: ScramHash) -> Result<(), String> {
        let n = hash.output_len();
        if self.stored_key.len() != n || self.server_key.len() != n {
            return Err(format!("{} keys must be {n} bytes", hash.mechanism()));
        }
        if self.salt.is_empty() || self.salt.len() > SALT_BYTES_MAX {
            return Err(format!("salt must be 1..={SALT_BYTES_MAX} bytes"));
        }
        if !(ScramHash::ITERATIONS_MIN..=ScramHash::ITERATIONS_MAX).contains(&self.iterations) {
            return Err(format!("iterations {} out of range", self.iterations));
        }
        Ok(())
    }
}

/// Hi(password, salt, i): PBKDF2 with the mechanism's HMAC, one hash length of output.
pub fn salted_password(hash: ScramHash, salt: &[u8], password: &[u8], iterations: u32) -> Vec<u8> {
    let mut out = vec![0u8; hash.output_len()];
    // Callers bound iterations to 4096..=16384; max(1) only keeps NonZero total.
    let iterations =
        std::num::NonZeroU32::new(iterations.max(1)).unwrap_or(std::num::NonZeroU32::MIN);
    ring::pbkdf2::derive(hash.pbkdf2(), iterations, salt, password, &mut out);
    out
}

/// Every SCRAM credential of one user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserCredentials {
    pub sha256: Option<ScramEntry>,
    pub sha512: Option<ScramEntry>,
}

impl UserCredentials {
    pub fn get(&self, hash: ScramHash) -> Option<&ScramEntry> {
        match hash {
            ScramHash::Sha256 => self.sha256.as_ref(),
            ScramHash::Sha512 => self.sha512.as_ref(),
        }
    }

    pub fn set(&mut self, hash: ScramHash, entry: Option<ScramEntry>) {
        match hash {
            ScramHash::Sha256 => self.sha256 = entry,
            ScramHash::Sha512 => self.sha512 = entry,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.sha256.is_none() && self.sha512.is_none()
    }

    /// The mechanisms present, in Kafka's type order.
    pub fn mechanisms(&self) -> impl Iterator<Item = (ScramHash, &ScramEntry)> {
        ScramHash::ALL
            .into_iter()
            .filter_map(|h| self.get(h).map(|e| (h, e)))
    }

    /// The record's value.
    pub fn encode(&self) -> Vec<u8> {
        let wire = Wire {
            version: VERSION,
            sha256: self.sha256.as_ref().map(WireEntry::from),
            sha512: self.sha512.as_ref().map(WireEntry::from),
        };
        // Serializing plain strings and integers cannot fail.
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    /// Reads a record's value; any deviation (size, version, base64, key lengths,
    /// iterations) is an error naming what is wrong, never a partial credential.
    pub fn decode(value: &[u8]) -> Result<Self, String> {
        if value.len() > RECORD_BYTES_MAX {
            return Err(format!(
                "record of {} bytes, more than {RECORD_BYTES_MAX}",
                value.len()
            ));
        }
        let wire: Wire = serde_json::from_slice(value).map_err(|e| format!("not JSON: {e}"))?;
        if wire.version != VERSION {
            return Err(format!("unknown record version {}", wire.version));
        }
        let mut creds = UserCredentials::default();
        for (hash, entry) in [
            (ScramHash::Sha256, wire.sha256),
            (ScramHash::Sha512, wire.sha512),
        ] {
            if let Some(w) = entry {
                let e = w.decode()?;
                e.check(hash)?;
                creds.set(hash, Some(e));
            }
        }
        Ok(creds)
    }
}

#[derive(Serialize, Deserialize)]
struct Wire {
    version: u32,
    #[serde(
        rename = "SCRAM-SHA-256",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    sha256: Option<WireEntry>,
    #[serde(
        rename = "SCRAM-SHA-512",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    sha512: Option<WireEntry>,
}

#[derive(Serialize, Deserialize)]
struct WireEntry {
    salt: String,
    stored_key: String,
    server_key: String,
    iterations: u32,
}

fn b64() -> &'static base64::engine::GeneralPurpose {
    &base64::engine::general_purpose::STANDARD
}

impl From<&ScramEntry> for WireEntry {
    fn from(e: &ScramEntry) -> Self {
        WireEntry {
            salt: b64().encode(&e.salt),
            stored_key: b64().encode(&e.stored_key),
            server_key: b64().encode(&e.server_key),
            iterations: e.iterations,
        }
    }
}

impl WireEntry {
    fn decode(self) -> Result<ScramEntry, String> {
        let field =
            |name: &str, s: &str| b64().decode(s).map_err(|_| format!("{name} is not base64"));
        Ok(ScramEntry {
            salt: field("salt", &self.salt)?,
            stored_key: field("stored_key", &self.stored_key)?,
            server_key: field("server_key", &self.server_key)?,
            iterations: self.iterations,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_corruption_is_refused() {
        let mut creds = UserCredentials::default();
        creds.set(
            ScramHash::Sha512,
            Some(ScramEntry::from_password(
                ScramHash::Sha512,
                b"salt".to_vec(),
                b"pw",
                4096,
            )),
        );
        let value = creds.encode();
        let text = String::from_utf8(value.clone()).expect("json");
        assert!(
            text.contains("\"SCRAM-SHA-512\"") && !text.contains("SCRAM-SHA-256"),
            "{text}"
        );
        assert_eq!(UserCredentials::decode(&value).expect("decodes"), creds);
        // Debug output shows no key material.
        let debug = format!("{creds:?}");
        assert!(!debug.contains(&b64().encode(&creds.sha512.as_ref().expect("e").stored_key)));

        for bad in [
            &b"not json"[..],
            br#"{"version":2}"#,
            br#"{"version":1,"SCRAM-SHA-256":{"salt":"!!","stored_key":"","server_key":"","iterations":4096}}"#,
            br#"{"version":1,"SCRAM-SHA-256":{"salt":"c2FsdA==","stored_key":"AAAA","server_key":"AAAA","iterations":4096}}"#,
        ] {
            assert!(UserCredentials::decode(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let mut few = creds.clone();
        if let Some(e) = few.sha512.as_mut() {
            e.iterations = 1000;
        }
        assert!(UserCredentials::decode(&few.encode()).is_err());
        assert!(UserCredentials::decode(&vec![b' '; RECORD_BYTES_MAX + 1]).is_err());
    }
}
