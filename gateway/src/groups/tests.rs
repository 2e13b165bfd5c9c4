use super::*;
use oxbow_metadata::EmbeddedStore;

#[test]
fn offsets_partitions_are_kafkas() {
    // Computed with Java 17: `Math.abs(s.hashCode()) % 50`, 0 for Integer.MIN_VALUE.
    for (group, partition) in [
        ("", 0),
        ("a", 47),
        // hashCode -1906497762: Math.abs, not a mask (which would give 36).
        ("my-group", 12),
        ("test-group", 12),
        ("console-consumer-12345", 6),
        // hashCode Integer.MIN_VALUE.
        ("polygenelubricants", 0),
        ("gr\u{f6}up", 32),
        // A surrogate pair: two UTF-16 code units.
        ("g\u{1F600}", 32),
        ("orders-app", 5),
    ] {
        assert_eq!(offsets_partition(group), partition, "{group}");
    }
}

fn coordinator(coordinates: impl Fn(&str) -> bool + Send + Sync + 'static) -> Coordinator {
    let store = EmbeddedStore::in_memory().expect("metadata");
    Coordinator::new(
        Arc::new(store),
        CoordinatorSettings {
            initial_rebalance_delay: Duration::ZERO,
        },
    )
    .with_coordinates(coordinates)
}

fn offset(topic: &str, partition: i32, offset: i64) -> (String, i32, i64, i32, String) {
    (topic.to_string(), partition, offset, -1, String::new())
}

#[tokio::test]
async fn txn_offsets_are_pending_until_their_marker() {
    let c = coordinator(|_| true);
    let g = "my-group";
    c.commit_offsets(g, vec![offset("t", 0, 1)])
        .await
        .expect("plain commit");
    c.txn_commit_offsets(g, 5, 0, None, vec![offset("t", 0, 10), offset("t", 1, 10)])
        .await
        .expect("pending");
    let (committed, pending) = c.fetch_offsets_and_pending(g).await.expect("fetch");
    assert_eq!(
        committed[&("t".to_string(), 0)].offset,
        1,
        "not visible yet"
    );
    assert!(!committed.contains_key(&("t".to_string(), 1)));
    assert_eq!(
        pending,
        BTreeSet::from([("t".to_string(), 0), ("t".to_string(), 1)])
    );
    // A marker for other offsets partitions does nothing.
    let none = c
        .complete_txn_offsets(5, 0, &[0, 1], true)
        .await
        .expect("other partitions");
    assert_eq!(none, TxnOffsetsCompletion::default());
    let done = c
        .complete_txn_offsets(5, 0, &[offsets_partition(g)], true)
        .await
        .expect("commit");
    assert_eq!(done.completed, vec![g.to_string()]);
    let (committed, pending) = c.fetch_offsets_and_pending(g).await.expect("fetch");
    assert_eq!(committed[&("t".to_string(), 0)].offset, 10);
    assert_eq!(committed[&("t".to_string(), 1)].offset, 10);
    assert!(pending.is_empty());
    // A retried marker is a no-op.
    let again = c
        .complete_txn_offsets(5, 0, &[offsets_partition(g)], true)
        .await
        .expect("retry");
    assert_eq!(again, TxnOffsetsCompletion::default());

    // Abort drops them.
    c.txn_commit_offsets(g, 6, 3, None, vec![offset("t", 0, 99)])
        .await
        .expect("pending");
    c.complete_txn_offsets(6, 3, &[offsets_partition(g)], false)
        .await
        .expect("abort");
    let (committed, pending) = c.fetch_offsets_and_pending(g).await.expect("fetch");
    assert_eq!(committed[&("t".to_string(), 0)].offset, 10);
    assert!(pending.is_empty());
    // The committed offsets were written through, not only cached.
    let fresh = Coordinator::new(
        c.metadata.clone(),
        CoordinatorSettings {
            initial_rebalance_delay: Duration::ZERO,
        },
    );
    assert_eq!(
        fresh.fetch_offsets(g).await.expect("fetch"),
        committed,
        "the metadata service holds what the cache does"
    );
}

#[tokio::test]
async fn txn_commits_are_fenced() {
    let c = coordinator(|_| true);
    let g = "fenced";
    c.txn_commit_offsets(g, 5, 2, None, vec![offset("t", 0, 1)])
        .await
        .expect("pending");
    let err = c
        .txn_commit_offsets(g, 5, 1, None, vec![offset("t", 0, 2)])
        .await
        .expect_err("older producer epoch");
    assert!(
        matches!(&err, TxnOffsetsError::Metadata(e) if e.kind() == oxbow_metadata::ErrorKind::Fenced),
        "{err:?}"
    );
    let err = c
        .txn_commit_offsets(g, 5, 3, None, vec![offset("t", 0, 2)])
        .await
        .expect_err("the next transaction before this one's marker");
    assert!(
        matches!(&err, TxnOffsetsError::Metadata(e) if e.kind() == oxbow_metadata::ErrorKind::Conflict),
        "{err:?}"
    );
    let err = c
        .txn_commit_offsets(g, 5, 2, Some(("m-1", None, 1)), vec![offset("t", 0, 2)])
        .await
        .expect_err("a member the group does not know");
    assert!(matches!(
        err,
        TxnOffsetsError::Group(ResponseError::UnknownMemberId)
    ));
}

fn join_request(member_id: &str) -> JoinRequest {
    JoinRequest {
        member_id: member_id.to_string(),
        instance_id: None,
        client_id: "c".into(),
        client_host: "h".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 300_000,
        protocol_type: protocol::CONSUMER.to_string(),
        protocols: vec![("range".into(), bytes::Bytes::new())],
        require_known_member_id: false,
    }
}

#[tokio::test]
async fn a_parked_join_is_answered_not_coordinator_when_the_group_moves_away() {
    let c = Arc::new(coordinator(|_| true));
    let first = c.join("moving", join_request("")).await;
    assert_eq!(first.error, 0, "{first:?}");
    // A second member parks until the first rejoins: minutes, its rebalance timeout.
    let parked = tokio::spawn({
        let c = c.clone();
        async move { c.join("moving", join_request("")).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!parked.is_finished(), "the join waits for the first member");
    c.retain_groups(|_| false);
    let answer = tokio::time::timeout(Duration::from_secs(5), parked)
        .await
        .expect("answered at once, not after the rebalance timeout")
        .expect("join task");
    assert_eq!(answer.error, ResponseError::NotCoordinator.code());
}

#[tokio::test]
async fn markers_for_groups_coordinated_elsewhere_are_left_to_them() {
    let c = coordinator(|g| g != "elsewhere");
    // Pending records written while this broker still coordinated "elsewhere".
    c.metadata
        .put_txn_offsets(
            "elsewhere",
            5,
            0,
            vec![CommittedOffset {
                topic: "t".into(),
                partition: 0,
                offset: 3,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp_ms: 0,
            }],
        )
        .await
        .expect("pending");
    c.txn_commit_offsets("here", 5, 0, None, vec![offset("t", 0, 4)])
        .await
        .expect("pending");
    let partitions = [offsets_partition("elsewhere"), offsets_partition("here")];
    let done = c
        .complete_txn_offsets(5, 0, &partitions, true)
        .await
        .expect("commit");
    assert_eq!(done.completed, vec!["here".to_string()]);
    assert_eq!(
        done.not_coordinator,
        vec![("elsewhere".to_string(), offsets_partition("elsewhere"))]
    );
    assert_eq!(
        c.metadata
            .txn_offsets("elsewhere")
            .await
            .expect("read")
            .len(),
        1,
        "untouched"
    );
}
