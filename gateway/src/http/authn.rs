//! Authentication of the HTTP API (`--http-authentication`): who a request is, before
//! [`super::authz`] checks what it may do.
//!
//! - `basic` (RFC 7617): `Authorization: Basic base64(user:password)`, checked against the
//!   stored SCRAM credentials, the same users as Kafka SASL (`oxbow users`), by
//!   [`PasswordLogins`] (a bounded blocking pool, successes remembered for a minute).
//!   Principal `User:{user}`.
//! - `bearer` (RFC 6750): `Authorization: Bearer <JWT>`, validated by the broker's one
//!   OAUTHBEARER validator (`--sasl-oauthbearer-*`). Principal `User:{sub}`.
//! - Over HTTPS with a client certificate, a request without `Authorization` is the
//!   certificate's principal (`--ssl-principal-mapping-rules`), with or without this flag.
//!
//! A request on an open path (`--http-authentication-open-paths`, exact paths) is not
//! asked for credentials and is anonymous (or its certificate's principal); any
//! `Authorization` it sends is ignored. Anything else without valid credentials is 401
//! with the error JSON (`error_code` 40101, as Confluent REST) and one `WWW-Authenticate`
//! challenge per accepted scheme; a bearer token that was presented and refused gets
//! `error="invalid_token"` (RFC 6750 §3.1: a request with no credentials gets no error
//! code). Every 401 counts in `oxbow_http_authentication_failures_total{scheme}`.
//!
//! The middleware ([`authenticate`]) wraps every route and the fallback (an unknown path
//! is 401 too, so endpoints are not probed anonymously) and leaves the request's
//! [`Session`] in its extensions for [`super::authz`].

use super::authz::{session_for, PeerAddr};
use super::error::ApiError;
use super::AppState;
use crate::security::password::{LoginError, PasswordLogins};
use crate::security::{Principal, SecurityProtocol};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use std::sync::atomic::Ordering;

/// The principal of an HTTPS connection's client certificate (`User:ANONYMOUS` without
/// one), put in every request's extensions by the listener.
#[derive(Clone, Debug)]
pub struct TlsPrincipal(pub Principal);

/// Most bytes of an `Authorization` value: a bearer token of the OAUTHBEARER maximum and
/// its scheme. Longer is refused without decoding.
pub const AUTHORIZATION_BYTES_MAX: usize = crate::security::oauth::TOKEN_BYTES_MAX + 16;

/// A scheme of `--http-authentication`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scheme {
    /// No authentication: every request is anonymous (or its client certificate's).
    None,
    /// HTTP Basic against the SCRAM credentials.
    Basic,
    /// Bearer JWTs validated as OAUTHBEARER tokens.
    Bearer,
}

/// HTTP authentication flags of `oxbow serve`.
#[derive(Clone, Debug, clap::Args)]
pub struct HttpAuthArgs {
    /// How HTTP API requests authenticate: `none`, `basic` (user and password of a SCRAM
    /// user, as made by `oxbow users`), `bearer` (a JWT, validated with the
    /// --sasl-oauthbearer-* settings), or `basic,bearer`. Basic sends the password with
    /// every request: use it over --http-tls. A Basic login costs a PBKDF2 (a few ms of a
    /// core) once a minute per client; a bearer token a signature check per request.
    #[arg(
        long,
        env = "OXBOW_HTTP_AUTHENTICATION",
        value_enum,
        value_delimiter = ',',
        default_value = "none"
    )]
    pub http_authentication: Vec<Scheme>,
    /// The realm named in `WWW-Authenticate` challenges.
    #[arg(long, env = "OXBOW_HTTP_AUTHENTICATION_REALM", default_value = "oxbow")]
    pub http_authentication_realm: String,
    /// Paths served without credentials (exact, comma-separated): probes and scrapers
    /// need none. Requests there are anonymous.
    #[arg(
        long,
        env = "OXBOW_HTTP_AUTHENTICATION_OPEN_PATHS",
        value_delimiter = ',',
        default_value = "/healthz,/readyz,/metrics"
    )]
    pub http_authentication_open_paths: Vec<String>,
}

