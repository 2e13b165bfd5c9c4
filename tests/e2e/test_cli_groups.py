"""`oxbow groups list|describe|delete|reset-offsets` against a broker with a real
confluent-kafka consumer group: offsets, lag and member columns while the consumer is
active and after it leaves; resets refused while active, then dry-run and executed
(earliest, latest, datetime, offset, shift-by; checked with the consumer API's
committed()); deletion refused while active, then done; unknown groups."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from confluent_kafka import Consumer, TopicPartition

from brokers import oxbow_bin
from helpers import create_topic, producer, run, unique, wait_until

pytestmark = pytest.mark.oxbow_only

PARTITIONS = 2
RECORDS_PER_PARTITION = 10
# Record timestamps (CreateTime): record i of each partition is at BASE_MS + i seconds.
BASE_MS = 1_700_000_000_000
CLIENT_ID = "cli-groups-e2e"


def oxbow(*args: str, check: bool = True, timeout: float = 60):
    return run([str(oxbow_bin()), *args], timeout=timeout, check=check)


def group_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": CLIENT_ID,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
            "log_level": 3,
        }
    )


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()


def describe(bootstrap: str, group: str) -> tuple[str, dict[int, dict[str, str]]]:
    """The header line and the table rows by partition (a dict of column -> cell)."""
    out = oxbow("groups", "describe", group, "--bootstrap", bootstrap).stdout
    lines = [line for line in out.splitlines() if line.strip()]
    header = lines[0]
    columns = lines[1].split()
    assert columns == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ], out
    rows = {}
    for line in lines[2:]:
        cells = line.split()
        assert len(cells) == len(columns), out
        row = dict(zip(columns, cells))
        rows[int(row["PARTITION"])] = row
    return header, rows


def plan(stdout: str) -> dict[int, int]:
    """The reset plan printed by reset-offsets: partition -> new offset."""
    lines = [line.split() for line in stdout.splitlines() if line.strip()]
    assert lines[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], stdout
    return {int(cells[2]): int(cells[3]) for cells in lines[1:]}


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets as a consumer sees them (no subscribe: no join)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "log_level": 3})
    try:
        parts = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=20)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in parts}


def test_help_lists_groups():
    out = oxbow("--help", timeout=20).stdout
    assert "groups" in out, out
    out = oxbow("groups", "--help", timeout=20).stdout
    for sub in ("list", "describe", "delete", "reset-offsets"):
        assert sub in out, out


def test_groups_lifecycle(shared_broker):
    bootstrap = shared_broker.bootstrap
    b = ["--bootstrap", bootstrap]
    topic = create_topic(bootstrap, unique("cli-groups"), PARTITIONS, config={"retention.ms": "-1"})
    group = unique("cli-group")

    p = producer(bootstrap)
    for partition in range(PARTITIONS):
        for i in range(RECORDS_PER_PARTITION):
            p.produce(topic, value=f"{partition}-{i}".encode(), partition=partition, timestamp=BASE_MS + i * 1000)
    assert p.flush(30) == 0

    # An active member that has consumed everything but committed 6 and 4.
    c = group_consumer(bootstrap, group)
    try:
        c.subscribe([topic])
        seen = 0

        def consumed_all():
            nonlocal seen
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen += 1
            return seen == PARTITIONS * RECORDS_PER_PARTITION

        wait_until(consumed_all, timeout=60, interval=0, what="the consumer read every record")
        c.commit(offsets=[TopicPartition(topic, 0, 6), TopicPartition(topic, 1, 4)], asynchronous=False)

        assert group in oxbow("groups", "list", *b).stdout.split()
        assert f"{group} Stable" in oxbow("groups", "list", "--state", *b).stdout.splitlines()

        header, rows = describe(bootstrap, group)
        assert "state: Stable" in header and "members: 1" in header, header
        assert set(rows) == {0, 1}, rows
        for partition, current, lag in [(0, "6", "4"), (1, "4", "6")]:
            row = rows[partition]
            assert row["GROUP"] == group and row["TOPIC"] == topic, row
            assert row["CURRENT-OFFSET"] == current, row
            assert row["LOG-END-OFFSET"] == str(RECORDS_PER_PARTITION), row
            assert row["LAG"] == lag, row
            assert row["CONSUMER-ID"] == c.memberid(), row
            assert row["HOST"] != "-", row
            assert row["CLIENT-ID"] == CLIENT_ID, row

        refused = oxbow("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute", *b, check=False)
        assert refused.returncode != 0
        assert "active members" in refused.stderr, refused.stderr
        refused = oxbow("groups", "delete", group, *b, check=False)
        assert refused.returncode != 0
        assert "active members" in refused.stderr, refused.stderr
    finally:
        c.close()

    # Closed: the group is empty, offsets and lag stay, member columns are empty.
    wait_until(lambda: "state: Empty" in describe(bootstrap, group)[0], timeout=30, what="the group is empty")
    header, rows = describe(bootstrap, group)
    assert "members: 0" in header, header
    assert [(rows[p]["CURRENT-OFFSET"], rows[p]["LAG"], rows[p]["CONSUMER-ID"]) for p in (0, 1)] == [
        ("6", "4", "-"),
        ("4", "6", "-"),
    ], rows

    def reset(*args: str, execute: bool) -> dict[int, int]:
        extra = ["--execute"] if execute else []
        return plan(oxbow("groups", "reset-offsets", group, *args, *extra, *b).stdout)

    # Dry run: the plan is printed, nothing changes.
    assert reset("--topic", topic, "--to-earliest", execute=False) == {0: 0, 1: 0}
    assert committed(bootstrap, group, topic) == {0: 6, 1: 4}

    assert reset("--topic", topic, "--to-earliest", execute=True) == {0: 0, 1: 0}
    assert committed(bootstrap, group, topic) == {0: 0, 1: 0}
    _, rows = describe(bootstrap, group)
    assert [rows[p]["LAG"] for p in (0, 1)] == ["10", "10"], rows

    assert reset("--topic", topic, "--to-latest", execute=True) == {0: 10, 1: 10}
    assert committed(bootstrap, group, topic) == {0: 10, 1: 10}

    # Record 5 of each partition is the first at or after BASE + 5 s.
    assert reset("--topic", topic, "--to-datetime", iso(BASE_MS + 4500), execute=True) == {0: 5, 1: 5}
    assert committed(bootstrap, group, topic) == {0: 5, 1: 5}
    # After every record: the log end.
    assert reset("--topic", topic, "--to-datetime", "2100-01-01T00:00:00Z", execute=False) == {0: 10, 1: 10}
    assert committed(bootstrap, group, topic) == {0: 5, 1: 5}

    # One partition, an explicit offset.
    assert reset("--topic", f"{topic}:1", "--to-offset", "3", execute=True) == {1: 3}
    assert committed(bootstrap, group, topic) == {0: 5, 1: 3}

    # Relative to the committed offsets, over every partition the group has committed.
    assert reset("--all-topics", "--shift-by", "-2", execute=True) == {0: 3, 1: 1}
    assert committed(bootstrap, group, topic) == {0: 3, 1: 1}

    bad = oxbow("groups", "reset-offsets", group, "--topic", topic, "--to-datetime", "soon", *b, check=False)
    assert bad.returncode != 0 and "invalid time" in bad.stderr, bad.stderr

    oxbow("groups", "delete", group, *b)
    assert group not in oxbow("groups", "list", *b).stdout.split()
    gone = oxbow("groups", "describe", group, *b, check=False)
    assert gone.returncode != 0 and "does not exist" in gone.stderr, gone.stderr


def test_unknown_group_fails_clearly(shared_broker):
    b = ["--bootstrap", shared_broker.bootstrap]
    group = unique("no-such-group")
    for cmd in (["describe", group], ["delete", group]):
        r = oxbow("groups", *cmd, *b, check=False)
        assert r.returncode != 0, r
        assert r.stderr.strip() == f'error: consumer group "{group}" does not exist', r.stderr
        assert r.stdout == "", r.stdout
