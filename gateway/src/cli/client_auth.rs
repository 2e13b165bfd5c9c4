//! How the CLI authenticates to a SASL listener: `--sasl-mechanism`, `--sasl-username`,
//! `--sasl-password-file`, or a Kafka client properties file (`--command-config`, as
//! Kafka's tools take it: `security.protocol`, `sasl.mechanism`, and `sasl.jaas.config`'s
//! `username="…" password="…"` or librdkafka's `sasl.username`/`sasl.password`). Flags
//! override the file. The password is never a flag value (shell history, `ps`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::client::sasl::SaslCredentials;
use crate::security::sasl::Mechanism;

/// SASL flags shared by every subcommand.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientAuthArgs {
    /// Kafka client properties (security.protocol, sasl.mechanism, sasl.jaas.config), as
    /// Kafka's tools' --command-config.
    #[arg(long, env = "OXBOW_COMMAND_CONFIG", global = true)]
    pub command_config: Option<PathBuf>,
    /// SASL mechanism to authenticate with: SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN.
    #[arg(long, env = "OXBOW_SASL_MECHANISM", global = true)]
    pub sasl_mechanism: Option<Mechanism>,
    /// SASL user name.
    #[arg(long, env = "OXBOW_SASL_USERNAME", global = true)]
    pub sasl_username: Option<String>,
    /// File whose first line is the SASL password.
    #[arg(long, env = "OXBOW_SASL_PASSWORD_FILE", global = true)]
    pub sasl_password_file: Option<PathBuf>,
}

impl ClientAuthArgs {
    /// The credentials to authenticate with, if any are configured.
    pub fn credentials(&self) -> anyhow::Result<Option<SaslCredentials>> {
        let mut mechanism = None;
        let mut username = None;
        let mut password = None;
        if let Some(path) = &self.command_config {
            let props = read_properties(path)?;
            let protocol = props
                .get("security.protocol")
                .map(|p| p.to_ascii_uppercase());
            match protocol.as_deref() {
                None | Some("PLAINTEXT") => {}
                Some("SASL_PLAINTEXT") => {
                    let m = props.get("sasl.mechanism").with_context(|| {
                        format!("{}: SASL_PLAINTEXT needs sasl.mechanism", path.display())
                    })?;
                    mechanism = Some(m.parse::<Mechanism>().map_err(|e| {
                        anyhow::anyhow!("{}: sasl.mechanism: {e}", path.display())
                    })?);
                    let (u, p) = match props.get("sasl.jaas.config") {
                        Some(jaas) => (jaas_option(jaas, "username"), jaas_option(jaas, "password")),
                        None => (
                            props.get("sasl.username").cloned(),
                            props.get("sasl.password").cloned(),
                        ),
                    };
                    username = u;
                    password = p;
                }
                Some(other) => anyhow::bail!(
                    "{}: security.protocol {other} is not supported by oxbow's client (PLAINTEXT or SASL_PLAINTEXT)",
                    path.display()
                ),
            }
        }
        if let Some(m) = self.sasl_mechanism {
            mechanism = Some(m);
        }
        if let Some(u) = &self.sasl_username {
            username = Some(u.clone());
        }
        if let Some(path) = &self.sasl_password_file {
            password = Some(read_first_line(path)?);
        }
        match (mechanism, username, password) {
            (None, None, None) => Ok(None),
            (Some(Mechanism::OauthBearer), _, _) => anyhow::bail!(
                "sasl.mechanism OAUTHBEARER is not supported by oxbow's client (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"
            ),
            (Some(m), Some(u), Some(p)) if !u.is_empty() && !p.is_empty() => {
                Ok(Some(SaslCredentials::new(m, u, p)))
            }
            _ => anyhow::bail!(
                "SASL needs a mechanism, a user name and a password: --sasl-mechanism, --sasl-username and --sasl-password-file (or --command-config)"
            ),
        }
    }
}

fn read_first_line(path: &Path) -> anyhow::Result<String> {
    let text = read_small(path)?;
    Ok(text.lines().next().unwrap_or("").to_string())
}

fn read_small(path: &Path) -> anyhow::Result<String> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if meta.len() > 1 << 20 {
        anyhow::bail!("{} is larger than 1 MiB", path.display());
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// `key=value` lines (`#`/`!` comments, `key: value` too), as Java properties files hold
/// client configs; no line continuations.
fn read_properties(path: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    Ok(parse_properties(&read_small(path)?))
}

fn parse_properties(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .filter_map(|l| {
            let i = l.find(['=', ':'])?;
            Some((l[..i].trim().to_string(), l[i + 1..].trim().to_string()))
        })
        .collect()
}

/// `name="value"` (or unquoted) from a JAAS line such as
/// `org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="b";`.
fn jaas_option(jaas: &str, name: &str) -> Option<String> {
    let mut rest = jaas;
    while let Some(i) = rest.find(name) {
        let before_ok = rest[..i].chars().last().is_none_or(|c| c.is_whitespace());
        let after = rest[i + name.len()..].trim_start();
        if before_ok {
            if let Some(value) = after.strip_prefix('=') {
                let value = value.trim_start();
                return Some(match value.strip_prefix('"') {
                    Some(quoted) => quoted.split('"').next().unwrap_or("").to_string(),
                    None => value
                        .split(|c: char| c.is_whitespace() || c == ';')
                        .next()
                        .unwrap_or("")
                        .to_string(),
                });
            }
        }
        rest = &rest[i + name.len()..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jaas_and_properties_parse_like_kafkas_tools() {
        let props = parse_properties(
            "# client\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism = SCRAM-SHA-512\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"p w=1\";\n",
        );
        assert_eq!(props["sasl.mechanism"], "SCRAM-SHA-512");
        let jaas = &props["sasl.jaas.config"];
        assert_eq!(jaas_option(jaas, "username").as_deref(), Some("alice"));
        assert_eq!(jaas_option(jaas, "password").as_deref(), Some("p w=1"));
        assert_eq!(
            jaas_option("X required username=bob;", "username").as_deref(),
            Some("bob")
        );
        assert_eq!(
            jaas_option("X required myusername=\"x\";", "username"),
            None
        );
    }

    #[test]
    fn partial_sasl_settings_are_refused_and_none_is_fine() {
        assert!(ClientAuthArgs::default()
            .credentials()
            .expect("none")
            .is_none());
        let only_user = ClientAuthArgs {
            sasl_username: Some("alice".into()),
            ..ClientAuthArgs::default()
        };
        let e = only_user.credentials().expect_err("no password");
        assert!(e.to_string().contains("--sasl-password-file"), "{e}");
    }
}
