//! `oxbow consume TOPIC`: records to stdout, after `kafka-console-consumer.sh`.
//!
//! Reads one partition (`--partition`) or all of them, without a consumer group: the
//! start position is the latest offset unless `--from-beginning` or `--offset` says
//! otherwise, and nothing is committed. Each poll round fetches every partition (one
//! request per leader, one leader after another) and prints what came back, partition by
//! partition, one record per line: `[Partition:P<SEP>][Offset:O<SEP>][key<SEP>]value`,
//! the layout of Kafka's `DefaultMessageFormatter`. Stops after `--max-messages`, after
//! `--timeout-idle` without a record, on Ctrl-C, or when stdout is closed; prints
//! `Processed a total of N messages` to stderr like Kafka's tool.

use std::collections::BTreeMap;
use std::io::Write;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::bail;

use super::{write_nullable, ConnectArgs};
use crate::client::{
    Client, ClientError, ConsumedRecord, ResponseError, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP,
};

/// Longest a single fetch waits for data before the loop checks idle time and Ctrl-C.
const POLL_WAIT: Duration = Duration::from_millis(500);

/// Per-partition byte limit of one fetch (Kafka's `max.partition.fetch.bytes` default).
const PARTITION_FETCH_BYTES: i32 = 1024 * 1024;

/// Consecutive failed poll rounds tolerated (broker restarting, leader moving) before
/// giving up.
const FAILED_ROUNDS_MAX: u32 = 10;

/// Where to start reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartOffset {
    Earliest,
    Latest,
    At(i64),
}

impl FromStr for StartOffset {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "earliest" => Ok(StartOffset::Earliest),
            "latest" => Ok(StartOffset::Latest),
            n => match n.parse::<i64>() {
                Ok(n) if n >= 0 => Ok(StartOffset::At(n)),
                _ => Err(format!(
                    "invalid offset \"{s}\": expected a non-negative number, earliest or latest"
                )),
            },
        }
    }
}

/// `oxbow consume TOPIC`
#[derive(Debug, clap::Args)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,

    /// Topic to read from.
    pub topic: String,

    /// Read only this partition [default: all partitions].
    #[arg(short, long)]
    pub partition: Option<i32>,

    /// Start at the earliest offset still in the log instead of the latest.
    #[arg(long, conflicts_with = "offset")]
    pub from_beginning: bool,

    /// Start at this offset (in every partition read), or `earliest` / `latest`.
    #[arg(long)]
    pub offset: Option<StartOffset>,

    /// Exit after printing this many records.
    #[arg(long)]
    pub max_messages: Option<u64>,

    /// Exit when no record arrived for this long, e.g. `5s` [default: wait forever].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub timeout_idle: Option<Duration>,

    /// Print the key before the value.
    #[arg(long)]
    pub print_key: bool,

    /// Print `Offset:N` before the key and value.
    #[arg(long)]
    pub print_offset: bool,

    /// Print `Partition:N` before the offset, key and value.
    #[arg(long)]
    pub print_partition: bool,

    /// Separator between the printed fields.
    #[arg(long, default_value = "\t")]
    pub key_separator: String,
}

impl ConsumeArgs {
    fn start(&self) -> StartOffset {
        match (self.from_beginning, self.offset) {
            (true, _) => StartOffset::Earliest,
            (false, Some(offset)) => offset,
            (false, None) => StartOffset::Latest,
        }
    }
}

/// How one record is printed.
#[derive(Debug, Clone)]
pub struct RecordFormat {
    pub print_partition: bool,
    pub print_offset: bool,
    pub print_key: bool,
    pub separator: String,
}

impl RecordFormat {
    /// Writes one record line.
    pub fn write(
        &self,
        out: &mut impl Write,
        partition: i32,
        record: &ConsumedRecord,
    ) -> std::io::Result<()> {
        let sep = self.separator.as_bytes();
        if self.print_partition {
            write!(out, "Partition:{partition}")?;
            out.write_all(sep)?;
        }
        if self.print_offset {
            write!(out, "Offset:{}", record.offset)?;
            out.write_all(sep)?;
        }
        if self.print_key {
            write_nullable(out, record.key.as_deref())?;
            out.write_all(sep)?;
        }
        write_nullable(out, record.value.as_deref())?;
        out.write_all(b"\n")
    }
}

/// Runs `oxbow consume`.
pub async fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    let mut client = args.connect.connect().await?;
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let printed = consume_into(&mut client, &args, &mut out).await?;
    eprintln!("Processed a total of {printed} messages");
    Ok(())
}

