//! Admin and data CLI subcommands (`oxbow topics|produce|consume`) that talk to a running broker.
//!
//! Each subcommand is a clap `Args` struct plus `run(args) -> anyhow::Result<()>`, modelled
//! on Kafka's `kafka-topics.sh`, `kafka-console-producer.sh` and
//! `kafka-console-consumer.sh`. They work against any Kafka-compatible broker, Oxbow or
//! Apache Kafka, through [`crate::client`]. Errors are one line; `main` prints them and
//! exits non-zero.
//!
//! - [`topics`]: `oxbow topics create|list|describe|delete`
//! - [`produce`]: `oxbow produce TOPIC` reads records from stdin, one per line
//! - [`consume`]: `oxbow consume TOPIC` prints records to stdout, one per line
//! - [`groups`]: `oxbow groups list|describe|delete|reset-offsets`
//! - [`acls`]: `oxbow acls add|list|remove`
//! - [`cluster`]: `oxbow cluster describe`, `oxbow partitions reassign|list-reassignments`
//! - [`users`]: `oxbow users create|list|delete` (SCRAM credentials)
//! - [`links`]: `oxbow links create|list|describe|pause|resume|delete|promote` (cluster
//!   links and mirror topics, over the HTTP API)

use std::time::Duration;

use crate::client::{Client, ClientError};

pub mod acls;
pub mod client_auth;
pub mod cluster;
pub mod consume;
pub mod groups;
pub mod links;
#[cfg(test)]
mod live_tests;
pub mod produce;
pub mod topics;
pub mod users;

pub use acls::AclsArgs;
pub use cluster::{ClusterArgs, PartitionsArgs};
pub use consume::ConsumeArgs;
pub use groups::GroupsArgs;
pub use links::LinksArgs;
pub use produce::ProduceArgs;
pub use topics::TopicsArgs;
pub use users::UsersArgs;

/// Where the broker is and how long to wait for it; shared by every subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectArgs {
    /// Broker to connect to, as host:port; a comma-separated list is tried in order.
    #[arg(
        short = 'b',
        long,
        env = "OXBOW_BOOTSTRAP",
        default_value = "127.0.0.1:9092",
        global = true
    )]
    pub bootstrap: String,

    /// Bound on each network wait (connect, request, response), e.g. `10s`, `500ms`.
    #[arg(
        long,
        env = "OXBOW_TIMEOUT",
        default_value = "10s",
        value_parser = humantime::parse_duration,
        global = true
    )]
    pub timeout: Duration,

    /// SASL authentication (a SASL_PLAINTEXT listener).
    #[command(flatten)]
    pub auth: client_auth::ClientAuthArgs,
}

impl ConnectArgs {
    /// Connects, turning "unreachable" into a hint about `--bootstrap`.
    pub async fn connect(&self) -> anyhow::Result<Client> {
        let options = crate::client::ClientOptions {
            timeout: self.timeout,
            sasl: self.auth.credentials()?,
            ..crate::client::ClientOptions::default()
        };
        Client::connect_with(&self.bootstrap, options)
            .await
            .map_err(|err| match err {
                ClientError::Unreachable { .. } => anyhow::anyhow!(
                    "{err} (is a broker running there? point at one with --bootstrap host:port or OXBOW_BOOTSTRAP)"
                ),
                other => other.into(),
            })
    }
}

/// Writes `bytes`, or `null` for a missing key/value, as the Kafka console tools do.
fn write_nullable(out: &mut impl std::io::Write, bytes: Option<&[u8]>) -> std::io::Result<()> {
    out.write_all(bytes.unwrap_or(b"null"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        connect: ConnectArgs,
    }

    #[test]
    fn connect_args_defaults() {
        let cli = Cli::try_parse_from(["oxbow"]).expect("parses");
        // The env var may be set where tests run; only check when it is not.
        if std::env::var_os("OXBOW_BOOTSTRAP").is_none() {
            assert_eq!(cli.connect.bootstrap, "127.0.0.1:9092");
        }
        if std::env::var_os("OXBOW_TIMEOUT").is_none() {
            assert_eq!(cli.connect.timeout, Duration::from_secs(10));
        }
        let cli =
            Cli::try_parse_from(["oxbow", "-b", "h:1", "--timeout", "250ms"]).expect("parses");
        assert_eq!(cli.connect.bootstrap, "h:1");
        assert_eq!(cli.connect.timeout, Duration::from_millis(250));
    }

    #[tokio::test]
    async fn unreachable_error_suggests_bootstrap() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        drop(listener);
        let args = ConnectArgs {
            bootstrap: addr.clone(),
            timeout: Duration::from_secs(2),
            auth: Default::default(),
        };
        let err = args.connect().await.expect_err("nothing listens");
        let text = format!("{err:#}");
        assert!(
            text.starts_with(&format!(
                "cannot reach broker at {addr}: connection refused"
            )),
            "{text}"
        );
        assert!(text.contains("--bootstrap"), "{text}");
    }
}
