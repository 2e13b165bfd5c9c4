//! librdkafka clients: topic admin, producer lanes, tailing consumers and catch-up readers.
//!
//! Every load thread owns one librdkafka client. Producers are `ThreadedProducer`s: their
//! own thread polls delivery reports continuously, so an ack is timed when it arrives, not
//! when the sending loop next gets round to polling (a `BaseProducer` polled every N sends
//! falls behind its delivery reports at low rates and inflates ack latency). Consumers are
//! `BaseConsumer`s polled by their thread.
//! Latency is taken from the send time in the record value ([`crate::payload`]) or the
//! delivery opaque, against [`crate::clock::now_ns`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use tokio::runtime::Runtime;

use crate::clock::{now_ns, Window};
use crate::counters::{ConsumeCounters, ErrorLog, ProduceCounters};
use crate::payload::{read_header, Payloads};
use crate::scenario::Scenario;
use crate::schedule::OpenLoop;
use crate::stats::{new_histogram, record_ns};

/// Settings every client gets, then the scenario's `client_config` on top.
pub fn base_config(bootstrap: &str, extra: &BTreeMap<String, String>) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", "oxbow-loadtest")
        // librdkafka logs through the `log` crate, which has no logger here; errors reach
        // the contexts' `error()` and end up in the report.
        .set("log_level", "3");
    for (k, v) in extra {
        c.set(k, v);
    }
    c
}

/// Producer settings from the scenario.
pub fn producer_config(bootstrap: &str, sc: &Scenario) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", "oxbow-loadtest")
        .set("log_level", "3")
        .set("acks", sc.acks.config_value())
        .set("linger.ms", sc.linger_ms.to_string())
        .set("batch.size", sc.batch_bytes.0.to_string())
        .set("compression.type", sc.compression.config_value())
        .set("enable.idempotence", sc.idempotence.to_string());
    for (k, v) in &sc.client_config {
        c.set(k, v);
    }
    c
}

/// Topic management and metadata through one admin client and one metadata consumer.
pub struct Admin {
    admin: AdminClient<DefaultClientContext>,
    meta: BaseConsumer,
}

impl Admin {
    pub fn connect(bootstrap: &str, sc: &Scenario) -> anyhow::Result<Self> {
        let admin = base_config(bootstrap, &sc.client_config)
            .create()
            .context("creating admin client")?;
        let meta = base_config(bootstrap, &sc.client_config)
            .set("group.id", "oxbow-loadtest-metadata")
            .set("allow.auto.create.topics", "false")
            .create()
            .context("creating metadata client")?;
        Ok(Admin { admin, meta })
    }

    pub fn create_topic(
        &self,
        rt: &Runtime,
        topic: &str,
        partitions: i32,
        sc: &Scenario,
    ) -> anyhow::Result<()> {
        let mut new = NewTopic::new(
            topic,
            partitions,
            TopicReplication::Fixed(sc.replication_factor),
        );
        for (k, v) in &sc.topic_config {
            new = new.set(k, v);
        }
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = rt
            .block_on(self.admin.create_topics([&new], &opts))
            .with_context(|| format!("creating topic {topic}"))?;
        for r in results {
            match r {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => bail!("creating topic {name}: {code}"),
            }
        }
        Ok(())
    }

    pub fn delete_topic(&self, rt: &Runtime, topic: &str) -> anyhow::Result<()> {
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = rt
            .block_on(self.admin.delete_topics(&[topic], &opts))
            .with_context(|| format!("deleting topic {topic}"))?;
        for r in results {
            if let Err((name, code)) = r {
                bail!("deleting topic {name}: {code}");
            }
        }
        Ok(())
    }

