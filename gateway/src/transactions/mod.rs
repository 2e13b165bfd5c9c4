//! Transactions (issue 16), being built: [`state`] is the pure per-`transactional.id`
//! coordinator state machine (Kafka's `TransactionMetadata` rules, protocol 2 of KIP-890
//! included). Not wired to the Kafka APIs yet — a transactional producer is still refused at
//! once (`kafka/handlers/producer_id.rs`) — until the driver (state persisted in the metadata
//! service, markers through the WAL, the last stable offset and read_committed fetches)
//! exists.

pub mod state;
