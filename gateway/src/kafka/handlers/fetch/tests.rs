//! A Fetch's partitions are read side by side and answered in request order within the
//! response's size limit (issue 17).

use super::*;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::TopicName;
use oxbow_metadata::TopicSpec;
use oxbow_segment_writer::{batch::testing::make_batch, Acks, AppendPolicy};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tokio::sync::Notify;

/// With `hold`, holds the first GET until another GET has completed (or, failing that,
/// until the paused clock has nothing else to run: then `gave_up`).
#[derive(Debug, Default)]
struct HoldFirst {
    hold: bool,
    started: AtomicUsize,
    other_done: Notify,
    gave_up: AtomicBool,
}

#[derive(Debug)]
struct Hooked {
    inner: Arc<dyn object_store::ObjectStore>,
    hold: Arc<HoldFirst>,
}

impl std::fmt::Display for Hooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hooked({})", self.inner)
    }
}

#[async_trait::async_trait]
impl object_store::ObjectStore for Hooked {
    async fn put_opts(
        &self,
        location: &object_store::path::Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &object_store::path::Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &object_store::path::Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        let first = self.hold.started.fetch_add(1, Ordering::SeqCst) == 0;
        if first && self.hold.hold {
            // Virtual time: this passes only once nothing else can run, i.e. when no other
            // read goes on while this one is held.
            let other = self.hold.other_done.notified();
            if tokio::time::timeout(Duration::from_secs(600), other)
                .await
                .is_err()
            {
                self.hold.gave_up.store(true, Ordering::SeqCst);
            }
        }
        let r = self.inner.get_opts(location, options).await;
        if !first {
            self.hold.other_done.notify_one();
        }
        r
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<
            'static,
            object_store::Result<object_store::path::Path>,
        >,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &object_store::path::Path,
        to: &object_store::path::Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// A broker whose topic `t` has `partitions` partitions, each holding one sealed batch of
/// 10 records that only the object store has (no memory tail, no read cache), every GET
/// through `hold`.
async fn broker_with_sealed(
    dir: &std::path::Path,
    hold: Arc<HoldFirst>,
    partitions: i32,
) -> Arc<Broker> {
    let inner = oxbow_segment_writer::objects::local(&dir.join("objects")).expect("store");
    let objects = Arc::new(Hooked { inner, hold });
    let broker =
        crate::broker::testing::temp_broker_with(dir, Default::default(), objects, 0, 0).await;
    let topic = broker
        .create_topic(TopicSpec {
            name: "t".into(),
            partitions,
            replication_factor: 1,
            configs: Default::default(),
        })
        .await
        .expect("topic");
    for p in 0..partitions {
        let part = broker.partition(&topic, p).await.expect("partition");
        broker
            .log
            .append(
                &part,
                &make_batch(10, 1_000),
                &AppendPolicy::of(&topic.configs),
                Acks::All,
            )
            .await
            .expect("append");
    }
    broker.log.seal_once().await.expect("seal");
    broker
}

/// Fetch v12 of `t`'s partitions 0 and 1 from offset 0, `max_bytes` for the response.
async fn fetch_both(broker: &Arc<Broker>, max_bytes: i32) -> Vec<PartitionData> {
    fetch_first(broker, 2, max_bytes).await
}

/// Fetch v12 of `t`'s first `n` partitions from offset 0, `max_bytes` for the response.
async fn fetch_first(broker: &Arc<Broker>, n: i32, max_bytes: i32) -> Vec<PartitionData> {
    let partitions = (0..n)
        .map(|p| {
            FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)
        })
        .collect();
    let req = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(
                kafka_protocol::protocol::StrBytes::from_static_str("t"),
            ))
            .with_partitions(partitions)]);
    let session = Session::plaintext("127.0.0.1:5000".parse().expect("address"));
    let Reply::Later(f) = handle(broker, &session, req, 12) else {
        panic!("a fetch answers later")
    };
    let ResponseKind::Fetch(r) = f.await else {
        panic!("a fetch response")
    };
    assert_eq!(r.responses.len(), 1);
    r.responses[0].partitions.clone()
}