    /// Waits until the topic has `partitions` partitions, each with a leader.
    pub fn wait_ready(
        &self,
        topic: &str,
        partitions: i32,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut last = String::from("no answer");
        while Instant::now() < deadline {
            match self
                .meta
                .fetch_metadata(Some(topic), Duration::from_secs(5))
            {
                Ok(md) => {
                    let ready = md.topics().iter().any(|t| {
                        t.name() == topic
                            && t.error().is_none()
                            && t.partitions().len() == partitions as usize
                            && t.partitions()
                                .iter()
                                .all(|p| p.leader() >= 0 && p.error().is_none())
                    });
                    if ready {
                        return Ok(());
                    }
                    last = "partitions without a leader".into();
                }
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        bail!("topic {topic} not ready after {timeout:?}: {last}")
    }

    /// High watermark of every partition. Retried for up to `timeout`: a broker that has
    /// just restarted may name a leader in metadata before that leader serves offsets
    /// (Kafka answers NOT_LEADER_OR_FOLLOWER while it loads the partition).
    pub fn end_offsets(
        &self,
        topic: &str,
        partitions: i32,
        timeout: Duration,
    ) -> anyhow::Result<Vec<(i32, i64)>> {
        let deadline = Instant::now() + timeout;
        (0..partitions)
            .map(|p| loop {
                match self
                    .meta
                    .fetch_watermarks(topic, p, Duration::from_secs(10))
                {
                    Ok((_, high)) => return Ok((p, high)),
                    Err(e) if Instant::now() >= deadline => {
                        return Err(e).with_context(|| format!("watermarks of {topic}-{p}"))
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(250)),
                }
            })
            .collect()
    }
}

/// What one producer lane sends.
#[derive(Clone, Copy, Debug)]
pub struct LanePlan {
    /// Open loop; `None` sends as fast as the client's queue accepts.
    pub schedule: Option<OpenLoop>,
    /// Nothing is sent at or after this time.
    pub end_ns: u64,
    /// At most this many records.
    pub max_records: u64,
    /// Index of the lane's first record (varies the filler).
    pub first_index: u64,
}

struct LaneContext {
    counters: Arc<ProduceCounters>,
    latency: Mutex<Histogram<u64>>,
    record_bytes: u64,
}

impl ClientContext for LaneContext {
    fn error(&self, error: KafkaError, reason: &str) {
        self.counters
            .errors
            .note(format!("producer: {error}: {reason}"));
    }
}

impl ProducerContext for LaneContext {
    /// The send time (ns on [`now_ns`]'s clock).
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, sent: usize) {
        let now = now_ns();
        let sent = sent as u64;
        match result {
            Ok(_) => {
                self.counters.acked(1, self.record_bytes, sent, now);
                if self.counters.window.contains(sent) {
                    let mut h = self.latency.lock().expect("latency lock is never poisoned");
                    record_ns(&mut h, now.saturating_sub(sent));
                }
            }
            Err((e, _)) => self.counters.failed(1, format!("delivery: {e}")),
        }
    }
}

/// Waits `gap_ns` (at most 5 ms, so `stop` is seen promptly).
fn wait(gap_ns: u64) {
    std::thread::sleep(Duration::from_nanos(gap_ns.min(5_000_000)));
}

/// Runs one producer lane to its end (or `stop`), flushes, and returns its ack latencies.
/// Records that were due but never sent (the phase ended while the lane was behind) are
/// counted as failed, so an overloaded open-loop run cannot look clean.
pub fn run_lane(
    config: &ClientConfig,
    topic: &str,
    plan: LanePlan,
    payloads: &Payloads,
    counters: Arc<ProduceCounters>,
    stop: &AtomicBool,
) -> anyhow::Result<Histogram<u64>> {
    let context = LaneContext {
        counters: Arc::clone(&counters),
        latency: Mutex::new(new_histogram()),
        record_bytes: payloads.record_size() as u64,
    };
    let producer: ThreadedProducer<LaneContext> = config
        .create_with_context(context)
        .context("creating producer")?;
    let mut value = Vec::with_capacity(payloads.record_size());
    let mut i = 0u64;
    'send: while i < plan.max_records && !stop.load(Ordering::Relaxed) {
        let now = now_ns();
        let sent = match plan.schedule {
            Some(schedule) => {
                let due = schedule.intended_ns(i);
                if due > now {
                    if due >= plan.end_ns {
                        break;
                    }
                    wait(due - now);
                    continue;
                }
                due
            }
            None => now,
        };
        if sent >= plan.end_ns {
            break;
        }
        payloads.fill(&mut value, plan.first_index + i, sent);
        let mut record: BaseRecord<'_, [u8], [u8], usize> =
            BaseRecord::with_opaque_to(topic, sent as usize).payload(&value[..]);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                    if stop.load(Ordering::Relaxed) {
                        break 'send;
                    }
                }
                Err((e, _)) => {
                    counters.failed(1, format!("send: {e}"));
                    break;
                }
            }
        }
        i += 1;
    }
    if let Some(schedule) = plan.schedule {
        let last = plan.end_ns.saturating_sub(1).min(now_ns());
        let due = schedule.due(last).min(plan.max_records);
        if due > i {
            counters.failed(due - i, format!("{} records due but not sent before the phase ended (generator or client queue behind)", due - i));
        }
    }
    if let Err(e) = producer.flush(Duration::from_secs(30)) {
        counters.errors.note(format!("flush: {e}"));
    }
    let latency = producer
        .context()
        .latency
        .lock()
        .expect("latency lock is never poisoned")
        .clone();
    Ok(latency)
}

struct ConsumerCtx {
    assigned: Arc<AtomicBool>,
    errors: Arc<ErrorLog>,
}

impl ClientContext for ConsumerCtx {
    fn error(&self, error: KafkaError, reason: &str) {
        self.errors.note(format!("consumer: {error}: {reason}"));
    }
}

impl ConsumerContext for ConsumerCtx {
    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(_) = rebalance {
            self.assigned.store(true, Ordering::Release);
        }
    }
}

