//! TLS for the Kafka listeners whose protocol is `SSL` or `SASL_SSL` (issue 15): a rustls
//! server configuration (aws-lc-rs provider) from PEM files, Kafka's PEM keystore
//! (`ssl.keystore.type=PEM`) under `--ssl-*` flags, optional mTLS, and the principal of a
//! client certificate.
//!
//! Lifecycle: [`TlsSource::load`] reads the files once at start (an error names the flag and
//! refuses to start); [`reload::run_reloader`] then polls their size and mtime and swaps in
//! a new configuration when one changes. Each accepted connection takes the configuration
//! current at its accept ([`TlsSource::acceptor`]), so live connections keep theirs; a
//! broken new file is logged and the old configuration kept.
//!
//! # Layout
//! - this file: flags, loading, the handshake.
//! - [`principal`]: the subject DN as Kafka prints it, and the mapping rules (pure).
//! - [`reload`]: the file poller.
//! - [`stream`]: the TLS stream handed to connections (flushes on every read and write).

pub mod principal;
pub mod reload;
pub mod stream;

use super::Principal;
use principal::PrincipalMapper;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use stream::FlushingTls;
use tokio::io::{AsyncRead, AsyncWrite};

/// Kafka's `ssl.client.auth`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientAuth {
    /// No client certificate is asked for; every client is `User:ANONYMOUS`.
    #[default]
    None,
    /// A certificate is asked for; a client without one is `User:ANONYMOUS`, one with a
    /// certificate the truststore does not vouch for is refused.
    Requested,
    /// A client without a certificate the truststore vouches for is refused.
    Required,
}

/// Flags of `oxbow serve` for TLS listeners (`SSL`, `SASL_SSL`).
#[derive(Clone, Debug, clap::Args)]
pub struct TlsArgs {
    /// PEM file with the broker's certificate chain, its own certificate first (Kafka's
    /// `ssl.keystore.certificate.chain`). Needed by SSL and SASL_SSL listeners; re-read
    /// when it changes.
    #[arg(long, env = "OXBOW_SSL_CERTIFICATE_FILE")]
    pub ssl_certificate_file: Option<PathBuf>,
    /// PEM file with the private key of that certificate: PKCS#8, RSA (PKCS#1) or EC (SEC1),
    /// unencrypted (Kafka's `ssl.keystore.key`). Re-read when it changes.
    #[arg(long, env = "OXBOW_SSL_KEY_FILE")]
    pub ssl_key_file: Option<PathBuf>,
    /// Kafka's `ssl.client.auth`: whether TLS clients must present a certificate signed by
    /// a CA of --ssl-truststore-file. Their principal is then `User:` + the certificate's
    /// subject DN (after --ssl-principal-mapping-rules).
    #[arg(long, env = "OXBOW_SSL_CLIENT_AUTH", value_enum, default_value_t = ClientAuth::None)]
    pub ssl_client_auth: ClientAuth,
    /// PEM file of the CA certificates client certificates must chain to (Kafka's
    /// `ssl.truststore.certificates`); needed for --ssl-client-auth requested|required.
    /// Re-read when it changes.
    #[arg(long, env = "OXBOW_SSL_TRUSTSTORE_FILE")]
    pub ssl_truststore_file: Option<PathBuf>,
    /// Kafka's `ssl.enabled.protocols`: TLSv1.2, TLSv1.3 or both. TLS 1.3 alone refuses
    /// older clients; 1.2 costs an extra round trip per handshake.
    #[arg(
        long,
        env = "OXBOW_SSL_ENABLED_PROTOCOLS",
        default_value = "TLSv1.2,TLSv1.3"
    )]
    pub ssl_enabled_protocols: String,
    /// Kafka's `ssl.principal.mapping.rules`: `DEFAULT` (the DN as is) or
    /// `RULE:pattern/replacement/[LU]`, separated by commas; the first rule whose pattern
    /// matches the whole DN names the principal, a client no rule matches is refused.
    #[arg(
        long,
        env = "OXBOW_SSL_PRINCIPAL_MAPPING_RULES",
        default_value = "DEFAULT"
    )]
    pub ssl_principal_mapping_rules: String,
    /// How often the certificate, key and truststore files are checked for changes (size
    /// and mtime; `0s`: never). New connections use a changed file at most this late.
    #[arg(long, env = "OXBOW_SSL_RELOAD_INTERVAL", default_value = "5s", value_parser = humantime::parse_duration)]
    pub ssl_reload_interval: Duration,
}

