//! `oxbow-loadtest`: load generator and side-by-side benchmark reports for Kafka-compatible
//! brokers, through librdkafka (the `rdkafka` crate, bundled librdkafka) and the REST
//! Proxy v2 HTTP produce path.
//!
//! Layout: `scenario` (what to run, from presets, TOML and flags) → `engine` (phases of
//! one run against one target) → `kafka` / `http` (load lanes) with `schedule` (open-loop
//! send times), `counters`, `stats` (HdrHistogram summaries) → `report` (JSON, Markdown,
//! `svg` plots) and `compare` (A/B ratios). `limits` measures the machine's ceilings.
//! See `loadtest/README.md` for the scenarios and how each published figure was made.

// The simulation (ARCHITECTURE.md decision 22) does not run this crate yet: it may read the
// OS clock and randomness directly (clippy.toml bans that in the simulated crates).
#![allow(clippy::disallowed_methods)]

mod clock;
mod compare;
mod counters;
mod engine;
mod http;
mod kafka;
mod limits;
mod payload;
mod report;
mod scenario;
mod schedule;
mod stats;
mod svg;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use serde_json::{Map, Value};

use crate::engine::Target;
use crate::limits::{Limits, LimitsPlan};
use crate::report::{shell_quote, Machine, Report, RunResult};
use crate::scenario::{parse_file, parse_set, ByteSize, Kind, Scenario};

#[derive(Debug, Parser)]
#[command(
    name = "oxbow-loadtest",
    version,
    about = "Load generator and side-by-side benchmarks for Kafka-compatible brokers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Produce throughput: producers as fast as librdkafka's queue allows.
    Produce(ScenarioCmd),
    /// End-to-end latency (produce → consume) at a fixed rate, default 50% of a probed max.
    Latency(ScenarioCmd),
    /// Fan-out: producers plus N consumer groups (default 5) reading the topic.
    Fanout(ScenarioCmd),
    /// Catch-up read: prefill, make the data cold (--restart-cmd), read from the beginning.
    Catchup(ScenarioCmd),
    /// Mixed: open-loop writes at a fixed rate, a tailing group and a catch-up reader at once.
    Mixed(ScenarioCmd),
    /// Run the scenarios of a TOML file.
    Run(RunCmd),
    /// Measure the machine's ceilings: fsync'd sequential write, loopback TCP, memory copy.
    Limits(LimitsCmd),
    /// Run the same scenarios against two brokers in alternation (A B A B …) and report
    /// A ÷ B per round and the median ratio.
    Compare(CompareCmd),
    /// Render saved results (`--out` JSON) again: Markdown, plots, fractions of limits.
    /// Several files are merged (runs and comparison tables in order).
    Report(ReportCmd),
}

#[derive(Debug, Args)]
struct ReportCmd {
    /// Results JSON files written by `--out`.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    #[command(flatten)]
    output: OutputArgs,
}

/// Where to run.
#[derive(Debug, Args)]
struct TargetArgs {
    /// Kafka bootstrap servers.
    #[arg(
        short = 'b',
        long,
        env = "OXBOW_BOOTSTRAP",
        default_value = "127.0.0.1:9092"
    )]
    bootstrap: String,
    /// HTTP API base URL, for `--protocol http`.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    http: String,
    /// Name of the target in reports.
    #[arg(long, default_value = "target")]
    label: String,
}

/// Where results go.
#[derive(Debug, Args)]
struct OutputArgs {
    /// Write the results as JSON.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write the Markdown summary (always printed to stdout) to this file.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Write SVG plots (throughput over time, latency CDF) into this directory.
    #[arg(long)]
    plots: Option<PathBuf>,
    /// Results of `oxbow-loadtest limits --out FILE`, to state figures as fractions of them.
    #[arg(long)]
    limits: Option<PathBuf>,
}

