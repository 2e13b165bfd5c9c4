//! SASL authentication on Kafka listeners (issue 15): SCRAM-SHA-256, SCRAM-SHA-512 and
//! PLAIN, all verified against one store of SCRAM credentials, and OAUTHBEARER (a JWT
//! checked by [`crate::security::oauth`]), with KIP-368 re-authentication.
//!
//! Everything here is pure: no clock reads, no randomness (the server nonce and the time
//! are handed in), no I/O. The connection loop (`kafka/conn.rs`) owns one
//! [`Authenticator`] per connection and feeds it requests; `kafka/handlers/sasl.rs` turns
//! its answers into SaslHandshake/SaslAuthenticate responses and supplies credentials from
//! the broker's security cache.
//!
//! # Layout
//! - this file: mechanisms, settings (`--sasl-enabled-mechanisms` and friends), the
//!   credential lookup seam.
//! - [`credential`]: the stored credential record (`security/scram/{user}`), its JSON
//!   format and the key derivation.
//! - [`scram`]: the SCRAM server exchange (RFC 5802/7677, as Kafka's `ScramSaslServer`).
//! - [`plain`]: the PLAIN server (RFC 4616), checked against the SCRAM credentials.
//! - [`authenticator`]: one connection's authentication state machine.

pub mod authenticator;
pub mod credential;
pub mod plain;
pub mod scram;

pub use authenticator::{AuthReply, Authenticator, Gate, HandshakeReply};
pub use credential::{ScramEntry, UserCredentials};

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A SASL mechanism this broker can serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    Plain,
    ScramSha256,
    ScramSha512,
    /// RFC 7628 / KIP-255: a bearer token (JWT) validated against the issuer's JWKS.
    OauthBearer,
}

impl Mechanism {
    pub const ALL: [Mechanism; 4] = [
        Mechanism::Plain,
        Mechanism::ScramSha256,
        Mechanism::ScramSha512,
        Mechanism::OauthBearer,
    ];

    /// The IANA/Kafka name.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
            Mechanism::OauthBearer => "OAUTHBEARER",
        }
    }

    /// The SCRAM hash of the mechanism, `None` for PLAIN and OAUTHBEARER.
    pub fn scram(self) -> Option<ScramHash> {
        match self {
            Mechanism::Plain | Mechanism::OauthBearer => None,
            Mechanism::ScramSha256 => Some(ScramHash::Sha256),
            Mechanism::ScramSha512 => Some(ScramHash::Sha512),
        }
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A mechanism name this broker does not serve.
#[derive(Debug, thiserror::Error)]
#[error("'{0}' is not a SASL mechanism served here: one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER")]
pub struct BadMechanism(pub String);

impl FromStr for Mechanism {
    type Err = BadMechanism;

    /// Exact names, as Kafka matches them (`sasl.enabled.mechanisms` is case-sensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mechanism::ALL
            .into_iter()
            .find(|m| m.name() == s.trim())
            .ok_or_else(|| BadMechanism(s.to_string()))
    }
}

/// The hash of a SCRAM mechanism: Kafka's `ScramMechanism`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    pub const ALL: [ScramHash; 2] = [ScramHash::Sha256, ScramHash::Sha512];

    /// Kafka's bounds on a credential's iterations (`ScramMechanism.minIterations` /
    /// `maxIterations`): fewer is weak, more lets one login cost a broker too much CPU.
    pub const ITERATIONS_MIN: u32 = 4096;
    pub const ITERATIONS_MAX: u32 = 16384;

    pub fn mechanism(self) -> Mechanism {
        match self {
            ScramHash::Sha256 => Mechanism::ScramSha256,
            ScramHash::Sha512 => Mechanism::ScramSha512,
        }
    }

    /// The mechanism's type id in DescribeUserScramCredentials/AlterUserScramCredentials
    /// (Kafka's `ScramMechanism.type()`: 0 is UNKNOWN).
    pub fn type_id(self) -> i8 {
        match self {
            ScramHash::Sha256 => 1,
            ScramHash::Sha512 => 2,
        }
    }

    pub fn from_type_id(id: i8) -> Option<Self> {
        ScramHash::ALL.into_iter().find(|h| h.type_id() == id)
    }

    /// Bytes of the hash's output (and so of StoredKey, ServerKey and a ClientProof).
    pub fn output_len(self) -> usize {
        match self {
            ScramHash::Sha256 => 32,
            ScramHash::Sha512 => 64,
        }
    }

    pub(crate) fn hmac(self) -> ring::hmac::Algorithm {
        match self {
            ScramHash::Sha256 => ring::hmac::HMAC_SHA256,
            ScramHash::Sha512 => ring::hmac::HMAC_SHA512,
        }
    }

    pub(crate) fn digest(self) -> &'static ring::digest::Algorithm {
        match self {
            ScramHash::Sha256 => &ring::digest::SHA256,
            ScramHash::Sha512 => &ring::digest::SHA512,
        }
    }

    pub(crate) fn pbkdf2(self) -> ring::pbkdf2::Algorithm {
        match self {
            ScramHash::Sha256 => ring::pbkdf2::PBKDF2_HMAC_SHA256,
            ScramHash::Sha512 => ring::pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }
}

