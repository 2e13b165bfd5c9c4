//! Results: the JSON written by `--out`, the Markdown summary and the SVG plots.
//!
//! Units: throughput in MiB/s of record values (no keys, headers or protocol overhead),
//! latency in milliseconds. "Fraction of limit" divides a figure by the matching ceiling
//! that `oxbow-loadtest limits` measured on the same machine.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::compare::{verdict, RatioRow};
use crate::limits::Limits;
use crate::scenario::{Kind, Scenario};
use crate::stats::{CdfPoint, LatencySummary};
use crate::svg::{Chart, Series, XScale};

/// What the producers did in the measured window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProduceStats {
    /// Records and value bytes acknowledged inside the window.
    pub records: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub mib_per_s: f64,
    pub records_per_s: f64,
    /// Open loop: the rate asked for. `None`: closed loop (max).
    pub target_records_per_s: Option<f64>,
    /// From the intended send time (open loop) or the enqueue time (closed loop) to the
    /// acknowledgement. HTTP: per request of `http_batch_records` records.
    pub ack_latency: Option<LatencySummary>,
    /// Failed deliveries.
    pub errors: u64,
}

/// One consumer group tailing the topic.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupStats {
    pub group: String,
    /// Records and bytes consumed inside the window.
    pub records: u64,
    pub bytes: u64,
    pub mib_per_s: f64,
    /// Records sent (and acknowledged) in the window that the group had not read when the
    /// drain timed out.
    pub missing_records: u64,
}

/// Readers that read the prefill from the beginning.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CatchupStats {
    pub readers: u32,
    /// Summed over readers.
    pub records: u64,
    pub bytes: u64,
    /// From `assign()` to the last record (or to the time limit).
    pub seconds: f64,
    /// Summed over readers.
    pub mib_per_s: f64,
    pub first_record_ms: Option<f64>,
    /// Every reader reached the end offsets taken after the prefill.
    pub complete: bool,
    /// How the data was made cold (restart command, settle time).
    pub cold: String,
}

/// The prefill (closed loop, before the measured phase).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PrefillStats {
    pub records: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub mib_per_s: f64,
}

/// Throughput in one sampling interval, from the start of the measured phase (warmup
/// included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub t_s: f64,
    /// Wall-clock time of the sample (ms since the Unix epoch), to line the run up with
    /// broker logs and metrics; 0 in results written before it was recorded.
    #[serde(default)]
    pub unix_ms: u64,
    pub produced_mib_s: f64,
    pub consumed_mib_s: f64,
    /// Longest ack latency of the records acknowledged in the interval (ms).
    #[serde(default)]
    pub ack_max_ms: f64,
}

/// One scenario against one target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub label: String,
    pub bootstrap: String,
    /// `compare` round, from 1.
    pub round: Option<u32>,
    pub topic: String,
    pub scenario: Scenario,
    /// Closed-loop records/s measured to resolve `rate = "N%"`.
    pub probe_max_records_per_s: Option<f64>,
    pub prefill: Option<PrefillStats>,
    pub produce: Option<ProduceStats>,
    /// Send (intended time) → consumed, over every tailing group.
    pub e2e_latency: Option<LatencySummary>,
    pub groups: Vec<GroupStats>,
    pub catchup: Option<CatchupStats>,
    pub timeline: Vec<Sample>,
    pub ack_cdf: Vec<CdfPoint>,
    pub e2e_cdf: Vec<CdfPoint>,
    /// The first few client errors (delivery failures, broker connection errors).
    pub errors: Vec<String>,
}

impl RunResult {
    pub fn empty(label: &str, bootstrap: &str, kind: Kind) -> Self {
        RunResult {
            label: label.to_string(),
            bootstrap: bootstrap.to_string(),
            round: None,
            topic: String::new(),
            scenario: Scenario::preset(kind),
            probe_max_records_per_s: None,
            prefill: None,
            produce: None,
            e2e_latency: None,
            groups: Vec::new(),
            catchup: None,
            timeline: Vec::new(),
            ack_cdf: Vec::new(),
            e2e_cdf: Vec::new(),
            errors: Vec::new(),
        }
    }

    fn consumed_mib_per_s(&self) -> Option<f64> {
        (!self.groups.is_empty()).then(|| self.groups.iter().map(|g| g.mib_per_s).sum())
    }
}

/// The machine the figures come from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub hostname: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub memory_gib: f64,
    pub kernel: String,
}

impl Machine {
    /// Read from /proc (Linux); unknown fields stay empty.
    pub fn probe() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_string())
            .unwrap_or_default();
        let memory_gib = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|l| l.split_whitespace().next()?.parse::<f64>().ok())
            .map(|kib| kib / (1024.0 * 1024.0))
            .unwrap_or(0.0);
        Machine {
            hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
            cpu_model,
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            memory_gib,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "{} CPUs ({}), {:.0} GiB RAM, Linux {}",
            self.cpus,
            if self.cpu_model.is_empty() {
                "unknown model"
            } else {
                &self.cpu_model
            },
            self.memory_gib,
            self.kernel
        )
    }
}

