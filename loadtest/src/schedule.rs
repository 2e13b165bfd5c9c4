//! Open-loop send schedule: send `i` is due at `start + i / rate`, whatever happened before.
//!
//! Latency is measured from that intended time, not from when the send actually went out,
//! so a stall (the broker, the client queue, our own thread) shows up in the latency of
//! every send it delayed instead of silently lowering the offered load ("coordinated
//! omission"). The schedule is pure arithmetic on a nanosecond clock so it is testable;
//! the lanes that follow it live in `kafka.rs` and `http.rs`.

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpenLoop {
    start_ns: u64,
    interval_ns: f64,
}

impl OpenLoop {
    /// `per_second` sends per second starting at `start_ns`.
    pub fn new(start_ns: u64, per_second: f64) -> Self {
        OpenLoop {
            start_ns,
            interval_ns: 1e9 / per_second.max(1e-9),
        }
    }

    /// Lane `lane` of `lanes` sharing `total_per_second`: every lane sends at
    /// `total / lanes`, offset so that together they send evenly spaced.
    pub fn lane(start_ns: u64, total_per_second: f64, lanes: u32, lane: u32) -> Self {
        let lanes = lanes.max(1);
        let offset = 1e9 / total_per_second.max(1e-9) * f64::from(lane);
        OpenLoop::new(
            start_ns + offset as u64,
            total_per_second / f64::from(lanes),
        )
    }

    /// When send `i` is due.
    pub fn intended_ns(&self, i: u64) -> u64 {
        self.start_ns + (i as f64 * self.interval_ns) as u64
    }

    /// How many sends are due at `now_ns` (sends `0..due` should have gone out).
    pub fn due(&self, now_ns: u64) -> u64 {
        if now_ns < self.start_ns {
            return 0;
        }
        ((now_ns - self.start_ns) as f64 / self.interval_ns).floor() as u64 + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_are_due_on_schedule() {
        let s = OpenLoop::new(1_000, 1000.0); // every 1 ms from t = 1 µs
        assert_eq!(s.due(0), 0);
        assert_eq!(s.due(1_000), 1);
        assert_eq!(s.due(1_000 + 999_999), 1);
        assert_eq!(s.due(1_000 + 1_000_000), 2);
        assert_eq!(s.intended_ns(3), 3_001_000);
    }

    #[test]
    fn intended_time_does_not_move_when_sending_falls_behind() {
        let s = OpenLoop::new(0, 100.0);
        // A 1 s stall: 101 sends are due, each keeps its own intended time.
        assert_eq!(s.due(1_000_000_000), 101);
        assert_eq!(s.intended_ns(50), 500_000_000);
    }

    #[test]
    fn lanes_interleave_to_the_total_rate() {
        let lanes: Vec<OpenLoop> = (0..4).map(|l| OpenLoop::lane(0, 4000.0, 4, l)).collect();
        let mut times: Vec<u64> = lanes
            .iter()
            .flat_map(|l| (0..10).map(|i| l.intended_ns(i)))
            .collect();
        times.sort_unstable();
        for (k, t) in times.iter().enumerate() {
            let expect = k as u64 * 250_000;
            assert!(
                t.abs_diff(expect) <= 1,
                "send {k} at {t}, expected {expect}"
            );
        }
        let due: u64 = lanes.iter().map(|l| l.due(1_000_000_000 - 1)).sum();
        assert_eq!(due, 4000);
    }
}
