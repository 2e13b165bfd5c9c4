"""The aborted-transaction index in the catalog (ARCHITECTURE decision 29): a read_committed
consumer joining late reads a topic with aborted transactions — some open across a seal —
after a broker restart (everything below the new leadership's in-memory index) and again
after compaction into segments, sees no aborted record, and the broker found the aborts in
the catalog, never by walking batch headers (`/metrics`)."""

from __future__ import annotations

import time

import pytest
import requests
from confluent_kafka import Producer

from helpers import create_topic, unique, wait_until
from test_transactions import read_all

pytestmark = pytest.mark.oxbow_only


def aborts_found(broker) -> dict[str, float]:
    """oxbow_read_committed_aborts_total by source."""
    out = {"catalog": 0.0, "header_walk": 0.0}
    for line in requests.get(f"{broker.http}/metrics", timeout=5).text.splitlines():
        if line.startswith("oxbow_read_committed_aborts_total{"):
            labels, value = line.rsplit(" ", 1)
            source = labels.split('source="', 1)[1].split('"', 1)[0]
            out[source] = float(value)
    return out


def segments(broker) -> int:
    d = broker.data_dir / "objects" / "segments"
    return sum(1 for p in d.rglob("*") if p.is_file()) if d.exists() else 0


def sealed_objects(broker) -> int:
    d = broker.data_dir / "objects" / "data"
    return sum(1 for p in d.rglob("*") if p.is_file()) if d.exists() else 0


@pytest.mark.timeout(180)
def test_a_late_read_committed_consumer_skips_aborts_after_a_restart_and_compaction(broker_factory):
    no_compaction = ["--compaction-interval", "0s", "--partition-tail-bytes", "0"]
    b = broker_factory(flush_interval="50ms", extra_args=no_compaction)
    topic = create_topic(b.bootstrap, unique("txn-index"), 2, config={"retention.ms": "-1"})
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": unique("tid"), "linger.ms": 5})
    p.init_transactions(30)
    committed = []
    for n in range(12):
        abort = n % 3 != 0
        p.begin_transaction()
        for i in range(6):
            p.produce(topic, value=f"t{n}-{i}", partition=i % 2)
            if i == 2 and n % 2 == 0:
                # Open across a seal: the sealed chunk's index says where it began.
                p.flush(10)
                time.sleep(0.15)
        p.flush(10)
        if abort:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            committed += [f"t{n}-{i}" for i in range(6)]
        time.sleep(0.1)  # past the flush interval: the next transaction in other objects
    del p

    def check(stage: str) -> None:
        before = aborts_found(b)
        got = read_all(b.bootstrap, topic, 2, "read_committed")
        values = [v for _, _, v in got]
        assert sorted(values) == sorted(committed), (stage, values)
        after = aborts_found(b)
        assert after["catalog"] > before["catalog"], (stage, before, after)
        assert after["header_walk"] == before["header_walk"], (stage, before, after)

    # A restart: the new leadership's in-memory index starts at the log's end.
    b.restart()
    check("after a restart")
    wait_until(lambda: sealed_objects(b) >= 6, timeout=10, what="transactions sealed")

    # Compaction rewrites the sealed objects into segments (the index goes with them), then
    # a cold restart reads them.
    b.options["extra_args"] = [
        "--compaction-interval",
        "1s",
        "--compaction-delete-delay",
        "1s",
        "--partition-tail-bytes",
        "0",
    ]
    b.restart()
    wait_until(
        lambda: sealed_objects(b) == 0 and segments(b) >= 2,
        timeout=60,
        what="sealed objects compacted into segments",
    )
    b.restart()
    check("after compaction")
