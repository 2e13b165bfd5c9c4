//! `oxbow cluster describe` and `oxbow partitions reassign|list-reassignments`: see and
//! steer placement.
//!
//! Everything goes through the Kafka protocol, so the commands work from anywhere a client
//! can reach one broker: Metadata gives the live brokers (address, rack = `--az`), the
//! controller, and each partition's leader and leader epoch (a partition whose leader's
//! lease has ended shows that leader as offline until the controller moves it);
//! ListPartitionReassignments gives the transfers still pending; AlterPartitionReassignments
//! asks for a partition to be led by another broker (the current leader seals, then hands
//! it over). `--json` prints one JSON document for scripts and tests.

use std::collections::BTreeMap;

use serde_json::json;

use super::ConnectArgs;
use crate::client::cluster::Reassignment;

/// `oxbow cluster ...`
#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,

    #[command(subcommand)]
    pub command: ClusterCommand,
}

/// What to show about the cluster.
#[derive(Debug, clap::Subcommand)]
pub enum ClusterCommand {
    /// Brokers (address, AZ, lease, partitions led), the controller, pending transfers;
    /// with --topic, each partition's leader and leader epoch.
    Describe(DescribeArgs),
}

/// `oxbow cluster describe`
#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    /// Also list this topic's partitions with leader and leader epoch.
    #[arg(long)]
    pub topic: Option<String>,

    /// Print one JSON document instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// `oxbow partitions ...`
#[derive(Debug, clap::Args)]
pub struct PartitionsArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,

    #[command(subcommand)]
    pub command: PartitionsCommand,
}

/// How to steer partitions.
#[derive(Debug, clap::Subcommand)]
pub enum PartitionsCommand {
    /// Move a partition's leadership to another broker (graceful: the leader seals, then
    /// hands over). Returns once the request is recorded; `--wait` waits for the move.
    Reassign(ReassignArgs),
    /// Transfers requested and not yet done.
    ListReassignments,
}

/// `oxbow partitions reassign --topic T --partition P --to BROKER`
#[derive(Debug, clap::Args)]
pub struct ReassignArgs {
    #[arg(long)]
    pub topic: String,

    #[arg(long)]
    pub partition: i32,

    /// The broker id that should lead the partition.
    #[arg(long, conflicts_with = "cancel")]
    pub to: Option<i32>,

    /// Withdraw a pending request instead.
    #[arg(long)]
    pub cancel: bool,

    /// Wait until the partition is led by --to (bounded by 30 s).
    #[arg(long)]
    pub wait: bool,
}

pub async fn run(args: ClusterArgs) -> anyhow::Result<()> {
    match args.command {
        ClusterCommand::Describe(d) => describe(&args.connect, d).await,
    }
}

pub async fn run_partitions(args: PartitionsArgs) -> anyhow::Result<()> {
    match args.command {
        PartitionsCommand::Reassign(r) => reassign(&args.connect, r).await,
        PartitionsCommand::ListReassignments => {
            let mut client = args.connect.connect().await?;
            for r in client.list_reassignments().await? {
                println!(
                    "Topic: {}\tPartition: {}\tLeader: {}\tMovingTo: {}",
                    r.topic,
                    r.partition,
                    r.removing.first().map_or("-".into(), i32::to_string),
                    r.adding.first().map_or("-".into(), i32::to_string),
                );
            }
            Ok(())
        }
    }
}

