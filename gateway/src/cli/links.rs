//! `oxbow links create|list|describe|pause|resume|delete|promote` (issue 20): cluster links
//! and mirror topics. Links have no Kafka API, so this talks to a broker's HTTP API
//! (`/v3/clusters/{c}/links…`, see `http/admin_v3/links.rs`) at `--http-url`.

use anyhow::{anyhow, bail, Context};
use std::time::Duration;

/// Largest response body read (a link list with its mirror topics).
const RESPONSE_BYTES_MAX: usize = 16 << 20;

#[derive(Debug, clap::Args)]
pub struct LinksArgs {
    /// A broker's HTTP API.
    #[arg(
        long,
        env = "OXBOW_HTTP_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub http_url: String,

    /// Bound on the whole request, e.g. `30s` (promotion may wait for lag zero within it).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, global = true)]
    pub timeout: Duration,

    #[command(subcommand)]
    pub command: LinksCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum LinksCommand {
    /// Create a link to a source cluster and start mirroring the topics it selects.
    Create {
        /// The link's name.
        name: String,
        /// The source cluster's bootstrap servers, host:port[,host:port…].
        #[arg(long)]
        bootstrap: String,
        /// Source topics to mirror: a name, or `re:EXPR` matched against whole names.
        /// Repeat or comma-separate.
        #[arg(long, value_delimiter = ',')]
        topics: Vec<String>,
        /// Consumer groups whose committed offsets are copied (same syntax).
        #[arg(long, value_delimiter = ',')]
        groups: Vec<String>,
        /// SASL mechanism at the source: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.
        #[arg(long)]
        sasl_mechanism: Option<String>,
        #[arg(long)]
        sasl_username: Option<String>,
        /// File whose first line is the SASL password.
        #[arg(long)]
        sasl_password_file: Option<std::path::PathBuf>,
        /// Speak TLS to the source, trusting the CA certificates in this PEM file.
        #[arg(long)]
        ssl_ca_file: Option<std::path::PathBuf>,
        /// Create it even if the source does not answer now.
        #[arg(long)]
        skip_validation: bool,
    },
    /// List links.
    List,
    /// A link, its mirror topics and their lag.
    Describe { name: String },
    /// Stop mirroring (mirror topics stay read-only).
    Pause { name: String },
    /// Mirror again from where each partition's log ends.
    Resume { name: String },
    /// Delete a link (its mirror topics must be promoted first, unless --force).
    Delete {
        name: String,
        #[arg(long)]
        force: bool,
    },
    /// Stop mirroring TOPIC(s) (all of the link's with none) and make them writable.
    Promote {
        name: String,
        /// Mirror topics to promote (repeat or comma-separate); none: all.
        #[arg(long, value_delimiter = ',')]
        topics: Vec<String>,
        /// First wait until the destination has everything the source has, e.g. `30s`.
        #[arg(long, value_parser = humantime::parse_duration)]
        wait_for_lag_zero: Option<Duration>,
    },
}

struct Api {
    http: reqwest::Client,
    base: String,
    cluster: String,
}

impl Api {
    async fn connect(args: &LinksArgs) -> anyhow::Result<Api> {
        let http = reqwest::Client::builder()
            .timeout(args.timeout)
            .build()
            .context("building the HTTP client")?;
        let base = args.http_url.trim_end_matches('/').to_string();
        let mut api = Api {
            http,
            base,
            cluster: String::new(),
        };
        let clusters = api.call(reqwest::Method::GET, "/v3/clusters", None).await?;
        api.cluster = clusters["data"][0]["cluster_id"]
            .as_str()
            .ok_or_else(|| anyhow!("{} did not name its cluster", api.base))?
            .to_string();
        Ok(api)
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> anyhow::Result<serde_json::Value> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method, &url);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.map_err(|e| {
            anyhow!("cannot reach {url}: {e} (point at a broker's HTTP API with --http-url or OXBOW_HTTP_URL)")
        })?;
        let status = resp.status();
        let bytes = resp.bytes().await.context("reading the response")?;
        if bytes.len() > RESPONSE_BYTES_MAX {
            bail!("response from {url} is larger than {RESPONSE_BYTES_MAX} bytes");
        }
        let value: serde_json::Value = if bytes.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .with_context(|| format!("{url} answered {status} with a body that is not JSON"))?
        };
        if !status.is_success() {
            let msg = value["message"].as_str().unwrap_or("no message");
            bail!("{status}: {msg}");
        }
        Ok(value)
    }

    fn links(&self) -> String {
        format!("/v3/clusters/{}/links", self.cluster)
    }
}

