use super::*;

fn req(member_id: &str, protocols: &[&str]) -> JoinRequest {
    JoinRequest {
        member_id: member_id.into(),
        instance_id: None,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|p| (p.to_string(), Bytes::from(format!("meta-{p}"))))
            .collect(),
        require_known_member_id: true,
    }
}

/// A member id via MEMBER_ID_REQUIRED, then the real join.
fn join_new(g: &mut Group, now: u64) -> (MemberId, Reply<JoinResult>, Vec<Action>) {
    let (r, a) = g.join(req("", &["range"]), now);
    assert!(a.is_empty());
    let Reply::Now(first) = r else {
        panic!("member id first")
    };
    assert_eq!(first.error, ResponseError::MemberIdRequired.code());
    let (r, a) = g.join(req(&first.member_id, &["range"]), now);
    (first.member_id, r, a)
}

fn joins(actions: &[Action]) -> Vec<(MemberId, JoinResult)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Join(m, r) => Some((m.clone(), r.clone())),
            Action::Sync(..) => None,
        })
        .collect()
}

#[test]
fn first_rebalance_waits_for_the_initial_delay_then_completes() {
    let mut g = Group::new("g", 100);
    let (a, r, acts) = join_new(&mut g, 0);
    assert!(matches!(r, Reply::Later(_)));
    assert!(acts.is_empty(), "waits for the initial delay");
    let (b, _, acts) = join_new(&mut g, 50);
    assert!(acts.is_empty());
    let acts = g.tick(100);
    let done = joins(&acts);
    assert_eq!(done.len(), 2);
    assert_eq!(g.state, GroupState::CompletingRebalance);
    assert_eq!(g.generation, 1);
    let leader = g.leader.clone().expect("leader");
    for (m, r) in &done {
        assert_eq!(r.error, 0);
        assert_eq!(r.leader, leader);
        assert_eq!(r.protocol_name.as_deref(), Some("range"));
        assert_eq!(r.members.len(), if *m == leader { 2 } else { 0 });
    }
    // Followers wait for the leader's SyncGroup; then everyone gets their assignment.
    let follower = if leader == a { b.clone() } else { a.clone() };
    let (r, acts) = g.sync(&follower, None, 1, vec![], 110);
    assert!(matches!(r, Reply::Later(_)));
    assert!(acts.is_empty());
    let assignments = vec![
        (a.clone(), Bytes::from_static(b"A")),
        (b.clone(), Bytes::from_static(b"B")),
    ];
    let (r, acts) = g.sync(&leader, None, 1, assignments, 120);
    assert!(matches!(r, Reply::Later(_)));
    assert_eq!(acts.len(), 2);
    assert_eq!(g.state, GroupState::Stable);
    for act in acts {
        let Action::Sync(m, s) = act else {
            panic!("sync")
        };
        assert_eq!(s.assignment, if m == a { "A" } else { "B" });
    }
    assert_eq!(g.heartbeat(&a, None, 1, 130), 0);
}

#[test]
fn stale_generation_and_unknown_members_are_fenced() {
    let mut g = Group::new("g", 0);
    let (a, _, acts) = join_new(&mut g, 0);
    assert_eq!(joins(&acts).len(), 1);
    g.sync(&a, None, 1, vec![(a.clone(), Bytes::from_static(b"x"))], 1);
    assert_eq!(
        g.heartbeat(&a, None, 0, 2),
        ResponseError::IllegalGeneration.code()
    );
    assert_eq!(
        g.heartbeat("nobody", None, 1, 2),
        ResponseError::UnknownMemberId.code()
    );
    assert_eq!(
        g.check_commit(&a, None, 0),
        Err(ResponseError::IllegalGeneration)
    );
    assert_eq!(g.check_commit(&a, None, 1), Ok(()));
    assert_eq!(
        g.check_commit("", None, -1),
        Err(ResponseError::UnknownMemberId)
    );
    // A new member triggers a rebalance; the old member's heartbeat says so.
    let (_b, r, _) = join_new(&mut g, 3);
    assert!(matches!(r, Reply::Later(_)));
    assert_eq!(
        g.heartbeat(&a, None, 1, 4),
        ResponseError::RebalanceInProgress.code()
    );
}

