"""The log start offset: DeleteRecords (librdkafka's AdminClient, Kafka's own
kafka-delete-records tool, `oxbow topics delete-records`) and retention by time and size on a
live topic. Records below the new log start are gone, nothing above it changes, ListOffsets
earliest follows, and a consumer parked below the start gets what its `auto.offset.reset`
asks for. The DeleteRecords tests run against Apache Kafka too (OXBOW_E2E_TARGET=kafka)."""

from __future__ import annotations

import json
import shutil
import struct
import time
import urllib.request

import pytest
from confluent_kafka import OFFSET_END, KafkaError, KafkaException, TopicPartition

from brokers import KAFKA_LIBS, oxbow_bin
from kafka_wire import KafkaConn, Reader, string
from helpers import (
    admin,
    consume_partitions,
    consumer,
    create_topic,
    produce_all,
    producer,
    run,
    settled,
    unique,
    wait_until,
)

PER_PARTITION = 100


def fill(bootstrap: str, topic: str, partitions: int, per_partition: int = PER_PARTITION, **record) -> None:
    p = producer(bootstrap)
    produce_all(
        p,
        topic,
        [
            {"value": f"v{p_}-{i}".encode(), "partition": p_, **record}
            for p_ in range(partitions)
            for i in range(per_partition)
        ],
    )


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    c = consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    finally:
        c.close()


def delete_records(bootstrap: str, offsets: list[TopicPartition]) -> dict[int, object]:
    """Partition → low watermark, or the KafkaError the broker answered."""
    # The client must outlive its futures: dropped, it never completes them.
    client = admin(bootstrap)
    futures = client.delete_records(offsets, request_timeout=30, operation_timeout=20)
    out = {}
    for tp, f in futures.items():
        try:
            out[tp.partition] = f.result(timeout=60).low_watermark
        except KafkaException as e:
            out[tp.partition] = e.args[0]
    return out


def delete_records_v0(bootstrap: str, topic: str, partition: int, offset: int) -> tuple[int, int]:
    """(low watermark, error code) of a DeleteRecords v0 sent as is (clients check topic
    names before sending)."""
    body = struct.pack(">i", 1) + string(topic) + struct.pack(">iiq", 1, partition, offset) + struct.pack(">i", 5000)
    with KafkaConn(bootstrap) as c:
        r = Reader(c.call(21, 0, body))
    r.int32()  # throttle
    assert r.int32() == 1
    assert r.string() == topic
    assert r.int32() == 1
    assert r.int32() == partition
    low = r.int64()
    return low, r.int16()


def first_offset_read(bootstrap: str, topic: str, partition: int, start: int, reset: str) -> int | None:
    """Assign at `start` with `auto.offset.reset=reset`; the offset of the first record read,
    or None when the consumer reached the end first."""
    c = consumer(bootstrap, **{"auto.offset.reset": reset})
    try:
        c.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return None
                raise KafkaException(m.error())
            return m.offset()
        raise AssertionError("nothing read within 20 s")
    finally:
        c.close()


def test_delete_records_moves_the_log_start_and_consumers_reset(shared_broker):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("delrec"), 3)
    fill(b, topic, 3)
    got = delete_records(
        b,
        [TopicPartition(topic, 0, 40), TopicPartition(topic, 1, OFFSET_END), TopicPartition(topic, 2, 0)],
    )
    assert got == {0: 40, 1: PER_PARTITION, 2: 0}, got
    assert watermarks(b, topic, 0) == (40, PER_PARTITION)
    assert watermarks(b, topic, 1) == (PER_PARTITION, PER_PARTITION)
    # Nothing below the start is served; everything above it is unchanged.
    read = consume_partitions(b, topic, [0, 2])
    assert [r.offset for r in read[0]] == list(range(40, PER_PARTITION))
    assert [r.value for r in read[0]] == [f"v0-{i}".encode() for i in range(40, PER_PARTITION)]
    assert len(read[2]) == PER_PARTITION
    # A consumer parked below the start resets as it asks.
    assert first_offset_read(b, topic, 0, 10, "earliest") == 40
    assert first_offset_read(b, topic, 0, 10, "latest") is None
    # Deleting less than is already deleted changes nothing; the answer is the start.
    assert delete_records(b, [TopicPartition(topic, 0, 20)]) == {0: 40}
    # Producing goes on at the end.
    fill(b, topic, 1, per_partition=5)
    assert watermarks(b, topic, 0) == (40, PER_PARTITION + 5)


