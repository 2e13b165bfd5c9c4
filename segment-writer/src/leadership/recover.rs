//! Recovery of a dead broker's WAL tail (design brief → Failover): the batches it held that
//! never reached the object store, read back from its WAL replicas.
//!
//! Used when a partition opens with `recover_from` set (leadership moved away from a broker
//! that may have died holding unsealed data) and when a broker starts with a new WAL
//! incarnation while the metadata service remembers an older one (its disk was lost).
//!
//! Steps: ask every live broker for what it holds of the source's WAL (`FetchTail`, every
//! incarnation); require an answer from at least one replica the source recorded as in sync
//! (acknowledged entries are on all of them), else fail retriably rather than lose acknowledged
//! data; then, per partition, chain batches from the catalog's end offset on, preferring the
//! highest leader epoch where two batches start at the same offset (a divergent tail of an
//! older epoch loses, as with Kafka's OffsetsForLeaderEpoch truncation). The new leader
//! appends the chain to its own WAL (so it is replicated under its own WAL before it is
//! served) and the sealer uploads it like any other data. Doing it twice is harmless: the
//! catalog's end moves past what was recovered, and catalog commits are fenced by epoch.

use crate::batch;
use crate::error::{Error, Result};
use crate::internal_auth::InternalAuth;
use crate::replica_proto::{read_frame, write_frame, Frame};
use crate::replica_store::ReplicaStore;
use crate::transport::ReplicaTransport;
use crate::wal::{parse_file, WalEntry};
use bytes::Bytes;
use oxbow_metadata::{BrokerId, LeaderEpoch, MetadataStore, Offset, TopicPartition, WalReplicaSet};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How long one broker may take to answer a tail request.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// A source broker's WAL entries gathered from its replicas: (incarnation, entry).
pub type Tail = Vec<(u64, WalEntry)>;

/// The batches of `tp` to append after `from`, in offset order (see the module docs).
///
/// Two rules keep a batch the source wrote but then superseded out of the chain, as
/// Kafka's log truncation does: within one incarnation a partition's batches are written
/// in offset order, so a batch followed (by sequence) by one at the same or a lower offset
/// was truncated away — e.g. a group streamed to replicas but lost locally before a
/// restart wrote that range again; and along the chain the leader epoch never decreases.
pub fn chain(tail: &Tail, tp: TopicPartition, from: Offset) -> Result<Vec<Bytes>> {
    // (incarnation, sequence, epoch, base offset, last offset, bytes) of this partition.
    let mut mine = Vec::new();
    for (incarnation, e) in tail {
        if e.topic_partition != tp {
            continue;
        }
        let Some(h) = batch::peek_header(&e.batch)? else {
            continue;
        };
        mine.push((
            *incarnation,
            e.sequence,
            e.leader_epoch,
            h.base_offset,
            h.last_offset(),
            e.batch.clone(),
        ));
    }
    // Latest first within each incarnation: keep a batch only if every later one of its
    // incarnation starts above it.
    mine.sort_by(|a, b| (a.0, b.1).cmp(&(b.0, a.1)));
    let mut live = Vec::with_capacity(mine.len());
    let mut lowest_later: Option<(u64, Offset)> = None;
    for m in mine {
        let superseded = lowest_later.is_some_and(|(inc, low)| inc == m.0 && m.3 >= low);
        lowest_later = match lowest_later {
            Some((inc, low)) if inc == m.0 => Some((inc, low.min(m.3))),
            _ => Some((m.0, m.3)),
        };
        if !superseded {
            live.push(m);
        }
    }
    // base offset → (epoch, incarnation, sequence, last offset, bytes)
    let mut candidates: BTreeMap<Offset, (LeaderEpoch, u64, u64, Offset, Bytes)> = BTreeMap::new();
    for (incarnation, sequence, epoch, base_offset, last_offset, bytes) in live {
        if last_offset < from {
            continue;
        }
        let h = (base_offset, last_offset);
        let candidate = (epoch, incarnation, sequence, h.1, bytes);
        match candidates.get(&h.0) {
            Some(held) if (held.0, held.1, held.2) >= (candidate.0, candidate.1, candidate.2) => {}
            _ => {
                candidates.insert(h.0, candidate);
            }
        }
    }
    let mut out = Vec::new();
    let mut next = from;
    let mut epoch = LeaderEpoch::MIN;
    while let Some((e, _, _, last, bytes)) = candidates.get(&next) {
        if *e < epoch {
            break;
        }
        epoch = *e;
        out.push(bytes.clone());
        next = last + 1;
    }
    Ok(out)
}