/// The HTTP authentication settings (the flags, checked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpAuthSettings {
    pub basic: bool,
    pub bearer: bool,
    /// `--http-authentication-realm`: printable ASCII without `"` or `\`.
    pub realm: String,
    /// `--http-authentication-open-paths`.
    pub open_paths: Vec<String>,
}

impl Default for HttpAuthSettings {
    /// No authentication (`--http-authentication none`).
    fn default() -> Self {
        HttpAuthSettings {
            basic: false,
            bearer: false,
            realm: "oxbow".into(),
            open_paths: vec!["/healthz".into(), "/readyz".into(), "/metrics".into()],
        }
    }
}

impl HttpAuthSettings {
    /// Whether requests must authenticate.
    pub fn enabled(&self) -> bool {
        self.basic || self.bearer
    }
}

impl HttpAuthArgs {
    /// The settings, or why the flags are wrong (naming them). `oauth_configured`: whether
    /// --sasl-oauthbearer-jwks-endpoint-url is given (bearer needs it).
    pub fn settings(&self, oauth_configured: bool) -> Result<HttpAuthSettings, String> {
        let schemes = &self.http_authentication;
        if schemes.contains(&Scheme::None) && schemes.len() > 1 {
            return Err("--http-authentication: 'none' cannot be combined with a scheme".into());
        }
        let basic = schemes.contains(&Scheme::Basic);
        let bearer = schemes.contains(&Scheme::Bearer);
        if bearer && !oauth_configured {
            return Err("--http-authentication bearer needs --sasl-oauthbearer-jwks-endpoint-url (the issuer's keys the tokens are validated with)".into());
        }
        let realm = self.http_authentication_realm.trim().to_string();
        if realm.is_empty()
            || !realm
                .bytes()
                .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
        {
            return Err(
                "--http-authentication-realm: printable ASCII without '\"' or '\\', not empty"
                    .into(),
            );
        }
        let mut open_paths = Vec::new();
        for p in &self.http_authentication_open_paths {
            let p = p.trim();
            if p.is_empty() {
                continue;
            }
            if !p.starts_with('/') {
                return Err(format!(
                    "--http-authentication-open-paths: '{p}' is not a path (starts with '/')"
                ));
            }
            open_paths.push(p.to_string());
        }
        Ok(HttpAuthSettings {
            basic,
            bearer,
            realm,
            open_paths,
        })
    }
}

/// Credentials of an `Authorization` header.
#[derive(Clone, PartialEq, Eq)]
pub enum Presented {
    Basic { user: String, password: Vec<u8> },
    Bearer(String),
}

impl std::fmt::Debug for Presented {
    /// Never the password or the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Presented::Basic { user, .. } => write!(f, "Basic({user:?})"),
            Presented::Bearer(_) => f.write_str("Bearer(..)"),
        }
    }
}

/// Why an `Authorization` header was not understood (the message goes to the client).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadAuthorization {
    #[error("the Authorization header is longer than {AUTHORIZATION_BYTES_MAX} bytes")]
    TooLong,
    #[error("the Authorization header is not '<scheme> <credentials>'")]
    Shape,
    #[error("the Authorization scheme '{0}' is not accepted here")]
    Scheme(String),
    #[error("the Basic credentials are not base64")]
    Base64,
    #[error("the Basic credentials are not 'user:password'")]
    NoColon,
    #[error("the Basic user is empty or not UTF-8")]
    User,
    #[error("more than one Authorization header")]
    Repeated,
}