/// The SASL settings of a broker (flags of `oxbow serve`).
#[derive(Clone, Debug)]
pub struct SaslSettings {
    /// Mechanisms offered on SASL listeners (`--sasl-enabled-mechanisms`).
    pub enabled: Vec<Mechanism>,
    /// Wait before answering a failed authentication and closing
    /// (`--connection-failed-authentication-delay`).
    pub failed_authentication_delay: Duration,
    /// A session must re-authenticate this long after authenticating; zero: never
    /// (`--connections-max-reauth`). An OAUTHBEARER session also ends when its token
    /// expires.
    pub max_reauth: Duration,
}

impl Default for SaslSettings {
    fn default() -> Self {
        SaslSettings {
            enabled: vec![Mechanism::ScramSha256, Mechanism::ScramSha512],
            failed_authentication_delay: Duration::from_millis(100),
            max_reauth: Duration::ZERO,
        }
    }
}

/// SASL flags of `oxbow serve`, in Kafka's names.
#[derive(Clone, Debug, clap::Args)]
pub struct SaslArgs {
    /// Kafka's `sasl.enabled.mechanisms`: mechanisms offered on SASL_PLAINTEXT/SASL_SSL
    /// listeners, comma-separated: SCRAM-SHA-256, SCRAM-SHA-512, PLAIN, OAUTHBEARER. PLAIN
    /// sends the password itself (in clear on SASL_PLAINTEXT) and costs the broker a PBKDF2
    /// per login; SCRAM sends neither. OAUTHBEARER takes a JWT checked against
    /// --sasl-oauthbearer-jwks-endpoint-url (required with it); a bearer token is as good
    /// as a password to whoever sees it, so prefer SASL_SSL.
    #[arg(
        long,
        env = "OXBOW_SASL_ENABLED_MECHANISMS",
        value_delimiter = ',',
        default_value = "SCRAM-SHA-256,SCRAM-SHA-512"
    )]
    pub sasl_enabled_mechanisms: Vec<Mechanism>,
    /// Kafka's `connection.failed.authentication.delay.ms`: a failed authentication is
    /// answered (and the connection closed) this long after it fails. Slows password
    /// guessing and reconnect storms of misconfigured clients; each delayed connection
    /// holds its slot of --connections-max meanwhile.
    #[arg(long, env = "OXBOW_CONNECTION_FAILED_AUTHENTICATION_DELAY", default_value = "100ms",
          value_parser = humantime::parse_duration)]
    pub connection_failed_authentication_delay: Duration,
    /// Kafka's `connections.max.reauth.ms` (KIP-368): a SASL session lasts this long, then
    /// the client must re-authenticate on the same connection (librdkafka and the Java
    /// client do so on their own) or be disconnected. Shorter bounds how long a deleted
    /// user or changed password keeps working, at one SASL exchange per session. `0`:
    /// sessions never expire.
    #[arg(long, env = "OXBOW_CONNECTIONS_MAX_REAUTH", default_value = "0s",
          value_parser = humantime::parse_duration)]
    pub connections_max_reauth: Duration,
}

