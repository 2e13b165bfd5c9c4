//! The commit point of the broker's WAL: the prefix of WAL sequences that is fsynced locally
//! *and* acknowledged by every in-sync WAL replica (design brief → Write path, step 4).
//!
//! The WAL writer hands each entry's durability callback here once the local fsync is done;
//! the callback runs when the entry is also on every in-sync replica. Callbacks advance the
//! partitions' high watermarks and answer `acks=all` producers, so consumers never see, and
//! producers are never told about, a write that only this broker holds while replicas are in
//! sync.
//!
//! The in-sync set here (in memory) is always a superset of the one recorded in the metadata
//! service: a replica is added here before it is recorded, and removed from the record before
//! it is removed here. So every acknowledged, unsealed entry is on every recorded in-sync
//! replica, which is what tail recovery relies on (`crate::leadership::recover`).
//!
//! Pure state ([`CommitState`]) plus a thin mutex wrapper ([`CommitTracker`]); no I/O.

use crate::error::{Error, Result};
use crate::wal::OnDurable;
use oxbow_metadata::BrokerId;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;
use std::time::Duration;
// tokio's clock: the OS clock in production, the paused one in tests and the simulation.
use tokio::time::Instant;

/// What one replica is known to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkProgress {
    /// First sequence of the contiguous run the replica holds (`start_sequence..acked`).
    pub start_sequence: u64,
    /// One past the highest sequence of that run the replica has fsynced.
    pub acked: u64,
    /// First sequence of the current stream; above `acked` when the stream restarted after
    /// a gap (then its acks do not count until the replica is out of sync and starts over).
    pub stream_start: u64,
    /// The latest ack of the current stream.
    pub stream_acked: u64,
}

impl LinkProgress {
    fn fresh(start: u64) -> LinkProgress {
        LinkProgress {
            start_sequence: start,
            acked: start,
            stream_start: start,
            stream_acked: start,
        }
    }
}

/// The commit state: local durability, replica progress, the in-sync set, and the entries
/// waiting for the commit point.
pub struct CommitState {
    /// One past the highest locally fsynced sequence.
    local: u64,
    links: BTreeMap<BrokerId, LinkProgress>,
    isr: BTreeSet<BrokerId>,
    /// Locally durable entries not yet committed, in sequence order.
    pending: VecDeque<(u64, Instant, OnDurable)>,
}

impl CommitState {
    pub fn new(local: u64) -> CommitState {
        CommitState {
            local,
            links: BTreeMap::new(),
            isr: BTreeSet::new(),
            pending: VecDeque::new(),
        }
    }

    /// One past the highest committed sequence.
    pub fn commit_point(&self) -> u64 {
        self.isr
            .iter()
            .map(|b| self.links.get(b).map_or(0, |l| l.acked))
            .fold(self.local, u64::min)
    }

    fn release(&mut self) -> Vec<(u64, OnDurable)> {
        let point = self.commit_point();
        let mut out = Vec::new();
        while self.pending.front().is_some_and(|(s, _, _)| *s < point) {
            if let Some((s, _, cb)) = self.pending.pop_front() {
                out.push((s, cb));
            }
        }
        out
    }

    /// An entry is fsynced locally (called in sequence order).
    pub fn local_durable(
        &mut self,
        sequence: u64,
        now: Instant,
        cb: OnDurable,
    ) -> Vec<(u64, OnDurable)> {
        self.local = self.local.max(sequence + 1);
        self.pending.push_back((sequence, now, cb));
        self.release()
    }

    /// A replica started a new stream at `stream_start`.
    pub fn link_started(&mut self, replica: BrokerId, stream_start: u64) {
        let in_sync = self.isr.contains(&replica);
        match self.links.get_mut(&replica) {
            // Contiguous with what it holds: the run goes on.
            Some(l) if stream_start <= l.acked => {
                l.stream_start = stream_start;
                l.stream_acked = stream_start;
            }
            // A gap while counted as in sync: freeze its progress so commits wait (and the
            // lag check drops it) rather than count entries it may lack.
            Some(l) if in_sync => {
                l.stream_start = stream_start;
                l.stream_acked = stream_start;
            }
            _ => {
                self.links
                    .insert(replica, LinkProgress::fresh(stream_start));
            }
        }
    }

