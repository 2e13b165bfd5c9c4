//! Consumer lag in seconds: when was the first record a group has not committed appended?
//!
//! Every `crate::samples::SAMPLE_INTERVAL` (5 s) the broker notes each partition's high watermark with the time
//! ([`LagClock::sample`]); the record at offset `o` was appended between the last sample
//! whose high watermark was at most `o` and the first one past it, and its time is
//! interpolated between the two. The broker's clock, not the records' own timestamps: a
//! producer's `CreateTime` may be anything, the append time is what lag means to on-call.
//! A partition keeps at most [`POINTS_MAX`] samples; when full, every other one of the
//! older half goes, so recent lag is exact to a sample and old lag is still covered
//! (coarsely) for hours. Lag past the oldest sample kept is reported as that sample's age:
//! a lower bound.

use oxbow_metadata::TopicPartition;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Samples kept per partition (16 bytes each).
const POINTS_MAX: usize = 64;

/// One sample: the high watermark at a time (unix ms).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Point {
    high: i64,
    at_ms: u64,
}

/// Per partition led here, its high watermark over time.
#[derive(Default)]
pub struct LagClock {
    points: Mutex<HashMap<TopicPartition, VecDeque<Point>>>,
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl LagClock {
    /// Records `now_ms`'s high watermarks; partitions absent from `highs` (no longer led
    /// here) are forgotten.
    pub fn sample(&self, now_ms: u64, highs: impl IntoIterator<Item = (TopicPartition, i64)>) {
        let Ok(mut points) = self.points.lock() else {
            return;
        };
        let mut seen = HashMap::with_capacity(points.len());
        for (tp, high) in highs {
            let mut ring = points.remove(&tp).unwrap_or_default();
            // A sample that moved nothing adds no information: keep the older time (when
            // the high watermark got there), which is what an interpolation needs.
            if ring.back().is_none_or(|p| p.high != high) {
                if ring.len() == POINTS_MAX {
                    thin(&mut ring);
                }
                ring.push_back(Point {
                    high,
                    at_ms: now_ms,
                });
            }
            seen.insert(tp, ring);
        }
        *points = seen;
    }

    /// Seconds since the record at `committed` was appended, given the high watermark now
    /// (0 when `committed` reaches it).
    pub fn lag_seconds(&self, tp: &TopicPartition, committed: i64, high: i64, now_ms: u64) -> f64 {
        if committed >= high {
            return 0.0;
        }
        let Ok(points) = self.points.lock() else {
            return 0.0;
        };
        let Some(ring) = points.get(tp) else {
            return 0.0;
        };
        let appended_ms = appended_at(ring, committed);
        appended_ms.map_or(0.0, |at| now_ms.saturating_sub(at) as f64 / 1000.0)
    }

    #[cfg(test)]
    fn len(&self, tp: &TopicPartition) -> usize {
        self.points
            .lock()
            .map(|p| p.get(tp).map_or(0, VecDeque::len))
            .unwrap_or(0)
    }
}

/// Drops every other sample of the older half.
fn thin(ring: &mut VecDeque<Point>) {
    let half = ring.len() / 2;
    let mut i = 0;
    ring.retain(|_| {
        let keep = i >= half || i % 2 == 0;
        i += 1;
        keep
    });
}

/// When the record at `offset` was appended, interpolated between the samples around it.
fn appended_at(ring: &VecDeque<Point>, offset: i64) -> Option<u64> {
    // The first sample past `offset`: the record was appended by then.
    let after = ring.iter().position(|p| p.high > offset)?;
    let Some(before) = after.checked_sub(1).and_then(|i| ring.get(i)) else {
        // Older than every sample kept: the oldest sample's time is a lower bound of its age.
        return ring.get(after).map(|p| p.at_ms);
    };
    let after = ring.get(after)?;
    let span = (after.high - before.high).max(1) as f64;
    let into = (offset - before.high).max(0) as f64;
    let ms = (after.at_ms - before.at_ms) as f64 * (into / span);
    Some(before.at_ms + ms as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxbow_metadata::TopicId;

    fn tp() -> TopicPartition {
        TopicPartition::new(TopicId(uuid::Uuid::from_u128(7)), 0)
    }

    #[test]
    fn caught_up_is_zero_and_behind_is_interpolated_between_samples() {
        let c = LagClock::default();
        // 100 records/s: high 0 at t=0 s, 500 at 5 s, 1000 at 10 s.
        for (t, h) in [(0, 0), (5_000, 500), (10_000, 1000)] {
            c.sample(t, [(tp(), h)]);
        }
        assert_eq!(c.lag_seconds(&tp(), 1000, 1000, 12_000), 0.0);
        // Offset 750 was appended at 7.5 s: 4.5 s ago at 12 s.
        assert!((c.lag_seconds(&tp(), 750, 1000, 12_000) - 4.5).abs() < 0.01);
        // Offset 0 was appended between 0 and 5 s (at 0, interpolated).
        assert!((c.lag_seconds(&tp(), 0, 1000, 12_000) - 12.0).abs() < 0.01);
    }

    #[test]
    fn a_stopped_consumer_lag_grows_with_time_and_an_idle_partition_keeps_its_times() {
        let c = LagClock::default();
        c.sample(0, [(tp(), 0)]);
        c.sample(5_000, [(tp(), 10)]);
        // Nothing produced for a minute: samples that move nothing are not added.
        for t in (10_000..70_000).step_by(5_000) {
            c.sample(t, [(tp(), 10)]);
        }
        assert_eq!(c.len(&tp()), 2);
        let at_70 = c.lag_seconds(&tp(), 5, 10, 70_000);
        let at_80 = c.lag_seconds(&tp(), 5, 10, 80_000);
        assert!(at_70 > 60.0 && (at_80 - at_70 - 10.0).abs() < 0.01);
    }

    #[test]
    fn samples_stay_bounded_and_old_lag_is_still_covered() {
        let c = LagClock::default();
        for i in 0..10_000u64 {
            c.sample(i * 5_000, [(tp(), i as i64 * 10)]);
        }
        assert!(c.len(&tp()) <= POINTS_MAX);
        let now = 10_000 * 5_000;
        // A consumer stuck at the very start: at least as old as the oldest sample kept.
        let stuck = c.lag_seconds(&tp(), 0, 100_000, now);
        assert!(stuck > 0.0);
        // A consumer 10 records behind the end: about one sample interval.
        let recent = c.lag_seconds(&tp(), 99_985, 100_000, now);
        assert!(recent <= 10.0, "{recent}");
    }

    #[test]
    fn partitions_no_longer_led_are_forgotten() {
        let c = LagClock::default();
        c.sample(0, [(tp(), 5)]);
        c.sample(5_000, std::iter::empty());
        assert_eq!(c.len(&tp()), 0);
        assert_eq!(c.lag_seconds(&tp(), 0, 5, 6_000), 0.0);
    }
}
