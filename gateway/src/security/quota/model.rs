//! Client quotas as Kafka defines them: entities, keys, validation of an alteration, the
//! stored record, and which quota applies to a connection (pure).
//!
//! An entity is a user, a client id, or both, each named or `<default>` (Kafka's null
//! name). For a connection of user `U` with client id `C`, each quota key is resolved on
//! its own, taking the first level that sets it (Kafka's precedence):
//!
//! | level | entity                              | metered as (shared by) |
//! |------:|-------------------------------------|------------------------|
//! | 1 | `users/U/clients/C`                     | (U, C) |
//! | 2 | `users/U/clients/<default>`             | (U, C) |
//! | 3 | `users/U`                               | (U, —) all of U's clients together |
//! | 4 | `users/<default>/clients/C`             | (U, C) |
//! | 5 | `users/<default>/clients/<default>`     | (U, C) |
//! | 6 | `users/<default>`                       | (U, —) |
//! | 7 | `clients/C`                             | (—, C) every user of client id C |
//! | 8 | `clients/<default>`                     | (—, C) |
//!
//! Unauthenticated connections are user `ANONYMOUS`, so `users/<default>` applies to them.

use std::collections::BTreeMap;

/// The entity type names on the wire and in `kafka-configs --entity-type`.
pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";

/// A quota's configuration key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaKey {
    /// Bytes per second a producer may send (`producer_byte_rate`).
    ProducerByteRate,
    /// Bytes per second a consumer may fetch (`consumer_byte_rate`).
    ConsumerByteRate,
    /// Percentage of one request-handling thread's time (`request_percentage`).
    RequestPercentage,
    /// Partition mutations per second (`controller_mutation_rate`).
    ControllerMutationRate,
}

impl QuotaKey {
    pub const ALL: [QuotaKey; 4] = [
        QuotaKey::ProducerByteRate,
        QuotaKey::ConsumerByteRate,
        QuotaKey::RequestPercentage,
        QuotaKey::ControllerMutationRate,
    ];

    /// Kafka's name.
    pub fn name(self) -> &'static str {
        match self {
            QuotaKey::ProducerByteRate => "producer_byte_rate",
            QuotaKey::ConsumerByteRate => "consumer_byte_rate",
            QuotaKey::RequestPercentage => "request_percentage",
            QuotaKey::ControllerMutationRate => "controller_mutation_rate",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether Kafka types the key as a LONG (an integral value is required).
    fn is_long(self) -> bool {
        matches!(
            self,
            QuotaKey::ProducerByteRate | QuotaKey::ConsumerByteRate
        )
    }
}

/// One part of an entity: a name, or the default (`<default>`, null on the wire).
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum EntityName {
    Default,
    Named(String),
}

impl EntityName {
    /// From the wire: null is the default.
    pub fn from_wire(name: Option<&str>) -> Self {
        match name {
            None => EntityName::Default,
            Some(n) => EntityName::Named(n.to_string()),
        }
    }

    pub fn to_wire(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Named(n) => Some(n),
        }
    }
}

/// A quota entity: user, client id, or both.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct QuotaEntity {
    pub user: Option<EntityName>,
    pub client_id: Option<EntityName>,
}

impl QuotaEntity {
    /// The name of the entity's stored record: unambiguous for any names.
    pub fn record_name(&self) -> String {
        // JSON of the pair: names may hold any character, JSON escapes them.
        serde_json::to_string(&(&self.user, &self.client_id)).unwrap_or_default()
    }

    /// The entity's components, in Kafka's order (user first).
    pub fn components(&self) -> Vec<(&'static str, Option<&str>)> {
        let mut out = Vec::new();
        if let Some(u) = &self.user {
            out.push((USER, u.to_wire()));
        }
        if let Some(c) = &self.client_id {
            out.push((CLIENT_ID, c.to_wire()));
        }
        out
    }
}