/// Everything one invocation measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub tool: String,
    pub version: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub machine: Machine,
    /// The command line, shell-quoted.
    pub command: String,
    pub limits: Option<Limits>,
    pub runs: Vec<RunResult>,
    /// `compare`: labels of A and B and the ratio rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compared: Option<(String, String)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub comparison: Vec<RatioRow>,
}

/// Quotes one argument for a POSIX shell when needed.
pub fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        _ => "–".to_string(),
    }
}

fn latency_cell(l: Option<&LatencySummary>) -> String {
    match l {
        None => "–".to_string(),
        Some(l) => format!(
            "{} / {} / {} / {}",
            short(l.p50_ms),
            short(l.p99_ms),
            short(l.p999_ms),
            short(l.max_ms)
        ),
    }
}

/// Milliseconds with about three significant digits.
fn short(ms: f64) -> String {
    if ms >= 100.0 {
        format!("{ms:.0}")
    } else if ms >= 10.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.2}")
    }
}

fn run_name(r: &RunResult) -> String {
    match r.round {
        Some(n) => format!("{} r{n}", r.label),
        None => r.label.clone(),
    }
}

/// A run's figures as fractions of the machine's limits (`None`: no such figure).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fractions {
    /// Produce MiB/s ÷ sequential write with fdatasync (above 1: the broker does not
    /// fsync every byte it acknowledges).
    pub produce_of_disk: Option<f64>,
    /// Produce MiB/s ÷ one loopback TCP stream.
    pub produce_of_tcp: Option<f64>,
    /// Consumed MiB/s over all groups ÷ one loopback TCP stream.
    pub consumed_of_tcp: Option<f64>,
    /// Catch-up MiB/s ÷ one loopback TCP stream.
    pub catchup_of_tcp: Option<f64>,
    /// Catch-up MiB/s ÷ one-thread memory copy.
    pub catchup_of_memcpy: Option<f64>,
    /// 4 KiB write+fdatasync p50 ÷ ack p50: 1.0 means acks=all answers as fast as one
    /// fsync. Open-loop acks=all runs only (closed-loop latency is client queueing).
    pub fsync_floor_of_ack_p50: Option<f64>,
}

pub const FRACTION_HEADERS: [&str; 6] = [
    "produce ÷ fsync'd write",
    "produce ÷ loopback TCP",
    "consumed ÷ loopback TCP",
    "catch-up ÷ loopback TCP",
    "catch-up ÷ memory copy",
    "fdatasync p50 ÷ ack p50",
];

impl Fractions {
    pub fn cells(&self) -> [Option<f64>; 6] {
        [
            self.produce_of_disk,
            self.produce_of_tcp,
            self.consumed_of_tcp,
            self.catchup_of_tcp,
            self.catchup_of_memcpy,
            self.fsync_floor_of_ack_p50,
        ]
    }
}

/// The figures of a run that have a physical ceiling, against that ceiling.
pub fn fractions(run: &RunResult, limits: &Limits) -> Fractions {
    let of = |value: Option<f64>, limit: f64| {
        value
            .filter(|v| v.is_finite() && limit > 0.0)
            .map(|v| v / limit)
    };
    let produce = run.produce.as_ref();
    let produce_mib = produce.map(|p| p.mib_per_s);
    let catchup_mib = run.catchup.as_ref().map(|c| c.mib_per_s);
    let floor = limits.fsync_4k_latency.as_ref().map(|l| l.p50_ms);
    let ack_p50 = produce
        .filter(|p| p.target_records_per_s.is_some())
        .filter(|_| run.scenario.acks == crate::scenario::Acks::All)
        .and_then(|p| p.ack_latency.as_ref())
        .map(|l| l.p50_ms)
        .filter(|ms| *ms > 0.0);
    Fractions {
        produce_of_disk: of(produce_mib, limits.disk_write_fsync_mib_s),
        produce_of_tcp: of(produce_mib, limits.tcp_loopback_mib_s),
        consumed_of_tcp: of(run.consumed_mib_per_s(), limits.tcp_loopback_mib_s),
        catchup_of_tcp: of(catchup_mib, limits.tcp_loopback_mib_s),
        catchup_of_memcpy: of(catchup_mib, limits.memcpy_mib_s),
        fsync_floor_of_ack_p50: floor.zip(ack_p50).map(|(f, a)| f / a),
    }
}

