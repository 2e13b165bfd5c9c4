//! Runs one scenario against one target, phase by phase:
//!
//! 1. create a fresh topic (`lt-{name}-{nonce}`) and wait until every partition has a leader;
//! 2. `rate = "N%"`: a closed-loop probe on a scratch topic measures the max records/s;
//! 3. prefill (closed loop, Kafka protocol), then the end offsets are taken;
//! 4. cold data: the restart command (if any) runs and the topic must have leaders again,
//!    then `settle` passes so the broker seals what it holds into objects;
//! 5. the measured phase: tailing groups join first (the phase starts only once each is
//!    assigned), then producers and catch-up readers start; throughput is sampled every
//!    second; after `warmup + duration` producers stop and flush, and tailing groups get up
//!    to 10 s to read every record sent in the window;
//! 6. the topic is deleted (unless `delete_topic = false`).

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::runtime::Runtime;

use crate::clock::{now_ns, ns, Window};
use crate::counters::{ConsumeCounters, ErrorLog, ProduceCounters};
use crate::http::{self, HttpLanePlan};
use crate::kafka::{self, Admin, LanePlan, ReaderOutcome, TailPlan};
use crate::payload::Payloads;
use crate::report::{CatchupStats, GroupStats, PrefillStats, ProduceStats, RunResult, Sample};
use crate::scenario::{Protocol, Rate, Scenario};
use crate::schedule::OpenLoop;
use crate::stats::{cdf, mib_per_s, new_histogram, summarize};

/// Where a scenario runs.
#[derive(Clone, Debug)]
pub struct Target {
    /// Name in reports (`oxbow`, `kafka`, …).
    pub label: String,
    /// Kafka bootstrap `host:port[,host:port]`.
    pub bootstrap: String,
    /// Base URL of the HTTP API (`http://127.0.0.1:8080`), for `protocol = "http"`.
    pub http: Option<String>,
    /// Overrides the scenario's `restart_cmd` for this target.
    pub restart_cmd: Option<String>,
}

/// How long tailing groups may take to get their first assignment.
const ASSIGN_TIMEOUT: Duration = Duration::from_secs(60);
/// How long tailing groups may take, after producers stop, to read the window's records.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Warmup of the `rate = "N%"` probe.
const PROBE_WARMUP: Duration = Duration::from_secs(2);
/// Timeline resolution.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

fn random_u64() -> u64 {
    std::collections::hash_map::RandomState::new().hash_one((std::process::id(), now_ns()))
}

fn bar(prefix: String, len: u64, unit: &str) -> ProgressBar {
    let pb = ProgressBar::new(len.max(1));
    let template = format!("{{prefix}} [{{bar:24}}] {{pos}}/{{len}}{unit} {{msg}}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(prefix);
    pb
}

/// Running producer lanes (threads for Kafka, tasks for HTTP).
struct Producers {
    counters: Arc<ProduceCounters>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<anyhow::Result<Histogram<u64>>>>,
    tasks: Vec<tokio::task::JoinHandle<Histogram<u64>>>,
}

/// What to start.
struct ProduceSpec<'a> {
    sc: &'a Scenario,
    target: &'a Target,
    topic: &'a str,
    protocol: Protocol,
    /// Records/s over all lanes; `None` = closed loop.
    rate: Option<f64>,
    start_ns: u64,
    window: Window,
    /// Records over all lanes (prefill); `u64::MAX` = until `window.end_ns`.
    records: u64,
    nonce: u64,
}

