//! The pure core of one seal (driver: [`crate::seal`]): what goes into the object, and what
//! follows from each outcome. No I/O, no clock, no `.await`.
//!
//! - [`ObjectPlan`]: which partitions' unsealed batches one object takes — whole batches, a
//!   prefix of each partition's, at most `room` bytes and [`OBJECT_PARTITIONS_MAX`]
//!   partitions; whatever is left out is sealed by the next object at once (`more`). A
//!   partition's first batch is always taken when the object is still empty, so no batch
//!   larger than `room` is left unsealed forever.
//! - [`SealRound`]: one object's steps. Nothing planned → trim the WAL (what is sealed may
//!   go) and stop. Otherwise upload (create-only), fill the cache with what was just written,
//!   commit to the catalogue; the batches are marked sealed, and the WAL trimmed, only after
//!   the commit landed. A failed upload changes nothing. A failed commit leaves everything
//!   in memory and WAL for the next seal, notes the object for the uncatalogued-object
//!   collector (the commit may have landed after all), and: when fenced (another broker
//!   leads one of the partitions now), stops serving them all — the new leader recovers the
//!   tail; on a conflict (the catalogue already goes past where a chunk starts), reconciles
//!   with the catalogue ([`catalogued_up_to`]).
//!
//! Invariant: nothing is trimmed from the WAL, nor marked sealed, before its catalogue
//! commit is known to have landed.

use oxbow_metadata::{LeaderEpoch, Offset, OBJECT_PARTITIONS_MAX};

/// Choosing what one object holds (see the module docs).
#[derive(Debug)]
pub struct ObjectPlan {
    room: u64,
    taken: u64,
    partitions: usize,
    more: bool,
}

/// What [`ObjectPlan::offer`] takes of a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// Its first `n` batches (possibly 0: nothing unsealed, or no room left for any).
    Batches(usize),
    /// The object holds its most partitions: stop offering.
    Full,
}

impl ObjectPlan {
    pub fn new(room: u64) -> ObjectPlan {
        ObjectPlan {
            room,
            taken: 0,
            partitions: 0,
            more: false,
        }
    }

    /// Offers a partition's unsealed batches (their sizes, in order).
    pub fn offer(&mut self, sizes: impl ExactSizeIterator<Item = u64>) -> Take {
        if self.partitions >= OBJECT_PARTITIONS_MAX {
            self.more = true;
            return Take::Full;
        }
        let len = sizes.len();
        let n = fitting_prefix(sizes, &mut self.taken, self.room);
        if n < len {
            self.more = true;
        }
        if n > 0 {
            self.partitions += 1;
        }
        Take::Batches(n)
    }

    /// Whether something was left for the next object.
    pub fn more(&self) -> bool {
        self.more
    }
}

/// How many of `sizes` (a partition's unsealed batches, in order) fit in an object that
/// already holds `taken` of `room` bytes; adds them to `taken`. An empty object takes at
/// least one batch, however large.
fn fitting_prefix(sizes: impl Iterator<Item = u64>, taken: &mut u64, room: u64) -> usize {
    let mut n = 0;
    for len in sizes {
        if *taken > 0 && *taken + len > room {
            break;
        }
        *taken += len;
        n += 1;
    }
    n
}

/// How a catalogue commit ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitOutcome {
    Landed,
    /// Refused: another broker leads one of the partitions (or this lease is gone).
    Fenced,
    /// Refused: the catalogue already goes past where a chunk starts.
    Conflict,
    /// Any other failure, outcome unknown.
    Failed,
}

/// What the driver observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The object was planned ([`ObjectPlan`]) with this many partitions.
    Planned {
        partitions: usize,
        more: bool,
    },
    Uploaded {
        ok: bool,
    },
    Committed(CommitOutcome),
}

