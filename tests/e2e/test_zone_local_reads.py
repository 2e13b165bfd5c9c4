"""Zone-local reads (issue 17, KIP-392): a consumer that sets `client.rack` to its zone is
sent by a leader in another zone to a broker in its own, which serves the partition from
the object store (what is sealed). Three brokers in three zones on etcd + S3 (moto);
librdkafka's own KIP-392 support follows the `preferred_read_replica`."""

from __future__ import annotations

import re

import pytest
import requests
from confluent_kafka import Consumer, TopicPartition

from cluster import cluster, etcd_server, moto_server  # noqa: F401 (fixtures)
from helpers import consume_partitions, create_topic, produce_all, producer, unique, wait_until

pytestmark = pytest.mark.oxbow_only

FETCH = 1


def fetches(broker) -> float:
    """Fetch requests a broker has answered (its /metrics)."""
    text = requests.get(f"{broker.http}/metrics", timeout=5).text
    m = re.search(r'^oxbow_kafka_requests_total\{api_key="%d"\} (\S+)$' % FETCH, text, re.M)
    return float(m.group(1)) if m else 0.0


def test_a_consumer_with_a_rack_reads_from_a_broker_in_its_zone(cluster):
    c = cluster(3, flush_interval="200ms")
    topic = create_topic(c.bootstrap, unique("zonal"), 1)
    leader = c.leaders(topic)[0]
    local = next(b for b in (1, 2, 3) if b != leader)
    rack = c.az_of(local)
    values = [f"v{i}".encode() for i in range(2000)]
    produce_all(producer(c.bootstrap), topic, [{"value": v, "partition": 0} for v in values])

    before = {b: fetches(c.broker(b)) for b in (1, 2, 3)}
    got = consume_partitions(c.broker(leader).bootstrap, topic, [0], timeout=60, **{"client.rack": rack})
    assert [r.value for r in got[0]] == values, "every record, in order, once"
    served = {b: fetches(c.broker(b)) - before[b] for b in (1, 2, 3)}
    # The leader answered with the preferred replica; the broker in the client's zone did
    # the reading (the third broker, in neither, saw nothing).
    third = ({1, 2, 3} - {leader, local}).pop()
    assert served[local] >= 1 and served[local] >= served[leader] - 2, served
    assert served[third] == 0, served

    # Without a rack nothing changes: the leader serves.
    before = fetches(c.broker(local))
    got = consume_partitions(c.broker(leader).bootstrap, topic, [0], timeout=60)
    assert len(got[0]) == len(values)
    assert fetches(c.broker(local)) == before


def test_a_zone_local_reader_keeps_up_with_the_tail(cluster):
    """Records produced while the consumer reads arrive through the zone's broker (a flush
    interval behind the leader), and a consumer in the leader's zone is not redirected."""
    c = cluster(3, flush_interval="200ms")
    topic = create_topic(c.bootstrap, unique("zonaltail"), 1)
    leader = c.leaders(topic)[0]
    local = next(b for b in (1, 2, 3) if b != leader)
    p = producer(c.bootstrap)
    first = [f"a{i}".encode() for i in range(200)]
    produce_all(p, topic, [{"value": v, "partition": 0} for v in first])
    cons = Consumer({
        "bootstrap.servers": c.broker(leader).bootstrap, "group.id": unique("g"), "enable.auto.commit": False,
        "client.rack": c.az_of(local), "log_level": 3, "fetch.wait.max.ms": 500,
    })
    try:
        cons.assign([TopicPartition(topic, 0, 0)])
        seen = []

        def has(n: int) -> bool:
            m = cons.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m.value())
            return len(seen) >= n

        wait_until(lambda: has(len(first)), timeout=30, interval=0, what="the first records")
        second = [f"b{i}".encode() for i in range(200)]
        produce_all(p, topic, [{"value": v, "partition": 0} for v in second])
        wait_until(lambda: has(len(first) + len(second)), timeout=30, interval=0, what="records produced while reading")
        assert seen == first + second
    finally:
        cons.close()


def test_the_java_consumer_follows_the_preferred_read_replica(cluster, java):
    c = cluster(3, flush_interval="200ms")
    topic = create_topic(c.bootstrap, unique("zonaljava"), 1)
    leader = c.leaders(topic)[0]
    local = next(b for b in (1, 2, 3) if b != leader)
    values = [f"j{i}" for i in range(500)]
    produce_all(producer(c.bootstrap), topic, [{"value": v.encode(), "partition": 0} for v in values])
    before = fetches(c.broker(local))
    out = java(
        "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", c.broker(leader).bootstrap,
        "--topic", topic, "--from-beginning", "--max-messages", str(len(values)), "--timeout-ms", "30000",
        "--consumer-property", f"client.rack={c.az_of(local)}",
    ).stdout.split()
    assert out == values
    assert fetches(c.broker(local)) > before, "the zone's broker served the Java consumer"
