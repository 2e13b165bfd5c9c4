//! DescribeLogDirs (`kafka-log-dirs.sh`, admin clients' `describeLogDirs`): where this
//! broker keeps the partitions it leads, and how many bytes each holds there.
//!
//! An Oxbow partition lives in two places, reported as two "log directories" so that sizes
//! add up to the partition's size without counting a byte twice:
//! - the WAL directory (`{data dir}/wal`), on local disk: what the partition holds that is
//!   not sealed yet (`partition_size` = its unsealed bytes), with the volume's
//!   `total_bytes` and `usable_bytes` (v4); `KAFKA_STORAGE_ERROR` once the WAL failed;
//! - the object store (`s3://bucket/prefix` or a directory), the system of record: what is
//!   catalogued from the log start (`partition_size` = its record-batch bytes, counted from
//!   the in-memory catalogue for the first [`FRESH_COUNTS_MAX`] partitions of a request, the
//!   compactor's last count for the rest), volume sizes unknown (-1).
//!
//! Only partitions this broker leads are listed (each is on one broker, as a Kafka replica
//! is on one); `offset_lag` is 0 and nothing is a future replica. DESCRIBE on the cluster
//! is required (Kafka); without it the answer is `CLUSTER_AUTHORIZATION_FAILED` (v3+) or
//! empty.

use super::{denied, str_bytes, topic_name};
use crate::broker::Broker;
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::security::Session;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Partitions whose catalogued bytes one request counts afresh (from the in-memory
/// catalogue); the rest report the compactor's last count.
const FRESH_COUNTS_MAX: usize = 1024;

/// Sizes of one partition: (unsealed bytes on the WAL's disk, catalogued bytes).
type Sizes = (u64, u64);

pub async fn describe(
    broker: &Arc<Broker>,
    session: &Session,
    req: DescribeLogDirsRequest,
    version: i16,
) -> DescribeLogDirsResponse {
    if !broker.authorize(
        session,
        AclOperation::Describe,
        ResourceType::Cluster,
        CLUSTER_NAME,
    ) {
        let r = DescribeLogDirsResponse::default();
        return if version >= 3 {
            r.with_error_code(denied(ResourceType::Cluster))
        } else {
            r
        };
    }
    // What was asked for: topic → partitions (`None`: every partition of every topic).
    let wanted: Option<BTreeMap<String, BTreeSet<i32>>> = req.topics.map(|topics| {
        let mut m: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
        for t in topics {
            m.entry(t.topic.0.to_string())
                .or_default()
                .extend(t.partitions);
        }
        m
    });
    let log = &broker.log;
    // topic → partition → sizes, for the partitions led here that were asked for.
    let mut led: BTreeMap<String, BTreeMap<i32, Sizes>> = BTreeMap::new();
    let mut counted = 0usize;
    for p in log.open_partitions() {
        let index = p.topic_partition.partition;
        let asked = wanted.as_ref().is_none_or(|w| {
            w.get(&p.topic_name)
                .is_some_and(|parts| parts.contains(&index))
        });
        if !asked {
            continue;
        }
        let unsealed = p.unsealed_bytes().unwrap_or(0);
        // Counted now for the first partitions, the last count (the compactor's, at most a
        // round old) for the rest: one request's work stays bounded whatever it asks for.
        let stored = if counted < FRESH_COUNTS_MAX {
            counted += 1;
            match log.stored_bytes(&p).await {
                Ok(b) => b,
                // The last count, rather than nothing (the catalogue was unreadable just now).
                Err(_) => p.stored().0,
            }
        } else {
            p.stored().0
        };
        led.entry(p.topic_name.clone())
            .or_default()
            .insert(index, (unsealed, stored));
    }
    let topics = |size: fn(&Sizes) -> u64| -> Vec<DescribeLogDirsTopic> {
        led.iter()
            .map(|(name, parts)| {
                DescribeLogDirsTopic::default()
                    .with_name(topic_name(name))
                    .with_partitions(
                        parts
                            .iter()
                            .map(|(index, sizes)| {
                                DescribeLogDirsPartition::default()
                                    .with_partition_index(*index)
                                    .with_partition_size(
                                        i64::try_from(size(sizes)).unwrap_or(i64::MAX),
                                    )
                                    .with_offset_lag(0)
                                    .with_is_future_key(false)
                            })
                            .collect(),
                    )
            })
            .collect()
    };
    let mut results = Vec::with_capacity(2);
    if let Some(dir) = log.wal_dir() {
        let (total, usable) = volume_bytes(dir);
        let wal = DescribeLogDirsResult::default()
            .with_log_dir(str_bytes(&dir.display().to_string()))
            .with_total_bytes(total)
            .with_usable_bytes(usable);
        results.push(if log.wal_failure().is_some() {
            wal.with_error_code(ResponseError::KafkaStorageError.code())
        } else {
            wal.with_topics(topics(|s| s.0))
        });
    }
    results.push(
        DescribeLogDirsResult::default()
            .with_log_dir(str_bytes(&broker.settings.object_store_location))
            .with_topics(topics(|s| s.1))
            .with_total_bytes(-1)
            .with_usable_bytes(-1),
    );
    DescribeLogDirsResponse::default().with_results(results)
}

/// (total, usable) bytes of the volume holding `dir`; -1 each when unknown.
fn volume_bytes(dir: &std::path::Path) -> (i64, i64) {
    #[cfg(unix)]
    if let Ok(s) = nix::sys::statvfs::statvfs(dir) {
        let block = s.fragment_size() as u128;
        let clamp = |blocks: u128| i64::try_from(blocks * block).unwrap_or(i64::MAX);
        return (
            clamp(s.blocks() as u128),
            clamp(s.blocks_available() as u128),
        );
    }
    let _ = dir;
    (-1, -1)
}