    /// A replica fsynced everything before `acked` of its current stream.
    pub fn replica_acked(&mut self, replica: BrokerId, acked: u64) -> Vec<(u64, OnDurable)> {
        if let Some(l) = self.links.get_mut(&replica) {
            l.stream_acked = l.stream_acked.max(acked);
            if l.stream_start <= l.acked {
                l.acked = l.acked.max(acked);
            }
        }
        self.release()
    }

    pub fn link_progress(&self, replica: BrokerId) -> Option<LinkProgress> {
        self.links.get(&replica).copied()
    }

    pub fn isr(&self) -> &BTreeSet<BrokerId> {
        &self.isr
    }

    pub fn local(&self) -> u64 {
        self.local
    }

    /// Adds a replica to the in-sync set (before it is recorded in metadata).
    pub fn add_to_isr(&mut self, replica: BrokerId) {
        self.isr.insert(replica);
    }

    /// Removes a replica (after its removal is recorded in metadata).
    pub fn remove_from_isr(&mut self, replica: BrokerId) -> Vec<(u64, OnDurable)> {
        self.isr.remove(&replica);
        if let Some(l) = self.links.get_mut(&replica) {
            if l.stream_start > l.acked {
                // Out of sync now: what counts from here is the current stream alone.
                let stream_acked = l.stream_acked.max(l.stream_start);
                *l = LinkProgress::fresh(l.stream_start);
                l.acked = stream_acked;
                l.stream_acked = stream_acked;
            }
        }
        self.release()
    }

    /// Forgets a replica's stream (it is no longer a replica).
    pub fn forget_link(&mut self, replica: BrokerId) {
        self.links.remove(&replica);
    }

    /// In-sync replicas holding back an entry that has waited longer than `lag_max`.
    pub fn laggards(&self, now: Instant, lag_max: Duration) -> Vec<BrokerId> {
        let Some((oldest, since, _)) = self.pending.front() else {
            return Vec::new();
        };
        if now.saturating_duration_since(*since) < lag_max {
            return Vec::new();
        }
        self.isr
            .iter()
            .copied()
            .filter(|b| self.links.get(b).is_none_or(|l| l.acked <= *oldest))
            .collect()
    }

    /// Replicas not in sync that now hold every unsealed entry: their stream started at or
    /// before `sealed_floor` (everything earlier is in the object store) and they have
    /// acknowledged everything fsynced locally.
    pub fn ready_to_join(&self, sealed_floor: u64) -> Vec<BrokerId> {
        self.links
            .iter()
            .filter(|(b, l)| {
                !self.isr.contains(b) && l.start_sequence <= sealed_floor && l.acked >= self.local
            })
            .map(|(b, _)| *b)
            .collect()
    }

    /// Fails every waiting entry (the broker stops acknowledging).
    pub fn fail_all(&mut self) -> Vec<OnDurable> {
        self.pending.drain(..).map(|(_, _, cb)| cb).collect()
    }
}

/// [`CommitState`] behind a mutex; callbacks run outside it, in sequence order.
pub struct CommitTracker {
    state: Mutex<CommitState>,
    /// Held while callbacks run, taken before the state lock is released, so callbacks
    /// released by different threads still run in sequence order.
    delivery: Mutex<()>,
    /// One past the highest sequence whose callback has run: every entry before it is
    /// marked durable in its partition (what the sealer may trim up to).
    applied: std::sync::atomic::AtomicU64,
    /// Time from an entry's local fsync until it is committed.
    replica_wait: prometheus_client::metrics::histogram::Histogram,
}

