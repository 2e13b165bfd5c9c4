//! Time and randomness as injected components: [`Clock`] and [`Rng`].
//!
//! Every core that needs "now", a timer or a random number takes them from here, so the
//! deterministic simulation (`segment-writer/tests/sim/`) can run a whole cluster on one
//! seeded, single-threaded runtime whose time only moves when every task is idle.
//!
//! Monotonic time is tokio's [`Instant`]: in production it is the OS clock; on a runtime
//! with paused time (tests, the simulation) it moves only by `tokio::time::advance` or
//! auto-advance, so the same code needs no second implementation. What differs between
//! [`SystemClock`] and [`SimClock`] is the wall clock (record timestamps, object names):
//! the simulation derives it from the paused monotonic clock plus a per-broker skew, so a
//! run is a function of its seed.
//!
//! Clippy's `disallowed-methods` (`clippy.toml`) keeps `SystemTime::now`, `Instant::now`,
//! `tokio::time::sleep` and `Uuid::new_v4` out of the simulated crates; the production
//! implementations below are the allowed uses.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A boxed timer future (the trait stays object-safe).
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Where a component reads the time and waits for it.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Monotonic now: deadlines, timeouts, lease expiry, backoff.
    fn now(&self) -> Instant;
    /// Milliseconds since the Unix epoch: record timestamps (`LogAppendTime`), the names of
    /// sealed objects. Not monotonic in production (NTP may step it).
    fn unix_ms(&self) -> i64;
    /// Completes at `deadline` (at once if it has passed).
    fn sleep_until(&self, deadline: Instant) -> Sleep;
    /// Completes after `duration`.
    fn sleep(&self, duration: Duration) -> Sleep {
        self.sleep_until(self.now() + duration)
    }
}

/// The production clock: the OS clocks through tokio.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

#[allow(clippy::disallowed_methods)] // the production clock is the one allowed reader
impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn unix_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Box::pin(tokio::time::sleep_until(deadline))
    }
}

/// A clock for tests and the simulation: tokio's (paused) monotonic clock, and a wall clock
/// that is a fixed origin plus the monotonic time elapsed since the clock was made, plus an
/// adjustable skew (a simulated broker whose clock is off).
#[derive(Debug)]
pub struct SimClock {
    origin: Instant,
    origin_unix_ms: i64,
    skew_ms: AtomicI64,
}

impl SimClock {
    /// A clock whose wall time reads `origin_unix_ms` now. Make it on the runtime whose
    /// time it follows (tokio's clock is per runtime).
    #[allow(clippy::disallowed_methods)] // reads tokio's clock, which the runtime may pause
    pub fn new(origin_unix_ms: i64) -> Arc<SimClock> {
        Arc::new(SimClock {
            origin: Instant::now(),
            origin_unix_ms,
            skew_ms: AtomicI64::new(0),
        })
    }

    /// Shifts this clock's wall time by `skew_ms` from the shared origin.
    pub fn set_skew_ms(&self, skew_ms: i64) {
        self.skew_ms.store(skew_ms, Ordering::Relaxed);
    }
}

#[allow(clippy::disallowed_methods)] // tokio's clock is paused and advanced by the runtime
impl Clock for SimClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn unix_ms(&self) -> i64 {
        let elapsed = Instant::now().saturating_duration_since(self.origin);
        self.origin_unix_ms + elapsed.as_millis() as i64 + self.skew_ms.load(Ordering::Relaxed)
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Box::pin(tokio::time::sleep_until(deadline))
    }
}

/// Where a component draws random numbers: jitter, incarnations, object-name suffixes,
/// topic ids.
pub trait Rng: Send + Sync + fmt::Debug + 'static {
    fn next_u64(&self) -> u64;

    /// A random (version 4) UUID.
    fn uuid(&self) -> uuid::Uuid {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.next_u64().to_le_bytes());
        bytes[8..].copy_from_slice(&self.next_u64().to_le_bytes());
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    }

    /// A uniform float in `[0, 1)`.
    fn unit_f64(&self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The production source: the OS's randomness (through `uuid`'s v4 generator).
#[derive(Clone, Copy, Debug, Default)]
pub struct OsRng;

#[allow(clippy::disallowed_methods)] // the production source is the one allowed caller
impl Rng for OsRng {
    fn next_u64(&self) -> u64 {
        uuid::Uuid::new_v4().as_u64_pair().0
    }

    fn uuid(&self) -> uuid::Uuid {
        uuid::Uuid::new_v4()
    }
}

/// A seeded source (SplitMix64): the same seed gives the same sequence, on every platform.
#[derive(Debug)]
pub struct SeededRng {
    state: Mutex<u64>,
}

impl SeededRng {
    pub fn new(seed: u64) -> Arc<SeededRng> {
        Arc::new(SeededRng {
            state: Mutex::new(seed),
        })
    }
}

impl Rng for SeededRng {
    fn next_u64(&self) -> u64 {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The production components, shared.
pub fn system() -> (Arc<dyn Clock>, Arc<dyn Rng>) {
    (Arc::new(SystemClock), Arc::new(OsRng))
}

#[cfg(test)]
mod tests {
    //! One conformance suite per trait, run against both implementations.
    use super::*;

    async fn clock_conformance(clock: &dyn Clock) {
        let t0 = clock.now();
        let w0 = clock.unix_ms();
        assert!(
            w0 > 1_600_000_000_000,
            "wall time is Unix milliseconds: {w0}"
        );
        clock.sleep(Duration::from_millis(20)).await;
        let t1 = clock.now();
        assert!(
            t1 >= t0 + Duration::from_millis(20),
            "sleep waits its duration"
        );
        assert!(
            clock.unix_ms() >= w0 + 20,
            "wall time moves with monotonic time"
        );
        // A deadline in the past completes at once.
        clock.sleep_until(t0).await;
        assert!(clock.now() >= t1);
    }

    fn rng_conformance(rng: &dyn Rng) {
        let a: Vec<u64> = (0..64).map(|_| rng.next_u64()).collect();
        let mut distinct = a.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), a.len(), "64 draws are distinct");
        let u = rng.uuid();
        assert_eq!(u.get_version_num(), 4, "uuids are version 4");
        assert_ne!(u, rng.uuid());
        for _ in 0..1000 {
            let f = rng.unit_f64();
            assert!((0.0..1.0).contains(&f), "{f}");
        }
    }

    #[tokio::test]
    async fn system_clock_conforms() {
        clock_conformance(&SystemClock).await;
    }

    #[tokio::test(start_paused = true)]
    async fn sim_clock_conforms_and_only_moves_with_the_runtime() {
        let clock = SimClock::new(1_700_000_000_000);
        clock_conformance(&*clock).await;
        let w = clock.unix_ms();
        // Paused time: nothing moves without the runtime advancing it.
        assert_eq!(clock.unix_ms(), w);
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(clock.unix_ms(), w + 3000);
        clock.set_skew_ms(-500);
        assert_eq!(clock.unix_ms(), w + 2500);
    }

    #[test]
    fn os_rng_conforms() {
        rng_conformance(&OsRng);
    }

    #[test]
    fn seeded_rng_conforms_and_repeats_its_seed() {
        rng_conformance(&*SeededRng::new(7));
        let a: Vec<u64> = {
            let r = SeededRng::new(42);
            (0..8).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let r = SeededRng::new(42);
            (0..8).map(|_| r.next_u64()).collect()
        };
        assert_eq!(a, b);
        assert_ne!(a[0], SeededRng::new(43).next_u64());
    }
}
