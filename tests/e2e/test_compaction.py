"""Compaction: many small sealed objects become per-partition segments. A Kafka client reads
every record back identical (by offset and by time) after compaction and after a restart
with a cold cache, and the object count drops. Run against the local object store and
against S3 (moto)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition

from cluster import BUCKET, s3_env
from cluster import MotoServer as Moto
from helpers import assert_dense, consume_partitions, consumer, create_topic, produce_all, producer, unique, wait_until

pytestmark = pytest.mark.oxbow_only

PARTITIONS = 3
WAVES = 20
PER_WAVE = 150
T0 = 1_700_000_000_000
S3_PREFIX = "compaction/oxbow"


class LocalObjects:
    """Objects in the broker's local object store (`{data-dir}/objects`)."""

    def __init__(self, broker):
        self.root = broker.data_dir / "objects"

    def count(self, kind: str) -> int:
        """`data` (sealed, multi-partition) or `segments` (compacted, one partition)."""
        d = self.root / kind
        return sum(1 for p in d.rglob("*") if p.is_file() and not p.name.startswith(".")) if d.exists() else 0


class S3Objects:
    def __init__(self, moto):
        self.moto = moto

    def count(self, kind: str) -> int:
        return len(self.moto.keys(f"{S3_PREFIX}/{kind}/"))


def as_tuples(records: dict) -> dict:
    return {p: [(r.offset, r.key, r.value, r.timestamp) for r in recs] for p, recs in records.items()}


def offsets_for_times(bootstrap: str, topic: str, ts: int) -> dict[int, int]:
    c = consumer(bootstrap)
    try:
        found = c.offsets_for_times([TopicPartition(topic, p, ts) for p in range(PARTITIONS)], timeout=10)
        assert all(tp.error is None for tp in found), found
        return {tp.partition: tp.offset for tp in found}
    finally:
        c.close()


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    """(extra broker args, broker env, a view of the objects) for each object store."""
    if request.param == "local":
        yield [], {}, LocalObjects
        return
    moto = Moto(tmp_path)
    try:
        yield ["--object-store", f"s3://{BUCKET}/{S3_PREFIX}"], s3_env(moto.port), lambda _broker: S3Objects(moto)
    finally:
        moto.close()


@pytest.mark.timeout(240)
def test_compaction_rewrites_small_objects_and_everything_reads_back(broker_factory, store):
    store_args, env, view = store
    # First without compaction: every wave is sealed into objects of its own.
    b = broker_factory(
        flush_interval="50ms",
        env=env,
        extra_args=store_args + ["--compaction-interval", "0s", "--partition-tail-bytes", "0"],
    )
    objects = view(b)
    # Record timestamps from 2023 (T0): kept whatever their age, this is about compaction.
    topic = create_topic(b.bootstrap, unique("compact"), PARTITIONS, config={"retention.ms": "-1"})
    p = producer(b.bootstrap)
    n = 0
    for _ in range(WAVES):
        records = []
        for _ in range(PER_WAVE):
            records.append(
                {
                    "key": f"k{n}".encode(),
                    "value": f"value-{n:06d}-".encode() * 4,
                    "partition": n % PARTITIONS,
                    "timestamp": T0 + n * 10,
                }
            )
            n += 1
        produce_all(p, topic, records)
        time.sleep(0.12)  # past the flush interval: the next wave goes to new objects
    del p  # its connection would only log refusals across the restarts below
    wait_until(lambda: objects.count("data") >= WAVES, timeout=10, what="every wave sealed")
    before = consume_partitions(b.bootstrap, topic, range(PARTITIONS))
    assert sum(len(v) for v in before.values()) == WAVES * PER_WAVE
    assert_dense(before)
    times_before = {ts: offsets_for_times(b.bootstrap, topic, ts) for ts in (T0, T0 + 15_000, T0 + 29_990)}
    data_before = objects.count("data")
    assert objects.count("segments") == 0

    # Then with compaction every second and a short delete delay.
    b.options["extra_args"] = store_args + [
        "--compaction-interval",
        "1s",
        "--compaction-delete-delay",
        "1s",
        "--partition-tail-bytes",
        "0",
    ]
    b.restart()
    wait_until(
        lambda: objects.count("data") == 0 and objects.count("segments") >= PARTITIONS,
        timeout=60,
        what="sealed objects compacted into segments and deleted",
    )
    segments = objects.count("segments")
    assert segments < data_before, (data_before, segments)
    assert segments <= 2 * PARTITIONS

    after = consume_partitions(b.bootstrap, topic, range(PARTITIONS))
    assert as_tuples(after) == as_tuples(before)
    for ts, want in times_before.items():
        assert offsets_for_times(b.bootstrap, topic, ts) == want, ts

    # A restart (cold cache, nothing in memory) reads the segments from the store.
    b.restart()
    again = consume_partitions(b.bootstrap, topic, range(PARTITIONS))
    assert as_tuples(again) == as_tuples(before)
    for ts, want in times_before.items():
        assert offsets_for_times(b.bootstrap, topic, ts) == want, ts
    # Producing continues at the next offset after compaction.
    reports = produce_all(producer(b.bootstrap), topic, [{"value": b"after", "partition": 0}])
    assert reports[0].offset == len(before[0])