impl Report {
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "## oxbow-loadtest results\n");
        let _ = writeln!(s, "- date: {}", self.started_at);
        let _ = writeln!(s, "- machine: {}", self.machine.describe());
        let _ = writeln!(s, "- command: `{}`", self.command);
        let _ = writeln!(
            s,
            "- units: MiB/s of record values; latency in ms as p50 / p99 / p99.9 / max\n"
        );
        if !self.runs.is_empty() {
            let _ = writeln!(
                s,
                "| scenario | target | rate | produce MiB/s | records/s | ack latency ms | e2e latency ms | consumed MiB/s | catch-up MiB/s | errors |"
            );
            let _ = writeln!(s, "|---|---|---|---:|---:|---|---|---:|---:|---:|");
            for r in &self.runs {
                let p = r.produce.as_ref();
                let rate = match p.and_then(|p| p.target_records_per_s) {
                    Some(t) => format!("{t:.0}/s"),
                    None if r.scenario.produces() => "max".to_string(),
                    None => "–".to_string(),
                };
                let catchup = r.catchup.as_ref().map(|c| {
                    format!(
                        "{:.1}{}",
                        c.mib_per_s,
                        if c.complete { "" } else { " (incomplete)" }
                    )
                });
                let errors = p.map_or(0, |p| p.errors);
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    r.scenario.name,
                    run_name(r),
                    rate,
                    opt(p.map(|p| p.mib_per_s), 1),
                    opt(p.map(|p| p.records_per_s), 0),
                    latency_cell(p.and_then(|p| p.ack_latency.as_ref())),
                    latency_cell(r.e2e_latency.as_ref()),
                    opt(r.consumed_mib_per_s(), 1),
                    catchup.unwrap_or_else(|| "–".into()),
                    errors,
                );
            }
            let _ = writeln!(s);
        }
        if let Some(limits) = &self.limits {
            let rows: Vec<(String, Fractions)> = self
                .runs
                .iter()
                .map(|r| {
                    (
                        format!("{} · {}", r.scenario.name, run_name(r)),
                        fractions(r, limits),
                    )
                })
                .filter(|(_, f)| f.cells().iter().any(Option::is_some))
                .collect();
            if !rows.is_empty() {
                let _ = writeln!(s, "Fractions of the machine's limits (below):\n");
                let _ = writeln!(s, "| run | {} |", FRACTION_HEADERS.join(" | "));
                let _ = writeln!(s, "|---|{}", "---:|".repeat(FRACTION_HEADERS.len()));
                for (run, f) in rows {
                    let cells: Vec<String> = f.cells().iter().map(|c| opt(*c, 3)).collect();
                    let _ = writeln!(s, "| {run} | {} |", cells.join(" | "));
                }
                let _ = writeln!(s);
            }
            s.push_str(&limits.to_markdown());
        }
        if let Some((a, b)) = &self.compared {
            let _ = writeln!(
                s,
                "Comparison, A = {a}, B = {b}, run in alternation (A B A B …); ratio = A ÷ B per round:\n"
            );
            let _ = writeln!(
                s,
                "| scenario | figure | A (median) | B (median) | A÷B per round | median A÷B | verdict |"
            );
            let _ = writeln!(s, "|---|---|---:|---:|---|---:|---|");
            for row in &self.comparison {
                let per_round: Vec<String> = row.ratios.iter().map(|r| opt(*r, 2)).collect();
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    row.scenario,
                    row.figure,
                    opt(row.median_a, 2),
                    opt(row.median_b, 2),
                    per_round.join(", "),
                    opt(row.median_ratio, 2),
                    verdict(row)
                );
            }
            let _ = writeln!(s);
        }
        let errors: Vec<String> = self
            .runs
            .iter()
            .flat_map(|r| {
                r.errors
                    .iter()
                    .map(move |e| format!("{}: {e}", run_name(r)))
            })
            .collect();
        if !errors.is_empty() {
            let _ = writeln!(s, "Client errors (first few per run):\n");
            for e in errors {
                let _ = writeln!(s, "- {e}");
            }
            let _ = writeln!(s);
        }
        s
    }

    /// Writes one throughput chart and one latency CDF per scenario name into `dir`;
    /// returns the files written.
    pub fn write_plots(&self, dir: &Path) -> anyhow::Result<Vec<String>> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut by_scenario: BTreeMap<&str, Vec<&RunResult>> = BTreeMap::new();
        for r in &self.runs {
            by_scenario.entry(&r.scenario.name).or_default().push(r);
        }
        let mut written = Vec::new();
        for (name, runs) in by_scenario {
            let mut throughput = Vec::new();
            let mut latency = Vec::new();
            // One colour per target; every round of a target draws in it, so the spread
            // between rounds shows. Dashed: consumed (throughput), end-to-end (latency).
            let mut labels: Vec<&str> = Vec::new();
            for r in &runs {
                if !labels.contains(&r.label.as_str()) {
                    labels.push(&r.label);
                }
                let colour = labels.iter().position(|l| *l == r.label).unwrap_or(0);
                let who = &r.label;
                let series = |name: String, points: Vec<(f64, f64)>, dashed| Series {
                    name,
                    points,
                    colour,
                    dashed,
                };
                if r.timeline.iter().any(|s| s.produced_mib_s > 0.0) {
                    throughput.push(series(
                        format!("{who} produced"),
                        r.timeline
                            .iter()
                            .map(|s| (s.t_s, s.produced_mib_s))
                            .collect(),
                        false,
                    ));
                }
                if r.timeline.iter().any(|s| s.consumed_mib_s > 0.0) {
                    throughput.push(series(
                        format!("{who} consumed"),
                        r.timeline
                            .iter()
                            .map(|s| (s.t_s, s.consumed_mib_s))
                            .collect(),
                        true,
                    ));
                }
                for (kind, cdf, dashed) in [("ack", &r.ack_cdf, false), ("e2e", &r.e2e_cdf, true)] {
                    if !cdf.is_empty() {
                        latency.push(series(
                            format!("{who} {kind}"),
                            cdf.iter().map(|p| (p.quantile, p.ms)).collect(),
                            dashed,
                        ));
                    }
                }
            }
            let file_stem: String = name
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect();
            let charts = [
                (
                    throughput,
                    Chart {
                        title: format!("{name}: throughput over time"),
                        x_label: "seconds since start (warmup included)".into(),
                        y_label: "MiB/s".into(),
                        x_scale: XScale::Linear,
                        series: Vec::new(),
                    },
                    "throughput",
                ),
                (
                    latency,
                    Chart {
                        title: format!("{name}: latency CDF"),
                        x_label: "percentile".into(),
                        y_label: "ms".into(),
                        x_scale: XScale::Nines,
                        series: Vec::new(),
                    },
                    "latency",
                ),
            ];
            for (series, mut chart, suffix) in charts {
                if series.is_empty() {
                    continue;
                }
                chart.series = series;
                let path = dir.join(format!("{file_stem}-{suffix}.svg"));
                std::fs::write(&path, chart.to_svg())
                    .with_context(|| format!("writing {}", path.display()))?;
                written.push(path.display().to_string());
            }
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_report() -> Report {
        let mut run = RunResult::empty("oxbow", "127.0.0.1:9092", Kind::Produce);
        run.produce = Some(ProduceStats {
            records: 1000,
            bytes: 1024 * 1000,
            seconds: 1.0,
            mib_per_s: 50.0,
            records_per_s: 1000.0,
            target_records_per_s: None,
            ack_latency: Some(LatencySummary {
                count: 1000,
                mean_ms: 2.0,
                p50_ms: 2.0,
                p90_ms: 3.0,
                p99_ms: 4.0,
                p999_ms: 5.0,
                max_ms: 6.0,
            }),
            errors: 0,
        });
        run.timeline = vec![
            Sample {
                t_s: 1.0,
                produced_mib_s: 49.0,
                ..Sample::default()
            },
            Sample {
                t_s: 2.0,
                produced_mib_s: 51.0,
                ..Sample::default()
            },
        ];
        run.ack_cdf = vec![
            CdfPoint {
                quantile: 0.5,
                ms: 2.0,
            },
            CdfPoint {
                quantile: 1.0,
                ms: 6.0,
            },
        ];
        Report {
            tool: "oxbow-loadtest".into(),
            version: "0".into(),
            started_at: "2026-11-29T00:00:00Z".into(),
            machine: Machine::default(),
            command: "oxbow-loadtest produce".into(),
            limits: Some(Limits {
                disk_write_fsync_mib_s: 200.0,
                tcp_loopback_mib_s: 1000.0,
                memcpy_mib_s: 5000.0,
                ..Limits::default()
            }),
            runs: vec![run],
            compared: None,
            comparison: Vec::new(),
        }
    }

    #[test]
    fn markdown_has_the_run_row_and_fractions() {
        let md = sample_report().to_markdown();
        assert!(
            md.contains("| produce | oxbow | max | 50.0 | 1000 | 2.00 / 4.00 / 5.00 / 6.00 |"),
            "{md}"
        );
        assert!(
            md.contains("| produce · oxbow | 0.250 | 0.050 | – | – | – | – |"),
            "{md}"
        );
    }

    #[test]
    fn report_json_round_trips() {
        let r = sample_report();
        let text = serde_json::to_string(&r).expect("serializes");
        let back: Report = serde_json::from_str(&text).expect("deserializes");
        assert_eq!(back, r);
    }

    #[test]
    fn plots_are_written_per_scenario() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = sample_report().write_plots(dir.path()).expect("writes");
        assert_eq!(files.len(), 2, "{files:?}");
        assert!(files.iter().all(|f| f.ends_with(".svg")));
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("--rate=50%"), "--rate=50%");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
