//! Every topic config Apache Kafka defines (4.1: `LogConfig`'s non-internal keys), with
//! Kafka's type, default, validator and broker-level synonym, and what Oxbow does with it;
//! plus the pure semantics of changing a topic's overrides (IncrementalAlterConfigs' SET /
//! DELETE / APPEND / SUBTRACT, AlterConfigs' replace).
//!
//! Every config is accepted and validated as Kafka validates it, stored as given, and
//! described with Kafka's default; [`Use::Honoured`] says which ones change Oxbow's
//! behaviour and how (the README's table is this table). A value is parsed as Kafka's
//! `ConfigDef` parses it: surrounding whitespace ignored, booleans case-insensitive, lists
//! split on commas.
//!
//! Source of the table: `org.apache.kafka.storage.internals.log.LogConfig.configKeys()` of
//! the 4.1.1 jars (name, type, default, validator) and `LogConfigDef.serverConfigName`
//! (the broker-level synonym).

use crate::error::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};

/// A config's type as Kafka's `ConfigDef.Type` (and DescribeConfigs' `config_type`) has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigType {
    Boolean,
    String,
    Int,
    Long,
    Double,
    List,
}

impl ConfigType {
    /// DescribeConfigs' `config_type` (`DescribeConfigsResponse.ConfigType`).
    pub fn kafka_code(self) -> i8 {
        match self {
            ConfigType::Boolean => 1,
            ConfigType::String => 2,
            ConfigType::Int => 3,
            ConfigType::Long => 5,
            ConfigType::Double => 6,
            ConfigType::List => 7,
        }
    }
}

/// Kafka's validator of a config's parsed value.
#[derive(Clone, Copy, Debug)]
enum Valid {
    /// Anything of the type.
    Any,
    /// `ConfigDef.Range.atLeast`.
    AtLeast(i64),
    /// `ConfigDef.Range.between`.
    Between(i64, i64),
    /// `ConfigDef.Range.between` of doubles.
    BetweenF(f64, f64),
    /// `ConfigDef.ValidString.in` (case-sensitive).
    OneOf(&'static [&'static str]),
    /// `ConfigDef.ValidList.in`: every element one of these.
    ListOf(&'static [&'static str]),
    /// `compression.gzip.level`: 1..=9 or -1 (`GzipCompression.LevelValidator`).
    GzipLevel,
    /// `ThrottledReplicaListValidator`: `*`, or `partition:broker` entries.
    ThrottledReplicas,
}

/// What Oxbow does with a config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// It changes Oxbow's behaviour, as described.
    Honoured(&'static str),
    /// Accepted, validated, stored and described; no effect in Oxbow (with why, if useful).
    Stored(&'static str),
}

/// One topic config as Kafka defines it.
#[derive(Clone, Copy, Debug)]
pub struct ConfigDef {
    pub name: &'static str,
    pub kind: ConfigType,
    /// Kafka's default, as DescribeConfigs reports it.
    pub default: &'static str,
    valid: Valid,
    /// The broker-level config whose default this is (DescribeConfigs' default synonym);
    /// `None` where Kafka lists none: no such config, or one without a default of its own
    /// (`log.retention.ms`, `log.roll.ms`, `log.roll.jitter.ms` and `log.flush.interval.ms`
    /// fall back to other keys).
    pub broker_name: Option<&'static str>,
    pub oxbow: Use,
}

impl ConfigDef {
    /// Whether APPEND and SUBTRACT apply (Kafka: the type is LIST).
    pub fn is_list(&self) -> bool {
        self.kind == ConfigType::List
    }
}

/// `compression.type` values Kafka accepts (`BrokerCompressionType`).
pub const COMPRESSION_TYPES: &[&str] =
    &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];

const LONG_MAX: &str = "9223372036854775807";

const fn def(
    name: &'static str,
    kind: ConfigType,
    default: &'static str,
    valid: Valid,
    broker_name: Option<&'static str>,
    oxbow: Use,
) -> ConfigDef {
    ConfigDef {
        name,
        kind,
        default,
        valid,
        broker_name,
        oxbow,
    }
}

