"""A broker that lost its disk waits for its WAL replicas instead of exiting (issue 11,
defect 7): after a whole-cluster crash, the broker whose data directory was wiped is
started first, alone, as a sequential restart does. It must come up (listeners, lease,
metadata, HTTP), report not-ready naming what it waits for, answer its partitions with a
retriable NOT_LEADER_OR_FOLLOWER, and recover and serve once brokers 2 and 3 are back —
with every acknowledged record readable.

Seals are held back (`--flush-interval 1h`), so acknowledged data lives only in the WALs
(the leaders' and their replicas') when the cluster goes down.
"""

from __future__ import annotations

import shutil
import time

import pytest
import requests
from confluent_kafka import KafkaException

from cluster import cluster, etcd_server, moto_server  # noqa: F401 (fixtures)
from helpers import admin, consume_partitions, create_topic, produce_all, producer, unique, wait_until
from kafka_wire import KafkaConn, parse_produce_response_v3_to_v8, produce_body_v3_to_v8, record_batch

pytestmark = pytest.mark.oxbow_only

NOT_LEADER_OR_FOLLOWER = 6
NOT_ENOUGH_REPLICAS = 19


def raw_produce(bootstrap: str, topic: str, partition: int, value: bytes, acks: int = -1) -> tuple[int, int]:
    with KafkaConn(bootstrap, timeout=20) as conn:
        body = conn.call(0, 7, produce_body_v3_to_v8(topic, partition, record_batch([(None, value)]), acks=acks), timeout=20)
        return parse_produce_response_v3_to_v8(body)


def readyz(b) -> tuple[int, dict]:
    try:
        r = requests.get(f"{b.http}/readyz", timeout=2)
    except requests.RequestException:
        return 0, {}
    return r.status_code, r.json()


def test_a_broker_that_lost_its_disk_waits_for_its_replicas_then_serves(cluster):
    c = cluster(3, flush_interval="1h")
    topic = unique("lostdisk")
    create_topic(c.bootstrap, topic, partitions=6, config={"min.insync.replicas": "3"})
    # One acks=all write per partition succeeds only once each leader has 3 in-sync copies.
    produce_all(producer(c.bootstrap, message_timeout_ms=30000), topic, [{"value": b"probe", "partition": p} for p in range(6)])
    values = [f"v{i}".encode() for i in range(3000)]
    acked = produce_all(producer(c.bootstrap), topic, [{"value": v, "partition": i % 6} for i, v in enumerate(values)])
    leaders = c.leaders(topic)
    mine = sorted(p for p, b in leaders.items() if b == 1)
    assert mine, f"broker 1 leads nothing: {leaders}"

    for i in (1, 2, 3):
        c.kill9(i)
    b1 = c.broker(1)
    shutil.rmtree(b1.data_dir)
    c.event("wiped broker 1's data directory")

    b1.start(wait=False)
    c.event("started broker 1 alone")
    # Up, registered and answering, but not ready: it names what it waits for.
    status, body = wait_until(lambda: (lambda r: r if r[0] == 503 and r[1].get("reasons") else None)(readyz(b1)),
                              timeout=30, what="broker 1 answering /readyz 503 with reasons")
    assert any("lost WAL tail" in r for r in body["reasons"]), body
    assert b1.alive, b1.log_tail()
    md = admin(b1.bootstrap).list_topics(topic, timeout=10)
    assert len(md.topics[topic].partitions) == 6, "broker 1 answers Metadata"
    code, _ = raw_produce(b1.bootstrap, topic, mine[0], b"while-waiting")
    assert code == NOT_LEADER_OR_FOLLOWER, code
    # It keeps waiting (and retrying) rather than exiting.
    time.sleep(8)
    assert b1.alive, f"broker 1 exited while waiting for its replicas\n{b1.log_tail()}"
    assert readyz(b1)[0] == 503
    attempts = b1.log_path.read_text(errors="replace").count("WAL tail recovery failed; retrying")
    assert attempts >= 2, f"expected retries with backoff, saw {attempts}\n{b1.log_tail()}"

    t0 = time.monotonic()
    for i in (2, 3):
        c.broker(i).start(wait=False)
    c.event("started brokers 2 and 3")
    wait_until(lambda: readyz(b1)[0] == 200, timeout=60, interval=0.05, what="broker 1 ready")
    ready_s = time.monotonic() - t0
    # Serving: an acks=1 write to each partition broker 1 led goes through (NOT_LEADER only
    # if the balancer has moved the partition back meanwhile). acks=all also needs broker
    # 1's new WAL to have its replicas in sync again (NOT_ENOUGH_REPLICAS until then, which
    # with seals held back waits for the next seal): that is replication, not recovery.
    for p in mine:
        code, _ = raw_produce(b1.bootstrap, topic, p, b"after", acks=1)
        assert code in (0, NOT_LEADER_OR_FOLLOWER), code
    serve_s = time.monotonic() - t0
    print(f"\nlost-disk broker: ready {ready_s:.2f}s, serving {serve_s:.2f}s after its replicas were started "
          f"(waited through {attempts} failed attempts)")
    for i in (2, 3):
        c.broker(i).wait_ready(60)

    # The balancer moves partitions back to brokers 2 and 3 meanwhile: read once it is done.
    def read_all():
        try:
            return consume_partitions(c.bootstrap, topic, range(6), timeout=60)
        except KafkaException:
            return None

    got = wait_until(read_all, timeout=120, interval=1, what="reading every partition")
    stored = {(r.partition, r.offset): r.value for recs in got.values() for r in recs}
    lost = [a for a in acked if stored.get((a.partition, a.offset)) != a.value]
    assert not lost, f"{len(lost)} acknowledged records lost or moved, e.g. {lost[:3]}\n{c.history()}"