/// Scenario settings; each overrides the kind's preset (and a file's values). See
/// `loadtest/README.md` for every key.
#[derive(Debug, Default, Args)]
struct ScenarioFlags {
    /// Scenario name in reports.
    #[arg(long)]
    name: Option<String>,
    /// `kafka` (librdkafka) or `http` (REST Proxy v2 produce).
    #[arg(long, value_enum)]
    protocol: Option<scenario::Protocol>,
    /// Measured window, e.g. 20s.
    #[arg(long)]
    duration: Option<String>,
    /// Unmeasured load before the window, e.g. 3s.
    #[arg(long)]
    warmup: Option<String>,
    /// Value bytes per record (>= 16).
    #[arg(long)]
    record_size: Option<usize>,
    #[arg(long)]
    partitions: Option<i32>,
    /// -1: the broker's default.
    #[arg(long, allow_negative_numbers = true)]
    replication_factor: Option<i32>,
    /// Producer clients (threads).
    #[arg(long)]
    producers: Option<u32>,
    /// `max`, `50%` (of a probed max), `20000` (records/s) or `10MiB/s`.
    #[arg(long)]
    rate: Option<String>,
    /// 0, 1 or all.
    #[arg(long)]
    acks: Option<String>,
    #[arg(long)]
    linger_ms: Option<f64>,
    /// librdkafka batch.size, e.g. 1MB or 131072.
    #[arg(long)]
    batch_bytes: Option<String>,
    #[arg(long, value_enum)]
    compression: Option<scenario::Compression>,
    /// Idempotent producer.
    #[arg(long)]
    idempotence: bool,
    /// Consumer groups tailing the topic.
    #[arg(long)]
    groups: Option<u32>,
    #[arg(long)]
    consumers_per_group: Option<u32>,
    /// Readers of the prefill from the beginning.
    #[arg(long)]
    catchup_readers: Option<u32>,
    /// Bytes written before the measured phase, e.g. 256MiB.
    #[arg(long)]
    prefill: Option<String>,
    /// Shell command that makes prefilled data cold (e.g. restarts the broker).
    #[arg(long)]
    restart_cmd: Option<String>,
    /// Pause after prefill/restart, e.g. 2s.
    #[arg(long)]
    settle: Option<String>,
    #[arg(long)]
    http_concurrency: Option<u32>,
    #[arg(long)]
    http_batch_records: Option<u32>,
    /// Length of the probe behind `--rate N%`.
    #[arg(long)]
    probe_duration: Option<String>,
    /// Topic config, key=value (repeatable).
    #[arg(long, value_name = "KEY=VALUE")]
    topic_config: Vec<String>,
    /// librdkafka property for every client, key=value (repeatable).
    #[arg(long, value_name = "KEY=VALUE")]
    client_config: Vec<String>,
    /// Keep the topic after the run.
    #[arg(long)]
    keep_topic: bool,
    /// Any scenario key, key=value with a TOML value (repeatable).
    #[arg(long, value_name = "KEY=VALUE")]
    set: Vec<String>,
}

impl ScenarioFlags {
    fn overrides(&self) -> anyhow::Result<Map<String, Value>> {
        let mut m = Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                m.insert(k.to_string(), v);
            }
        };
        put("name", self.name.clone().map(Value::from));
        put(
            "protocol",
            self.protocol.map(serde_json::to_value).transpose()?,
        );
        put("duration", self.duration.clone().map(Value::from));
        put("warmup", self.warmup.clone().map(Value::from));
        put("record_size", self.record_size.map(Value::from));
        put("partitions", self.partitions.map(Value::from));
        put(
            "replication_factor",
            self.replication_factor.map(Value::from),
        );
        put("producers", self.producers.map(Value::from));
        put("rate", self.rate.clone().map(Value::from));
        put("acks", self.acks.clone().map(Value::from));
        put("linger_ms", self.linger_ms.map(Value::from));
        put("batch_bytes", self.batch_bytes.clone().map(Value::from));
        put(
            "compression",
            self.compression.map(serde_json::to_value).transpose()?,
        );
        put("idempotence", self.idempotence.then_some(Value::Bool(true)));
        put("groups", self.groups.map(Value::from));
        put(
            "consumers_per_group",
            self.consumers_per_group.map(Value::from),
        );
        put("catchup_readers", self.catchup_readers.map(Value::from));
        put("prefill", self.prefill.clone().map(Value::from));
        put("restart_cmd", self.restart_cmd.clone().map(Value::from));
        put("settle", self.settle.clone().map(Value::from));
        put("http_concurrency", self.http_concurrency.map(Value::from));
        put(
            "http_batch_records",
            self.http_batch_records.map(Value::from),
        );
        put(
            "probe_duration",
            self.probe_duration.clone().map(Value::from),
        );
        put(
            "delete_topic",
            self.keep_topic.then_some(Value::Bool(false)),
        );
        for (key, list) in [
            ("topic_config", &self.topic_config),
            ("client_config", &self.client_config),
        ] {
            if !list.is_empty() {
                let mut table = Map::new();
                for kv in list {
                    let (k, v) = kv
                        .split_once('=')
                        .with_context(|| format!("--{key} wants key=value, got {kv:?}"))?;
                    table.insert(k.to_string(), Value::from(v));
                }
                m.insert(key.to_string(), Value::Object(table));
            }
        }
        for kv in &self.set {
            let (k, v) = parse_set(kv)?;
            m.insert(k, v);
        }
        Ok(m)
    }
}

