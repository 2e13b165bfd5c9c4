//! `oxbow topics create|list|describe|delete|alter-config|delete-records`, after Kafka's
//! `kafka-topics.sh` (and, for `alter-config`, `kafka-configs.sh --alter`; for
//! `delete-records`, `kafka-delete-records.sh`).
//!
//! Output follows kafka-topics.sh so scripts written against Kafka keep working:
//! `Created topic NAME.` on create, one name per line on list, and tab-separated
//! `Topic: NAME\tTopicId: ...\tPartitionCount: N\tReplicationFactor: N\tConfigs: k=v,...`
//! lines (plus one indented line per partition) on describe. Describe adds the leader
//! epoch, which Kafka's tool does not show.

use std::io::Write;

use anyhow::Context;
use base64::Engine;

use super::ConnectArgs;
use crate::client::{Client, ConfigEntry, TopicMetadata, BROKER_DEFAULT};

/// `oxbow topics ...`
#[derive(Debug, clap::Args)]
pub struct TopicsArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,

    #[command(subcommand)]
    pub command: TopicsCommand,
}

/// What to do with topics.
#[derive(Debug, clap::Subcommand)]
pub enum TopicsCommand {
    /// Create a topic.
    Create(CreateArgs),
    /// List topic names, one per line.
    List(ListArgs),
    /// Show partitions, leaders, leader epochs, replicas and non-default configs.
    Describe(DescribeArgs),
    /// Delete a topic.
    Delete(DeleteArgs),
    /// Change a live topic's configs (IncrementalAlterConfigs, as `kafka-configs.sh --alter`).
    AlterConfig(AlterConfigArgs),
    /// Delete the records of partitions below an offset (as `kafka-delete-records.sh`):
    /// their log start offset moves up, and consumers below it reset.
    DeleteRecords(DeleteRecordsArgs),
}

/// `oxbow topics create NAME`
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// Name of the topic to create.
    pub name: String,

    /// Number of partitions [default: the broker's `num.partitions`].
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
    pub partitions: Option<i32>,

    /// Copies of each partition [default: the broker's `default.replication.factor`].
    #[arg(long, value_parser = clap::value_parser!(i16).range(1..))]
    pub replication_factor: Option<i16>,

    /// Topic config override as key=value, e.g. `--config cleanup.policy=compact`; repeatable.
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_config)]
    pub configs: Vec<(String, String)>,
}

/// `oxbow topics list`
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Leave out internal topics such as `__consumer_offsets`.
    #[arg(long)]
    pub exclude_internal: bool,
}

/// `oxbow topics describe [NAME]`
#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    /// Topic to describe [default: all topics].
    pub name: Option<String>,

    /// Leave out internal topics such as `__consumer_offsets` (when describing all).
    #[arg(long)]
    pub exclude_internal: bool,
}

/// `oxbow topics delete NAME`
#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// Name of the topic to delete.
    pub name: String,
}

/// `oxbow topics alter-config NAME --set k=v --delete k ...`
#[derive(Debug, clap::Args)]
pub struct AlterConfigArgs {
    /// Topic whose configs change.
    pub name: String,

    /// Set a config as key=value, e.g. `--set retention.ms=3600000`; repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_config)]
    pub set: Vec<(String, String)>,

    /// Remove an override, so Kafka's default applies again; repeatable.
    #[arg(long = "delete", value_name = "KEY", value_parser = parse_key)]
    pub delete: Vec<String>,

    /// Add elements to a list config, e.g. `--append cleanup.policy=compact`; repeatable.
    #[arg(long = "append", value_name = "KEY=VALUE", value_parser = parse_config)]
    pub append: Vec<(String, String)>,

    /// Remove elements from a list config, e.g. `--subtract cleanup.policy=delete`.
    #[arg(long = "subtract", value_name = "KEY=VALUE", value_parser = parse_config)]
    pub subtract: Vec<(String, String)>,
}

/// Kafka's op ids of IncrementalAlterConfigs.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

