//! Scenarios: what one run does, resolved from a preset per kind, a TOML file and flags.
//!
//! Resolution order, later wins: the kind's preset ([`Scenario::preset`]), the file's
//! `[defaults]` table, the file's `[[scenario]]` entry, command-line flags (and `--set`).
//! Merging happens on JSON values so every layer is checked by the same `Deserialize`
//! (`deny_unknown_fields`: a typo in a TOML key is an error, not a silent default).
//!
//! File format:
//!
//! ```toml
//! [defaults]            # applies to every scenario below
//! record_size = 1024
//! duration = "20s"
//!
//! [[scenario]]
//! name = "produce-acks-all"
//! kind = "produce"      # produce | latency | fanout | catchup | mixed
//! acks = "all"
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::payload::HEADER_BYTES;

/// What a scenario measures. Each kind is a preset over the same engine: producers (closed
/// loop at `rate = "max"`, else open loop), consumer groups tailing the topic, catch-up
/// readers from the beginning, and an optional prefill before the measured phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Produce throughput: producers only, as fast as the client's queue allows.
    Produce,
    /// End-to-end latency at a fixed rate (default 50% of a measured max): produce → consume.
    Latency,
    /// Fan-out: producers plus N consumer groups each reading the whole topic.
    Fanout,
    /// Catch-up read: prefill, make the data cold, then read it from the beginning.
    Catchup,
    /// Mixed: open-loop writes at a fixed rate, a tailing group and a catch-up reader at once.
    Mixed,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Produce => "produce",
            Kind::Latency => "latency",
            Kind::Fanout => "fanout",
            Kind::Catchup => "catchup",
            Kind::Mixed => "mixed",
        }
    }
}

/// How records are produced. Consumers always use the Kafka protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// librdkafka producer.
    Kafka,
    /// REST Proxy v2 `POST /topics/{t}` with binary (base64) records; always acks=all.
    Http,
}

/// Producer acknowledgement (`acks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acks {
    None,
    Leader,
    All,
}

impl Acks {
    /// The librdkafka `acks` value.
    pub fn config_value(self) -> &'static str {
        match self {
            Acks::None => "0",
            Acks::Leader => "1",
            Acks::All => "all",
        }
    }
}

impl FromStr for Acks {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            other => Err(format!("acks must be 0, 1 or all, not {other:?}")),
        }
    }
}

impl fmt::Display for Acks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.config_value())
    }
}

/// Record batch compression (librdkafka `compression.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    pub fn config_value(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// Target produce rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rate {
    /// Closed loop: as fast as the producer's queue drains.
    Max,
    /// Open loop at this many records per second.
    RecordsPerSec(f64),
    /// Open loop at this many value bytes per second.
    BytesPerSec(f64),
    /// Open loop at this fraction of the max measured by a closed-loop probe first.
    FractionOfMax(f64),
}

impl Rate {
    /// Records per second for a known record size, given the probe's max when needed.
    pub fn records_per_sec(self, record_size: usize, probed_max: Option<f64>) -> Option<f64> {
        match self {
            Rate::Max => None,
            Rate::RecordsPerSec(r) => Some(r),
            Rate::BytesPerSec(b) => Some(b / record_size.max(1) as f64),
            Rate::FractionOfMax(f) => probed_max.map(|max| max * f),
        }
    }
}

