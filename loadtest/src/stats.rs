//! Latency histograms (HdrHistogram, microseconds) and their summaries, CDFs and medians.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency a histogram tracks: 10 minutes, in microseconds. Slower values clamp.
const LATENCY_US_MAX: u64 = 600_000_000;

/// 1 µs .. 10 min with 3 significant digits (0.1% error).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("constant bounds are valid")
}

/// Records a latency in nanoseconds (rounded up to a whole microsecond).
pub fn record_ns(h: &mut Histogram<u64>, ns: u64) {
    h.saturating_record(ns.div_ceil(1000).max(1));
}

/// Percentiles of one latency distribution, in milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// `None` for an empty histogram: no latency is not zero latency.
pub fn summarize(h: &Histogram<u64>) -> Option<LatencySummary> {
    if h.is_empty() {
        return None;
    }
    let ms = |us: u64| us as f64 / 1000.0;
    Some(LatencySummary {
        count: h.len(),
        mean_ms: h.mean() / 1000.0,
        p50_ms: ms(h.value_at_quantile(0.50)),
        p90_ms: ms(h.value_at_quantile(0.90)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        p999_ms: ms(h.value_at_quantile(0.999)),
        max_ms: ms(h.max()),
    })
}

/// One point of a latency CDF: the fraction of values at or below `ms`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CdfPoint {
    pub quantile: f64,
    pub ms: f64,
}

/// The CDF at quantiles spaced evenly in "nines" (0, 0.2, …, 0.9, …, 0.99999) plus the max,
/// stopping where the histogram has too few values for a finer quantile to mean anything.
pub fn cdf(h: &Histogram<u64>) -> Vec<CdfPoint> {
    if h.is_empty() {
        return Vec::new();
    }
    let count = h.len() as f64;
    let mut points = Vec::new();
    for step in 0..=50u32 {
        let q = 1.0 - 10f64.powf(-f64::from(step) / 10.0);
        if (1.0 - q) * count < 1.0 {
            break;
        }
        points.push(CdfPoint {
            quantile: q,
            ms: h.value_at_quantile(q) as f64 / 1000.0,
        });
    }
    points.push(CdfPoint {
        quantile: 1.0,
        ms: h.max() as f64 / 1000.0,
    });
    points
}

/// Median of the finite values; `None` if there are none.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// Bytes per second in MiB/s.
pub fn mib_per_s(bytes: u64, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return 0.0;
    }
    bytes as f64 / (1024.0 * 1024.0) / seconds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_values() {
        let mut h = new_histogram();
        for ms in 1..=1000u64 {
            record_ns(&mut h, ms * 1_000_000);
        }
        let s = summarize(&h).expect("not empty");
        assert_eq!(s.count, 1000);
        assert!((s.p50_ms - 500.0).abs() < 1.0, "{}", s.p50_ms);
        assert!((s.p99_ms - 990.0).abs() < 1.0, "{}", s.p99_ms);
        assert!((s.p999_ms - 999.0).abs() < 1.0, "{}", s.p999_ms);
        assert!((s.max_ms - 1000.0).abs() < 1.0, "{}", s.max_ms);
        assert!((s.mean_ms - 500.5).abs() < 1.0, "{}", s.mean_ms);
        assert!(summarize(&new_histogram()).is_none());
    }

    #[test]
    fn tiny_latencies_round_up_and_huge_ones_clamp() {
        let mut h = new_histogram();
        record_ns(&mut h, 1);
        record_ns(&mut h, u64::MAX / 2);
        assert_eq!(h.min(), 1);
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn cdf_is_monotonic_and_ends_at_the_max() {
        let mut h = new_histogram();
        for us in 1..=100_000u64 {
            record_ns(&mut h, us * 1000);
        }
        let points = cdf(&h);
        assert!(points.windows(2).all(|w| w[0].quantile < w[1].quantile));
        assert!(points.windows(2).all(|w| w[0].ms <= w[1].ms));
        let last = points.last().expect("points");
        assert_eq!(last.quantile, 1.0);
        assert!((last.ms - 100.0).abs() < 0.1);
        // 100k values support five nines; 1000 values only three.
        assert!(points
            .iter()
            .any(|p| p.quantile > 0.9999 && p.quantile < 1.0));
        let mut small = new_histogram();
        for us in 1..=1000u64 {
            record_ns(&mut small, us * 1000);
        }
        let finest = cdf(&small)
            .iter()
            .filter(|p| p.quantile < 1.0)
            .map(|p| p.quantile)
            .fold(0.0, f64::max);
        assert!(finest > 0.998 && finest < 0.9991, "{finest}");
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
    }

    #[test]
    fn rates() {
        assert_eq!(mib_per_s(2 * 1024 * 1024, 2.0), 1.0);
        assert_eq!(mib_per_s(5, 0.0), 0.0);
    }
}
