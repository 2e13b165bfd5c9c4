//! The rate a quota is checked against, and the throttle time of a violation: Kafka's
//! `Rate` over a `SampledStat` and `QuotaUtils.throttleTime`, on explicit millisecond
//! clocks (pure, so tests and the simulation pick the time).
//!
//! A rate is the sum of the last `samples` windows of `window_ms` each, divided by the
//! time they span — at least `samples − 1` whole windows, so a client that just started
//! is not judged on a few milliseconds. A sample older than `samples` windows is reset.
//! A request over quota is answered at once with `throttle_time_ms` = how long the client
//! must stay silent for the rate to fall back to the bound
//! (`(rate − bound) / bound × span`), and the connection is muted for it (KIP-219).

use super::model::{MeterKey, QuotaKey};
use std::collections::HashMap;

/// Kafka's `quota.window.num`.
pub const SAMPLES: u32 = 11;
/// Kafka's `quota.window.size.seconds`, in milliseconds.
pub const WINDOW_MS: u64 = 1000;
/// Longest throttle Oxbow asks for. Kafka does not cap byte-rate throttles; Oxbow caps
/// them at the span of the whole sample history (11 s), past which the rate forgets the
/// burst anyway, so one oversized request cannot mute a connection for minutes.
pub const THROTTLE_MAX_MS: u64 = SAMPLES as u64 * WINDOW_MS;
/// A meter not touched for this long is dropped (Kafka expires idle quota sensors after
/// an hour).
pub const METER_IDLE_MS: u64 = 3_600_000;
/// Most meters held at once; past it the least recently used goes first. Bounds memory
/// against a client cycling through client ids.
pub const METERS_MAX: usize = 100_000;

#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    start_ms: u64,
    value: f64,
}

/// A sampled rate (per second).
#[derive(Clone, Debug)]
pub struct Rate {
    samples: Vec<Sample>,
    current: usize,
}

impl Rate {
    pub fn new(now_ms: u64) -> Self {
        Rate {
            samples: vec![
                Sample {
                    start_ms: now_ms,
                    value: 0.0,
                };
                1
            ],
            current: 0,
        }
    }

    /// Adds `value` at `now_ms`.
    pub fn record(&mut self, value: f64, now_ms: u64) {
        let sample = &self.samples[self.current];
        if now_ms.saturating_sub(sample.start_ms) >= WINDOW_MS {
            self.current = (self.current + 1) % SAMPLES as usize;
            let fresh = Sample {
                start_ms: now_ms,
                value: 0.0,
            };
            if self.current >= self.samples.len() {
                self.samples.push(fresh);
            } else {
                self.samples[self.current] = fresh;
            }
        }
        self.samples[self.current].value += value;
    }

    fn purge_obsolete(&mut self, now_ms: u64) {
        let expire = SAMPLES as u64 * WINDOW_MS;
        for s in &mut self.samples {
            if now_ms.saturating_sub(s.start_ms) >= expire {
                *s = Sample {
                    start_ms: now_ms,
                    value: 0.0,
                };
            }
        }
    }

    /// The span the rate is measured over, in milliseconds (Kafka's `windowSize`).
    fn span_ms(&mut self, now_ms: u64) -> u64 {
        self.purge_obsolete(now_ms);
        let oldest = self
            .samples
            .iter()
            .map(|s| s.start_ms)
            .min()
            .unwrap_or(now_ms);
        let mut elapsed = now_ms.saturating_sub(oldest);
        let full = elapsed / WINDOW_MS;
        let min_full = SAMPLES as u64 - 1;
        if full < min_full {
            elapsed += (min_full - full) * WINDOW_MS;
        }
        elapsed.max(1)
    }

    /// Units per second at `now_ms`.
    pub fn measure(&mut self, now_ms: u64) -> f64 {
        let span = self.span_ms(now_ms);
        let total: f64 = self.samples.iter().map(|s| s.value).sum();
        total * 1000.0 / span as f64
    }

