//! OAUTHBEARER (RFC 7628, KIP-255/KIP-768): a client presents a JWT; the broker checks its
//! signature against the issuer's published keys (a JWKS file or URL) and its claims, and
//! the principal is `User:` + the subject claim.
//!
//! The checks follow Kafka's `BrokerJwtValidator` (the `sasl.oauthbearer.*` settings, as
//! `--sasl-oauthbearer-*` flags): the signature by a key of the set (chosen by `kid`),
//! asymmetric algorithms only (an `HS*` token would let anyone holding a symmetric JWK
//! forge, and `none` is never accepted); `exp` required and in the future, `nbf` and `iat`
//! not in the future, each within the clock skew; the audience and issuer when expected;
//! the subject claim present and non-empty. The token's expiry bounds the session
//! (KIP-368 re-authentication).
//!
//! # Layout
//! - [`parse_client_response`]: the client's first message (`n,,\x01auth=Bearer …\x01\x01`).
//! - [`Jwks`]: a key set parsed from JSON, bounded in size and count.
//! - [`Validator`]: the settings and the current key set; re-reads the set every refresh
//!   interval and, at most every [`UNKNOWN_KID_REFRESH_MIN`], when a token names a key it
//!   does not hold (the issuer rotated).

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Most bytes of a JWKS document read (file or URL).
pub const JWKS_BYTES_MAX: usize = 1 << 20;
/// Most keys of a set kept.
pub const JWKS_KEYS_MAX: usize = 256;
/// Most bytes of a token.
pub const TOKEN_BYTES_MAX: usize = 64 * 1024;
/// Least time between two key-set reads caused by unknown key ids.
pub const UNKNOWN_KID_REFRESH_MIN: Duration = Duration::from_secs(10);
/// Bound on fetching a JWKS URL.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The algorithms accepted: asymmetric signatures only.
const ALGORITHMS: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// Why a token (or the client's message) is refused. The message is for the broker's log
/// and the client's error; it never holds the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("malformed OAUTHBEARER client response: {0}")]
    Malformed(&'static str),
    #[error("the token is not a valid JWT: {0}")]
    Invalid(String),
    #[error("no key of the JWKS has key id {0:?}")]
    UnknownKey(Option<String>),
    #[error("algorithm {0:?} is not accepted (asymmetric signatures only)")]
    Algorithm(Algorithm),
    #[error("the token has no '{0}' claim (or it is empty)")]
    MissingSubject(String),
    #[error("no JWKS loaded yet")]
    NoKeys,
}

/// The token of the client's first message: `gs2-header \x01 auth=Bearer <token> \x01
/// [key=value \x01]* \x01`. An authorization identity in the GS2 header (`a=`) must be
/// the token's subject; it is returned to be checked after validation.
pub fn parse_client_response(message: &[u8]) -> Result<(String, Option<String>), TokenError> {
    let text = std::str::from_utf8(message).map_err(|_| TokenError::Malformed("not UTF-8"))?;
    let (gs2, rest) = text
        .split_once('\u{1}')
        .ok_or(TokenError::Malformed("no key-value separator"))?;
    let authzid = parse_gs2(gs2)?;
    // Each key-value pair ends with a separator, and one more ends the message.
    let body = rest
        .strip_suffix("\u{1}\u{1}")
        .ok_or(TokenError::Malformed("not terminated"))?;
    let mut token = None;
    for pair in body.split('\u{1}') {
        if pair.is_empty() {
            continue;
        }
        let (key, value) = pair
            .split_once('=')
            .ok_or(TokenError::Malformed("a key without a value"))?;
        if key == "auth" {
            if token.is_some() {
                return Err(TokenError::Malformed("two auth values"));
            }
            let (scheme, t) = value
                .split_once(' ')
                .ok_or(TokenError::Malformed("auth is not 'Bearer <token>'"))?;
            if !scheme.eq_ignore_ascii_case("bearer") || t.trim().is_empty() {
                return Err(TokenError::Malformed("auth is not 'Bearer <token>'"));
            }
            if t.len() > TOKEN_BYTES_MAX {
                return Err(TokenError::Malformed("token too long"));
            }
            token = Some(t.trim().to_string());
        }
        // Other keys are SASL extensions (KIP-342); none are acted on.
    }
    let token = token.ok_or(TokenError::Malformed("no auth value"))?;
    Ok((token, authzid))
}

