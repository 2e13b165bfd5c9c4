"""librdkafka (confluent-kafka) against the broker: bulk keyed produce, codecs, headers,
timestamps, metadata and offset lookups."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError, TopicPartition

from helpers import (
    assert_dense,
    consume_partitions,
    consumer,
    create_topic,
    java_partition,
    produce_all,
    producer,
    unique,
)

N_RECORDS = 100_000
N_KEYS = 1000
N_PARTITIONS = 6


def value_for(key: int, seq: int) -> bytes:
    return f"key={key:04d};seq={seq:05d};".encode() + b"v" * 40


@pytest.mark.timeout(420)
def test_100k_keyed_records_round_trip(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("bulk"), N_PARTITIONS)
    p = producer(shared_broker.bootstrap, partitioner="murmur2_random", **{"queue.buffering.max.messages": 200_000})

    delivered: dict[tuple[int, int], tuple[int, int]] = {}  # (key, seq) -> (partition, offset)
    failures: list = []

    def on_delivery(err, msg):
        if err is not None:
            failures.append(err)
        else:
            k = int(msg.key()[4:])
            s = int(msg.value().split(b";")[1][4:])
            delivered[(k, s)] = (msg.partition(), msg.offset())

    t0 = time.monotonic()
    for i in range(N_RECORDS):
        k, s = i % N_KEYS, i // N_KEYS
        while True:
            try:
                p.produce(topic, key=f"key-{k:04d}".encode(), value=value_for(k, s), on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(240)
    produce_s = time.monotonic() - t0
    assert left == 0, f"{left} records undelivered"
    assert not failures, f"{len(failures)} delivery failures, first {failures[:3]}"
    assert len(delivered) == N_RECORDS
    print(f"produced {N_RECORDS} records in {produce_s:.1f}s ({N_RECORDS / produce_s:.0f}/s)")

    t0 = time.monotonic()
    records = consume_partitions(shared_broker.bootstrap, topic, range(N_PARTITIONS), timeout=240)
    print(f"consumed in {time.monotonic() - t0:.1f}s: {[len(v) for v in records.values()]}")

    assert sum(len(v) for v in records.values()) == N_RECORDS
    assert_dense(records)
    last_seq: dict[int, int] = defaultdict(lambda: -1)
    for part, recs in records.items():
        for r in recs:
            k = int(r.key[4:])
            s = int(r.value.split(b";")[1][4:])
            assert r.value == value_for(k, s), f"value corrupted at {part}/{r.offset}: {r.value!r}"
            assert s == last_seq[k] + 1, f"key {k}: seq {s} after {last_seq[k]} (per-key order broken)"
            last_seq[k] = s
            assert delivered[(k, s)] == (part, r.offset), "record not where its delivery report put it"
            assert part == java_partition(r.key, N_PARTITIONS), f"key {r.key!r} not on its murmur2 partition"
    assert all(last_seq[k] == N_RECORDS // N_KEYS - 1 for k in range(N_KEYS))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_codec_round_trip(shared_broker, codec):
    topic = create_topic(shared_broker.bootstrap, unique(f"codec-{codec}"), 1)
    p = producer(shared_broker.bootstrap, **{"compression.type": codec, "linger.ms": 50, "batch.num.messages": 500})
    # Compressible and incompressible values, several batches.
    values = [
        (f"record {i} " * (1 + i % 20)).encode() + bytes((i * 7 + j) % 256 for j in range(i % 50)) for i in range(2000)
    ]
    produce_all(p, topic, ({"key": str(i).encode(), "value": v} for i, v in enumerate(values)))
    got = consume_partitions(shared_broker.bootstrap, topic, [0])[0]
    assert [r.value for r in got] == values
    assert [r.key for r in got] == [str(i).encode() for i in range(len(values))]
    assert_dense({0: got})


def test_headers_and_timestamps_round_trip(shared_broker):
    # Timestamps from 2023: kept whatever their age (the default retention is 7 days).
    topic = create_topic(shared_broker.bootstrap, unique("headers"), 1, config={"retention.ms": "-1"})
    p = producer(shared_broker.bootstrap)
    base_ts = 1_700_000_000_000
    recs = [
        {
            "key": f"k{i}".encode(),
            "value": f"v{i}".encode(),
            "headers": [("trace-id", f"t{i}".encode()), ("empty", b""), ("null", None), ("dup", b"1"), ("dup", b"2")],
            "timestamp": base_ts + i * 1000,
        }
        for i in range(50)
    ]
    produce_all(p, topic, recs)
    got = consume_partitions(shared_broker.bootstrap, topic, [0])[0]
    assert len(got) == 50
    for i, r in enumerate(got):
        assert r.timestamp == (TIMESTAMP_CREATE_TIME, base_ts + i * 1000)
        assert r.headers == [
            ("trace-id", f"t{i}".encode()),
            ("empty", b""),
            ("null", None),
            ("dup", b"1"),
            ("dup", b"2"),
        ]


def test_list_topics_shows_partitions_and_broker(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("meta"), 3)
    md = producer(shared_broker.bootstrap).list_topics(timeout=10)
    assert len(md.brokers) == 1
    (b,) = md.brokers.values()
    assert (b.host, b.port) == ("127.0.0.1", shared_broker.kafka_port)
    t = md.topics[topic]
    assert t.error is None
    assert sorted(t.partitions) == [0, 1, 2]
    for pm in t.partitions.values():
        assert pm.leader == b.id
        assert pm.error is None


def test_offsets_for_times(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("times"), 1, config={"retention.ms": "-1"})
    t0 = 1_700_000_000_000
    produce_all(
        producer(shared_broker.bootstrap), topic, ({"value": b"x", "timestamp": t0 + i * 1000} for i in range(10))
    )
    c = consumer(shared_broker.bootstrap)
    try:

        def lookup(ts):
            (tp,) = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert tp.error is None, tp.error
            return tp.offset

        assert lookup(t0 - 5000) == 0
        assert lookup(t0) == 0
        assert lookup(t0 + 4500) == 5
        assert lookup(t0 + 9000) == 9
        assert lookup(t0 + 60_000) == -1  # later than every record: no offset (Kafka returns -1)
    finally:
        c.close()


def test_watermark_offsets(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("watermarks"), 2)
    produce_all(producer(shared_broker.bootstrap), topic, ({"value": b"x", "partition": 0} for _ in range(10)))
    c = consumer(shared_broker.bootstrap)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False) == (0, 10)
        assert c.get_watermark_offsets(TopicPartition(topic, 1), timeout=10, cached=False) == (0, 0)
    finally:
        c.close()


def test_consume_from_middle_offset(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("seek"), 1)
    produce_all(producer(shared_broker.bootstrap), topic, ({"value": str(i).encode()} for i in range(100)))
    c = consumer(shared_broker.bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, 42)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 58 and time.monotonic() < deadline:
            for m in c.consume(100, timeout=0.5):
                if m.error() is None:
                    got.append((m.offset(), m.value()))
                elif m.error().code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(m.error())
        assert got == [(i, str(i).encode()) for i in range(42, 100)]
    finally:
        c.close()


def test_non_idempotent_producer_round_trip(shared_broker):
    """librdkafka's own default (no idempotence, no InitProducerId): every record lands where
    its delivery report says."""
    topic = create_topic(shared_broker.bootstrap, unique("plain"), 3)
    p = producer(shared_broker.bootstrap, **{"enable.idempotence": False})
    reports = produce_all(p, topic, ({"key": b"%d" % (i % 17), "value": b"plain-%d" % i} for i in range(3000)))
    got = consume_partitions(shared_broker.bootstrap, topic, range(3))
    assert_dense(got)
    at = {(r.partition, r.offset): r.value for recs in got.values() for r in recs}
    assert len(at) == 3000
    assert all(at[(r.partition, r.offset)] == r.value for r in reports)
