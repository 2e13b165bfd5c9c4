//! Cluster links and mirror topics (issue 20, ARCHITECTURE decision 34): what the whole
//! cluster must agree on to mirror topics from a source cluster, kept as small JSON
//! documents under `mirror/links/{link}` and `mirror/topics/{topic}`.
//!
//! A [`Link`] names a source cluster (bootstrap servers, client security) and which of its
//! topics and groups to mirror; a [`MirrorTopic`] is one destination topic following one
//! source topic through a link, with its state. Every broker watches both kinds: the leader
//! of a mirror topic's partition runs that partition's mirror task while the topic is
//! [`MirrorState::Mirroring`] and its link [`LinkState::Active`]; produce is refused until
//! the topic is [`MirrorState::Promoted`]. Writes are compare-and-swap on the record's
//! version (its key's modification revision), as for security records; the store knows
//! the documents only as bytes, this module encodes them.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// Most bytes of one record's value.
pub const MIRROR_RECORD_BYTES_MAX: usize = 64 << 10;
/// Most topic or group patterns one link may name.
pub const LINK_PATTERNS_MAX: usize = 256;

/// The kinds of mirror record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MirrorKind {
    Link,
    Topic,
}

impl MirrorKind {
    pub const ALL: [MirrorKind; 2] = [MirrorKind::Link, MirrorKind::Topic];

    /// The key segment of the kind.
    pub fn segment(self) -> &'static str {
        match self {
            MirrorKind::Link => "links",
            MirrorKind::Topic => "topics",
        }
    }

    pub fn from_segment(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.segment() == s)
    }
}

/// One stored record, undecoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorRecord {
    pub kind: MirrorKind,
    pub name: String,
    pub value: Vec<u8>,
    /// The key's modification revision: what a compare-and-swap compares against.
    pub version: i64,
}

/// A change of a mirror record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MirrorEvent {
    Put(MirrorRecord),
    Deleted { kind: MirrorKind, name: String },
}

/// Whether a link's mirror tasks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkState {
    Active,
    /// Tasks stopped, mirror topics still read-only; resume continues from each log end.
    Paused,
}

