//! The broker's security settings made ready at start, before anything binds: every flag
//! checked (a bad one stops the start, naming it), the OAUTHBEARER key set read, the TLS
//! files loaded, and a warning for an inter-broker listener the broker's own client
//! cannot reach.

use super::acl::AuthorizerSettings;
use super::listeners::ListenerPlan;
use super::oauth::Validator;
use super::sasl::{Mechanism, SaslSettings};
use super::tls::{self, TlsArgs, TlsSource};
use super::SecurityProtocol;
use crate::server::ServeArgs;
use std::sync::Arc;

/// What `oxbow serve` needs of its security flags.
pub struct SecurityStartup {
    pub authorization: AuthorizerSettings,
    pub sasl: SaslSettings,
    /// Token validation, when `--sasl-oauthbearer-jwks-endpoint-url` is given.
    pub oauth: Option<Arc<Validator>>,
    /// The TLS configuration of SSL listeners and `--http-tls`.
    pub tls_source: Option<Arc<TlsSource>>,
    /// The same files for SASL_SSL listeners, never asking for a client certificate.
    pub sasl_tls_source: Option<Arc<TlsSource>>,
    /// `--http-authentication` and friends.
    pub http_authentication: crate::http::authn::HttpAuthSettings,
}

/// Checks and loads the security flags of `args` for the listeners of `plan`.
pub async fn prepare(args: &ServeArgs, plan: &ListenerPlan) -> anyhow::Result<SecurityStartup> {
    let authorization = args.authorization.settings().map_err(anyhow::Error::msg)?;
    let sasl = args.sasl.settings().map_err(anyhow::Error::msg)?;
    let http_authentication = args
        .http_authentication
        .settings(args.oauth.sasl_oauthbearer_jwks_endpoint_url.is_some())
        .map_err(anyhow::Error::msg)?;
    let oauth_settings = args.oauth.settings().map_err(anyhow::Error::msg)?;
    if sasl.enabled.contains(&Mechanism::OauthBearer) && oauth_settings.is_none() {
        anyhow::bail!(
            "--sasl-enabled-mechanisms names OAUTHBEARER but no --sasl-oauthbearer-jwks-endpoint-url is given: the broker would have no keys to check tokens with"
        );
    }
    // The issuer's keys are read before anything binds: a bad URL or file stops the start.
    let oauth = match oauth_settings {
        Some(settings) => Some(Arc::new(
            crate::security::oauth::Validator::new(settings)
                .await
                .map_err(|e| anyhow::anyhow!("--sasl-oauthbearer-jwks-endpoint-url: {e}"))?,
        )),
        None => None,
    };
    // TLS files are read once here (a bad one stops the start, naming its flag), then
    // re-read when they change. SASL_SSL listeners authenticate with SASL and ignore
    // --ssl-client-auth, as Kafka ignores `ssl.client.auth` on them (KIP-684).
    let tls_source = if args.http_tls
        || plan
            .listeners
            .iter()
            .any(|l| l.protocol == SecurityProtocol::Ssl)
    {
        Some(TlsSource::load(&args.tls)?)
    } else {
        None
    };
    let sasl_tls_source = if plan
        .listeners
        .iter()
        .any(|l| l.protocol == SecurityProtocol::SaslSsl)
    {
        Some(TlsSource::load(&TlsArgs {
            ssl_client_auth: tls::ClientAuth::None,
            ..args.tls.clone()
        })?)
    } else {
        None
    };
    if let Some(l) = plan.listeners.iter().find(|l| l.name == plan.inter_broker) {
        if l.protocol != SecurityProtocol::Plaintext {
            // Brokers reach each other's Kafka port with the project's own client
            // (controller probes, HTTP produce forwarding), which speaks no TLS yet.
            tracing::warn!(listener = %l.name, protocol = %l.protocol,
                "the inter-broker listener is not PLAINTEXT: other brokers cannot reach this one's Kafka port (controller probes, HTTP produce forwarding); in a cluster, name a private PLAINTEXT listener with --inter-broker-listener-name");
        }
    }
    Ok(SecurityStartup {
        authorization,
        sasl,
        oauth,
        tls_source,
        sasl_tls_source,
        http_authentication,
    })
}