/// A consumer in a group that reads the topic while producers run.
pub struct TailPlan {
    pub group: String,
    /// `earliest` on a fresh topic (nothing is missed), `latest` after a prefill.
    pub offset_reset: &'static str,
    pub nonce: u64,
}

/// Creates the consumer and subscribes; `assigned` turns true at its first assignment.
fn tail_consumer(
    bootstrap: &str,
    sc: &Scenario,
    topic: &str,
    plan: &TailPlan,
    assigned: Arc<AtomicBool>,
    errors: Arc<ErrorLog>,
) -> anyhow::Result<BaseConsumer<ConsumerCtx>> {
    let consumer: BaseConsumer<ConsumerCtx> = base_config(bootstrap, &sc.client_config)
        .set("group.id", &plan.group)
        .set("auto.offset.reset", plan.offset_reset)
        .set("enable.auto.commit", "true")
        .set("enable.partition.eof", "false")
        .create_with_context(ConsumerCtx { assigned, errors })
        .context("creating consumer")?;
    consumer.subscribe(&[topic]).context("subscribing")?;
    Ok(consumer)
}

/// Polls until `stop`, counting records and recording send → consume latency. The window
/// is set once the consumer groups are assigned (`window`); before that nothing counts.
#[allow(clippy::too_many_arguments)]
pub fn run_tail_consumer(
    bootstrap: &str,
    sc: &Scenario,
    topic: &str,
    plan: TailPlan,
    counters: Arc<ConsumeCounters>,
    assigned: Arc<AtomicBool>,
    errors: Arc<ErrorLog>,
    stop: &AtomicBool,
    window: &OnceLock<Window>,
) -> anyhow::Result<Histogram<u64>> {
    let consumer = tail_consumer(bootstrap, sc, topic, &plan, assigned, Arc::clone(&errors))?;
    let mut latency = new_histogram();
    let never = Window {
        start_ns: u64::MAX,
        end_ns: u64::MAX,
    };
    while !stop.load(Ordering::Relaxed) {
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(e)) => errors.note(format!("consume: {e}")),
            Some(Ok(m)) => {
                let now = now_ns();
                let window = window.get().copied().unwrap_or(never);
                let payload = m.payload().unwrap_or(&[]);
                let sent = read_header(payload, plan.nonce);
                counters.consumed(payload.len() as u64, now, sent, window);
                if let Some(sent) = sent.filter(|s| window.contains(*s)) {
                    record_ns(&mut latency, now.saturating_sub(sent));
                }
            }
        }
    }
    consumer.unsubscribe();
    Ok(latency)
}

/// What one catch-up reader did.
#[derive(Clone, Copy, Debug)]
pub struct ReaderOutcome {
    pub started_ns: u64,
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
    pub complete: bool,
}

/// Reads every partition from the beginning up to `ends` with `assign()` (no group join,
/// so the figure is read throughput, not rebalance time).
pub fn run_catchup_reader(
    bootstrap: &str,
    sc: &Scenario,
    topic: &str,
    ends: &[(i32, i64)],
    counters: Arc<ConsumeCounters>,
    errors: Arc<ErrorLog>,
    stop: &AtomicBool,
) -> anyhow::Result<ReaderOutcome> {
    let consumer: BaseConsumer<ConsumerCtx> = base_config(bootstrap, &sc.client_config)
        .set("group.id", format!("oxbow-loadtest-catchup-{}", now_ns()))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create_with_context(ConsumerCtx {
            assigned: Arc::new(AtomicBool::new(false)),
            errors: Arc::clone(&errors),
        })
        .context("creating catch-up reader")?;
    let mut tpl = TopicPartitionList::new();
    for (p, _) in ends {
        tpl.add_partition_offset(topic, *p, Offset::Beginning)
            .context("building assignment")?;
    }
    let started_ns = now_ns();
    consumer.assign(&tpl).context("assigning")?;
    let mut remaining: BTreeMap<i32, i64> = ends
        .iter()
        .filter(|(_, end)| *end > 0)
        .map(|(p, end)| (*p, *end))
        .collect();
    let (mut first_ns, mut last_ns) = (None, None);
    while !remaining.is_empty() && !stop.load(Ordering::Relaxed) {
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(e)) => errors.note(format!("catch-up: {e}")),
            Some(Ok(m)) => {
                let now = now_ns();
                first_ns.get_or_insert(now);
                last_ns = Some(now);
                let len = m.payload().map_or(0, |p| p.len()) as u64;
                counters.consumed(len, now, None, Window::unbounded());
                if remaining
                    .get(&m.partition())
                    .is_some_and(|end| m.offset() + 1 >= *end)
                {
                    remaining.remove(&m.partition());
                }
            }
        }
    }
    Ok(ReaderOutcome {
        started_ns,
        first_ns,
        last_ns,
        complete: remaining.is_empty(),
    })
}
