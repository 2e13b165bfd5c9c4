"""WAL replication across zones (issue 4): 3 brokers in 3 zones on a real etcd and a real
S3-compatible server (moto). Acknowledged writes survive the loss of a broker's disk, and
`acks=all` follows `min.insync.replicas` as zones come and go.

Seals are held back (`--flush-interval 1h`) so acknowledged data lives only in WALs (the
leader's and its replicas') when the nemesis strikes: what is read back afterwards came
from the WAL replicas, not from the object store.
"""

from __future__ import annotations

import re
import shutil
import time

import pytest
import requests

from cluster import cluster, etcd_server, moto_server  # noqa: F401 (fixtures)
from helpers import consume_partitions, create_topic, produce_all, producer, run, unique, wait_until
from kafka_wire import KafkaConn, parse_produce_response_v3_to_v8, produce_body_v3_to_v8, record_batch

pytestmark = pytest.mark.oxbow_only

NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
REQUEST_TIMED_OUT = 7


def wait_in_sync(c, topic: str, timeout: float = 30) -> None:
    """Until one acks=all write to each partition succeeds: the leaders' WALs then have at
    least the topic's min.insync.replicas in-sync copies (the broker refuses fewer with
    NOT_ENOUGH_REPLICAS, which librdkafka retries)."""
    p = producer(c.bootstrap, message_timeout_ms=int(timeout * 1000))
    leaders = c.leaders(topic)
    produce_all(p, topic, [{"value": b"probe", "partition": part} for part in leaders], timeout=timeout)


def raw_produce(bootstrap: str, topic: str, partition: int, value: bytes) -> tuple[int, int]:
    with KafkaConn(bootstrap, timeout=20) as conn:
        body = conn.call(0, 7, produce_body_v3_to_v8(topic, partition, record_batch([(None, value)]), acks=-1), timeout=20)
        return parse_produce_response_v3_to_v8(body)


def test_acknowledged_writes_survive_losing_a_brokers_wal_directory(cluster):
    c = cluster(3, flush_interval="1h")
    topic = unique("walloss")
    create_topic(c.bootstrap, topic, partitions=3, config={"min.insync.replicas": "3"})
    wait_in_sync(c, topic)
    p = producer(c.bootstrap)
    values = [f"v{i}".encode() for i in range(3000)]
    acked = produce_all(p, topic, [{"value": v, "key": str(i % 17).encode()} for i, v in enumerate(values)])
    assert len(acked) == len(values)

    leaders = c.leaders(topic)
    victim = leaders[0]
    c.kill9(victim)
    wal = c.broker(victim).data_dir / "wal"
    assert any(wal.iterdir()), "the victim's WAL should hold the unsealed data"
    shutil.rmtree(wal)
    c.event(f"deleted broker {victim}'s WAL directory")
    c.restart(victim)

    got = consume_partitions(c.bootstrap, topic, sorted(leaders), timeout=60)
    seen = [r.value for recs in got.values() for r in recs]
    missing = set(values) - set(seen)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}\n{c.history()}"
    dupes = len([v for v in seen if v != b"probe"]) - len(set(seen) - {b"probe"})
    assert dupes == 0, f"{dupes} duplicates"


def test_acks_all_follows_min_insync_replicas_as_zones_go_away(cluster):
    c = cluster(3, flush_interval="250ms", extra_args=["--replica-lag-max", "1s"])
    topic = unique("zones")
    create_topic(c.bootstrap, topic, partitions=1, config={"min.insync.replicas": "2"})
    wait_in_sync(c, topic)
    leader = c.leaders(topic)[0]
    others = [b for b in (1, 2, 3) if b != leader]
    leader_addr = c.broker(leader).bootstrap

    # One replica zone goes away: after at most --replica-lag-max the leader's in-sync set
    # shrinks to 2 copies and acks=all goes on.
    c.kill9(others[0])
    p = producer(leader_addr, message_timeout_ms=20000)
    produce_all(p, topic, [{"value": f"two-zones-{i}".encode(), "partition": 0} for i in range(200)], timeout=30)

    # A second one: 1 copy < min.insync.replicas=2, refused with NOT_ENOUGH_REPLICAS (a
    # write caught waiting while the set shrinks gets NOT_ENOUGH_REPLICAS_AFTER_APPEND).
    c.kill9(others[1])
    deadline = time.monotonic() + 20
    codes = []
    while time.monotonic() < deadline:
        code, _ = raw_produce(leader_addr, topic, 0, b"one-zone")
        codes.append(code)
        if code == NOT_ENOUGH_REPLICAS:
            break
        time.sleep(0.2)
    assert codes[-1] == NOT_ENOUGH_REPLICAS, f"expected NOT_ENOUGH_REPLICAS, got {codes[-5:]}\n{c.history()}"
    assert set(codes) <= {0, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT}, codes

    # A zone comes back: once its replica has caught up, acks=all works again.
    c.restart(others[0])
    wait_until(
        lambda: raw_produce(leader_addr, topic, 0, b"back")[0] == 0,
        timeout=30,
        interval=0.3,
        what="acks=all to work again with 2 zones",
    )
    got = consume_partitions(leader_addr, topic, [0], timeout=30)
    values = {r.value for r in got[0]}
    assert {f"two-zones-{i}".encode() for i in range(200)} <= values
    assert b"back" in values