impl FromStr for Rate {
    type Err = String;
    /// `max`, `50%`, `20000` or `20000/s` (records/s), `10MiB/s`, `10MB/s`, `512KiB/s`.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("max") {
            return Ok(Rate::Max);
        }
        let positive = |v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(format!("rate must be positive: {s:?}"))
            }
        };
        if let Some(pct) = s.strip_suffix('%') {
            let pct: f64 = pct
                .trim()
                .parse()
                .map_err(|_| format!("bad percentage {s:?}"))?;
            return Ok(Rate::FractionOfMax(positive(pct)? / 100.0));
        }
        let body = s.strip_suffix("/s").unwrap_or(s).trim();
        let units: [(&str, f64); 7] = [
            ("GiB", 1024.0 * 1024.0 * 1024.0),
            ("MiB", 1024.0 * 1024.0),
            ("KiB", 1024.0),
            ("GB", 1e9),
            ("MB", 1e6),
            ("KB", 1e3),
            ("B", 1.0),
        ];
        for (suffix, scale) in units {
            if let Some(number) = body.strip_suffix(suffix) {
                let v: f64 = number
                    .trim()
                    .parse()
                    .map_err(|_| format!("bad byte rate {s:?}"))?;
                return Ok(Rate::BytesPerSec(positive(v)? * scale));
            }
        }
        let v: f64 = body.parse().map_err(|_| {
            format!("rate must be max, N% (of max), N (records/s) or N MiB/s; got {s:?}")
        })?;
        Ok(Rate::RecordsPerSec(positive(v)?))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rate::Max => f.write_str("max"),
            Rate::RecordsPerSec(r) => write!(f, "{r}/s"),
            Rate::BytesPerSec(b) => write!(f, "{}MiB/s", b / (1024.0 * 1024.0)),
            Rate::FractionOfMax(x) => write!(f, "{}%", x * 100.0),
        }
    }
}

/// A byte count written as `256MiB`, `1GB`, `4096` or a bare integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let units: [(&str, u64); 7] = [
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
            ("GB", 1_000_000_000),
            ("MB", 1_000_000),
            ("KB", 1_000),
            ("B", 1),
        ];
        for (suffix, scale) in units {
            if let Some(number) = s.strip_suffix(suffix) {
                let v: f64 = number
                    .trim()
                    .parse()
                    .map_err(|_| format!("bad byte size {s:?}"))?;
                if !(v.is_finite() && v >= 0.0) {
                    return Err(format!("bad byte size {s:?}"));
                }
                return Ok(ByteSize((v * scale as f64).round() as u64));
            }
        }
        s.parse()
            .map(ByteSize)
            .map_err(|_| format!("bad byte size {s:?} (e.g. 256MiB)"))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if v == 0 {
            f.write_str("0")
        } else if v.is_multiple_of(1 << 30) {
            write!(f, "{}GiB", v >> 30)
        } else if v.is_multiple_of(1 << 20) {
            write!(f, "{}MiB", v >> 20)
        } else if v.is_multiple_of(1 << 10) {
            write!(f, "{}KiB", v >> 10)
        } else {
            write!(f, "{v}")
        }
    }
}

/// Serde through the string form, accepting bare integers where the string form allows one.
macro_rules! serde_via_str {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_string())
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                #[derive(Deserialize)]
                #[serde(untagged)]
                enum Raw {
                    Int(u64),
                    Float(f64),
                    Str(String),
                }
                let text = match Raw::deserialize(d)? {
                    Raw::Int(v) => v.to_string(),
                    Raw::Float(v) => v.to_string(),
                    Raw::Str(s) => s,
                };
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
serde_via_str!(Acks);
serde_via_str!(Rate);
serde_via_str!(ByteSize);

/// `Duration` as a humantime string (`"20s"`, `"1m 30s"`, `"250ms"`).
mod duration_str {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

/// One fully resolved scenario. Every field has a value; see [`Scenario::preset`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Label in reports and in topic names.
    pub name: String,
    pub kind: Kind,
    pub protocol: Protocol,
    /// Measured window after the warmup. Catch-up: the time limit for reading.
    #[serde(with = "duration_str")]
    pub duration: Duration,
    /// Load runs but is not counted, so connection setup and first metadata are excluded.
    #[serde(with = "duration_str")]
    pub warmup: Duration,
    /// Value bytes per record (no key). The first 16 bytes carry the send time.
    pub record_size: usize,
    /// Partitions of the topic each run creates.
    pub partitions: i32,
    /// Replication factor of that topic; -1 asks for the broker's default.
    pub replication_factor: i32,
    /// Extra topic configs (e.g. `min.insync.replicas = "2"`).
    pub topic_config: BTreeMap<String, String>,
    /// Producer clients, one thread each.
    pub producers: u32,
    /// `max`, `N%` of a probed max, `N` records/s or `N MiB/s`, over all producers.
    pub rate: Rate,
    pub acks: Acks,
    /// librdkafka `linger.ms`.
    pub linger_ms: f64,
    /// librdkafka `batch.size`: most bytes in one partition's batch.
    pub batch_bytes: ByteSize,
    pub compression: Compression,
    /// librdkafka `enable.idempotence`.
    pub idempotence: bool,
    /// Consumer groups tailing the topic while producers run (e2e latency, fan-out).
    pub groups: u32,
    /// Consumers in each group.
    pub consumers_per_group: u32,
    /// Readers that `assign()` every partition from the beginning (no group) and read
    /// what the prefill wrote.
    pub catchup_readers: u32,
    /// Bytes written at max rate before the measured phase (catch-up data).
    pub prefill: ByteSize,
    /// Shell command run after the prefill to make its data cold (e.g. restart the broker);
    /// the run then waits until the topic has leaders again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_cmd: Option<String>,
    /// Pause after the prefill (and restart), so a broker seals what it holds.
    #[serde(with = "duration_str")]
    pub settle: Duration,
    /// HTTP produce: requests in flight.
    pub http_concurrency: u32,
    /// HTTP produce: records per request.
    pub http_batch_records: u32,
    /// Length of the closed-loop probe that turns `rate = "N%"` into records/s.
    #[serde(with = "duration_str")]
    pub probe_duration: Duration,
    /// Extra librdkafka properties for every client (e.g. `"fetch.wait.max.ms" = "100"`).
    pub client_config: BTreeMap<String, String>,
    /// Delete the topic after the run (Oxbow keeps deleted topics' objects for now).
    pub delete_topic: bool,
}

