"""Apache Kafka's own Java client and CLI tools, run unchanged through their main classes
(what bin/kafka-topics.sh, kafka-console-producer.sh, kafka-console-consumer.sh and
kafka-producer-perf-test.sh run) from the jars in .tools/kafka/libs.

Unchanged means default client settings: Java producers default to enable.idempotence=true
(KIP-679), so the broker must serve InitProducerId and producer-id sequence numbers."""

from __future__ import annotations

import re

import pytest
import requests

from brokers import TARGET
from helpers import consume_partitions, create_topic, run, topic_names, unique, wait_until

TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
PRODUCER_PERFORMANCE = "org.apache.kafka.tools.ProducerPerformance"


def test_topic_command_create_list_describe_delete(shared_broker, java):
    b = shared_broker.bootstrap
    name = unique("jtopics")
    # No --replication-factor: the tool sends -1 ("broker default"), as most users do.
    out = java(TOPIC_COMMAND, "--bootstrap-server", b, "--create", "--topic", name, "--partitions", "3").stdout
    assert f"Created topic {name}." in out, out

    listed = java(TOPIC_COMMAND, "--bootstrap-server", b, "--list").stdout.split()
    assert name in listed

    desc = java(TOPIC_COMMAND, "--bootstrap-server", b, "--describe", "--topic", name).stdout
    assert re.search(rf"Topic:\s*{re.escape(name)}\b.*PartitionCount:\s*3\b", desc), desc
    partitions = re.findall(r"Partition:\s*(\d+)\s+Leader:\s*(-?\d+)", desc)
    assert sorted(int(p) for p, _ in partitions) == [0, 1, 2], desc
    assert all(int(leader) >= 0 for _, leader in partitions), desc

    # Describing every topic (no --topic) takes in the internal ones the listing names
    # too, described by id with their configs: it used to fail on __consumer_offsets.
    every = java(TOPIC_COMMAND, "--bootstrap-server", b, "--describe").stdout
    assert re.search(rf"Topic:\s*{re.escape(name)}\b", every), every
    if "__consumer_offsets" in listed:  # Kafka creates it on a group's first use
        assert re.search(r"Topic:\s*__consumer_offsets\b.*cleanup\.policy=compact", every), every

    # Creating it again is refused with a clear message and a non-zero exit.
    again = java(TOPIC_COMMAND, "--bootstrap-server", b, "--create", "--topic", name, "--partitions", "3", check=False)
    assert again.returncode != 0
    assert "already exists" in (again.stdout + again.stderr)

    java(TOPIC_COMMAND, "--bootstrap-server", b, "--delete", "--topic", name)
    wait_until(lambda: name not in topic_names(b), timeout=30, what=f"{name} deleted")


def test_topic_command_describes_through_paged_describe_topic_partitions(shared_broker, java):
    """kafka-topics.sh (Kafka 3.8+) describes topics with DescribeTopicPartitions (KIP-966)
    when the broker offers it, a page of partitions per request: with a page of 2, two
    topics of 5 and 3 partitions come back whole, every partition once, with its leader,
    replicas and ISR."""
    b = shared_broker.bootstrap
    names = [unique("jpaged"), unique("jpaged")]
    create_topic(b, names[0], partitions=5)
    create_topic(b, names[1], partitions=3)
    desc = java(
        TOPIC_COMMAND, "--bootstrap-server", b, "--describe", "--topic", f"{names[0]}|{names[1]}",
        "--partition-size-limit-per-response", "2",
    ).stdout
    for name, count in zip(names, (5, 3)):
        rows = re.findall(
            rf"Topic:\s*{re.escape(name)}\s+Partition:\s*(\d+)\s+Leader:\s*(\d+)\s+Replicas:\s*([\d,]+)\s+Isr:\s*([\d,]+)",
            desc,
        )
        assert sorted(int(p) for p, *_ in rows) == list(range(count)), desc
        for _, leader, replicas, isr in rows:
            assert leader in replicas.split(",") and leader in isr.split(","), desc
    if TARGET == "oxbow":
        metrics = requests.get(f"{shared_broker.http}/metrics", timeout=5).text
        served = re.search(r'oxbow_request_seconds_count\{request="DescribeTopicPartitions"\} (\d+)', metrics)
        assert served and int(served.group(1)) >= 4, "the tool did not page through DescribeTopicPartitions"


def test_console_producer_then_console_consumer(shared_broker, java):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("jconsole"), 1)
    lines = [f"key-{i}:value number {i}" for i in range(200)]
    java(
        CONSOLE_PRODUCER,
        "--bootstrap-server", b,
        "--topic", topic,
        "--property", "parse.key=true",
        "--property", "key.separator=:",
        input="\n".join(lines) + "\n",
    )  # fmt: skip

    got = consume_partitions(b, topic, [0])[0]
    assert [(r.key, r.value) for r in got] == [(f"key-{i}".encode(), f"value number {i}".encode()) for i in range(200)]

    out = java(
        CONSOLE_CONSUMER,
        "--bootstrap-server", b,
        "--topic", topic,
        "--partition", "0",
        "--offset", "earliest",
        "--max-messages", "200",
        "--timeout-ms", "30000",
        "--property", "print.key=true",
        "--property", "key.separator=:",
    ).stdout  # fmt: skip
    assert out.splitlines() == lines


def test_console_consumer_reads_from_offset(shared_broker, java):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("jconsole-off"), 2)
    java(CONSOLE_PRODUCER, "--bootstrap-server", b, "--topic", topic, input="".join(f"m{i}\n" for i in range(50)))
    total = sum(len(v) for v in consume_partitions(b, topic, [0, 1]).values())
    assert total == 50
    part0 = [r.value.decode() for r in consume_partitions(b, topic, [0])[0]]
    if len(part0) < 3:
        part0 = [r.value.decode() for r in consume_partitions(b, topic, [1])[1]]
        partition = "1"
    else:
        partition = "0"
    out = java(
        CONSOLE_CONSUMER,
        "--bootstrap-server", b,
        "--topic", topic,
        "--partition", partition,
        "--offset", "2",
        "--max-messages", str(len(part0) - 2),
        "--timeout-ms", "30000",
    ).stdout  # fmt: skip
    assert out.splitlines() == part0[2:]


def test_producer_performance_completes_without_errors(shared_broker, java):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("jperf"), 3)
    n = 20_000
    proc = java(
        PRODUCER_PERFORMANCE,
        "--topic", topic,
        "--num-records", str(n),
        "--record-size", "256",
        "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={b}", "acks=all", "linger.ms=5",
        timeout=180,
    )  # fmt: skip
    assert re.search(rf"^{n} records sent", proc.stdout, re.M), proc.stdout
    assert "ERROR" not in proc.stderr and "Exception" not in proc.stderr, proc.stderr[-3000:]
    got = consume_partitions(b, topic, range(3), timeout=120)
    assert sum(len(v) for v in got.values()) == n
