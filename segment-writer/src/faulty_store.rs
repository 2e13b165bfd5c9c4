//! [`FaultyObjectStore`]: an `object_store::ObjectStore` wrapper that injects what S3 does
//! on a bad day — latency, `503 SlowDown`, requests that time out, a PUT that lands but
//! whose answer is lost, and a whole outage — drawn from a seeded [`Rng`] so a simulation
//! run repeats from its seed.
//!
//! Used by the deterministic simulation (`segment-writer/tests/sim/`) over object_store's
//! in-memory store, and by tests that need a failing store. Faults apply to data calls (PUT,
//! GET, HEAD, DELETE, LIST); the counters say how often each kind was injected.

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use oxbow_metadata::clock::{Clock, Rng};
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What to inject; changed at any time with [`FaultyObjectStore::set_faults`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StoreFaults {
    /// Every call fails at once (the store is unreachable).
    pub down: bool,
    /// Chance that a call fails with `503 SlowDown` before reaching the store.
    pub error_rate: f64,
    /// Chance that a call hangs for `timeout` and then fails.
    pub timeout_rate: f64,
    pub timeout: Duration,
    /// Chance that a PUT is stored but reported as failed (the answer was lost).
    pub lost_put_ack_rate: f64,
    /// Each call first waits a uniform time up to this.
    pub latency_max: Duration,
}

/// How often each fault was injected.
#[derive(Debug, Default)]
pub struct StoreFaultCounts {
    pub outages: AtomicU64,
    pub errors: AtomicU64,
    pub timeouts: AtomicU64,
    pub lost_put_acks: AtomicU64,
    pub delayed: AtomicU64,
}

/// The wrapper; see the module docs.
pub struct FaultyObjectStore {
    inner: Arc<dyn ObjectStore>,
    faults: Mutex<StoreFaults>,
    clock: Arc<dyn Clock>,
    rng: Arc<dyn Rng>,
    pub counts: StoreFaultCounts,
}

impl fmt::Debug for FaultyObjectStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyObjectStore({})", self.inner)
    }
}

impl fmt::Display for FaultyObjectStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyObjectStore({})", self.inner)
    }
}

fn injected(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "faulty",
        source: what.to_owned().into(),
    }
}

/// What a call gets before it reaches the store.
enum Verdict {
    Pass,
    Fail(object_store::Error),
}

impl FaultyObjectStore {
    pub fn new(
        inner: Arc<dyn ObjectStore>,
        clock: Arc<dyn Clock>,
        rng: Arc<dyn Rng>,
    ) -> Arc<FaultyObjectStore> {
        Arc::new(FaultyObjectStore {
            inner,
            faults: Mutex::new(StoreFaults::default()),
            clock,
            rng,
            counts: StoreFaultCounts::default(),
        })
    }

    /// The store underneath, for writes that must not be faulted (a simulated zombie's
    /// object, put by the simulation itself).
    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    pub fn set_faults(&self, faults: StoreFaults) {
        *self.faults.lock().unwrap_or_else(|e| e.into_inner()) = faults;
    }

