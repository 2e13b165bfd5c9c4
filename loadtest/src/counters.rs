//! Counters shared between load threads and the sampler: atomics for totals (read every
//! sampling interval for the timeline) and window totals (the reported figures).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::clock::Window;

/// Keeps the first few error messages and counts all.
#[derive(Debug, Default)]
pub struct ErrorLog {
    count: AtomicU64,
    first: Mutex<Vec<String>>,
}

/// Messages kept per run; the rest are only counted.
const ERRORS_KEPT: usize = 8;

impl ErrorLog {
    pub fn note(&self, message: impl Into<String>) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first.lock().expect("error log lock is never poisoned");
        if first.len() < ERRORS_KEPT {
            let message = message.into();
            if !first.contains(&message) {
                first.push(message);
            }
        }
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The kept messages, plus a count line when more were dropped.
    pub fn messages(&self) -> Vec<String> {
        let mut kept = self
            .first
            .lock()
            .expect("error log lock is never poisoned")
            .clone();
        let total = self.count();
        if total > kept.len() as u64 {
            kept.push(format!("({total} errors in total)"));
        }
        kept
    }
}

/// What producers have had acknowledged.
#[derive(Debug)]
pub struct ProduceCounters {
    pub window: Window,
    /// Every acknowledged value byte (timeline).
    pub bytes_total: AtomicU64,
    pub records_total: AtomicU64,
    /// Acknowledged inside the window (the throughput figure).
    pub window_bytes: AtomicU64,
    pub window_records: AtomicU64,
    /// Acknowledged records whose send time is inside the window: what tailing groups
    /// must read before the drain ends.
    pub sent_in_window_acked: AtomicU64,
    /// Longest ack latency (ns) since the sampler last took it: when in a run the tail
    /// happened, to line up with what the broker was doing then.
    pub ack_max_ns_since_sample: AtomicU64,
    /// Failed deliveries.
    pub failed: AtomicU64,
    pub errors: ErrorLog,
}

impl ProduceCounters {
    pub fn new(window: Window) -> Self {
        ProduceCounters {
            window,
            bytes_total: AtomicU64::new(0),
            records_total: AtomicU64::new(0),
            window_bytes: AtomicU64::new(0),
            window_records: AtomicU64::new(0),
            sent_in_window_acked: AtomicU64::new(0),
            ack_max_ns_since_sample: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            errors: ErrorLog::default(),
        }
    }

    /// `records` records of `bytes` value bytes sent at `sent_ns` were acknowledged at
    /// `now_ns`.
    pub fn acked(&self, records: u64, bytes: u64, sent_ns: u64, now_ns: u64) {
        self.bytes_total.fetch_add(bytes, Ordering::Relaxed);
        self.records_total.fetch_add(records, Ordering::Relaxed);
        if self.window.contains(now_ns) {
            self.window_bytes.fetch_add(bytes, Ordering::Relaxed);
            self.window_records.fetch_add(records, Ordering::Relaxed);
        }
        if self.window.contains(sent_ns) {
            self.sent_in_window_acked
                .fetch_add(records, Ordering::Relaxed);
        }
        // Most acks are not the longest: read before writing the shared line.
        let latency = now_ns.saturating_sub(sent_ns);
        if latency > self.ack_max_ns_since_sample.load(Ordering::Relaxed) {
            self.ack_max_ns_since_sample
                .fetch_max(latency, Ordering::Relaxed);
        }
    }

    /// The longest ack latency since the last call, in ms (0 if nothing was acked).
    pub fn take_ack_max_ms(&self) -> f64 {
        self.ack_max_ns_since_sample.swap(0, Ordering::Relaxed) as f64 / 1e6
    }

    pub fn failed(&self, records: u64, message: impl Into<String>) {
        self.failed.fetch_add(records, Ordering::Relaxed);
        self.errors.note(message);
    }
}

/// What one consumer group (or the set of catch-up readers) has read.
#[derive(Debug, Default)]
pub struct ConsumeCounters {
    pub bytes_total: AtomicU64,
    pub records_total: AtomicU64,
    /// Consumed inside the window.
    pub window_bytes: AtomicU64,
    pub window_records: AtomicU64,
    /// Records whose send time is inside the window.
    pub sent_in_window: AtomicU64,
}

impl ConsumeCounters {
    pub fn consumed(&self, bytes: u64, now_ns: u64, sent_ns: Option<u64>, window: Window) {
        self.bytes_total.fetch_add(bytes, Ordering::Relaxed);
        self.records_total.fetch_add(1, Ordering::Relaxed);
        if window.contains(now_ns) {
            self.window_bytes.fetch_add(bytes, Ordering::Relaxed);
            self.window_records.fetch_add(1, Ordering::Relaxed);
        }
        if sent_ns.is_some_and(|t| window.contains(t)) {
            self.sent_in_window.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_counts_only_inside() {
        let c = ProduceCounters::new(Window {
            start_ns: 100,
            end_ns: 200,
        });
        c.acked(1, 10, 50, 150); // sent before, acked inside
        c.acked(1, 10, 150, 250); // sent inside, acked after
        assert_eq!(c.bytes_total.load(Ordering::Relaxed), 20);
        assert_eq!(c.window_bytes.load(Ordering::Relaxed), 10);
        assert_eq!(c.sent_in_window_acked.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn the_longest_ack_is_taken_once_per_sample() {
        let c = ProduceCounters::new(Window {
            start_ns: 0,
            end_ns: u64::MAX,
        });
        assert_eq!(c.take_ack_max_ms(), 0.0);
        c.acked(1, 10, 1_000_000, 4_000_000); // 3 ms
        c.acked(1, 10, 2_000_000, 9_000_000); // 7 ms
        c.acked(1, 10, 8_000_000, 9_000_000); // 1 ms
        assert_eq!(c.take_ack_max_ms(), 7.0);
        assert_eq!(c.take_ack_max_ms(), 0.0, "the next interval starts empty");
        c.acked(1, 10, 9_000_000, 11_000_000);
        assert_eq!(c.take_ack_max_ms(), 2.0);
    }

    #[test]
    fn error_log_keeps_a_few_distinct_messages() {
        let log = ErrorLog::default();
        for i in 0..20 {
            log.note(format!("e{}", i % 10));
            log.note("same");
        }
        assert_eq!(log.count(), 40);
        assert_eq!(log.messages().len(), ERRORS_KEPT + 1);
        assert_eq!(log.messages()[ERRORS_KEPT], "(40 errors in total)");
    }
}