#[test]
fn txn_commits_check_only_the_fields_they_set() {
    let mut g = Group::new("g", 0);
    // No member info (TxnOffsetCommit before v3): accepted, members or not.
    assert_eq!(g.check_txn_commit("", None, -1), Ok(()));
    let (a, _, _) = join_new(&mut g, 0);
    g.sync(&a, None, 1, vec![(a.clone(), Bytes::from_static(b"x"))], 1);
    assert_eq!(g.check_txn_commit("", None, -1), Ok(()));
    assert_eq!(g.check_txn_commit(&a, None, 1), Ok(()));
    assert_eq!(g.check_txn_commit(&a, None, -1), Ok(()), "generation unset");
    assert_eq!(
        g.check_txn_commit(&a, None, 0),
        Err(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        g.check_txn_commit("nobody", None, 1),
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        g.check_txn_commit("", None, 2),
        Err(ResponseError::IllegalGeneration)
    );
    g.static_members.insert("i1".into(), a.clone());
    assert_eq!(
        g.check_txn_commit("other", Some("i1"), 1),
        Err(ResponseError::FencedInstanceId)
    );
    assert_eq!(g.check_txn_commit(&a, Some("i1"), 1), Ok(()));
    g.kill();
    assert_eq!(
        g.check_txn_commit(&a, None, 1),
        Err(ResponseError::CoordinatorNotAvailable)
    );
}

#[test]
fn a_member_that_misses_its_session_is_removed_and_the_rest_rebalance() {
    let mut g = Group::new("g", 10);
    let (a, _, _) = join_new(&mut g, 0);
    let (b, _, _) = join_new(&mut g, 0);
    let acts = g.tick(10);
    assert_eq!(joins(&acts).len(), 2);
    let leader = g.leader.clone().expect("leader");
    g.sync(&leader, None, 1, vec![], 2);
    assert_eq!(g.state, GroupState::Stable);
    // `a` keeps heartbeating, `b` goes silent.
    for t in (1000..=10_000).step_by(1000) {
        assert_eq!(g.heartbeat(&a, None, 1, t), 0);
        g.tick(t);
    }
    let acts = g.tick(10_011);
    assert!(!g.members.contains_key(&b));
    assert_eq!(g.state, GroupState::PreparingRebalance);
    assert!(joins(&acts).is_empty());
    let (r, acts) = g.join(req(&a, &["range"]), 10_012);
    assert!(matches!(r, Reply::Later(_)));
    let done = joins(&acts);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].1.generation, 2);
}

#[test]
fn leave_and_rebalance_timeout_drop_members() {
    let mut g = Group::new("g", 10);
    let (a, _, _) = join_new(&mut g, 0);
    let (b, _, _) = join_new(&mut g, 0);
    g.tick(10);
    let leader = g.leader.clone().expect("leader");
    g.sync(&leader, None, 1, vec![], 12);
    let (code, _) = g.leave(&b, None, 13);
    assert_eq!(code, 0);
    assert_eq!(g.state, GroupState::PreparingRebalance);
    let (r, acts) = g.join(req(&a, &["range"]), 14);
    assert!(matches!(r, Reply::Later(_)));
    assert_eq!(
        joins(&acts).len(),
        1,
        "only a is left, so the rebalance completes"
    );
    // Next rebalance: a new member joins, `a` never rejoins within the timeout.
    let (c, _, _) = join_new(&mut g, 15);
    let acts = g.tick(15 + 30_000);
    let done = joins(&acts);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].0, c);
    assert!(!g.members.contains_key(&a));
}