fn parse_gs2(gs2: &str) -> Result<Option<String>, TokenError> {
    // "n,," or "n,a=<authzid>,"; channel binding ("p=…", "y") is not supported.
    let mut parts = gs2.splitn(3, ',');
    if parts.next() != Some("n") {
        return Err(TokenError::Malformed("channel binding is not supported"));
    }
    let authz = parts
        .next()
        .ok_or(TokenError::Malformed("bad GS2 header"))?;
    if parts.next() != Some("") {
        return Err(TokenError::Malformed("bad GS2 header"));
    }
    if authz.is_empty() {
        return Ok(None);
    }
    let name = authz
        .strip_prefix("a=")
        .ok_or(TokenError::Malformed("bad GS2 header"))?;
    Ok(Some(name.replace("=2C", ",").replace("=3D", "=")))
}

/// A parsed key set.
pub struct Jwks {
    keys: Vec<(Option<String>, Option<Algorithm>, DecodingKey)>,
}

impl Jwks {
    /// Parses a JWKS document; keys that are not usable for signatures are skipped.
    pub fn parse(json: &[u8]) -> Result<Self, String> {
        if json.len() > JWKS_BYTES_MAX {
            return Err(format!("JWKS larger than {JWKS_BYTES_MAX} bytes"));
        }
        let set: JwkSet = serde_json::from_slice(json).map_err(|e| format!("not a JWKS: {e}"))?;
        let mut keys = Vec::new();
        for jwk in set.keys.iter().take(JWKS_KEYS_MAX) {
            if let Some(k) = usable(jwk) {
                keys.push(k);
            }
        }
        if keys.is_empty() {
            return Err("the JWKS holds no usable signature key".into());
        }
        Ok(Jwks { keys })
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn find(&self, kid: Option<&str>) -> Option<&(Option<String>, Option<Algorithm>, DecodingKey)> {
        match kid {
            Some(kid) => self.keys.iter().find(|(k, _, _)| k.as_deref() == Some(kid)),
            // A token without a key id is accepted only against a set of one key.
            None if self.keys.len() == 1 => self.keys.first(),
            None => None,
        }
    }
}

fn usable(jwk: &Jwk) -> Option<(Option<String>, Option<Algorithm>, DecodingKey)> {
    use jsonwebtoken::jwk::PublicKeyUse;
    if matches!(&jwk.common.public_key_use, Some(u) if *u != PublicKeyUse::Signature) {
        return None;
    }
    let alg = jwk
        .common
        .key_algorithm
        .and_then(|a| a.to_string().parse::<Algorithm>().ok());
    if let Some(a) = alg {
        if !ALGORITHMS.contains(&a) {
            return None;
        }
    }
    let key = DecodingKey::from_jwk(jwk).ok()?;
    Some((jwk.common.key_id.clone(), alg, key))
}

/// OAUTHBEARER flags of `oxbow serve`, in Kafka's names (`sasl.oauthbearer.*`). Token
/// validation is on when `--sasl-oauthbearer-jwks-endpoint-url` is given; SASL listeners
/// offer OAUTHBEARER when it is also in `--sasl-enabled-mechanisms`, and the HTTP API
/// accepts bearer tokens with `--http-authentication bearer`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct OauthArgs {
    /// Kafka's `sasl.oauthbearer.jwks.endpoint.url`: the issuer's keys, a JWKS document at
    /// an `https://` (or `http://`) URL or in a file (`file:///path` or a path).
    #[arg(long, env = "OXBOW_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL")]
    pub sasl_oauthbearer_jwks_endpoint_url: Option<String>,
    /// Kafka's `sasl.oauthbearer.expected.audience` (comma-separated): a token's `aud`
    /// must name one of these. Empty: the audience is not checked.
    #[arg(
        long,
        env = "OXBOW_SASL_OAUTHBEARER_EXPECTED_AUDIENCE",
        value_delimiter = ','
    )]
    pub sasl_oauthbearer_expected_audience: Vec<String>,
    /// Kafka's `sasl.oauthbearer.expected.issuer`: a token's `iss` must be this.
    #[arg(long, env = "OXBOW_SASL_OAUTHBEARER_EXPECTED_ISSUER")]
    pub sasl_oauthbearer_expected_issuer: Option<String>,
    /// Kafka's `sasl.oauthbearer.sub.claim.name`: the claim naming the principal.
    #[arg(
        long,
        env = "OXBOW_SASL_OAUTHBEARER_SUB_CLAIM_NAME",
        default_value = "sub"
    )]
    pub sasl_oauthbearer_sub_claim_name: String,
    /// Kafka's `sasl.oauthbearer.clock.skew.seconds`: leeway on `exp`, `nbf` and `iat`.
    #[arg(long, env = "OXBOW_SASL_OAUTHBEARER_CLOCK_SKEW", default_value = "30s",
          value_parser = humantime::parse_duration)]
    pub sasl_oauthbearer_clock_skew: Duration,
    /// Kafka's `sasl.oauthbearer.jwks.endpoint.refresh.ms`: how often the key set is
    /// re-read (also, at most every 10 s, when a token names a key not in it).
    #[arg(long, env = "OXBOW_SASL_OAUTHBEARER_JWKS_ENDPOINT_REFRESH", default_value = "1h",
          value_parser = humantime::parse_duration)]
    pub sasl_oauthbearer_jwks_endpoint_refresh: Duration,
}