impl SaslArgs {
    /// The settings, or why the flags are wrong (naming the flag).
    pub fn settings(&self) -> Result<SaslSettings, String> {
        // Named twice is named once; the order is kept (it is the order Kafka lists them).
        let mut enabled: Vec<Mechanism> = Vec::new();
        for m in &self.sasl_enabled_mechanisms {
            if !enabled.contains(m) {
                enabled.push(*m);
            }
        }
        if enabled.is_empty() {
            return Err("--sasl-enabled-mechanisms names no mechanism".into());
        }
        if self.connections_max_reauth > Duration::from_millis(i64::MAX as u64) {
            return Err("--connections-max-reauth is too long".into());
        }
        Ok(SaslSettings {
            enabled,
            failed_authentication_delay: self.connection_failed_authentication_delay,
            max_reauth: self.connections_max_reauth,
        })
    }
}

/// Where the SASL servers find a user's credentials: the broker's security cache in
/// production, a map in tests.
pub trait CredentialSource {
    /// The user's credentials; `None` for an unknown user or one whose record cannot be
    /// read (the source logs that).
    fn lookup(&self, user: &str) -> Option<UserCredentials>;
    /// A salt to show for a user that does not exist, stable per user (so repeated
    /// attempts cannot tell an unknown user from a known one by a salt that changes).
    fn decoy_salt(&self, user: &str) -> Vec<u8>;
    /// The iterations to show for a user that does not exist: what real users of `hash`
    /// have, so the count does not give an unknown user away either.
    fn decoy_iterations(&self, _hash: ScramHash) -> u32 {
        ScramHash::ITERATIONS_MIN
    }
}

/// Whether two byte strings are equal, in time independent of where they differ.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// A fresh server nonce from the OS CSPRNG: 24 random bytes, base64url (printable and
/// comma-free, as SCRAM nonces must be).
pub fn fresh_nonce(rng: &dyn ring::rand::SecureRandom) -> Option<String> {
    use base64::Engine;
    let mut bytes = [0u8; 24];
    rng.fill(&mut bytes).ok()?;
    Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// Most bytes of one SASL token: real ones are well under 1 KiB (a SCRAM-SHA-512 final
/// message is ~200 bytes); past this the exchange fails without parsing.
pub const TOKEN_BYTES_MAX: usize = 8 << 10;

/// Why an exchange failed. The message of `Credentials` is what every failure shows the
/// client unless the failure is the client's own protocol error worth naming; nothing here
/// ever holds a secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SaslError {
    /// Wrong password, unknown user, bad proof: one message for all (no user
    /// enumeration). Kafka: "Authentication failed during authentication due to invalid
    /// credentials with SASL mechanism {m}".
    #[error("invalid credentials")]
    Credentials,
    /// A failure Kafka names to the client (its `SaslAuthenticationException`), e.g. an
    /// authorization id other than the user.
    #[error("{0}")]
    Named(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mechanisms_parse_by_kafkas_exact_names() {
        for m in Mechanism::ALL {
            assert_eq!(m.name().parse::<Mechanism>().expect("name"), m);
        }
        assert!("scram-sha-256".parse::<Mechanism>().is_err());
        assert!("GSSAPI".parse::<Mechanism>().is_err());
        assert_eq!(ScramHash::from_type_id(2), Some(ScramHash::Sha512));
        assert_eq!(ScramHash::from_type_id(0), None);
    }

    #[test]
    fn sasl_flags_parse_in_kafkas_names() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            sasl: SaslArgs,
        }
        let cli = Cli::try_parse_from([
            "oxbow",
            "--sasl-enabled-mechanisms",
            "PLAIN,SCRAM-SHA-512,PLAIN",
            "--connections-max-reauth",
            "1h",
        ])
        .expect("parses");
        let s = cli.sasl.settings().expect("valid");
        assert_eq!(s.enabled, [Mechanism::Plain, Mechanism::ScramSha512]);
        assert_eq!(s.max_reauth, Duration::from_secs(3600));
        assert_eq!(s.failed_authentication_delay, Duration::from_millis(100));
        assert!(Cli::try_parse_from(["oxbow", "--sasl-enabled-mechanisms", "GSSAPI"]).is_err());
    }

    #[test]
    fn constant_time_eq_needs_equal_lengths() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        let n = fresh_nonce(&ring::rand::SystemRandom::new()).expect("nonce");
        assert_eq!(n.len(), 32);
        assert!(!n.contains(','));
    }
}
