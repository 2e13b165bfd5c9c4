//! `GET /v3/clusters/{c}/brokers[/{b}]`: REST Proxy v3 `KafkaBroker`s — id, host, port,
//! rack (the broker's `--az`) — plus what Oxbow knows of each: its lease, whether it is the
//! controller, partitions it leads, its WAL replicas, and for this broker its appended
//! bytes/s and WAL bytes.
//!
//! The brokers are the live ones this broker sees (`cluster::ClusterView`: each is
//! registered under a metadata lease, so being listed means its lease is alive), itself
//! always included. A broker id not live is 404/40407.

use super::{check_cluster, List, ListMetadata, ResourceMetadata};
use crate::broker::Broker;
use crate::cluster::split_host_port;
use crate::http::body::json;
use crate::http::error::ApiError;
use crate::http::extract::ApiPath;
use crate::http::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use oxbow_metadata::{BrokerId, BrokerRegistration};
use serde::Serialize;
use std::collections::HashMap;

#[derive(Debug, Serialize)]
struct BrokerView {
    kind: &'static str,
    metadata: ResourceMetadata,
    cluster_id: String,
    broker_id: BrokerId,
    host: Option<String>,
    port: Option<i32>,
    /// The broker's availability zone (`--az`).
    rack: Option<String>,
    /// `host:port` of its HTTP API (and console).
    http_address: String,
    is_controller: bool,
    /// The broker answering this request.
    is_this_broker: bool,
    /// `valid`: a live lease (for this broker: its guard says so; for a peer: it is
    /// registered, which a lease keeps); `expired`: this broker's own lease lapsed.
    lease: &'static str,
    partitions_led: usize,
    wal_replica_ids: Vec<BrokerId>,
    wal_in_sync_replica_ids: Vec<BrokerId>,
    /// Appended bytes/s over the last sample interval (this broker only).
    bytes_in_per_sec: Option<f64>,
    /// Bytes in its WAL on disk (this broker only).
    wal_bytes: Option<u64>,
}

/// The live brokers, this one always among them, by id.
fn live_brokers(broker: &Broker) -> Vec<BrokerRegistration> {
    let mut all = broker.cluster.brokers();
    let me = broker.settings.broker_id;
    if !all.iter().any(|b| b.broker_id == me) {
        all.push(BrokerRegistration {
            broker_id: me,
            az: None,
            kafka_addr: format!(
                "{}:{}",
                broker.settings.advertised_host, broker.settings.advertised_port
            ),
            http_addr: String::new(),
            internal_addr: String::new(),
            listeners: Default::default(),
        });
        all.sort_by_key(|b| b.broker_id);
    }
    all
}

/// Partitions led, per broker id.
fn leaders(broker: &Broker) -> HashMap<BrokerId, usize> {
    let mut led = HashMap::new();
    for t in broker.topics() {
        for p in &t.partitions {
            *led.entry(p.leader).or_insert(0) += 1;
        }
    }
    led
}

fn broker_view(
    broker: &Broker,
    cluster_id: &str,
    b: BrokerRegistration,
    led: &HashMap<BrokerId, usize>,
) -> BrokerView {
    let me = b.broker_id == broker.settings.broker_id;
    let (host, port) = split_host_port(&b.kafka_addr).unzip();
    let copies = broker.cluster.wal_copies(b.broker_id);
    let lease = match me.then(|| broker.log.lease_valid()).flatten() {
        Some(false) => "expired",
        _ => "valid",
    };
    let self_path = format!("/v3/clusters/{cluster_id}/brokers/{}", b.broker_id);
    BrokerView {
        kind: "KafkaBroker",
        metadata: ResourceMetadata { self_path },
        cluster_id: cluster_id.to_string(),
        broker_id: b.broker_id,
        host,
        port,
        rack: b.az,
        http_address: b.http_addr,
        is_controller: broker.cluster.controller() == Some(b.broker_id),
        is_this_broker: me,
        lease,
        partitions_led: led.get(&b.broker_id).copied().unwrap_or(0),
        wal_replica_ids: copies.replicas,
        wal_in_sync_replica_ids: copies.isr,
        bytes_in_per_sec: me.then(|| broker.samples.bytes_in_per_sec()).flatten(),
        wal_bytes: me.then(|| broker.log.wal_bytes()),
    }
}

/// `GET /v3/clusters/{c}/brokers`.
pub(crate) async fn list(
    State(app): State<AppState>,
    ApiPath(cluster_id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    let broker = &app.http.broker;
    let led = leaders(broker);
    let data = live_brokers(broker)
        .into_iter()
        .map(|b| broker_view(broker, id, b, &led))
        .collect();
    Ok(json(
        StatusCode::OK,
        &List {
            kind: "KafkaBrokerList",
            metadata: ListMetadata {
                self_path: format!("/v3/clusters/{id}/brokers"),
                next: None,
            },
            data,
        },
    ))
}

/// `GET /v3/clusters/{c}/brokers/{b}`.
pub(crate) async fn get(
    State(app): State<AppState>,
    ApiPath((cluster_id, broker_id)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let id = check_cluster(&app, &cluster_id)?;
    let broker = &app.http.broker;
    let found = broker_id
        .parse::<BrokerId>()
        .ok()
        .and_then(|n| live_brokers(broker).into_iter().find(|b| b.broker_id == n))
        .ok_or_else(|| ApiError::unknown_broker(&broker_id))?;
    Ok(json(
        StatusCode::OK,
        &broker_view(broker, id, found, &leaders(broker)),
    ))
}