impl OauthArgs {
    /// The settings, `None` without a JWKS, or why the flags are wrong (naming the flag).
    pub fn settings(&self) -> Result<Option<OauthSettings>, String> {
        let Some(url) = &self.sasl_oauthbearer_jwks_endpoint_url else {
            return Ok(None);
        };
        let jwks = url
            .parse::<JwksSource>()
            .map_err(|e| format!("--sasl-oauthbearer-jwks-endpoint-url: {e}"))?;
        if self.sasl_oauthbearer_sub_claim_name.trim().is_empty() {
            return Err("--sasl-oauthbearer-sub-claim-name: must not be empty".into());
        }
        if self.sasl_oauthbearer_jwks_endpoint_refresh < Duration::from_secs(1) {
            return Err("--sasl-oauthbearer-jwks-endpoint-refresh: at least 1s".into());
        }
        Ok(Some(OauthSettings {
            jwks,
            expected_audience: self
                .sasl_oauthbearer_expected_audience
                .iter()
                .map(|a| a.trim().to_string())
                .filter(|a| !a.is_empty())
                .collect(),
            expected_issuer: self.sasl_oauthbearer_expected_issuer.clone(),
            sub_claim: self.sasl_oauthbearer_sub_claim_name.trim().to_string(),
            clock_skew: self.sasl_oauthbearer_clock_skew,
            refresh: self.sasl_oauthbearer_jwks_endpoint_refresh,
        }))
    }
}

/// Re-reads the key set when due until `shutdown` (its errors keep the old keys, logged).
pub async fn run_jwks_refresher(
    validator: Arc<Validator>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let tick =
        (validator.settings.refresh / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(tick) => validator.refresh_if_due().await,
        }
    }
}

