//! `oxbow-loadtest`: load generator for Kafka-compatible brokers.
//!
//! For now one scenario, `produce`: N records of a fixed size in batches of M, with K
//! produce requests in flight, reporting throughput and produce-request latency
//! (p50/p99/max from an HdrHistogram). It uses Oxbow's own small client
//! ([`oxbow_gateway::client`]), one connection per in-flight request, so it measures the
//! broker with a simple, non-pipelining client; the librdkafka-based generator that will
//! replace it can show what a tuned client gets. Honest-numbers rules kept here:
//! latency is per produce request from send to acknowledgement; elapsed time starts after
//! the connections are open and the topic exists; payloads are random bytes, distinct
//! within a batch, so compression (if chosen) cannot shrink them artificially.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Parser;
use hdrhistogram::Histogram;
use oxbow_gateway::client::{
    parse_compression, Acks, Client, ClientError, ClientOptions, Compression, ProduceOptions,
    ProduceRecord, BROKER_DEFAULT,
};
use tokio::task::JoinSet;

#[derive(Debug, Parser)]
#[command(
    name = "oxbow-loadtest",
    version,
    about = "Load generator for Kafka-compatible brokers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Produce records as fast as K in-flight requests allow and report throughput and latency.
    Produce(ProduceArgs),
}

#[derive(Debug, clap::Args)]
struct ProduceArgs {
    /// Broker to connect to, host:port[,host:port...].
    #[arg(
        short = 'b',
        long,
        env = "OXBOW_BOOTSTRAP",
        default_value = "127.0.0.1:9092"
    )]
    bootstrap: String,

    /// Topic to write to; created if missing.
    #[arg(long)]
    topic: String,

    /// Total records to produce.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    records: u64,

    /// Bytes of value per record (no key).
    #[arg(long, default_value_t = 1024)]
    record_size: usize,

    /// Records per produce request (one record batch each).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    batch_records: u64,

    /// Acknowledgement to wait for: `all` or `1` (`0` would make latency meaningless).
    #[arg(long, default_value = "all", value_parser = parse_acks)]
    acks: Acks,

    /// Partitions when creating the topic [default: the broker's default]; batches go
    /// round-robin over the topic's partitions.
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
    partitions: Option<i32>,

    /// Produce requests in flight at once (one connection each).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1024))]
    concurrency: u64,

    /// Record batch compression: none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none", value_parser = parse_compression)]
    compression: Compression,

    /// Bound on each network wait, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,

    /// Print the report as one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn parse_acks(s: &str) -> Result<Acks, String> {
    match s.parse::<Acks>()? {
        Acks::None => {
            Err("acks=0 is not supported: the broker sends no response to time".to_string())
        }
        acks => Ok(acks),
    }
}

/// Highest latency the histogram tracks, in microseconds; slower requests are clamped.
const LATENCY_US_MAX: u64 = 600_000_000;

/// Cap on memory used for distinct payloads.
const PAYLOAD_POOL_BYTES_MAX: usize = 64 * 1024 * 1024;

/// What one in-flight lane measured.
struct LaneResult {
    latency_us: Histogram<u64>,
    requests: u64,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Produce(args) => produce(args).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            // One line (`{:#}` joins the context chain), no backtrace: these are
            // operator-facing errors such as an unreachable broker.
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// xorshift64*: deterministic filler, good enough to defeat compression.
fn random_payloads(record_size: usize, count: usize) -> Vec<Bytes> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..count)
        .map(|_| {
            let mut buf = Vec::with_capacity(record_size);
            while buf.len() < record_size {
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                let word = state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
                let take = word.len().min(record_size - buf.len());
                buf.extend_from_slice(&word[..take]);
            }
            Bytes::from(buf)
        })
        .collect()
}