impl Scenario {
    /// The defaults of one kind.
    pub fn preset(kind: Kind) -> Scenario {
        let base = Scenario {
            name: kind.as_str().to_string(),
            kind,
            protocol: Protocol::Kafka,
            duration: Duration::from_secs(20),
            warmup: Duration::from_secs(3),
            record_size: 1024,
            partitions: 6,
            replication_factor: -1,
            topic_config: BTreeMap::new(),
            producers: 1,
            rate: Rate::Max,
            acks: Acks::All,
            linger_ms: 5.0,
            batch_bytes: ByteSize(1_000_000),
            compression: Compression::None,
            idempotence: false,
            groups: 0,
            consumers_per_group: 1,
            catchup_readers: 0,
            prefill: ByteSize(0),
            restart_cmd: None,
            settle: Duration::from_secs(2),
            http_concurrency: 4,
            http_batch_records: 100,
            probe_duration: Duration::from_secs(10),
            client_config: BTreeMap::new(),
            delete_topic: true,
        };
        match kind {
            Kind::Produce => base,
            Kind::Latency => Scenario {
                groups: 1,
                rate: Rate::FractionOfMax(0.5),
                ..base
            },
            Kind::Fanout => Scenario { groups: 5, ..base },
            Kind::Catchup => Scenario {
                catchup_readers: 1,
                prefill: ByteSize(256 << 20),
                duration: Duration::from_secs(60),
                warmup: Duration::ZERO,
                ..base
            },
            Kind::Mixed => Scenario {
                groups: 1,
                catchup_readers: 1,
                prefill: ByteSize(128 << 20),
                rate: Rate::FractionOfMax(0.5),
                ..base
            },
        }
    }