impl AlterConfigArgs {
    /// The changes to send, in flag order: `(key, op, value)`. A key named by two flags (or
    /// twice) is refused here, naming the flags, rather than by the broker.
    pub fn changes(&self) -> Result<Vec<(String, i8, Option<String>)>, String> {
        let mut out: Vec<(String, i8, Option<String>)> = Vec::new();
        let mut flag_of: std::collections::BTreeMap<String, &str> = Default::default();
        let flagged = self
            .set
            .iter()
            .map(|(k, v)| ("--set", k, OP_SET, Some(v.clone())))
            .chain(self.delete.iter().map(|k| ("--delete", k, OP_DELETE, None)))
            .chain(
                self.append
                    .iter()
                    .map(|(k, v)| ("--append", k, OP_APPEND, Some(v.clone()))),
            )
            .chain(
                self.subtract
                    .iter()
                    .map(|(k, v)| ("--subtract", k, OP_SUBTRACT, Some(v.clone()))),
            );
        for (flag, key, op, value) in flagged {
            if let Some(first) = flag_of.insert(key.clone(), flag) {
                return Err(format!(
                    "{first} and {flag} both name config \"{key}\": name each config once"
                ));
            }
            out.push((key.clone(), op, value));
        }
        if out.is_empty() {
            return Err(
                "nothing to change: give at least one --set, --delete, --append or \
                        --subtract"
                    .to_string(),
            );
        }
        Ok(out)
    }
}

/// Parses a config name for `--delete`.
pub fn parse_key(s: &str) -> Result<String, String> {
    let key = s.trim();
    if key.is_empty() || key.contains('=') {
        return Err(format!(
            "invalid config name \"{s}\": expected a key such as retention.ms"
        ));
    }
    Ok(key.to_string())
}

/// `oxbow topics delete-records NAME --offset N [--partition P]...`
#[derive(Debug, clap::Args)]
pub struct DeleteRecordsArgs {
    /// Topic whose records to delete.
    pub name: String,

    /// Partition to delete records of; repeatable [default: every partition].
    #[arg(long = "partition", value_parser = clap::value_parser!(i32).range(0..))]
    pub partitions: Vec<i32>,

    /// Delete every record below this offset; `-1` means up to the high watermark (all
    /// records written so far).
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(-1..))]
    pub offset: i64,
}

/// Parses `key=value` for `--config`.
pub fn parse_config(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.to_string()))
        }
        _ => Err(format!("invalid config \"{s}\": expected key=value")),
    }
}

