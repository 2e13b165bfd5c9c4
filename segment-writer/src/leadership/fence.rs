//! Coming back after losing the metadata lease: the driver of
//! [`crate::leadership::fence_state`]'s pure [`LeaseResume`], which says why and in which
//! order (seal under the old epochs, bump every partition still led here, forget them all).

use crate::error::{Error, Result};
use crate::leadership::fence_state::{Action, Event, LeaseResume};
use crate::log::LogManager;
use std::collections::VecDeque;

impl LogManager {
    /// Re-establishes leadership after a new lease (see [`crate::leadership::fence_state`]).
    /// Returns how many partitions had their epoch bumped.
    pub async fn resume_after_lease_loss(&self) -> Result<usize> {
        let mut core = LeaseResume::new(self.settings.broker_id);
        let mut events = VecDeque::from([Event::Begin]);
        // The error behind the last failed step, returned as it was (the core sees its text).
        let mut failure: Option<Error> = None;
        let mut note = |r: Result<()>| -> std::result::Result<(), String> {
            r.map_err(|e| {
                let text = e.to_string();
                failure = Some(e);
                text
            })
        };
        while let Some(event) = events.pop_front() {
            for action in core.step(event) {
                match action {
                    Action::Seal => {
                        let sealed = self.seal_once().await.map(|_| ());
                        // Not kept as the failure: a failed seal does not fail the resumption.
                        events.push_back(Event::Sealed(sealed.map_err(|e| e.to_string())))
                    }
                    Action::WarnSealFailed(e) => tracing::warn!(error = %e,
                        "sealing after lease loss failed; the partitions' tails are left to the WAL"),
                    Action::ListPartitions => {
                        let listed = match self.metadata.list_topics().await {
                            Ok(topics) => Ok(topics
                                .into_iter()
                                .flat_map(|t| {
                                    let id = t.topic_id;
                                    t.partitions.into_iter().map(move |p| (id, p))
                                })
                                .collect()),
                            Err(e) => note(Err(e.into())).map(|_| Vec::new()),
                        };
                        events.push_back(Event::Partitions(listed));
                    }
                    Action::Bump {
                        topic_id,
                        expected_version,
                        next,
                    } => {
                        let done = self
                            .metadata
                            .update_partition(topic_id, expected_version, next)
                            .await;
                        events
                            .push_back(Event::Bumped(note(done.map(|_| ()).map_err(Error::from))));
                    }
                    Action::ForgetAll => self.forget_where(|_| true),
                    Action::Done(outcome) => {
                        return outcome.map_err(|e| {
                            failure
                                .take()
                                .unwrap_or(Error::Metadata(oxbow_metadata::Error::Unavailable(e)))
                        })
                    }
                }
            }
        }
        // The core answers every event until Done.
        Err(Error::Metadata(oxbow_metadata::Error::Unavailable(
            "re-establishing leadership stopped before it finished".into(),
        )))
    }
}
