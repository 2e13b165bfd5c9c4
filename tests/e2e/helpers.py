"""Client-side helpers shared by the end-to-end tests (confluent-kafka, subprocesses)."""

from __future__ import annotations

import subprocess
import time
import uuid
from dataclasses import dataclass
from typing import Iterable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.partitioner.default import murmur2


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def java_partition(key: bytes, partitions: int) -> int:
    """The Java client's default partitioner for a keyed record (murmur2, positive, modulo)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def run(cmd: list[str], *, timeout: float, input: str | bytes | None = None, check: bool = True, env=None):
    """Run a command with a hard timeout; on failure the message carries its output."""
    text = not isinstance(input, bytes)
    try:
        proc = subprocess.run(
            cmd,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            text=text,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(
            f"timed out after {timeout}s: {' '.join(cmd)}\nstdout:\n{_tail(e.stdout)}\nstderr:\n{_tail(e.stderr)}"
        ) from None
    if check and proc.returncode != 0:
        raise AssertionError(
            f"exit {proc.returncode}: {' '.join(cmd)}\nstdout:\n{_tail(proc.stdout)}\nstderr:\n{_tail(proc.stderr)}"
        )
    return proc


def _tail(out, n: int = 4000) -> str:
    if out is None:
        return ""
    if isinstance(out, bytes):
        out = out.decode(errors="replace")
    return out[-n:]


def wait_until(predicate, *, timeout: float, interval: float = 0.2, what: str = "condition"):
    """Poll predicate until it returns a truthy value; fail after timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def settled(read, *, hold: float, timeout: float, interval: float = 0.5, what: str = "value"):
    """The value `read()` returns once it has stayed the same for `hold` seconds; fail
    after timeout."""
    deadline = time.monotonic() + timeout
    value, since = read(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(interval)
        now = read()
        if now != value:
            value, since = now, time.monotonic()
        elif time.monotonic() - since >= hold:
            return value
    raise AssertionError(f"{what} did not settle within {timeout}s (last: {value!r})")


# -- admin --------------------------------------------------------------------


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None, timeout: float = 30):
    client = admin(bootstrap)  # keep a reference: a destroyed client fails its futures
    futures = client.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    futures[name].result(timeout=timeout)
    wait_for_topic(bootstrap, name, partitions)
    return name


def wait_for_topic(bootstrap: str, name: str, partitions: int, timeout: float = 30):
    """Until metadata shows the topic with `partitions` partitions, each with a leader."""

    def ready():
        md = admin(bootstrap).list_topics(name, timeout=5)
        t = md.topics.get(name)
        if t is None or t.error is not None or len(t.partitions) != partitions:
            return None
        if any(p.leader < 0 for p in t.partitions.values()):
            return None
        return t

    return wait_until(ready, timeout=timeout, what=f"topic {name} with {partitions} partitions")


def topic_names(bootstrap: str) -> set[str]:
    return set(admin(bootstrap).list_topics(timeout=10).topics)


# -- produce / consume ----------------------------------------------------------


@dataclass
class Rec:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list | None = None
    timestamp: tuple[int, int] | None = None


def producer(bootstrap: str, **conf) -> Producer:
    """A librdkafka producer, idempotent unless told otherwise: tests check per-partition
    order, and without idempotence librdkafka may reorder batches it retries (it did, once,
    against Apache Kafka right after a topic was created)."""
    base = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True, "log_level": 3}
    base.update({k.replace("_", "."): v for k, v in conf.items()})
    return Producer(base)


def produce_all(p: Producer, topic: str, records: Iterable[dict], timeout: float = 60) -> list[Rec]:
    """Produce records (dicts of key/value/partition/headers/timestamp) and wait for every
    delivery report; fail on any delivery error. Returns the reports in send order."""
    reports: list = []

    def send(i, r):
        def cb(err, msg):
            reports[i] = err if err is not None else Rec(msg.partition(), msg.offset(), msg.key(), msg.value())

        kwargs = {k: v for k, v in r.items() if v is not None}
        while True:
            try:
                p.produce(topic, on_delivery=cb, **kwargs)
                return
            except BufferError:
                p.poll(0.05)

    for i, r in enumerate(records):
        reports.append(None)
        send(i, r)
        p.poll(0)
    left = p.flush(timeout)
    assert left == 0, f"{left} records still undelivered after {timeout}s"
    errors = [(i, e) for i, e in enumerate(reports) if not isinstance(e, Rec)]
    assert not errors, f"{len(errors)} delivery errors, first: {errors[:3]}"
    return reports


def consumer(bootstrap: str, **conf) -> Consumer:
    base = {
        "bootstrap.servers": bootstrap,
        # librdkafka wants a group id, but with assign() and no auto commit it uses no
        # group protocol: the broker has no consumer groups yet.
        "group.id": "oxbow-e2e-assign",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "log_level": 3,
    }
    base.update(conf)
    return Consumer(base)


# What a client retries: the partition's leader moved (or is being elected) since the
# client's metadata, or the broker did not answer in time.
RETRIABLE_LOOKUP = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
}


def high_watermark(c: Consumer, topic: str, partition: int, *, timeout: float = 30) -> int:
    """The partition's high watermark, asked of its leader; retried while the leader moves
    (librdkafka's query does not retry a stale leader itself, as its fetcher does)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)[1]
        except KafkaException as e:
            if e.args[0].code() not in RETRIABLE_LOOKUP or time.monotonic() >= deadline:
                raise
            time.sleep(0.3)


def consume_partitions(
    bootstrap: str, topic: str, partitions: Iterable[int], *, timeout: float = 60, **conf
) -> dict[int, list[Rec]]:
    """Read every partition from its beginning up to the high watermark seen at the start."""
    partitions = list(partitions)
    c = consumer(bootstrap, **conf)
    try:
        highs = {p: high_watermark(c, topic, p, timeout=timeout) for p in partitions}
        out: dict[int, list[Rec]] = {p: [] for p in partitions}
        pending = {p for p in partitions if highs[p] > 0}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for m in c.consume(num_messages=5000, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(err)
                out[m.partition()].append(
                    Rec(m.partition(), m.offset(), m.key(), m.value(), m.headers(), m.timestamp())
                )
                if m.offset() + 1 >= highs[m.partition()]:
                    pending.discard(m.partition())
        got = {p: len(v) for p, v in out.items()}
        assert not pending, f"timed out after {timeout}s reading {topic}: got {got}, high watermarks {highs}"
        return out
    finally:
        c.close()


def assert_dense(records: dict[int, list[Rec]]) -> None:
    """Offsets in every partition are exactly 0, 1, 2, ... in consumption order."""
    for p, recs in records.items():
        offsets = [r.offset for r in recs]
        if offsets != list(range(len(offsets))):
            bad = next(i for i, o in enumerate(offsets) if o != i)
            raise AssertionError(
                f"partition {p}: offsets not dense from 0, first gap at index {bad}: {offsets[bad : bad + 5]}"
            )
