//! The pure core of graceful handoff (ARCHITECTURE.md decision 15): which storage steps
//! move a batch of partitions from this broker (their live leader) to other brokers, and
//! which partitions stay. No I/O, no clock, no `.await`: [`HandoffCore::step`] takes what
//! the driver ([`crate::leadership`]) observed and returns what it should do next, so every
//! path is unit-tested by feeding events.
//!
//! Lifecycle of one batch (one [`HandoffCore`] per batch, dropped after [`Action::Done`]):
//! 1. [`Event::Begin`]: a broker that lost its WAL and still owes the old one's tail keeps
//!    everything (nothing in a partition's state says so, so a move would leave that tail
//!    behind; if it dies instead, failover sets `recover_from` and the new leader recovers
//!    it). Otherwise [`Action::CloseGates`]: appends already past a gate finish enqueueing,
//!    later ones are refused with NOT_LEADER_OR_FOLLOWER (clients retry after a metadata
//!    refresh).
//! 2. [`Action::WaitDurable`]: until everything appended is durable (high watermark = log
//!    end), bounded by the driver; a timeout keeps the whole batch.
//! 3. [`Action::Seal`]: one seal for the whole batch, catalogued under this broker's
//!    epochs; a failure keeps the whole batch.
//! 4. Per partition, in order: [`Action::ReadState`] re-reads the stored state and the open
//!    partition; it moves only if this broker still leads it at the epoch it has open, the
//!    target is another broker, a request still stands (`transfer_to` = target, when the
//!    handoff was requested through it), and ([`Action::ReadCatalogEnd`]) the catalog ends
//!    where the open log ends (nothing unsealed). Then [`Action::Swap`] writes
//!    [`transferred_state`] by compare-and-swap, and [`Action::Forget`] drops it here (the
//!    target opens it at the new epoch from the catalog on first use).
//! 5. A partition that stays has its gate reopened at once ([`Action::ReopenGates`]); the
//!    request, if any, is left for the controller's timeout to withdraw. [`Action::Done`]
//!    reports what moved and why the rest stayed.
//!
//! Invariant (decision 15): nothing acknowledged is ever left only in this broker's WAL by
//! a move — the swap happens only after the catalog is seen to end at the log end with the
//! gate closed.

use oxbow_metadata::{
    BrokerId, LeaderEpoch, Offset, PartitionId, PartitionState, TopicId, TopicPartition,
};
use std::collections::BTreeMap;

/// Hand partition `partition` of `topic_id` to broker `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handoff {
    pub topic_id: TopicId,
    pub partition: PartitionId,
    pub to: BrokerId,
    /// Asked for through `transfer_to` (which must still stand); `false` for this broker's
    /// own SIGTERM handoff.
    pub requested: bool,
}

impl Handoff {
    pub fn topic_partition(&self) -> TopicPartition {
        TopicPartition::new(self.topic_id, self.partition)
    }
}

/// A partition that moved: its state as stored by the swap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Moved {
    pub topic_id: TopicId,
    pub state: PartitionState,
}

/// Why a partition stayed with this broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kept {
    /// This broker lost its WAL and has not recovered the old one's tail yet.
    OwesOwnTail,
    /// The batch's appends did not become durable within the driver's bound.
    NotDurable,
    /// Sealing the batch failed.
    SealFailed(String),
    /// The topic or partition no longer exists.
    Gone,
    /// Another broker leads it now.
    NotLeader { leader: BrokerId },
    /// The target is this broker.
    TargetIsSelf,
    /// The request was withdrawn or re-targeted meanwhile.
    Withdrawn { transfer_to: Option<BrokerId> },
    /// The stored epoch is not the one this broker has open (fenced; the follower forgets
    /// it).
    EpochChanged {
        open: LeaderEpoch,
        stored: LeaderEpoch,
    },
    /// The catalog ends before the open log does: something is unsealed.
    Unsealed {
        log_end: Offset,
        catalog_end: Offset,
    },
    /// Reading the state or the catalog, or the swap, failed (a lost compare-and-swap
    /// included).
    Failed(String),
}

/// This broker's open partition, as the driver saw it after the seal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenPartition {
    pub leader_epoch: LeaderEpoch,
    pub log_end: Offset,
}

/// What the driver read for step 4 of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The partition's state in the metadata store now (`None`: topic or partition gone).
    pub stored: Option<PartitionState>,
    /// This broker's open partition (`None`: not open here, so nothing of it is in memory).
    pub open: Option<OpenPartition>,
}