    /// Resolves layers of overrides (JSON objects, later wins) over the kind's preset.
    /// The kind is the last `kind` given by any layer, else `default_kind`.
    pub fn resolve(default_kind: Kind, layers: &[&Map<String, Value>]) -> anyhow::Result<Self> {
        let mut kind = default_kind;
        for layer in layers {
            if let Some(k) = layer.get("kind") {
                kind = serde_json::from_value(k.clone()).context("kind")?;
            }
        }
        let Value::Object(mut merged) = serde_json::to_value(Scenario::preset(kind))? else {
            bail!("a scenario serializes to an object");
        };
        for layer in layers {
            for (key, value) in layer.iter() {
                match (merged.get_mut(key), value) {
                    // Tables (topic_config, client_config) merge key by key.
                    (Some(Value::Object(into)), Value::Object(from)) => {
                        for (k, v) in from {
                            into.insert(k.clone(), v.clone());
                        }
                    }
                    _ => {
                        merged.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        let scenario: Scenario = serde_json::from_value(Value::Object(merged))?;
        scenario.validate()?;
        Ok(scenario)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(
            self.record_size >= HEADER_BYTES,
            "record_size must be at least {HEADER_BYTES} bytes (the send-time header)"
        );
        ensure!(self.partitions >= 1, "partitions must be at least 1");
        ensure!(self.producers >= 1, "producers must be at least 1");
        ensure!(!self.duration.is_zero(), "duration must be positive");
        ensure!(
            self.consumers_per_group >= 1,
            "consumers_per_group must be at least 1"
        );
        ensure!(
            self.http_concurrency >= 1 && self.http_batch_records >= 1,
            "http_concurrency and http_batch_records must be at least 1"
        );
        ensure!(
            self.linger_ms >= 0.0 && self.linger_ms.is_finite(),
            "linger_ms must be >= 0"
        );
        if let Rate::FractionOfMax(f) = self.rate {
            ensure!(f <= 1.0, "a rate above 100% of max cannot be sustained");
        }
        if self.kind == Kind::Catchup {
            ensure!(
                self.prefill.0 > 0 && self.catchup_readers >= 1,
                "catchup needs prefill > 0 and catchup_readers >= 1"
            );
        }
        if self.catchup_readers > 0 {
            ensure!(
                self.prefill.0 > 0,
                "catchup_readers read the prefill: set prefill > 0"
            );
        }
        if self.protocol == Protocol::Http {
            ensure!(
                self.acks == Acks::All,
                "the HTTP produce path always waits for acks=all"
            );
        }
        Ok(())
    }

    /// Whether the measured phase runs producers at all.
    pub fn produces(&self) -> bool {
        self.kind != Kind::Catchup
    }
}

/// A scenario file: optional `[defaults]` and one or more `[[scenario]]` tables.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    #[serde(default)]
    defaults: Map<String, Value>,
    #[serde(default)]
    scenario: Vec<Map<String, Value>>,
}

/// Parses a TOML scenario file, applying `overrides` (e.g. from flags) last to each entry.
pub fn parse_file(text: &str, overrides: &Map<String, Value>) -> anyhow::Result<Vec<Scenario>> {
    let table: toml::Table = toml::from_str(text).context("parsing TOML")?;
    let file: ScenarioFile = serde_json::to_value(table)
        .and_then(serde_json::from_value)
        .context("scenario file: expected [defaults] and [[scenario]] tables")?;
    ensure!(!file.scenario.is_empty(), "no [[scenario]] in the file");
    file.scenario
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            Scenario::resolve(Kind::Produce, &[&file.defaults, entry, overrides])
                .with_context(|| format!("scenario #{}", i + 1))
        })
        .collect()
}

/// Parses `key=value` from `--set`: the value as TOML if it parses (`5`, `true`, `"x"`),
/// else as a bare string (`--set rate=50%`).
pub fn parse_set(arg: &str) -> anyhow::Result<(String, Value)> {
    let (key, raw) = arg
        .split_once('=')
        .with_context(|| format!("--set wants key=value, got {arg:?}"))?;
    let key = key.trim().to_string();
    let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .map(serde_json::to_value)
        .transpose()?
        .unwrap_or_else(|| Value::String(raw.to_string()));
    Ok((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn rates_parse() {
        assert_eq!("max".parse::<Rate>(), Ok(Rate::Max));
        assert_eq!("50%".parse::<Rate>(), Ok(Rate::FractionOfMax(0.5)));
        assert_eq!("20000".parse::<Rate>(), Ok(Rate::RecordsPerSec(20000.0)));
        assert_eq!("20000/s".parse::<Rate>(), Ok(Rate::RecordsPerSec(20000.0)));
        assert_eq!(
            "10MiB/s".parse::<Rate>(),
            Ok(Rate::BytesPerSec(10.0 * 1048576.0))
        );
        assert_eq!("2 MB/s".parse::<Rate>(), Ok(Rate::BytesPerSec(2e6)));
        assert!("0".parse::<Rate>().is_err());
        assert!("-5%".parse::<Rate>().is_err());
        assert!("fast".parse::<Rate>().is_err());
        let r = Rate::BytesPerSec(1024.0 * 1024.0);
        assert_eq!(r.records_per_sec(1024, None), Some(1024.0));
        assert_eq!(
            Rate::FractionOfMax(0.5).records_per_sec(1, Some(100.0)),
            Some(50.0)
        );
        assert_eq!(Rate::FractionOfMax(0.5).records_per_sec(1, None), None);
        for text in ["max", "50%", "2000/s", "10MiB/s"] {
            let r: Rate = text.parse().expect("parses");
            assert_eq!(r.to_string().parse::<Rate>(), Ok(r));
        }
    }

    #[test]
    fn byte_sizes_parse_and_print() {
        assert_eq!("256MiB".parse::<ByteSize>(), Ok(ByteSize(256 << 20)));
        assert_eq!("1GB".parse::<ByteSize>(), Ok(ByteSize(1_000_000_000)));
        assert_eq!("4096".parse::<ByteSize>(), Ok(ByteSize(4096)));
        assert_eq!(ByteSize(256 << 20).to_string(), "256MiB");
        assert_eq!(ByteSize(1_000_000).to_string(), "1000000");
        assert!("lots".parse::<ByteSize>().is_err());
    }

    #[test]
    fn presets_differ_by_kind_and_validate() {
        for kind in [
            Kind::Produce,
            Kind::Latency,
            Kind::Fanout,
            Kind::Catchup,
            Kind::Mixed,
        ] {
            Scenario::preset(kind).validate().expect("preset is valid");
        }
        assert_eq!(Scenario::preset(Kind::Fanout).groups, 5);
        assert_eq!(
            Scenario::preset(Kind::Latency).rate,
            Rate::FractionOfMax(0.5)
        );
        assert!(!Scenario::preset(Kind::Catchup).produces());
    }

    #[test]
    fn file_layers_resolve_in_order() {
        let text = r#"
            [defaults]
            record_size = 512
            duration = "5s"
            topic_config = { "min.insync.replicas" = "1" }

            [[scenario]]
            name = "acks1"
            acks = "1"
            linger_ms = 0

            [[scenario]]
            kind = "fanout"
            groups = 3
            prefill = "64MiB"
            topic_config = { "retention.ms" = "60000" }
        "#;
        let overrides = obj(serde_json::json!({"duration": "7s"}));
        let got = parse_file(text, &overrides).expect("parses");
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].name, "acks1");
        assert_eq!(got[0].kind, Kind::Produce);
        assert_eq!(got[0].acks, Acks::Leader);
        assert_eq!(got[0].linger_ms, 0.0);
        assert_eq!(got[0].record_size, 512);
        assert_eq!(got[0].duration, Duration::from_secs(7));
        assert_eq!(got[1].name, "fanout");
        assert_eq!(got[1].groups, 3);
        assert_eq!(got[1].prefill, ByteSize(64 << 20));
        assert_eq!(got[1].topic_config.len(), 2, "tables merge key by key");
    }

    #[test]
    fn typos_and_bad_values_are_errors() {
        assert!(parse_file("[[scenario]]\nrecord_sise = 5\n", &Map::new()).is_err());
        assert!(parse_file("[[scenario]]\nacks = \"2\"\n", &Map::new()).is_err());
        assert!(parse_file("[[scenario]]\nrecord_size = 8\n", &Map::new()).is_err());
        assert!(parse_file("[defaults]\nacks = \"1\"\n", &Map::new()).is_err());
        let catchup = obj(serde_json::json!({"kind": "catchup", "prefill": 0}));
        assert!(Scenario::resolve(Kind::Produce, &[&catchup]).is_err());
    }

    #[test]
    fn set_values_parse_as_toml_or_text() {
        assert_eq!(
            parse_set("groups=5").expect("ok"),
            ("groups".to_string(), serde_json::json!(5))
        );
        assert_eq!(
            parse_set("rate=50%").expect("ok"),
            ("rate".to_string(), serde_json::json!("50%"))
        );
        assert_eq!(
            parse_set("restart_cmd=\"a b\"").expect("ok").1,
            serde_json::json!("a b")
        );
        assert!(parse_set("novalue").is_err());
    }

    #[test]
    fn resolved_scenario_round_trips_through_json() {
        let s = Scenario::preset(Kind::Mixed);
        let v = serde_json::to_value(&s).expect("serializes");
        let back: Scenario = serde_json::from_value(v).expect("deserializes");
        assert_eq!(back, s);
    }
}