/// Parses one `Authorization` value (RFC 7235 `credentials`; schemes case-insensitive).
pub fn parse_authorization(value: &[u8]) -> Result<Presented, BadAuthorization> {
    if value.len() > AUTHORIZATION_BYTES_MAX {
        return Err(BadAuthorization::TooLong);
    }
    let text = std::str::from_utf8(value).map_err(|_| BadAuthorization::Shape)?;
    let (scheme, rest) = text.trim().split_once(' ').ok_or(BadAuthorization::Shape)?;
    let credentials = rest.trim();
    if credentials.is_empty() {
        return Err(BadAuthorization::Shape);
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(credentials)
            .map_err(|_| BadAuthorization::Base64)?;
        // RFC 7617: the user-id holds no colon; the password may.
        let colon = decoded
            .iter()
            .position(|b| *b == b':')
            .ok_or(BadAuthorization::NoColon)?;
        let user = std::str::from_utf8(&decoded[..colon]).map_err(|_| BadAuthorization::User)?;
        if user.is_empty() {
            return Err(BadAuthorization::User);
        }
        return Ok(Presented::Basic {
            user: user.to_string(),
            password: decoded[colon + 1..].to_vec(),
        });
    }
    if scheme.eq_ignore_ascii_case("bearer") {
        return Ok(Presented::Bearer(credentials.to_string()));
    }
    Err(BadAuthorization::Scheme(
        scheme.chars().take(32).collect::<String>(),
    ))
}

/// What the middleware needs: the settings and the Basic verifier.
pub(crate) struct Authentication {
    pub(crate) settings: HttpAuthSettings,
    pub(crate) logins: PasswordLogins,
}

/// Which scheme a failure counts under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failed {
    /// No credentials, or a header not understood.
    None,
    Basic,
    Bearer,
}

/// The authentication middleware (see the module docs).
pub(crate) async fn authenticate(
    State(app): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let peer = request.extensions().get::<PeerAddr>().copied();
    let tls = request.extensions().get::<TlsPrincipal>().cloned();
    let protocol = if tls.is_some() {
        SecurityProtocol::Ssl
    } else {
        SecurityProtocol::Plaintext
    };
    let certificate = tls.map_or_else(Principal::anonymous, |t| t.0);
    let auth = &app.authentication;
    let settings = &auth.settings;
    let open = !settings.enabled()
        || settings
            .open_paths
            .iter()
            .any(|p| p == request.uri().path());
    let principal = if open {
        certificate
    } else {
        // Only the header values cross the await (a request's body is not `Sync`).
        let values: Vec<HeaderValue> = request
            .headers()
            .get_all(header::AUTHORIZATION)
            .iter()
            .take(2)
            .cloned()
            .collect();
        match who(&app, &values, certificate).await {
            Ok(p) => p,
            Err(refusal) => return refusal.into_response(&app),
        }
    };
    request
        .extensions_mut()
        .insert(session_for(peer, principal, protocol));
    next.run(request).await
}

/// A refused request: why, under which scheme, and whether a token was presented.
struct Refusal {
    failed: Failed,
    message: String,
    /// Refused for the service's sake (busy), not the client's credentials: 503.
    busy: bool,
}

impl Refusal {
    fn new(failed: Failed, message: impl Into<String>) -> Self {
        Refusal {
            failed,
            message: message.into(),
            busy: false,
        }
    }