use ConfigType as T;
use Use::{Honoured, Stored};

/// Every topic config, sorted by name (a table: one definition per entry, kept unformatted).
#[rustfmt::skip]
pub const TOPIC_CONFIGS: &[ConfigDef] = &[
    def("cleanup.policy", T::List, "delete", Valid::ListOf(&["compact", "delete"]),
        Some("log.cleanup.policy"),
        Honoured("without `delete` retention keeps everything; with `compact` every record needs a key")),
    def("compression.gzip.level", T::Int, "-1", Valid::GzipLevel, Some("compression.gzip.level"),
        Stored("the broker never recompresses")),
    def("compression.lz4.level", T::Int, "9", Valid::Between(1, 17), Some("compression.lz4.level"),
        Stored("the broker never recompresses")),
    def("compression.type", T::String, "producer", Valid::OneOf(COMPRESSION_TYPES),
        Some("compression.type"),
        Stored("every value behaves as `producer`: batches are stored as the producer compressed them")),
    def("compression.zstd.level", T::Int, "3", Valid::Between(-131_072, 22),
        Some("compression.zstd.level"), Stored("the broker never recompresses")),
    def("delete.retention.ms", T::Long, "86400000", Valid::AtLeast(0),
        Some("log.cleaner.delete.retention.ms"), Stored("")),
    def("file.delete.delay.ms", T::Long, "60000", Valid::AtLeast(0),
        Some("log.segment.delete.delay.ms"),
        Stored("objects are deleted after the broker's `--compaction-delete-delay`")),
    def("flush.messages", T::Long, LONG_MAX, Valid::AtLeast(1),
        Some("log.flush.interval.messages"), Stored("every acknowledged write is fsynced")),
    def("flush.ms", T::Long, LONG_MAX, Valid::AtLeast(0), None,
        Stored("every acknowledged write is fsynced")),
    def("follower.replication.throttled.replicas", T::List, "", Valid::ThrottledReplicas, None,
        Stored("no follower replication")),
    def("index.interval.bytes", T::Int, "4096", Valid::AtLeast(0),
        Some("log.index.interval.bytes"), Stored("")),
    def("leader.replication.throttled.replicas", T::List, "", Valid::ThrottledReplicas, None,
        Stored("no follower replication")),
    def("local.retention.bytes", T::Long, "-2", Valid::AtLeast(-2),
        Some("log.local.retention.bytes"), Stored("no tiered storage")),
    def("local.retention.ms", T::Long, "-2", Valid::AtLeast(-2), Some("log.local.retention.ms"),
        Stored("no tiered storage")),
    def("max.compaction.lag.ms", T::Long, LONG_MAX, Valid::AtLeast(1),
        Some("log.cleaner.max.compaction.lag.ms"), Stored("")),
    def("max.message.bytes", T::Int, "1048588", Valid::AtLeast(0), Some("message.max.bytes"),
        Honoured("largest record batch (as sent, compressed) a producer may append")),
    def("message.timestamp.after.max.ms", T::Long, "3600000", Valid::AtLeast(0),
        Some("log.message.timestamp.after.max.ms"),
        Honoured("how far in the future a `CreateTime` record may be")),
    def("message.timestamp.before.max.ms", T::Long, LONG_MAX, Valid::AtLeast(0),
        Some("log.message.timestamp.before.max.ms"),
        Honoured("how far in the past a `CreateTime` record may be")),
    def("message.timestamp.type", T::String, "CreateTime",
        Valid::OneOf(&["CreateTime", "LogAppendTime"]), Some("log.message.timestamp.type"),
        Honoured("`LogAppendTime`: the broker stamps batches with its clock")),
    def("min.cleanable.dirty.ratio", T::Double, "0.5", Valid::BetweenF(0.0, 1.0),
        Some("log.cleaner.min.cleanable.ratio"), Stored("")),
    def("min.compaction.lag.ms", T::Long, "0", Valid::AtLeast(0),
        Some("log.cleaner.min.compaction.lag.ms"), Stored("")),
    def("min.insync.replicas", T::Int, "1", Valid::AtLeast(1), Some("min.insync.replicas"),
        Honoured("`acks=all` needs this many in-sync WAL copies")),
    def("preallocate", T::Boolean, "false", Valid::Any, Some("log.preallocate"), Stored("")),
    def("remote.log.copy.disable", T::Boolean, "false", Valid::Any, None,
        Stored("no tiered storage")),
    def("remote.log.delete.on.disable", T::Boolean, "false", Valid::Any, None,
        Stored("no tiered storage")),
    def("remote.storage.enable", T::Boolean, "false", Valid::Any, None,
        Stored("`true` is refused, as by a Kafka broker without tiered storage")),
    def("retention.bytes", T::Long, "-1", Valid::Any, Some("log.retention.bytes"),
        Honoured("retention by size, per partition (`-1`: none; unset: the broker's `--log-retention-bytes`)")),
    def("retention.ms", T::Long, "604800000", Valid::AtLeast(-1), None,
        Honoured("retention by time (`-1`: none; unset: the broker's `--log-retention-ms`)")),
    def("segment.bytes", T::Int, "1073741824", Valid::AtLeast(1_048_576),
        Some("log.segment.bytes"),
        Stored("retention removes whole sealed objects and segments, cut by `--flush-*` and `--segment-bytes`")),
    def("segment.index.bytes", T::Int, "10485760", Valid::AtLeast(4),
        Some("log.index.size.max.bytes"), Stored("")),
    def("segment.jitter.ms", T::Long, "0", Valid::AtLeast(0), None,
        Stored("")),
    def("segment.ms", T::Long, "604800000", Valid::AtLeast(1), None,
        Stored("retention removes whole sealed objects and segments, cut by `--flush-*` and `--segment-bytes`")),
    def("unclean.leader.election.enable", T::Boolean, "false", Valid::Any,
        Some("unclean.leader.election.enable"),
        Stored("a partition never moves to a broker missing acknowledged data")),
];