/// Why an alteration or a describe filter is refused (each INVALID_REQUEST unless said).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    #[error("{0}")]
    InvalidRequest(String),
    /// An entity type Oxbow does not know (Kafka answers UNSUPPORTED_VERSION to a describe).
    #[error("{0}")]
    UnknownEntityType(String),
}

/// Builds an entity from the wire's (type, name) components, with Kafka's validation.
pub fn entity_from_components<'a>(
    components: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<QuotaEntity, QuotaError> {
    let mut entity = QuotaEntity {
        user: None,
        client_id: None,
    };
    let mut any = false;
    for (entity_type, name) in components {
        any = true;
        let slot = match entity_type {
            USER => &mut entity.user,
            CLIENT_ID => &mut entity.client_id,
            IP => {
                return Err(QuotaError::InvalidRequest(
                    "ip quotas (connection_creation_rate) are not supported by Oxbow".into(),
                ))
            }
            other => {
                return Err(QuotaError::InvalidRequest(format!(
                    "Unhandled client quota entity type: {other}"
                )))
            }
        };
        if slot.is_some() {
            return Err(QuotaError::InvalidRequest(format!(
                "Invalid quota entity: duplicate entity entry {entity_type}"
            )));
        }
        if name == Some("") {
            return Err(QuotaError::InvalidRequest(format!(
                "Empty {entity_type} not supported"
            )));
        }
        *slot = Some(EntityName::from_wire(name));
    }
    if !any {
        return Err(QuotaError::InvalidRequest(
            "Invalid empty client quota entity".into(),
        ));
    }
    Ok(entity)
}

/// One quota operation of an alteration: set a key, or remove it.
#[derive(Clone, Debug, PartialEq)]
pub struct QuotaOp {
    pub key: String,
    pub value: f64,
    pub remove: bool,
}

/// Applies `ops` to an entity's current quotas, with Kafka's validation; the result is
/// what the entity's record holds afterwards (empty: delete the record).
pub fn apply_ops(
    current: &BTreeMap<QuotaKey, f64>,
    ops: &[QuotaOp],
) -> Result<BTreeMap<QuotaKey, f64>, QuotaError> {
    let mut seen = std::collections::BTreeSet::new();
    let mut next = current.clone();
    for op in ops {
        let key = QuotaKey::from_name(&op.key).ok_or_else(|| {
            QuotaError::InvalidRequest(format!("Invalid configuration key {}", op.key))
        })?;
        if !seen.insert(key) {
            return Err(QuotaError::InvalidRequest(format!(
                "Duplicate quota key {} not updating quota for this entity",
                op.key
            )));
        }
        if op.remove {
            next.remove(&key);
            continue;
        }
        if !op.value.is_finite() || op.value <= 0.0 {
            return Err(QuotaError::InvalidRequest(format!(
                "Quota {} must be greater than 0",
                op.key
            )));
        }
        if key.is_long() && (op.value.fract() != 0.0 || op.value > i64::MAX as f64) {
            return Err(QuotaError::InvalidRequest(format!(
                "Invalid value {} for configuration key {}: expected an integer",
                op.value, op.key
            )));
        }
        next.insert(key, op.value);
    }
    Ok(next)
}

/// The stored form of one entity's quotas (`SecurityKind::ClientQuota`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QuotaRecord {
    pub v: u32,
    pub entity: QuotaEntity,
    /// By Kafka key name.
    pub quotas: BTreeMap<String, f64>,
}

impl QuotaRecord {
    pub const VERSION: u32 = 1;