async fn describe(connect: &ConnectArgs, args: DescribeArgs) -> anyhow::Result<()> {
    let mut client = connect.connect().await?;
    let metadata = client.metadata(None).await?;
    let pending = client.list_reassignments().await.unwrap_or_default();
    let pending: BTreeMap<(String, i32), &Reassignment> = pending
        .iter()
        .map(|r| ((r.topic.clone(), r.partition), r))
        .collect();

    // Partitions led per broker; brokers only seen as offline leaders have no lease.
    let mut leads: BTreeMap<i32, usize> = metadata.brokers.iter().map(|b| (b.node_id, 0)).collect();
    let mut offline: BTreeMap<i32, usize> = BTreeMap::new();
    // Internal topics (the listed `__consumer_offsets`) hold nothing here: not load.
    for t in metadata.topics.iter().filter(|t| !t.is_internal) {
        for p in &t.partitions {
            match p.leader {
                Some(l) => *leads.entry(l).or_default() += 1,
                None => {
                    for o in &p.offline_replicas {
                        *offline.entry(*o).or_default() += 1;
                    }
                }
            }
        }
    }
    let mut brokers: Vec<serde_json::Value> = metadata
        .brokers
        .iter()
        .map(|b| {
            json!({
                "id": b.node_id,
                "address": b.addr(),
                "az": b.rack,
                "lease_alive": true,
                "controller": metadata.controller_id == Some(b.node_id),
                "partitions": leads.get(&b.node_id).copied().unwrap_or(0),
            })
        })
        .collect();
    for (id, n) in &offline {
        if !leads.contains_key(id) {
            brokers.push(json!({
                "id": id, "address": null, "az": null, "lease_alive": false,
                "controller": false, "partitions": 0, "partitions_waiting_failover": n,
            }));
        }
    }
    let topic = match &args.topic {
        Some(name) => {
            let t = metadata
                .topics
                .iter()
                .find(|t| &t.name == name)
                .ok_or_else(|| anyhow::anyhow!("topic '{name}' does not exist"))?;
            Some(t)
        }
        None => None,
    };
    let partitions: Vec<serde_json::Value> = topic
        .map(|t| {
            t.partitions
                .iter()
                .map(|p| {
                    json!({
                        "topic": t.name,
                        "partition": p.partition,
                        "leader": p.leader,
                        "leader_epoch": p.leader_epoch,
                        "offline": p.offline_replicas,
                        "transfer_to": pending
                            .get(&(t.name.clone(), p.partition))
                            .and_then(|r| r.adding.first()),
                    })
                })
                .collect()
        })
        .unwrap_or_default();

    if args.json {
        let doc = json!({
            "cluster_id": metadata.cluster_id,
            "controller": metadata.controller_id,
            "brokers": brokers,
            "pending_transfers": pending.len(),
            "partitions": partitions,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!(
        "Cluster: {}\tController: {}\tPendingTransfers: {}",
        metadata.cluster_id.as_deref().unwrap_or("-"),
        metadata
            .controller_id
            .map_or("-".to_string(), |c| c.to_string()),
        pending.len()
    );
    println!(
        "{:<8}{:<24}{:<12}{:<10}Leads",
        "Broker", "Address", "AZ", "Lease"
    );
    for b in &brokers {
        let text = |k: &str| match &b[k] {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => "-".to_string(),
            other => other.to_string(),
        };
        let lease = if b["lease_alive"] == json!(true) {
            "alive"
        } else {
            "expired"
        };
        let leads = match b.get("partitions_waiting_failover") {
            Some(n) => format!("0 ({n} waiting for failover)"),
            None => text("partitions"),
        };
        let controller = if b["controller"] == json!(true) {
            " (controller)"
        } else {
            ""
        };
        println!(
            "{:<8}{:<24}{:<12}{:<10}{}{}",
            text("id"),
            text("address"),
            text("az"),
            lease,
            leads,
            controller
        );
    }
    for p in &partitions {
        let leader = match &p["leader"] {
            serde_json::Value::Null => format!("none (offline: {})", p["offline"]),
            l => l.to_string(),
        };
        let moving = match &p["transfer_to"] {
            serde_json::Value::Null => String::new(),
            t => format!("\tMovingTo: {t}"),
        };
        println!(
            "Topic: {}\tPartition: {}\tLeader: {}\tLeaderEpoch: {}{}",
            p["topic"].as_str().unwrap_or("-"),
            p["partition"],
            leader,
            p["leader_epoch"],
            moving
        );
    }
    Ok(())
}

async fn reassign(connect: &ConnectArgs, args: ReassignArgs) -> anyhow::Result<()> {
    let to = match (args.to, args.cancel) {
        (Some(to), false) => Some(to),
        (None, true) => None,
        _ => anyhow::bail!("give --to BROKER, or --cancel"),
    };
    let mut client = connect.connect().await?;
    client
        .reassign_partition(&args.topic, args.partition, to)
        .await?;
    match to {
        None => println!(
            "Cancelled the reassignment of {}-{}.",
            args.topic, args.partition
        ),
        Some(to) => println!(
            "Requested {}-{} to move to broker {to}.",
            args.topic, args.partition
        ),
    }
    if let (Some(to), true) = (to, args.wait) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            client.invalidate_topic(&args.topic);
            let t = client.topic_metadata(&args.topic).await;
            let led = t
                .ok()
                .and_then(|t| {
                    t.partitions
                        .iter()
                        .find(|p| p.partition == args.partition)
                        .cloned()
                })
                .and_then(|p| p.leader);
            if led == Some(to) {
                println!("{}-{} is led by broker {to}.", args.topic, args.partition);
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!(
                    "{}-{} is still led by {led:?} after 30 s (see `oxbow partitions list-reassignments`)",
                    args.topic,
                    args.partition
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
    Ok(())
}