/// Runs `oxbow topics ...`.
pub async fn run(args: TopicsArgs) -> anyhow::Result<()> {
    let mut client = args.connect.connect().await?;
    // `Stdout`, not a held `StdoutLock`: the lock is not `Send` and this future may be
    // spawned.
    let mut out = std::io::stdout();
    match args.command {
        TopicsCommand::Create(create) => {
            client
                .create_topic(
                    &create.name,
                    create.partitions.unwrap_or(BROKER_DEFAULT),
                    create.replication_factor.unwrap_or(BROKER_DEFAULT as i16),
                    &create.configs,
                )
                .await?;
            writeln!(out, "Created topic {}.", create.name)?;
        }
        TopicsCommand::List(list) => {
            let metadata = client.metadata(None).await?;
            let mut names: Vec<&str> = metadata
                .topics
                .iter()
                .filter(|t| !(list.exclude_internal && t.is_internal))
                .map(|t| t.name.as_str())
                .collect();
            names.sort_unstable();
            for name in names {
                writeln!(out, "{name}")?;
            }
        }
        TopicsCommand::Describe(describe) => {
            let topics = match describe.name {
                Some(name) => vec![client.topic_metadata(&name).await?],
                None => {
                    let mut all: Vec<TopicMetadata> = client
                        .metadata(None)
                        .await?
                        .topics
                        .into_iter()
                        .filter(|t| !(describe.exclude_internal && t.is_internal))
                        .collect();
                    all.sort_by(|a, b| a.name.cmp(&b.name));
                    all
                }
            };
            for topic in &topics {
                let configs = describe_configs(&mut client, &topic.name).await?;
                out.write_all(format_description(topic, &configs).as_bytes())?;
            }
        }
        TopicsCommand::Delete(delete) => {
            client.delete_topic(&delete.name).await?;
        }
        TopicsCommand::AlterConfig(alter) => {
            let changes = alter.changes().map_err(anyhow::Error::msg)?;
            client.alter_topic_configs(&alter.name, &changes).await?;
            // kafka-configs.sh's line.
            writeln!(out, "Completed updating config for topic {}.", alter.name)?;
        }
        TopicsCommand::DeleteRecords(del) => {
            let partitions = if del.partitions.is_empty() {
                let topic = client.topic_metadata(&del.name).await?;
                topic.partitions.iter().map(|p| p.partition).collect()
            } else {
                del.partitions.clone()
            };
            // Kafka's tool prints one line per partition after a header.
            writeln!(out, "Records delete operation completed:")?;
            for p in partitions {
                let low = client
                    .delete_records(&del.name, p, del.offset)
                    .await
                    .with_context(|| format!("deleting records of {}-{p}", del.name))?;
                writeln!(out, "partition: {}-{p}\tlow_watermark: {low}", del.name)?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

async fn describe_configs(client: &mut Client, topic: &str) -> anyhow::Result<Vec<ConfigEntry>> {
    client
        .describe_configs(topic)
        .await
        .with_context(|| format!("describing configs of topic \"{topic}\""))
}

/// Kafka prints topic ids as URL-safe base64 without padding (`Uuid.toString()`).
fn format_topic_id(id: &uuid::Uuid) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.as_bytes())
}

fn join_ids(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// The kafka-topics.sh `--describe` block for one topic.
pub fn format_description(topic: &TopicMetadata, configs: &[ConfigEntry]) -> String {
    let configs = configs
        .iter()
        .filter(|c| !c.is_default())
        .map(|c| format!("{}={}", c.name, c.value.as_deref().unwrap_or("null")))
        .collect::<Vec<_>>()
        .join(",");
    let mut text = format!(
        "Topic: {}\tTopicId: {}\tPartitionCount: {}\tReplicationFactor: {}\tConfigs: {}\n",
        topic.name,
        format_topic_id(&topic.topic_id),
        topic.partitions.len(),
        topic.replication_factor(),
        configs
    );
    for p in &topic.partitions {
        let leader = p
            .leader
            .map_or_else(|| "none".to_string(), |l| l.to_string());
        text.push_str(&format!(
            "\tTopic: {}\tPartition: {}\tLeader: {}\tLeaderEpoch: {}\tReplicas: {}\tIsr: {}",
            topic.name,
            p.partition,
            leader,
            p.leader_epoch,
            join_ids(&p.replicas),
            join_ids(&p.isr)
        ));
        if !p.offline_replicas.is_empty() {
            text.push_str(&format!("\tOffline: {}", join_ids(&p.offline_replicas)));
        }
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{ConfigSource, PartitionMetadata};
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        topics: TopicsArgs,
    }

    #[test]
    fn parses_create_with_configs() {
        let cli = Cli::try_parse_from([
            "topics",
            "create",
            "orders",
            "--partitions",
            "3",
            "--replication-factor",
            "1",
            "--config",
            "cleanup.policy=compact",
            "--config",
            "retention.ms=1000",
            "-b",
            "h:1",
        ])
        .expect("parses");
        assert_eq!(cli.topics.connect.bootstrap, "h:1");
        let TopicsCommand::Create(create) = cli.topics.command else {
            panic!("expected create");
        };
        assert_eq!(create.partitions, Some(3));
        assert_eq!(create.configs.len(), 2);
        assert_eq!(
            create.configs[1],
            ("retention.ms".to_string(), "1000".to_string())
        );
        assert!(Cli::try_parse_from(["topics", "create", "x", "--partitions", "0"]).is_err());
        assert!(Cli::try_parse_from(["topics", "create", "x", "--config", "novalue"]).is_err());
    }

    #[test]
    fn parses_alter_config_and_names_the_flags() {
        let cli = Cli::try_parse_from([
            "topics",
            "alter-config",
            "orders",
            "--set",
            "retention.ms=1000",
            "--delete",
            "segment.ms",
            "--append",
            "cleanup.policy=compact",
        ])
        .expect("parses");
        let TopicsCommand::AlterConfig(alter) = cli.topics.command else {
            panic!("expected alter-config");
        };
        assert_eq!(
            alter.changes(),
            Ok(vec![
                ("retention.ms".to_string(), OP_SET, Some("1000".to_string())),
                ("segment.ms".to_string(), OP_DELETE, None),
                (
                    "cleanup.policy".to_string(),
                    OP_APPEND,
                    Some("compact".to_string())
                ),
            ])
        );
        let both = Cli::try_parse_from([
            "topics",
            "alter-config",
            "t",
            "--set",
            "retention.ms=1",
            "--delete",
            "retention.ms",
        ])
        .expect("parses");
        let TopicsCommand::AlterConfig(both) = both.topics.command else {
            panic!("expected alter-config");
        };
        let e = both.changes().expect_err("named twice");
        assert!(e.contains("--set") && e.contains("--delete"), "{e}");
        let none = Cli::try_parse_from(["topics", "alter-config", "t"]).expect("parses");
        let TopicsCommand::AlterConfig(none) = none.topics.command else {
            panic!("expected alter-config");
        };
        assert!(none.changes().expect_err("empty").contains("--set"));
        let e = Cli::try_parse_from(["topics", "alter-config", "t", "--set", "novalue"])
            .expect_err("no value");
        assert!(e.to_string().contains("--set"), "{e}");
        let e = Cli::try_parse_from(["topics", "alter-config", "t", "--delete", "a=b"])
            .expect_err("a value");
        assert!(e.to_string().contains("--delete"), "{e}");
    }

    #[test]
    fn config_values_may_contain_equals() {
        assert_eq!(
            parse_config("a=b=c"),
            Ok(("a".to_string(), "b=c".to_string()))
        );
        assert!(parse_config("=x").is_err());
    }

    #[test]
    fn describe_output_matches_kafka_topics_layout() {
        let topic = TopicMetadata {
            name: "orders".to_string(),
            topic_id: uuid::Uuid::nil(),
            is_internal: false,
            error: None,
            partitions: vec![
                PartitionMetadata {
                    partition: 0,
                    leader: Some(1),
                    leader_epoch: 4,
                    replicas: vec![1, 2],
                    isr: vec![1, 2],
                    offline_replicas: vec![],
                    error: None,
                },
                PartitionMetadata {
                    partition: 1,
                    leader: None,
                    leader_epoch: 0,
                    replicas: vec![2, 1],
                    isr: vec![],
                    offline_replicas: vec![2],
                    error: None,
                },
            ],
        };
        let configs = vec![
            ConfigEntry {
                name: "cleanup.policy".to_string(),
                value: Some("compact".to_string()),
                source: ConfigSource::DynamicTopic,
                read_only: false,
                is_sensitive: false,
            },
            ConfigEntry {
                name: "retention.ms".to_string(),
                value: Some("604800000".to_string()),
                source: ConfigSource::Default,
                read_only: false,
                is_sensitive: false,
            },
        ];
        assert_eq!(
            format_description(&topic, &configs),
            "Topic: orders\tTopicId: AAAAAAAAAAAAAAAAAAAAAA\tPartitionCount: 2\tReplicationFactor: 2\tConfigs: cleanup.policy=compact\n\
             \tTopic: orders\tPartition: 0\tLeader: 1\tLeaderEpoch: 4\tReplicas: 1,2\tIsr: 1,2\n\
             \tTopic: orders\tPartition: 1\tLeader: none\tLeaderEpoch: 0\tReplicas: 2,1\tIsr: \tOffline: 2\n"
        );
    }
}
