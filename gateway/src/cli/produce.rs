//! `oxbow produce TOPIC`: stdin lines to records, after `kafka-console-producer.sh`.
//!
//! Each line (without its `\n` or `\r\n`) is one record value; with `--key-separator SEP`
//! the line is `key<SEP>value`, split at the first SEP, and a line without SEP is an error
//! naming its line number. Lines are grouped into batches of `--batch-size`; each batch
//! becomes one produce request per partition it touches. Partition choice, as the Java
//! client does by default: `--partition` if given, else murmur2(key) for keyed records,
//! else round-robin, one partition per batch for all of that batch's unkeyed records
//! (like Kafka's sticky partitioner). Prints nothing on success; the first error stops the
//! run (records of batches already sent stay written).

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use bytes::Bytes;
use std::io::BufRead;

use super::ConnectArgs;
use crate::client::{
    parse_compression, partition_for_key, Acks, Client, Compression, ProduceOptions, ProduceRecord,
};

/// `oxbow produce TOPIC`
#[derive(Debug, clap::Args)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,

    /// Topic to write to; it must exist.
    pub topic: String,

    /// Write every record to this partition instead of choosing by key.
    #[arg(short, long)]
    pub partition: Option<i32>,

    /// Split each line into key and value at the first occurrence of this string.
    #[arg(long, value_parser = parse_separator)]
    pub key_separator: Option<String>,

    /// Acknowledgement to wait for: `all` (every in-sync replica), `1` (leader) or `0` (none).
    #[arg(long, default_value = "all")]
    pub acks: Acks,

    /// Lines per produce request.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub batch_size: u32,

    /// Compression of the record batches: none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none", value_parser = parse_compression)]
    pub compression: Compression,
}

fn parse_separator(s: &str) -> Result<String, String> {
    if s.is_empty() {
        Err("the key separator must not be empty".to_string())
    } else {
        Ok(s.to_string())
    }
}

/// Turns one input line (line ending already removed) into a record.
pub fn parse_line(
    line: &[u8],
    line_number: u64,
    separator: Option<&str>,
) -> anyhow::Result<ProduceRecord> {
    let Some(separator) = separator else {
        return Ok(ProduceRecord::new(None, Bytes::copy_from_slice(line)));
    };
    let sep = separator.as_bytes();
    let Some(pos) = line.windows(sep.len()).position(|w| w == sep) else {
        bail!("line {line_number}: no key separator \"{separator}\" found (expected key{separator}value)");
    };
    Ok(ProduceRecord::new(
        Some(Bytes::copy_from_slice(&line[..pos])),
        Bytes::copy_from_slice(&line[pos + sep.len()..]),
    ))
}

/// Chooses partitions for one batch; `round_robin` is the partition for its unkeyed
/// records.
pub fn assign_partitions(
    records: Vec<ProduceRecord>,
    partitions: i32,
    fixed: Option<i32>,
    round_robin: i32,
) -> BTreeMap<i32, Vec<ProduceRecord>> {
    let mut by_partition: BTreeMap<i32, Vec<ProduceRecord>> = BTreeMap::new();
    for record in records {
        let partition = match (fixed, &record.key) {
            (Some(p), _) => p,
            (None, Some(key)) => partition_for_key(key, partitions),
            (None, None) => round_robin,
        };
        by_partition.entry(partition).or_default().push(record);
    }
    by_partition
}

/// Runs `oxbow produce`, reading stdin until EOF.
pub async fn run(args: ProduceArgs) -> anyhow::Result<()> {
    let mut client = args.connect.connect().await?;
    // Blocking reads on purpose: the workspace's tokio has no `io-std`, and nothing else
    // runs on this task while it waits for the next line.
    produce_from(
        &mut client,
        &args,
        std::io::BufReader::new(std::io::stdin()),
    )
    .await
}

