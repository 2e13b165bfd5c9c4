use super::*;
use crate::groups::offsets_partition;
use crate::security::acl::model::{
    AccessControlEntry, AclBinding, AclPermissionType, PatternType, ResourcePattern,
};
use crate::security::acl::{AuthorizerKind, AuthorizerSettings};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{ProducerId, TransactionalId};
use oxbow_metadata::TopicSpec;

/// A broker over a temp dir (embedded metadata, local objects) with topic `t` of two
/// partitions.
async fn broker(dir: &std::path::Path, authorization: AuthorizerSettings) -> Arc<Broker> {
    let broker = crate::broker::testing::temp_broker(dir, authorization).await;
    broker
        .create_topic(TopicSpec {
            name: "t".into(),
            partitions: 2,
            replication_factor: 1,
            configs: BTreeMap::new(),
        })
        .await
        .expect("topic");
    broker
}

fn session() -> Session {
    Session::plaintext("127.0.0.1:5000".parse().expect("address"))
}

/// Begins a transaction of `tx` that commits offsets for `groups` (InitProducerId and
/// AddOffsetsToTxn, straight to the coordinator): its producer id, at epoch 0.
async fn begin(broker: &Arc<Broker>, groups: &[&str]) -> i64 {
    use crate::transactions::state::Request;
    let env = crate::transactions::markers::env(broker);
    let init = broker
        .transactions
        .request(
            &env,
            "tx",
            Request::InitProducerId {
                timeout_ms: 60_000,
                max_timeout_ms: 900_000,
                expected: None,
                fresh_producer_id: None,
            },
        )
        .await;
    let (pid, epoch) = init.producer.expect("a producer id");
    assert_eq!(epoch, 0);
    for g in groups {
        let added = broker
            .transactions
            .request(
                &env,
                "tx",
                Request::AddOffsets {
                    producer_id: pid,
                    producer_epoch: 0,
                    group: g.to_string(),
                },
            )
            .await;
        assert_eq!(added.error, None);
    }
    pid
}

/// A TxnOffsetCommit of `tx`'s transaction for a group it never added: its code.
async fn begin_other_group(broker: &Arc<Broker>, pid: i64) -> i16 {
    let r = txn_offset_commit(
        broker,
        &session(),
        txn_commit("never-added", pid, 0, &[("t", 0, 1)]),
        3,
    )
    .await;
    codes(&r)[0].2
}

/// A TxnOffsetCommit of `tx`/`producer_id` for `group`: (topic, partition, offset) each.
fn txn_commit(
    group: &str,
    producer_id: i64,
    producer_epoch: i16,
    offsets: &[(&str, i32, i64)],
) -> TxnOffsetCommitRequest {
    let mut topics: BTreeMap<&str, Vec<TxnOffsetCommitRequestPartition>> = BTreeMap::new();
    for (t, p, o) in offsets {
        topics.entry(t).or_default().push(
            TxnOffsetCommitRequestPartition::default()
                .with_partition_index(*p)
                .with_committed_offset(*o)
                .with_committed_leader_epoch(4)
                .with_committed_metadata(Some(str_bytes("m"))),
        );
    }
    TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(str_bytes("tx")))
        .with_group_id(group_id(group))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(producer_epoch)
        .with_generation_id(-1)
        .with_member_id(str_bytes(""))
        .with_topics(
            topics
                .into_iter()
                .map(|(t, parts)| {
                    TxnOffsetCommitRequestTopic::default()
                        .with_name(topic_name(t))
                        .with_partitions(parts)
                })
                .collect(),
        )
}

/// Error codes of a response, by (topic, partition), in request order.
fn codes(r: &TxnOffsetCommitResponse) -> Vec<(String, i32, i16)> {
    r.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index, p.error_code))
        })
        .collect()
}

/// OffsetFetch v8 of `t`-0 for `group`: (offset, error).
async fn fetch_t0(broker: &Arc<Broker>, group: &str, require_stable: bool) -> (i64, i16) {
    let req = OffsetFetchRequest::default()
        .with_require_stable(require_stable)
        .with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(group_id(group))
            .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                .with_name(topic_name("t"))
                .with_partition_indexes(vec![0])]))]);
    let r = fetch(broker, &session(), req, 8).await;
    let p = &r.groups[0].topics[0].partitions[0];
    (p.committed_offset, p.error_code)
}