/// The `--sasl-oauthbearer-*` settings.
#[derive(Clone, Debug)]
pub struct OauthSettings {
    pub jwks: JwksSource,
    /// `sasl.oauthbearer.expected.audience`: the token's `aud` must hold one of these (when
    /// not empty).
    pub expected_audience: Vec<String>,
    /// `sasl.oauthbearer.expected.issuer`.
    pub expected_issuer: Option<String>,
    /// `sasl.oauthbearer.sub.claim.name` (default `sub`).
    pub sub_claim: String,
    /// `sasl.oauthbearer.clock.skew.seconds` (default 30).
    pub clock_skew: Duration,
    /// `sasl.oauthbearer.jwks.endpoint.refresh.ms` (default 1 h).
    pub refresh: Duration,
}

/// Where the key set comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JwksSource {
    File(PathBuf),
    Url(String),
}

impl std::str::FromStr for JwksSource {
    type Err = String;

    /// `file:///path`, a plain path, or an `http(s)://` URL (as Kafka's
    /// `sasl.oauthbearer.jwks.endpoint.url` takes a file or an HTTP(S) URL).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("file://") {
            return Ok(JwksSource::File(PathBuf::from(path)));
        }
        if s.starts_with("https://") || s.starts_with("http://") {
            return Ok(JwksSource::Url(s.to_string()));
        }
        if s.contains("://") {
            return Err(format!("'{s}': expected file://, http:// or https://"));
        }
        Ok(JwksSource::File(PathBuf::from(s)))
    }
}

/// A validated token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validated {
    /// The subject claim: the principal's name.
    pub subject: String,
    /// When the token expires (milliseconds since the epoch): the session's end.
    pub expires_at_ms: i64,
}

/// Validates tokens against the current key set.
pub struct Validator {
    settings: OauthSettings,
    keys: RwLock<Option<Arc<Jwks>>>,
    /// When the key set was last read, and last re-read because of an unknown key id.
    last_read: RwLock<(Option<Instant>, Option<Instant>)>,
    http: reqwest::Client,
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = self
            .keys
            .read()
            .map(|k| k.as_ref().map_or(0, |k| k.len()))
            .unwrap_or(0);
        f.debug_struct("Validator")
            .field("settings", &self.settings)
            .field("keys", &keys)
            .finish()
    }
}