/// Gathers what live brokers hold of `source`'s WAL. `record` is the source's replica set
/// as recorded; at least one of its in-sync replicas must answer (unless it names none, in
/// which case nothing acknowledged depends on a replica) — or the source itself, alive
/// again with the recorded incarnation: its own WAL holds everything it acknowledged (it
/// restarted after its partitions moved, and its restart cleared the recorded in-sync set,
/// so without asking it a recovery could find nothing and lose what it acknowledged).
/// `skip_incarnation` leaves out the current incarnation of a broker recovering its own
/// lost WAL. Also answers whether the source was registered (alive) when asked: a tail
/// fetched from a live source may grow, one fetched from a dead source cannot until it
/// registers again.
#[allow(clippy::too_many_arguments)] // components, then the request
pub async fn fetch_tail(
    transport: &Arc<dyn ReplicaTransport>,
    auth: &InternalAuth,
    metadata: &Arc<dyn MetadataStore>,
    me: BrokerId,
    local: &Arc<ReplicaStore>,
    source: BrokerId,
    record: Option<&WalReplicaSet>,
    skip_incarnation: Option<u64>,
) -> Result<(Tail, bool)> {
    // This broker may itself be one of the source's replicas: its own copy counts.
    let own = if source == me {
        Ok(Vec::new())
    } else {
        let local = local.clone();
        oxbow_metadata::blocking::run_blocking(move || local.tail(source))
            .await
            .map_err(|e| Error::Internal(format!("replica read task: {e}")))?
    };
    let live = metadata.list_brokers().await?;
    let source_registered = live.iter().any(|b| b.broker_id == source);
    let asks = live
        .iter()
        .filter(|b| b.broker_id != me && !b.internal_addr.is_empty())
        .map(|b| {
            let addr = b.internal_addr.clone();
            let id = b.broker_id;
            async move { (id, fetch_from(&**transport, auth, id, &addr, source).await) }
        });
    let mut answers = futures::future::join_all(asks).await;
    answers.push((me, own));
    let mut tail = Vec::new();
    let mut answered_in_sync = false;
    let mut source_lost_incarnation = false;
    // Eligible replicas (left the in-sync set holding acknowledged entries, see
    // `WalReplicaSet::eligible`): whether one answered with the copy, and which answered
    // without it (they lost it too).
    let mut answered_eligible = false;
    let mut eligible_without = std::collections::BTreeSet::new();
    for (id, answer) in answers {
        match answer {
            Ok(chunks) => {
                // An in-sync replica counts only if it still holds the recorded
                // incarnation's copy: one that lost its disk since answers with nothing, and
                // counting it would end the recovery without the tail (found by the
                // simulation, seed 20: the new leader was the source's only in-sync replica
                // and had lost its disk).
                if record.is_some_and(|r| {
                    r.isr.contains(&id) && chunks.iter().any(|(inc, _)| *inc == r.incarnation)
                }) {
                    answered_in_sync = true;
                }
                if let Some(r) = record.filter(|r| r.eligible.iter().any(|(b, _)| *b == id)) {
                    if chunks.iter().any(|(inc, _)| *inc == r.incarnation) {
                        answered_eligible = true;
                    } else {
                        eligible_without.insert(id);
                    }
                }
                // The source alive again without the recorded incarnation (it lost its disk):
                // whatever that incarnation alone held is gone, nothing is left to wait for.
                if id == source
                    && !chunks.is_empty()
                    && record.is_some_and(|r| !chunks.iter().any(|(inc, _)| *inc == r.incarnation))
                {
                    source_lost_incarnation = true;
                }
                for (incarnation, bytes) in chunks {
                    if id == source && record.is_some_and(|r| r.incarnation == incarnation) {
                        answered_in_sync = true;
                    }
                    if Some(incarnation) == skip_incarnation {
                        continue;
                    }
                    let (entries, _) = parse_file(&bytes);
                    tail.extend(entries.into_iter().map(|e| (incarnation, e)));
                }
            }
            Err(e) => {
                tracing::warn!(broker = id, source, error = %e, "a broker did not answer for a WAL tail")
            }
        }
    }
    // An empty in-sync set does not mean nothing depends on a copy: the source went on
    // committing on its own WAL alone (acks=1 writes, and records consumers were shown,
    // though acks=all was refused), so its own answer is then the one needed, as Kafka
    // keeps a partition offline until its last in-sync replica returns (found by the
    // simulation, seed 37). Not for a broker recovering its own lost WAL: that copy is gone.
    // When the source cannot answer for it (it lost that copy, or this is its own recovery
    // of a lost WAL), replicas that left the in-sync set still holding acknowledged entries
    // must (found by the simulation, seeds 53 and 87: the in-sync set had shrunk before the
    // source lost its disk, and the recovery asked no one).
    let eligible_may_hold = record.is_some_and(|r| {
        r.eligible
            .iter()
            .any(|(b, _)| !eligible_without.contains(b))
    });
    if let Some(r) = record.filter(|r| r.isr.is_empty()) {
        let source_may_hold = source != me && !source_lost_incarnation;
        if source_may_hold && !answered_in_sync {
            return Err(Error::Replication(format!(
                "broker {source} holds the only copy of its WAL tail (no replica was in sync) and has not answered; not serving its partitions until it does"
            )));
        }
        if !source_may_hold && eligible_may_hold && !answered_eligible {
            return Err(Error::Replication(format!(
                "no replica of broker {source} that left its in-sync set holding acknowledged entries answered ({:?}); not serving its partitions until one does",
                r.eligible
            )));
        }
        return Ok((tail, source_registered));
    }
    let needs_in_sync = record.is_some();
    if needs_in_sync && !answered_in_sync {
        return Err(Error::Replication(format!(
            "no in-sync WAL replica of broker {source} answered (in sync: {:?}); not serving its partitions until one does",
            record.map(|r| r.isr.clone()).unwrap_or_default()
        )));
    }
    Ok((tail, source_registered))
}