#[tokio::test]
async fn txn_offsets_are_pending_until_the_marker_and_unstable_meanwhile() {
    let dir = tempfile::tempdir().expect("tmp");
    let broker = broker(dir.path(), AuthorizerSettings::default()).await;
    let g = "app";
    // Not in any transaction yet: refused (KIP-890), nothing stored.
    let r = txn_offset_commit(&broker, &session(), txn_commit(g, 7, 0, &[("t", 0, 9)]), 3).await;
    assert_eq!(
        codes(&r),
        vec![(
            "t".into(),
            0,
            ResponseError::InvalidProducerIdMapping.code()
        )]
    );
    let pid = begin(&broker, &[g]).await;
    let other = begin_other_group(&broker, pid).await;
    assert_eq!(other, ResponseError::InvalidTxnState.code());
    let r = txn_offset_commit(
        &broker,
        &session(),
        txn_commit(g, pid, 0, &[("t", 0, 10), ("t", 5, 1), ("nope", 0, 1)]),
        3,
    )
    .await;
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    assert_eq!(
        codes(&r),
        vec![
            ("nope".into(), 0, unknown),
            ("t".into(), 0, 0),
            ("t".into(), 5, unknown)
        ]
    );
    // read_committed consumers wait (retriable); others see what is committed: nothing.
    assert_eq!(
        fetch_t0(&broker, g, true).await,
        (-1, ResponseError::UnstableOffsetCommit.code())
    );
    assert_eq!(fetch_t0(&broker, g, false).await, (-1, 0));
    // A zombie of the producer (an older epoch) is fenced.
    let r = txn_offset_commit(
        &broker,
        &session(),
        txn_commit(g, pid, -1, &[("t", 0, 11)]),
        3,
    )
    .await;
    assert_eq!(
        codes(&r),
        vec![("t".into(), 0, ResponseError::InvalidProducerEpoch.code())]
    );
    // The marker commits them.
    let done = broker
        .coordinator
        .complete_txn_offsets(pid, 0, &[offsets_partition(g)], true)
        .await
        .expect("marker");
    assert_eq!(done.completed, vec![g.to_string()]);
    assert_eq!(fetch_t0(&broker, g, true).await, (10, 0));

    // Member fencing (v3+), only for the fields that are set.
    let ghost = txn_commit(g, pid, 0, &[("t", 1, 3)]).with_member_id(str_bytes("ghost"));
    let r = txn_offset_commit(&broker, &session(), ghost.clone(), 3).await;
    assert_eq!(
        codes(&r),
        vec![("t".into(), 1, ResponseError::UnknownMemberId.code())]
    );
    // Before v3 the request carries no member: the field is not on the wire.
    let r = txn_offset_commit(&broker, &session(), ghost, 2).await;
    assert_eq!(codes(&r), vec![("t".into(), 1, 0)]);
    let wrong_generation = txn_commit(g, pid, 0, &[("t", 1, 3)]).with_generation_id(5);
    let r = txn_offset_commit(&broker, &session(), wrong_generation, 3).await;
    assert_eq!(
        codes(&r),
        vec![("t".into(), 1, ResponseError::IllegalGeneration.code())]
    );
    let r = txn_offset_commit(
        &broker,
        &session(),
        txn_commit("", pid, 0, &[("t", 1, 3)]),
        3,
    )
    .await;
    assert_eq!(
        codes(&r),
        vec![("t".into(), 1, ResponseError::InvalidGroupId.code())]
    );
}

#[tokio::test]
async fn txn_offset_commit_is_authorized_as_kafka_does() {
    let dir = tempfile::tempdir().expect("tmp");
    let settings = AuthorizerSettings {
        kind: AuthorizerKind::Acl,
        ..Default::default()
    };
    let broker = broker(dir.path(), settings).await;
    let allow = |rt: ResourceType, name: &str, op: AclOperation| AclBinding {
        pattern: ResourcePattern::new(rt, name, PatternType::Literal),
        entry: AccessControlEntry {
            principal: "User:ANONYMOUS".into(),
            host: "*".into(),
            operation: op,
            permission_type: AclPermissionType::Allow,
        },
    };
    let grant = |b: AclBinding| {
        let broker = broker.clone();
        async move {
            let r = crate::security::acl::store::create(
                broker.metadata.as_ref(),
                &broker.security,
                &[b],
            )
            .await;
            assert!(r.iter().all(Result::is_ok), "grant");
        }
    };
    let pid = begin(&broker, &["app"]).await;
    let request = || txn_commit("app", pid, 0, &[("t", 0, 10)]);
    let code = |r: TxnOffsetCommitResponse| codes(&r)[0].2;
    let r = txn_offset_commit(&broker, &session(), request(), 3).await;
    assert_eq!(
        code(r),
        ResponseError::TransactionalIdAuthorizationFailed.code()
    );
    grant(allow(
        ResourceType::TransactionalId,
        "tx",
        AclOperation::Write,
    ))
    .await;
    let r = txn_offset_commit(&broker, &session(), request(), 3).await;
    assert_eq!(code(r), ResponseError::GroupAuthorizationFailed.code());
    grant(allow(ResourceType::Group, "app", AclOperation::Read)).await;
    let r = txn_offset_commit(&broker, &session(), request(), 3).await;
    assert_eq!(code(r), ResponseError::TopicAuthorizationFailed.code());
    grant(allow(ResourceType::Topic, "t", AclOperation::Read)).await;
    let r = txn_offset_commit(&broker, &session(), request(), 3).await;
    assert_eq!(code(r), 0);
}