#[derive(Debug, Args)]
struct ScenarioCmd {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    flags: ScenarioFlags,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, Args)]
struct FileArgs {
    /// TOML scenario file (`[defaults]` and `[[scenario]]` tables).
    file: PathBuf,
    /// Run only the scenarios with these names (repeatable).
    #[arg(long)]
    only: Vec<String>,
    #[command(flatten)]
    flags: ScenarioFlags,
}

#[derive(Debug, Args)]
struct RunCmd {
    #[command(flatten)]
    file: FileArgs,
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, Args)]
struct LimitsCmd {
    /// Directory for the fsync test: the broker's data dir, so the same device is measured.
    #[arg(long, default_value = "./oxbow-data")]
    dir: PathBuf,
    /// Most bytes the sequential write test writes.
    #[arg(long, default_value = "1GiB")]
    disk_bytes: ByteSize,
    /// Time bound of each test, in seconds.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    #[arg(long)]
    out: Option<PathBuf>,
    #[arg(long)]
    markdown: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum CompareWhat {
    Produce(ScenarioFlags),
    Latency(ScenarioFlags),
    Fanout(ScenarioFlags),
    Catchup(ScenarioFlags),
    Mixed(ScenarioFlags),
    /// The scenarios of a TOML file.
    Run(FileArgs),
}

#[derive(Debug, Args)]
struct CompareCmd {
    /// Bootstrap servers of A.
    a: String,
    /// Bootstrap servers of B.
    b: String,
    /// Rounds; each runs every scenario on A, then on B.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    #[arg(long, default_value = "A")]
    label_a: String,
    #[arg(long, default_value = "B")]
    label_b: String,
    /// HTTP base URL of A (for `--protocol http`).
    #[arg(long)]
    http_a: Option<String>,
    #[arg(long)]
    http_b: Option<String>,
    /// Restart command for A (catch-up), instead of the scenario's.
    #[arg(long)]
    restart_cmd_a: Option<String>,
    #[arg(long)]
    restart_cmd_b: Option<String>,
    /// Shell command run before every run of every scenario, on either target, e.g. `sync`:
    /// a broker that does not fsync (Kafka's default) leaves its writes in the page cache,
    /// and the kernel writing them back during the other broker's run slows every fsync
    /// that one makes.
    #[arg(long)]
    before_each: Option<String>,
    #[command(flatten)]
    output: OutputArgs,
    #[command(subcommand)]
    what: CompareWhat,
}

/// Runs `compare --before-each`'s command, if any; its failure stops the comparison.
fn before_each(cmd: Option<&str>) -> anyhow::Result<()> {
    let Some(cmd) = cmd else {
        return Ok(());
    };
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .status()
        .with_context(|| format!("running --before-each {cmd:?}"))?;
    if !status.success() {
        bail!("--before-each {cmd:?} failed: {status}");
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn new_report() -> Report {
    Report {
        tool: "oxbow-loadtest".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        started_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        machine: Machine::probe(),
        command: std::env::args()
            .map(|a| shell_quote(&a))
            .collect::<Vec<_>>()
            .join(" "),
        limits: None,
        runs: Vec::new(),
        compared: None,
        comparison: Vec::new(),
    }
}

fn from_file(args: &FileArgs) -> anyhow::Result<Vec<Scenario>> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let mut scenarios = parse_file(&text, &args.flags.overrides()?)
        .with_context(|| format!("in {}", args.file.display()))?;
    if !args.only.is_empty() {
        scenarios.retain(|s| args.only.contains(&s.name));
        if scenarios.is_empty() {
            bail!("no scenario named {:?} in the file", args.only);
        }
    }
    Ok(scenarios)
}

/// Runs one scenario; a failure becomes a result with the error, so a long series goes on.
fn run_one(
    rt: &tokio::runtime::Runtime,
    target: &Target,
    sc: &Scenario,
    round: Option<u32>,
) -> RunResult {
    match engine::run(rt, target, sc, round) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("[{}] {} failed: {e:#}", target.label, sc.name);
            let mut r = RunResult::empty(&target.label, &target.bootstrap, sc.kind);
            r.scenario = sc.clone();
            r.round = round;
            r.errors.push(format!("run failed: {e:#}"));
            r
        }
    }
}

