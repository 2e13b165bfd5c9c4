//! DescribeConfigs for topics (every Kafka topic config, overrides marked, with Kafka's
//! types and synonyms) and for this broker; IncrementalAlterConfigs and AlterConfigs for
//! topics (the op semantics are `oxbow_metadata::topic_configs`, the store's compare-and-swap
//! is `MetadataStore::alter_topic_configs`).
//!
//! Broker resources cannot be altered: Oxbow's broker settings are its command-line flags.
//! Every key of a BROKER resource is refused with INVALID_REQUEST, Kafka's answer for a
//! config it cannot change at run time ("Cannot update these configs dynamically").

use super::topics::{SOURCE_DEFAULT, SOURCE_TOPIC_OVERRIDE};
use super::{denied, str_bytes};
use crate::broker::Broker;
use crate::security::acl::{AclOperation, AuthzView, ResourceType, CLUSTER_NAME};
use crate::security::Session;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;
use oxbow_metadata::topic::ConfigValue;
use oxbow_metadata::topic_configs::ConfigType;
use oxbow_metadata::{AlterOp, ConfigAlteration, ConfigChange};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// `config_source` for a static broker config.
const SOURCE_STATIC_BROKER: i8 = 4;

/// Kafka's `ConfigType` of each broker config described, so admin tools render values right.
fn broker_config_type(name: &str) -> ConfigType {
    match name {
        "num.partitions" | "message.max.bytes" | "broker.id" => ConfigType::Int,
        "auto.create.topics.enable" | "allow.everyone.if.no.acl.found" | "delete.topic.enable" => {
            ConfigType::Boolean
        }
        "log.retention.ms"
        | "log.retention.bytes"
        | "connections.max.reauth.ms"
        | "sasl.oauthbearer.clock.skew.seconds"
        | "sasl.oauthbearer.jwks.endpoint.refresh.ms" => ConfigType::Long,
        "sasl.enabled.mechanisms" | "sasl.oauthbearer.expected.audience" => ConfigType::List,
        _ => ConfigType::String,
    }
}

/// The security settings of a broker as Kafka names them (none of them secret: key and
/// password material is never among a broker's described configs).
fn security_configs(s: &crate::broker::BrokerSettings) -> Vec<(&'static str, String)> {
    use crate::security::acl::AuthorizerKind;
    let authorizer = match s.authorization.kind {
        AuthorizerKind::None => "",
        // The same rules (decision 27), so tools that look for it see ACLs are on.
        AuthorizerKind::Acl => "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    };
    let mut configs = vec![
        ("authorizer.class.name", authorizer.to_string()),
        (
            "super.users",
            s.authorization
                .super_users
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(";"),
        ),
        (
            "allow.everyone.if.no.acl.found",
            s.authorization.allow_everyone_if_no_acl_found.to_string(),
        ),
        (
            "sasl.enabled.mechanisms",
            s.sasl
                .enabled
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(","),
        ),
        (
            "connections.max.reauth.ms",
            s.sasl.max_reauth.as_millis().to_string(),
        ),
    ];
    // The token checks, when OAUTHBEARER validation is on. Not the JWKS URL: one may carry
    // credentials in its query or user info.
    if let Some(o) = s.oauth.as_ref().map(|v| v.settings()) {
        configs.extend([
            (
                "sasl.oauthbearer.expected.audience",
                o.expected_audience.join(","),
            ),
            (
                "sasl.oauthbearer.expected.issuer",
                o.expected_issuer.clone().unwrap_or_default(),
            ),
            ("sasl.oauthbearer.sub.claim.name", o.sub_claim.clone()),
            (
                "sasl.oauthbearer.clock.skew.seconds",
                o.clock_skew.as_secs().to_string(),
            ),
            (
                "sasl.oauthbearer.jwks.endpoint.refresh.ms",
                o.refresh.as_millis().to_string(),
            ),
        ]);
    }
    configs
}

fn entry(
    version: i16,
    name: &str,
    value: String,
    source: i8,
    read_only: bool,
    kind: ConfigType,
) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(&value)))
        .with_config_source(source)
        .with_read_only(read_only)
        .with_config_type(if version >= 3 { kind.kafka_code() } else { 0 })
}

