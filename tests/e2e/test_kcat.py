"""kcat from Debian (librdkafka 2.0): the "old client" must negotiate versions and work."""

from __future__ import annotations

import json
import shutil

import pytest

from helpers import consume_partitions, create_topic, produce_all, producer, run, unique

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed (scripts/test.sh installs it)")


def kcat(broker, *args, input=None, timeout=60):
    return run(["kcat", "-b", broker.bootstrap, "-X", "socket.timeout.ms=10000", *args], input=input, timeout=timeout)


def test_kcat_is_the_old_client():
    out = run(["kcat", "-V"], timeout=10).stdout
    assert "librdkafka" in out, out


def test_kcat_lists_metadata(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("kcat-meta"), 3)
    plain = kcat(shared_broker, "-L").stdout
    assert "1 brokers:" in plain, plain
    assert f"127.0.0.1:{shared_broker.kafka_port}" in plain
    assert f'topic "{topic}" with 3 partitions' in plain, plain

    md = json.loads(kcat(shared_broker, "-L", "-J", "-t", topic).stdout)
    assert [b["name"] for b in md["brokers"]] == [f"127.0.0.1:{shared_broker.kafka_port}"]
    (t,) = md["topics"]
    assert t["topic"] == topic
    assert sorted(p["partition"] for p in t["partitions"]) == [0, 1, 2]
    broker_id = md["brokers"][0]["id"]
    assert all(p["leader"] == broker_id for p in t["partitions"])


def test_kcat_produce_consume_round_trip(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("kcat-rt"), 1)
    lines = [f"key{i}:value {i} with spaces" for i in range(300)]
    kcat(shared_broker, "-P", "-t", topic, "-p", "0", "-K:", input="\n".join(lines) + "\n")

    out = kcat(shared_broker, "-C", "-t", topic, "-p", "0", "-e", "-o", "beginning", "-q", "-f", "%o|%k|%s\n").stdout
    assert out.splitlines() == [f"{i}|key{i}|value {i} with spaces" for i in range(300)]

    # And librdkafka 2.16 reads what the old client wrote.
    got = consume_partitions(shared_broker.bootstrap, topic, [0])[0]
    assert [(r.key, r.value) for r in got] == [
        (f"key{i}".encode(), f"value {i} with spaces".encode()) for i in range(300)
    ]


def test_kcat_reads_what_a_new_client_wrote(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("kcat-new"), 2)
    produce_all(
        producer(shared_broker.bootstrap, **{"compression.type": "lz4"}),
        topic,
        ({"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 2} for i in range(100)),
    )
    out = kcat(shared_broker, "-C", "-t", topic, "-e", "-o", "beginning", "-q", "-f", "%p|%k|%s\n").stdout
    got = sorted(out.splitlines(), key=lambda line: int(line.split("|")[1][1:]))
    assert got == [f"{i % 2}|k{i}|v{i}" for i in range(100)]
