//! `oxbow users create|list|delete`: SCRAM credentials of SASL users, what Kafka's
//! `kafka-configs.sh --entity-type users --alter --add-config 'SCRAM-SHA-512=[…]'` does,
//! through AlterUserScramCredentials/DescribeUserScramCredentials (so it works against
//! Apache Kafka too).
//!
//! The password is read from `--password-file` or the first line of stdin, never from a
//! flag (which `ps` and shell history would show), and is never printed. It never leaves
//! this process: a random salt is drawn here and Hi(password, salt, iterations) is sent.

use std::io::{BufRead, Read};
use std::path::PathBuf;

use anyhow::Context;

use super::ConnectArgs;
use crate::client::scram_users::ScramChange;
use crate::security::sasl::credential::salted_password;
use crate::security::sasl::{Mechanism, ScramHash};

/// `oxbow users ...`
#[derive(Debug, clap::Args)]
pub struct UsersArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,

    #[command(subcommand)]
    pub command: UsersCommand,
}

/// What to do with users.
#[derive(Debug, clap::Subcommand)]
pub enum UsersCommand {
    /// Create a user's SCRAM credential for one mechanism, or replace it (a new password).
    Create(CreateArgs),
    /// List users and their mechanisms (and iterations), one user per line.
    List(ListArgs),
    /// Delete a user's credentials: one mechanism, or every one it has.
    Delete(DeleteArgs),
}

/// `oxbow users create NAME`
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// The user name (the principal is `User:NAME`).
    pub name: String,
    /// SCRAM-SHA-256 or SCRAM-SHA-512 (PLAIN logins are checked against either).
    #[arg(long, default_value = "SCRAM-SHA-512")]
    pub mechanism: Mechanism,
    /// PBKDF2 iterations, 4096..=16384 (Kafka's bounds): more makes a stolen credential
    /// slower to guess and each client login (and each PLAIN login on the broker) slower.
    #[arg(long, default_value_t = 8192)]
    pub iterations: u32,
    /// Read the password from this file (its first line); without it, from stdin.
    #[arg(long)]
    pub password_file: Option<PathBuf>,
}

/// `oxbow users list [NAME...]`
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only these users [default: every user].
    pub names: Vec<String>,
}

/// `oxbow users delete NAME`
#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    pub name: String,
    /// Only this mechanism's credential [default: all of the user's].
    #[arg(long)]
    pub mechanism: Option<Mechanism>,
}

fn scram(m: Mechanism) -> anyhow::Result<ScramHash> {
    m.scram().with_context(|| {
        format!("{m} has no stored credential: use SCRAM-SHA-256 or SCRAM-SHA-512")
    })
}

fn mechanism_name(type_id: i8) -> String {
    ScramHash::from_type_id(type_id)
        .map(|h| h.mechanism().name().to_string())
        .unwrap_or_else(|| format!("UNKNOWN({type_id})"))
}

/// The first line of `r`, without its line ending; empty is refused.
fn read_password(r: impl Read) -> anyhow::Result<String> {
    let mut line = String::new();
    std::io::BufReader::new(r.take(64 << 10))
        .read_line(&mut line)
        .context("reading the password")?;
    let password = line.trim_end_matches(['\n', '\r']).to_string();
    if password.is_empty() {
        anyhow::bail!("the password is empty (give it on stdin or with --password-file)");
    }
    Ok(password)
}

pub async fn run(args: UsersArgs) -> anyhow::Result<()> {
    match args.command {
        UsersCommand::Create(c) => {
            let hash = scram(c.mechanism)?;
            if !(ScramHash::ITERATIONS_MIN..=ScramHash::ITERATIONS_MAX).contains(&c.iterations) {
                anyhow::bail!(
                    "--iterations {} is outside {}..={}",
                    c.iterations,
                    ScramHash::ITERATIONS_MIN,
                    ScramHash::ITERATIONS_MAX
                );
            }
            let password = match &c.password_file {
                Some(path) => read_password(
                    std::fs::File::open(path)
                        .with_context(|| format!("opening --password-file {}", path.display()))?,
                )?,
                None => read_password(std::io::stdin())?,
            };
            let mut salt = vec![0u8; 32];
            ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut salt)
                .map_err(|_| anyhow::anyhow!("the OS random generator failed"))?;
            let salted = salted_password(hash, &salt, password.as_bytes(), c.iterations);
            drop(password);
            let mut client = args.connect.connect().await?;
            client
                .alter_user_scram_credentials(vec![ScramChange::Upsert {
                    user: c.name.clone(),
                    mechanism: hash.type_id(),
                    iterations: i32::try_from(c.iterations).unwrap_or(i32::MAX),
                    salt,
                    salted_password: salted,
                }])
                .await?;
            println!("Set {} credential of user {}.", c.mechanism, c.name);
        }
        UsersCommand::List(l) => {
            let mut client = args.connect.connect().await?;
            for u in client.describe_user_scram_credentials(&l.names).await? {
                let creds: Vec<String> = u
                    .credentials
                    .iter()
                    .map(|(m, i)| format!("{}=iterations={i}", mechanism_name(*m)))
                    .collect();
                println!("{}\t{}", u.user, creds.join(","));
            }
        }
        UsersCommand::Delete(d) => {
            let mut client = args.connect.connect().await?;
            let mechanisms = match d.mechanism {
                Some(m) => vec![scram(m)?.type_id()],
                None => client
                    .describe_user_scram_credentials(std::slice::from_ref(&d.name))
                    .await?
                    .into_iter()
                    .flat_map(|u| u.credentials.into_iter().map(|(m, _)| m))
                    .collect(),
            };
            // One change per user and request (Kafka refuses a user twice in one).
            for mechanism in mechanisms {
                client
                    .alter_user_scram_credentials(vec![ScramChange::Delete {
                        user: d.name.clone(),
                        mechanism,
                    }])
                    .await?;
                println!(
                    "Deleted {} credential of user {}.",
                    mechanism_name(mechanism),
                    d.name
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_the_first_line_and_never_empty() {
        assert_eq!(
            read_password(&b"s3cret\nignored\n"[..]).expect("pw"),
            "s3cret"
        );
        assert_eq!(read_password(&b"s3cret\r\n"[..]).expect("pw"), "s3cret");
        assert_eq!(read_password(&b"no newline"[..]).expect("pw"), "no newline");
        assert!(read_password(&b"\n"[..]).is_err());
        assert!(read_password(&b""[..]).is_err());
    }
}