    pub fn new(entity: QuotaEntity, quotas: &BTreeMap<QuotaKey, f64>) -> Self {
        QuotaRecord {
            v: Self::VERSION,
            entity,
            quotas: quotas
                .iter()
                .map(|(k, v)| (k.name().to_string(), *v))
                .collect(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// A stored record; `None` if it is not one this version reads (logged by the caller).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let r: QuotaRecord = serde_json::from_slice(bytes).ok()?;
        (r.v == Self::VERSION).then_some(r)
    }

    /// The quotas by key; keys this version does not know are skipped.
    pub fn keys(&self) -> BTreeMap<QuotaKey, f64> {
        self.quotas
            .iter()
            .filter_map(|(k, v)| Some((QuotaKey::from_name(k)?, *v)))
            .collect()
    }
}

/// Whose rate a quota meters: the (user, client id) parts the entity shares a meter by;
/// `None` where the level does not distinguish (all of a user's clients share one meter).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MeterKey {
    pub user: Option<String>,
    pub client_id: Option<String>,
}

/// Every quota set in the cluster, indexed for resolution.
#[derive(Clone, Debug, Default)]
pub struct QuotaTable {
    entities: BTreeMap<QuotaEntity, BTreeMap<QuotaKey, f64>>,
}

impl QuotaTable {
    pub fn from_records<'a>(records: impl IntoIterator<Item = &'a QuotaRecord>) -> Self {
        QuotaTable {
            entities: records
                .into_iter()
                .map(|r| (r.entity.clone(), r.keys()))
                .filter(|(_, q)| !q.is_empty())
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }

    pub fn entities(&self) -> impl Iterator<Item = (&QuotaEntity, &BTreeMap<QuotaKey, f64>)> {
        self.entities.iter()
    }

    /// The quota of `key` for a connection of `user` with `client_id`, and the meter it
    /// is counted in; `None` if no level sets it.
    pub fn resolve(&self, user: &str, client_id: &str, key: QuotaKey) -> Option<(f64, MeterKey)> {
        // Most clusters set no quota: every request asks, so answer without allocating.
        if self.entities.is_empty() {
            return None;
        }
        let named = |n: &str| Some(EntityName::Named(n.to_string()));
        let default = || Some(EntityName::Default);
        let u = || Some(user.to_string());
        let c = || Some(client_id.to_string());
        let has_client = !client_id.is_empty();
        // (entity, meter) in precedence order; client levels need a client id.
        let mut levels: Vec<(QuotaEntity, MeterKey)> = Vec::with_capacity(8);
        let entity = |user: Option<EntityName>, client_id: Option<EntityName>| QuotaEntity {
            user,
            client_id,
        };
        let meter = |user: Option<String>, client_id: Option<String>| MeterKey { user, client_id };
        if has_client {
            levels.push((entity(named(user), named(client_id)), meter(u(), c())));
            levels.push((entity(named(user), default()), meter(u(), c())));
        }
        levels.push((entity(named(user), None), meter(u(), None)));
        if has_client {
            levels.push((entity(default(), named(client_id)), meter(u(), c())));
            levels.push((entity(default(), default()), meter(u(), c())));
        }
        levels.push((entity(default(), None), meter(u(), None)));
        if has_client {
            levels.push((entity(None, named(client_id)), meter(None, c())));
            levels.push((entity(None, default()), meter(None, c())));
        }
        levels.into_iter().find_map(|(e, m)| {
            let value = *self.entities.get(&e)?.get(&key)?;
            Some((value, m))
        })
    }
}

/// A DescribeClientQuotas filter component: how one entity type must match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Match {
    /// Exactly this name.
    Exact(String),
    /// The default entity of the type.
    Default,
    /// Any name, or the default.
    Any,
}

/// A DescribeClientQuotas filter: components by entity type, and whether entities with
/// other types are left out (`strict`).
#[derive(Clone, Debug)]
pub struct Filter {
    pub user: Option<Match>,
    pub client_id: Option<Match>,
    pub strict: bool,
}