async fn fetch_from(
    transport: &dyn ReplicaTransport,
    auth: &InternalAuth,
    broker: BrokerId,
    addr: &str,
    source: BrokerId,
) -> Result<Vec<(u64, Bytes)>> {
    let go = async {
        let mut socket = transport.connect(addr).await?;
        // Only the broker registered at `addr` may answer for what it holds.
        auth.dial(&mut socket, broker, addr).await?;
        write_frame(&mut socket, &Frame::FetchTail { source }).await?;
        let mut out = Vec::new();
        loop {
            match read_frame(&mut socket).await? {
                Some(Frame::TailChunk { incarnation, bytes }) => out.push((incarnation, bytes)),
                Some(Frame::TailEnd) => return Ok(out),
                Some(Frame::Refused { reason }) => return Err(Error::Replication(reason)),
                Some(_) => return Err(Error::Replication("unexpected frame in a tail".into())),
                None => return Err(Error::Replication("tail answer cut short".into())),
            }
        }
    };
    tokio::time::timeout(FETCH_TIMEOUT, go)
        .await
        .map_err(|_| Error::Replication(format!("tail request to {addr} timed out")))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::make_batch;
    use oxbow_metadata::TopicId;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new(TopicId(uuid::Uuid::from_u128(1)), p)
    }

    fn entry(seq: u64, p: i32, epoch: i32, base: i64, records: usize) -> WalEntry {
        let mut b = make_batch(records as i32, 10);
        b[0..8].copy_from_slice(&base.to_be_bytes());
        WalEntry {
            sequence: seq,
            topic_partition: tp(p),
            leader_epoch: epoch,
            batch: Bytes::from(b),
        }
    }

    fn bases(chain: &[Bytes]) -> Vec<i64> {
        chain
            .iter()
            .map(|b| i64::from_be_bytes(b[0..8].try_into().expect("8 bytes")))
            .collect()
    }

    #[test]
    fn chains_from_the_catalog_end_skipping_what_is_catalogued_and_other_partitions() {
        let tail: Tail = vec![
            (1, entry(0, 0, 3, 0, 2)),
            (1, entry(1, 0, 3, 2, 2)),
            (1, entry(2, 1, 3, 0, 5)),
            (1, entry(3, 0, 3, 4, 1)),
        ];
        let c = chain(&tail, tp(0), 2).expect("chain");
        assert_eq!(bases(&c), vec![2, 4]);
        assert!(chain(&tail, tp(0), 5).expect("chain").is_empty());
    }

    #[test]
    fn a_gap_ends_the_chain_and_the_higher_epoch_wins() {
        let tail: Tail = vec![
            (1, entry(0, 0, 3, 0, 2)),
            (1, entry(1, 0, 3, 2, 2)),
            (2, entry(0, 0, 4, 2, 3)),
            (2, entry(1, 0, 4, 9, 1)),
        ];
        let c = chain(&tail, tp(0), 0).expect("chain");
        // 0..2 (epoch 3), then the epoch-4 batch at 2 (3 records: 2..5); nothing at 5.
        assert_eq!(bases(&c), vec![0, 2]);
        assert_eq!(c[1].len(), entry(0, 0, 4, 2, 3).batch.len());
    }

    #[test]
    fn a_range_written_again_supersedes_what_the_source_wrote_there_before() {
        // Sequences 10..12 were streamed, then lost locally (a crash or a failed write);
        // the restart wrote offsets 2.. again from sequence 20 on, in the same epoch.
        let tail: Tail = vec![
            (1, entry(0, 0, 3, 0, 2)),
            (1, entry(10, 0, 3, 2, 5)),
            (1, entry(11, 0, 3, 7, 1)),
            (1, entry(20, 0, 3, 2, 2)),
            (1, entry(21, 0, 3, 4, 3)),
        ];
        let c = chain(&tail, tp(0), 0).expect("chain");
        // 0, then the rewrite at 2 and 4; the stale batch at 7 is not chained after it.
        assert_eq!(bases(&c), vec![0, 2, 4]);
        assert_eq!(c[1].len(), entry(20, 0, 3, 2, 2).batch.len());
    }

    #[test]
    fn the_epoch_never_decreases_along_the_chain() {
        let tail: Tail = vec![(1, entry(0, 0, 5, 0, 2)), (2, entry(0, 0, 4, 2, 2))];
        assert_eq!(bases(&chain(&tail, tp(0), 0).expect("chain")), vec![0]);
    }
}