/// What the driver reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Start the batch.
    Begin { owes_own_tail: bool },
    /// Every gate of [`Action::CloseGates`] is closed and no append is past one.
    GatesClosed,
    /// Every partition of [`Action::WaitDurable`] has its high watermark at its log end.
    Durable,
    /// The bound on [`Action::WaitDurable`] passed first.
    DurableTimedOut,
    /// The result of [`Action::Seal`].
    Sealed(Result<(), String>),
    /// The result of [`Action::ReadState`].
    StateRead(Result<Observed, String>),
    /// The result of [`Action::ReadCatalogEnd`]: where the catalog ends.
    CatalogEndRead(Result<Offset, String>),
    /// The result of [`Action::Swap`]: the state as stored.
    Swapped(Result<PartitionState, String>),
}

/// What the driver should do, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Close these partitions' append gates, then report [`Event::GatesClosed`].
    CloseGates(Vec<TopicPartition>),
    /// Wait (bounded) until these partitions' appends are durable; report
    /// [`Event::Durable`] or [`Event::DurableTimedOut`].
    WaitDurable(Vec<TopicPartition>),
    /// Seal everything durable and unsealed; report [`Event::Sealed`].
    Seal,
    /// Read the partition's stored state and this broker's open partition; report
    /// [`Event::StateRead`].
    ReadState(Handoff),
    /// Read where the catalog of `topic_partition` ends; report [`Event::CatalogEndRead`].
    ReadCatalogEnd {
        topic_partition: TopicPartition,
        log_start_offset: Offset,
    },
    /// Compare-and-swap the partition's state from `expected_version` to `next`; report
    /// [`Event::Swapped`].
    Swap {
        topic_id: TopicId,
        expected_version: u64,
        next: PartitionState,
    },
    /// Stop serving the partition here (it moved) and drop its gate.
    Forget(TopicPartition),
    /// Open these gates again (their partitions stay).
    ReopenGates(Vec<TopicPartition>),
    /// The batch is finished.
    Done {
        moved: Vec<Moved>,
        kept: Vec<(Handoff, Kept)>,
    },
}

/// `state` handed by its live leader to `to` after sealing everything it held: next epoch,
/// nothing to recover from the old leader (an older `recover_from` the old leader never
/// acted on is kept: that tail still needs recovering).
pub fn transferred_state(state: &PartitionState, to: BrokerId) -> PartitionState {
    PartitionState {
        leader: to,
        leader_epoch: state.leader_epoch + 1,
        transfer_to: None,
        ..state.clone()
    }
}

/// Where a batch is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    NotStarted,
    ClosingGates,
    WaitingDurable,
    Sealing,
    /// Step 4 of `batch[i]`: its state is being read.
    Reading(usize),
    /// Step 4 of `batch[i]`: the catalog end is being read; the state and log end seen.
    ReadingCatalog(usize, PartitionState, Offset),
    /// Step 4 of `batch[i]`: the swap is under way.
    Swapping(usize),
    Finished,
}

/// One batch's handoff (see the module docs).
#[derive(Debug)]
pub struct HandoffCore {
    me: BrokerId,
    /// The batch, one entry per partition, in partition order.
    batch: Vec<Handoff>,
    phase: Phase,
    moved: Vec<Moved>,
    kept: Vec<(Handoff, Kept)>,
}

impl HandoffCore {
    /// A batch handed off by broker `me`; a partition asked for twice keeps the last ask.
    pub fn new(me: BrokerId, batch: &[Handoff]) -> HandoffCore {
        let unique: BTreeMap<TopicPartition, Handoff> =
            batch.iter().map(|h| (h.topic_partition(), *h)).collect();
        HandoffCore {
            me,
            batch: unique.into_values().collect(),
            phase: Phase::NotStarted,
            moved: Vec::new(),
            kept: Vec::new(),
        }
    }

    /// Whether [`Action::Done`] has been returned.
    pub fn is_finished(&self) -> bool {
        self.phase == Phase::Finished
    }

