//! Client quotas on the request path (issue 15), as Kafka enforces them (KIP-219): a
//! request over its user's / client id's byte rate is answered at once with
//! `throttle_time_ms`, and the connection then reads nothing more for that long, so the
//! tenant's rate falls back to its quota while other connections are untouched.
//!
//! - Produce: the request's bytes count against `producer_byte_rate` when it arrives;
//!   the response carries the throttle (acks=0 produces have none, but still mute).
//! - Fetch: a client already over `consumer_byte_rate` gets an empty response with the
//!   throttle (nothing read, nothing counted; fetch sessions are not kept, so no
//!   partitions means nothing new, as Kafka's throttled sessionless response). Otherwise
//!   its `max_bytes` is capped at what the quota allows over the sampled span, and the
//!   records read count against it — unless they would take it over its quota: then the
//!   response is withheld (replaced by an empty one, nothing counted), as Kafka does.
//!
//! - Request time: the ordered part of every request (its handler's work before any wait
//!   for durability or a long poll) counts against `request_percentage`, as percent of
//!   one thread-second per second — Kafka measures request-handler thread time; Oxbow's
//!   handlers are async, so the ordered part's wall time stands in for it (it includes
//!   any metadata-service round trip of that part, so it over-counts admin requests).
//!   Its throttle is capped at one sample window (1 s), as Kafka's
//!   `ClientRequestQuotaManager` caps it, and joins the byte-rate one (the larger wins).
//!
//! The connection loop calls [`before`] when a request is decoded and [`after`] on its
//! response body (the user is the principal's name: `ANONYMOUS` when unauthenticated, as
//! in Kafka); both are a few map lookups when no quota applies.

use crate::broker::Broker;
use crate::security::quota::model::QuotaKey;
use crate::security::quota::Throttle;
use kafka_protocol::messages::{FetchResponse, RequestKind, ResponseKind};

/// What the loop does with a request before handling it.
pub enum Gate {
    /// Handle it (its fetch `max_bytes` may have been capped).
    Go,
    /// Do not handle it: answer this at once and mute for the throttle.
    Answer(Box<ResponseKind>, Throttle),
}

/// Applies quotas to a decoded request of `frame_bytes`.
pub fn before(
    broker: &Broker,
    user: &str,
    client_id: &str,
    frame_bytes: usize,
    request: &mut RequestKind,
    throttle: &mut Throttle,
) -> Gate {
    match request {
        RequestKind::Produce(_) => {
            *throttle = broker.quotas.record(
                user,
                client_id,
                QuotaKey::ProducerByteRate,
                frame_bytes as u64,
            );
            Gate::Go
        }
        RequestKind::Fetch(fetch) => {
            let (over, cap) = broker
                .quotas
                .check(user, client_id, QuotaKey::ConsumerByteRate);
            if over.ms > 0 {
                return Gate::Answer(
                    Box::new(ResponseKind::Fetch(FetchResponse::default())),
                    over,
                );
            }
            if let Some(cap) = cap {
                let cap = i32::try_from(cap).unwrap_or(i32::MAX).max(1);
                fetch.max_bytes = fetch.max_bytes.min(cap);
            }
            Gate::Go
        }
        _ => Gate::Go,
    }
}

/// Counts a request's handler time against `request_percentage`; returns its throttle.
pub fn handler_time(
    broker: &Broker,
    user: &str,
    client_id: &str,
    elapsed: std::time::Duration,
) -> Throttle {
    // Percent-seconds: 100 for a whole thread for a whole second.
    let percent_seconds = elapsed.as_secs_f64() * 100.0;
    let throttle = broker.quotas.record_f64(
        user,
        client_id,
        QuotaKey::RequestPercentage,
        percent_seconds,
    );
    Throttle {
        ms: throttle.ms.min(REQUEST_TIME_THROTTLE_MAX_MS),
    }
}

/// Kafka caps a request-time throttle at one quota window.
const REQUEST_TIME_THROTTLE_MAX_MS: u64 = crate::security::quota::meter::WINDOW_MS;

/// Counts a response against quotas and sets its `throttle_time_ms`; returns the throttle
/// to mute the connection for (the larger of the request's and the response's).
pub fn after(
    broker: &Broker,
    user: &str,
    client_id: &str,
    response: &mut ResponseKind,
    request_throttle: Throttle,
) -> Throttle {
    let mut throttle = request_throttle;
    if let ResponseKind::Fetch(r) = response {
        let bytes: u64 = r
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .map(|p| p.records.as_ref().map_or(0, |b| b.len() as u64))
            .sum();
        if bytes > 0 {
            let over = broker.quotas.record_unless_over(
                user,
                client_id,
                QuotaKey::ConsumerByteRate,
                bytes,
            );
            if over.ms > 0 {
                // Withheld, as Kafka does: the client fetches the same offsets again later.
                *r = FetchResponse::default();
                throttle = throttle.max(over);
            }
        }
    }
    if throttle.ms > 0 {
        set_throttle(response, throttle);
    }
    throttle
}

fn set_throttle(response: &mut ResponseKind, throttle: Throttle) {
    let ms = throttle.as_i32();
    match response {
        ResponseKind::Produce(r) => r.throttle_time_ms = ms,
        ResponseKind::Fetch(r) => r.throttle_time_ms = ms,
        _ => {}
    }
}
