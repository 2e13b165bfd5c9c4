use super::*;

const PID: i64 = 1000;

fn init(c: &mut TxnCoordinator, now: i64) -> Vec<Action> {
    c.step(
        now,
        Event::Request(Request::InitProducerId {
            timeout_ms: 60_000,
            max_timeout_ms: TIMEOUT_MAX_MS,
            expected: None,
            fresh_producer_id: Some(PID),
        }),
    )
}

fn add(c: &mut TxnCoordinator, epoch: i16, p: i32) -> Vec<Action> {
    c.step(
        1,
        Event::Request(Request::AddPartitions {
            producer_id: PID,
            producer_epoch: epoch,
            partitions: vec![("t".to_string(), p)],
        }),
    )
}

fn end(c: &mut TxnCoordinator, epoch: i16, commit: bool, bump: bool) -> Vec<Action> {
    c.step(
        2,
        Event::Request(Request::EndTxn {
            producer_id: PID,
            producer_epoch: epoch,
            commit,
            bump_epoch: bump,
        }),
    )
}

fn replied(actions: &[Action]) -> &Reply {
    actions
        .iter()
        .find_map(|a| match a {
            Action::Reply(r) => Some(r),
            _ => None,
        })
        .expect("a reply")
}

fn state(c: &TxnCoordinator) -> TxnState {
    c.transaction().expect("a transaction").state
}

#[test]
fn a_committed_transaction_writes_markers_after_its_prepare_is_persisted() {
    let mut c = TxnCoordinator::default();
    let a = init(&mut c, 0);
    assert!(matches!(a[0], Action::Persist(_)));
    assert_eq!(replied(&a).producer, Some((PID, 0)));
    add(&mut c, 0, 0);
    add(&mut c, 0, 1);
    assert_eq!(state(&c), TxnState::Ongoing);
    let a = end(&mut c, 0, true, false);
    // Persist, then reply, then markers: never markers before the prepare is stored.
    assert!(matches!(&a[0], Action::Persist(t) if t.state == TxnState::PrepareCommit));
    assert_eq!(replied(&a).error, None);
    let Action::WriteMarkers {
        commit, partitions, ..
    } = &a[2]
    else {
        panic!("markers third: {a:?}");
    };
    assert!(*commit);
    assert_eq!(partitions.len(), 2);
    // Until the markers are written, new work waits.
    assert_eq!(
        replied(&add(&mut c, 0, 2)).error,
        Some(ResponseError::ConcurrentTransactions)
    );
    let a = c.step(3, Event::MarkersWritten);
    assert!(
        matches!(&a[0], Action::Persist(t) if t.state == TxnState::CompleteCommit && t.partitions.is_empty())
    );
    // A retried commit succeeds; a contradicting abort does not.
    assert_eq!(replied(&end(&mut c, 0, true, false)).error, None);
    assert_eq!(
        replied(&end(&mut c, 0, false, false)).error,
        Some(ResponseError::InvalidTxnState)
    );
    // The next transaction starts clean.
    add(&mut c, 0, 5);
    assert_eq!(c.transaction().map(|t| t.partitions.len()), Some(1));
}

#[test]
fn a_new_producer_fences_the_old_one_and_aborts_its_open_transaction() {
    let mut c = TxnCoordinator::default();
    init(&mut c, 0);
    add(&mut c, 0, 0);
    let a = init(&mut c, 10);
    assert_eq!(
        replied(&a).error,
        Some(ResponseError::ConcurrentTransactions)
    );
    assert!(matches!(&a[0], Action::Persist(t) if t.state == TxnState::PrepareEpochFence));
    assert!(a.iter().any(|x| matches!(
        x,
        Action::WriteMarkers {
            commit: false,
            producer_epoch: 1,
            ..
        }
    )));
    // The old producer (epoch 0) is fenced from now on.
    assert_eq!(
        replied(&end(&mut c, 0, true, false)).error,
        Some(ResponseError::ProducerFenced)
    );
    c.step(11, Event::MarkersWritten);
    assert_eq!(state(&c), TxnState::CompleteAbort);
    let a = init(&mut c, 12);
    assert_eq!(replied(&a).producer, Some((PID, 2)));
    assert_eq!(
        replied(&add(&mut c, 1, 0)).error,
        Some(ResponseError::ProducerFenced)
    );
    assert_eq!(replied(&add(&mut c, 2, 0)).error, None);
}

#[test]
fn an_open_transaction_past_its_timeout_is_aborted() {
    let mut c = TxnCoordinator::default();
    init(&mut c, 0);
    add(&mut c, 0, 0); // starts at 1
    assert!(c.step(60_000, Event::Tick).is_empty());
    let a = c.step(60_001, Event::Tick);
    assert!(a
        .iter()
        .any(|x| matches!(x, Action::WriteMarkers { commit: false, .. })));
    assert_eq!(state(&c), TxnState::PrepareAbort);
    c.step(60_002, Event::MarkersWritten);
    assert_eq!(state(&c), TxnState::CompleteAbort);
    assert_eq!(c.transaction().map(|t| t.producer_epoch), Some(1));
}