    /// Applies one event and returns what to do now. An event the current phase does not
    /// expect is ignored (returns nothing).
    pub fn step(&mut self, event: Event) -> Vec<Action> {
        match (std::mem::replace(&mut self.phase, Phase::Finished), event) {
            (Phase::NotStarted, Event::Begin { owes_own_tail }) => {
                if owes_own_tail {
                    let all = self.batch.iter().map(|h| (*h, Kept::OwesOwnTail));
                    self.kept.extend(all);
                    return vec![self.done()];
                }
                if self.batch.is_empty() {
                    return vec![self.done()];
                }
                self.phase = Phase::ClosingGates;
                vec![Action::CloseGates(self.all())]
            }
            (Phase::ClosingGates, Event::GatesClosed) => {
                self.phase = Phase::WaitingDurable;
                vec![Action::WaitDurable(self.all())]
            }
            (Phase::WaitingDurable, Event::Durable) => {
                self.phase = Phase::Sealing;
                vec![Action::Seal]
            }
            (Phase::WaitingDurable, Event::DurableTimedOut) => self.keep_all(Kept::NotDurable),
            (Phase::Sealing, Event::Sealed(Ok(()))) => self.next(0),
            (Phase::Sealing, Event::Sealed(Err(e))) => self.keep_all(Kept::SealFailed(e)),
            (Phase::Reading(i), Event::StateRead(Ok(observed))) => self.check(i, observed),
            (Phase::Reading(i), Event::StateRead(Err(e))) => self.keep(i, Kept::Failed(e)),
            (Phase::ReadingCatalog(i, stored, log_end), Event::CatalogEndRead(Ok(end))) => {
                if log_end > end {
                    return self.keep(
                        i,
                        Kept::Unsealed {
                            log_end,
                            catalog_end: end,
                        },
                    );
                }
                self.swap(i, &stored)
            }
            (Phase::ReadingCatalog(i, ..), Event::CatalogEndRead(Err(e))) => {
                self.keep(i, Kept::Failed(e))
            }
            (Phase::Swapping(i), Event::Swapped(Ok(state))) => {
                let h = self.batch[i];
                self.moved.push(Moved {
                    topic_id: h.topic_id,
                    state,
                });
                let mut actions = vec![Action::Forget(h.topic_partition())];
                actions.extend(self.next(i + 1));
                actions
            }
            (Phase::Swapping(i), Event::Swapped(Err(e))) => self.keep(i, Kept::Failed(e)),
            (phase, _) => {
                self.phase = phase;
                Vec::new()
            }
        }
    }

    fn all(&self) -> Vec<TopicPartition> {
        self.batch.iter().map(Handoff::topic_partition).collect()
    }

    /// Step 4's checks on what was read for `batch[i]`.
    fn check(&mut self, i: usize, observed: Observed) -> Vec<Action> {
        let h = self.batch[i];
        let Some(stored) = observed.stored else {
            return self.keep(i, Kept::Gone);
        };
        if stored.leader != self.me {
            return self.keep(
                i,
                Kept::NotLeader {
                    leader: stored.leader,
                },
            );
        }
        if h.to == self.me {
            return self.keep(i, Kept::TargetIsSelf);
        }
        if h.requested && stored.transfer_to != Some(h.to) {
            return self.keep(
                i,
                Kept::Withdrawn {
                    transfer_to: stored.transfer_to,
                },
            );
        }
        match observed.open {
            Some(open) if open.leader_epoch != stored.leader_epoch => self.keep(
                i,
                Kept::EpochChanged {
                    open: open.leader_epoch,
                    stored: stored.leader_epoch,
                },
            ),
            Some(open) => {
                let read = Action::ReadCatalogEnd {
                    topic_partition: h.topic_partition(),
                    log_start_offset: stored.log_start_offset,
                };
                self.phase = Phase::ReadingCatalog(i, stored, open.log_end);
                vec![read]
            }
            None => self.swap(i, &stored),
        }
    }

    fn swap(&mut self, i: usize, stored: &PartitionState) -> Vec<Action> {
        let h = self.batch[i];
        self.phase = Phase::Swapping(i);
        vec![Action::Swap {
            topic_id: h.topic_id,
            expected_version: stored.version,
            next: transferred_state(stored, h.to),
        }]
    }

    /// `batch[i]` stays: reopen its gate, go on with the next one.
    fn keep(&mut self, i: usize, why: Kept) -> Vec<Action> {
        let h = self.batch[i];
        self.kept.push((h, why));
        let mut actions = vec![Action::ReopenGates(vec![h.topic_partition()])];
        actions.extend(self.next(i + 1));
        actions
    }

    /// The whole batch stays (before step 4).
    fn keep_all(&mut self, why: Kept) -> Vec<Action> {
        let all = self.batch.iter().map(|h| (*h, why.clone()));
        self.kept.extend(all);
        vec![Action::ReopenGates(self.all()), self.done()]
    }

