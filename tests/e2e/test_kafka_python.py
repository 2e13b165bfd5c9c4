"""kafka-python (pure Python): produce, consume with assign + seek_to_beginning, admin."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from helpers import consume_partitions, create_topic, topic_names, unique, wait_until

N = 500


def read_all(bootstrap: str, topic: str, partitions: list[int], expected: int, timeout: float = 60):
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=30000,
    )
    try:
        c.assign([TopicPartition(topic, p) for p in partitions])
        c.seek_to_beginning()
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                got.extend(recs)
        return got
    finally:
        c.close()


# kafka-python 3 enables idempotence by default (KIP-679), as the Java client does: the
# default case needs InitProducerId and producer-id sequence numbers from the broker.
@pytest.mark.parametrize("idempotence", ["default", "off"])
def test_kafka_python_produce_consume(shared_broker, idempotence):
    topic = create_topic(shared_broker.bootstrap, unique("kpy"), 2)
    extra = {} if idempotence == "default" else {"enable_idempotence": False}
    p = KafkaProducer(
        bootstrap_servers=shared_broker.bootstrap, acks="all", linger_ms=5, request_timeout_ms=30000, **extra
    )
    try:
        futures = [p.send(topic, key=f"k{i % 10}".encode(), value=f"value-{i}".encode()) for i in range(N)]
        p.flush(timeout=60)
        metas = [f.get(timeout=30) for f in futures]
    finally:
        p.close(timeout=10)
    assert all(m.topic == topic for m in metas)

    got = read_all(shared_broker.bootstrap, topic, [0, 1], N)
    assert len(got) == N
    by_offset = {(r.partition, r.offset): (r.key, r.value) for r in got}
    for i, m in enumerate(metas):
        assert by_offset[(m.partition, m.offset)] == (f"k{i % 10}".encode(), f"value-{i}".encode())
    for part in (0, 1):
        offsets = [r.offset for r in got if r.partition == part]
        assert offsets == list(range(len(offsets)))

    # librdkafka agrees with what kafka-python wrote.
    lib = consume_partitions(shared_broker.bootstrap, topic, [0, 1])
    assert sum(len(v) for v in lib.values()) == N


def test_kafka_python_admin_create_delete(shared_broker):
    name = unique("kpy-admin")
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(name, num_partitions=3, replication_factor=1)], timeout_ms=30000)
        wait_until(lambda: name in admin.list_topics(), timeout=30, what=f"{name} listed")
        (desc,) = admin.describe_topics([name])
        assert desc["error_code"] == 0, desc
        assert sorted(p["partition_index"] for p in desc["partitions"]) == [0, 1, 2]

        admin.delete_topics([name], timeout_ms=30000)
        wait_until(lambda: name not in admin.list_topics(), timeout=30, what=f"{name} gone")
    finally:
        admin.close()
    assert name not in topic_names(shared_broker.bootstrap)
