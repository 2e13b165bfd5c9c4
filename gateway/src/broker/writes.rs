//! What a client write needs besides the append itself: a producer id never handed out
//! before, and the mirror rule that a mirror topic takes no client writes until promoted
//! (issue 20, ARCHITECTURE decision 34). Split out of `broker.rs` along that seam.

use super::{Broker, PRODUCER_ID_BLOCK};
use crate::error::{BrokerError, Result};
use oxbow_metadata::PartitionId;

impl Broker {
    /// A new producer id, never handed out before (by any broker, across restarts).
    pub async fn next_producer_id(&self) -> Result<i64> {
        let mut ids = self.producer_ids.lock().await;
        // Ids a mirror copied from a source cluster are taken: every mirror task moves the
        // cluster's allocator past them before its batches count
        // (`Mirrors::reserve_producer_ids_through`), but a block reserved earlier may hold
        // some. They matter once a mirror topic is promoted (producers of this cluster may
        // then write where those ids have state), so a block reserved before the latest
        // promotion seen here, or below a mirrored id seen here, is dropped.
        let promotions = self.mirrors.promotions();
        if ids.0 <= self.mirrors.producer_id_floor() || ids.2 != promotions {
            ids.0 = ids.1;
        }
        if ids.0 >= ids.1 {
            let first = self
                .metadata
                .allocate_producer_ids(PRODUCER_ID_BLOCK)
                .await?;
            *ids = (first, first + i64::from(PRODUCER_ID_BLOCK), promotions);
        }
        let id = ids.0;
        ids.0 += 1;
        Ok(id)
    }

    /// Refuses client writes to a mirror topic not promoted, or promoted while its
    /// partition's mirror task here is still stopping ([`crate::mirror::Mirrors::check_writable`]).
    pub fn check_writable(&self, topic: &str, partition: PartitionId) -> Result<()> {
        match self.mirrors.check_writable(topic, partition) {
            Ok(()) => Ok(()),
            Err(why)
                if self
                    .mirrors
                    .topic(topic)
                    .is_some_and(|m| m.value.read_only()) =>
            {
                Err(BrokerError::ReadOnlyMirror(why))
            }
            Err(why) => Err(BrokerError::MirrorStopping(why)),
        }
    }
}