impl Default for TlsArgs {
    fn default() -> Self {
        TlsArgs {
            ssl_certificate_file: None,
            ssl_key_file: None,
            ssl_client_auth: ClientAuth::None,
            ssl_truststore_file: None,
            ssl_enabled_protocols: "TLSv1.2,TLSv1.3".into(),
            ssl_principal_mapping_rules: "DEFAULT".into(),
            ssl_reload_interval: Duration::from_secs(5),
        }
    }
}

/// The TLS configuration could not be built; the message names the flag.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsConfigError(pub String);

/// Largest PEM file read (a chain of a few certificates is a few KiB; a CA bundle a few
/// hundred).
const PEM_FILE_BYTES_MAX: u64 = 4 << 20;

/// Longest a TLS handshake may take (or `--request-read-timeout` if shorter): a client
/// that connects and stalls holds a connection slot no longer.
pub const HANDSHAKE_TIMEOUT_MAX: Duration = Duration::from_secs(10);

fn read_pem(flag: &str, path: &Path) -> Result<Vec<u8>, TlsConfigError> {
    let fail = |why: String| TlsConfigError(format!("{flag} {}: {why}", path.display()));
    let len = std::fs::metadata(path)
        .map_err(|e| fail(e.to_string()))?
        .len();
    if len > PEM_FILE_BYTES_MAX {
        return Err(fail(format!(
            "{len} bytes is too large for a PEM file (at most {PEM_FILE_BYTES_MAX})"
        )));
    }
    std::fs::read(path).map_err(|e| fail(e.to_string()))
}

fn certificates(flag: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let pem = read_pem(flag, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsConfigError(format!("{flag} {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(TlsConfigError(format!(
            "{flag} {}: no CERTIFICATE in the file",
            path.display()
        )));
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    const FLAG: &str = "--ssl-key-file";
    let pem = read_pem(FLAG, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        TlsConfigError(format!(
            "{FLAG} {}: no private key ({e}); expected an unencrypted PKCS#8, RSA or EC key in PEM",
            path.display()
        ))
    })
}

