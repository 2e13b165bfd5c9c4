"""The `oxbow` admin CLI (topics, produce, consume) against a running broker, the
unreachable-broker message, and `oxbow serve` configured through OXBOW_* variables."""

from __future__ import annotations

import pytest

from brokers import free_ports, oxbow_bin
from helpers import consume_partitions, create_topic, produce_all, producer, run, topic_names, unique

pytestmark = pytest.mark.oxbow_only


def oxbow(*args: str, input: str | None = None, timeout: float = 60, check: bool = True):
    return run([str(oxbow_bin()), *args], input=input, timeout=timeout, check=check)


def test_help_lists_subcommands():
    out = oxbow("--help", timeout=20).stdout
    for sub in ("serve", "topics", "produce", "consume"):
        assert sub in out, out


def test_topics_create_list_describe_delete(shared_broker):
    b = ["--bootstrap", shared_broker.bootstrap]
    name = unique("cli-topic")
    oxbow("topics", "create", name, "--partitions", "3", *b)
    assert name in topic_names(shared_broker.bootstrap)

    assert name in oxbow("topics", "list", *b).stdout.split()

    desc = oxbow("topics", "describe", name, *b).stdout
    assert name in desc
    assert "3" in desc, desc  # the partition count shows somewhere

    again = oxbow("topics", "create", name, "--partitions", "3", *b, check=False)
    assert again.returncode != 0
    assert "exist" in (again.stdout + again.stderr).lower()

    oxbow("topics", "delete", name, *b)
    assert name not in oxbow("topics", "list", *b).stdout.split()

    missing = oxbow("topics", "describe", name, *b, check=False)
    assert missing.returncode != 0


def test_produce_with_key_separator_then_consume_with_keys(shared_broker):
    b = ["--bootstrap", shared_broker.bootstrap]
    topic = create_topic(shared_broker.bootstrap, unique("cli-rt"), 1)
    lines = [f"k{i}:value {i}: with a colon" for i in range(50)]
    oxbow("produce", topic, "--key-separator", ":", "--acks", "all", *b, input="\n".join(lines) + "\n")

    # Exact bytes, split at the first separator only.
    got = consume_partitions(shared_broker.bootstrap, topic, [0])[0]
    assert [(r.key, r.value) for r in got] == [
        (f"k{i}".encode(), f"value {i}: with a colon".encode()) for i in range(50)
    ]

    out = oxbow(
        "consume", topic, "--from-beginning", "--max-messages", "50", "--timeout-idle", "5s", "--print-key", *b
    ).stdout.splitlines()
    assert len(out) == 50, out
    for i, line in enumerate(out):
        key, value = f"k{i}", f"value {i}: with a colon"
        assert line.startswith(key) and line.endswith(value) and len(line) > len(key) + len(value), line


def test_produce_to_partition_and_consume_one_partition(shared_broker):
    b = ["--bootstrap", shared_broker.bootstrap]
    topic = create_topic(shared_broker.bootstrap, unique("cli-part"), 3)
    oxbow("produce", topic, "--partition", "2", *b, input="one\ntwo\nthree\n")
    got = consume_partitions(shared_broker.bootstrap, topic, [0, 1, 2])
    assert [r.value for r in got[2]] == [b"one", b"two", b"three"] and not got[0] and not got[1]

    out = oxbow(
        "consume", topic, "--partition", "2", "--from-beginning", "--max-messages", "3", "--timeout-idle", "5s", *b
    ).stdout
    assert out.splitlines() == ["one", "two", "three"]


def test_consume_stops_when_idle(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("cli-idle"), 1)
    produce_all(producer(shared_broker.bootstrap), topic, [{"value": b"only"}])
    # Asks for more than there is: must end after the idle timeout, not hang.
    proc = oxbow(
        "consume", topic, "--from-beginning", "--max-messages", "10", "--timeout-idle", "2s",
        "--bootstrap", shared_broker.bootstrap, timeout=30, check=False,
    )  # fmt: skip
    assert proc.stdout.splitlines() == ["only"]


@pytest.mark.parametrize(
    "args",
    [
        ["topics", "list"],
        ["topics", "create", "t", "--partitions", "1"],
        ["produce", "t"],
        ["consume", "t", "--from-beginning", "--max-messages", "1", "--timeout-idle", "2s"],
    ],
    ids=["topics-list", "topics-create", "produce", "consume"],
)
def test_unreachable_broker_fails_with_message_naming_address(args):
    (port,) = free_ports(1)  # nothing listens there
    addr = f"127.0.0.1:{port}"
    proc = oxbow(*args, "--bootstrap", addr, input="x\n" if args[0] == "produce" else None, timeout=60, check=False)
    assert proc.returncode != 0, proc.stdout
    assert addr in proc.stdout + proc.stderr, proc.stderr


def test_serve_reads_settings_from_environment(broker_factory):
    b = broker_factory(name="env", use_env=True, default_partitions=4, auto_create_topics=True)
    # Auto-created by a producer's metadata request, with the default partition count from env.
    topic = unique("env-auto")
    produce_all(producer(b.bootstrap), topic, [{"value": b"x"}])
    md = producer(b.bootstrap).list_topics(topic, timeout=10)
    assert len(md.topics[topic].partitions) == 4


def test_auto_create_off_flag(broker_factory):
    b = broker_factory(name="noauto", auto_create_topics=False)
    topic = unique("no-auto")
    md = producer(b.bootstrap).list_topics(topic, timeout=10)
    assert md.topics[topic].error is not None  # UNKNOWN_TOPIC_OR_PARTITION
    assert topic not in topic_names(b.bootstrap)
    create_topic(b.bootstrap, topic, 2)  # explicit creation still works