/// The definition of `name`, if Kafka has such a topic config.
pub fn lookup(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Kafka's `ConfigDef.parseType` of a list: empty (after trimming) is the empty list, else
/// the elements between commas (with whitespace around them), empty ones kept.
pub fn list_elements(value: &str) -> Vec<&str> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Vec::new();
    }
    trimmed.split(',').map(str::trim).collect()
}

fn invalid(value: &str, name: &str, why: impl std::fmt::Display) -> String {
    format!("Invalid value {value} for configuration {name}: {why}")
}

fn parse_int<N: std::str::FromStr>(v: &str, name: &str, kind: &str) -> Result<N, String> {
    v.trim()
        .parse::<N>()
        .map_err(|_| invalid(v, name, format!("Not a number of type {kind}")))
}

fn in_range(n: i64, min: i64, max: i64, v: &str, name: &str) -> Result<(), String> {
    if n < min {
        Err(invalid(v, name, format!("Value must be at least {min}")))
    } else if n > max {
        Err(invalid(
            v,
            name,
            format!("Value must be no more than {max}"),
        ))
    } else {
        Ok(())
    }
}

/// Checks one value as Kafka's `ConfigDef` does (parse by type, then the validator). The
/// error is Kafka's message (`Invalid value … for configuration …: …`).
pub fn check_value(d: &ConfigDef, v: &str) -> Result<(), String> {
    let name = d.name;
    let number = match d.kind {
        T::Int => Some(i64::from(parse_int::<i32>(v, name, "INT")?)),
        T::Long => Some(parse_int::<i64>(v, name, "LONG")?),
        T::Double => {
            let f = parse_int::<f64>(v, name, "DOUBLE")?;
            if let Valid::BetweenF(min, max) = d.valid {
                if f < min {
                    return Err(invalid(v, name, format!("Value must be at least {min}")));
                }
                if f > max {
                    return Err(invalid(
                        v,
                        name,
                        format!("Value must be no more than {max}"),
                    ));
                }
            }
            None
        }
        T::Boolean => {
            let t = v.trim();
            if !(t.eq_ignore_ascii_case("true") || t.eq_ignore_ascii_case("false")) {
                return Err(invalid(
                    v,
                    name,
                    "Expected value to be either true or false",
                ));
            }
            None
        }
        T::String | T::List => None,
    };
    match (d.valid, number) {
        (Valid::AtLeast(min), Some(n)) => in_range(n, min, i64::MAX, v, name),
        (Valid::Between(min, max), Some(n)) => in_range(n, min, max, v, name),
        (Valid::GzipLevel, Some(n)) if n == -1 || (1..=9).contains(&n) => Ok(()),
        (Valid::GzipLevel, Some(_)) => Err(invalid(
            v,
            name,
            "Value must be between 1 and 9 or equal to -1",
        )),
        (Valid::OneOf(allowed), _) => {
            let t = v.trim();
            if allowed.contains(&t) {
                Ok(())
            } else {
                Err(invalid(
                    t,
                    name,
                    format!("String must be one of: {}", allowed.join(", ")),
                ))
            }
        }
        (Valid::ListOf(allowed), _) => {
            match list_elements(v).into_iter().find(|e| !allowed.contains(e)) {
                None => Ok(()),
                Some(bad) => Err(invalid(
                    bad,
                    name,
                    format!("String must be one of: {}", allowed.join(", ")),
                )),
            }
        }
        (Valid::ThrottledReplicas, _) => {
            let elements = list_elements(v);
            let replica = |e: &str| {
                e.is_empty()
                    || e.split_once(':').is_some_and(|(p, b)| {
                        !p.is_empty()
                            && !b.is_empty()
                            && p.bytes().all(|c| c.is_ascii_digit())
                            && b.bytes().all(|c| c.is_ascii_digit())
                    })
            };
            if elements.iter().all(|e| replica(e)) || elements.concat() == "*" {
                Ok(())
            } else {
                Err(invalid(
                    v,
                    name,
                    format!(
                        "{name} must be the literal '*' or a list of replicas in the following \
                         format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
                    ),
                ))
            }
        }
        (Valid::Any | Valid::AtLeast(_) | Valid::Between(..) | Valid::GzipLevel, _)
        | (Valid::BetweenF(..), _) => Ok(()),
    }
}