    /// Step 4 of `batch[i]`, or the end of the batch.
    fn next(&mut self, i: usize) -> Vec<Action> {
        match self.batch.get(i) {
            Some(h) => {
                self.phase = Phase::Reading(i);
                vec![Action::ReadState(*h)]
            }
            None => vec![self.done()],
        }
    }

    fn done(&mut self) -> Action {
        self.phase = Phase::Finished;
        Action::Done {
            moved: std::mem::take(&mut self.moved),
            kept: std::mem::take(&mut self.kept),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: BrokerId = 1;

    fn topic() -> TopicId {
        TopicId(uuid::Uuid::from_u128(7))
    }

    fn handoff(partition: PartitionId, to: BrokerId, requested: bool) -> Handoff {
        Handoff {
            topic_id: topic(),
            partition,
            to,
            requested,
        }
    }

    fn tp(partition: PartitionId) -> TopicPartition {
        TopicPartition::new(topic(), partition)
    }

    /// Partition `partition` led here at epoch 3, transfer to `transfer_to` requested.
    fn stored(partition: PartitionId, transfer_to: Option<BrokerId>) -> PartitionState {
        PartitionState {
            leader_epoch: 3,
            log_start_offset: 10,
            transfer_to,
            version: 40 + partition as u64,
            ..PartitionState::new(partition, ME)
        }
    }

    fn open(log_end: Offset) -> Option<OpenPartition> {
        Some(OpenPartition {
            leader_epoch: 3,
            log_end,
        })
    }

    /// Runs a batch through begin, gates, durability and the seal; returns the first
    /// ReadState's actions.
    fn started(core: &mut HandoffCore) -> Vec<Action> {
        let all: Vec<TopicPartition> = core.batch.iter().map(Handoff::topic_partition).collect();
        assert_eq!(
            core.step(Event::Begin {
                owes_own_tail: false
            }),
            vec![Action::CloseGates(all.clone())]
        );
        assert_eq!(
            core.step(Event::GatesClosed),
            vec![Action::WaitDurable(all)]
        );
        assert_eq!(core.step(Event::Durable), vec![Action::Seal]);
        core.step(Event::Sealed(Ok(())))
    }

    /// Feeds one partition's reads (state, then catalog end if asked) and returns the
    /// actions after them.
    fn observe(
        core: &mut HandoffCore,
        observed: Observed,
        catalog_end: Option<Offset>,
    ) -> Vec<Action> {
        let actions = core.step(Event::StateRead(Ok(observed)));
        match (catalog_end, actions.as_slice()) {
            (Some(end), [Action::ReadCatalogEnd { .. }]) => {
                core.step(Event::CatalogEndRead(Ok(end)))
            }
            _ => actions,
        }
    }

    #[test]
    fn every_partition_moves() {
        let batch = [handoff(1, 2, true), handoff(0, 3, false)];
        let mut core = HandoffCore::new(ME, &batch);
        // In partition order.
        assert_eq!(started(&mut core), vec![Action::ReadState(batch[1])]);
        let s0 = stored(0, None);
        let actions = core.step(Event::StateRead(Ok(Observed {
            stored: Some(s0.clone()),
            open: open(25),
        })));
        assert_eq!(
            actions,
            vec![Action::ReadCatalogEnd {
                topic_partition: tp(0),
                log_start_offset: 10
            }]
        );
        let next0 = transferred_state(&s0, 3);
        assert_eq!(
            core.step(Event::CatalogEndRead(Ok(25))),
            vec![Action::Swap {
                topic_id: topic(),
                expected_version: 40,
                next: next0.clone()
            }]
        );
        let stored0 = PartitionState {
            version: 41,
            ..next0
        };
        assert_eq!(
            core.step(Event::Swapped(Ok(stored0.clone()))),
            vec![Action::Forget(tp(0)), Action::ReadState(batch[0])]
        );
        // Not open here: nothing in memory, nothing to compare with the catalog.
        let s1 = stored(1, Some(2));
        let next1 = transferred_state(&s1, 2);
        assert_eq!(
            observe(
                &mut core,
                Observed {
                    stored: Some(s1),
                    open: None
                },
                None
            ),
            vec![Action::Swap {
                topic_id: topic(),
                expected_version: 41,
                next: next1.clone()
            }]
        );
        assert_eq!(
            core.step(Event::Swapped(Ok(next1.clone()))),
            vec![
                Action::Forget(tp(1)),
                Action::Done {
                    moved: vec![
                        Moved {
                            topic_id: topic(),
                            state: stored0
                        },
                        Moved {
                            topic_id: topic(),
                            state: next1
                        }
                    ],
                    kept: vec![]
                }
            ]
        );
        assert!(core.is_finished());
        assert_eq!(core.step(Event::GatesClosed), vec![], "finished: ignored");
    }

    #[test]
    fn transferred_state_is_the_next_epoch_with_the_request_cleared() {
        let state = PartitionState {
            recover_from: Some(5),
            ..stored(0, Some(2))
        };
        let next = transferred_state(&state, 2);
        assert_eq!((next.leader, next.leader_epoch), (2, 4));
        assert_eq!(next.transfer_to, None);
        assert_eq!(next.recover_from, Some(5), "an older tail still to recover");
        assert_eq!(next.log_start_offset, 10);
    }

    #[test]
    fn durability_timeout_reopens_every_gate() {
        let batch = [handoff(0, 2, true), handoff(1, 2, true)];
        let mut core = HandoffCore::new(ME, &batch);
        core.step(Event::Begin {
            owes_own_tail: false,
        });
        core.step(Event::GatesClosed);
        assert_eq!(
            core.step(Event::DurableTimedOut),
            vec![
                Action::ReopenGates(vec![tp(0), tp(1)]),
                Action::Done {
                    moved: vec![],
                    kept: vec![(batch[0], Kept::NotDurable), (batch[1], Kept::NotDurable)]
                }
            ]
        );
    }

    #[test]
    fn seal_failure_reopens_every_gate() {
        let batch = [handoff(0, 2, false)];
        let mut core = HandoffCore::new(ME, &batch);
        core.step(Event::Begin {
            owes_own_tail: false,
        });
        core.step(Event::GatesClosed);
        core.step(Event::Durable);
        assert_eq!(
            core.step(Event::Sealed(Err("503".into()))),
            vec![
                Action::ReopenGates(vec![tp(0)]),
                Action::Done {
                    moved: vec![],
                    kept: vec![(batch[0], Kept::SealFailed("503".into()))]
                }
            ]
        );
    }

    #[test]
    fn owing_the_own_tail_postpones_without_closing_gates() {
        let batch = [handoff(0, 2, true)];
        let mut core = HandoffCore::new(ME, &batch);
        assert_eq!(
            core.step(Event::Begin {
                owes_own_tail: true
            }),
            vec![Action::Done {
                moved: vec![],
                kept: vec![(batch[0], Kept::OwesOwnTail)]
            }]
        );
    }

    #[test]
    fn an_empty_batch_is_done_at_once() {
        let mut core = HandoffCore::new(ME, &[]);
        assert_eq!(
            core.step(Event::Begin {
                owes_own_tail: false
            }),
            vec![Action::Done {
                moved: vec![],
                kept: vec![]
            }]
        );
    }

    /// One partition (requested, to broker 2) through step 4 with what was read; returns
    /// why it stayed, after checking its gate alone reopens and the batch ends.
    fn kept_after(observed: Observed, catalog_end: Option<Offset>, h: Handoff) -> Kept {
        let mut core = HandoffCore::new(ME, &[h]);
        assert_eq!(started(&mut core), vec![Action::ReadState(h)]);
        let actions = observe(&mut core, observed, catalog_end);
        match actions.as_slice() {
            [Action::ReopenGates(gates), Action::Done { moved, kept }] => {
                assert_eq!(gates, &vec![h.topic_partition()]);
                assert!(moved.is_empty());
                assert_eq!(kept.len(), 1);
                kept[0].1.clone()
            }
            other => panic!("expected the partition kept, got {other:?}"),
        }
    }

    #[test]
    fn a_partition_whose_state_changed_stays() {
        let h = handoff(0, 2, true);
        let observed = |stored| Observed {
            stored,
            open: open(25),
        };
        assert_eq!(kept_after(observed(None), None, h), Kept::Gone);
        let elsewhere = PartitionState {
            leader: 4,
            ..stored(0, Some(2))
        };
        assert_eq!(
            kept_after(observed(Some(elsewhere)), None, h),
            Kept::NotLeader { leader: 4 }
        );
        // Withdrawn, and re-targeted.
        assert_eq!(
            kept_after(observed(Some(stored(0, None))), None, h),
            Kept::Withdrawn { transfer_to: None }
        );
        assert_eq!(
            kept_after(observed(Some(stored(0, Some(3)))), None, h),
            Kept::Withdrawn {
                transfer_to: Some(3)
            }
        );
        let to_me = handoff(0, ME, false);
        assert_eq!(
            kept_after(observed(Some(stored(0, None))), None, to_me),
            Kept::TargetIsSelf
        );
    }

    #[test]
    fn a_partition_open_at_another_epoch_stays() {
        let h = handoff(0, 2, true);
        let fenced = PartitionState {
            leader_epoch: 4,
            ..stored(0, Some(2))
        };
        let observed = Observed {
            stored: Some(fenced),
            open: open(25),
        };
        assert_eq!(
            kept_after(observed, None, h),
            Kept::EpochChanged { open: 3, stored: 4 }
        );
    }

    #[test]
    fn a_partition_with_unsealed_data_stays() {
        let h = handoff(0, 2, true);
        let observed = Observed {
            stored: Some(stored(0, Some(2))),
            open: open(25),
        };
        assert_eq!(
            kept_after(observed, Some(24), h),
            Kept::Unsealed {
                log_end: 25,
                catalog_end: 24
            }
        );
    }

    #[test]
    fn failed_reads_and_a_lost_swap_keep_only_that_partition() {
        let batch = [
            handoff(0, 2, true),
            handoff(1, 2, true),
            handoff(2, 2, true),
        ];
        let mut core = HandoffCore::new(ME, &batch);
        started(&mut core);
        assert_eq!(
            core.step(Event::StateRead(Err("unavailable".into()))),
            vec![
                Action::ReopenGates(vec![tp(0)]),
                Action::ReadState(batch[1])
            ]
        );
        core.step(Event::StateRead(Ok(Observed {
            stored: Some(stored(1, Some(2))),
            open: open(5),
        })));
        assert_eq!(
            core.step(Event::CatalogEndRead(Err("timeout".into()))),
            vec![
                Action::ReopenGates(vec![tp(1)]),
                Action::ReadState(batch[2])
            ]
        );
        core.step(Event::StateRead(Ok(Observed {
            stored: Some(stored(2, Some(2))),
            open: None,
        })));
        assert_eq!(
            core.step(Event::Swapped(Err("version conflict".into()))),
            vec![
                Action::ReopenGates(vec![tp(2)]),
                Action::Done {
                    moved: vec![],
                    kept: vec![
                        (batch[0], Kept::Failed("unavailable".into())),
                        (batch[1], Kept::Failed("timeout".into())),
                        (batch[2], Kept::Failed("version conflict".into())),
                    ]
                }
            ]
        );
    }

    #[test]
    fn one_partition_staying_does_not_stop_the_others() {
        let batch = [handoff(0, 2, true), handoff(1, 2, true)];
        let mut core = HandoffCore::new(ME, &batch);
        started(&mut core);
        let withdrawn = Observed {
            stored: Some(stored(0, None)),
            open: open(5),
        };
        assert_eq!(
            observe(&mut core, withdrawn, None),
            vec![
                Action::ReopenGates(vec![tp(0)]),
                Action::ReadState(batch[1])
            ]
        );
        let s1 = stored(1, Some(2));
        let actions = observe(
            &mut core,
            Observed {
                stored: Some(s1.clone()),
                open: open(5),
            },
            Some(5),
        );
        assert!(matches!(actions.as_slice(), [Action::Swap { .. }]));
        let actions = core.step(Event::Swapped(Ok(transferred_state(&s1, 2))));
        match actions.as_slice() {
            [Action::Forget(f), Action::Done { moved, kept }] => {
                assert_eq!(*f, tp(1));
                assert_eq!(moved.len(), 1);
                assert_eq!(
                    kept,
                    &vec![(batch[0], Kept::Withdrawn { transfer_to: None })]
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_partition_asked_twice_is_handed_once_to_the_last_target() {
        let batch = [handoff(0, 2, true), handoff(0, 3, true)];
        let mut core = HandoffCore::new(ME, &batch);
        assert_eq!(started(&mut core), vec![Action::ReadState(batch[1])]);
    }

    #[test]
    fn unexpected_events_are_ignored() {
        let mut core = HandoffCore::new(ME, &[handoff(0, 2, true)]);
        assert_eq!(core.step(Event::Durable), vec![], "not started");
        core.step(Event::Begin {
            owes_own_tail: false,
        });
        assert_eq!(
            core.step(Event::Sealed(Ok(()))),
            vec![],
            "gates not closed yet"
        );
        assert_eq!(
            core.step(Event::GatesClosed),
            vec![Action::WaitDurable(vec![tp(0)])]
        );
    }
}