/// How the link's client authenticates to the source (the broker's own Kafka client).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct LinkSecurity {
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`; `None`: no SASL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl_mechanism: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl_username: Option<String>,
    /// Stored as given (the link must present it), readable by whoever reads the metadata
    /// service; never returned by the HTTP API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl_password: Option<String>,
    /// Speak TLS to the source, trusting these CA certificates (PEM); `None`: plaintext.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_ca_pem: Option<String>,
}

/// A named link to one source cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub name: String,
    /// `host:port[,host:port…]` of the source's Kafka listeners.
    pub bootstrap: String,
    #[serde(default)]
    pub security: LinkSecurity,
    /// Source topics to mirror: exact names, or regular expressions matched against the
    /// whole name when written as `re:EXPR`.
    pub topics: Vec<String>,
    /// Consumer groups whose committed offsets are copied, same syntax.
    #[serde(default)]
    pub groups: Vec<String>,
    pub state: LinkState,
}

impl Link {
    pub fn validate(&self) -> Result<()> {
        validate_name("link", &self.name)?;
        if self.bootstrap.trim().is_empty() || self.bootstrap.len() > 4096 {
            return Err(Error::InvalidRequest(format!(
                "link '{}' needs bootstrap servers (host:port,…)",
                self.name
            )));
        }
        if self.topics.len() + self.groups.len() > LINK_PATTERNS_MAX {
            return Err(Error::InvalidRequest(format!(
                "link '{}' names more than {LINK_PATTERNS_MAX} topics and groups",
                self.name
            )));
        }
        for p in self.topics.iter().chain(&self.groups) {
            Pattern::parse(p)?;
        }
        if let Some(pem) = &self.security.ssl_ca_pem {
            if !pem.contains("-----BEGIN CERTIFICATE-----") || pem.len() > 32 << 10 {
                return Err(Error::InvalidRequest(format!(
                    "link '{}': ssl_ca_pem must hold PEM CA certificates, at most 32 KiB",
                    self.name
                )));
            }
        }
        if let Some(m) = &self.security.sasl_mechanism {
            if !matches!(m.as_str(), "PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512") {
                return Err(Error::InvalidRequest(format!(
                    "link '{}': SASL mechanism '{m}' is not supported (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)",
                    self.name
                )));
            }
        }
        Ok(())
    }

    /// Whether the link selects the source topic `name`.
    pub fn selects_topic(&self, name: &str) -> bool {
        matches_any(&self.topics, name)
    }

    /// Whether the link selects the consumer group `group`.
    pub fn selects_group(&self, group: &str) -> bool {
        matches_any(&self.groups, group)
    }

    pub fn encode(&self) -> Result<Vec<u8>> {
        encode(self)
    }

    pub fn decode(value: &[u8]) -> Result<Link> {
        decode(value, "link")
    }
}

/// Where a mirror topic is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MirrorState {
    /// Read-only; the leaders fetch from the source.
    Mirroring,
    /// An ordinary topic now, never mirrored again: writable on each partition once its
    /// leader has stopped and awaited the partition's mirror task.
    Promoted,
    /// Mirroring stopped on an error the link cannot get past by retrying (the source
    /// topic is gone, its partition count shrank, its log no longer matches); read-only.
    Failed,
}

/// One destination topic following one source topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorTopic {
    /// The destination topic (same name as the source topic).
    pub topic: String,
    pub link: String,
    pub source_topic: String,
    pub state: MirrorState,
    /// Why the state is `Failed`, or the last error a task reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl MirrorTopic {
    pub fn encode(&self) -> Result<Vec<u8>> {
        encode(self)
    }

    pub fn decode(value: &[u8]) -> Result<MirrorTopic> {
        decode(value, "mirror topic")
    }

    /// Produce is refused while this holds.
    pub fn read_only(&self) -> bool {
        self.state != MirrorState::Promoted
    }
}

/// A topic or group selector: an exact name, or `re:EXPR` matched against the whole name.
#[derive(Debug)]
pub enum Pattern {
    Exact(String),
    Regex(regex::Regex),
}

impl Pattern {
    pub fn parse(p: &str) -> Result<Pattern> {
        if p.is_empty() || p.len() > 1024 {
            return Err(Error::InvalidRequest(format!(
                "pattern '{p}' must be 1 to 1024 bytes"
            )));
        }
        match p.strip_prefix("re:") {
            Some(expr) => regex::RegexBuilder::new(&format!("^(?:{expr})$"))
                .size_limit(1 << 20)
                .build()
                .map(Pattern::Regex)
                .map_err(|e| Error::InvalidRequest(format!("pattern '{p}': {e}"))),
            None => Ok(Pattern::Exact(p.to_string())),
        }
    }

    pub fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::Exact(n) => n == name,
            Pattern::Regex(r) => r.is_match(name),
        }
    }
}

fn matches_any(patterns: &[String], name: &str) -> bool {
    patterns
        .iter()
        .filter_map(|p| Pattern::parse(p).ok())
        .any(|p| p.matches(name))
}

fn validate_name(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 249
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidRequest(format!(
            "{what} name '{name}' must be 1 to 249 of [a-zA-Z0-9._-]"
        )))
    }
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| Error::InvalidRequest(format!("encoding: {e}")))
}

fn decode<T: for<'de> Deserialize<'de>>(value: &[u8], what: &str) -> Result<T> {
    serde_json::from_slice(value).map_err(|e| Error::CorruptValue {
        key: what.to_string(),
        reason: e.to_string(),
    })
}

/// Refuses a record the store will not hold.
pub(crate) fn validate_record(name: &str, value: &[u8]) -> Result<()> {
    validate_name("mirror record", name)?;
    if value.len() > MIRROR_RECORD_BYTES_MAX {
        return Err(Error::InvalidRequest(format!(
            "mirror record '{name}' is {} bytes, more than {MIRROR_RECORD_BYTES_MAX}",
            value.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link() -> Link {
        Link {
            name: "east".into(),
            bootstrap: "a:9092".into(),
            security: LinkSecurity::default(),
            topics: vec!["orders".into(), "re:logs-.*".into()],
            groups: vec!["re:.*".into()],
            state: LinkState::Active,
        }
    }

    #[test]
    fn links_round_trip_and_select_by_name_or_whole_name_regex() {
        let l = link();
        l.validate().expect("valid");
        assert_eq!(Link::decode(&l.encode().expect("enc")).expect("dec"), l);
        assert!(l.selects_topic("orders"));
        assert!(!l.selects_topic("orders2"));
        assert!(l.selects_topic("logs-1"));
        assert!(!l.selects_topic("xlogs-1"), "anchored at both ends");
        assert!(l.selects_group("anything"));
    }

    #[test]
    fn bad_links_are_refused() {
        let mut l = link();
        l.name = "a/b".into();
        assert!(l.validate().is_err());
        let mut l = link();
        l.topics = vec!["re:(".into()];
        assert!(l.validate().is_err());
        let mut l = link();
        l.bootstrap = " ".into();
        assert!(l.validate().is_err());
        let mut l = link();
        l.security.sasl_mechanism = Some("GSSAPI".into());
        assert!(l.validate().is_err());
        assert!(Link::decode(b"{").is_err());
    }
}
