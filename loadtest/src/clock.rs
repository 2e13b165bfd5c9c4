//! One monotonic nanosecond clock for the whole process.
//!
//! Send times in record values and every window bound are nanoseconds since the same
//! anchor, so a consumer thread can subtract a producer thread's timestamp directly.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

static ANCHOR: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds since the first call in this process.
pub fn now_ns() -> u64 {
    let anchor = ANCHOR.get_or_init(Instant::now);
    u64::try_from(anchor.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// `Duration` as nanoseconds, saturating.
pub fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Half-open interval `[start_ns, end_ns)` on [`now_ns`]'s clock: what counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Window {
    pub fn contains(&self, t_ns: u64) -> bool {
        (self.start_ns..self.end_ns).contains(&t_ns)
    }

    /// Length in seconds.
    pub fn seconds(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 / 1e9
    }

    /// Everything from now on: used where every event counts (prefill, probe).
    pub fn unbounded() -> Self {
        Window {
            start_ns: 0,
            end_ns: u64::MAX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_monotonic_and_windows_are_half_open() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a);
        let w = Window {
            start_ns: 10,
            end_ns: 20,
        };
        assert!(w.contains(10) && w.contains(19) && !w.contains(20) && !w.contains(9));
        assert_eq!(w.seconds(), 1e-8);
        assert_eq!(ns(Duration::from_millis(3)), 3_000_000);
    }
}
