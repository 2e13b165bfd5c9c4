//! OffsetForLeaderEpoch: the end offset of a leader epoch, which clients use to validate
//! their position after a leader change (KIP-320). A partition keeps one epoch until the
//! cluster moves it, so the current epoch ends at the log end offset; older epochs are
//! answered as unknown until epoch history is kept (with leadership changes).

use super::topic_name;
use crate::broker::Broker;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use std::sync::Arc;

pub async fn handle(
    broker: &Arc<Broker>,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.topic.0.to_string();
        let topic = broker.topic(&name);
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let r = EpochEndOffset::default()
                .with_partition(p.partition)
                .with_leader_epoch(-1)
                .with_end_offset(-1);
            let partition = match &topic {
                Some(topic) => broker.partition(topic, p.partition).await,
                None => Err(crate::error::BrokerError::UnknownTopic(name.clone())),
            };
            let r = match partition {
                Err(e) => r.with_error_code(e.code()),
                Ok(part) => match (part.leader_epoch(), part.offsets()) {
                    (Ok(epoch), Ok((_, _, log_end))) => {
                        if p.current_leader_epoch >= 0 && p.current_leader_epoch < epoch {
                            r.with_error_code(ResponseError::FencedLeaderEpoch.code())
                        } else if p.current_leader_epoch > epoch {
                            r.with_error_code(ResponseError::UnknownLeaderEpoch.code())
                        } else if p.leader_epoch == epoch {
                            r.with_leader_epoch(epoch).with_end_offset(log_end)
                        } else {
                            r
                        }
                    }
                    _ => r.with_error_code(ResponseError::UnknownServerError.code()),
                },
            };
            partitions.push(r);
        }
        topics.push(
            OffsetForLeaderTopicResult::default()
                .with_topic(topic_name(&name))
                .with_partitions(partitions),
        );
    }
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