    pub fn faults(&self) -> StoreFaults {
        *self.faults.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn chance(&self, p: f64) -> bool {
        p > 0.0 && self.rng.unit_f64() < p
    }

    /// Latency, then an outage, an error or a timeout — or the call goes through.
    async fn before(&self) -> Verdict {
        let f = self.faults();
        if !f.latency_max.is_zero() {
            let wait = f.latency_max.mul_f64(self.rng.unit_f64());
            self.counts.delayed.fetch_add(1, Ordering::Relaxed);
            self.clock.sleep(wait).await;
        }
        if f.down {
            self.counts.outages.fetch_add(1, Ordering::Relaxed);
            return Verdict::Fail(injected("connection refused (store down)"));
        }
        if self.chance(f.error_rate) {
            self.counts.errors.fetch_add(1, Ordering::Relaxed);
            return Verdict::Fail(injected("503 SlowDown"));
        }
        if self.chance(f.timeout_rate) {
            self.counts.timeouts.fetch_add(1, Ordering::Relaxed);
            self.clock.sleep(f.timeout).await;
            return Verdict::Fail(injected("request timed out"));
        }
        Verdict::Pass
    }
}

#[async_trait]
impl ObjectStore for FaultyObjectStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        if let Verdict::Fail(e) = self.before().await {
            return Err(e);
        }
        let stored = self.inner.put_opts(location, payload, opts).await?;
        if self.chance(self.faults().lost_put_ack_rate) {
            self.counts.lost_put_acks.fetch_add(1, Ordering::Relaxed);
            return Err(injected("connection reset after the PUT was sent"));
        }
        Ok(stored)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        if let Verdict::Fail(e) = self.before().await {
            return Err(e);
        }
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        if let Verdict::Fail(e) = self.before().await {
            return Err(e);
        }
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        if let Verdict::Fail(e) = self.before().await {
            return Err(e);
        }
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        if self.faults().down {
            self.counts.outages.fetch_add(1, Ordering::Relaxed);
            return futures::stream::once(async { Err(injected("store down")) }).boxed();
        }
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        if self.faults().down {
            self.counts.outages.fetch_add(1, Ordering::Relaxed);
            return futures::stream::once(async { Err(injected("store down")) }).boxed();
        }
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        if self.faults().down {
            self.counts.outages.fetch_add(1, Ordering::Relaxed);
            return futures::stream::once(async { Err(injected("store down")) }).boxed();
        }
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        if let Verdict::Fail(e) = self.before().await {
            return Err(e);
        }
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        if let Verdict::Fail(e) = self.before().await {
            return Err(e);
        }
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        if let Verdict::Fail(e) = self.before().await {
            return Err(e);
        }
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutMode};
    use oxbow_metadata::clock::{SeededRng, SimClock};

    fn store(seed: u64) -> (Arc<FaultyObjectStore>, Arc<InMemory>) {
        let inner = Arc::new(InMemory::new());
        let s = FaultyObjectStore::new(
            inner.clone(),
            SimClock::new(1_700_000_000_000),
            SeededRng::new(seed),
        );
        (s, inner)
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn no_faults_is_the_inner_store() {
        let (s, _) = store(1);
        let p = Path::from("a");
        s.put(&p, PutPayload::from_static(b"x")).await.expect("put");
        let got = s.get(&p).await.expect("get").bytes().await.expect("bytes");
        assert_eq!(&got[..], b"x");
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn an_outage_fails_every_call_and_ends_when_lifted() {
        let (s, _) = store(2);
        s.set_faults(StoreFaults {
            down: true,
            ..StoreFaults::default()
        });
        assert!(s
            .put(&Path::from("a"), PutPayload::from_static(b"x"))
            .await
            .is_err());
        assert!(s.get(&Path::from("a")).await.is_err());
        assert_eq!(s.counts.outages.load(Ordering::Relaxed), 2);
        s.set_faults(StoreFaults::default());
        s.put(&Path::from("a"), PutPayload::from_static(b"x"))
            .await
            .expect("put after the outage");
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_lost_put_ack_stores_the_object_and_a_create_only_retry_finds_it() {
        let (s, inner) = store(3);
        s.set_faults(StoreFaults {
            lost_put_ack_rate: 1.0,
            ..StoreFaults::default()
        });
        let p = Path::from("obj");
        assert!(s.put(&p, PutPayload::from_static(b"v")).await.is_err());
        assert!(inner.head(&p).await.is_ok(), "it landed");
        s.set_faults(StoreFaults::default());
        let again = s
            .put_opts(&p, PutPayload::from_static(b"v"), PutMode::Create.into())
            .await;
        assert!(matches!(
            again,
            Err(object_store::Error::AlreadyExists { .. })
        ));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn errors_timeouts_and_latency_follow_the_rates_and_the_seed() {
        let run = |seed| async move {
            let (s, _) = store(seed);
            s.set_faults(StoreFaults {
                error_rate: 0.3,
                timeout_rate: 0.1,
                timeout: Duration::from_secs(5),
                latency_max: Duration::from_millis(20),
                ..StoreFaults::default()
            });
            let mut outcomes = Vec::new();
            for i in 0..200 {
                let r = s
                    .put(&Path::from(format!("k{i}")), PutPayload::from_static(b"x"))
                    .await;
                outcomes.push(r.is_ok());
            }
            let errors = s.counts.errors.load(Ordering::Relaxed);
            let timeouts = s.counts.timeouts.load(Ordering::Relaxed);
            (outcomes, errors, timeouts)
        };
        let (a, errors, timeouts) = run(7).await;
        assert!((40..=80).contains(&errors), "about 30% of 200: {errors}");
        assert!((5..=30).contains(&timeouts), "about 7% of 200: {timeouts}");
        let (b, _, _) = run(7).await;
        assert_eq!(a, b, "the same seed, the same faults");
        let (c, _, _) = run(8).await;
        assert_ne!(a, c);
    }
}