fn invalid_config(key: &str, value: &str, reason: String) -> Error {
    Error::InvalidConfig {
        key: key.to_string(),
        value: value.to_string(),
        reason,
    }
}

/// Checks a whole override set: every key known, every value valid, and Kafka's checks
/// across keys (`LogConfig.validateValues`, and the tiered-storage check of a broker that
/// has none).
pub fn check_overrides(overrides: &BTreeMap<String, String>) -> Result<()> {
    for (key, value) in overrides {
        let d =
            lookup(key).ok_or_else(|| invalid_config(key, value, "unknown topic config".into()))?;
        check_value(d, value).map_err(|reason| invalid_config(key, value, reason))?;
    }
    let long = |name: &str| -> i64 {
        let raw = overrides
            .get(name)
            .map(String::as_str)
            .or_else(|| lookup(name).map(|d| d.default))
            .unwrap_or("");
        raw.trim().parse().unwrap_or(0)
    };
    let (min_lag, max_lag) = (long("min.compaction.lag.ms"), long("max.compaction.lag.ms"));
    if min_lag > max_lag {
        return Err(invalid_config(
            "min.compaction.lag.ms",
            &min_lag.to_string(),
            format!(
                "conflict topic config setting min.compaction.lag.ms ({min_lag}) > \
                 max.compaction.lag.ms ({max_lag})"
            ),
        ));
    }
    if let Some(v) = overrides.get("remote.storage.enable") {
        if v.trim().eq_ignore_ascii_case("true") {
            return Err(invalid_config(
                "remote.storage.enable",
                v,
                "Tiered Storage functionality is disabled in the broker. Topic cannot be \
                 configured with remote log storage."
                    .into(),
            ));
        }
    }
    Ok(())
}

