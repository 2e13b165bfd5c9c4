//! One poll of an instance: read from the position of every assigned partition, up to a
//! byte budget, waiting up to a timeout for records to arrive; then advance the positions
//! (and commit them, when the instance auto-commits).
//!
//! The wait watches the high watermarks of every assigned partition, and re-reads the
//! assignment at least every `ASSIGNMENT_RECHECK`, so a poll that starts before the
//! group has assigned anything still returns records that arrive after the assignment.

use super::super::error::ApiError;
use super::instance::{illegal_state, Instance, Mode, Tp};
use super::offsets::{boundary, commit_positions, init_positions};
use crate::broker::Broker;
use axum::http::StatusCode;
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use oxbow_segment_writer::Isolation;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// Longest a waiting poll goes without looking at its assignment again.
const ASSIGNMENT_RECHECK: Duration = Duration::from_millis(200);

/// One record a poll returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Polled {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
}

impl Polled {
    /// The bytes the budget counts (as the REST Proxy does: key plus value).
    fn size(&self) -> usize {
        self.key.as_ref().map_or(0, Bytes::len) + self.value.as_ref().map_or(0, Bytes::len)
    }
}

/// Polls the instance (see the module docs).
pub async fn poll(
    broker: &Broker,
    instance: &Instance,
    max_bytes: usize,
    timeout: Duration,
) -> Result<Vec<Polled>, ApiError> {
    let _io = instance.io.lock().await;
    {
        let s = instance.state();
        if s.mode == Mode::None {
            return Err(illegal_state(
                "this consumer instance is neither subscribed to topics nor assigned partitions",
            ));
        }
        if let Some(why) = &s.membership_error {
            return Err(illegal_state(why.clone()));
        }
    }
    let deadline = Instant::now() + timeout;
    let mut moved: BTreeMap<Tp, i64> = BTreeMap::new();
    let records = loop {
        init_positions(broker, instance).await?;
        let positions: Vec<(Tp, i64)> = {
            let mut s = instance.state();
            let mut positions: Vec<(Tp, i64)> = s
                .assigned
                .iter()
                .filter_map(|tp| s.positions.get(tp).map(|o| (tp.clone(), *o)))
                .collect();
            if !positions.is_empty() {
                let first = s.first_read % positions.len();
                positions.rotate_left(first);
                s.first_read = first + 1;
            }
            positions
        };
        // Watched before reading, so a record appended between the read and the wait
        // still wakes the wait.
        let mut watches = Vec::with_capacity(positions.len());
        for ((topic, partition), _) in &positions {
            if let Some(t) = broker.topic(topic) {
                if let Ok(p) = broker.partition(&t, *partition).await {
                    watches.push(p.subscribe());
                }
            }
        }
        let (records, next) = read_once(broker, instance, &positions, max_bytes).await?;
        {
            let mut s = instance.state();
            for (tp, offset) in next {
                if s.assigned.contains(&tp) {
                    s.positions.insert(tp.clone(), offset);
                    moved.insert(tp, offset);
                }
            }
        }
        let now = Instant::now();
        if !records.is_empty() || now >= deadline {
            break records;
        }
        let until = deadline.min(now + ASSIGNMENT_RECHECK);
        if watches.is_empty() {
            tokio::time::sleep_until(until).await;
        } else {
            let changed =
                futures::future::select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
            let _ = tokio::time::timeout_at(until, changed).await;
        }
    };
    if instance.config.auto_commit && !moved.is_empty() {
        let member = instance.state().member.clone();
        let positions = moved.into_iter().collect();
        if let Err(e) = commit_positions(broker, &instance.group, member.as_ref(), positions).await
        {
            // The records are returned anyway; their partitions may be read again by
            // whoever owns them next (at least once, as with Kafka's auto-commit).
            tracing::debug!(group = %instance.group, instance = %instance.id, error = %e, "auto-commit refused");
        }
    }
    Ok(records)
}

/// Reads each partition once without waiting. Returns the records and the new position of
/// every partition that moved.
async fn read_once(
    broker: &Broker,
    instance: &Instance,
    positions: &[(Tp, i64)],
    max_bytes: usize,
) -> Result<(Vec<Polled>, Vec<(Tp, i64)>), ApiError> {
    let mut budget = max_bytes;
    let mut out: Vec<Polled> = Vec::new();
    let mut next = Vec::new();
    for (tp, position) in positions {
        if budget == 0 {
            break;
        }
        let Some(topic) = broker.topic(&tp.0) else {
            continue;
        };
        let read = broker
            .read(
                &topic,
                tp.1,
                *position,
                budget,
                out.is_empty(),
                Duration::ZERO,
                // Committed records only; a position still moves past aborted ones.
                Isolation::ReadCommitted,
            )
            .await;
        let result = match read {
            Ok(r) => r,
            Err(e) if e.code() == ResponseError::OffsetOutOfRange.code() => {
                // The position fell off the log (retention, or a stale commit): start over
                // where the reset policy says, as a Kafka consumer does.
                let offset = boundary(broker, tp, instance.config.reset).await?;
                tracing::debug!(group = %instance.group, instance = %instance.id, topic = %tp.0, partition = tp.1, from = position, to = offset, "position out of range; reset");
                next.push((tp.clone(), offset));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if result.batches.is_empty() {
            continue;
        }
        let decoded = crate::records::decode(
            &result.committed_batches(),
            *position,
            budget,
            broker.log.max_decompressed_batch_bytes(),
        )
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                50002,
                format!("could not decode stored records of {}-{}: {e}", tp.0, tp.1),
            )
        })?;
        let mut new_position = if decoded.is_empty() {
            crate::records::batches_end(&result.batches).map_or(*position, |end| end.max(*position))
        } else {
            *position
        };
        for r in decoded {
            let record = Polled {
                topic: tp.0.clone(),
                partition: tp.1,
                offset: r.offset,
                key: r.key,
                value: r.value,
            };
            let size = record.size();
            if !out.is_empty() && size > budget {
                budget = 0;
                break;
            }
            budget = budget.saturating_sub(size);
            new_position = r.offset + 1;
            out.push(record);
        }
        if new_position != *position {
            next.push((tp.clone(), new_position));
        }
    }
    Ok((out, next))
}