fn start_producers(rt: &Runtime, spec: ProduceSpec<'_>) -> anyhow::Result<Producers> {
    let sc = spec.sc;
    let counters = Arc::new(ProduceCounters::new(spec.window));
    let stop = Arc::new(AtomicBool::new(false));
    let payloads = Arc::new(Payloads::new(sc.record_size, spec.nonce));
    let mut threads = Vec::new();
    let mut tasks = Vec::new();
    match spec.protocol {
        Protocol::Kafka => {
            let config = kafka::producer_config(&spec.target.bootstrap, sc);
            let lanes = sc.producers;
            for lane in 0..lanes {
                let plan = LanePlan {
                    schedule: spec
                        .rate
                        .map(|r| OpenLoop::lane(spec.start_ns, r, lanes, lane)),
                    end_ns: spec.window.end_ns,
                    max_records: share(spec.records, lanes, lane),
                    first_index: u64::from(lane) << 40,
                };
                let (config, topic) = (config.clone(), spec.topic.to_string());
                let (payloads, counters, stop) = (
                    Arc::clone(&payloads),
                    Arc::clone(&counters),
                    Arc::clone(&stop),
                );
                threads.push(
                    std::thread::Builder::new()
                        .name(format!("producer-{lane}"))
                        .spawn(move || {
                            kafka::run_lane(&config, &topic, plan, &payloads, counters, &stop)
                        })
                        .context("spawning producer thread")?,
                );
            }
        }
        Protocol::Http => {
            let base = spec
                .target
                .http
                .as_deref()
                .context("protocol = \"http\" needs the target's HTTP address (--http)")?;
            let url = format!("{}/topics/{}", base.trim_end_matches('/'), spec.topic);
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .context("building HTTP client")?;
            let lanes = sc.http_concurrency;
            let per_request = sc.http_batch_records;
            for lane in 0..lanes {
                let plan = HttpLanePlan {
                    schedule: spec.rate.map(|r| {
                        OpenLoop::lane(spec.start_ns, r / f64::from(per_request), lanes, lane)
                    }),
                    end_ns: spec.window.end_ns,
                    records_per_request: per_request,
                    first_index: u64::from(lane) << 40,
                };
                tasks.push(rt.spawn(http::run_lane(
                    client.clone(),
                    url.clone(),
                    plan,
                    Arc::clone(&payloads),
                    Arc::clone(&counters),
                    Arc::clone(&stop),
                )));
            }
        }
    }
    Ok(Producers {
        counters,
        stop,
        threads,
        tasks,
    })
}

/// Lane `lane`'s share of `total` records.
fn share(total: u64, lanes: u32, lane: u32) -> u64 {
    if total == u64::MAX {
        return u64::MAX;
    }
    let lanes = u64::from(lanes.max(1));
    total / lanes + u64::from(u64::from(lane) < total % lanes)
}

impl Producers {
    fn finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished()) && self.tasks.iter().all(|t| t.is_finished())
    }

    /// Stops the lanes, waits for their flush, and merges their latencies.
    fn join(self, rt: &Runtime) -> anyhow::Result<(Histogram<u64>, Arc<ProduceCounters>)> {
        self.stop.store(true, Ordering::Relaxed);
        let mut latency = new_histogram();
        for t in self.threads {
            let h = t
                .join()
                .map_err(|_| anyhow::anyhow!("producer thread panicked"))??;
            latency.add(&h).context("merging histograms")?;
        }
        for t in self.tasks {
            let h = rt.block_on(t).context("HTTP lane failed")?;
            latency.add(&h).context("merging histograms")?;
        }
        Ok((latency, self.counters))
    }
}