fn records_len(d: &PartitionData) -> usize {
    d.records.as_ref().map_or(0, Bytes::len)
}

/// A partition whose range must come from the object store does not hold up the other
/// partitions of the same Fetch: with the first GET held, the other partition's read (its
/// own GET) runs and completes; the response then carries both, in request order. Read one
/// after another (the code before), the second read never started while the first was
/// held.
#[tokio::test]
async fn a_held_read_does_not_hold_up_the_other_partitions() {
    let dir = tempfile::tempdir().expect("tmp");
    let hold = Arc::new(HoldFirst {
        hold: true,
        ..HoldFirst::default()
    });
    let broker = broker_with_sealed(dir.path(), hold.clone(), 2).await;
    // From here the clock only moves when nothing can run (the hook's give-up).
    tokio::time::pause();
    let parts = fetch_both(&broker, 50 << 20).await;
    assert!(
        !hold.gave_up.load(Ordering::SeqCst),
        "the other partition's read waited for the held one"
    );
    assert_eq!(
        hold.started.load(Ordering::SeqCst),
        2,
        "one GET per partition"
    );
    assert_eq!(
        parts.iter().map(|d| d.partition_index).collect::<Vec<_>>(),
        vec![0, 1]
    );
    for d in &parts {
        assert_eq!((d.error_code, d.high_watermark), (0, 10));
        assert!(
            records_len(d) > 0,
            "partition {} has its batch",
            d.partition_index
        );
    }
}

/// The response's `max_bytes` still applies across the partitions in request order, as
/// Kafka applies it: the first partition with data gets its batch even past the limit
/// (KIP-74), the next gets nothing (and its high watermark), though both were read at once.
#[tokio::test]
async fn max_bytes_applies_in_request_order() {
    let dir = tempfile::tempdir().expect("tmp");
    let broker = broker_with_sealed(dir.path(), Arc::default(), 2).await;
    let one = make_batch(10, 1_000).len();
    let parts = fetch_both(&broker, 1).await;
    assert_eq!(
        records_len(&parts[0]),
        one,
        "the first batch, past the limit"
    );
    assert_eq!(records_len(&parts[1]), 0, "no room left for the second");
    assert_eq!((parts[1].error_code, parts[1].high_watermark), (0, 10));
    // Room for exactly one batch and a byte: the same.
    let parts = fetch_both(&broker, i32::try_from(one + 1).expect("small")).await;
    assert_eq!((records_len(&parts[0]), records_len(&parts[1])), (one, 0));
    // Room for both.
    let parts = fetch_both(&broker, i32::try_from(2 * one).expect("small")).await;
    assert_eq!((records_len(&parts[0]), records_len(&parts[1])), (one, one));
}

/// Reading side by side does not read every partition whole when the response is already
/// full: of twelve cold partitions fetched with room for one batch, only the reads that
/// started before the first answer was fitted go to the object store (at most
/// `READS_IN_FLIGHT_MAX`); the rest start knowing there is no room and read nothing. Each
/// read asking for its partition's full share whatever the others took did one GET per
/// partition (12).
#[tokio::test]
async fn a_full_response_stops_further_object_reads() {
    let dir = tempfile::tempdir().expect("tmp");
    let hold = Arc::new(HoldFirst::default());
    let broker = broker_with_sealed(dir.path(), hold.clone(), 12).await;
    let parts = fetch_first(&broker, 12, 1).await;
    assert_eq!(parts.len(), 12);
    assert!(
        records_len(&parts[0]) > 0,
        "the first batch, past the limit"
    );
    for d in &parts[1..] {
        assert_eq!(
            records_len(d),
            0,
            "partition {}: no room",
            d.partition_index
        );
        assert_eq!((d.error_code, d.high_watermark), (0, 10));
    }
    let gets = hold.started.load(Ordering::SeqCst);
    assert!(
        gets <= READS_IN_FLIGHT_MAX,
        "{gets} object reads for a response with room for one batch"
    );
}
