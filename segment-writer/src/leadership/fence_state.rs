//! The pure core of coming back after the metadata lease was lost (driver:
//! [`crate::leadership::fence`]). No I/O, no clock, no `.await`: [`LeaseResume::step`] takes
//! what the driver observed and returns what it should do next.
//!
//! While the lease was expired, another broker may have been given this broker's partitions
//! (the controller's failover, with an epoch bump), so what this broker holds in memory
//! about them is suspect. Steps, in order:
//! 1. [`Action::Seal`]: seal what is held, fenced by the *old* epochs, so it lands only if
//!    no one took over. A failure does not stop the resumption: the tails stay in the WAL
//!    (and its replicas) for whoever leads the partitions next.
//! 2. [`Action::ListPartitions`]: read every partition's stored state.
//! 3. [`Action::Bump`], one partition at a time: every partition still led here gets its
//!    epoch raised by compare-and-swap on the state just read, so a commit from any older
//!    incarnation of this broker is fenced from now on. One that fails (a conflict: it
//!    changed meanwhile; or the store is unreachable) fails the whole resumption, which the
//!    lease keeper retries with a fresh read; no acknowledgement is given meanwhile (the
//!    lease guard is not renewed), and bumping twice is harmless.
//! 4. [`Action::ForgetAll`]: every open partition is dropped, to reopen on next use at its
//!    new epoch; then [`Action::Done`] with how many were bumped.
//!
//! Whether this broker should keep leading them is the controller's decision, not this one.

use oxbow_metadata::{BrokerId, PartitionState, TopicId};

/// What the driver observed.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Begin,
    /// The seal's outcome (an error text on failure).
    Sealed(Result<(), String>),
    /// Every partition's stored state, with its topic.
    Partitions(Result<Vec<(TopicId, PartitionState)>, String>),
    /// The outcome of the last [`Action::Bump`].
    Bumped(Result<(), String>),
}

/// What the driver should do next.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Seal,
    /// Log that sealing failed (the resumption goes on).
    WarnSealFailed(String),
    ListPartitions,
    /// Compare-and-swap `next` over the state stored at `expected_version`.
    Bump {
        topic_id: TopicId,
        expected_version: u64,
        next: PartitionState,
    },
    ForgetAll,
    /// Finished: partitions bumped, or why it failed (nothing forgotten then).
    Done(Result<usize, String>),
}

/// One resumption after a new lease (see the module docs).
#[derive(Debug)]
pub struct LeaseResume {
    me: BrokerId,
    /// Bumps still to do, in order.
    to_bump: Vec<(TopicId, PartitionState)>,
    bumped: usize,
    finished: bool,
}

impl LeaseResume {
    pub fn new(me: BrokerId) -> LeaseResume {
        LeaseResume {
            me,
            to_bump: Vec::new(),
            bumped: 0,
            finished: false,
        }
    }