#[test]
fn static_member_restart_keeps_its_assignment_without_rebalance() {
    let mut g = Group::new("g", 10);
    let mut r1 = req("", &["range"]);
    r1.instance_id = Some("i1".into());
    let (r, _) = g.join(r1.clone(), 0);
    assert!(matches!(r, Reply::Later(_)));
    let mut r2 = req("", &["range"]);
    r2.instance_id = Some("i2".into());
    let (_, _) = g.join(r2.clone(), 1);
    g.tick(10);
    let ids: Vec<MemberId> = g.members.keys().cloned().collect();
    let leader_now = g.leader.clone().expect("leader");
    let follower = ids
        .iter()
        .find(|m| **m != leader_now)
        .cloned()
        .expect("follower");
    let assignments = ids
        .iter()
        .map(|m| (m.clone(), Bytes::from(format!("as-{m}"))))
        .collect();
    g.sync(&leader_now, None, g.generation, assignments, 11);
    assert_eq!(g.state, GroupState::Stable);
    let generation = g.generation;
    let instance = g.members[&follower].instance_id.clone().expect("static");
    // The follower restarts: same instance id, no member id.
    let mut again = req("", &["range"]);
    again.instance_id = Some(instance.clone());
    let (r, _) = g.join(again, 12);
    let Reply::Now(j) = r else {
        panic!("no rebalance for a static rejoin")
    };
    assert_eq!(j.generation, generation);
    assert_eq!(g.state, GroupState::Stable);
    let (s, _) = g.sync(&j.member_id, Some(&instance), generation, vec![], 13);
    let Reply::Now(s) = s else {
        panic!("stable sync")
    };
    assert_eq!(s.assignment, Bytes::from(format!("as-{follower}")));
    // The old incarnation is fenced.
    assert_eq!(
        g.heartbeat(&follower, Some(&instance), generation, 14),
        ResponseError::FencedInstanceId.code()
    );
}

#[test]
fn inconsistent_protocols_are_refused() {
    let mut g = Group::new("g", 0);
    let (_a, _, _) = join_new(&mut g, 0);
    let (r, _) = g.join(req("", &["roundrobin"]), 1);
    let Reply::Now(j) = r else {
        panic!("refused now")
    };
    assert_eq!(j.error, ResponseError::InconsistentGroupProtocol.code());
    let mut bad = req("", &["range"]);
    bad.session_timeout_ms = 10;
    let (r, _) = g.join(bad, 1);
    let Reply::Now(j) = r else {
        panic!("refused now")
    };
    assert_eq!(j.error, ResponseError::InvalidSessionTimeout.code());
}

#[test]
fn protocol_vote_picks_the_most_preferred_common_protocol() {
    let mut g = Group::new("g", 0);
    let (first, _) = g.join(req("", &["cooperative-sticky", "range"]), 0);
    let Reply::Now(first) = first else {
        panic!("id")
    };
    g.join(req(&first.member_id, &["cooperative-sticky", "range"]), 0);
    let (second, _) = g.join(req("", &["range", "cooperative-sticky"]), 0);
    let Reply::Now(second) = second else {
        panic!("id")
    };
    g.join(req(&second.member_id, &["range", "cooperative-sticky"]), 0);
    let (third, _) = g.join(req("", &["cooperative-sticky"]), 0);
    let Reply::Now(third) = third else {
        panic!("id")
    };
    g.join(req(&third.member_id, &["cooperative-sticky"]), 0);
    g.tick(1);
    assert_eq!(g.protocol.as_deref(), Some("cooperative-sticky"));
}

fn rebalances(begun: u32, completed_ms: Option<u64>) -> Rebalances {
    Rebalances {
        begun,
        completed_ms,
    }
}

#[test]
fn a_rebalance_is_timed_from_preparing_to_stable_and_an_abandoned_one_is_not() {
    let mut g = Group::new("g", 0);
    let (a, _, _) = join_new(&mut g, 1_000);
    assert_eq!(g.state, GroupState::CompletingRebalance);
    assert_eq!(g.take_rebalances(), rebalances(1, None));
    g.sync(&a, None, 1, vec![(a.clone(), Bytes::new())], 1_250);
    assert_eq!(g.state, GroupState::Stable);
    assert_eq!(g.take_rebalances(), rebalances(0, Some(250)));
    assert_eq!(g.take_rebalances(), Rebalances::default(), "taken once");
    // A second member: a rebalance begins; its join alone does not complete it (the first
    // must rejoin), and the rebalance times from the second's join.
    let (b, _, _) = join_new(&mut g, 2_000);
    assert_eq!(g.state, GroupState::PreparingRebalance);
    g.join(req(&a, &["range"]), 2_100);
    assert_eq!(g.state, GroupState::CompletingRebalance);
    let leader = g.leader.clone().expect("leader");
    g.sync(&leader, None, 2, vec![], 2_600);
    assert_eq!(g.take_rebalances(), rebalances(1, Some(600)));
    // Everyone leaves mid-rebalance: begun, never completed.
    g.leave(&a, None, 3_000);
    assert_eq!(g.state, GroupState::PreparingRebalance);
    g.leave(&b, None, 3_100);
    assert_eq!(g.state, GroupState::Empty);
    assert_eq!(g.take_rebalances(), rebalances(1, None));
}