/// IncrementalAlterConfigs' operation on one key (`AlterConfigOp.OpType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlterOp {
    /// Set the value (a null value removes the override, as in Kafka).
    Set,
    /// Remove the override: the default applies again.
    Delete,
    /// Add list elements not there yet (LIST configs only).
    Append,
    /// Remove list elements (LIST configs only).
    Subtract,
}

impl AlterOp {
    /// The operation of wire id `id` (0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT).
    pub fn from_kafka(id: i8) -> Option<AlterOp> {
        match id {
            0 => Some(AlterOp::Set),
            1 => Some(AlterOp::Delete),
            2 => Some(AlterOp::Append),
            3 => Some(AlterOp::Subtract),
            _ => None,
        }
    }
}

/// One key's change in an incremental alteration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigChange {
    pub name: String,
    pub op: AlterOp,
    pub value: Option<String>,
}

/// A change of a topic's config overrides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigAlteration {
    /// IncrementalAlterConfigs: each named key changed, the others kept.
    Incremental(Vec<ConfigChange>),
    /// AlterConfigs: these become the whole override set.
    Replace(BTreeMap<String, String>),
}

impl ConfigAlteration {
    /// The override set after this alteration of `current`, checked as a whole
    /// ([`check_overrides`]). A key named twice is [`Error::InvalidRequest`] (Kafka: "Error
    /// due to duplicate config keys"); APPEND or SUBTRACT on a non-list config, an unknown
    /// key or a bad value are [`Error::InvalidConfig`] naming the key.
    pub fn apply(&self, current: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>> {
        let next = match self {
            ConfigAlteration::Replace(all) => all.clone(),
            ConfigAlteration::Incremental(changes) => {
                let mut seen = BTreeSet::new();
                if let Some(dup) = changes.iter().find(|c| !seen.insert(c.name.as_str())) {
                    return Err(Error::InvalidRequest(format!(
                        "Error due to duplicate config keys: {}",
                        dup.name
                    )));
                }
                let mut next = current.clone();
                for c in changes {
                    apply_change(&mut next, c)?;
                }
                next
            }
        };
        check_overrides(&next)?;
        Ok(next)
    }
}

fn apply_change(next: &mut BTreeMap<String, String>, c: &ConfigChange) -> Result<()> {
    let value = c.value.as_deref().unwrap_or("");
    let d = lookup(&c.name)
        .ok_or_else(|| invalid_config(&c.name, value, "unknown topic config".into()))?;
    match (c.op, &c.value) {
        (AlterOp::Set, Some(v)) => {
            next.insert(c.name.clone(), v.clone());
        }
        (AlterOp::Set, None) | (AlterOp::Delete, _) => {
            next.remove(&c.name);
        }
        (AlterOp::Append | AlterOp::Subtract, _) if !d.is_list() => {
            let op = if c.op == AlterOp::Append {
                "APPEND"
            } else {
                "SUBTRACT"
            };
            return Err(invalid_config(
                &c.name,
                value,
                format!("Can't {op} to key {} because its type is not LIST.", c.name),
            ));
        }
        (AlterOp::Append | AlterOp::Subtract, None) => {
            return Err(Error::InvalidRequest(format!(
                "Null value not supported for : {}",
                c.name
            )));
        }
        (op, Some(v)) => {
            // Kafka's `getParts`: the current value (the override, else the default) split
            // on commas, empty parts dropped; the operand split the same way.
            let old = next.get(&c.name).map(String::as_str).unwrap_or(d.default);
            let mut parts: Vec<String> = old
                .split(',')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect();
            for e in v.split(',') {
                if op == AlterOp::Append {
                    if !parts.iter().any(|p| p == e) {
                        parts.push(e.to_string());
                    }
                } else {
                    parts.retain(|p| p != e);
                }
            }
            next.insert(c.name.clone(), parts.join(","));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, value: &str) -> Result<(), String> {
        check_value(lookup(name).expect("known"), value)
    }

    #[test]
    fn the_table_is_kafkas() {
        assert_eq!(TOPIC_CONFIGS.len(), 33);
        let names: Vec<&str> = TOPIC_CONFIGS.iter().map(|d| d.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted, "sorted, no duplicates");
        for d in TOPIC_CONFIGS {
            assert_eq!(
                check_value(d, d.default),
                Ok(()),
                "{}'s default is valid",
                d.name
            );
        }
        assert_eq!(
            lookup("segment.bytes").map(|d| d.default),
            Some("1073741824")
        );
        assert!(lookup("internal.segment.bytes").is_none());
    }

    /// Each case as Kafka 4.1's `LogConfig.validate` judged it (run against the jars).
    #[test]
    fn values_are_checked_like_kafka() {
        let ok = [
            ("cleanup.policy", ""),
            ("cleanup.policy", "compact,delete"),
            ("cleanup.policy", " compact , delete"),
            ("cleanup.policy", "compact,compact"),
            ("retention.bytes", "-5"),
            ("retention.ms", " 100"),
            ("segment.bytes", "1048576"),
            ("preallocate", "TRUE"),
            ("min.cleanable.dirty.ratio", "0.1"),
            ("leader.replication.throttled.replicas", "*"),
            ("leader.replication.throttled.replicas", "0:1, 1:2"),
            ("leader.replication.throttled.replicas", ""),
            ("compression.gzip.level", "-1"),
            ("compression.zstd.level", "-131072"),
            ("message.timestamp.type", " CreateTime"),
            ("min.insync.replicas", " 2"),
            ("local.retention.ms", "-2"),
        ];
        for (k, v) in ok {
            assert_eq!(check(k, v), Ok(()), "{k}={v}");
        }
        let bad = [
            (
                "cleanup.policy",
                "Delete",
                "String must be one of: compact, delete",
            ),
            ("cleanup.policy", "compact,", "String must be one of"),
            ("retention.ms", "-2", "Value must be at least -1"),
            ("retention.ms", "soon", "Not a number of type LONG"),
            ("segment.bytes", "14", "Value must be at least 1048576"),
            ("segment.ms", "0", "Value must be at least 1"),
            ("preallocate", "yes", "either true or false"),
            ("preallocate", "", "either true or false"),
            ("min.cleanable.dirty.ratio", "1.5", "no more than 1"),
            (
                "min.cleanable.dirty.ratio",
                "abc",
                "Not a number of type DOUBLE",
            ),
            (
                "leader.replication.throttled.replicas",
                "0-1",
                "literal '*'",
            ),
            (
                "compression.gzip.level",
                "0",
                "between 1 and 9 or equal to -1",
            ),
            ("compression.zstd.level", "-131073", "at least -131072"),
            ("compression.lz4.level", "18", "no more than 17"),
            ("compression.type", "ZSTD", "String must be one of"),
            (
                "message.timestamp.type",
                "createtime",
                "CreateTime, LogAppendTime",
            ),
            (
                "max.message.bytes",
                "2147483648",
                "Not a number of type INT",
            ),
            ("max.message.bytes", "-1", "at least 0"),
            ("local.retention.ms", "-3", "at least -2"),
            ("flush.messages", "0", "at least 1"),
            ("min.insync.replicas", "0", "at least 1"),
        ];
        for (k, v, why) in bad {
            let e = check(k, v).expect_err(&format!("{k}={v}"));
            assert!(e.contains(why) && e.contains(k), "{k}={v}: {e}");
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn overrides_are_checked_across_keys() {
        let e = check_overrides(&map(&[
            ("min.compaction.lag.ms", "10"),
            ("max.compaction.lag.ms", "5"),
        ]))
        .expect_err("min > max");
        assert!(e.to_string().contains("max.compaction.lag.ms"), "{e}");
        assert!(check_overrides(&map(&[("remote.storage.enable", "true")])).is_err());
        assert!(check_overrides(&map(&[("remote.storage.enable", "false")])).is_ok());
        let e = check_overrides(&map(&[("no.such", "1")])).expect_err("unknown");
        assert!(matches!(e, Error::InvalidConfig { ref key, .. } if key == "no.such"));
    }

    fn change(name: &str, op: AlterOp, value: Option<&str>) -> ConfigChange {
        ConfigChange {
            name: name.into(),
            op,
            value: value.map(str::to_string),
        }
    }

    #[test]
    fn incremental_ops_follow_kafka() {
        let current = map(&[("retention.ms", "1000"), ("segment.ms", "5000")]);
        let alter = ConfigAlteration::Incremental(vec![
            change("retention.ms", AlterOp::Set, Some("2000")),
            change("segment.ms", AlterOp::Delete, None),
            change("cleanup.policy", AlterOp::Append, Some("compact")),
        ]);
        let next = alter.apply(&current).expect("valid");
        assert_eq!(
            next,
            map(&[
                ("retention.ms", "2000"),
                ("cleanup.policy", "delete,compact")
            ])
        );
        // APPEND of what is there already changes nothing; SUBTRACT removes from the
        // default too; SET of null deletes.
        let next = ConfigAlteration::Incremental(vec![
            change("cleanup.policy", AlterOp::Subtract, Some("delete")),
            change("retention.ms", AlterOp::Set, None),
        ])
        .apply(&next)
        .expect("valid");
        assert_eq!(next, map(&[("cleanup.policy", "compact")]));
        let again = ConfigAlteration::Incremental(vec![change(
            "cleanup.policy",
            AlterOp::Append,
            Some("compact"),
        )])
        .apply(&next)
        .expect("valid");
        assert_eq!(again, next);
        let empty = ConfigAlteration::Incremental(vec![change(
            "cleanup.policy",
            AlterOp::Subtract,
            Some("delete"),
        )])
        .apply(&BTreeMap::new())
        .expect("Kafka 4.1 takes an empty cleanup.policy");
        assert_eq!(empty, map(&[("cleanup.policy", "")]));
        let throttled = ConfigAlteration::Incremental(vec![change(
            "leader.replication.throttled.replicas",
            AlterOp::Append,
            Some("0:1,1:1"),
        )])
        .apply(&BTreeMap::new())
        .expect("valid");
        assert_eq!(
            throttled,
            map(&[("leader.replication.throttled.replicas", "0:1,1:1")])
        );
    }

    #[test]
    fn bad_alterations_name_the_key() {
        let none = BTreeMap::new();
        let cases = [
            change("retention.ms", AlterOp::Subtract, Some("1")),
            change("retention.ms", AlterOp::Append, Some("1")),
            change("retention.ms", AlterOp::Set, Some("-7")),
            change("no.such.config", AlterOp::Set, Some("1")),
            change("cleanup.policy", AlterOp::Append, Some("shred")),
        ];
        for c in cases {
            let e = ConfigAlteration::Incremental(vec![c.clone()])
                .apply(&none)
                .expect_err(&c.name);
            assert!(
                matches!(&e, Error::InvalidConfig { key, .. } if *key == c.name),
                "{c:?}: {e}"
            );
        }
        let dup = ConfigAlteration::Incremental(vec![
            change("retention.ms", AlterOp::Set, Some("1")),
            change("retention.ms", AlterOp::Delete, None),
        ])
        .apply(&none)
        .expect_err("duplicate");
        assert!(matches!(dup, Error::InvalidRequest(_)), "{dup}");
        let null =
            ConfigAlteration::Incremental(vec![change("cleanup.policy", AlterOp::Append, None)])
                .apply(&none)
                .expect_err("null append");
        assert!(matches!(null, Error::InvalidRequest(_)), "{null}");
    }

    #[test]
    fn replace_sets_the_whole_override_set() {
        let current = map(&[("retention.ms", "1000")]);
        let next = ConfigAlteration::Replace(map(&[("segment.ms", "60000")]))
            .apply(&current)
            .expect("valid");
        assert_eq!(next, map(&[("segment.ms", "60000")]));
        assert!(ConfigAlteration::Replace(map(&[("segment.ms", "0")]))
            .apply(&current)
            .is_err());
        assert_eq!(
            ConfigAlteration::Replace(BTreeMap::new())
                .apply(&current)
                .ok(),
            Some(BTreeMap::new())
        );
        assert_eq!(AlterOp::from_kafka(3), Some(AlterOp::Subtract));
        assert_eq!(AlterOp::from_kafka(4), None);
    }
}