#[test]
fn timeouts_and_producer_ids_are_checked() {
    let mut c = TxnCoordinator::default();
    let too_long = c.step(
        0,
        Event::Request(Request::InitProducerId {
            timeout_ms: TIMEOUT_MAX_MS + 1,
            max_timeout_ms: TIMEOUT_MAX_MS,
            expected: None,
            fresh_producer_id: Some(PID),
        }),
    );
    assert_eq!(
        replied(&too_long).error,
        Some(ResponseError::InvalidTransactionTimeout)
    );
    let needs = c.step(
        0,
        Event::Request(Request::InitProducerId {
            timeout_ms: 1000,
            max_timeout_ms: TIMEOUT_MAX_MS,
            expected: None,
            fresh_producer_id: None,
        }),
    );
    assert_eq!(needs, vec![Action::NeedProducerId]);
    init(&mut c, 0);
    let wrong = c.step(
        1,
        Event::Request(Request::AddPartitions {
            producer_id: PID + 1,
            producer_epoch: 0,
            partitions: vec![("t".into(), 0)],
        }),
    );
    assert_eq!(
        replied(&wrong).error,
        Some(ResponseError::InvalidProducerIdMapping)
    );
    // KIP-360: a client naming another producer's id and epoch is fenced.
    let stale = c.step(
        2,
        Event::Request(Request::InitProducerId {
            timeout_ms: 1000,
            max_timeout_ms: TIMEOUT_MAX_MS,
            expected: Some((PID, 7)),
            fresh_producer_id: None,
        }),
    );
    assert_eq!(replied(&stale).error, Some(ResponseError::ProducerFenced));
    // Ending a transaction that never began is refused.
    assert_eq!(
        replied(&end(&mut c, 0, true, false)).error,
        Some(ResponseError::InvalidTxnState)
    );
}

#[test]
fn protocol_2_bumps_the_epoch_at_every_end_and_accepts_its_retry() {
    let mut c = TxnCoordinator::default();
    init(&mut c, 0);
    add(&mut c, 0, 0);
    let a = end(&mut c, 0, true, true);
    assert_eq!(replied(&a).producer, Some((PID, 1)));
    assert!(a.iter().any(|x| matches!(
        x,
        Action::WriteMarkers {
            producer_epoch: 1,
            ..
        }
    )));
    // A retry while the markers are being written: not yet (not PRODUCER_FENCED).
    assert_eq!(
        replied(&end(&mut c, 0, true, true)).error,
        Some(ResponseError::ConcurrentTransactions)
    );
    c.step(3, Event::MarkersWritten);
    // The retry carries the old epoch and gets the same answer.
    assert_eq!(
        replied(&end(&mut c, 0, true, true)).producer,
        Some((PID, 1))
    );
    assert_eq!(
        replied(&add(&mut c, 0, 0)).error,
        Some(ResponseError::ProducerFenced)
    );
    assert_eq!(replied(&add(&mut c, 1, 0)).error, None);
}

#[test]
fn a_coordinator_taking_over_finishes_a_prepared_transaction() {
    let mut c = TxnCoordinator::default();
    init(&mut c, 0);
    add(&mut c, 0, 3);
    end(&mut c, 0, false, false);
    let stored = c.transaction().cloned();
    let mut next = TxnCoordinator::loaded(stored);
    let a = next.resume(5);
    assert!(
        matches!(&a[..], [Action::WriteMarkers { commit: false, partitions, .. }] if partitions.len() == 1)
    );
    assert!(TxnCoordinator::default().resume(5).is_empty());
}

#[test]
fn a_fence_stored_without_its_abort_is_finished_under_the_bumped_epoch() {
    let mut c = TxnCoordinator::default();
    init(&mut c, 0);
    add(&mut c, 0, 3);
    // A restarted producer's InitProducerId fences: only the first Persist landed.
    let a = init(&mut c, 2);
    let Some(Action::Persist(fenced)) = a.first().cloned() else {
        panic!("the fence is persisted first: {a:?}");
    };
    assert_eq!(fenced.state, TxnState::PrepareEpochFence);
    let mut next = TxnCoordinator::loaded(Some(fenced));
    let a = next.resume(3);
    assert!(
        matches!(&a[0], Action::Persist(t) if t.state == TxnState::PrepareAbort && t.producer_epoch == 1)
    );
    assert!(matches!(
        &a[1],
        Action::WriteMarkers {
            commit: false,
            producer_epoch: 1,
            ..
        }
    ));
}
