"""Log compaction (`cleanup.policy=compact`) as a Kafka consumer sees it, with confluent-kafka:
keys written many times (some as tombstones) by a producer that goes on while the log is
compacted; a consumer reading from 0 meanwhile never sees a key's older value after a newer
one, and once compacted it reads exactly the latest record per key at the offset it was
written at (tombstones younger than `delete.retention.ms` included).

Runs against Apache Kafka too (OXBOW_E2E_TARGET=kafka) and asserts only what both must do:
Kafka's cleaner runs when it likes (segments roll by `segment.ms` only when a record
arrives, the active segment is never cleaned), so "compacted" is waited for, with a timeout.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from brokers import TARGET
from helpers import consumer, create_topic, produce_all, producer, unique, wait_until

KEYS = 40
ROUNDS = 8
COMPACT_TIMEOUT_S = 120

# Kafka: a segment rolls on the first record after `segment.ms`, the cleaner looks every
# `log.cleaner.backoff.ms` and cleans once 1% is dirty. Oxbow: compaction every second.
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.01",
    "segment.ms": "100",
    "delete.retention.ms": "3600000",
    "min.compaction.lag.ms": "0",
}
KAFKA_PROPS = {"log.cleaner.backoff.ms": 100, "log.retention.check.interval.ms": 100}
OXBOW_ARGS = ["--compaction-interval", "1s", "--compaction-delete-delay", "1s"]


def value_of(key: int, round_: int) -> bytes | None:
    """Round `round_`'s value of `key`: some rounds delete a key (a tombstone), later rounds
    may write it again."""
    return None if (key + round_) % 9 == 0 else f"{key}:{round_}".encode()


def read_from_start(bootstrap: str, topic: str, timeout: float = 60) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record from offset 0 up to the high watermark."""
    return [(o, k, v) for o, k, v, _ in read_with_timestamps(bootstrap, topic, timeout)]


def read_with_timestamps(
    bootstrap: str, topic: str, timeout: float = 60
) -> list[tuple[int, bytes, bytes | None, int]]:
    """(offset, key, value, timestamp) of every record from offset 0 up to the high watermark."""
    c = consumer(bootstrap)
    try:
        high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
        out: list[tuple[int, bytes, bytes | None, int]] = []
        if high == 0:
            return out
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in c.consume(num_messages=5000, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        # Compaction may have removed the records just below the end.
                        if m.offset() >= high:
                            return out
                        continue
                    raise KafkaException(err)
                out.append((m.offset(), m.key(), m.value(), m.timestamp()[1]))
                if m.offset() + 1 >= high:
                    return out
        raise AssertionError(f"timed out reading {topic} up to {high}: got {len(out)} records")
    finally:
        c.close()


def check_order(records: list[tuple[int, bytes, bytes | None]]) -> None:
    """Offsets increase, and no key's value is older than one seen before it."""
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets)), "offsets increase strictly"
    newest: dict[bytes, int] = {}
    for offset, key, value in records:
        if value is None:
            continue
        round_ = int(value.split(b":")[1])
        seen = newest.get(key, -1)
        assert round_ > seen, f"key {key!r}: round {round_} at offset {offset} after round {seen}"
        newest[key] = round_


