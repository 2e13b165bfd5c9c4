//! One module per Kafka API. Each takes the decoded request and returns the response body;
//! APIs that wait (produce durability, fetch long-poll) return the waiting part as a future.

mod acls;
pub mod api_versions;
mod cluster;
mod configs;
mod delete_records;
mod describe_topic_partitions;
mod elect;
mod fetch;
mod groups;
mod leader_epoch;
mod list_offsets;
mod log_dirs;
mod metadata;
mod produce;
mod producer_id;
mod producers;
mod quotas;
mod reassign;
pub mod sasl;
mod scram_users;
mod topics;
mod txn;

use crate::broker::Broker;
use crate::security::Session;
use futures::future::BoxFuture;
use kafka_protocol::messages::{RequestHeader, RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use std::sync::Arc;

/// A handler's answer.
pub enum Reply {
    /// The response, ready now.
    Now(Box<ResponseKind>),
    /// The response, once the future completes (responses still go out in request order).
    Later(BoxFuture<'static, ResponseKind>),
    /// No response at all (`acks=0` produce).
    NoResponse,
}

/// Runs the ordered part of a request. Only versions in [`super::versions::SUPPORTED`]
/// reach here.
pub async fn handle(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    session: &Session,
    request: RequestKind,
) -> Reply {
    let v = header.request_api_version;
    let response = match request {
        RequestKind::JoinGroup(r) => {
            let client_id = header.client_id.as_deref().unwrap_or("").to_string();
            return groups::join(broker, session, r, v, client_id);
        }
        RequestKind::SyncGroup(r) => return groups::sync(broker, session, r, v),
        RequestKind::Heartbeat(r) => ResponseKind::Heartbeat(groups::heartbeat(broker, session, r)),
        RequestKind::LeaveGroup(r) => {
            ResponseKind::LeaveGroup(groups::leave(broker, session, r, v))
        }
        RequestKind::ListGroups(r) => {
            ResponseKind::ListGroups(groups::list(broker, session, r, v).await)
        }
        RequestKind::DescribeGroups(r) => {
            ResponseKind::DescribeGroups(groups::describe(broker, session, r, v).await)
        }
        RequestKind::DeleteGroups(r) => {
            ResponseKind::DeleteGroups(groups::delete(broker, session, r).await)
        }
        RequestKind::OffsetCommit(r) => {
            ResponseKind::OffsetCommit(groups::commit(broker, session, r, v).await)
        }
        RequestKind::OffsetFetch(r) => {
            ResponseKind::OffsetFetch(groups::fetch(broker, session, r, v).await)
        }
        RequestKind::OffsetDelete(r) => {
            ResponseKind::OffsetDelete(groups::delete_offsets(broker, session, r).await)
        }
        RequestKind::Produce(r) => return produce::handle(broker, session, r, v).await,
        RequestKind::Fetch(r) => return fetch::handle(broker, session, r, v),
        RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(api_versions::handle(
            broker.transactions.settings().transaction_version,
        )),
        RequestKind::Metadata(r) => {
            ResponseKind::Metadata(metadata::handle(broker, session, r, v).await)
        }
        RequestKind::DescribeTopicPartitions(r) => ResponseKind::DescribeTopicPartitions(
            describe_topic_partitions::handle(broker, session, r),
        ),
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(delete_records::handle(broker, session, r).await)
        }
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(list_offsets::handle(broker, session, r, v).await)
        }
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(topics::create(broker, session, r, v).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(topics::delete(broker, session, r, v).await)
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(topics::create_partitions(broker, session, r).await)
        }
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(configs::describe(broker, session, r, v))
        }
        RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
            configs::incremental_alter(broker, session, r).await,
        ),
        RequestKind::AlterConfigs(r) => {
            ResponseKind::AlterConfigs(configs::alter(broker, session, r).await)
        }
        RequestKind::DescribeProducers(r) => {
            ResponseKind::DescribeProducers(producers::describe(broker, session, r).await)
        }
        RequestKind::ElectLeaders(r) => {
            ResponseKind::ElectLeaders(elect::elect(broker, session, r, v))
        }
        RequestKind::DescribeLogDirs(r) => {
            ResponseKind::DescribeLogDirs(log_dirs::describe(broker, session, r, v).await)
        }
        RequestKind::DescribeCluster(r) => {
            ResponseKind::DescribeCluster(cluster::describe(broker, session, r))
        }
        RequestKind::FindCoordinator(r) => {
            ResponseKind::FindCoordinator(cluster::find_coordinator(broker, session, r, v))
        }
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(producer_id::init(broker, session, r, v).await)
        }
        RequestKind::AlterPartitionReassignments(r) => {
            ResponseKind::AlterPartitionReassignments(reassign::alter(broker, session, r, v).await)
        }
        RequestKind::ListPartitionReassignments(r) => {
            ResponseKind::ListPartitionReassignments(reassign::list(broker, session, r).await)
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            ResponseKind::OffsetForLeaderEpoch(leader_epoch::handle(broker, session, r).await)
        }
        RequestKind::CreateAcls(r) => {
            ResponseKind::CreateAcls(acls::create(broker, session, r).await)
        }
        RequestKind::DescribeAcls(r) => {
            ResponseKind::DescribeAcls(acls::describe(broker, session, r))
        }
        RequestKind::DeleteAcls(r) => {
            ResponseKind::DeleteAcls(acls::delete(broker, session, r).await)
        }
        RequestKind::DescribeClientQuotas(r) => {
            ResponseKind::DescribeClientQuotas(quotas::describe(broker, session, r))
        }
        RequestKind::AlterClientQuotas(r) => {
            ResponseKind::AlterClientQuotas(quotas::alter(broker, session, r).await)
        }
        RequestKind::DescribeUserScramCredentials(r) => ResponseKind::DescribeUserScramCredentials(
            scram_users::describe(broker, session, r).await,
        ),
        RequestKind::AlterUserScramCredentials(r) => {
            ResponseKind::AlterUserScramCredentials(scram_users::alter(broker, session, r).await)
        }
        RequestKind::AddPartitionsToTxn(r) => {
            ResponseKind::AddPartitionsToTxn(txn::add_partitions(broker, session, r, v).await)
        }
        RequestKind::AddOffsetsToTxn(r) => {
            ResponseKind::AddOffsetsToTxn(txn::add_offsets(broker, session, r, v).await)
        }
        RequestKind::EndTxn(r) => ResponseKind::EndTxn(txn::end_txn(broker, session, r, v).await),
        RequestKind::TxnOffsetCommit(r) => {
            ResponseKind::TxnOffsetCommit(groups::txn_offset_commit(broker, session, r, v).await)
        }
        RequestKind::WriteTxnMarkers(r) => {
            ResponseKind::WriteTxnMarkers(txn::write_markers(broker, session, r).await)
        }
        RequestKind::DescribeTransactions(r) => {
            ResponseKind::DescribeTransactions(txn::describe(broker, session, r).await)
        }
        RequestKind::ListTransactions(r) => {
            ResponseKind::ListTransactions(txn::list(broker, session, r).await)
        }
        // SaslHandshake/SaslAuthenticate are answered by the connection loop (sasl.rs).
        other => {
            // Unreachable: the connection refuses versions not in SUPPORTED before decoding.
            tracing::error!(request = ?std::mem::discriminant(&other), "request of an unadvertised API reached a handler");
            return Reply::NoResponse;
        }
    };
    Reply::Now(Box::new(response))
}

/// The error code of a request refused on a resource of type `rt`.
pub(crate) fn denied(rt: crate::security::acl::ResourceType) -> i16 {
    crate::error::authorization_failed(rt).kafka.code()
}

pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

pub(crate) fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}