    /// How long to throttle at `now_ms` for the rate to fall back to `bound` (0 when within
    /// it), at most [`THROTTLE_MAX_MS`].
    pub fn throttle_ms(&mut self, bound: f64, now_ms: u64) -> u64 {
        let rate = self.measure(now_ms);
        if bound.is_nan() || bound <= 0.0 || rate <= bound {
            return 0;
        }
        let span = self.span_ms(now_ms) as f64;
        let ms = ((rate - bound) / bound * span).round();
        (ms as u64).min(THROTTLE_MAX_MS)
    }
}

struct Meter {
    rate: Rate,
    used_ms: u64,
    /// Requests throttled, and the throttle time asked in all (for metrics).
    throttled: u64,
    throttle_ms_total: u64,
}

/// One meter's state, for metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct MeterStats {
    pub meter: MeterKey,
    pub key: QuotaKey,
    /// Units per second now.
    pub rate: f64,
    pub throttled: u64,
    pub throttle_ms_total: u64,
}

/// Every metered (entity, quota key) of a broker, bounded in number.
#[derive(Default)]
pub struct Meters {
    meters: HashMap<(MeterKey, QuotaKey), Meter>,
}

impl Meters {
    /// Records `value` for `key` on `meter` and returns the throttle time against `bound`.
    pub fn record(
        &mut self,
        meter: &MeterKey,
        key: QuotaKey,
        value: f64,
        bound: f64,
        now_ms: u64,
    ) -> u64 {
        self.record_then(meter, key, value, bound, now_ms, false)
    }

    /// Records `value` unless that takes the rate over `bound`, in which case it is taken
    /// back and the throttle returned (Kafka's fetch: the response is replaced by an empty
    /// one, and what was not sent is not counted).
    pub fn record_unless_over(
        &mut self,
        meter: &MeterKey,
        key: QuotaKey,
        value: f64,
        bound: f64,
        now_ms: u64,
    ) -> u64 {
        self.record_then(meter, key, value, bound, now_ms, true)
    }

    /// Records, measures the throttle, and (if `take_back_if_over`) unrecords a value that
    /// went over.
    fn record_then(
        &mut self,
        meter: &MeterKey,
        key: QuotaKey,
        value: f64,
        bound: f64,
        now_ms: u64,
        take_back_if_over: bool,
    ) -> u64 {
        let m = self.meter(meter, key, now_ms);
        m.rate.record(value, now_ms);
        let throttle = m.rate.throttle_ms(bound, now_ms);
        if take_back_if_over && throttle > 0 {
            m.rate.record(-value, now_ms);
        }
        m.count(throttle);
        throttle
    }

    /// The throttle time a request would get now, recording nothing (a fetch checks first,
    /// then records only what it sends).
    pub fn peek(&mut self, meter: &MeterKey, key: QuotaKey, bound: f64, now_ms: u64) -> u64 {
        match self.meters.get_mut(&(meter.clone(), key)) {
            Some(m) => m.rate.throttle_ms(bound, now_ms),
            None => 0,
        }
    }

    /// The current rate of a meter (for metrics and tests).
    pub fn measure(&mut self, meter: &MeterKey, key: QuotaKey, now_ms: u64) -> Option<f64> {
        self.meters
            .get_mut(&(meter.clone(), key))
            .map(|m| m.rate.measure(now_ms))
    }

    pub fn len(&self) -> usize {
        self.meters.len()
    }

