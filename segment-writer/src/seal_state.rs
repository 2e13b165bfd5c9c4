//! The pure core of one seal (driver: [`crate::seal`]): what goes into the object, and what
//! follows from each outcome. No I/O, no clock, no `.await`.
//!
//! - [`plan_object`]: which unsealed batches one object takes — whole batches, a prefix of
//!   each partition's, the oldest in the WAL first across partitions, at most `room` bytes
//!   and [`OBJECT_PARTITIONS_MAX`] partitions; whatever is left out is sealed by the next
//!   object at once (`more`). The first batch is always taken, so no batch larger than
//!   `room` is left unsealed forever.
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

/// One unsealed batch as the plan sees it: its WAL sequence (`None`: not in a WAL, the
/// direct mode) and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offered {
    pub sequence: Option<u64>,
    pub len: u64,
}

/// What one object takes: a prefix of each partition's unsealed batches.
#[derive(Debug, PartialEq, Eq)]
pub struct ObjectPlan {
    /// Per partition offered, how many of its first batches (possibly 0).
    pub take: Vec<usize>,
    /// Something was left out for lack of room: the next object follows at once.
    pub more: bool,
}

/// Chooses what one object holds (see the module docs): the oldest batches in the WAL
/// first, whichever partition they belong to, up to `room` bytes and
/// [`OBJECT_PARTITIONS_MAX`] partitions; the first batch is always taken, however large.
///
/// Oldest first because the WAL is trimmed up to its oldest unsealed entry: an object
/// filled a partition at a time (the first partitions in map order taking all the room
/// while a backlog lasted) left the partition holding the WAL's oldest entry for the
/// backlog's last object, so nothing was trimmed until all of it was sealed, and at max
/// produce the WAL reached its budget and appends stopped for seconds at a time. Taken in
/// WAL order, every object frees its own bytes of the WAL. Batches outside a WAL (no
/// sequence) come after, partition by partition.
pub fn plan_object(partitions: &[Vec<Offered>], room: u64) -> ObjectPlan {
    let mut order: Vec<(u64, usize, usize)> = partitions
        .iter()
        .enumerate()
        .flat_map(|(p, batches)| {
            batches
                .iter()
                .enumerate()
                .map(move |(i, b)| (b.sequence.unwrap_or(u64::MAX), p, i))
        })
        .collect();
    order.sort_unstable();
    let mut take = vec![0usize; partitions.len()];
    let (mut taken, mut holding) = (0u64, 0usize);
    let mut more = false;
    for (_, p, i) in order {
        // A prefix of each partition's batches: one out of order ends its partition's share.
        if take[p] != i {
            more = true;
            continue;
        }
        let len = partitions[p][i].len;
        let new_partition = take[p] == 0;
        if (taken > 0 && taken.saturating_add(len) > room)
            || (new_partition && holding >= OBJECT_PARTITIONS_MAX)
        {
            more = true;
            break;
        }
        taken = taken.saturating_add(len);
        take[p] += 1;
        holding += usize::from(new_partition);
    }
    ObjectPlan { take, more }
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
    /// The object was planned ([`plan_object`]) with this many partitions.
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

    fn wal(entries: &[(u64, u64)]) -> Vec<Offered> {
        entries
            .iter()
            .map(|&(sequence, len)| Offered {
                sequence: Some(sequence),
                len,
            })
            .collect()
    }

    #[test]
    fn objects_are_capped_but_never_empty() {
        // Room for two of three 40-byte batches.
        let plan = plan_object(&[wal(&[(1, 40), (2, 40), (3, 40)])], 100);
        assert_eq!(plan.take, vec![2]);
        assert!(plan.more);
        // A batch larger than the cap still goes, alone.
        let plan = plan_object(&[wal(&[(1, 500), (2, 1)])], 100);
        assert_eq!(plan.take, vec![1]);
        assert!(plan.more);
        let plan = plan_object(&[vec![], wal(&[(1, 10)])], 100);
        assert_eq!(
            plan,
            ObjectPlan {
                take: vec![0, 1],
                more: false
            }
        );
    }

    #[test]
    fn objects_take_the_oldest_wal_entries_of_every_partition_first() {
        // Partition 0 has a long backlog of later entries; partition 1 holds the WAL's
        // oldest entry. Filling partition by partition took only partition 0's batches and
        // left the WAL untrimmable; in WAL order each object frees the oldest entries.
        let p0 = wal(&[(2, 10), (4, 10), (6, 10), (8, 10), (10, 10)]);
        let p1 = wal(&[(1, 10), (3, 10), (5, 10)]);
        let plan = plan_object(&[p0.clone(), p1.clone()], 40);
        assert_eq!(plan.take, vec![2, 2], "sequences 1..=4");
        assert!(plan.more);
        // What is left, planned again, continues in WAL order.
        let plan = plan_object(&[p0[2..].to_vec(), p1[2..].to_vec()], 40);
        assert_eq!(plan.take, vec![3, 1]);
        assert!(!plan.more);
    }

    #[test]
    fn batches_outside_a_wal_follow_partition_by_partition() {
        let direct = |n: usize| {
            vec![
                Offered {
                    sequence: None,
                    len: 10
                };
                n
            ]
        };
        let plan = plan_object(&[direct(2), direct(3), wal(&[(7, 10)])], 40);
        assert_eq!(plan.take, vec![2, 1, 1]);
        assert!(plan.more);
    }

    #[test]
    fn the_plan_says_more_when_batches_or_partitions_are_left_out() {
        let plan = plan_object(&[wal(&[(1, 10), (2, 10)]), vec![], wal(&[(3, 10)])], 25);
        assert_eq!(
            plan,
            ObjectPlan {
                take: vec![2, 0, 0],
                more: true
            }
        );
        let plan = plan_object(&[wal(&[(1, 10), (2, 10)]), vec![]], 25);
        assert!(!plan.more);

        let many: Vec<Vec<Offered>> = (0..=OBJECT_PARTITIONS_MAX as u64)
            .map(|p| wal(&[(p, 1)]))
            .collect();
        let plan = plan_object(&many, u64::MAX);
        assert_eq!(plan.take.iter().sum::<usize>(), OBJECT_PARTITIONS_MAX);
        assert_eq!(plan.take[OBJECT_PARTITIONS_MAX], 0);
        assert!(plan.more);
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