def partition_replicas(bootstrap: str, topic: str, partition: int) -> tuple[list[int], list[int]]:
    """(replicas, ISR) of a partition as Metadata reports them (librdkafka's admin client)."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    p = md.topics[topic].partitions[partition]
    return sorted(p.replicas), sorted(p.isrs)


def kcat_replicas(bootstrap: str, topic: str, partition: int) -> tuple[list[int], list[int]]:
    """(replicas, ISR) of a partition in `kcat -L` (librdkafka 2.0's Metadata)."""
    out = run(["kcat", "-b", bootstrap, "-L", "-t", topic, "-X", "socket.timeout.ms=10000"], timeout=30).stdout
    m = re.search(rf"partition {partition}, leader -?\d+, replicas: ([\d,]*), isrs: ([\d,]*)", out)
    assert m, out
    ids = lambda s: sorted(int(x) for x in s.split(",") if x)  # noqa: E731
    return ids(m.group(1)), ids(m.group(2))


def wal_replica_ids(http: str, broker_id: int) -> list[int]:
    """The WAL replicas `broker_id` has chosen, as recorded (the v3 brokers endpoint)."""
    cluster_id = requests.get(f"{http}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
    b = requests.get(f"{http}/v3/clusters/{cluster_id}/brokers/{broker_id}", timeout=10).json()
    return sorted(b["wal_replica_ids"])


def test_metadata_reports_the_wal_replicas_and_shows_a_lost_zone_as_under_replicated(cluster, java):
    """A lost zone is shown as under-replicated both before and after the leader re-chooses
    its WAL replicas among the survivors (at the lost broker's lease end): replicas stay
    padded to the replication factor with the lost broker, which is not in the ISR
    (decision 33). Checked with librdkafka's admin client, kcat and kafka-topics.sh."""
    c = cluster(3, flush_interval="250ms", extra_args=["--replica-lag-max", "1s"])
    topic = unique("urp")
    create_topic(c.bootstrap, topic, partitions=1, config={"min.insync.replicas": "2"})
    wait_in_sync(c, topic)
    leader = c.leaders(topic)[0]
    leader_addr = c.broker(leader).bootstrap
    # Healthy: the leader and its two WAL replicas, all in sync.
    wait_until(
        lambda: partition_replicas(leader_addr, topic, 0) == ([1, 2, 3], [1, 2, 3]),
        timeout=20, interval=0.3, what="3 replicas, all in sync",
    )
    assert kcat_replicas(leader_addr, topic, 0) == ([1, 2, 3], [1, 2, 3])
    tool = "org.apache.kafka.tools.TopicCommand"

    def under_replicated() -> str:
        return java(tool, "--bootstrap-server", leader_addr, "--describe", "--under-replicated-partitions").stdout

    assert topic not in under_replicated()
    # A replica's zone goes away: the partition is under-replicated (ISR without it), in
    # librdkafka's view and in kafka-topics.sh's.
    victim = next(b for b in (1, 2, 3) if b != leader)
    survivors = sorted({1, 2, 3} - {victim})
    assert wal_replica_ids(c.broker(leader).http, leader) == sorted({1, 2, 3} - {leader})
    c.kill9(victim)
    wait_until(
        lambda: partition_replicas(leader_addr, topic, 0)[1] == survivors,
        timeout=20, interval=0.3, what="the lost replica out of the ISR",
    )
    assert topic in under_replicated()
    # Its lease ends and the leader re-chooses its WAL replicas among the survivors: the
    # lost zone is still listed, as a replica out of the ISR, in every client's view.
    wait_until(
        lambda: victim not in wal_replica_ids(c.broker(leader).http, leader),
        timeout=30, interval=0.3, what="the leader to re-choose its WAL replicas without the lost broker",
    )
    c.event(f"broker {leader} re-chose its WAL replicas without {victim}")
    # Metadata re-reads the recorded sets every 2 s.
    wait_until(
        lambda: partition_replicas(leader_addr, topic, 0) == ([1, 2, 3], survivors),
        timeout=10, interval=0.3, what="the lost replica still listed after the re-choice",
    )
    assert victim not in wal_replica_ids(c.broker(leader).http, leader), "re-chosen again?"
    assert kcat_replicas(leader_addr, topic, 0) == ([1, 2, 3], survivors)
    assert topic in under_replicated()
    # It comes back and catches up: in sync again, and nothing padded.
    c.restart(victim)
    wait_until(
        lambda: partition_replicas(leader_addr, topic, 0) == ([1, 2, 3], [1, 2, 3]),
        timeout=40, interval=0.5, what="the replica back in the ISR",
    )
    assert topic not in under_replicated()
