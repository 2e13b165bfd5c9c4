//! One transactional id's state at its coordinator (Kafka's `TransactionMetadata` and the
//! coordinator's rules), pure: no I/O, no clock — the caller passes `now_ms`, carries out the
//! [`Action`]s in order and reports back with [`Event`]s.
//!
//! States (Kafka's names, as DescribeTransactions and ListTransactions show them):
//! `Empty` → (AddPartitionsToTxn / AddOffsetsToTxn) → `Ongoing` → (EndTxn) →
//! `PrepareCommit` | `PrepareAbort` → (markers written to every partition) →
//! `CompleteCommit` | `CompleteAbort` → (the next AddPartitions) → `Ongoing` … An `Ongoing`
//! transaction past its timeout, or found by a new InitProducerId (a producer restarted
//! with the same `transactional.id`), is aborted under a bumped epoch (`PrepareEpochFence`
//! then `PrepareAbort`), which fences the old producer.
//!
//! Durability rule for the driver: every [`Action::Persist`] must be stored (the metadata
//! service) before the actions after it are carried out — a prepared transaction is then
//! finished by whichever broker coordinates the id next, and a reply never tells a client
//! more than is stored.
//!
//! Invariants (tests below): the epoch never decreases and a request under an older epoch
//! is refused (`PRODUCER_FENCED`); markers are written only after the prepare is persisted
//! and only for partitions added in that transaction; a client's answer to EndTxn comes
//! only after its prepare is persisted; a retried EndTxn of a finished transaction with the
//! same outcome succeeds, a contradicting one is `INVALID_TXN_STATE`.

use kafka_protocol::error::ResponseError;
use std::collections::BTreeSet;

/// Kafka's `transaction.max.timeout.ms` default (15 minutes).
pub const TIMEOUT_MAX_MS: i32 = 900_000;

/// Past this epoch a producer gets a new id (Kafka: `Short.MAX_VALUE - 1`).
pub const EPOCH_MAX: i16 = i16::MAX - 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    PrepareEpochFence,
}

impl TxnState {
    /// Every state.
    pub const ALL: [TxnState; 7] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::PrepareEpochFence,
    ];

    /// The name Kafka's DescribeTransactions and ListTransactions use.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    fn preparing(self) -> bool {
        matches!(
            self,
            TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence
        )
    }
}

/// A partition in a transaction: (topic, partition).
pub type TxnPartition = (String, i32);

/// What is stored per transactional id (the driver persists it whole).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transaction {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// Partitions written in the current transaction (markers go to each).
    pub partitions: BTreeSet<TxnPartition>,
    /// Groups whose offsets the transaction commits (AddOffsetsToTxn).
    pub groups: BTreeSet<String>,
    /// When the current transaction began (-1: none).
    pub start_ms: i64,
    pub updated_ms: i64,
}

/// A request to the coordinator for this id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `expected`: the producer id and epoch the client had (KIP-360, v3+), if any.
    /// `fresh_producer_id`: an unused producer id, when the driver has one ready; a request
    /// that needs one without it gets [`Action::NeedProducerId`].
    InitProducerId {
        timeout_ms: i32,
        /// The broker's `transaction.max.timeout.ms`: a longer `timeout_ms` is refused.
        max_timeout_ms: i32,
        expected: Option<(i64, i16)>,
        fresh_producer_id: Option<i64>,
    },
    AddPartitions {
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<TxnPartition>,
    },
    AddOffsets {
        producer_id: i64,
        producer_epoch: i16,
        group: String,
    },
    /// `bump_epoch`: transaction protocol 2 (KIP-890): the markers are written under the
    /// next epoch, which the reply hands to the client.
    EndTxn {
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        bump_epoch: bool,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Request(Request),
    /// Every marker of the prepared transaction is written (replicated, durable).
    MarkersWritten,
    /// Time passes: an `Ongoing` transaction past its timeout is aborted.
    Tick,
}

/// The answer to a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub error: Option<ResponseError>,
    /// InitProducerId and (protocol 2) EndTxn: the producer id and epoch to use.
    pub producer: Option<(i64, i16)>,
}

impl Reply {
    fn ok() -> Reply {
        Reply {
            error: None,
            producer: None,
        }
    }