/// The body of [`run`], reading lines from any input (tests use a byte slice).
pub async fn produce_from(
    client: &mut Client,
    args: &ProduceArgs,
    mut reader: impl BufRead + Send,
) -> anyhow::Result<()> {
    let topic = client.topic_metadata(&args.topic).await?;
    let partitions = i32::try_from(topic.partitions.len()).context("partition count")?;
    if let Some(p) = args.partition {
        if !(0..partitions).contains(&p) {
            bail!(
                "topic \"{}\" has no partition {p} (it has {partitions} partitions)",
                args.topic
            );
        }
    }
    let options = ProduceOptions {
        acks: args.acks,
        compression: args.compression,
    };
    let batch_size = usize::try_from(args.batch_size).context("batch size")?;
    let mut line = Vec::new();
    let mut line_number = 0u64;
    let mut batch = Vec::with_capacity(batch_size);
    let mut round_robin = 0i32;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .context("reading stdin")?;
        if read > 0 {
            line_number += 1;
            let mut content = line.as_slice();
            if let Some(rest) = content.strip_suffix(b"\n") {
                content = rest.strip_suffix(b"\r").unwrap_or(rest);
            }
            batch.push(parse_line(
                content,
                line_number,
                args.key_separator.as_deref(),
            )?);
        }
        let eof = read == 0;
        if batch.len() >= batch_size || (eof && !batch.is_empty()) {
            let records = std::mem::replace(&mut batch, Vec::with_capacity(batch_size));
            for (partition, records) in
                assign_partitions(records, partitions, args.partition, round_robin)
            {
                client
                    .produce(&args.topic, partition, &records, options)
                    .await?;
            }
            round_robin = (round_robin + 1) % partitions;
        }
        if eof {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_without_separator_are_values() {
        let record = parse_line(b"hello", 1, None).expect("parses");
        assert_eq!(record.key, None);
        assert_eq!(record.value.as_deref(), Some(&b"hello"[..]));
    }

    #[test]
    fn key_separator_splits_at_first_occurrence() {
        let record = parse_line(b"k1::v::1", 1, Some("::")).expect("parses");
        assert_eq!(record.key.as_deref(), Some(&b"k1"[..]));
        assert_eq!(record.value.as_deref(), Some(&b"v::1"[..]));
        let record = parse_line(b"\tvalue", 1, Some("\t")).expect("parses");
        assert_eq!(record.key.as_deref(), Some(&b""[..]));
    }

    #[test]
    fn missing_separator_names_the_line() {
        let err = parse_line(b"novalue", 7, Some(":")).expect_err("no separator");
        assert_eq!(
            err.to_string(),
            "line 7: no key separator \":\" found (expected key:value)"
        );
    }

    #[test]
    fn keyed_records_follow_murmur2_and_unkeyed_share_a_partition() {
        let records = vec![
            ProduceRecord::new(Some(Bytes::from_static(b"foobar")), "a"),
            ProduceRecord::new(None, "b"),
            ProduceRecord::new(None, "c"),
        ];
        let assigned = assign_partitions(records.clone(), 3, None, 2);
        assert_eq!(
            assigned[&partition_for_key(b"foobar", 3)][0].value,
            records[0].value
        );
        assert_eq!(assigned[&2].iter().filter(|r| r.key.is_none()).count(), 2);
        let fixed = assign_partitions(records, 3, Some(1), 2);
        assert_eq!(fixed.len(), 1);
        assert_eq!(fixed[&1].len(), 3);
    }

    #[test]
    fn parses_produce_args() {
        use clap::Parser;
        #[derive(Debug, Parser)]
        struct Cli {
            #[command(flatten)]
            produce: ProduceArgs,
        }
        let cli = Cli::try_parse_from([
            "produce",
            "t",
            "--acks",
            "1",
            "--key-separator",
            ":",
            "--batch-size",
            "10",
        ])
        .expect("parses");
        assert_eq!(cli.produce.acks, Acks::Leader);
        assert_eq!(cli.produce.batch_size, 10);
        assert_eq!(cli.produce.compression, Compression::None);
        assert!(Cli::try_parse_from(["produce", "t", "--acks", "2"]).is_err());
        assert!(Cli::try_parse_from(["produce", "t", "--batch-size", "0"]).is_err());
        assert!(Cli::try_parse_from(["produce", "t", "--key-separator", ""]).is_err());
    }
}