fn protocol_versions(
    list: &str,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, TlsConfigError> {
    let mut out = Vec::new();
    for v in list.split(',').map(str::trim).filter(|v| !v.is_empty()) {
        let version = match v {
            "TLSv1.2" => &rustls::version::TLS12,
            "TLSv1.3" => &rustls::version::TLS13,
            _ => {
                return Err(TlsConfigError(format!(
                    "--ssl-enabled-protocols: '{v}' is not TLSv1.2 or TLSv1.3"
                )))
            }
        };
        if !out.contains(&version) {
            out.push(version);
        }
    }
    if out.is_empty() {
        return Err(TlsConfigError(
            "--ssl-enabled-protocols names no protocol".into(),
        ));
    }
    Ok(out)
}

/// Builds the server configuration from the files the flags name.
pub fn server_config(args: &TlsArgs) -> Result<Arc<ServerConfig>, TlsConfigError> {
    let cert_file = args.ssl_certificate_file.as_deref().ok_or_else(|| {
        TlsConfigError(
            "SSL and SASL_SSL listeners (and --http-tls) need --ssl-certificate-file".into(),
        )
    })?;
    let key_file = args.ssl_key_file.as_deref().ok_or_else(|| {
        TlsConfigError("SSL and SASL_SSL listeners (and --http-tls) need --ssl-key-file".into())
    })?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&protocol_versions(&args.ssl_enabled_protocols)?)
        .map_err(|e| TlsConfigError(format!("--ssl-enabled-protocols: {e}")))?;
    let builder = match (args.ssl_client_auth, &args.ssl_truststore_file) {
        (ClientAuth::None, _) => builder.with_no_client_auth(),
        (auth, None) => {
            return Err(TlsConfigError(format!(
                "--ssl-client-auth {} needs --ssl-truststore-file (the CAs client certificates must chain to)",
                if auth == ClientAuth::Required { "required" } else { "requested" }
            )))
        }
        (auth, Some(truststore)) => {
            const FLAG: &str = "--ssl-truststore-file";
            let mut roots = RootCertStore::empty();
            for ca in certificates(FLAG, truststore)? {
                roots.add(ca).map_err(|e| {
                    TlsConfigError(format!("{FLAG} {}: {e}", truststore.display()))
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match auth {
                ClientAuth::Requested => verifier.allow_unauthenticated(),
                ClientAuth::Required | ClientAuth::None => verifier,
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsConfigError(format!("{FLAG} {}: {e}", truststore.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let chain = certificates("--ssl-certificate-file", cert_file)?;
    let key = private_key(key_file)?;
    let config = builder.with_single_cert(chain, key).map_err(|e| {
        TlsConfigError(format!(
            "--ssl-key-file {} does not fit --ssl-certificate-file {}: {e}",
            key_file.display(),
            cert_file.display()
        ))
    })?;
    Ok(Arc::new(config))
}

/// The configuration new TLS connections use (swapped by the reloader), and how their
/// principals are named.
pub struct TlsSource {
    current: RwLock<Arc<ServerConfig>>,
    mapper: PrincipalMapper,
    args: TlsArgs,
}

impl std::fmt::Debug for TlsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSource")
            .field("certificate", &self.args.ssl_certificate_file)
            .field("client_auth", &self.args.ssl_client_auth)
            .finish_non_exhaustive()
    }
}

/// Why a TLS connection did not start.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("the TLS handshake did not finish within {0:?}")]
    TimedOut(Duration),
    #[error("the TLS handshake failed: {0}")]
    Failed(std::io::Error),
    #[error("{0}")]
    Principal(String),
}

impl TlsSource {
    /// Reads every file once; an error names the flag (the broker does not start).
    pub fn load(args: &TlsArgs) -> Result<Arc<Self>, TlsConfigError> {
        let mapper =
            PrincipalMapper::parse(&args.ssl_principal_mapping_rules).map_err(TlsConfigError)?;
        Ok(Arc::new(TlsSource {
            current: RwLock::new(server_config(args)?),
            mapper,
            args: args.clone(),
        }))
    }

    pub fn args(&self) -> &TlsArgs {
        &self.args
    }

    /// The configuration for a connection accepted now.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Makes `config` the one new connections use.
    pub fn replace(&self, config: Arc<ServerConfig>) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = config;
    }

    /// Runs the server side of the handshake on `stream` within `timeout`, and names the
    /// client: `User:` + its certificate's mapped subject DN, `User:ANONYMOUS` without one.
    pub async fn accept<S>(
        &self,
        stream: S,
        timeout: Duration,
    ) -> Result<(FlushingTls<S>, Principal), HandshakeError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.current());
        let stream = tokio::time::timeout(timeout, acceptor.accept(stream))
            .await
            .map_err(|_| HandshakeError::TimedOut(timeout))?
            .map_err(HandshakeError::Failed)?;
        let principal = match stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
        {
            None => Principal::anonymous(),
            Some(cert) => {
                let dn = principal::subject_dn(cert).map_err(HandshakeError::Principal)?;
                let name = self.mapper.map(&dn).ok_or_else(|| {
                    HandshakeError::Principal(format!(
                        "no --ssl-principal-mapping-rules rule matches the client certificate's DN '{dn}'"
                    ))
                })?;
                Principal::user(name)
            }
        };
        Ok((FlushingTls::new(stream), principal))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn testdata(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/security/tls/testdata")
            .join(name)
    }

    pub(crate) fn args(cert: &str, key: &str) -> TlsArgs {
        TlsArgs {
            ssl_certificate_file: Some(testdata(cert)),
            ssl_key_file: Some(testdata(key)),
            ..TlsArgs::default()
        }
    }

    /// A client trusting the test CA, presenting `cert` (certificate, key) if given.
    pub(crate) fn connector(cert: Option<(&str, &str)>) -> tokio_rustls::TlsConnector {
        let mut roots = RootCertStore::empty();
        for c in certificates("ca", &testdata("ca.pem")).expect("ca") {
            roots.add(c).expect("root");
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots);
        let config = match cert {
            None => builder.with_no_client_auth(),
            Some((c, k)) => builder
                .with_client_auth_cert(
                    certificates("c", &testdata(c)).expect("cert"),
                    private_key(&testdata(k)).expect("key"),
                )
                .expect("client cert"),
        };
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }

    /// Runs both sides of a handshake over a pipe; the client also waits for one byte, as
    /// TLS 1.3 reports a refused client certificate only after the handshake.
    async fn principal_of(
        source: &TlsSource,
        cert: Option<(&str, &str)>,
    ) -> Result<Principal, String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client, server) = tokio::io::duplex(64 << 10);
        let name = rustls_pki_types::ServerName::try_from("localhost").expect("name");
        let connect = async {
            let mut c = connector(cert).connect(name, client).await?;
            let mut b = [0u8; 1];
            c.read_exact(&mut b).await?;
            Ok::<_, std::io::Error>(())
        };
        let accept = async {
            let (mut s, principal) = source.accept(server, Duration::from_secs(5)).await?;
            let _ = s.write_all(b"k").await;
            let _ = s.flush().await;
            Ok::<_, HandshakeError>(principal)
        };
        let (c, s) = tokio::join!(connect, accept);
        let principal = s.map_err(|e| e.to_string())?;
        c.map_err(|e| e.to_string())?;
        Ok(principal)
    }

    #[tokio::test]
    async fn client_certificates_name_the_principal() {
        let mut a = args("server.pem", "server.key");
        a.ssl_truststore_file = Some(testdata("ca.pem"));
        a.ssl_client_auth = ClientAuth::Required;
        let required = TlsSource::load(&a).expect("load");
        let alice = Some(("alice.pem", "alice.key"));
        assert_eq!(
            principal_of(&required, alice).await,
            Ok(Principal::user("CN=alice,OU=eng,O=acme,C=US"))
        );
        // No certificate, and one the truststore does not vouch for (self-signed).
        assert!(principal_of(&required, None).await.is_err());
        assert!(principal_of(&required, Some(("rsa.pem", "rsa.key")))
            .await
            .is_err());

        a.ssl_client_auth = ClientAuth::Requested;
        a.ssl_principal_mapping_rules = "RULE:^CN=([^,]*),.*$/$1/U".into();
        let requested = TlsSource::load(&a).expect("load");
        assert_eq!(
            principal_of(&requested, None).await,
            Ok(Principal::anonymous())
        );
        assert_eq!(
            principal_of(&requested, alice).await,
            Ok(Principal::user("ALICE"))
        );
        assert!(principal_of(&requested, Some(("rsa.pem", "rsa.key")))
            .await
            .is_err());
        // A DN no rule matches is refused.
        a.ssl_principal_mapping_rules = "RULE:^CN=bob,.*$/bob/".into();
        let unmatched = TlsSource::load(&a).expect("load");
        let e = principal_of(&unmatched, alice).await.expect_err("no rule");
        assert!(e.contains("--ssl-principal-mapping-rules"), "{e}");

        // Without client auth a client's certificate is not even asked for.
        let none = TlsSource::load(&args("server.pem", "server.key")).expect("load");
        assert_eq!(principal_of(&none, alice).await, Ok(Principal::anonymous()));
    }

    fn refused(a: &TlsArgs, flag: &str) {
        let e = server_config(a).expect_err("refused").to_string();
        assert!(e.contains(flag), "{e} should name {flag}");
    }

    #[test]
    fn configs_load_from_pem_files() {
        server_config(&args("server.pem", "server.key")).expect("PKCS#8 EC key");
        server_config(&args("rsa.pem", "rsa.key")).expect("PKCS#1 RSA key");
        let mut a = args("server.pem", "server.key");
        a.ssl_client_auth = ClientAuth::Required;
        a.ssl_truststore_file = Some(testdata("ca.pem"));
        server_config(&a).expect("mTLS");
        a.ssl_client_auth = ClientAuth::Requested;
        server_config(&a).expect("optional mTLS");
        a.ssl_enabled_protocols = "TLSv1.3".into();
        server_config(&a).expect("TLS 1.3 only");
    }

    #[test]
    fn bad_tls_flags_name_the_flag() {
        refused(&TlsArgs::default(), "--ssl-certificate-file");
        let mut a = args("server.pem", "server.key");
        a.ssl_key_file = None;
        refused(&a, "--ssl-key-file");
        refused(&args("missing.pem", "server.key"), "--ssl-certificate-file");
        // A key file holds no certificate, and the other way round.
        refused(&args("server.key", "server.key"), "--ssl-certificate-file");
        refused(&args("server.pem", "server.pem"), "--ssl-key-file");
        // The key of another certificate.
        refused(&args("server.pem", "server2.key"), "--ssl-key-file");
        let mut a = args("server.pem", "server.key");
        a.ssl_client_auth = ClientAuth::Required;
        refused(&a, "--ssl-truststore-file");
        a.ssl_truststore_file = Some(testdata("server.key"));
        refused(&a, "--ssl-truststore-file");
        let mut a = args("server.pem", "server.key");
        a.ssl_enabled_protocols = "TLSv1.1".into();
        refused(&a, "--ssl-enabled-protocols");
        a.ssl_enabled_protocols = " ".into();
        refused(&a, "--ssl-enabled-protocols");
        let mut a = args("server.pem", "server.key");
        a.ssl_principal_mapping_rules = "RULE:(".into();
        let e = TlsSource::load(&a).expect_err("bad rule").to_string();
        assert!(e.contains("--ssl-principal-mapping-rules"), "{e}");
    }
}
