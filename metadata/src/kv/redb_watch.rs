//! [`RedbKv`](super::RedbKv)'s watches: the watchers of each committed revision's events,
//! and the in-memory history a watch from a past revision starts from (see `redb.rs`'s
//! module docs). Everything here runs under the store's writers' lock, so events reach
//! watchers and history in commit order.

use super::{KeyRange, Revision, WatchEvent};
use crate::watch::{Watch, WatchQueue, WATCH_CAPACITY};
use std::collections::VecDeque;
use tokio::sync::mpsc;

/// Events kept for watches that start at a past revision.
pub const HISTORY_EVENTS_MAX: usize = 4096;

struct Watcher {
    range: KeyRange,
    /// The first revision this watcher wants.
    from: Revision,
    tx: mpsc::Sender<Vec<WatchEvent>>,
    /// Deliveries the reader has not taken yet ([`Watch::queue`]).
    queued: WatchQueue,
}

/// Queues `batch`, counted; false if the reader is gone or full (the watch ends).
fn send(tx: &mpsc::Sender<Vec<WatchEvent>>, queued: &WatchQueue, batch: Vec<WatchEvent>) -> bool {
    queued.add();
    let sent = tx.try_send(batch).is_ok();
    if !sent {
        queued.taken();
    }
    sent
}

/// The live watchers and the last [`HISTORY_EVENTS_MAX`] events, oldest first.
pub(super) struct WatchHub {
    watchers: Vec<Watcher>,
    history: VecDeque<WatchEvent>,
    /// Every revision after this one is whole in `history`.
    floor: Revision,
}

impl WatchHub {
    /// No watchers and no history: a watch from `revision` or before ends at once.
    pub(super) fn new(revision: Revision) -> Self {
        WatchHub {
            watchers: Vec::new(),
            history: VecDeque::new(),
            floor: revision,
        }
    }

    /// The revision after which the history is whole.
    pub(super) fn floor(&self) -> Revision {
        self.floor
    }

    /// Forgets the history before `revision` (the store checked it is not in the future).
    pub(super) fn compact(&mut self, revision: Revision) {
        // Every revision from `revision` on stays whole; a watch from an earlier one ends.
        let floor = revision - 1;
        if floor > self.floor {
            while self
                .history
                .front()
                .is_some_and(|e| e.kv.mod_revision <= floor)
            {
                self.history.pop_front();
            }
            self.floor = floor;
        }
    }

    /// Hands a committed revision's events to the watchers (dropping those that are full or
    /// gone, which ends their watches) and to the history.
    pub(super) fn publish(&mut self, events: Vec<WatchEvent>) {
        self.watchers.retain(|w| {
            let batch: Vec<WatchEvent> = events
                .iter()
                .filter(|e| e.kv.mod_revision >= w.from && w.range.contains(&e.kv.key))
                .cloned()
                .collect();
            batch.is_empty() || send(&w.tx, &w.queued, batch)
        });
        for e in events {
            if self.history.len() == HISTORY_EVENTS_MAX {
                if let Some(old) = self.history.pop_front() {
                    self.floor = old.kv.mod_revision;
                }
            }
            self.history.push_back(e);
        }
    }

    /// A watch of `range` from `from` (`None`: the revision after `current`, the store's):
    /// the history's events of each revision from `from` on first, one delivery each, then
    /// what is published. From a revision the history no longer holds whole, it ends at
    /// once (see the module docs of `redb.rs`).
    pub(super) fn watch(
        &mut self,
        range: KeyRange,
        from: Option<Revision>,
        current: Revision,
    ) -> Watch<Vec<WatchEvent>> {
        let (tx, rx) = mpsc::channel(WATCH_CAPACITY);
        let queued = WatchQueue::default();
        let watch = |rx| Watch::counted(rx, None, queued.clone());
        if let Some(from) = from.filter(|f| *f <= current) {
            if from <= self.floor {
                return watch(rx);
            }
            let mut batch: Vec<WatchEvent> = Vec::new();
            for e in self.history.iter() {
                if e.kv.mod_revision < from || !range.contains(&e.kv.key) {
                    continue;
                }
                if batch
                    .first()
                    .is_some_and(|b| b.kv.mod_revision != e.kv.mod_revision)
                    && !send(&tx, &queued, std::mem::take(&mut batch))
                {
                    return watch(rx);
                }
                batch.push(e.clone());
            }
            if !batch.is_empty() && !send(&tx, &queued, batch) {
                return watch(rx);
            }
        }
        let from = from.unwrap_or(0).max(current + 1);
        self.watchers.push(Watcher {
            range,
            from,
            tx,
            queued: queued.clone(),
        });
        watch(rx)
    }
}
