"""Issue 16: exactly-once read-process-write through failover, on three brokers sharing a
real etcd and S3 (moto). A transactional producer reads an input topic through a consumer
group (read_committed) and writes each input's transformed record to an output topic, the
consumer's offsets committed in the same transaction, while each broker in turn — so the
leaders of touched partitions, the transaction coordinator and the group coordinator —
is killed with kill -9 and started again. Afterwards, in the read_committed view, every
input's output appears exactly once and nothing of an aborted transaction is seen.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from cluster import cluster, etcd_server, moto_server  # noqa: F401
from helpers import create_topic, unique, wait_until

pytestmark = pytest.mark.oxbow_only

INPUTS = 2000
# Inputs per second: the input lasts ~25 s, through all three kills.
FEED_RATE = 80
PARTITIONS = 3
BATCH = 25


class Pipeline(threading.Thread):
    """The read-process-write loop, restarting its clients after fatal errors (a fenced or
    timed-out producer) and rewinding to the committed offsets after an aborted batch."""

    def __init__(self, bootstrap: str, src: str, dst: str, group: str, tid: str):
        super().__init__(daemon=True)
        self.bootstrap, self.src, self.dst, self.group, self.tid = bootstrap, src, dst, group, tid
        self.stop = threading.Event()
        self.commits = 0
        self.aborts = 0
        self.restarts = 0
        self.errors: list[str] = []
        self.last_progress = time.monotonic()
        # What the loop is doing now, for a failure message.
        self.step = "starting"

    def clients(self):
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "session.timeout.ms": 10000,
            }
        )
        consumer.subscribe([self.src])
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": self.tid,
                "transaction.timeout.ms": 30000,
                "linger.ms": 5,
            }
        )
        producer.init_transactions(60)
        return consumer, producer

    def rewind(self, consumer):
        assigned = consumer.assignment()
        if not assigned:
            return
        for tp in consumer.committed(assigned, timeout=30):
            consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))

    def run(self):
        consumer = producer = None
        while not self.stop.is_set():
            try:
                if producer is None:
                    self.step = "creating clients"
                    consumer, producer = self.clients()
                self.step = "consuming"
                msgs = consumer.consume(BATCH, 1.0)
                msgs = [m for m in msgs if not m.error()]
                if not msgs:
                    continue
                self.step = f"transaction of {len(msgs)} inputs"
                producer.begin_transaction()
                for m in msgs:
                    producer.produce(self.dst, key=m.value(), value=b"out-" + m.value())
                producer.send_offsets_to_transaction(
                    consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 60
                )
                for attempt in range(3):
                    try:
                        producer.commit_transaction(30)
                        self.commits += 1
                        break
                    except KafkaException as e:
                        self.errors.append(f"commit attempt {attempt}: {e.args[0]}")
                        if e.args[0].retriable() and attempt < 2:
                            continue
                        raise
                self.last_progress = time.monotonic()
            except KafkaException as e:
                err = e.args[0]
                self.errors.append(str(err))
                if producer is not None and err.txn_requires_abort():
                    try:
                        producer.abort_transaction(60)
                        self.aborts += 1
                        self.rewind(consumer)
                        continue
                    except KafkaException as e2:
                        self.errors.append(f"abort: {e2}")
                # Fatal (fenced, timed out) or unknown: start over from the committed offsets.
                self.restarts += 1
                for c in (consumer,):
                    try:
                        if c is not None:
                            c.close()
                    except Exception:
                        pass
                consumer = producer = None
                time.sleep(0.5)
        if consumer is not None:
            consumer.close()


def committed_total(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        parts = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return sum(max(tp.offset, 0) for tp in parts)
    except KafkaException:
        return -1
    finally:
        c.close()


def read_committed_values(bootstrap: str, topic: str, expect: int, timeout: float = 90) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("check"),
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out, eof = [], set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(eof) < PARTITIONS:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                continue
            eof.discard(m.partition())
            out.append(m.value())
    finally:
        c.close()
    return out


def test_read_process_write_is_exactly_once_through_broker_kills(cluster):
    c = cluster(3, flush_interval="100ms")
    src = create_topic(c.broker(1).bootstrap, unique("eos-in"), PARTITIONS)
    dst = create_topic(c.broker(1).bootstrap, unique("eos-out"), PARTITIONS)
    inputs = [b"in-%05d" % i for i in range(INPUTS)]
    fed = threading.Event()

    def feed():
        # Input keeps arriving through the kills (idempotent: retried, never doubled).
        feeder = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        for i, v in enumerate(inputs):
            feeder.produce(src, value=v, partition=i % PARTITIONS)
            feeder.poll(0)
            time.sleep(1 / FEED_RATE)
        assert feeder.flush(120) == 0
        fed.set()

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    group = unique("eos")
    pipe = Pipeline(c.bootstrap, src, dst, group, unique("eos-tid"))
    pipe.start()
    try:
        wait_until(lambda: committed_total(c.bootstrap, group, src) >= INPUTS // 10, timeout=60, what="a first share processed")
        for victim in (1, 2, 3):
            c.kill9(victim)
            time.sleep(6)  # the lease lapses (3 s) and the roles move
            c.restart(victim)
            c.event(f"pipeline: {pipe.commits} commits, {pipe.aborts} aborts, {pipe.restarts} restarts")
        feeder.join(120)
        assert fed.is_set(), "the input was not all acknowledged"
        try:
            wait_until(lambda: committed_total(c.bootstrap, group, src) == INPUTS, timeout=120, what="every input processed")
        except AssertionError as e:
            raise AssertionError(
                f"{e}: committed {committed_total(c.bootstrap, group, src)} of {INPUTS}; pipeline {pipe.step!r}, "
                f"{pipe.commits} commits, {pipe.aborts} aborts, {pipe.restarts} restarts, last progress "
                f"{time.monotonic() - pipe.last_progress:.0f} s ago, errors {pipe.errors[-10:]}\n{c.history()}"
            ) from None
    finally:
        pipe.stop.set()
        pipe.join(60)
    print(f"commits={pipe.commits} aborts={pipe.aborts} restarts={pipe.restarts} errors={pipe.errors[:10]}")
    outputs = read_committed_values(c.bootstrap, dst, INPUTS)
    counts: dict[bytes, int] = {}
    for v in outputs:
        counts[v] = counts.get(v, 0) + 1
    missing = [v for v in inputs if b"out-" + v not in counts]
    duplicated = {v: n for v, n in counts.items() if n > 1}
    unexpected = [v for v in counts if not v.startswith(b"out-in-")]
    assert not missing and not duplicated and not unexpected, (
        f"missing {len(missing)} {missing[:5]}, duplicated {len(duplicated)} {list(duplicated.items())[:5]}, "
        f"unexpected {unexpected[:5]}\n{c.history()}"
    )
