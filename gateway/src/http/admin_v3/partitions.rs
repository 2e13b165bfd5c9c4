//! `GET /v3/clusters/{c}/topics/{t}/partitions[/{p}]`: REST Proxy v3 `KafkaPartition`s
//! with Oxbow's replica state and load beside the related links.
//!
//! Replicas are the leader and its WAL replicas, the ISR the leader and the live ones
//! recorded in sync (`cluster::PartitionReplicas`, the same as Metadata answers). Offsets,
//! stored bytes and records/s are known for partitions led here and open (a partition
//! opens at its first produce or fetch); `null` for the others: a read neither opens a
//! partition nor asks a peer.

use super::{check_cluster, List, ListMetadata, ResourceMetadata};
use crate::broker::Broker;
use crate::http::body::json;
use crate::http::error::ApiError;
use crate::http::extract::ApiPath;
use crate::http::topics::{existing_partition, existing_topic};
use crate::http::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use oxbow_metadata::{BrokerId, PartitionState, TopicMetadata, TopicPartition};
use serde::Serialize;

#[derive(Debug, Serialize)]
pub(super) struct Related {
    related: String,
}

impl Related {
    pub(super) fn to(path: String) -> Self {
        Related { related: path }
    }
}

/// What this broker knows of one partition's replicas and load.
#[derive(Debug, Default, Serialize)]
pub(super) struct PartitionStats {
    pub(super) leader_id: BrokerId,
    pub(super) leader_epoch: i32,
    pub(super) leader_live: bool,
    pub(super) replica_ids: Vec<BrokerId>,
    pub(super) isr_ids: Vec<BrokerId>,
    pub(super) offline_replica_ids: Vec<BrokerId>,
    pub(super) under_replicated: bool,
    pub(super) log_start_offset: i64,
    /// Led here only.
    pub(super) high_watermark: Option<i64>,
    /// Record-batch bytes in the object store from the log start (led here only; counted
    /// every compaction round).
    pub(super) stored_bytes: Option<u64>,
    /// Appended records per second over the last sample interval (led here only).
    pub(super) records_per_sec: Option<f64>,
}

pub(super) fn partition_stats(
    broker: &Broker,
    topic: &TopicMetadata,
    p: &PartitionState,
) -> PartitionStats {
    let wanted = crate::metrics::health::wanted_copies(broker);
    let replicas = broker.cluster.partition_replicas(p.leader, wanted);
    let tp = TopicPartition::new(topic.topic_id, p.partition);
    let open = broker.log.get(&tp);
    let offsets = open.as_ref().and_then(|o| o.offsets().ok());
    PartitionStats {
        leader_id: p.leader,
        leader_epoch: p.leader_epoch,
        leader_live: replicas.leader_live,
        under_replicated: replicas.isr.len() < replicas.replicas.len(),
        replica_ids: replicas.replicas,
        isr_ids: replicas.isr,
        offline_replica_ids: replicas.offline,
        log_start_offset: offsets.map_or(p.log_start_offset, |o| o.0),
        high_watermark: offsets.map(|o| o.1),
        stored_bytes: open.as_ref().map(|o| o.stored().0),
        records_per_sec: open
            .as_ref()
            .and_then(|_| broker.samples.records_per_sec(&tp)),
    }
}

/// Totals over a topic's partitions, shown with each v3 topic.
#[derive(Debug, Default, Serialize)]
pub(super) struct TopicStats {
    pub(super) under_replicated_partitions: usize,
    pub(super) offline_partitions: usize,
    /// Over the partitions led here.
    pub(super) stored_bytes: u64,
    pub(super) records_per_sec: f64,
    pub(super) partitions_led_here: usize,
}

pub(super) fn topic_stats(broker: &Broker, topic: &TopicMetadata) -> TopicStats {
    let me = broker.settings.broker_id;
    let mut s = TopicStats::default();
    for p in &topic.partitions {
        let st = partition_stats(broker, topic, p);
        s.under_replicated_partitions += usize::from(st.under_replicated);
        s.offline_partitions += usize::from(!st.leader_live);
        s.stored_bytes += st.stored_bytes.unwrap_or(0);
        s.records_per_sec += st.records_per_sec.unwrap_or(0.0);
        s.partitions_led_here += usize::from(p.leader == me);
    }
    s
}

#[derive(Debug, Serialize)]
struct PartitionView {
    kind: &'static str,
    metadata: ResourceMetadata,
    cluster_id: String,
    topic_name: String,
    partition_id: i32,
    leader: Related,
    replicas: Related,
    #[serde(flatten)]
    stats: PartitionStats,
}

fn partition_view(
    broker: &Broker,
    cluster_id: &str,
    topic: &TopicMetadata,
    p: &PartitionState,
) -> PartitionView {
    let base = format!(
        "/v3/clusters/{cluster_id}/topics/{}/partitions/{}",
        topic.name, p.partition
    );
    PartitionView {
        kind: "KafkaPartition",
        leader: Related::to(format!("{base}/replicas/{}", p.leader)),
        replicas: Related::to(format!("{base}/replicas")),
        metadata: ResourceMetadata { self_path: base },
        cluster_id: cluster_id.to_string(),
        topic_name: topic.name.clone(),
        partition_id: p.partition,
        stats: partition_stats(broker, topic, p),
    }
}

/// `GET /v3/clusters/{c}/topics/{t}/partitions`.
pub(crate) async fn list(
    State(app): State<AppState>,
    ApiPath((cluster_id, topic)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    let t = existing_topic(&app, &topic)?;
    let broker = &app.http.broker;
    let data = t
        .partitions
        .iter()
        .map(|p| partition_view(broker, id, &t, p))
        .collect();
    Ok(json(
        StatusCode::OK,
        &List {
            kind: "KafkaPartitionList",
            metadata: ListMetadata {
                self_path: format!("/v3/clusters/{id}/topics/{}/partitions", t.name),
                next: None,
            },
            data,
        },
    ))
}

/// `GET /v3/clusters/{c}/topics/{t}/partitions/{p}`.
pub(crate) async fn get(
    State(app): State<AppState>,
    ApiPath((cluster_id, topic, partition)): ApiPath<(String, String, String)>,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    let t = existing_topic(&app, &topic)?;
    let p = existing_partition(&t, &partition)?;
    Ok(json(
        StatusCode::OK,
        &partition_view(&app.http.broker, id, &t, p),
    ))
}
