//! Password logins against the stored SCRAM credentials (`security/scram/{user}`, made by
//! `oxbow users` or AlterUserScramCredentials): the broker's security cache as the SASL
//! servers' [`CredentialSource`] ([`CacheCredentials`], shared by Kafka SASL and HTTP), and
//! [`PasswordLogins`], the verifier of HTTP Basic authentication.
//!
//! A password check is a PBKDF2 per stored mechanism (4096 to 16384 iterations, a few ms
//! each): [`PasswordLogins`] runs it on the blocking pool, at most
//! [`LOGINS_CONCURRENT_MAX`] at a time, and remembers a success for [`REMEMBER_FOR`] so a
//! client sending Basic credentials with every request costs one PBKDF2 per minute, not
//! one per request. A remembered login is keyed by an HMAC (a per-process random key) of
//! the user, the password and the credential record's version: a password change or a
//! deleted user moves or removes the version, so the next request checks again at once.
//! Failures are never remembered. Nothing here stores a password.

use super::cache::SecurityCache;
use super::sasl::plain::check_password;
use super::sasl::{CredentialSource, ScramHash, UserCredentials};
use oxbow_metadata::SecurityKind;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// How long a successful password login is remembered. Longer saves PBKDF2 work for
/// clients that send their password with every request; a change or deletion of the user
/// takes effect at once regardless (the record's version is in the key).
pub const REMEMBER_FOR: Duration = Duration::from_secs(60);
/// Most remembered logins; past it the expired ones go, then all (each costs ~64 bytes).
pub const REMEMBERED_MAX: usize = 4096;
/// Most password checks running at once: each holds a blocking-pool thread and a core
/// for a few ms, so a flood of wrong passwords queues here instead of taking every core.
pub const LOGINS_CONCURRENT_MAX: usize = 4;
/// Longest a login waits for its turn before it is refused as busy.
pub const LOGIN_WAIT_MAX: Duration = Duration::from_secs(10);

/// Credentials from the broker's copy of `security/scram/*`.
pub struct CacheCredentials<'a>(pub &'a SecurityCache);

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
        let tag = ring::hmac::sign(process_key("decoy"), user.as_bytes());
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

/// This process's secrets (random at start): for decoy salts (stable per user on one
/// broker, unpredictable) and for the keys of remembered logins.
fn process_key(purpose: &'static str) -> &'static ring::hmac::Key {
    static DECOY: OnceLock<ring::hmac::Key> = OnceLock::new();
    static LOGINS: OnceLock<ring::hmac::Key> = OnceLock::new();
    let cell = if purpose == "decoy" { &DECOY } else { &LOGINS };
    cell.get_or_init(|| {
        let rng = ring::rand::SystemRandom::new();
        ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng).unwrap_or_else(|_| {
            // The OS generator failing leaves a fixed key: decoys stay stable per user,
            // only predictable; remembered logins stay keyed by user, password and version.
            ring::hmac::Key::new(ring::hmac::HMAC_SHA256, purpose.as_bytes())
        })
    })
}

/// Why a password login did not succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoginError {
    /// Unknown user or wrong password (one answer for both: no user enumeration).
    #[error("invalid username or password")]
    Invalid,
    /// Too many logins waited for a check for too long.
    #[error("too many logins in progress; retry")]
    Busy,
}

/// Checks user/password pairs against the stored SCRAM credentials (see the module docs).
pub struct PasswordLogins {
    cache: Arc<SecurityCache>,
    /// Remembered successes: HMAC(user, password, record version) → when it expires.
    remembered: Mutex<HashMap<[u8; 32], Instant>>,
    permits: Arc<Semaphore>,
}

impl PasswordLogins {
    pub fn new(cache: Arc<SecurityCache>) -> Self {
        PasswordLogins {
            cache,
            remembered: Mutex::new(HashMap::new()),
            permits: Arc::new(Semaphore::new(LOGINS_CONCURRENT_MAX)),
        }
    }