    fn err(e: ResponseError) -> Reply {
        Reply {
            error: Some(e),
            producer: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Store this state durably before the next action.
    Persist(Transaction),
    /// Write commit (`true`) or abort markers for (producer id, epoch) into `partitions`,
    /// and make `groups`' pending offsets visible (commit) or drop them (abort); then
    /// report [`Event::MarkersWritten`].
    WriteMarkers {
        commit: bool,
        producer_id: i64,
        producer_epoch: i16,
        partitions: BTreeSet<TxnPartition>,
        groups: BTreeSet<String>,
    },
    /// Allocate a producer id and send the InitProducerId again with it.
    NeedProducerId,
    Reply(Reply),
}

/// One transactional id's coordinator state (see the module docs). `None` until its first
/// InitProducerId.
#[derive(Clone, Debug, Default)]
pub struct TxnCoordinator {
    txn: Option<Transaction>,
}

impl TxnCoordinator {
    /// The state as loaded from the metadata service (a new coordinator taking over).
    pub fn loaded(txn: Option<Transaction>) -> TxnCoordinator {
        TxnCoordinator { txn }
    }

    pub fn transaction(&self) -> Option<&Transaction> {
        self.txn.as_ref()
    }

    /// What a coordinator taking over (or a driver whose write failed part-way) must
    /// finish: a prepared transaction's markers, or a fence whose abort was never stored
    /// (its epoch is bumped and the abort persisted first, as [`fence_and_abort`] does).
    pub fn resume(&mut self, now_ms: i64) -> Vec<Action> {
        match &mut self.txn {
            Some(t) if matches!(t.state, TxnState::PrepareCommit | TxnState::PrepareAbort) => {
                vec![markers(t)]
            }
            Some(t) if t.state == TxnState::PrepareEpochFence => {
                if t.producer_epoch < EPOCH_MAX {
                    t.producer_epoch += 1;
                }
                t.state = TxnState::PrepareAbort;
                t.updated_ms = now_ms;
                vec![Action::Persist(t.clone()), markers(t)]
            }
            _ => Vec::new(),
        }
    }

    pub fn step(&mut self, now_ms: i64, event: Event) -> Vec<Action> {
        match event {
            Event::Request(r) => self.request(now_ms, r),
            Event::MarkersWritten => self.complete(now_ms),
            Event::Tick => self.expire(now_ms),
        }
    }

    fn request(&mut self, now_ms: i64, r: Request) -> Vec<Action> {
        match r {
            Request::InitProducerId {
                timeout_ms,
                max_timeout_ms,
                expected,
                fresh_producer_id,
            } => self.init(
                now_ms,
                (timeout_ms, max_timeout_ms),
                expected,
                fresh_producer_id,
            ),
            Request::AddPartitions {
                producer_id,
                producer_epoch,
                partitions,
            } => self.add(now_ms, producer_id, producer_epoch, partitions, None),
            Request::AddOffsets {
                producer_id,
                producer_epoch,
                group,
            } => self.add(now_ms, producer_id, producer_epoch, Vec::new(), Some(group)),
            Request::EndTxn {
                producer_id,
                producer_epoch,
                commit,
                bump_epoch,
            } => self.end(now_ms, producer_id, producer_epoch, commit, bump_epoch),
        }
    }

    fn init(
        &mut self,
        now_ms: i64,
        (timeout_ms, max_timeout_ms): (i32, i32),
        expected: Option<(i64, i16)>,
        fresh: Option<i64>,
    ) -> Vec<Action> {
        if timeout_ms <= 0 || timeout_ms > max_timeout_ms {
            return reply(Reply::err(ResponseError::InvalidTransactionTimeout));
        }
        let Some(t) = &mut self.txn else {
            let Some(pid) = fresh else {
                return vec![Action::NeedProducerId];
            };
            let t = Transaction {
                producer_id: pid,
                producer_epoch: 0,
                timeout_ms,
                state: TxnState::Empty,
                partitions: BTreeSet::new(),
                groups: BTreeSet::new(),
                start_ms: -1,
                updated_ms: now_ms,
            };
            self.txn = Some(t.clone());
            return vec![
                Action::Persist(t),
                Action::Reply(Reply {
                    error: None,
                    producer: Some((pid, 0)),
                }),
            ];
        };
        // KIP-360: a client recovering names the id and epoch it had; only the current
        // producer may resume.
        if let Some((pid, epoch)) = expected {
            if pid >= 0 && (pid != t.producer_id || epoch != t.producer_epoch) {
                return reply(Reply::err(ResponseError::ProducerFenced));
            }
        }
        match t.state {
            s if s.preparing() => reply(Reply::err(ResponseError::ConcurrentTransactions)),
            TxnState::Ongoing => {
                // A new incarnation of the producer: abort what the old one left open, under
                // a bumped epoch so the old one is fenced; the client retries.
                let mut actions = fence_and_abort(t, now_ms);
                actions.push(Action::Reply(Reply::err(
                    ResponseError::ConcurrentTransactions,
                )));
                actions
            }
            _ => {
                if t.producer_epoch >= EPOCH_MAX {
                    let Some(pid) = fresh else {
                        return vec![Action::NeedProducerId];
                    };
                    t.producer_id = pid;
                    t.producer_epoch = 0;
                } else {
                    t.producer_epoch += 1;
                }
                t.timeout_ms = timeout_ms;
                t.state = TxnState::Empty;
                t.partitions.clear();
                t.groups.clear();
                t.start_ms = -1;
                t.updated_ms = now_ms;
                vec![
                    Action::Persist(t.clone()),
                    Action::Reply(Reply {
                        error: None,
                        producer: Some((t.producer_id, t.producer_epoch)),
                    }),
                ]
            }
        }
    }

    /// The producer's id and epoch against the stored ones.
    fn check_producer(&self, producer_id: i64, producer_epoch: i16) -> Result<(), ResponseError> {
        let Some(t) = &self.txn else {
            return Err(ResponseError::InvalidProducerIdMapping);
        };
        if t.producer_id != producer_id {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        if producer_epoch < t.producer_epoch {
            return Err(ResponseError::ProducerFenced);
        }
        if producer_epoch > t.producer_epoch {
            return Err(ResponseError::InvalidProducerEpoch);
        }
        Ok(())
    }

    fn add(
        &mut self,
        now_ms: i64,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<TxnPartition>,
        group: Option<String>,
    ) -> Vec<Action> {
        if let Err(e) = self.check_producer(producer_id, producer_epoch) {
            return reply(Reply::err(e));
        }
        let Some(t) = &mut self.txn else {
            return reply(Reply::err(ResponseError::InvalidProducerIdMapping));
        };
        if t.state.preparing() {
            return reply(Reply::err(ResponseError::ConcurrentTransactions));
        }
        let new_partitions = partitions.iter().any(|p| !t.partitions.contains(p));
        let new_group = group.as_ref().is_some_and(|g| !t.groups.contains(g));
        if t.state == TxnState::Ongoing && !new_partitions && !new_group {
            return reply(Reply::ok());
        }
        if t.state != TxnState::Ongoing {
            t.state = TxnState::Ongoing;
            t.partitions.clear();
            t.groups.clear();
            t.start_ms = now_ms;
        }
        t.partitions.extend(partitions);
        t.groups.extend(group);
        t.updated_ms = now_ms;
        vec![Action::Persist(t.clone()), Action::Reply(Reply::ok())]
    }

    fn end(
        &mut self,
        now_ms: i64,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        bump_epoch: bool,
    ) -> Vec<Action> {
        let Some(t) = &mut self.txn else {
            return reply(Reply::err(ResponseError::InvalidProducerIdMapping));
        };
        if t.producer_id != producer_id {
            return reply(Reply::err(ResponseError::InvalidProducerIdMapping));
        }
        // Protocol 2: a retry of an EndTxn that already bumped the epoch carries the old one.
        let retry_of_bumped = bump_epoch && producer_epoch == t.producer_epoch - 1;
        let finished_same = matches!(
            (t.state, commit),
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false)
        );
        if retry_of_bumped && finished_same {
            return reply(Reply {
                error: None,
                producer: Some((t.producer_id, t.producer_epoch)),
            });
        }
        // A retry (the answer lost, say with a coordinator that died) while its markers are
        // still being written: not yet (Kafka's answer), not PRODUCER_FENCED, which would
        // tell a client whose transaction is committing that it was fenced.
        let preparing_same = matches!(
            (t.state, commit),
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false)
        );
        if retry_of_bumped && preparing_same {
            return reply(Reply::err(ResponseError::ConcurrentTransactions));
        }
        if producer_epoch < t.producer_epoch {
            return reply(Reply::err(ResponseError::ProducerFenced));
        }
        if producer_epoch > t.producer_epoch {
            return reply(Reply::err(ResponseError::InvalidProducerEpoch));
        }
        match (t.state, commit) {
            (TxnState::Ongoing, _) => {
                if bump_epoch {
                    if t.producer_epoch >= EPOCH_MAX {
                        // Kafka hands out a new id here; until that path exists, abort the
                        // client's attempt rather than overflow.
                        return reply(Reply::err(ResponseError::InvalidProducerEpoch));
                    }
                    t.producer_epoch += 1;
                }
                t.state = if commit {
                    TxnState::PrepareCommit
                } else {
                    TxnState::PrepareAbort
                };
                t.updated_ms = now_ms;
                let producer = bump_epoch.then_some((t.producer_id, t.producer_epoch));
                vec![
                    Action::Persist(t.clone()),
                    Action::Reply(Reply {
                        error: None,
                        producer,
                    }),
                    markers(t),
                ]
            }
            // Protocol 2 lets a client abort with nothing added (no markers to write): a
            // produce refused before its partition was added still began a transaction
            // client-side.
            (TxnState::Empty | TxnState::CompleteCommit, false) if bump_epoch => reply(Reply {
                error: None,
                producer: Some((t.producer_id, t.producer_epoch)),
            }),
            _ if finished_same => reply(Reply {
                error: None,
                producer: bump_epoch.then_some((t.producer_id, t.producer_epoch)),
            }),
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                reply(Reply::err(ResponseError::ConcurrentTransactions))
            }
            (TxnState::PrepareEpochFence, _) => reply(Reply::err(ResponseError::ProducerFenced)),
            _ => reply(Reply::err(ResponseError::InvalidTxnState)),
        }
    }