/// Makes sure the topic exists and every partition has a leader; returns the partition count.
async fn prepare_topic(client: &mut Client, args: &ProduceArgs) -> anyhow::Result<i32> {
    match client.topic_metadata(&args.topic).await {
        Ok(existing) => {
            let count = i32::try_from(existing.partitions.len())?;
            if args.partitions.is_some_and(|p| p != count) {
                eprintln!(
                    "note: topic \"{}\" already exists with {count} partitions; using those",
                    args.topic
                );
            }
            return Ok(count);
        }
        Err(ClientError::UnknownTopic(_)) => {}
        Err(err) => return Err(err.into()),
    }
    client
        .create_topic(
            &args.topic,
            args.partitions.unwrap_or(BROKER_DEFAULT),
            BROKER_DEFAULT as i16,
            &[],
        )
        .await
        .with_context(|| format!("creating topic \"{}\"", args.topic))?;
    // A new topic takes a moment to get leaders; wait for all of them before timing.
    let deadline = Instant::now() + client.timeout();
    loop {
        client.invalidate_topic(&args.topic);
        let ready = client.topic_metadata(&args.topic).await.ok().filter(|t| {
            !t.partitions.is_empty() && t.partitions.iter().all(|p| p.leader.is_some())
        });
        if let Some(topic) = ready {
            return Ok(i32::try_from(topic.partitions.len())?);
        }
        if Instant::now() >= deadline {
            bail!(
                "topic \"{}\" was created but its partitions have no leader yet",
                args.topic
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn produce(args: ProduceArgs) -> anyhow::Result<()> {
    let options = ClientOptions {
        timeout: Duration::from_millis(args.timeout_ms),
        client_id: "oxbow-loadtest".to_string(),
    };
    let mut admin = Client::connect_with(&args.bootstrap, options.clone()).await?;
    let partitions = prepare_topic(&mut admin, &args).await?;
    drop(admin);

    // Records within a batch are distinct as long as the batch fits the pool.
    let pool_len = (PAYLOAD_POOL_BYTES_MAX / args.record_size.max(1)).clamp(1, 1024);
    let payloads = Arc::new(random_payloads(args.record_size, pool_len));
    let batches_total = args.records.div_ceil(args.batch_records);
    let next_batch = Arc::new(AtomicU64::new(0));
    let produce_options = ProduceOptions {
        acks: args.acks,
        compression: args.compression,
    };

    // Connect every lane before the clock starts: connection setup is not throughput.
    let mut clients = Vec::new();
    for _ in 0..args.concurrency {
        clients.push(Client::connect_with(&args.bootstrap, options.clone()).await?);
    }

    let started = Instant::now();
    let mut lanes = JoinSet::new();
    for mut client in clients {
        let payloads = Arc::clone(&payloads);
        let next_batch = Arc::clone(&next_batch);
        let topic = args.topic.clone();
        let (records_total, batch_records) = (args.records, args.batch_records);
        lanes.spawn(async move {
            let mut latency_us = Histogram::<u64>::new_with_bounds(1, LATENCY_US_MAX, 3)
                .context("creating histogram")?;
            let mut requests = 0u64;
            loop {
                let batch = next_batch.fetch_add(1, Ordering::Relaxed);
                if batch >= batches_total {
                    break;
                }
                let first = batch * batch_records;
                let count = batch_records.min(records_total - first);
                let records: Vec<ProduceRecord> = (first..first + count)
                    .map(|i| {
                        let slot = usize::try_from(i).unwrap_or(0) % payloads.len();
                        ProduceRecord::new(None, payloads[slot].clone())
                    })
                    .collect();
                let partition = i32::try_from(batch % u64::try_from(partitions)?)?;
                let sent = Instant::now();
                client
                    .produce(&topic, partition, &records, produce_options)
                    .await
                    .with_context(|| format!("produce request {batch} to {topic}-{partition}"))?;
                let micros = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
                latency_us.saturating_record(micros.max(1));
                requests += 1;
            }
            Ok::<_, anyhow::Error>(LaneResult {
                latency_us,
                requests,
            })
        });
    }

    let mut latency_us = Histogram::<u64>::new_with_bounds(1, LATENCY_US_MAX, 3)?;
    let mut requests = 0u64;
    while let Some(joined) = lanes.join_next().await {
        let lane = match joined.context("load lane panicked")? {
            Ok(lane) => lane,
            Err(err) => {
                lanes.abort_all();
                return Err(err);
            }
        };
        latency_us.add(&lane.latency_us)?;
        requests += lane.requests;
    }
    let elapsed = started.elapsed();
    report(&args, elapsed, requests, &latency_us)
}

fn report(
    args: &ProduceArgs,
    elapsed: Duration,
    requests: u64,
    latency_us: &Histogram<u64>,
) -> anyhow::Result<()> {
    let seconds = elapsed.as_secs_f64().max(f64::EPSILON);
    let bytes = args.records as f64 * args.record_size as f64;
    let records_per_s = args.records as f64 / seconds;
    let mib_per_s = bytes / (1024.0 * 1024.0) / seconds;
    let ms = |us: u64| us as f64 / 1000.0;
    let (p50, p99, max) = (
        ms(latency_us.value_at_quantile(0.50)),
        ms(latency_us.value_at_quantile(0.99)),
        ms(latency_us.max()),
    );
    if args.json {
        let report = serde_json::json!({
            "scenario": "produce",
            "topic": args.topic,
            "records": args.records,
            "record_size_bytes": args.record_size,
            "batch_records": args.batch_records,
            "concurrency": args.concurrency,
            "acks": args.acks.to_string(),
            "requests": requests,
            "elapsed_s": seconds,
            "records_per_s": records_per_s,
            "mib_per_s": mib_per_s,
            "latency_ms_p50": p50,
            "latency_ms_p99": p99,
            "latency_ms_max": max,
        });
        println!("{report}");
    } else {
        println!(
            "{} records sent in {:.2} s: {:.1} records/s ({:.2} MiB/s); produce latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {} requests ({} in flight, acks={})",
            args.records, seconds, records_per_s, mib_per_s, p50, p99, max, requests, args.concurrency, args.acks
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_have_the_size_and_differ() {
        let payloads = random_payloads(13, 3);
        assert!(payloads.iter().all(|p| p.len() == 13));
        assert_ne!(payloads[0], payloads[1]);
    }

    #[test]
    fn acks_zero_is_refused() {
        assert!(parse_acks("0").is_err());
        assert_eq!(parse_acks("all"), Ok(Acks::All));
    }

    #[test]
    fn cli_parses() {
        let cli = Cli::try_parse_from([
            "oxbow-loadtest",
            "produce",
            "--topic",
            "t",
            "--records",
            "10",
            "--record-size",
            "100",
            "--batch-records",
            "5",
            "--acks",
            "1",
            "--json",
        ])
        .expect("parses");
        let Command::Produce(args) = cli.command;
        assert_eq!(args.concurrency, 4);
        assert_eq!(args.acks, Acks::Leader);
        assert!(args.json);
    }
}