/// DescribeConfigs' synonyms of a topic config, most specific first (as Kafka lists them):
/// the topic's override, then the broker-level config whose default applies (none for a
/// config without one, as in Kafka).
fn synonyms(c: &ConfigValue) -> Vec<DescribeConfigsSynonym> {
    let synonym = |name: &str, value: &str, source: i8| {
        DescribeConfigsSynonym::default()
            .with_name(str_bytes(name))
            .with_value(Some(str_bytes(value)))
            .with_source(source)
    };
    let mut out = Vec::with_capacity(2);
    if !c.is_default {
        out.push(synonym(c.name, &c.value, SOURCE_TOPIC_OVERRIDE));
    }
    if let Some(broker_name) = c.def.broker_name {
        out.push(synonym(broker_name, c.def.default, SOURCE_DEFAULT));
    }
    out
}

/// The refusal of a config request on one resource: `op` (DESCRIBE_CONFIGS or
/// ALTER_CONFIGS) on the topic, or on the cluster for a broker resource (Kafka's
/// `ConfigHelper` and `AuthHelper`).
fn config_refusal(
    authz: &AuthzView,
    resource_type: i8,
    name: &str,
    op: AclOperation,
) -> Option<(i16, String)> {
    let (rt, resource) = match resource_type {
        RESOURCE_TOPIC => (ResourceType::Topic, name),
        _ => (ResourceType::Cluster, CLUSTER_NAME),
    };
    (!authz.allows(op, rt, resource)).then(|| {
        (
            denied(rt),
            format!("{op} on {rt} {resource} is not authorized"),
        )
    })
}

pub fn describe(
    broker: &Arc<Broker>,
    session: &Session,
    req: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let authz = broker.authz(session);
    let documented = req.include_documentation && version >= 3;
    let with_synonyms = req.include_synonyms;
    let mut results = Vec::with_capacity(req.resources.len());
    for res in req.resources {
        let name = res.resource_name.to_string();
        let keys: Option<Vec<String>> = res
            .configuration_keys
            .map(|k| k.iter().map(|s| s.to_string()).collect());
        let wanted = |n: &str| keys.as_ref().is_none_or(|k| k.iter().any(|x| x == n));
        let r = DescribeConfigsResult::default()
            .with_resource_type(res.resource_type)
            .with_resource_name(res.resource_name.clone());
        if let Some((code, message)) = config_refusal(
            &authz,
            res.resource_type,
            &name,
            AclOperation::DescribeConfigs,
        ) {
            results.push(
                r.with_error_code(code)
                    .with_error_message(Some(str_bytes(&message))),
            );
            continue;
        }
        let r = match res.resource_type {
            RESOURCE_TOPIC => match topic_configs(broker, &name) {
                None => r
                    .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                    .with_error_message(Some(str_bytes(&format!("topic '{name}' does not exist")))),
                Some(configs) => r.with_configs(
                    configs
                        .describe()
                        .into_iter()
                        .filter(|c| wanted(c.name))
                        .map(|c| {
                            let fallback =
                                broker.static_topic_default(c.name).filter(|_| c.is_default);
                            let (value, source) = match &fallback {
                                Some((_, v)) => (v.clone(), SOURCE_STATIC_BROKER),
                                None if c.is_default => (c.value.clone(), SOURCE_DEFAULT),
                                None => (c.value.clone(), SOURCE_TOPIC_OVERRIDE),
                            };
                            // Where Oxbow's meaning differs from Kafka's, say so.
                            let note = oxbow_metadata::topic::config_note(c.name, &c.value)
                                .filter(|_| documented);
                            let synonyms = match (&fallback, with_synonyms) {
                                (_, false) => Vec::new(),
                                (Some((name, v)), true) => vec![DescribeConfigsSynonym::default()
                                    .with_name(str_bytes(name))
                                    .with_value(Some(str_bytes(v)))
                                    .with_source(SOURCE_STATIC_BROKER)],
                                (None, true) => synonyms(&c),
                            };
                            let e = entry(version, c.name, value, source, false, c.def.kind)
                                .with_synonyms(synonyms);
                            match note {
                                Some(n) => e.with_documentation(Some(str_bytes(n))),
                                None => e,
                            }
                        })
                        .collect(),
                ),
            },
            RESOURCE_BROKER if name.is_empty() || name == broker.settings.broker_id.to_string() => {
                let s = &broker.settings;
                let all = [
                    ("broker.id", s.broker_id.to_string()),
                    (
                        "auto.create.topics.enable",
                        s.auto_create_topics.to_string(),
                    ),
                    ("num.partitions", s.default_partitions.to_string()),
                    ("message.max.bytes", "1048588".to_string()),
                    (
                        "advertised.listeners",
                        s.listeners
                            .iter()
                            .map(|(name, (host, port))| format!("{name}://{host}:{port}"))
                            .collect::<Vec<_>>()
                            .join(","),
                    ),
                    // Where partitions' unsealed data is on local disk (DescribeLogDirs
                    // also names the object store).
                    (
                        "log.dirs",
                        broker
                            .log
                            .wal_dir()
                            .map(|d| d.display().to_string())
                            .unwrap_or_default(),
                    ),
                    ("log.retention.ms", s.log_retention_ms.to_string()),
                    ("log.retention.bytes", s.log_retention_bytes.to_string()),
                    ("delete.topic.enable", "true".to_string()),
                ];
                r.with_configs(
                    all.into_iter()
                        .chain(security_configs(s))
                        .filter(|(n, _)| wanted(n))
                        .map(|(n, v)| {
                            entry(
                                version,
                                n,
                                v,
                                SOURCE_STATIC_BROKER,
                                true,
                                broker_config_type(n),
                            )
                        })
                        .collect(),
                )
            }
            RESOURCE_BROKER => r
                .with_error_code(ResponseError::InvalidRequest.code())
                .with_error_message(Some(str_bytes(&format!("no broker '{name}' here")))),
            other => r
                .with_error_code(ResponseError::InvalidRequest.code())
                .with_error_message(Some(str_bytes(&format!(
                    "resource type {other} is not supported"
                )))),
        };
        results.push(r);
    }
    DescribeConfigsResponse::default().with_results(results)
}

