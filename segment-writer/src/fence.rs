//! Coming back after losing the metadata lease.
//!
//! While this broker's lease was expired, another broker may have been given its partitions
//! (the controller's job, with a leader-epoch bump), so everything this broker holds in
//! memory about them is suspect. On a new lease it therefore: seals what it still holds
//! (fenced by the *old* epochs, so it lands only if no one took over), bumps the leader
//! epoch of every partition it still leads by compare-and-swap (so a commit from any older
//! incarnation is fenced from now on), and forgets its open partitions, which reopen on next
//! use at the new epoch. Whether it should lead them at all is the cluster issue's decision.

use crate::error::Result;
use crate::log::LogManager;

impl LogManager {
    /// Re-establishes leadership after a new lease (see the module docs). Returns how many
    /// partitions had their epoch bumped.
    pub async fn resume_after_lease_loss(&self) -> Result<usize> {
        if let Err(e) = self.seal_once().await {
            tracing::warn!(error = %e, "sealing after lease loss failed; the partitions' tails are left to the WAL");
        }
        let me = self.settings.broker_id;
        let mut bumped = 0;
        for topic in self.metadata.list_topics().await? {
            for p in topic.partitions.iter().filter(|p| p.leader == me) {
                let mut next = p.clone();
                next.leader_epoch += 1;
                self.metadata
                    .update_partition(topic.topic_id, p.version, next)
                    .await?;
                bumped += 1;
            }
        }
        self.forget_where(|_| true);
        Ok(bumped)
    }
}