fn load_limits(path: &std::path::Path) -> anyhow::Result<Limits> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    if let Ok(report) = serde_json::from_str::<Report>(&text) {
        return report
            .limits
            .with_context(|| format!("{} has no limits", path.display()));
    }
    serde_json::from_str::<Limits>(&text)
        .with_context(|| format!("{} is neither a report nor limits", path.display()))
}

fn finish(mut report: Report, output: &OutputArgs) -> anyhow::Result<()> {
    if let Some(path) = &output.limits {
        report.limits = Some(load_limits(path)?);
    }
    let md = report.to_markdown();
    print!("{md}");
    if let Some(path) = &output.markdown {
        std::fs::write(path, &md).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &output.out {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("results: {}", path.display());
    }
    if let Some(dir) = &output.plots {
        for file in report.write_plots(dir)? {
            eprintln!("plot: {file}");
        }
    }
    Ok(())
}

fn target(args: &TargetArgs) -> Target {
    Target {
        label: args.label.clone(),
        bootstrap: args.bootstrap.clone(),
        http: Some(args.http.clone()),
        restart_cmd: None,
    }
}

fn run_scenarios(
    scenarios: Vec<Scenario>,
    target: &Target,
    output: &OutputArgs,
) -> anyhow::Result<()> {
    let rt = runtime()?;
    let mut report = new_report();
    for sc in &scenarios {
        report.runs.push(run_one(&rt, target, sc, None));
    }
    finish(report, output)
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    let single = |kind: Kind, cmd: ScenarioCmd| -> anyhow::Result<()> {
        let sc = Scenario::resolve(kind, &[&cmd.flags.overrides()?])?;
        run_scenarios(vec![sc], &target(&cmd.target), &cmd.output)
    };
    match cli.command {
        Command::Produce(c) => single(Kind::Produce, c),
        Command::Latency(c) => single(Kind::Latency, c),
        Command::Fanout(c) => single(Kind::Fanout, c),
        Command::Catchup(c) => single(Kind::Catchup, c),
        Command::Mixed(c) => single(Kind::Mixed, c),
        Command::Run(c) => run_scenarios(from_file(&c.file)?, &target(&c.target), &c.output),
        Command::Limits(c) => {
            let plan = LimitsPlan {
                dir: c.dir.clone(),
                disk_bytes: c.disk_bytes.0,
                seconds: c.seconds,
            };
            let limits = limits::measure(&plan, |what| eprintln!("limits: {what}"))?;
            let mut report = new_report();
            report.limits = Some(limits);
            finish(
                report,
                &OutputArgs {
                    out: c.out,
                    markdown: c.markdown,
                    plots: None,
                    limits: None,
                },
            )
        }
        Command::Compare(c) => compare(c),
        Command::Report(c) => {
            let mut merged: Option<Report> = None;
            for path in &c.files {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let report: Report = serde_json::from_str(&text)
                    .with_context(|| format!("{} is not a results file", path.display()))?;
                match merged.as_mut() {
                    None => merged = Some(report),
                    Some(m) => {
                        m.runs.extend(report.runs);
                        m.comparison.extend(report.comparison);
                        m.command = format!("{}; {}", m.command, report.command);
                        if m.limits.is_none() {
                            m.limits = report.limits;
                        }
                    }
                }
            }
            let report = merged.context("no results file")?;
            finish(report, &c.output)
        }
    }
}

fn compare(c: CompareCmd) -> anyhow::Result<()> {
    let scenarios = match &c.what {
        CompareWhat::Produce(f) => vec![Scenario::resolve(Kind::Produce, &[&f.overrides()?])?],
        CompareWhat::Latency(f) => vec![Scenario::resolve(Kind::Latency, &[&f.overrides()?])?],
        CompareWhat::Fanout(f) => vec![Scenario::resolve(Kind::Fanout, &[&f.overrides()?])?],
        CompareWhat::Catchup(f) => vec![Scenario::resolve(Kind::Catchup, &[&f.overrides()?])?],
        CompareWhat::Mixed(f) => vec![Scenario::resolve(Kind::Mixed, &[&f.overrides()?])?],
        CompareWhat::Run(f) => from_file(f)?,
    };
    if c.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let a = Target {
        label: c.label_a.clone(),
        bootstrap: c.a.clone(),
        http: c.http_a.clone(),
        restart_cmd: c.restart_cmd_a.clone(),
    };
    let b = Target {
        label: c.label_b.clone(),
        bootstrap: c.b.clone(),
        http: c.http_b.clone(),
        restart_cmd: c.restart_cmd_b.clone(),
    };
    let rt = runtime()?;
    let mut report = new_report();
    // (scenario index, round) → (A, B)
    let mut pairs: Vec<Vec<(RunResult, RunResult)>> = vec![Vec::new(); scenarios.len()];
    for round in 1..=c.rounds {
        for (i, sc) in scenarios.iter().enumerate() {
            before_each(c.before_each.as_deref())?;
            let ra = run_one(&rt, &a, sc, Some(round));
            before_each(c.before_each.as_deref())?;
            let rb = run_one(&rt, &b, sc, Some(round));
            pairs[i].push((ra, rb));
        }
    }
    for (sc, rounds) in scenarios.iter().zip(&pairs) {
        let refs: Vec<(&RunResult, &RunResult)> = rounds.iter().map(|(a, b)| (a, b)).collect();
        report
            .comparison
            .extend(compare::ratio_rows(&sc.name, &refs));
    }
    for rounds in pairs {
        for (ra, rb) in rounds {
            report.runs.push(ra);
            report.runs.push(rb);
        }
    }
    report.compared = Some((
        format!("{} ({})", c.label_a, c.a),
        format!("{} ({})", c.label_b, c.b),
    ));
    finish(report, &c.output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_become_overrides() {
        let cli = Cli::try_parse_from([
            "oxbow-loadtest",
            "produce",
            "--acks",
            "1",
            "--rate",
            "50%",
            "--topic-config",
            "min.insync.replicas=2",
            "--set",
            "groups=2",
            "--replication-factor",
            "-1",
        ])
        .expect("parses");
        let Command::Produce(cmd) = cli.command else {
            panic!("not produce");
        };
        let sc = Scenario::resolve(Kind::Produce, &[&cmd.flags.overrides().expect("ok")])
            .expect("resolves");
        assert_eq!(sc.acks, scenario::Acks::Leader);
        assert_eq!(sc.rate, scenario::Rate::FractionOfMax(0.5));
        assert_eq!(sc.groups, 2);
        assert_eq!(
            sc.topic_config
                .get("min.insync.replicas")
                .map(String::as_str),
            Some("2")
        );
    }

    #[test]
    fn compare_takes_a_scenario_subcommand() {
        let cli = Cli::try_parse_from([
            "oxbow-loadtest",
            "compare",
            "127.0.0.1:9092",
            "127.0.0.1:9192",
            "--rounds",
            "2",
            "--label-a",
            "oxbow",
            "latency",
            "--rate",
            "1000",
        ])
        .expect("parses");
        let Command::Compare(c) = cli.command else {
            panic!("not compare");
        };
        assert_eq!(c.rounds, 2);
        assert!(matches!(c.what, CompareWhat::Latency(ref f) if f.rate.as_deref() == Some("1000")));
    }

    #[test]
    fn bad_flag_values_are_reported() {
        let cli =
            Cli::try_parse_from(["oxbow-loadtest", "produce", "--acks", "2"]).expect("parses");
        let Command::Produce(cmd) = cli.command else {
            panic!("not produce");
        };
        assert!(Scenario::resolve(Kind::Produce, &[&cmd.flags.overrides().expect("ok")]).is_err());
    }
}