/// What the driver should do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Trim the WAL up to what is sealed (and tell replication).
    TrimWal,
    Upload,
    /// Put what was just uploaded in the read cache (likeliest next reads).
    FillCache,
    Commit,
    /// Mark every chunk's batches sealed (the high watermark may move).
    MarkSealed,
    CountUploaded,
    CountFailure,
    /// Give the object to the uncatalogued-object collector.
    NoteUncatalogued,
    /// Stop serving every partition of the object.
    ForgetPartitions,
    /// Compare each chunk with its catalogue's end ([`catalogued_up_to`]).
    Reconcile,
    /// Finished; `more` = seal another object at once.
    Done {
        more: bool,
    },
    /// Finished with the failure the driver saw.
    Fail,
}

/// One object's seal (see the module docs).
#[derive(Debug, Default)]
pub struct SealRound {
    more: bool,
    finished: bool,
}

impl SealRound {
    pub fn new() -> SealRound {
        SealRound::default()
    }

    pub fn is_finished(&self) -> bool {
        self.finished
    }

    pub fn step(&mut self, event: Event) -> Vec<Action> {
        if self.finished {
            return Vec::new();
        }
        match event {
            Event::Planned { partitions: 0, .. } => {
                self.finished = true;
                vec![Action::TrimWal, Action::Done { more: false }]
            }
            Event::Planned { more, .. } => {
                self.more = more;
                vec![Action::Upload]
            }
            Event::Uploaded { ok: false } => {
                self.finished = true;
                vec![Action::CountFailure, Action::Fail]
            }
            Event::Uploaded { ok: true } => vec![Action::FillCache, Action::Commit],
            Event::Committed(CommitOutcome::Landed) => {
                self.finished = true;
                vec![
                    Action::MarkSealed,
                    Action::CountUploaded,
                    Action::TrimWal,
                    Action::Done { more: self.more },
                ]
            }
            Event::Committed(outcome) => {
                self.finished = true;
                let mut actions = vec![Action::CountFailure, Action::NoteUncatalogued];
                match outcome {
                    CommitOutcome::Fenced => actions.push(Action::ForgetPartitions),
                    CommitOutcome::Conflict => actions.push(Action::Reconcile),
                    CommitOutcome::Failed | CommitOutcome::Landed => {}
                }
                actions.push(Action::Fail);
                actions
            }
        }
    }
}

/// Where a chunk's catalogue ends, as read after a [`CommitOutcome::Conflict`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CatalogueEnd {
    pub last_offset: Offset,
    pub leader_epoch: LeaderEpoch,
}