impl Validator {
    /// A validator whose key set is read now; an unreadable set is an error (the broker
    /// refuses to start, naming the flag).
    pub async fn new(settings: OauthSettings) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|e| e.to_string())?;
        let v = Validator {
            settings,
            keys: RwLock::new(None),
            last_read: RwLock::new((None, None)),
            http,
        };
        v.reload().await?;
        Ok(v)
    }

    /// The `--sasl-oauthbearer-*` settings it checks tokens with.
    pub fn settings(&self) -> &OauthSettings {
        &self.settings
    }

    /// Re-reads the key set; on failure the old set stays.
    pub async fn reload(&self) -> Result<(), String> {
        let bytes = match &self.settings.jwks {
            JwksSource::File(path) => read_bounded_file(path).await?,
            JwksSource::Url(url) => self.fetch(url).await?,
        };
        let jwks = Jwks::parse(&bytes)?;
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(jwks));
        self.last_read.write().unwrap_or_else(|p| p.into_inner()).0 = Some(Instant::now());
        Ok(())
    }

    async fn fetch(&self, url: &str) -> Result<Vec<u8>, String> {
        let mut response = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| format!("fetching {url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("fetching {url}: HTTP {}", response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("fetching {url}: {e}"))?
        {
            if body.len() + chunk.len() > JWKS_BYTES_MAX {
                return Err(format!("{url}: JWKS larger than {JWKS_BYTES_MAX} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// Re-reads the key set if the refresh interval passed (called by a background task).
    pub async fn refresh_if_due(&self) {
        let due = {
            let last = self.last_read.read().unwrap_or_else(|p| p.into_inner());
            last.0.is_none_or(|t| t.elapsed() >= self.settings.refresh)
        };
        if due {
            if let Err(e) = self.reload().await {
                tracing::warn!(error = %e, "re-reading the OAUTHBEARER JWKS failed; keeping the old keys");
            }
        }
    }

    /// Validates `token` now; a token naming a key not in the set re-reads the set once
    /// (rate-limited) and tries again.
    pub async fn validate(&self, token: &str) -> Result<Validated, TokenError> {
        match self.validate_now(token) {
            Err(TokenError::UnknownKey(kid)) => {
                let may = {
                    let mut last = self.last_read.write().unwrap_or_else(|p| p.into_inner());
                    let may = last
                        .1
                        .is_none_or(|t| t.elapsed() >= UNKNOWN_KID_REFRESH_MIN);
                    if may {
                        last.1 = Some(Instant::now());
                    }
                    may
                };
                if !may {
                    return Err(TokenError::UnknownKey(kid));
                }
                if let Err(e) = self.reload().await {
                    tracing::warn!(error = %e, "re-reading the OAUTHBEARER JWKS for an unknown key id failed");
                }
                self.validate_now(token)
            }
            other => other,
        }
    }

    fn validate_now(&self, token: &str) -> Result<Validated, TokenError> {
        let keys = self
            .keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(TokenError::NoKeys)?;
        validate_with(&keys, &self.settings, token, now_secs())
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Validates `token` against `keys` with `settings` at `now` (seconds since the epoch).
pub fn validate_with(
    keys: &Jwks,
    settings: &OauthSettings,
    token: &str,
    now: u64,
) -> Result<Validated, TokenError> {
    let header =
        jsonwebtoken::decode_header(token).map_err(|e| TokenError::Invalid(e.to_string()))?;
    if !ALGORITHMS.contains(&header.alg) {
        return Err(TokenError::Algorithm(header.alg));
    }
    let (_, key_alg, key) = keys
        .find(header.kid.as_deref())
        .ok_or_else(|| TokenError::UnknownKey(header.kid.clone()))?;
    if matches!(key_alg, Some(a) if *a != header.alg) {
        return Err(TokenError::Invalid(format!(
            "the token's algorithm {:?} is not its key's {:?}",
            header.alg, key_alg
        )));
    }
    let mut validation = Validation::new(header.alg);
    // Time claims are checked here against `now`, with the skew as Kafka applies it.
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.leeway = 0;
    validation.required_spec_claims.clear();
    if settings.expected_audience.is_empty() {
        validation.validate_aud = false;
    } else {
        validation.set_audience(&settings.expected_audience);
    }
    if let Some(iss) = &settings.expected_issuer {
        validation.set_issuer(&[iss]);
    }
    let data = jsonwebtoken::decode::<serde_json::Value>(token, key, &validation)
        .map_err(|e| TokenError::Invalid(e.to_string()))?;
    let claims = data.claims;
    let skew = settings.clock_skew.as_secs();
    let exp = claims
        .get("exp")
        .and_then(|v| v.as_f64())
        .ok_or_else(|| TokenError::Invalid("no 'exp' claim".into()))?;
    if exp + (skew as f64) <= now as f64 {
        return Err(TokenError::Invalid("the token has expired".into()));
    }
    for claim in ["nbf", "iat"] {
        if let Some(t) = claims.get(claim).and_then(|v| v.as_f64()) {
            if t > (now + skew) as f64 {
                return Err(TokenError::Invalid(format!(
                    "the token's '{claim}' is in the future"
                )));
            }
        }
    }
    let subject = claims
        .get(&settings.sub_claim)
        .and_then(|v| v.as_str())
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| TokenError::MissingSubject(settings.sub_claim.clone()))?
        .to_string();
    Ok(Validated {
        subject,
        expires_at_ms: (exp * 1000.0) as i64,
    })
}

async fn read_bounded_file(path: &std::path::Path) -> Result<Vec<u8>, String> {
    use tokio::io::AsyncReadExt;
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(JWKS_BYTES_MAX as u64 + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() > JWKS_BYTES_MAX {
        return Err(format!(
            "{}: JWKS larger than {JWKS_BYTES_MAX} bytes",
            path.display()
        ));
    }
    Ok(bytes)
}

/// Also the key and token helpers of other modules' tests.
#[cfg(test)]
pub(crate) mod tests;