pub async fn run(args: LinksArgs) -> anyhow::Result<()> {
    let api = Api::connect(&args).await?;
    let links = api.links();
    use reqwest::Method;
    match args.command {
        LinksCommand::Create {
            name,
            bootstrap,
            topics,
            groups,
            sasl_mechanism,
            sasl_username,
            sasl_password_file,
            ssl_ca_file,
            skip_validation,
        } => {
            let ca = match ssl_ca_file {
                Some(p) => Some(
                    std::fs::read_to_string(&p)
                        .with_context(|| format!("reading --ssl-ca-file {}", p.display()))?,
                ),
                None => None,
            };
            let password = match sasl_password_file {
                Some(p) => Some(
                    std::fs::read_to_string(&p)
                        .with_context(|| format!("reading {}", p.display()))?
                        .lines()
                        .next()
                        .unwrap_or("")
                        .to_string(),
                ),
                None => None,
            };
            let body = serde_json::json!({
                "link_name": name,
                "bootstrap_servers": bootstrap,
                "topics": topics,
                "groups": groups,
                "sasl_mechanism": sasl_mechanism,
                "sasl_username": sasl_username,
                "sasl_password": password,
                "ssl_ca_pem": ca,
                "skip_validation": skip_validation,
            });
            api.call(Method::POST, &links, Some(body)).await?;
            println!("Created link \"{name}\".");
        }
        LinksCommand::List => {
            let v = api.call(Method::GET, &links, None).await?;
            println!(
                "{:<20} {:<8} {:<30} MIRRORS  LAST ERROR",
                "LINK", "STATE", "SOURCE"
            );
            for l in v["data"].as_array().into_iter().flatten() {
                println!(
                    "{:<20} {:<8} {:<30} {:<8} {}",
                    l["link_name"].as_str().unwrap_or(""),
                    l["state"].as_str().unwrap_or(""),
                    l["bootstrap_servers"].as_str().unwrap_or(""),
                    l["mirror_topics"].as_array().map_or(0, Vec::len),
                    l["last_error"].as_str().unwrap_or("-"),
                );
            }
        }
        LinksCommand::Describe { name } => {
            let v = api
                .call(Method::GET, &format!("{links}/{name}"), None)
                .await?;
            println!(
                "Link {}  state {}  source {}  topics {}  groups {}",
                v["link_name"].as_str().unwrap_or(""),
                v["state"].as_str().unwrap_or(""),
                v["bootstrap_servers"].as_str().unwrap_or(""),
                v["topics"],
                v["groups"]
            );
            if let Some(e) = v["last_error"].as_str() {
                println!("Last error: {e}");
            }
            println!(
                "{:<30} {:<10} {:>9} {:>14} {:>14} {:>10}",
                "TOPIC", "STATE", "PARTITION", "SOURCE-END", "MIRROR-END", "LAG"
            );
            for m in v["mirror_topics"].as_array().into_iter().flatten() {
                let topic = m["topic_name"].as_str().unwrap_or("");
                let state = m["state"].as_str().unwrap_or("");
                match m["partitions"].as_array() {
                    Some(parts) => {
                        for p in parts {
                            println!(
                                "{topic:<30} {state:<10} {:>9} {:>14} {:>14} {:>10}",
                                p["partition"],
                                p["source_end"],
                                p["destination_end"],
                                p["lag_records"]
                            );
                        }
                    }
                    None => println!("{topic:<30} {state:<10} (source not reachable)"),
                }
                if let Some(e) = m["error"].as_str() {
                    println!("  error: {e}");
                }
            }
        }
        LinksCommand::Pause { name } => {
            api.call(Method::POST, &format!("{links}/{name}/pause"), None)
                .await?;
            println!("Paused link \"{name}\".");
        }
        LinksCommand::Resume { name } => {
            api.call(Method::POST, &format!("{links}/{name}/resume"), None)
                .await?;
            println!("Resumed link \"{name}\".");
        }
        LinksCommand::Delete { name, force } => {
            api.call(
                Method::DELETE,
                &format!("{links}/{name}?force={force}"),
                None,
            )
            .await?;
            println!("Deleted link \"{name}\".");
        }
        LinksCommand::Promote {
            name,
            topics,
            wait_for_lag_zero,
        } => {
            let body = serde_json::json!({
                "mirror_topic_names": topics,
                "wait_for_lag_zero_ms": wait_for_lag_zero.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            });
            let v = api
                .call(
                    Method::POST,
                    &format!("{links}/{name}/mirrors:promote"),
                    Some(body),
                )
                .await?;
            let mut failed = false;
            for t in v["data"].as_array().into_iter().flatten() {
                let outcome = t["outcome"].as_str().unwrap_or("");
                failed |= outcome != "promoted";
                println!(
                    "{}: {outcome} (lag at promotion {} records, {} ms)",
                    t["topic"].as_str().unwrap_or(""),
                    t["lag_records_at_promotion"],
                    t["duration_ms"]
                );
            }
            if failed {
                bail!("some topics were not promoted");
            }
        }
    }
    Ok(())
}