impl Filter {
    /// Builds a filter from the wire's components (type, match type 0/1/2, name).
    pub fn from_components<'a>(
        components: impl IntoIterator<Item = (&'a str, i8, Option<&'a str>)>,
        strict: bool,
    ) -> Result<Self, QuotaError> {
        let mut filter = Filter {
            user: None,
            client_id: None,
            strict,
        };
        for (entity_type, match_type, name) in components {
            let slot = match entity_type {
                USER => &mut filter.user,
                CLIENT_ID => &mut filter.client_id,
                "" => {
                    return Err(QuotaError::InvalidRequest(
                        "Invalid empty entity type".into(),
                    ))
                }
                other => {
                    return Err(QuotaError::UnknownEntityType(format!(
                        "Custom entity type '{other}' not supported"
                    )))
                }
            };
            if slot.is_some() {
                return Err(QuotaError::InvalidRequest(format!(
                    "Duplicate {entity_type} filter component entity type"
                )));
            }
            *slot = Some(match (match_type, name) {
                (0, Some(n)) => Match::Exact(n.to_string()),
                (0, None) => {
                    return Err(QuotaError::InvalidRequest(
                        "Exact match filter needs a name".into(),
                    ))
                }
                (1, _) => Match::Default,
                (2, _) => Match::Any,
                (t, _) => {
                    return Err(QuotaError::InvalidRequest(format!(
                        "Unknown match type {t}"
                    )))
                }
            });
        }
        Ok(filter)
    }

    pub fn matches(&self, entity: &QuotaEntity) -> bool {
        fn part(m: &Option<Match>, name: &Option<EntityName>, strict: bool) -> bool {
            match (m, name) {
                (None, None) => true,
                (None, Some(_)) => !strict,
                (Some(_), None) => false,
                (Some(Match::Any), Some(_)) => true,
                (Some(Match::Default), Some(n)) => *n == EntityName::Default,
                (Some(Match::Exact(x)), Some(n)) => *n == EntityName::Named(x.clone()),
            }
        }
        part(&self.user, &entity.user, self.strict)
            && part(&self.client_id, &entity.client_id, self.strict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ent(user: Option<Option<&str>>, client: Option<Option<&str>>) -> QuotaEntity {
        QuotaEntity {
            user: user.map(EntityName::from_wire),
            client_id: client.map(EntityName::from_wire),
        }
    }

    fn record(e: QuotaEntity, rate: f64) -> QuotaRecord {
        let mut q = BTreeMap::new();
        q.insert(QuotaKey::ProducerByteRate, rate);
        QuotaRecord::new(e, &q)
    }

    #[test]
    fn each_level_wins_over_the_ones_below_it() {
        // Levels 1..=8, each with a distinct rate; remove the best one at a time.
        let levels = [
            ent(Some(Some("u")), Some(Some("c"))),
            ent(Some(Some("u")), Some(None)),
            ent(Some(Some("u")), None),
            ent(Some(None), Some(Some("c"))),
            ent(Some(None), Some(None)),
            ent(Some(None), None),
            ent(None, Some(Some("c"))),
            ent(None, Some(None)),
        ];
        let meters = [
            (Some("u"), Some("c")),
            (Some("u"), Some("c")),
            (Some("u"), None),
            (Some("u"), Some("c")),
            (Some("u"), Some("c")),
            (Some("u"), None),
            (None, Some("c")),
            (None, Some("c")),
        ];
        for first in 0..levels.len() {
            let records: Vec<_> = levels[first..]
                .iter()
                .enumerate()
                .map(|(i, e)| record(e.clone(), (first + i + 1) as f64))
                .collect();
            let table = QuotaTable::from_records(&records);
            let (rate, meter) = table
                .resolve("u", "c", QuotaKey::ProducerByteRate)
                .expect("a level applies");
            assert_eq!(rate, (first + 1) as f64, "level {}", first + 1);
            let want = meters[first];
            assert_eq!(meter.user.as_deref(), want.0);
            assert_eq!(meter.client_id.as_deref(), want.1);
            assert!(table
                .resolve("u", "c", QuotaKey::ConsumerByteRate)
                .is_none());
        }
    }

    #[test]
    fn an_empty_client_id_meets_only_user_levels_and_others_are_not_matched() {
        let records = vec![
            record(ent(None, Some(None)), 1.0),
            record(ent(Some(Some("bob")), None), 2.0),
        ];
        let table = QuotaTable::from_records(&records);
        assert!(table
            .resolve("alice", "", QuotaKey::ProducerByteRate)
            .is_none());
        assert_eq!(
            table
                .resolve("alice", "x", QuotaKey::ProducerByteRate)
                .map(|r| r.0),
            Some(1.0)
        );
        assert_eq!(
            table
                .resolve("bob", "", QuotaKey::ProducerByteRate)
                .map(|r| r.0),
            Some(2.0)
        );
    }

    #[test]
    fn alterations_are_validated_as_kafka_does() {
        let current = BTreeMap::new();
        let op = |key: &str, value: f64, remove: bool| QuotaOp {
            key: key.into(),
            value,
            remove,
        };
        let ok = apply_ops(
            &current,
            &[
                op("producer_byte_rate", 1024.0, false),
                op("request_percentage", 12.5, false),
            ],
        )
        .expect("valid");
        assert_eq!(ok.get(&QuotaKey::RequestPercentage), Some(&12.5));
        for bad in [
            vec![op("no_such_key", 1.0, false)],
            vec![op("producer_byte_rate", 0.0, false)],
            vec![op("producer_byte_rate", -5.0, false)],
            vec![op("producer_byte_rate", 1.5, false)],
            vec![op("consumer_byte_rate", f64::NAN, false)],
            vec![
                op("producer_byte_rate", 1.0, false),
                op("producer_byte_rate", 2.0, false),
            ],
        ] {
            assert!(apply_ops(&current, &bad).is_err(), "{bad:?}");
        }
        let removed = apply_ops(&ok, &[op("producer_byte_rate", 0.0, true)]).expect("remove");
        assert_eq!(removed.len(), 1);
        for bad in [
            vec![],
            vec![(USER, Some("a")), (USER, Some("b"))],
            vec![(USER, Some(""))],
            vec![("group", Some("g"))],
            vec![(IP, Some("1.2.3.4"))],
        ] {
            assert!(entity_from_components(bad.clone()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn records_round_trip_and_names_are_unambiguous() {
        let a = ent(Some(Some("a\",\"b")), None);
        let b = ent(Some(Some("a")), Some(Some("b")));
        assert_ne!(a.record_name(), b.record_name());
        let r = record(a.clone(), 10.0);
        assert_eq!(QuotaRecord::decode(&r.encode()), Some(r));
        assert!(QuotaRecord::decode(b"{\"v\":9}").is_none());
        assert!(QuotaRecord::decode(&[0xff; 8]).is_none());
    }

    #[test]
    fn filters_match_exact_default_any_and_strictness() {
        let user_only = ent(Some(Some("u")), None);
        let both = ent(Some(Some("u")), Some(None));
        let f = Filter::from_components([(USER, 0, Some("u"))], false).expect("filter");
        assert!(f.matches(&user_only) && f.matches(&both));
        let f = Filter::from_components([(USER, 0, Some("u"))], true).expect("filter");
        assert!(f.matches(&user_only) && !f.matches(&both));
        let f = Filter::from_components([(CLIENT_ID, 1, None)], false).expect("filter");
        assert!(f.matches(&both) && !f.matches(&user_only));
        let f = Filter::from_components([(CLIENT_ID, 2, None)], false).expect("filter");
        assert!(f.matches(&both));
        assert!(matches!(
            Filter::from_components([("ip", 0, Some("x"))], false),
            Err(QuotaError::UnknownEntityType(_))
        ));
        assert!(Filter::from_components([(USER, 1, None), (USER, 2, None)], false).is_err());
    }
}