    fn complete(&mut self, now_ms: i64) -> Vec<Action> {
        let Some(t) = &mut self.txn else {
            return Vec::new();
        };
        t.state = match t.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            // A late or repeated report: nothing is prepared.
            _ => return Vec::new(),
        };
        t.partitions.clear();
        t.groups.clear();
        t.start_ms = -1;
        t.updated_ms = now_ms;
        vec![Action::Persist(t.clone())]
    }

    fn expire(&mut self, now_ms: i64) -> Vec<Action> {
        match &mut self.txn {
            Some(t)
                if t.state == TxnState::Ongoing
                    && now_ms >= t.start_ms.saturating_add(i64::from(t.timeout_ms)) =>
            {
                fence_and_abort(t, now_ms)
            }
            _ => Vec::new(),
        }
    }
}

fn reply(r: Reply) -> Vec<Action> {
    vec![Action::Reply(r)]
}

fn markers(t: &Transaction) -> Action {
    Action::WriteMarkers {
        commit: t.state == TxnState::PrepareCommit,
        producer_id: t.producer_id,
        producer_epoch: t.producer_epoch,
        partitions: t.partitions.clone(),
        groups: t.groups.clone(),
    }
}

/// Aborts an `Ongoing` transaction under a bumped epoch (fencing its producer): the fence
/// is persisted, then the abort, then the markers go out.
fn fence_and_abort(t: &mut Transaction, now_ms: i64) -> Vec<Action> {
    t.state = TxnState::PrepareEpochFence;
    t.updated_ms = now_ms;
    let fenced = t.clone();
    // At the last epoch the fence cannot bump; the abort is still written under it, and
    // the next InitProducerId hands out a new id.
    if t.producer_epoch < EPOCH_MAX {
        t.producer_epoch += 1;
    }
    t.state = TxnState::PrepareAbort;
    vec![
        Action::Persist(fenced),
        Action::Persist(t.clone()),
        markers(t),
    ]
}

#[cfg(test)]
mod tests;