def test_delete_records_bad_offsets_and_unknown_topics(shared_broker):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("delrec-bad"), 1)
    fill(b, topic, 1, per_partition=10)
    beyond = delete_records(b, [TopicPartition(topic, 0, 11)])[0]
    assert isinstance(beyond, KafkaError) and beyond.code() == KafkaError.OFFSET_OUT_OF_RANGE, beyond
    negative = delete_records(b, [TopicPartition(topic, 0, -5)])[0]
    assert isinstance(negative, KafkaError) and negative.code() == KafkaError.OFFSET_OUT_OF_RANGE, negative
    assert watermarks(b, topic, 0) == (0, 10), "a refused delete changes nothing"
    # UNKNOWN_TOPIC_OR_PARTITION (3), for a topic and for a partition that do not exist.
    assert delete_records_v0(b, unique("no-such-topic"), 0, 1) == (-1, 3)
    assert delete_records_v0(b, topic, 7, 1) == (-1, 3)
    assert delete_records_v0(b, topic, 0, 4) == (4, 0)


def test_delete_records_refused_on_a_compacted_topic(shared_broker):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("delrec-compact"), 1, config={"cleanup.policy": "compact"})
    p = producer(b)
    produce_all(p, topic, [{"key": f"k{i}".encode(), "value": b"v", "partition": 0} for i in range(5)])
    got = delete_records(b, [TopicPartition(topic, 0, 2)])[0]
    assert isinstance(got, KafkaError) and got.code() == KafkaError.POLICY_VIOLATION, got