/// After a conflict: up to which offset a chunk (`base..=last` at `epoch`) is catalogued
/// already, so those batches are sealed and the next seal starts after them instead of
/// being refused forever. `end` is where the *served* catalogue ends (after decision 23's
/// epoch cut). Two ways it gets there: an earlier seal of the same batches under the
/// chunk's own epoch whose commit failed with an unknown outcome and landed after all
/// (simulation seed 53); or a deposed leader's seal of the tail this leader recovered from
/// it, landing late under the older epoch (transactional simulation seed 28). An older
/// epoch's entry is served only below this leader's epoch start, where every log holds the
/// same batches, so it holds ours. A newer epoch's is not ours to mark (this leader is
/// deposed; its commits are fenced). `None`: nothing to mark.
pub fn catalogued_up_to(
    chunk_base: Offset,
    chunk_last: Offset,
    chunk_epoch: LeaderEpoch,
    end: Option<CatalogueEnd>,
) -> Option<Offset> {
    let end = end?;
    (end.last_offset + 1 > chunk_base && end.leader_epoch <= chunk_epoch)
        .then_some(end.last_offset.min(chunk_last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_capped_but_never_empty() {
        let mut taken = 0;
        assert_eq!(fitting_prefix([40, 40, 40].into_iter(), &mut taken, 100), 2);
        assert_eq!(taken, 80);
        // The next partition gets what room is left, maybe nothing.
        assert_eq!(fitting_prefix([30].into_iter(), &mut taken, 100), 0);
        assert_eq!(fitting_prefix([20, 1].into_iter(), &mut taken, 100), 1);
        assert_eq!(taken, 100);
        // A batch larger than the cap still goes, alone.
        let mut taken = 0;
        assert_eq!(fitting_prefix([500, 1].into_iter(), &mut taken, 100), 1);
        let mut taken = 0;
        assert_eq!(fitting_prefix(std::iter::empty(), &mut taken, 100), 0);
    }

    #[test]
    fn the_plan_says_more_when_batches_or_partitions_are_left_out() {
        let mut plan = ObjectPlan::new(25);
        assert_eq!(plan.offer([10, 10].into_iter()), Take::Batches(2));
        assert!(!plan.more());
        assert_eq!(plan.offer([].into_iter()), Take::Batches(0));
        assert!(!plan.more());
        assert_eq!(plan.offer([10].into_iter()), Take::Batches(0));
        assert!(plan.more());

        let mut plan = ObjectPlan::new(u64::MAX);
        for _ in 0..OBJECT_PARTITIONS_MAX {
            assert_eq!(plan.offer([1].into_iter()), Take::Batches(1));
        }
        assert!(!plan.more());
        assert_eq!(plan.offer([1].into_iter()), Take::Full);
        assert!(plan.more());
    }

    #[test]
    fn nothing_planned_only_trims() {
        let mut round = SealRound::new();
        assert_eq!(
            round.step(Event::Planned {
                partitions: 0,
                more: false
            }),
            vec![Action::TrimWal, Action::Done { more: false }]
        );
        assert!(round.is_finished());
    }

    #[test]
    fn a_landed_commit_marks_sealed_then_trims() {
        let mut round = SealRound::new();
        assert_eq!(
            round.step(Event::Planned {
                partitions: 3,
                more: true
            }),
            vec![Action::Upload]
        );
        assert_eq!(
            round.step(Event::Uploaded { ok: true }),
            vec![Action::FillCache, Action::Commit]
        );
        assert_eq!(
            round.step(Event::Committed(CommitOutcome::Landed)),
            vec![
                Action::MarkSealed,
                Action::CountUploaded,
                Action::TrimWal,
                Action::Done { more: true }
            ]
        );
    }

    /// The invariant: no failure path marks anything sealed or trims the WAL.
    #[test]
    fn failures_never_mark_sealed_nor_trim() {
        let planned = Event::Planned {
            partitions: 1,
            more: false,
        };
        let mut round = SealRound::new();
        round.step(planned);
        let failed_upload = round.step(Event::Uploaded { ok: false });
        assert_eq!(failed_upload, vec![Action::CountFailure, Action::Fail]);

        for (outcome, extra) in [
            (CommitOutcome::Fenced, Some(Action::ForgetPartitions)),
            (CommitOutcome::Conflict, Some(Action::Reconcile)),
            (CommitOutcome::Failed, None),
        ] {
            let mut round = SealRound::new();
            round.step(planned);
            round.step(Event::Uploaded { ok: true });
            let actions = round.step(Event::Committed(outcome));
            let mut expected = vec![Action::CountFailure, Action::NoteUncatalogued];
            expected.extend(extra);
            expected.push(Action::Fail);
            assert_eq!(actions, expected, "{outcome:?}");
            assert!(!actions
                .iter()
                .any(|a| matches!(a, Action::MarkSealed | Action::TrimWal)));
        }
    }

    #[test]
    fn reconciling_marks_only_what_this_epoch_catalogued() {
        let end = |last_offset, leader_epoch| {
            Some(CatalogueEnd {
                last_offset,
                leader_epoch,
            })
        };
        // The catalogue ends inside the chunk, same epoch: up to its end.
        assert_eq!(catalogued_up_to(10, 20, 3, end(15, 3)), Some(15));
        // Past the chunk: the whole chunk.
        assert_eq!(catalogued_up_to(10, 20, 3, end(30, 3)), Some(20));
        // A newer epoch's data: not ours to mark.
        assert_eq!(catalogued_up_to(10, 20, 3, end(15, 4)), None);
        // An older epoch's served entry (a deposed leader's late seal of the tail recovered
        // from it): the same batches, marked.
        assert_eq!(catalogued_up_to(10, 20, 3, end(15, 2)), Some(15));
        // Ends before the chunk starts, or nothing catalogued.
        assert_eq!(catalogued_up_to(10, 20, 3, end(9, 3)), None);
        assert_eq!(catalogued_up_to(10, 20, 3, None), None);
    }
}
