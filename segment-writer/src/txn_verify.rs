//! Transaction verification at a partition leader (KIP-890 part 1), pure.
//!
//! A transactional producer must add a partition to its transaction (AddPartitionsToTxn)
//! before it writes there; otherwise no marker will ever end what it writes, and
//! `read_committed` readers stall behind it for good. So before a leader takes the first
//! transactional batch of a producer that has no transaction open in the partition, the
//! gateway asks the transaction coordinator whether the partition is in the producer's
//! ongoing transaction. Between that question and the append a marker may land (the
//! transaction timed out and was aborted): the answer is then stale. Kafka's answer, kept
//! here, is a *verification guard*: [`Verifications::start`] hands out a fresh guard and
//! remembers it for the producer; the gateway passes it with the batch; the append is
//! admitted only if the partition still holds that very guard ([`Verifications::admits`]).
//! A marker or the producer's first transactional append clears it ([`Verifications::clear`]).
//!
//! Bounded: at most [`VERIFICATIONS_MAX`] producers per partition await an answer; beyond
//! that the oldest is forgotten (its append is refused and the client's transaction aborts,
//! which is what Kafka does when an entry expires).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Producers of one partition whose verification may be outstanding at once.
pub const VERIFICATIONS_MAX: usize = 10_000;

/// The token that ties a coordinator's answer to the append it allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VerificationGuard(u64);

impl VerificationGuard {
    /// No verification was needed: the producer's transaction was already open here.
    pub const SENTINEL: VerificationGuard = VerificationGuard(0);

    fn fresh() -> VerificationGuard {
        // Unique in this process: a guard from an earlier leadership of the partition (or
        // another partition) never matches.
        static NEXT: AtomicU64 = AtomicU64::new(1);
        VerificationGuard(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// The guards one partition has handed out and not yet seen used or cleared.
#[derive(Debug, Default)]
pub struct Verifications {
    /// producer id → (guard, the order it was handed out in).
    guards: HashMap<i64, (VerificationGuard, u64)>,
    handed_out: u64,
}

impl Verifications {
    /// The guard for `producer_id`'s next transactional append: the one it holds if a
    /// verification is already outstanding (two requests in flight share it), else a new one.
    pub fn start(&mut self, producer_id: i64) -> VerificationGuard {
        if let Some((guard, _)) = self.guards.get(&producer_id) {
            return *guard;
        }
        if self.guards.len() >= VERIFICATIONS_MAX {
            let oldest = self
                .guards
                .iter()
                .min_by_key(|(_, (_, n))| *n)
                .map(|(id, _)| *id);
            if let Some(id) = oldest {
                self.guards.remove(&id);
            }
        }
        let guard = VerificationGuard::fresh();
        self.handed_out += 1;
        self.guards.insert(producer_id, (guard, self.handed_out));
        guard
    }

    /// Whether `guard` is the one `producer_id` holds (never for the sentinel).
    pub fn admits(&self, producer_id: i64, guard: VerificationGuard) -> bool {
        guard != VerificationGuard::SENTINEL
            && self
                .guards
                .get(&producer_id)
                .is_some_and(|(held, _)| *held == guard)
    }

    /// Forgets `producer_id`'s guard: its transaction opened here, or a marker ended one.
    pub fn clear(&mut self, producer_id: i64) {
        self.guards.remove(&producer_id);
    }

    pub fn len(&self) -> usize {
        self.guards.len()
    }

    pub fn is_empty(&self) -> bool {
        self.guards.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_admits_until_cleared_and_is_shared_while_outstanding() {
        let mut v = Verifications::default();
        let g = v.start(7);
        assert_ne!(g, VerificationGuard::SENTINEL);
        assert_eq!(v.start(7), g, "a second request in flight shares the guard");
        assert!(v.admits(7, g));
        assert!(!v.admits(8, g), "another producer's guard");
        assert!(!v.admits(7, VerificationGuard::SENTINEL));
        v.clear(7);
        assert!(
            !v.admits(7, g),
            "a marker landed in between: the answer is stale"
        );
        let again = v.start(7);
        assert_ne!(again, g, "a new verification gets a new guard");
        assert!(!v.admits(7, g) && v.admits(7, again));
    }

    #[test]
    fn guards_differ_across_partitions() {
        let (mut a, mut b) = (Verifications::default(), Verifications::default());
        let ga = a.start(1);
        let gb = b.start(1);
        assert_ne!(ga, gb);
        assert!(!b.admits(1, ga));
    }

    #[test]
    fn outstanding_verifications_are_bounded_oldest_first() {
        let mut v = Verifications::default();
        let first = v.start(0);
        for pid in 1..VERIFICATIONS_MAX as i64 {
            v.start(pid);
        }
        assert_eq!(v.len(), VERIFICATIONS_MAX);
        let newest = v.start(VERIFICATIONS_MAX as i64);
        assert_eq!(v.len(), VERIFICATIONS_MAX);
        assert!(!v.admits(0, first), "the oldest is forgotten");
        assert!(v.admits(VERIFICATIONS_MAX as i64, newest));
    }
}