/// The body of [`run`], writing to any output; returns how many records were printed.
pub async fn consume_into(
    client: &mut Client,
    args: &ConsumeArgs,
    out: &mut impl Write,
) -> anyhow::Result<u64> {
    let topic = args.topic.as_str();
    let metadata = client.topic_metadata(topic).await?;
    let partitions: Vec<i32> = match args.partition {
        Some(p) if metadata.partitions.iter().any(|m| m.partition == p) => vec![p],
        Some(p) => bail!(
            "topic \"{topic}\" has no partition {p} (it has {} partitions)",
            metadata.partitions.len()
        ),
        None => metadata.partitions.iter().map(|m| m.partition).collect(),
    };
    let mut positions = BTreeMap::new();
    for &partition in &partitions {
        let offset = match args.start() {
            StartOffset::Earliest => {
                client
                    .list_offsets(topic, partition, EARLIEST_TIMESTAMP)
                    .await?
            }
            StartOffset::Latest => {
                client
                    .list_offsets(topic, partition, LATEST_TIMESTAMP)
                    .await?
            }
            StartOffset::At(n) => n,
        };
        positions.insert(partition, offset);
    }
    let format = RecordFormat {
        print_partition: args.print_partition,
        print_offset: args.print_offset,
        print_key: args.print_key,
        separator: args.key_separator.clone(),
    };
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);

    let mut printed = 0u64;
    let mut last_record = Instant::now();
    let mut failed_rounds = 0u32;
    loop {
        if args.max_messages.is_some_and(|max| printed >= max) {
            break;
        }
        let wait = match args.timeout_idle {
            Some(idle) => {
                let left = idle.saturating_sub(last_record.elapsed());
                if left.is_zero() {
                    break;
                }
                left.min(POLL_WAIT)
            }
            None => POLL_WAIT,
        };
        let request: Vec<(i32, i64)> = positions.iter().map(|(&p, &o)| (p, o)).collect();
        let round = tokio::select! {
            round = client.fetch_many(topic, &request, wait, PARTITION_FETCH_BYTES) => round,
            _ = &mut ctrl_c => break,
        };
        let parts = match round {
            Ok(parts) => {
                failed_rounds = 0;
                parts
            }
            Err(err) if failed_rounds < FAILED_ROUNDS_MAX && is_transient(&err) => {
                failed_rounds += 1;
                client.invalidate_topic(topic);
                tokio::time::sleep(POLL_WAIT).await;
                continue;
            }
            Err(err) => return Err(err.into()),
        };
        for part in parts {
            let partition = part.partition;
            match part.result {
                Ok(fetched) => {
                    for record in &fetched.records {
                        if args.max_messages.is_some_and(|max| printed >= max) {
                            break;
                        }
                        match format.write(out, partition, record) {
                            Ok(()) => printed += 1,
                            // `oxbow consume | head`: the reader left, stop quietly.
                            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                                return Ok(printed)
                            }
                            Err(e) => return Err(e.into()),
                        }
                        last_record = Instant::now();
                    }
                    positions.insert(partition, fetched.next_offset);
                }
                Err(err) if err.kafka_error() == Some(ResponseError::OffsetOutOfRange) => {
                    let current = positions.get(&partition).copied().unwrap_or(0);
                    let earliest = client
                        .list_offsets(topic, partition, EARLIEST_TIMESTAMP)
                        .await?;
                    // Before the log start: data was deleted, skip to what remains. Past
                    // the end: wait for new data, as auto.offset.reset=latest does.
                    let reset = if current < earliest {
                        earliest
                    } else {
                        client
                            .list_offsets(topic, partition, LATEST_TIMESTAMP)
                            .await?
                    };
                    eprintln!("warning: offset {current} is out of range for {topic}-{partition}; continuing at {reset}");
                    positions.insert(partition, reset);
                }
                // Leader moving or not yet elected: metadata was marked stale; next round.
                Err(err) if err.is_retriable() => {}
                Err(err) => return Err(err.into()),
            }
        }
        match out.flush() {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(printed),
            Err(e) => return Err(e.into()),
        }
    }
    out.flush().or_else(|e| {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Ok(())
        } else {
            Err(e)
        }
    })?;
    Ok(printed)
}

/// Failures a reader can simply retry: fetches have no side effects, so a timeout or a
/// dropped connection only costs a reconnect.
fn is_transient(err: &ClientError) -> bool {
    err.is_retriable() || matches!(err, ClientError::Timeout { .. } | ClientError::Io { .. })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use clap::Parser;
    use kafka_protocol::records::TimestampType;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        consume: ConsumeArgs,
    }

    fn record(offset: i64, key: Option<&'static str>, value: &'static str) -> ConsumedRecord {
        ConsumedRecord {
            offset,
            timestamp_ms: 0,
            timestamp_type: TimestampType::Creation,
            key: key.map(|k| Bytes::from_static(k.as_bytes())),
            value: Some(Bytes::from_static(value.as_bytes())),
            headers: vec![],
        }
    }

    #[test]
    fn start_offset_flags() {
        let cli = Cli::try_parse_from(["consume", "t"]).expect("parses");
        assert_eq!(cli.consume.start(), StartOffset::Latest);
        let cli = Cli::try_parse_from(["consume", "t", "--from-beginning"]).expect("parses");
        assert_eq!(cli.consume.start(), StartOffset::Earliest);
        let cli =
            Cli::try_parse_from(["consume", "t", "--offset", "42", "-p", "1"]).expect("parses");
        assert_eq!(cli.consume.start(), StartOffset::At(42));
        assert_eq!(cli.consume.partition, Some(1));
        assert!(
            Cli::try_parse_from(["consume", "t", "--from-beginning", "--offset", "1"]).is_err()
        );
        assert!(Cli::try_parse_from(["consume", "t", "--offset", "-3"]).is_err());
        let cli = Cli::try_parse_from([
            "consume",
            "t",
            "--timeout-idle",
            "2s",
            "--max-messages",
            "5",
        ])
        .expect("parses");
        assert_eq!(cli.consume.timeout_idle, Some(Duration::from_secs(2)));
        assert_eq!(cli.consume.max_messages, Some(5));
    }

    #[test]
    fn formats_like_kafka_console_consumer() {
        let plain = RecordFormat {
            print_partition: false,
            print_offset: false,
            print_key: false,
            separator: "\t".to_string(),
        };
        let mut out = Vec::new();
        plain
            .write(&mut out, 0, &record(3, Some("k"), "v"))
            .expect("writes");
        assert_eq!(out, b"v\n");

        let full = RecordFormat {
            print_partition: true,
            print_offset: true,
            print_key: true,
            separator: ":".to_string(),
        };
        let mut out = Vec::new();
        full.write(&mut out, 2, &record(3, None, "v"))
            .expect("writes");
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            "Partition:2:Offset:3:null:v\n"
        );
    }
}