    /// Whether `password` is `user`'s now.
    pub async fn check(&self, user: &str, password: &[u8]) -> Result<(), LoginError> {
        // The version the check is remembered under is read before the check: a change
        // landing during it moves the version, so the result is never found again.
        let version = self
            .cache
            .get(SecurityKind::ScramCredential, user)
            .map(|r| r.version);
        let tag = version.map(|v| tag(v, user, password));
        if let Some(tag) = &tag {
            if self.is_remembered(tag, Instant::now()) {
                return Ok(());
            }
        }
        let permit = tokio::time::timeout(LOGIN_WAIT_MAX, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| LoginError::Busy)?
            .map_err(|_| LoginError::Busy)?;
        let cache = self.cache.clone();
        let (user_owned, password_owned) = (user.to_string(), password.to_vec());
        let ok = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            check_password(&user_owned, &password_owned, &CacheCredentials(&cache))
        })
        .await
        .unwrap_or_else(|e| {
            tracing::error!(error = %e, "a password check did not complete");
            false
        });
        if !ok {
            return Err(LoginError::Invalid);
        }
        if let Some(tag) = tag {
            self.remember(tag, Instant::now() + REMEMBER_FOR);
        }
        Ok(())
    }

    fn is_remembered(&self, tag: &[u8; 32], now: Instant) -> bool {
        let remembered = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
        remembered.get(tag).is_some_and(|expires| *expires > now)
    }

    fn remember(&self, tag: [u8; 32], expires: Instant) {
        let mut remembered = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
        if remembered.len() >= REMEMBERED_MAX {
            let now = Instant::now();
            remembered.retain(|_, e| *e > now);
            if remembered.len() >= REMEMBERED_MAX {
                remembered.clear();
            }
        }
        remembered.insert(tag, expires);
    }

    /// Remembered logins (tests, and a bound check).
    pub fn remembered_len(&self) -> usize {
        self.remembered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
}

/// The key of a remembered login: lengths first, so no two (user, password) pairs run
/// together into the same input.
fn tag(version: i64, user: &str, password: &[u8]) -> [u8; 32] {
    let mut ctx = ring::hmac::Context::with_key(process_key("logins"));
    ctx.update(&version.to_be_bytes());
    ctx.update(&(user.len() as u64).to_be_bytes());
    ctx.update(user.as_bytes());
    ctx.update(password);
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.sign().as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::sasl::ScramEntry;
    use oxbow_metadata::{SecurityEvent, SecurityRecord};

    fn put(cache: &SecurityCache, user: &str, password: &[u8], version: i64) {
        let mut creds = UserCredentials::default();
        creds.set(
            ScramHash::Sha256,
            Some(ScramEntry::from_password(
                ScramHash::Sha256,
                b"salt".to_vec(),
                password,
                4096,
            )),
        );
        cache.apply(SecurityEvent::Put(SecurityRecord {
            kind: SecurityKind::ScramCredential,
            name: user.into(),
            value: creds.encode(),
            version,
        }));
    }

    #[tokio::test]
    async fn successes_are_remembered_until_the_credential_changes() {
        let cache = Arc::new(SecurityCache::new());
        put(&cache, "alice", b"pw1", 1);
        let logins = PasswordLogins::new(cache.clone());
        assert_eq!(logins.check("alice", b"pw1").await, Ok(()));
        assert_eq!(logins.remembered_len(), 1);
        assert_eq!(logins.check("alice", b"pw1").await, Ok(()));
        assert_eq!(
            logins.check("alice", b"nope").await,
            Err(LoginError::Invalid)
        );
        assert_eq!(logins.check("bob", b"pw1").await, Err(LoginError::Invalid));
        assert_eq!(logins.remembered_len(), 1, "failures are not remembered");
        // A password change: the old password fails at once, though it was remembered.
        put(&cache, "alice", b"pw2", 2);
        assert_eq!(
            logins.check("alice", b"pw1").await,
            Err(LoginError::Invalid)
        );
        assert_eq!(logins.check("alice", b"pw2").await, Ok(()));
        cache.apply(SecurityEvent::Deleted {
            kind: SecurityKind::ScramCredential,
            name: "alice".into(),
        });
        assert_eq!(
            logins.check("alice", b"pw2").await,
            Err(LoginError::Invalid)
        );
    }

    #[test]
    fn tags_separate_user_from_password() {
        assert_ne!(tag(1, "ab", b"c"), tag(1, "a", b"bc"));
        assert_ne!(tag(1, "a", b"b"), tag(2, "a", b"b"));
        assert_eq!(tag(1, "a", b"b"), tag(1, "a", b"b"));
    }
}
