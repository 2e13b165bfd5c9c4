//! DescribeConfigs for topics (every known config, overrides marked) and for this broker.

use super::str_bytes;
use super::topics::{SOURCE_DEFAULT, SOURCE_TOPIC_OVERRIDE};
use crate::broker::Broker;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use std::sync::Arc;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// `config_source` for a static broker config.
const SOURCE_STATIC_BROKER: i8 = 4;

/// Kafka's `ConfigType` of each topic config, so admin tools render values right.
fn config_type(name: &str) -> i8 {
    const BOOLEAN: i8 = 1;
    const STRING: i8 = 2;
    const INT: i8 = 3;
    const LONG: i8 = 5;
    const DOUBLE: i8 = 6;
    const LIST: i8 = 7;
    match name {
        "cleanup.policy" => LIST,
        "max.message.bytes"
        | "min.insync.replicas"
        | "segment.bytes"
        | "num.partitions"
        | "message.max.bytes"
        | "broker.id" => INT,
        "retention.bytes"
        | "retention.ms"
        | "message.timestamp.after.max.ms"
        | "message.timestamp.before.max.ms"
        | "delete.retention.ms"
        | "min.compaction.lag.ms"
        | "max.compaction.lag.ms"
        | "segment.ms" => LONG,
        "min.cleanable.dirty.ratio" => DOUBLE,
        "auto.create.topics.enable" => BOOLEAN,
        _ => STRING,
    }
}

fn entry(
    version: i16,
    name: &str,
    value: String,
    source: i8,
    read_only: bool,
) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(&value)))
        .with_config_source(source)
        .with_read_only(read_only)
        .with_config_type(if version >= 3 { config_type(name) } else { 0 })
}

pub fn describe(
    broker: &Arc<Broker>,
    req: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let documented = req.include_documentation && version >= 3;
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
        let r = match res.resource_type {
            RESOURCE_TOPIC => match broker.topic(&name) {
                None => r
                    .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                    .with_error_message(Some(str_bytes(&format!("topic '{name}' does not exist")))),
                Some(topic) => r.with_configs(
                    topic
                        .configs
                        .describe()
                        .into_iter()
                        .filter(|c| wanted(c.name))
                        .map(|c| {
                            let source = if c.is_default {
                                SOURCE_DEFAULT
                            } else {
                                SOURCE_TOPIC_OVERRIDE
                            };
                            // Where Oxbow's meaning differs from Kafka's, say so.
                            let note = oxbow_metadata::topic::config_note(c.name, &c.value)
                                .filter(|_| documented);
                            let e = entry(version, c.name, c.value, source, false);
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
                ];
                r.with_configs(
                    all.into_iter()
                        .filter(|(n, _)| wanted(n))
                        .map(|(n, v)| entry(version, n, v, SOURCE_STATIC_BROKER, true))
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