    /// At most `limit` meters' state, in key order (metrics stay bounded however many
    /// client ids come and go).
    pub fn stats(&mut self, now_ms: u64, limit: usize) -> Vec<MeterStats> {
        let mut ids: Vec<&(MeterKey, QuotaKey)> = self.meters.keys().collect();
        ids.sort();
        let ids: Vec<(MeterKey, QuotaKey)> = ids.into_iter().take(limit).cloned().collect();
        ids.into_iter()
            .filter_map(|(meter, key)| {
                let m = self.meters.get_mut(&(meter.clone(), key))?;
                Some(MeterStats {
                    rate: m.rate.measure(now_ms),
                    throttled: m.throttled,
                    throttle_ms_total: m.throttle_ms_total,
                    meter,
                    key,
                })
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.meters.is_empty()
    }

    fn meter(&mut self, meter: &MeterKey, key: QuotaKey, now_ms: u64) -> &mut Meter {
        let id = (meter.clone(), key);
        if !self.meters.contains_key(&id) && self.meters.len() >= METERS_MAX {
            self.meters
                .retain(|_, m| now_ms.saturating_sub(m.used_ms) < METER_IDLE_MS);
            if self.meters.len() >= METERS_MAX {
                let lru = self
                    .meters
                    .iter()
                    .min_by_key(|(_, m)| m.used_ms)
                    .map(|(k, _)| k.clone());
                if let Some(k) = lru {
                    self.meters.remove(&k);
                }
            }
        }
        let m = self.meters.entry(id).or_insert_with(|| Meter {
            rate: Rate::new(now_ms),
            used_ms: now_ms,
            throttled: 0,
            throttle_ms_total: 0,
        });
        m.used_ms = now_ms;
        m
    }
}

impl Meter {
    fn count(&mut self, throttle_ms: u64) {
        if throttle_ms > 0 {
            self.throttled += 1;
            self.throttle_ms_total += throttle_ms;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_rate_measures_itself_once_the_history_is_full() {
        let mut r = Rate::new(0);
        // 1000 units every 100 ms = 10_000/s, for 20 s.
        for t in (0..20_000).step_by(100) {
            r.record(1000.0, t);
        }
        let rate = r.measure(20_000);
        assert!((rate - 10_000.0).abs() / 10_000.0 < 0.1, "{rate}");
    }

    #[test]
    fn a_young_rate_is_spread_over_at_least_ten_windows() {
        let mut r = Rate::new(0);
        r.record(10_000.0, 0);
        // 10_000 units over the padded 10 s span, not over 1 ms.
        assert!((r.measure(1) - 1000.0).abs() < 1.0);
    }

    #[test]
    fn the_throttle_brings_the_rate_back_to_the_bound() {
        let mut r = Rate::new(0);
        for t in (0..10_000).step_by(100) {
            r.record(2000.0, t); // 20_000/s against a bound of 10_000/s
        }
        let now = 10_000;
        let throttle = r.throttle_ms(10_000.0, now);
        assert!(throttle > 0);
        // Silent for the throttle, the rate is at (about) the bound.
        let after = r.measure(now + throttle);
        assert!(after <= 10_000.0 * 1.05, "{after} after {throttle} ms");
        assert_eq!(r.throttle_ms(1e12, now), 0);
    }

    #[test]
    fn a_huge_burst_throttles_at_most_the_cap_and_old_samples_expire() {
        let mut r = Rate::new(0);
        r.record(1e12, 0);
        assert_eq!(r.throttle_ms(1.0, 1), THROTTLE_MAX_MS);
        // After the whole history's span, the burst is forgotten.
        assert_eq!(r.measure(SAMPLES as u64 * WINDOW_MS + 1), 0.0);
    }

    #[test]
    fn meters_are_bounded_and_shared_by_key() {
        let mut m = Meters::default();
        let k = |u: &str| MeterKey {
            user: Some(u.to_string()),
            client_id: None,
        };
        m.record(&k("a"), QuotaKey::ProducerByteRate, 10.0, 1e9, 0);
        m.record(&k("a"), QuotaKey::ProducerByteRate, 10.0, 1e9, 1);
        assert_eq!(m.len(), 1);
        assert_eq!(m.peek(&k("b"), QuotaKey::ProducerByteRate, 1.0, 2), 0);
        assert_eq!(m.len(), 1, "a peek creates nothing");
        // A value that would go over is taken back: the rate is as before.
        let before = m
            .measure(&k("a"), QuotaKey::ProducerByteRate, 3)
            .expect("meter");
        assert!(m.record_unless_over(&k("a"), QuotaKey::ProducerByteRate, 1e9, 100.0, 3) > 0);
        let after = m
            .measure(&k("a"), QuotaKey::ProducerByteRate, 3)
            .expect("meter");
        assert!((after - before).abs() < 1e-6, "{before} {after}");
        let stats = m.stats(3, 10);
        assert_eq!(stats.len(), 1);
        assert_eq!(stats[0].throttled, 1);
        for i in 0..(METERS_MAX + 10) {
            m.record(
                &k(&i.to_string()),
                QuotaKey::ConsumerByteRate,
                1.0,
                1e9,
                5 + i as u64,
            );
        }
        assert!(m.len() <= METERS_MAX);
    }
}