/// One resource's answer to an alteration: (error code, message).
type Outcome = (i16, Option<String>);

fn refused(code: ResponseError, message: String) -> Outcome {
    (code.code(), Some(message))
}

/// One resource of an alter request: refused unless the session may ALTER_CONFIGS it,
/// else altered (or only validated).
async fn authorized_alter(
    broker: &Arc<Broker>,
    authz: &AuthzView,
    resource_type: i8,
    name: &str,
    keys: Result<Vec<String>, String>,
    alteration: Result<ConfigAlteration, String>,
    validate_only: bool,
) -> Outcome {
    if let Some((code, message)) =
        config_refusal(authz, resource_type, name, AclOperation::AlterConfigs)
    {
        return (code, Some(message));
    }
    alter_resource(
        broker,
        resource_type,
        name,
        keys.unwrap_or_default(),
        alteration,
        validate_only,
    )
    .await
}

/// Alters one resource; `alteration` is what its entries said (or why they are refused).
async fn alter_resource(
    broker: &Arc<Broker>,
    resource_type: i8,
    name: &str,
    keys: Vec<String>,
    alteration: Result<ConfigAlteration, String>,
    validate_only: bool,
) -> Outcome {
    match resource_type {
        RESOURCE_TOPIC => {
            let alteration = match alteration {
                Ok(a) => a,
                Err(why) => return refused(ResponseError::InvalidRequest, why),
            };
            match broker
                .alter_topic_configs(name, alteration, validate_only)
                .await
            {
                Ok(_) => (0, None),
                Err(e) => (e.code(), Some(e.to_string())),
            }
        }
        RESOURCE_BROKER if keys.is_empty() => (0, None),
        RESOURCE_BROKER => refused(
            ResponseError::InvalidRequest,
            format!(
                "Cannot update these configs dynamically: {} (Oxbow's broker settings are \
                 its command-line flags; set topic configs on the topic)",
                keys.join(", ")
            ),
        ),
        other => refused(
            ResponseError::InvalidRequest,
            format!("resource type {other} is not supported"),
        ),
    }
}