    /// Whether [`Action::Done`] was returned.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    pub fn step(&mut self, event: Event) -> Vec<Action> {
        if self.finished {
            return Vec::new();
        }
        match event {
            Event::Begin => vec![Action::Seal],
            Event::Sealed(Ok(())) => vec![Action::ListPartitions],
            Event::Sealed(Err(e)) => vec![Action::WarnSealFailed(e), Action::ListPartitions],
            Event::Partitions(Err(e)) | Event::Bumped(Err(e)) => self.finish(Err(e)),
            Event::Partitions(Ok(all)) => {
                // Popped from the back: reversed so bumps go in listing order.
                self.to_bump = all
                    .into_iter()
                    .filter(|(_, p)| p.leader == self.me)
                    .rev()
                    .collect();
                self.next()
            }
            Event::Bumped(Ok(())) => {
                self.bumped += 1;
                self.next()
            }
        }
    }

    fn next(&mut self) -> Vec<Action> {
        match self.to_bump.pop() {
            Some((topic_id, stored)) => {
                let mut next = stored.clone();
                next.leader_epoch += 1;
                vec![Action::Bump {
                    topic_id,
                    expected_version: stored.version,
                    next,
                }]
            }
            None => {
                let mut actions = vec![Action::ForgetAll];
                actions.extend(self.finish(Ok(self.bumped)));
                actions
            }
        }
    }

    fn finish(&mut self, outcome: Result<usize, String>) -> Vec<Action> {
        self.finished = true;
        vec![Action::Done(outcome)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: BrokerId = 1;

    fn topic(n: u128) -> TopicId {
        TopicId(uuid::Uuid::from_u128(n))
    }

    fn state(partition: i32, leader: BrokerId, epoch: i32, version: u64) -> PartitionState {
        let mut s = PartitionState::new(partition, leader);
        s.leader_epoch = epoch;
        s.version = version;
        s
    }

    fn bump_of(a: &Action) -> (TopicId, i32, i32, u64) {
        match a {
            Action::Bump {
                topic_id,
                expected_version,
                next,
            } => (
                *topic_id,
                next.partition,
                next.leader_epoch,
                *expected_version,
            ),
            other => panic!("expected a bump, got {other:?}"),
        }
    }

    #[test]
    fn bumps_every_partition_led_here_then_forgets_all() {
        let mut core = LeaseResume::new(ME);
        assert_eq!(core.step(Event::Begin), vec![Action::Seal]);
        assert_eq!(
            core.step(Event::Sealed(Ok(()))),
            vec![Action::ListPartitions]
        );
        let listed = vec![
            (topic(1), state(0, ME, 3, 10)),
            (topic(1), state(1, 2, 7, 11)),
            (topic(2), state(0, ME, 0, 4)),
        ];
        let first = core.step(Event::Partitions(Ok(listed)));
        assert_eq!(first.len(), 1);
        assert_eq!(bump_of(&first[0]), (topic(1), 0, 4, 10));
        let second = core.step(Event::Bumped(Ok(())));
        assert_eq!(bump_of(&second[0]), (topic(2), 0, 1, 4));
        assert_eq!(
            core.step(Event::Bumped(Ok(()))),
            vec![Action::ForgetAll, Action::Done(Ok(2))]
        );
        assert!(core.is_finished());
        assert!(core.step(Event::Bumped(Ok(()))).is_empty());
    }

    #[test]
    fn the_bump_keeps_everything_but_the_epoch() {
        let mut core = LeaseResume::new(ME);
        core.step(Event::Begin);
        core.step(Event::Sealed(Ok(())));
        let mut stored = state(5, ME, 9, 20);
        stored.log_start_offset = 42;
        stored.transfer_to = Some(3);
        let actions = core.step(Event::Partitions(Ok(vec![(topic(1), stored.clone())])));
        let Action::Bump { next, .. } = &actions[0] else {
            panic!("expected a bump, got {actions:?}");
        };
        let mut expected = stored;
        expected.leader_epoch = 10;
        assert_eq!(next, &expected);
    }

    #[test]
    fn a_failed_seal_is_reported_and_the_resumption_goes_on() {
        let mut core = LeaseResume::new(ME);
        core.step(Event::Begin);
        assert_eq!(
            core.step(Event::Sealed(Err("outage".into()))),
            vec![
                Action::WarnSealFailed("outage".into()),
                Action::ListPartitions
            ]
        );
        assert_eq!(
            core.step(Event::Partitions(Ok(vec![(topic(1), state(0, 2, 1, 1))]))),
            vec![Action::ForgetAll, Action::Done(Ok(0))]
        );
    }

    #[test]
    fn a_failed_read_or_bump_fails_without_forgetting() {
        let mut core = LeaseResume::new(ME);
        core.step(Event::Begin);
        core.step(Event::Sealed(Ok(())));
        assert_eq!(
            core.step(Event::Partitions(Err("unreachable".into()))),
            vec![Action::Done(Err("unreachable".into()))]
        );

        let mut core = LeaseResume::new(ME);
        core.step(Event::Begin);
        core.step(Event::Sealed(Ok(())));
        let two = vec![
            (topic(1), state(0, ME, 0, 1)),
            (topic(1), state(1, ME, 0, 2)),
        ];
        core.step(Event::Partitions(Ok(two)));
        assert_eq!(
            core.step(Event::Bumped(Err("conflict".into()))),
            vec![Action::Done(Err("conflict".into()))]
        );
        assert!(core.is_finished());
    }
}