    fn into_response(self, app: &AppState) -> Response {
        if self.busy {
            return ApiError::busy(self.message).into_response();
        }
        let metrics = &app.http.broker.metrics;
        let counter = match self.failed {
            Failed::None => &metrics.http_authentication_failures_none,
            Failed::Basic => &metrics.http_authentication_failures_basic,
            Failed::Bearer => &metrics.http_authentication_failures_bearer,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(scheme = ?self.failed, message = %self.message, "HTTP request not authenticated");
        let settings = &app.authentication.settings;
        let mut response = ApiError::unauthenticated(self.message).into_response();
        for challenge in challenges(settings, self.failed == Failed::Bearer) {
            response
                .headers_mut()
                .append(header::WWW_AUTHENTICATE, challenge);
        }
        response
    }
}

/// One challenge per accepted scheme.
fn challenges(settings: &HttpAuthSettings, invalid_token: bool) -> Vec<HeaderValue> {
    let realm = &settings.realm;
    let mut out = Vec::new();
    if settings.basic {
        out.push(format!("Basic realm=\"{realm}\", charset=\"UTF-8\""));
    }
    if settings.bearer {
        if invalid_token {
            out.push(format!("Bearer realm=\"{realm}\", error=\"invalid_token\""));
        } else {
            out.push(format!("Bearer realm=\"{realm}\""));
        }
    }
    out.into_iter()
        // The realm is checked printable ASCII at start, so each value is a valid header.
        .filter_map(|c| HeaderValue::from_str(&c).ok())
        .collect()
}

/// The request's principal, from its `Authorization` header or its certificate.
async fn who(
    app: &AppState,
    values: &[HeaderValue],
    certificate: Principal,
) -> Result<Principal, Refusal> {
    let settings = &app.authentication.settings;
    let mut values = values.iter();
    let Some(value) = values.next() else {
        if !certificate.is_anonymous() {
            return Ok(certificate);
        }
        return Err(Refusal::new(
            Failed::None,
            "authentication required: send an Authorization header",
        ));
    };
    if values.next().is_some() {
        return Err(Refusal::new(
            Failed::None,
            BadAuthorization::Repeated.to_string(),
        ));
    }
    let presented = parse_authorization(value.as_bytes())
        .map_err(|e| Refusal::new(Failed::None, e.to_string()))?;
    match presented {
        Presented::Basic { user, password } if settings.basic => {
            match app.authentication.logins.check(&user, &password).await {
                Ok(()) => Ok(Principal::user(user)),
                Err(LoginError::Invalid) => {
                    tracing::info!(user, "HTTP Basic authentication failed");
                    Err(Refusal::new(
                        Failed::Basic,
                        "Authentication failed: Invalid username or password",
                    ))
                }
                Err(LoginError::Busy) => Err(Refusal {
                    busy: true,
                    ..Refusal::new(Failed::Basic, LoginError::Busy.to_string())
                }),
            }
        }
        Presented::Bearer(token) if settings.bearer => {
            let Some(validator) = app.http.broker.settings.oauth.as_ref() else {
                // Refused at start (`HttpAuthArgs::settings`); a test router may lack it.
                return Err(Refusal::new(
                    Failed::Bearer,
                    "no token validator configured",
                ));
            };
            match validator.validate(&token).await {
                Ok(v) => Ok(Principal::user(v.subject)),
                Err(e) => {
                    tracing::info!(error = %e, "HTTP bearer authentication failed");
                    Err(Refusal::new(
                        Failed::Bearer,
                        format!("Authentication failed: {e}"),
                    ))
                }
            }
        }
        Presented::Basic { .. } => Err(Refusal::new(
            Failed::None,
            BadAuthorization::Scheme("Basic".into()).to_string(),
        )),
        Presented::Bearer(_) => Err(Refusal::new(
            Failed::None,
            BadAuthorization::Scheme("Bearer".into()).to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(s: &str) -> Vec<u8> {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(s)
        )
        .into_bytes()
    }

    #[test]
    fn basic_credentials_split_at_the_first_colon() {
        assert_eq!(
            parse_authorization(&basic("alice:pa:ss")),
            Ok(Presented::Basic {
                user: "alice".into(),
                password: b"pa:ss".to_vec()
            })
        );
        assert_eq!(
            parse_authorization(&basic("alice:")),
            Ok(Presented::Basic {
                user: "alice".into(),
                password: Vec::new()
            })
        );
        // Scheme names are case-insensitive (RFC 7235).
        let lower = String::from_utf8(basic("a:b"))
            .expect("ascii")
            .replace("Basic", "bAsIc");
        assert!(matches!(
            parse_authorization(lower.as_bytes()),
            Ok(Presented::Basic { .. })
        ));
    }

    #[test]
    fn malformed_headers_are_named() {
        assert_eq!(
            parse_authorization(b"Basic !!!not-base64"),
            Err(BadAuthorization::Base64)
        );
        assert_eq!(
            parse_authorization(&basic("no-colon")),
            Err(BadAuthorization::NoColon)
        );
        assert_eq!(
            parse_authorization(&basic(":pw")),
            Err(BadAuthorization::User)
        );
        let not_utf8 = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(b"\xff\xfe:pw")
        );
        assert_eq!(
            parse_authorization(not_utf8.as_bytes()),
            Err(BadAuthorization::User)
        );
        assert_eq!(parse_authorization(b"Basic"), Err(BadAuthorization::Shape));
        assert_eq!(
            parse_authorization(b"Basic   "),
            Err(BadAuthorization::Shape)
        );
        assert_eq!(parse_authorization(b""), Err(BadAuthorization::Shape));
        assert_eq!(
            parse_authorization(b"Bearer\xff x"),
            Err(BadAuthorization::Shape)
        );
        assert_eq!(
            parse_authorization(b"Digest username=\"a\""),
            Err(BadAuthorization::Scheme("Digest".into()))
        );
        let huge = format!("Bearer {}", "a".repeat(AUTHORIZATION_BYTES_MAX));
        assert_eq!(
            parse_authorization(huge.as_bytes()),
            Err(BadAuthorization::TooLong)
        );
        assert_eq!(
            parse_authorization(b"Bearer  abc.def.ghi "),
            Ok(Presented::Bearer("abc.def.ghi".into()))
        );
    }

    #[test]
    fn debug_never_shows_secrets() {
        let p = Presented::Basic {
            user: "alice".into(),
            password: b"hunter2".to_vec(),
        };
        assert!(!format!("{p:?}").contains("hunter2"));
        assert!(!format!("{:?}", Presented::Bearer("tok".into())).contains("tok"));
    }

    fn args(schemes: &[&str]) -> Vec<String> {
        let mut a = vec!["oxbow".to_string()];
        if !schemes.is_empty() {
            a.push("--http-authentication".into());
            a.push(schemes.join(","));
        }
        a
    }

    #[test]
    fn flags_parse_and_bearer_needs_a_jwks() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            auth: HttpAuthArgs,
        }
        let none = Cli::try_parse_from(args(&[])).expect("parses");
        assert_eq!(none.auth.settings(false), Ok(HttpAuthSettings::default()));
        let both = Cli::try_parse_from(args(&["basic", "bearer"])).expect("parses");
        let s = both.auth.settings(true).expect("valid");
        assert!(s.basic && s.bearer && s.enabled());
        let e = both.auth.settings(false).expect_err("no JWKS");
        assert!(
            e.contains("--http-authentication")
                && e.contains("--sasl-oauthbearer-jwks-endpoint-url"),
            "{e}"
        );
        let mixed = Cli::try_parse_from(args(&["none", "basic"])).expect("parses");
        assert!(mixed.auth.settings(true).is_err());
        assert!(Cli::try_parse_from(args(&["digest"])).is_err());
        let bad_realm =
            Cli::try_parse_from(["oxbow", "--http-authentication-realm", "a\"b"]).expect("parses");
        assert!(bad_realm.auth.settings(false).is_err());
        let bad_path =
            Cli::try_parse_from(["oxbow", "--http-authentication-open-paths", "healthz"])
                .expect("parses");
        assert!(bad_path.auth.settings(false).is_err());
    }

    #[test]
    fn challenges_name_each_scheme_and_an_invalid_token() {
        let s = HttpAuthSettings {
            basic: true,
            bearer: true,
            ..HttpAuthSettings::default()
        };
        let c: Vec<String> = challenges(&s, true)
            .iter()
            .map(|v| v.to_str().expect("ascii").to_string())
            .collect();
        assert_eq!(
            c,
            [
                "Basic realm=\"oxbow\", charset=\"UTF-8\"",
                "Bearer realm=\"oxbow\", error=\"invalid_token\""
            ]
        );
        let c = challenges(&s, false);
        assert_eq!(c[1], "Bearer realm=\"oxbow\"");
    }
}