/// Waits until the producers end by themselves (prefill), showing acked bytes.
fn wait_producers(producers: &Producers, pb: &ProgressBar, total_bytes: u64) {
    while !producers.finished() {
        let acked = producers.counters.bytes_total.load(Ordering::Relaxed);
        pb.set_position(acked.min(total_bytes) >> 20);
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn topic_name(name: &str, nonce: u64) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("lt-{clean}-{:08x}", nonce as u32)
}

/// Runs `sc` against `target`.
pub fn run(
    rt: &Runtime,
    target: &Target,
    sc: &Scenario,
    round: Option<u32>,
) -> anyhow::Result<RunResult> {
    let nonce = random_u64();
    let topic = topic_name(&sc.name, nonce);
    let who = match round {
        Some(r) => format!("{} r{r}", target.label),
        None => target.label.clone(),
    };
    let mut result = RunResult::empty(&target.label, &target.bootstrap, sc.kind);
    result.round = round;
    result.topic = topic.clone();
    result.scenario = sc.clone();
    eprintln!("[{who}] {}: topic {topic}", sc.name);

    let admin = Admin::connect(&target.bootstrap, sc)?;
    admin.create_topic(rt, &topic, sc.partitions, sc)?;
    admin.wait_ready(&topic, sc.partitions, Duration::from_secs(60))?;

    // Rate.
    let rate = match sc.rate {
        Rate::FractionOfMax(_) => {
            let max = probe(rt, target, sc, &admin, &who)?;
            result.probe_max_records_per_s = Some(max);
            sc.rate.records_per_sec(sc.record_size, Some(max))
        }
        other => other.records_per_sec(sc.record_size, None),
    };

    // Prefill, cold data.
    let mut ends = Vec::new();
    let mut cold = String::new();
    if sc.prefill.0 > 0 {
        let records = sc.prefill.0.div_ceil(sc.record_size as u64);
        let total_bytes = records * sc.record_size as u64;
        let pb = bar(format!("[{who}] prefill"), total_bytes >> 20, " MiB");
        let started = now_ns();
        let producers = start_producers(
            rt,
            ProduceSpec {
                sc,
                target,
                topic: &topic,
                protocol: Protocol::Kafka,
                rate: None,
                start_ns: started,
                window: Window::unbounded(),
                records,
                nonce,
            },
        )?;
        wait_producers(&producers, &pb, total_bytes);
        let (_, counters) = producers.join(rt)?;
        pb.finish_and_clear();
        let seconds = (now_ns() - started) as f64 / 1e9;
        let bytes = counters.bytes_total.load(Ordering::Relaxed);
        let acked = counters.records_total.load(Ordering::Relaxed);
        if acked < records {
            bail!(
                "prefill: only {acked} of {records} records acknowledged: {:?}",
                counters.errors.messages()
            );
        }
        result.prefill = Some(PrefillStats {
            records: acked,
            bytes,
            seconds,
            mib_per_s: mib_per_s(bytes, seconds),
        });
        eprintln!("[{who}] prefill: {} MiB in {seconds:.1} s", bytes >> 20);
        ends = admin.end_offsets(&topic, sc.partitions, Duration::from_secs(30))?;

        let restart = target.restart_cmd.as_ref().or(sc.restart_cmd.as_ref());
        if let Some(cmd) = restart {
            eprintln!("[{who}] restart: {cmd}");
            let status = std::process::Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .env("OXBOW_LOADTEST_BOOTSTRAP", &target.bootstrap)
                .env("OXBOW_LOADTEST_LABEL", &target.label)
                .env("OXBOW_LOADTEST_TOPIC", &topic)
                .status()
                .with_context(|| format!("running restart command {cmd:?}"))?;
            if !status.success() {
                bail!("restart command {cmd:?} failed: {status}");
            }
            // Fresh clients: the old ones are mid-reconnect to the restarted broker.
            let admin = Admin::connect(&target.bootstrap, sc)?;
            admin.wait_ready(&topic, sc.partitions, Duration::from_secs(120))?;
            let after = admin.end_offsets(&topic, sc.partitions, Duration::from_secs(120))?;
            if after != ends {
                bail!("end offsets changed across the restart: {ends:?} → {after:?}");
            }
            cold = format!("restart command `{cmd}`, then settle {:?}", sc.settle);
        } else {
            cold = format!(
                "no restart; settle {:?} (the broker may still hold the data in memory)",
                sc.settle
            );
        }
        std::thread::sleep(sc.settle);
    }

    measured_phase(
        rt,
        target,
        sc,
        &topic,
        nonce,
        rate,
        &ends,
        &who,
        &mut result,
    )?;
    if let Some(c) = result.catchup.as_mut() {
        c.cold = cold;
    }

    if sc.delete_topic {
        let admin = Admin::connect(&target.bootstrap, sc)?;
        if let Err(e) = admin.delete_topic(rt, &topic) {
            eprintln!("[{who}] note: {e:#}");
        }
    }
    Ok(result)
}

/// Closed-loop produce on a scratch topic; returns records/s.
fn probe(
    rt: &Runtime,
    target: &Target,
    sc: &Scenario,
    admin: &Admin,
    who: &str,
) -> anyhow::Result<f64> {
    let topic = topic_name(&format!("{}-probe", sc.name), random_u64());
    admin.create_topic(rt, &topic, sc.partitions, sc)?;
    admin.wait_ready(&topic, sc.partitions, Duration::from_secs(60))?;
    let start = now_ns();
    let window = Window {
        start_ns: start + ns(PROBE_WARMUP),
        end_ns: start + ns(PROBE_WARMUP + sc.probe_duration),
    };
    let total_s = (PROBE_WARMUP + sc.probe_duration).as_secs();
    let pb = bar(format!("[{who}] probe max"), total_s, "s");
    let producers = start_producers(
        rt,
        ProduceSpec {
            sc,
            target,
            topic: &topic,
            protocol: sc.protocol,
            rate: None,
            start_ns: start,
            window,
            records: u64::MAX,
            nonce: random_u64(),
        },
    )?;
    while now_ns() < window.end_ns {
        pb.set_position((now_ns() - start) / 1_000_000_000);
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, counters) = producers.join(rt)?;
    pb.finish_and_clear();
    let max = counters.window_records.load(Ordering::Relaxed) as f64 / window.seconds();
    if sc.delete_topic {
        let _ = admin.delete_topic(rt, &topic);
    }
    if max <= 0.0 {
        bail!(
            "probe acknowledged nothing: {:?}",
            counters.errors.messages()
        );
    }
    eprintln!("[{who}] probe: max {max:.0} records/s");
    Ok(max)
}

struct Group {
    name: String,
    counters: Arc<ConsumeCounters>,
    threads: Vec<JoinHandle<anyhow::Result<Histogram<u64>>>>,
}

#[allow(clippy::too_many_arguments)]
fn measured_phase(
    rt: &Runtime,
    target: &Target,
    sc: &Scenario,
    topic: &str,
    nonce: u64,
    rate: Option<f64>,
    ends: &[(i32, i64)],
    who: &str,
    result: &mut RunResult,
) -> anyhow::Result<()> {
    let consumer_errors = Arc::new(ErrorLog::default());
    let stop_consumers = Arc::new(AtomicBool::new(false));
    // The window is fixed only once the groups are assigned, so consumers read it from a
    // slot set then; until it is set nothing they read counts.
    let window_slot: Arc<std::sync::OnceLock<Window>> = Arc::new(std::sync::OnceLock::new());

    // 1. Tailing groups join before anything is produced.
    let mut groups = Vec::new();
    let mut assigned_flags = Vec::new();
    let offset_reset = if sc.prefill.0 > 0 {
        "latest"
    } else {
        "earliest"
    };
    for g in 0..sc.groups {
        let name = format!("lt-{:08x}-g{g}", nonce as u32);
        let counters = Arc::new(ConsumeCounters::default());
        let mut threads = Vec::new();
        for c in 0..sc.consumers_per_group {
            let assigned = Arc::new(AtomicBool::new(false));
            assigned_flags.push(Arc::clone(&assigned));
            let (bootstrap, sc2, topic) = (target.bootstrap.clone(), sc.clone(), topic.to_string());
            let (counters, errors, stop, slot, group) = (
                Arc::clone(&counters),
                Arc::clone(&consumer_errors),
                Arc::clone(&stop_consumers),
                Arc::clone(&window_slot),
                name.clone(),
            );
            threads.push(
                std::thread::Builder::new()
                    .name(format!("group-{g}-{c}"))
                    .spawn(move || {
                        let plan = TailPlan {
                            group,
                            offset_reset,
                            nonce,
                        };
                        kafka::run_tail_consumer(
                            &bootstrap, &sc2, &topic, plan, counters, assigned, errors, &stop,
                            &slot,
                        )
                    })
                    .context("spawning consumer thread")?,
            );
        }
        groups.push(Group {
            name,
            counters,
            threads,
        });
    }
    if !assigned_flags.is_empty() {
        let deadline = now_ns() + ns(ASSIGN_TIMEOUT);
        while !assigned_flags.iter().all(|a| a.load(Ordering::Acquire)) {
            if now_ns() > deadline {
                stop_consumers.store(true, Ordering::Relaxed);
                bail!(
                    "consumer groups not assigned within {ASSIGN_TIMEOUT:?}: {:?}",
                    consumer_errors.messages()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // 2. The window, then producers and catch-up readers.
    let start = now_ns() + 50_000_000;
    let window = Window {
        start_ns: start + ns(sc.warmup),
        end_ns: start + ns(sc.warmup + sc.duration),
    };
    let _ = window_slot.set(window);
    let producers = if sc.produces() {
        Some(start_producers(
            rt,
            ProduceSpec {
                sc,
                target,
                topic,
                protocol: sc.protocol,
                rate,
                start_ns: start,
                window,
                records: u64::MAX,
                nonce,
            },
        )?)
    } else {
        None
    };
    let catchup_counters = Arc::new(ConsumeCounters::default());
    let stop_readers = Arc::new(AtomicBool::new(false));
    let mut readers: Vec<JoinHandle<anyhow::Result<ReaderOutcome>>> = Vec::new();
    for r in 0..sc.catchup_readers {
        let (bootstrap, sc2, topic, ends) = (
            target.bootstrap.clone(),
            sc.clone(),
            topic.to_string(),
            ends.to_vec(),
        );
        let (counters, errors, stop) = (
            Arc::clone(&catchup_counters),
            Arc::clone(&consumer_errors),
            Arc::clone(&stop_readers),
        );
        readers.push(
            std::thread::Builder::new()
                .name(format!("catchup-{r}"))
                .spawn(move || {
                    kafka::run_catchup_reader(
                        &bootstrap, &sc2, &topic, &ends, counters, errors, &stop,
                    )
                })
                .context("spawning catch-up reader")?,
        );
    }

    // 3. Sample until the window ends (catch-up alone: until the readers finish).
    let total_s = (sc.warmup + sc.duration).as_secs();
    let pb = bar(format!("[{who}] {}", sc.name), total_s, "s");
    let mut last = (now_ns(), 0u64, 0u64);
    let consumed_total = |groups: &[Group]| -> u64 {
        groups
            .iter()
            .map(|g| g.counters.bytes_total.load(Ordering::Relaxed))
            .sum::<u64>()
            + catchup_counters.bytes_total.load(Ordering::Relaxed)
    };
    let mut next_sample = now_ns() + ns(SAMPLE_EVERY);
    loop {
        let now = now_ns();
        let readers_done = !readers.is_empty() && readers.iter().all(|r| r.is_finished());
        if now >= window.end_ns || (!sc.produces() && readers_done) {
            break;
        }
        if now >= next_sample {
            let produced = producers
                .as_ref()
                .map_or(0, |p| p.counters.bytes_total.load(Ordering::Relaxed));
            let consumed = consumed_total(&groups);
            let dt = (now - last.0) as f64 / 1e9;
            let sample = Sample {
                t_s: (now.saturating_sub(start)) as f64 / 1e9,
                unix_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                produced_mib_s: mib_per_s(produced - last.1, dt),
                consumed_mib_s: mib_per_s(consumed - last.2, dt),
                ack_max_ms: producers
                    .as_ref()
                    .map_or(0.0, |p| p.counters.take_ack_max_ms()),
            };
            pb.set_message(format!(
                "produce {:.1} MiB/s, consume {:.1} MiB/s",
                sample.produced_mib_s, sample.consumed_mib_s
            ));
            result.timeline.push(sample);
            last = (now, produced, consumed);
            next_sample += ns(SAMPLE_EVERY);
        }
        pb.set_position(now.saturating_sub(start) / 1_000_000_000);
        std::thread::sleep(Duration::from_millis(50));
    }
    pb.finish_and_clear();

    // 4. Stop producers (flush), drain groups, stop readers.
    let ended_ns = now_ns();
    stop_readers.store(true, Ordering::Relaxed);
    let mut produce_counters = None;
    if let Some(producers) = producers {
        let (latency, counters) = producers.join(rt)?;
        result.ack_cdf = cdf(&latency);
        let seconds = window.seconds();
        let bytes = counters.window_bytes.load(Ordering::Relaxed);
        let records = counters.window_records.load(Ordering::Relaxed);
        result.produce = Some(ProduceStats {
            records,
            bytes,
            seconds,
            mib_per_s: mib_per_s(bytes, seconds),
            records_per_s: records as f64 / seconds,
            target_records_per_s: rate,
            ack_latency: summarize(&latency),
            errors: counters.failed.load(Ordering::Relaxed),
        });
        result.errors.extend(counters.errors.messages());
        produce_counters = Some(counters);
    }
    if let Some(counters) = &produce_counters {
        let want = counters.sent_in_window_acked.load(Ordering::Relaxed);
        let deadline = now_ns() + ns(DRAIN_TIMEOUT);
        while now_ns() < deadline
            && groups
                .iter()
                .any(|g| g.counters.sent_in_window.load(Ordering::Relaxed) < want)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    stop_consumers.store(true, Ordering::Relaxed);
    let mut e2e = new_histogram();
    let want = produce_counters
        .as_ref()
        .map_or(0, |c| c.sent_in_window_acked.load(Ordering::Relaxed));
    for g in groups {
        for t in g.threads {
            let h = t
                .join()
                .map_err(|_| anyhow::anyhow!("consumer thread panicked"))??;
            e2e.add(&h).context("merging histograms")?;
        }
        let bytes = g.counters.window_bytes.load(Ordering::Relaxed);
        result.groups.push(GroupStats {
            group: g.name,
            records: g.counters.window_records.load(Ordering::Relaxed),
            bytes,
            mib_per_s: mib_per_s(bytes, window.seconds()),
            missing_records: want.saturating_sub(g.counters.sent_in_window.load(Ordering::Relaxed)),
        });
    }
    result.e2e_latency = summarize(&e2e);
    result.e2e_cdf = cdf(&e2e);

    let mut outcomes = Vec::new();
    for r in readers {
        outcomes.push(
            r.join()
                .map_err(|_| anyhow::anyhow!("catch-up reader panicked"))??,
        );
    }
    if !outcomes.is_empty() {
        let started = outcomes
            .iter()
            .map(|o| o.started_ns)
            .min()
            .unwrap_or(ended_ns);
        let complete = outcomes.iter().all(|o| o.complete);
        let finished = if complete {
            outcomes
                .iter()
                .filter_map(|o| o.last_ns)
                .max()
                .unwrap_or(ended_ns)
        } else {
            ended_ns
        };
        let first = outcomes.iter().filter_map(|o| o.first_ns).min();
        let seconds = (finished.saturating_sub(started)) as f64 / 1e9;
        let bytes = catchup_counters.bytes_total.load(Ordering::Relaxed);
        result.catchup = Some(CatchupStats {
            readers: sc.catchup_readers,
            records: catchup_counters.records_total.load(Ordering::Relaxed),
            bytes,
            seconds,
            mib_per_s: mib_per_s(bytes, seconds),
            first_record_ms: first.map(|f| f.saturating_sub(started) as f64 / 1e6),
            complete,
            cold: String::new(),
        });
    }
    result.errors.extend(consumer_errors.messages());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up() {
        let total: u64 = (0..3).map(|l| share(10, 3, l)).sum();
        assert_eq!(total, 10);
        assert_eq!(share(10, 3, 0), 4);
        assert_eq!(share(u64::MAX, 3, 1), u64::MAX);
    }

    #[test]
    fn topic_names_are_safe() {
        assert_eq!(topic_name("a b/c", 0x1_2345_6789), "lt-a-b-c-23456789");
    }
}
