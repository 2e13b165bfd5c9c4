//! The Oxbow broker edge: the Kafka wire protocol server, the HTTP/JSON API and the admin CLI.
//!
//! # Layout
//! - [`broker`]: the operations both front ends share, over metadata and the log.
//! - [`cluster`]: placement, the controller, leadership following and graceful handoff.
//! - [`kafka`]: the Kafka protocol server (framing, pipelining, one handler per API).
//! - [`http`]: the HTTP/JSON API (Confluent REST Proxy v2 compatible), health/metrics and
//!   the read-only console (`/ui`).
//! - [`samples`]: recent lag and rate samples the console charts.
//! - [`error`]: the one mapping from internal errors to Kafka codes and HTTP statuses.
//! - [`security`]: principals and sessions (who asks, over which listener).
//! - [`server`]: `oxbow serve`: settings, start-up, graceful shutdown.
//! - [`client`], [`cli`]: a small Kafka client and the CLI subcommands built on it.

// The simulation (ARCHITECTURE.md decision 22) does not run this crate yet: it may read the
// OS clock and randomness directly (clippy.toml bans that in the simulated crates).
#![allow(clippy::disallowed_methods)]

pub mod broker;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod config;
pub mod error;
pub mod fd_limit;
pub mod groups;
pub mod http;
pub mod kafka;
pub mod metrics;
pub mod mirror;
pub mod records;
pub mod retention;
pub mod samples;
pub mod security;
pub mod server;
pub mod transactions;