def test_kafka_delete_records_tool(shared_broker, tmp_path):
    if shutil.which("java") is None or not any(KAFKA_LIBS.glob("kafka-tools-*.jar")):
        pytest.fail("java or the Kafka tool jars are missing: run `scripts/test.sh setup`")
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("delrec-java"), 2)
    fill(b, topic, 2, per_partition=30)
    spec = tmp_path / "offsets.json"
    spec.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": topic, "partition": 0, "offset": 12},
                    {"topic": topic, "partition": 1, "offset": -1},
                ],
            }
        )
    )
    out = run(
        [
            "java",
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{KAFKA_LIBS}/*",
            "org.apache.kafka.tools.DeleteRecordsCommand",
            "--bootstrap-server",
            b,
            "--offset-json-file",
            str(spec),
        ],
        timeout=120,
    ).stdout
    assert f"partition: {topic}-0\tlow_watermark: 12" in out, out
    assert f"partition: {topic}-1\tlow_watermark: 30" in out, out
    assert watermarks(b, topic, 0) == (12, 30)


@pytest.mark.oxbow_only
def test_oxbow_topics_delete_records(shared_broker):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("delrec-cli"), 2)
    fill(b, topic, 2, per_partition=20)
    out = run(
        [str(oxbow_bin()), "topics", "delete-records", topic, "--offset", "7", "--bootstrap", b], timeout=60
    ).stdout
    assert f"partition: {topic}-0\tlow_watermark: 7" in out, out
    assert f"partition: {topic}-1\tlow_watermark: 7" in out, out
    assert watermarks(b, topic, 1) == (7, 20)
    bad = run(
        [str(oxbow_bin()), "topics", "delete-records", topic, "--offset", "500", "--bootstrap", b],
        timeout=60,
        check=False,
    )
    assert bad.returncode != 0
    assert "offset" in (bad.stdout + bad.stderr).lower(), bad.stderr
    missing = run([str(oxbow_bin()), "topics", "delete-records", topic, "--bootstrap", b], timeout=30, check=False)
    assert missing.returncode != 0 and "--offset" in missing.stderr, missing.stderr


@pytest.mark.oxbow_only
@pytest.mark.timeout(120)
def test_retention_by_time_and_size_on_a_live_topic(broker_factory):
    # Compaction rounds (which apply retention) every second, objects deleted a second after.
    b = broker_factory(
        flush_interval="50ms",
        extra_args=["--compaction-interval", "1s", "--compaction-delete-delay", "1s"],
    )
    bootstrap = b.bootstrap
    now_ms = int(time.time() * 1000)
    # By time: records stamped two hours ago in a topic that keeps one hour.
    timed = create_topic(bootstrap, unique("ret-time"), 1, config={"retention.ms": "3600000"})
    fill(bootstrap, timed, 1, per_partition=50, timestamp=now_ms - 7_200_000)
    time.sleep(0.2)  # sealed in objects of their own
    fill(bootstrap, timed, 1, per_partition=50, timestamp=now_ms)
    wait_until(lambda: watermarks(bootstrap, timed, 0)[0] == 50, timeout=30, what="the old records expired")
    read = consume_partitions(bootstrap, timed, [0])[0]
    assert [r.offset for r in read] == list(range(50, 100))
    assert first_offset_read(bootstrap, timed, 0, 0, "earliest") == 50

    # By size: keep at least ~2 KiB of a partition; older objects leave from the front.
    sized = create_topic(bootstrap, unique("ret-size"), 1, config={"retention.bytes": "2048"})
    for _ in range(6):
        fill(bootstrap, sized, 1, per_partition=20, value=b"x" * 100)
        time.sleep(0.15)
    wait_until(lambda: watermarks(bootstrap, sized, 0)[0] > 0, timeout=30, what="the oldest data left by size")
    # A round cuts only what was sealed before it (CI saw 60 -> 80 -> 100 a round apart,
    # the last fills sealed between rounds): read once the start has held for three rounds.
    low = settled(lambda: watermarks(bootstrap, sized, 0)[0], hold=3.5, timeout=30, what="the log start by size")
    high = watermarks(bootstrap, sized, 0)[1]
    assert high == 120
    kept = consume_partitions(bootstrap, sized, [0])[0]
    assert [r.offset for r in kept] == list(range(low, high)), "everything above the start is there"
    # Kafka keeps whole segments while what stays is at least retention.bytes; the size
    # counted is the stored batches', so bound it from below by the values plus the least
    # a record (7 bytes) and a batch header (61 bytes) take.
    stored_at_least = sum(len(r.value) + 7 for r in kept) + 61
    assert stored_at_least >= 2048, ("at least retention.bytes is kept", len(kept))
    # The objects of what left are deleted once nothing references them.
    objects = b.data_dir / "objects"

    def stored_bytes() -> int:
        return sum(p.stat().st_size for p in objects.rglob("*") if p.is_file())

    wait_until(lambda: stored_bytes() < 6 * 20 * 100 + 20_000, timeout=30, what="expired objects deleted")

    # /metrics: what left, and what each partition still holds.
    def metric(name: str, labels: str = "") -> float | None:
        text = urllib.request.urlopen(f"{b.http}/metrics", timeout=10).read().decode()
        for line in text.splitlines():
            if line.startswith(name) and labels in line:
                return float(line.rsplit(" ", 1)[1])
        return None

    assert (metric("oxbow_retention_entries_expired_total") or 0) > 0
    wait_until(
        lambda: (metric("oxbow_partition_stored_bytes", f'topic="{sized}"') or 0) >= 2048,
        timeout=15,
        what="the stored bytes of the sized topic on /metrics",
    )


@pytest.mark.oxbow_only
def test_a_deleted_topics_objects_go_within_the_delete_delay_and_nothing_else(broker_factory):
    """A deleted topic's sealed objects are deleted once the catalogue retires them and the
    delete delay has passed (as Kafka deletes a topic's segments after file.delete.delay.ms),
    not after the orphan sweep's hour of grace: compaction and the orphan sweep are off, so
    nothing else deletes. Objects holding another topic's data stay and are read back."""
    quiet = ["--compaction-interval", "0s", "--orphan-sweep-interval", "0s", "--compaction-delete-delay", "2s"]
    b = broker_factory(flush_interval="50ms", extra_args=quiet)
    bootstrap = b.bootstrap
    objects = b.data_dir / "objects"

    def sealed() -> set[str]:
        return {str(p.relative_to(objects)) for p in objects.rglob("*.oxb") if p.is_file()}

    gone = create_topic(bootstrap, unique("gone"), 2)
    kept = create_topic(bootstrap, unique("kept"), 2)
    for _ in range(3):
        fill(bootstrap, gone, 2, per_partition=50, value=b"g" * 200)
        time.sleep(0.3)  # sealed into objects of their own
    wait_until(lambda: len(sealed()) >= 3, timeout=30, what="the first topic's data sealed")
    gone_only = sealed()
    fill(bootstrap, kept, 2, per_partition=50, value=b"k" * 200)
    wait_until(lambda: sealed() - gone_only, timeout=30, what="the second topic's data sealed")
    a = admin(bootstrap)
    for f in a.delete_topics([gone], operation_timeout=30).values():
        f.result(timeout=60)
    deleted_at = time.monotonic()
    wait_until(lambda: not (gone_only & sealed()), timeout=30,
               what=f"the deleted topic's objects deleted: {sorted(gone_only & sealed())[:3]}")  # fmt: skip
    print(f"\n{len(gone_only)} objects of the deleted topic gone {time.monotonic() - deleted_at:.1f} s after")
    assert sealed(), "the other topic's objects stay"
    read = consume_partitions(bootstrap, kept, [0, 1])
    assert {p: len(v) for p, v in read.items()} == {0: 50, 1: 50}
    assert all(r.value == b"k" * 200 for v in read.values() for r in v)


@pytest.mark.oxbow_only
@pytest.mark.timeout(240)
def test_kill9_during_retention_compaction_and_topic_deletion_loses_nothing_and_leaks_nothing(broker_factory):
    """kill -9 while retention and compaction delete, and right after a topic deletion: what
    is above the log start survives, nothing below it comes back, and once every topic is
    deleted the orphan sweep leaves no object behind."""
    busy = ["--compaction-interval", "1s", "--compaction-delete-delay", "1s", "--orphan-sweep-interval", "0s"]
    b = broker_factory(flush_interval="50ms", extra_args=busy)
    bootstrap = b.bootstrap
    retained = create_topic(bootstrap, unique("k9-ret"), 2, config={"retention.bytes": "4096"})
    dropped = create_topic(bootstrap, unique("k9-drop"), 2)
    for wave in range(8):
        for topic in (retained, dropped):
            fill(bootstrap, topic, 2, per_partition=15, value=b"y" * 120)
        time.sleep(0.1)
        if wave == 5:
            # Mid-stream: retention and compaction are running every second.
            time.sleep(1.2)
            b.kill9()
            b.start()
    wait_until(lambda: watermarks(bootstrap, retained, 0)[0] > 0, timeout=30, what="retention moved the log start")
    starts = {p: watermarks(bootstrap, retained, p)[0] for p in range(2)}
    time.sleep(1.5)  # a round deleting what left
    b.kill9()
    b.start()
    for p in range(2):
        low, high = watermarks(bootstrap, retained, p)
        assert low >= starts[p], f"p{p}: the log start went back from {starts[p]} to {low}"
        assert high == 8 * 15
        got = consume_partitions(bootstrap, retained, [p])[p]
        assert [r.offset for r in got] == list(range(low, high)), f"p{p}: a record above the start is missing"
        assert all(r.value == b"y" * 120 for r in got)
    dropped_all = consume_partitions(bootstrap, dropped, [0, 1])
    assert all(len(v) == 8 * 15 for v in dropped_all.values()), "the topic without retention keeps everything"

    # Delete both topics, kill -9 at once, and sweep with a short grace (compaction off, so
    # no swap is in flight): nothing is left in the object store.
    a = admin(bootstrap)
    for f in a.delete_topics([retained, dropped], operation_timeout=30).values():
        f.result(timeout=60)
    b.kill9()
    b.options["extra_args"] = [
        "--compaction-interval",
        "0s",
        "--orphan-sweep-interval",
        "1s",
        "--orphan-grace",
        "2s",
    ]
    b.start()
    objects = b.data_dir / "objects"

    def left() -> list[str]:
        return sorted(
            str(p.relative_to(objects))
            for p in objects.rglob("*")
            if p.is_file() and p.suffix in (".oxb", ".oxs")
        )

    wait_until(lambda: not left(), timeout=60, what=f"every object of the deleted topics swept: {left()[:5]}")
