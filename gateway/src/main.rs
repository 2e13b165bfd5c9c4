//! `oxbow`: the broker (`oxbow serve`) and the CLI that talks to one.

// The simulation (ARCHITECTURE.md decision 22) does not run this crate yet: it may read the
// OS clock and randomness directly (clippy.toml bans that in the simulated crates).
#![allow(clippy::disallowed_methods)]

use clap::{Parser, Subcommand};
use oxbow_gateway::cli;
use oxbow_gateway::server::{self, LogFormat, ServeArgs};
use std::io::IsTerminal;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "oxbow",
    version,
    about = "Oxbow: a Kafka-compatible log on object storage"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker.
    Serve(Box<ServeArgs>),
    /// Create, list, describe and delete topics.
    Topics(cli::TopicsArgs),
    /// Produce lines from stdin to a topic.
    Produce(cli::ProduceArgs),
    /// Print a topic's records to stdout.
    Consume(cli::ConsumeArgs),
    /// Consumer groups: list, describe (members, assignment, lag), delete, reset offsets.
    Groups(cli::GroupsArgs),
    /// The cluster: brokers, controller, partition leaders.
    Cluster(cli::ClusterArgs),
    /// Steer partition leadership: reassign, list pending reassignments.
    Partitions(cli::PartitionsArgs),
    /// SASL/SCRAM users: create (or change a password), list, delete.
    Users(cli::UsersArgs),
    /// ACLs (with `serve --authorizer acl`): add, list, remove.
    Acls(cli::AclsArgs),
    /// Cluster links and mirror topics: create, list, describe, pause, resume, delete,
    /// promote (talks to a broker's HTTP API).
    Links(cli::LinksArgs),
}

/// jemalloc rather than glibc's malloc: see the dependency's note in `Cargo.toml` and
/// ARCHITECTURE decision 35.
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("OXBOW_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => {
                init_tracing(args.log_format);
                server::serve(*args).await
            }
            Command::Topics(args) => cli::topics::run(args).await,
            Command::Produce(args) => cli::produce::run(args).await,
            Command::Consume(args) => cli::consume::run(args).await,
            Command::Groups(args) => cli::groups::run(args).await,
            Command::Cluster(args) => cli::cluster::run(args).await,
            Command::Partitions(args) => cli::cluster::run_partitions(args).await,
            Command::Users(args) => cli::users::run(args).await,
            Command::Acls(args) => cli::acls::run(args).await,
            Command::Links(args) => cli::links::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<server::StorageFailed>().is_some() => {
            eprintln!("error: {e:#}");
            ExitCode::from(server::EXIT_STORAGE_FAILED)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