def test_compaction_keeps_the_latest_value_per_key_at_its_offset(broker_factory):
    b = broker_factory(kafka_props=KAFKA_PROPS, extra_args=OXBOW_ARGS)
    topic = unique("changelog")
    create_topic(b.bootstrap, topic, partitions=1, config=TOPIC_CONFIG)

    written: list[tuple[int, bytes, bytes | None]] = []
    errors: list[BaseException] = []

    def produce_rounds() -> None:
        try:
            p = producer(b.bootstrap)
            for round_ in range(ROUNDS):
                records = [
                    {"key": f"key-{k}".encode(), "value": value_of(k, round_), "partition": 0} for k in range(KEYS)
                ]
                for rec, report in zip(records, produce_all(p, topic, records)):
                    written.append((report.offset, rec["key"], rec["value"]))
                # Past segment.ms: Kafka rolls a segment at the next round's first record.
                time.sleep(0.3)
            # Records of keys of their own, so that the last round leaves Kafka's active
            # segment (never cleaned) and Oxbow's unsealed tail.
            for i in range(3):
                [report] = produce_all(p, topic, [{"key": f"filler-{i}".encode(), "value": b"f:0", "partition": 0}])
                written.append((report.offset, f"filler-{i}".encode(), b"f:0"))
                time.sleep(0.3)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    writer = threading.Thread(target=produce_rounds, name="producer")
    writer.start()
    # A consumer reading from 0 while the producer writes and the log is compacted.
    passes = 0
    while writer.is_alive():
        check_order(read_from_start(b.bootstrap, topic))
        passes += 1
    writer.join()
    assert not errors, errors
    assert passes > 0

    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, key, value in written:
        latest[key] = (offset, value)
    want = sorted((offset, key, value) for key, (offset, value) in latest.items())
    assert any(v is None for _, _, v in want), "some key's latest is a tombstone"

    last: list = []

    def compacted() -> bool:
        got = read_from_start(b.bootstrap, topic)
        check_order(got)
        last[:] = got
        return got == want

    try:
        wait_until(compacted, timeout=COMPACT_TIMEOUT_S, interval=1.0, what="compaction to the latest value per key")
    except AssertionError:
        extra = len(last) - len(want)
        raise AssertionError(
            f"{TARGET}: after {COMPACT_TIMEOUT_S}s {len(last)} records, {len(want)} latest per key "
            f"({extra} not compacted away); first differences: "
            f"{[(g, w) for g, w in zip(last, want) if g != w][:3]}"
        ) from None


def test_a_tombstone_outlives_its_first_cleaning_by_delete_retention_ms(broker_factory):
    """KIP-534: a tombstone stays `delete.retention.ms` after the cleaning that first kept it,
    however old its own timestamp, so a consumer behind has that long to see the delete;
    a later cleaning drops it. The tombstone here is a day old when first cleaned, and
    reads back with that timestamp (the stamped batch's base timestamp is the horizon)."""
    retention_ms = 10_000
    b = broker_factory(kafka_props=KAFKA_PROPS, extra_args=OXBOW_ARGS)
    topic = unique("tombstone")
    create_topic(b.bootstrap, topic, partitions=1, config={**TOPIC_CONFIG, "delete.retention.ms": str(retention_ms)})
    p = producer(b.bootstrap)
    day_ago = int(time.time() * 1000) - 86_400_000
    [value] = produce_all(p, topic, [{"key": b"gone", "value": b"v", "partition": 0}])
    time.sleep(0.3)
    [tomb] = produce_all(p, topic, [{"key": b"gone", "value": None, "partition": 0, "timestamp": day_ago}])
    fillers = 0

    def filler() -> None:
        # Keys of their own: they roll Kafka's segments and leave Oxbow dirty data to clean.
        nonlocal fillers
        produce_all(p, topic, [{"key": f"filler-{fillers}".encode(), "value": b"f", "partition": 0}])
        fillers += 1
        time.sleep(0.3)

    def of_key(records) -> list[tuple[int, bytes | None, int]]:
        return [(o, v, ts) for o, k, v, ts in records if k == b"gone"]

    seen: list = []

    def value_compacted_away() -> bool:
        filler()
        seen[:] = of_key(read_with_timestamps(b.bootstrap, topic))
        return all(o != value.offset for o, _, _ in seen)

    wait_until(value_compacted_away, timeout=COMPACT_TIMEOUT_S, interval=0.1, what="the shadowed value compacted away")
    assert seen == [(tomb.offset, None, day_ago)], f"{TARGET}: the day-old tombstone outlives its first cleaning"

    def tombstone_gone() -> bool:
        filler()
        seen[:] = of_key(read_with_timestamps(b.bootstrap, topic))
        return not seen

    wait_until(
        tombstone_gone,
        timeout=retention_ms / 1000 + COMPACT_TIMEOUT_S,
        interval=0.1,
        what="the tombstone dropped past its delete horizon",
    )
