//! [`MeteredObjectStore`]: an `object_store::ObjectStore` wrapper that times every request
//! to the object store by operation and outcome (`oxbow_object_store_request_seconds` on
//! `/metrics`): how many PUTs and GETs a broker sends (S3 bills per request), how long they
//! take, and which fail and how (throttled and timed-out calls are `other`; a create-only
//! PUT that lost its race is `already_exists`, a conditional one `precondition`).
//!
//! A GET is timed to its response headers: the body streams afterwards, and the reader
//! times what it does with it.

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use oxbow_metadata::clock::Clock;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

type Labels = [(&'static str, &'static str); 2];

/// Request latency by `op` and `outcome`. Cheap to clone (shared series).
#[derive(Clone)]
pub struct StoreMeter {
    family: Family<Labels, Histogram, fn() -> Histogram>,
}

impl Default for StoreMeter {
    fn default() -> Self {
        StoreMeter {
            family: Family::new_with_constructor(crate::latency::latency_histogram),
        }
    }
}

impl StoreMeter {
    fn observe<T>(&self, op: &'static str, result: &Result<T>, took: Duration) {
        let outcome = match result {
            Ok(_) => "ok",
            Err(e) => error_kind(e),
        };
        self.observe_outcome(op, outcome, took);
    }

    fn observe_outcome(&self, op: &'static str, outcome: &'static str, took: Duration) {
        self.family
            .get_or_create(&[("op", op), ("outcome", outcome)])
            .observe(took.as_secs_f64());
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "oxbow_object_store_request",
            "Requests to the object store by operation and outcome (ok, not_found, already_exists, precondition, not_modified, denied, other), and how long they took",
            Unit::Seconds,
            self.family.clone(),
        );
    }
}

/// A bounded name for an error (the label's values are this fixed set).
fn error_kind(e: &object_store::Error) -> &'static str {
    match e {
        object_store::Error::NotFound { .. } => "not_found",
        object_store::Error::AlreadyExists { .. } => "already_exists",
        object_store::Error::Precondition { .. } => "precondition",
        object_store::Error::NotModified { .. } => "not_modified",
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => "denied",
        _ => "other",
    }
}

/// The wrapper; see the module docs.
pub struct MeteredObjectStore {
    inner: Arc<dyn ObjectStore>,
    meter: StoreMeter,
    /// Times requests (the simulation's paused clock included).
    clock: Arc<dyn Clock>,
}

impl MeteredObjectStore {
    pub fn wrap(
        inner: Arc<dyn ObjectStore>,
        meter: StoreMeter,
        clock: Arc<dyn Clock>,
    ) -> Arc<dyn ObjectStore> {
        Arc::new(MeteredObjectStore {
            inner,
            meter,
            clock,
        })
    }

    async fn timed<T>(&self, op: &'static str, call: impl Future<Output = Result<T>>) -> Result<T> {
        let started = self.clock.now();
        let result = call.await;
        let took = self.clock.now().saturating_duration_since(started);
        self.meter.observe(op, &result, took);
        result
    }

    /// Times a stream from its start to its end or its first error; a stream dropped
    /// before either is not counted.
    fn timed_stream<T: Send + 'static>(
        &self,
        op: &'static str,
        stream: BoxStream<'static, Result<T>>,
    ) -> BoxStream<'static, Result<T>> {
        let clock = self.clock.clone();
        let started = clock.now();
        let mut pending = Some(self.meter.clone());
        stream
            .map(Some)
            .chain(futures::stream::once(async { None }))
            .filter_map(move |item| {
                let outcome = match &item {
                    Some(Ok(_)) => None,
                    Some(Err(e)) => Some(error_kind(e)),
                    None => Some("ok"),
                };
                if let (Some(outcome), Some(m)) = (outcome, pending.as_ref()) {
                    let took = clock.now().saturating_duration_since(started);
                    m.observe_outcome(op, outcome, took);
                    pending = None;
                }
                futures::future::ready(item)
            })
            .boxed()
    }
}

impl fmt::Debug for MeteredObjectStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MeteredObjectStore({})", self.inner)
    }
}

impl fmt::Display for MeteredObjectStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.inner)
    }
}

#[async_trait]
impl ObjectStore for MeteredObjectStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.timed("put", self.inner.put_opts(location, payload, opts))
            .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.timed(
            "create_multipart",
            self.inner.put_multipart_opts(location, opts),
        )
        .await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let op = if options.head { "head" } else { "get" };
        self.timed(op, self.inner.get_opts(location, options)).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.timed("get_ranges", self.inner.get_ranges(location, ranges))
            .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.timed_stream("delete", self.inner.delete_stream(locations))
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.timed_stream("list", self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.timed_stream("list", self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.timed("list", self.inner.list_with_delimiter(prefix))
            .await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.timed("copy", self.inner.copy_opts(from, to, options))
            .await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.timed("rename", self.inner.rename_opts(from, to, options))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutMode};
    use prometheus_client::encoding::text::encode_registry;

    fn count(out: &str, op: &str, outcome: &str) -> u64 {
        let prefix = format!(
            "oxbow_object_store_request_seconds_count{{op=\"{op}\",outcome=\"{outcome}\"}} "
        );
        out.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    #[tokio::test]
    async fn requests_are_counted_by_operation_and_outcome() {
        let meter = StoreMeter::default();
        let clock: Arc<dyn Clock> = Arc::new(oxbow_metadata::clock::SystemClock);
        let store = MeteredObjectStore::wrap(Arc::new(InMemory::new()), meter.clone(), clock);
        let key = Path::from("a/1");
        store
            .put(&key, Bytes::from_static(b"x").into())
            .await
            .expect("put");
        let create = PutOptions::from(PutMode::Create);
        let lost = store
            .put_opts(&key, Bytes::from_static(b"y").into(), create)
            .await;
        assert!(matches!(
            lost,
            Err(object_store::Error::AlreadyExists { .. })
        ));
        store.get(&key).await.expect("get");
        assert!(store.get(&Path::from("a/missing")).await.is_err());
        store.head(&key).await.expect("head");
        let listed: Vec<_> = store.list(Some(&Path::from("a"))).collect().await;
        assert_eq!(listed.len(), 1);

        let mut registry = Registry::default();
        meter.register(&mut registry);
        let mut out = String::new();
        encode_registry(&mut out, &registry).expect("encode");
        assert_eq!(count(&out, "put", "ok"), 1, "{out}");
        assert_eq!(count(&out, "put", "already_exists"), 1, "{out}");
        assert_eq!(count(&out, "get", "ok"), 1, "{out}");
        assert_eq!(count(&out, "get", "not_found"), 1, "{out}");
        assert_eq!(count(&out, "head", "ok"), 1, "{out}");
        assert_eq!(count(&out, "list", "ok"), 1, "{out}");
        assert_eq!(count(&out, "delete", "ok"), 0, "{out}");
    }
}
