//! Tests of the client and CLI against a real Kafka-compatible broker.
//!
//! Ignored by default because they need a running broker (Apache Kafka or Oxbow). Run:
//! `OXBOW_LIVE_BOOTSTRAP=127.0.0.1:9092 cargo test -p oxbow-gateway --lib -- --ignored live_`.
//! Each test works on its own uniquely named topic and deletes it at the end.

use std::time::Duration;

use bytes::Bytes;

use super::consume::{consume_into, ConsumeArgs, StartOffset};
use super::produce::{produce_from, ProduceArgs};
use super::topics::{self, CreateArgs, DescribeArgs, TopicsArgs, TopicsCommand};
use super::ConnectArgs;
use crate::client::{
    partition_for_key, Acks, Client, ClientError, Compression, ProduceOptions, ProduceRecord,
    ResponseError, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP,
};

const IGNORE_REASON: &str = "needs a broker: set OXBOW_LIVE_BOOTSTRAP";

fn connect_args() -> ConnectArgs {
    ConnectArgs {
        bootstrap: std::env::var("OXBOW_LIVE_BOOTSTRAP").expect(IGNORE_REASON),
        timeout: Duration::from_secs(10),
        auth: Default::default(),
    }
}

fn unique_topic(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// Creates a topic and waits until every partition has a leader.
async fn create_ready(client: &mut Client, topic: &str, partitions: i32) {
    client
        .create_topic(topic, partitions, 1, &[])
        .await
        .expect("create topic");
    for _ in 0..50 {
        client.invalidate_topic(topic);
        if let Ok(meta) = client.topic_metadata(topic).await {
            if meta.partitions.len() == partitions as usize {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("topic {topic} never became ready");
}

fn produce_args(topic: &str, key_separator: Option<&str>, batch_size: u32) -> ProduceArgs {
    ProduceArgs {
        connect: connect_args(),
        topic: topic.to_string(),
        partition: None,
        key_separator: key_separator.map(str::to_string),
        acks: Acks::All,
        batch_size,
        compression: Compression::None,
    }
}

fn consume_args(topic: &str, partition: Option<i32>, start: Option<StartOffset>) -> ConsumeArgs {
    ConsumeArgs {
        connect: connect_args(),
        topic: topic.to_string(),
        partition,
        from_beginning: start.is_none(),
        offset: start,
        max_messages: None,
        timeout_idle: Some(Duration::from_secs(2)),
        print_key: true,
        print_offset: false,
        print_partition: false,
        key_separator: ":".to_string(),
    }
}

#[tokio::test]
#[ignore = "needs a broker: set OXBOW_LIVE_BOOTSTRAP"]
async fn live_topic_admin_round_trip() {
    let topic = unique_topic("oxbow-live-admin");
    let connect = connect_args();
    topics::run(TopicsArgs {
        connect: connect.clone(),
        command: TopicsCommand::Create(CreateArgs {
            name: topic.clone(),
            partitions: Some(3),
            replication_factor: Some(1),
            configs: vec![("retention.ms".to_string(), "123456".to_string())],
        }),
    })
    .await
    .expect("create");
    let mut client = connect.connect().await.expect("connect");
    let err = client
        .create_topic(&topic, 3, 1, &[])
        .await
        .expect_err("already exists");
    assert_eq!(
        err.kafka_error(),
        Some(ResponseError::TopicAlreadyExists),
        "{err}"
    );
    assert!(err.to_string().contains("TOPIC_ALREADY_EXISTS"), "{err}");

    let cluster = client.metadata(None).await.expect("metadata");
    assert!(cluster.topics.iter().any(|t| t.name == topic));
    let meta = client.topic_metadata(&topic).await.expect("topic metadata");
    assert_eq!(meta.partitions.len(), 3);
    assert!(!meta.topic_id.is_nil());
    let configs = client.describe_configs(&topic).await.expect("configs");
    let retention = configs
        .iter()
        .find(|c| c.name == "retention.ms")
        .expect("retention.ms listed");
    assert_eq!(retention.value.as_deref(), Some("123456"));
    assert!(!retention.is_default());
    topics::run(TopicsArgs {
        connect: connect.clone(),
        command: TopicsCommand::Describe(DescribeArgs {
            name: Some(topic.clone()),
            exclude_internal: false,
        }),
    })
    .await
    .expect("describe prints");

    client.delete_topic(&topic).await.expect("delete");
    let err = client.delete_topic(&topic).await.expect_err("gone");
    assert!(matches!(err, ClientError::UnknownTopic(_)), "{err}");
    let err = client
        .describe_configs("oxbow-live-never-created")
        .await
        .expect_err("unknown");
    assert!(matches!(err, ClientError::UnknownTopic(_)), "{err}");
}

#[tokio::test]
#[ignore = "needs a broker: set OXBOW_LIVE_BOOTSTRAP"]
async fn live_keyed_produce_lands_on_murmur2_partitions() {
    let topic = unique_topic("oxbow-live-keys");
    let mut client = connect_args().connect().await.expect("connect");
    create_ready(&mut client, &topic, 3).await;

    let input: String = (0..30)
        .map(|i| format!("key{}:value{i}\n", i % 7))
        .collect();
    produce_from(
        &mut client,
        &produce_args(&topic, Some(":"), 4),
        input.as_bytes(),
    )
    .await
    .expect("produce");

    let mut total = 0;
    for partition in 0..3 {
        let mut out = Vec::new();
        let args = consume_args(&topic, Some(partition), None);
        let printed = consume_into(&mut client, &args, &mut out)
            .await
            .expect("consume");
        total += printed;
        let text = String::from_utf8(out).expect("utf8");
        let mut last_seen: std::collections::HashMap<String, usize> = Default::default();
        for line in text.lines() {
            let (key, value) = line.split_once(':').expect("key:value");
            assert_eq!(partition_for_key(key.as_bytes(), 3), partition, "{line}");
            // Per-key order is preserved.
            let n: usize = value.trim_start_matches("value").parse().expect("n");
            if let Some(prev) = last_seen.insert(key.to_string(), n) {
                assert!(prev < n, "{key}: {prev} then {n}");
            }
        }
    }
    assert_eq!(total, 30);

    // --max-messages across all partitions.
    let mut out = Vec::new();
    let args = ConsumeArgs {
        max_messages: Some(5),
        timeout_idle: None,
        ..consume_args(&topic, None, None)
    };
    assert_eq!(
        consume_into(&mut client, &args, &mut out)
            .await
            .expect("consume"),
        5
    );
    client.delete_topic(&topic).await.expect("delete");
}

#[tokio::test]
#[ignore = "needs a broker: set OXBOW_LIVE_BOOTSTRAP"]
async fn live_produce_fetch_offsets_and_codecs() {
    let topic = unique_topic("oxbow-live-data");
    let mut client = connect_args().connect().await.expect("connect");
    create_ready(&mut client, &topic, 1).await;

    let mut expected = Vec::new();
    let mut next = 0i64;
    for compression in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let records: Vec<ProduceRecord> = (0..10)
            .map(|i| ProduceRecord {
                key: Some(Bytes::from(format!("{compression:?}-{i}"))),
                value: Some(Bytes::from(format!("payload {i} {}", "x".repeat(100)))),
                headers: vec![("h".to_string(), Some(Bytes::from_static(b"1")))],
                timestamp_ms: None,
            })
            .collect();
        let options = ProduceOptions {
            acks: Acks::Leader,
            compression,
        };
        let base = client
            .produce(&topic, 0, &records, options)
            .await
            .expect("produce");
        assert_eq!(base, Some(next), "{compression:?}");
        next += 10;
        expected.extend(records);
    }
    // acks=0: no response; the record still arrives.
    let none = ProduceOptions {
        acks: Acks::None,
        compression: Compression::None,
    };
    let fire_and_forget = ProduceRecord::new(None, "acks0");
    assert_eq!(
        client
            .produce(&topic, 0, std::slice::from_ref(&fire_and_forget), none)
            .await
            .expect("produce acks=0"),
        None
    );
    expected.push(fire_and_forget);

    assert_eq!(
        client
            .list_offsets(&topic, 0, EARLIEST_TIMESTAMP)
            .await
            .expect("earliest"),
        0
    );
    // The acks=0 record may still be in flight; wait for it to count.
    let mut latest = 0;
    for _ in 0..50 {
        latest = client
            .list_offsets(&topic, 0, LATEST_TIMESTAMP)
            .await
            .expect("latest");
        if latest == 51 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(latest, 51);

    // Fetch from the middle of a batch, in small pieces, until the high watermark.
    let mut offset = 15;
    let mut got = Vec::new();
    while offset < latest {
        let fetched = client
            .fetch(&topic, 0, offset, Duration::from_millis(200), 300)
            .await
            .expect("fetch");
        assert_eq!(fetched.high_watermark, 51);
        assert!(fetched.next_offset > offset, "progress");
        got.extend(fetched.records);
        offset = fetched.next_offset;
    }
    assert_eq!(got.len(), 36);
    for (i, record) in got.iter().enumerate() {
        let want = &expected[15 + i];
        assert_eq!(record.offset, 15 + i as i64);
        assert_eq!(record.key, want.key);
        assert_eq!(record.value, want.value);
        assert_eq!(record.headers, want.headers);
    }

    // Past the end: OFFSET_OUT_OF_RANGE, readable.
    let err = client
        .fetch(&topic, 0, 1000, Duration::ZERO, 1024)
        .await
        .expect_err("out of range");
    assert_eq!(
        err.kafka_error(),
        Some(ResponseError::OffsetOutOfRange),
        "{err}"
    );

    // Consume from an explicit offset prints from there.
    let mut out = Vec::new();
    let args = ConsumeArgs {
        print_key: false,
        print_offset: true,
        max_messages: Some(2),
        ..consume_args(&topic, Some(0), Some(StartOffset::At(49)))
    };
    consume_into(&mut client, &args, &mut out)
        .await
        .expect("consume");
    let text = String::from_utf8(out).expect("utf8");
    assert!(text.starts_with("Offset:49:payload 9"), "{text}");
    assert!(text.ends_with("Offset:50:acks0\n"), "{text}");

    client.delete_topic(&topic).await.expect("delete");
}

#[tokio::test]
#[ignore = "needs a broker: set OXBOW_LIVE_BOOTSTRAP"]
async fn live_errors_are_readable() {
    let mut client = connect_args().connect().await.expect("connect");
    let err = client
        .topic_metadata("oxbow-live-no-such-topic")
        .await
        .expect_err("unknown");
    assert_eq!(
        err.to_string(),
        "unknown topic \"oxbow-live-no-such-topic\": it does not exist on this cluster"
    );
    let mut out = Vec::new();
    let err = consume_into(
        &mut client,
        &consume_args("oxbow-live-no-such-topic", None, None),
        &mut out,
    )
    .await
    .expect_err("unknown");
    assert!(err.to_string().contains("unknown topic"), "{err}");

    let topic = unique_topic("oxbow-live-errors");
    create_ready(&mut client, &topic, 2).await;
    let err = produce_from(
        &mut client,
        &produce_args(&topic, Some("|"), 10),
        &b"a|1\nb|2\nno separator\n"[..],
    )
    .await
    .expect_err("line 3 has no separator");
    assert_eq!(
        err.to_string(),
        "line 3: no key separator \"|\" found (expected key|value)"
    );
    let err = client
        .produce(
            &topic,
            7,
            &[ProduceRecord::new(None, "x")],
            ProduceOptions::default(),
        )
        .await
        .expect_err("no partition 7");
    assert!(matches!(err, ClientError::UnknownPartition { .. }), "{err}");
    client.delete_topic(&topic).await.expect("delete");
}

#[tokio::test]
#[ignore = "needs a broker: set OXBOW_LIVE_BOOTSTRAP"]
async fn live_routes_to_partition_leaders() {
    // With more than one broker, partitions of a new topic spread over them; requests for
    // each partition must reach its leader even though only one broker was bootstrapped.
    let topic = unique_topic("oxbow-live-routing");
    let mut client = connect_args().connect().await.expect("connect");
    let brokers = client
        .metadata(Some(Vec::new()))
        .await
        .expect("metadata")
        .brokers
        .len();
    create_ready(&mut client, &topic, 6).await;
    let meta = client.topic_metadata(&topic).await.expect("metadata");
    let leaders: std::collections::BTreeSet<i32> =
        meta.partitions.iter().filter_map(|p| p.leader).collect();
    if brokers > 1 {
        assert!(
            leaders.len() > 1,
            "6 partitions over {brokers} brokers: {leaders:?}"
        );
    }
    for partition in 0..6 {
        let record = ProduceRecord::new(None, format!("p{partition}"));
        let base = client
            .produce(&topic, partition, &[record], ProduceOptions::default())
            .await
            .expect("produce");
        assert_eq!(base, Some(0));
    }
    for partition in 0..6 {
        let fetched = client
            .fetch(&topic, partition, 0, Duration::from_millis(100), 1024)
            .await
            .expect("fetch");
        assert_eq!(fetched.records.len(), 1);
        assert_eq!(
            fetched.records[0].value.as_deref(),
            Some(format!("p{partition}").as_bytes())
        );
    }
    let mut out = Vec::new();
    let printed = consume_into(&mut client, &consume_args(&topic, None, None), &mut out)
        .await
        .expect("consume all partitions");
    assert_eq!(printed, 6);
    client.delete_topic(&topic).await.expect("delete");
}

#[tokio::test]
#[ignore = "needs a broker: set OXBOW_LIVE_BOOTSTRAP"]
async fn live_negotiates_highest_common_versions() {
    use crate::client::connection::Connection;
    use kafka_protocol::messages::{ApiKey, FetchRequest, MetadataRequest, ProduceRequest};
    use kafka_protocol::protocol::Message;

    let bootstrap = connect_args().bootstrap;
    let addr = bootstrap.split(',').next().expect("one address");
    let conn = Connection::open(addr, Duration::from_secs(10), "oxbow-live")
        .await
        .expect("handshake");
    for (api, client_max, picked) in [
        (
            ApiKey::Produce,
            ProduceRequest::VERSIONS.max,
            conn.pick_version::<ProduceRequest>(None),
        ),
        (
            ApiKey::Fetch,
            FetchRequest::VERSIONS.max,
            conn.pick_version::<FetchRequest>(None),
        ),
        (
            ApiKey::Metadata,
            MetadataRequest::VERSIONS.max,
            conn.pick_version::<MetadataRequest>(None),
        ),
    ] {
        let broker = conn.versions().broker_range(api).expect("broker offers it");
        let picked = picked.expect("common version");
        println!("{api:?}: broker {broker}, client max {client_max}, picked v{picked}");
        assert_eq!(picked, broker.max.min(client_max));
    }
}

#[tokio::test]
#[ignore = "needs a broker: set OXBOW_LIVE_BOOTSTRAP"]
async fn live_older_versions_by_topic_name_work() {
    // Oxbow may advertise lower versions than Kafka; the name-based Produce (< v13) and
    // Fetch (< v13) paths must work as well as the topic-id ones.
    use crate::client::connection::Connection;
    use crate::client::records::{decode_fetched, encode_batch};
    use crate::client::requests;

    let topic = unique_topic("oxbow-live-oldver");
    let mut client = connect_args().connect().await.expect("connect");
    create_ready(&mut client, &topic, 1).await;
    let leader = client
        .topic_metadata(&topic)
        .await
        .expect("metadata")
        .partitions[0]
        .leader
        .expect("leader");
    let cluster = client.metadata(Some(Vec::new())).await.expect("metadata");
    let addr = cluster
        .brokers
        .iter()
        .find(|b| b.node_id == leader)
        .expect("leader listed")
        .addr();
    let mut conn = Connection::open(&addr, Duration::from_secs(10), "oxbow-live")
        .await
        .expect("connect to leader");
    let timeout = Duration::from_secs(5);
    for (version, offset) in [3, 7, 9, 11].into_iter().zip(0i64..) {
        let batch = encode_batch(
            &[ProduceRecord::new(None, format!("v{version}"))],
            Compression::None,
            0,
        )
        .expect("encode");
        let request = requests::produce(version, &topic, uuid::Uuid::nil(), 0, batch, -1, timeout);
        let response = conn
            .send(version, &request, timeout)
            .await
            .expect("produce");
        let part = &response.responses[0].partition_responses[0];
        assert_eq!(
            (part.error_code, part.base_offset),
            (0, offset),
            "Produce v{version}"
        );
    }
    for version in [4, 7, 11, 12] {
        let request = requests::fetch(
            version,
            &topic,
            uuid::Uuid::nil(),
            &[(0, 0)],
            Duration::from_millis(100),
            1 << 20,
        );
        let response = conn
            .send(version, &request, Duration::from_millis(100))
            .await
            .expect("fetch");
        let part = &response.responses[0].partitions[0];
        assert_eq!(part.error_code, 0, "Fetch v{version}");
        let decoded = decode_fetched(part.records.clone().unwrap_or_default(), 0).expect("decode");
        assert_eq!(decoded.records.len(), 4, "Fetch v{version}");
        assert_eq!(decoded.next_offset, 4);
    }
    client.delete_topic(&topic).await.expect("delete");
}