fn run(released: Vec<(u64, OnDurable)>) {
    for (seq, cb) in released {
        cb(Ok(seq));
    }
}

impl CommitTracker {
    pub fn new(local: u64) -> CommitTracker {
        CommitTracker {
            state: Mutex::new(CommitState::new(local)),
            delivery: Mutex::new(()),
            applied: std::sync::atomic::AtomicU64::new(local),
            replica_wait: crate::latency::latency_histogram(),
        }
    }

    /// Time from an entry's local fsync until it is committed (what `acks=all` waits for
    /// replicas).
    pub fn replica_wait(&self) -> &prometheus_client::metrics::histogram::Histogram {
        &self.replica_wait
    }

    /// Runs `f` on the state and then the callbacks it released.
    pub fn with<R>(
        &self,
        f: impl FnOnce(&mut CommitState) -> (R, Vec<(u64, OnDurable)>),
    ) -> Result<R> {
        let poisoned = || Error::Internal("commit state lock poisoned".into());
        let mut s = self.state.lock().map_err(|_| poisoned())?;
        let (r, released) = f(&mut s);
        if released.is_empty() {
            return Ok(r);
        }
        let delivery = self.delivery.lock().map_err(|_| poisoned())?;
        drop(s);
        let last = released.last().map(|(seq, _)| seq + 1);
        run(released);
        if let Some(last) = last {
            self.applied
                .fetch_max(last, std::sync::atomic::Ordering::AcqRel);
        }
        drop(delivery);
        Ok(r)
    }

