//! Client quotas (issue 15): produce and fetch byte rates per user and client id, Kafka's
//! entities, precedence, rate and throttle.
//!
//! # Layout
//! - [`model`]: entities, keys, validation, the stored record, resolution (pure).
//! - [`meter`]: the sampled rate and the throttle time of a violation (pure).
//! - this file: [`Quotas`], the broker's quota table (derived from the watched security
//!   cache, rebuilt when it changes) and its meters, on the real clock.

pub mod meter;
pub mod model;

use crate::security::cache::SecurityCache;
use meter::Meters;
use model::{MeterKey, QuotaKey, QuotaRecord, QuotaTable};
use oxbow_metadata::SecurityKind;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A request's quota verdict: the throttle to answer with and mute the connection for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Throttle {
    pub ms: u64,
}

impl Throttle {
    pub fn none() -> Self {
        Throttle { ms: 0 }
    }

    /// For a response's `throttle_time_ms`.
    pub fn as_i32(self) -> i32 {
        i32::try_from(self.ms).unwrap_or(i32::MAX)
    }

    pub fn max(self, other: Throttle) -> Throttle {
        Throttle {
            ms: self.ms.max(other.ms),
        }
    }
}

struct Table {
    generation: u64,
    table: Arc<QuotaTable>,
}

/// The broker's quotas and meters.
pub struct Quotas {
    cache: Arc<SecurityCache>,
    table: Mutex<Table>,
    meters: Mutex<Meters>,
    epoch: Instant,
}

impl Quotas {
    pub fn new(cache: Arc<SecurityCache>) -> Self {
        Quotas {
            cache,
            table: Mutex::new(Table {
                generation: u64::MAX,
                table: Arc::default(),
            }),
            meters: Mutex::default(),
            epoch: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The current table, rebuilt if the security records changed since it was built.
    pub fn table(&self) -> Arc<QuotaTable> {
        let generation = self.cache.generation();
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if t.generation != generation {
            let records: Vec<QuotaRecord> = self
                .cache
                .records(SecurityKind::ClientQuota)
                .iter()
                .filter_map(|r| {
                    let decoded = QuotaRecord::decode(&r.value);
                    if decoded.is_none() {
                        tracing::error!(record = %r.name, "client quota record unreadable; ignored");
                    }
                    decoded
                })
                .collect();
            t.table = Arc::new(QuotaTable::from_records(&records));
            t.generation = generation;
        }
        t.table.clone()
    }

    /// Records `bytes` against the quota of `key` for `user`/`client_id` and returns the
    /// throttle (none if no quota applies).
    pub fn record(&self, user: &str, client_id: &str, key: QuotaKey, bytes: u64) -> Throttle {
        self.record_f64(user, client_id, key, bytes as f64)
    }

    /// Records `value` (bytes, or percent-seconds of request time) against the quota of
    /// `key` and returns the throttle (none if no quota applies).
    pub fn record_f64(&self, user: &str, client_id: &str, key: QuotaKey, value: f64) -> Throttle {
        let Some((bound, meter)) = self.table().resolve(user, client_id, key) else {
            return Throttle::none();
        };
        let now = self.now_ms();
        let mut meters = self.meters.lock().unwrap_or_else(|p| p.into_inner());
        Throttle {
            ms: meters.record(&meter, key, value, bound, now),
        }
    }

    /// Records `bytes` unless that takes the rate over the quota; then nothing is recorded
    /// and the throttle is returned (the response is to be withheld).
    pub fn record_unless_over(
        &self,
        user: &str,
        client_id: &str,
        key: QuotaKey,
        bytes: u64,
    ) -> Throttle {
        let Some((bound, meter)) = self.table().resolve(user, client_id, key) else {
            return Throttle::none();
        };
        let now = self.now_ms();
        let mut meters = self.meters.lock().unwrap_or_else(|p| p.into_inner());
        Throttle {
            ms: meters.record_unless_over(&meter, key, bytes as f64, bound, now),
        }
    }

    /// The throttle a request of `key` would get now, recording nothing, and the bytes a
    /// response may hold at most under the quota (Kafka caps a fetch's `max_bytes` at the
    /// quota times the sampled span).
    pub fn check(&self, user: &str, client_id: &str, key: QuotaKey) -> (Throttle, Option<u64>) {
        let Some((bound, meter)) = self.table().resolve(user, client_id, key) else {
            return (Throttle::none(), None);
        };
        let now = self.now_ms();
        let mut meters = self.meters.lock().unwrap_or_else(|p| p.into_inner());
        let ms = meters.peek(&meter, key, bound, now);
        let cap = bound * ((meter::SAMPLES - 1) as f64) * (meter::WINDOW_MS as f64 / 1000.0);
        (Throttle { ms }, Some(cap.max(1.0) as u64))
    }

    /// At most `limit` meters' rates and throttle counts, for `/metrics`.
    pub fn stats(&self, limit: usize) -> Vec<meter::MeterStats> {
        let now = self.now_ms();
        let mut meters = self.meters.lock().unwrap_or_else(|p| p.into_inner());
        meters.stats(now, limit)
    }

    /// The current rate of an entity's meter (bytes per second), if it has one.
    pub fn rate(&self, meter: &MeterKey, key: QuotaKey) -> Option<f64> {
        let now = self.now_ms();
        let mut meters = self.meters.lock().unwrap_or_else(|p| p.into_inner());
        meters.measure(meter, key, now)
    }
}