/// The keys of one resource's entries, refusing a key named twice (Kafka: INVALID_REQUEST,
/// "Error due to duplicate config keys").
fn unique_keys<'a>(names: impl Iterator<Item = &'a StrBytes>) -> Result<Vec<String>, String> {
    let mut seen = BTreeSet::new();
    let mut keys = Vec::new();
    for n in names {
        let key = n.to_string();
        if !seen.insert(key.clone()) {
            return Err(format!("Error due to duplicate config keys: {key}"));
        }
        keys.push(key);
    }
    Ok(keys)
}

/// IncrementalAlterConfigs (API 44): per key SET / DELETE / APPEND / SUBTRACT.
pub async fn incremental_alter(
    broker: &Arc<Broker>,
    session: &Session,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let authz = broker.authz(session);
    let mut responses = Vec::with_capacity(req.resources.len());
    for res in req.resources {
        let name = res.resource_name.to_string();
        let keys = unique_keys(res.configs.iter().map(|c| &c.name));
        let alteration = keys.clone().and_then(|_| {
            res.configs
                .iter()
                .map(|c| {
                    let op = AlterOp::from_kafka(c.config_operation).ok_or_else(|| {
                        format!(
                            "unknown config operation {} for key {}",
                            c.config_operation, c.name
                        )
                    })?;
                    Ok(ConfigChange {
                        name: c.name.to_string(),
                        op,
                        value: c.value.as_ref().map(|v| v.to_string()),
                    })
                })
                .collect::<Result<Vec<_>, String>>()
                .map(ConfigAlteration::Incremental)
        });
        let (code, message) = authorized_alter(
            broker,
            &authz,
            res.resource_type,
            &name,
            keys,
            alteration,
            req.validate_only,
        )
        .await;
        responses.push(
            incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_error_code(code)
                .with_error_message(message.as_deref().map(str_bytes))
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name),
        );
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

/// AlterConfigs (API 33): the given entries become the resource's whole override set.
pub async fn alter(
    broker: &Arc<Broker>,
    session: &Session,
    req: AlterConfigsRequest,
) -> AlterConfigsResponse {
    let authz = broker.authz(session);
    let mut responses = Vec::with_capacity(req.resources.len());
    for res in req.resources {
        let name = res.resource_name.to_string();
        let keys = unique_keys(res.configs.iter().map(|c| &c.name));
        let alteration = keys.clone().and_then(|_| {
            res.configs
                .iter()
                .map(|c| match &c.value {
                    Some(v) => Ok((c.name.to_string(), v.to_string())),
                    None => Err(format!("Null value not supported for : {}", c.name)),
                })
                .collect::<Result<BTreeMap<_, _>, String>>()
                .map(ConfigAlteration::Replace)
        });
        let (code, message) = authorized_alter(
            broker,
            &authz,
            res.resource_type,
            &name,
            keys,
            alteration,
            req.validate_only,
        )
        .await;
        responses.push(
            alter_configs_response::AlterConfigsResourceResponse::default()
                .with_error_code(code)
                .with_error_message(message.as_deref().map(str_bytes))
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name),
        );
    }
    AlterConfigsResponse::default().with_responses(responses)
}

/// A topic's configs: a stored topic's, or for `__consumer_offsets` (listed by Metadata, so
/// `kafka-topics.sh --describe` asks for them) those Kafka creates it with.
fn topic_configs(broker: &Broker, name: &str) -> Option<oxbow_metadata::TopicConfigs> {
    if name == crate::transactions::markers::OFFSETS_TOPIC {
        let overrides = [
            ("cleanup.policy", "compact"),
            ("compression.type", "producer"),
            ("segment.bytes", "104857600"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        return oxbow_metadata::TopicConfigs::validated(overrides).ok();
    }
    broker.topic(name).map(|t| t.configs.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_named_twice_is_refused() {
        let names: Vec<StrBytes> = ["retention.ms", "segment.ms", "retention.ms"]
            .iter()
            .map(|n| str_bytes(n))
            .collect();
        let e = unique_keys(names.iter()).expect_err("duplicate");
        assert!(e.contains("duplicate config keys: retention.ms"), "{e}");
        assert_eq!(
            unique_keys(names[..2].iter()),
            Ok(vec!["retention.ms".to_string(), "segment.ms".to_string()])
        );
    }
}