    /// One past the highest sequence whose durability callback has run.
    pub fn applied(&self) -> u64 {
        self.applied.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Reads the state.
    pub fn read<R>(&self, f: impl FnOnce(&CommitState) -> R) -> Result<R> {
        let s = self
            .state
            .lock()
            .map_err(|_| Error::Internal("commit state lock poisoned".into()))?;
        Ok(f(&s))
    }

    /// Wraps a WAL durability callback so it runs at the commit point instead of at the
    /// local fsync.
    pub fn gate(self: &std::sync::Arc<Self>, cb: OnDurable) -> OnDurable {
        let tracker = self.clone();
        Box::new(move |result| match result {
            Ok(seq) => {
                let local_at = Instant::now();
                let wait = tracker.replica_wait.clone();
                let cb: OnDurable = Box::new(move |r| {
                    crate::latency::observe(&wait, local_at.elapsed());
                    cb(r)
                });
                let mut cb = Some(cb);
                let done = tracker.with(|s| {
                    let released = match cb.take() {
                        Some(cb) => s.local_durable(seq, Instant::now(), cb),
                        None => Vec::new(),
                    };
                    ((), released)
                });
                if done.is_err() {
                    if let Some(cb) = cb {
                        cb(Err(Error::Internal("commit state lock poisoned".into())));
                    }
                }
            }
            Err(e) => cb(Err(e)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex as StdMutex};

    fn recorder() -> (Arc<StdMutex<Vec<u64>>>, impl Fn() -> OnDurable) {
        let log = Arc::new(StdMutex::new(Vec::new()));
        let l = log.clone();
        (log, move || {
            let l = l.clone();
            Box::new(move |r: Result<u64>| {
                if let Ok(s) = r {
                    l.lock().expect("test lock").push(s);
                }
            }) as OnDurable
        })
    }

    fn apply(released: Vec<(u64, OnDurable)>) {
        run(released)
    }

    #[test]
    fn without_replicas_commit_is_local() {
        let (log, cb) = recorder();
        let mut s = CommitState::new(0);
        let now = Instant::now();
        apply(s.local_durable(0, now, cb()));
        apply(s.local_durable(1, now, cb()));
        assert_eq!(*log.lock().expect("lock"), vec![0, 1]);
        assert_eq!(s.commit_point(), 2);
    }

    #[test]
    fn commit_waits_for_every_in_sync_replica() {
        let (log, cb) = recorder();
        let mut s = CommitState::new(0);
        s.link_started(2, 0);
        s.link_started(3, 0);
        s.add_to_isr(2);
        s.add_to_isr(3);
        let now = Instant::now();
        apply(s.local_durable(0, now, cb()));
        apply(s.local_durable(1, now, cb()));
        assert!(log.lock().expect("lock").is_empty());
        apply(s.replica_acked(2, 2));
        assert!(
            log.lock().expect("lock").is_empty(),
            "replica 3 has not acked"
        );
        apply(s.replica_acked(3, 1));
        assert_eq!(*log.lock().expect("lock"), vec![0]);
        apply(s.replica_acked(3, 2));
        assert_eq!(*log.lock().expect("lock"), vec![0, 1]);
    }

    #[test]
    fn a_replica_ahead_of_local_does_not_commit_unsynced_entries() {
        let (log, cb) = recorder();
        let mut s = CommitState::new(0);
        s.link_started(2, 0);
        s.add_to_isr(2);
        apply(s.replica_acked(2, 5));
        assert_eq!(s.commit_point(), 0, "nothing is fsynced locally yet");
        apply(s.local_durable(0, Instant::now(), cb()));
        assert_eq!(*log.lock().expect("lock"), vec![0]);
    }

    #[test]
    fn a_laggard_is_found_and_removal_releases_waiting_entries() {
        let (log, cb) = recorder();
        let mut s = CommitState::new(0);
        s.link_started(2, 0);
        s.link_started(3, 0);
        s.add_to_isr(2);
        s.add_to_isr(3);
        let t0 = Instant::now();
        apply(s.local_durable(0, t0, cb()));
        apply(s.replica_acked(2, 1));
        assert!(s.laggards(t0, Duration::from_secs(1)).is_empty());
        let later = t0 + Duration::from_secs(2);
        assert_eq!(s.laggards(later, Duration::from_secs(1)), vec![3]);
        apply(s.remove_from_isr(3));
        assert_eq!(*log.lock().expect("lock"), vec![0]);
    }

    #[test]
    fn a_restarted_stream_with_a_gap_does_not_count_until_it_rejoins() {
        let (log, cb) = recorder();
        let mut s = CommitState::new(0);
        s.link_started(2, 0);
        s.add_to_isr(2);
        let now = Instant::now();
        apply(s.local_durable(0, now, cb()));
        apply(s.local_durable(1, now, cb()));
        apply(s.replica_acked(2, 1));
        // The stream broke and restarted at 5: entries 1..5 may be missing on the replica.
        s.link_started(2, 5);
        apply(s.replica_acked(2, 6));
        assert_eq!(s.commit_point(), 1, "the gap holds the commit point");
        apply(s.remove_from_isr(2));
        assert_eq!(*log.lock().expect("lock"), vec![0, 1]);
        // It may rejoin once everything before its stream start is sealed and it caught up.
        assert!(
            s.ready_to_join(4).is_empty(),
            "entries 1..5 are not sealed yet"
        );
        s.link_started(2, 5);
        apply(s.local_durable(5, now, cb()));
        apply(s.replica_acked(2, 6));
        assert_eq!(s.ready_to_join(5), vec![2]);
    }

    #[test]
    fn a_new_replica_joins_only_when_caught_up_and_unsealed_data_is_covered() {
        let (_log, cb) = recorder();
        let mut s = CommitState::new(10);
        s.link_started(4, 10);
        apply(s.local_durable(10, Instant::now(), cb()));
        assert!(s.ready_to_join(10).is_empty(), "it has not acked entry 10");
        apply(s.replica_acked(4, 11));
        assert_eq!(s.ready_to_join(10), vec![4]);
        assert!(
            s.ready_to_join(9).is_empty(),
            "entry 9 is unsealed and not on it"
        );
    }
}
