//! Transactions (issue 16). [`state`] is the pure per-`transactional.id` coordinator
//! state machine (Kafka's `TransactionMetadata` rules, protocol 2 of KIP-890 included);
//! [`coordinator`] drives it (records in the metadata service, marker tasks, timeouts,
//! failover); [`markers`] writes a transaction's markers through the partitions' leaders and
//! completes its groups' offsets; [`verify`] is a leader asking the coordinator before a
//! transaction's first batch (KIP-890 part 1); [`record`] is the stored format. The partition side
//! (markers in the log, last stable offset, aborted-transaction index) is
//! `oxbow_segment_writer::txn`; the Kafka APIs are `kafka/handlers/txn.rs`.

pub mod coordinator;
pub mod markers;
pub mod peers;
pub mod record;
pub mod state;
pub mod verify;

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::records::RecordBatchDecoder;
    use oxbow_segment_writer::txn::{marker_batch, Marker};

    /// The control batches segment-writer writes decode with an independent Kafka codec
    /// (kafka-protocol's), as clients will read them: a transactional control batch of one
    /// record whose key is (version 0, type) — type 1 commit, 0 abort.
    #[test]
    fn markers_decode_with_the_kafka_codec() {
        for (commit, kind) in [(true, 1u8), (false, 0u8)] {
            let raw = marker_batch(
                42,
                3,
                Marker {
                    commit,
                    coordinator_epoch: 9,
                },
                1_700_000_000_000,
            );
            let mut buf = Bytes::from(raw);
            let set = RecordBatchDecoder::decode(&mut buf).expect("a valid batch (CRC included)");
            assert_eq!(set.records.len(), 1);
            let r = &set.records[0];
            assert!(r.control && r.transactional);
            assert_eq!((r.producer_id, r.producer_epoch), (42, 3));
            assert_eq!(r.key.as_deref(), Some(&[0u8, 0, 0, kind][..]));
            assert_eq!(r.value.as_deref(), Some(&[0u8, 0, 0, 0, 0, 9][..]));
        }
    }
}
