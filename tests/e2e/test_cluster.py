"""A cluster of `oxbow serve` processes sharing one etcd and one S3 bucket (moto): placement,
failover after kill -9, graceful handoff on SIGTERM, a broker joining, group coordinator
failover, and the `oxbow cluster` / `oxbow partitions` CLI.

Brokers run with `--session-timeout 3s` (a dead broker's partitions move ~3 s after its
last lease renewal) and `--flush-interval 100ms`. Tests that kill a broker without
checking WAL-tail recovery stop producing and let the seals land first, so they test
placement and failover alone; `test_kill9_under_load_loses_nothing` kills mid-stream and
needs the new leader to recover the dead broker's unsealed tail from its WAL replicas.
Figures (failover time, time to take a share) are printed; run with `-s` to see them.
"""

from __future__ import annotations

import base64
import json
import time

import pytest
import requests
from confluent_kafka import Consumer, KafkaException, TopicPartition

from cluster import ProducerThread, check_history, cluster, etcd_server, moto_server, read_all  # noqa: F401
import kafka_wire as w
from helpers import admin, create_topic, produce_all, producer, unique, wait_until

pytestmark = pytest.mark.oxbow_only

FLUSH = "100ms"
# Seals land within a flush interval; this leaves room for an upload to moto.
SEAL_WAIT_S = 1.0
ERR_NOT_LEADER_OR_FOLLOWER = 6


def led_by(leaders: dict[int, int], broker: int) -> set[int]:
    return {p for p, b in leaders.items() if b == broker}


def counts(leaders: dict[int, int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for b in leaders.values():
        out[b] = out.get(b, 0) + 1
    return out


def test_topics_spread_over_brokers_and_any_broker_answers_for_the_cluster(cluster):
    c = cluster(3, flush_interval=FLUSH)
    topic = create_topic(c.broker(1).bootstrap, unique("spread"), 6)
    leaders = c.leaders(topic)
    assert counts(leaders) == {1: 2, 2: 2, 3: 2}, leaders
    # Consecutive partitions alternate zones (one broker per zone here).
    assert all(leaders[p] != leaders[p + 1] for p in range(5)), leaders

    # Every broker lists every broker (rack = AZ) and the same leaders.
    for b in c.brokers:
        md = admin(b.bootstrap).list_topics(topic, timeout=10)
        assert set(md.brokers) == {1, 2, 3}
        assert {p.id: p.leader for p in md.topics[topic].partitions.values()} == leaders
    described = c.describe(topic)
    assert {b["id"]: b["az"] for b in described["brokers"]} == {1: "az1", 2: "az2", 3: "az3"}
    assert described["controller"] in (1, 2, 3)

    # A topic auto-created through broker 3 is spread too.
    auto = unique("auto")
    produce_all(producer(c.broker(3).bootstrap), auto, [{"value": b"x"}])
    assert set(c.leaders(auto).values()) <= {1, 2, 3}

    # Produce and read back through the whole cluster: clients route to each leader.
    values = [b"v%05d" % i for i in range(600)]
    produce_all(producer(c.bootstrap), topic, ({"value": v} for v in values))
    got = read_all(c.bootstrap, topic, 6)
    assert sorted(r.value for rs in got.values() for r in rs) == values

    # A non-leader answers NOT_LEADER_OR_FOLLOWER (librdkafka would reroute, so use the
    # raw wire): broker 1 is asked to append to a partition broker 2 leads.
    p2 = min(led_by(leaders, 2))
    with w.KafkaConn(c.broker(1).bootstrap) as conn:
        body = conn.call(w.API_PRODUCE, 3, w.produce_body_v3_to_v8(topic, p2, w.record_batch([(None, b"x")])))
        assert w.parse_produce_response_v3_to_v8(body)[0] == ERR_NOT_LEADER_OR_FOLLOWER

    # REST Proxy consumer instances live on their group's coordinator: created through
    # another broker, the client is redirected there (307) and reads the whole topic.
    v2 = {"Content-Type": "application/vnd.kafka.v2+json"}
    http1 = c.broker(1).http
    for i in range(50):
        group = f"rest-{i}"
        r = requests.post(f"{http1}/consumers/{group}", headers=v2, json={"format": "binary", "auto.offset.reset": "earliest"}, allow_redirects=False, timeout=10)
        if r.status_code == 307:
            break
        assert r.status_code == 200, r.text
    else:
        raise AssertionError("no group of 50 is coordinated by brokers 2 or 3")
    coordinator_http = r.headers["Location"].split("/consumers/")[0]
    assert coordinator_http in {c.broker(2).http, c.broker(3).http}, r.headers["Location"]
    created = requests.post(f"{http1}/consumers/{group}", headers=v2, json={"format": "binary", "auto.offset.reset": "earliest"}, timeout=10)
    assert created.status_code == 200, created.text
    base = created.json()["base_uri"]
    assert base.startswith(coordinator_http), base
    assert requests.post(f"{base}/subscription", headers=v2, json={"topics": [topic]}, timeout=10).status_code == 204
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < len(values) and time.monotonic() < deadline:
        got = requests.get(f"{base}/records?timeout=1000", headers={"Accept": "application/vnd.kafka.binary.v2+json"}, timeout=10)
        assert got.status_code == 200, got.text
        seen += [base64.b64decode(rec["value"]) for rec in got.json()]
    assert sorted(seen) == values
    assert requests.delete(base, timeout=10).status_code == 204

    # REST produce through broker 1 reaches partitions other brokers lead (forwarded).
    recs = [{"value": base64.b64encode(b"h%03d" % i).decode(), "partition": i % 6} for i in range(60)]
    r = requests.post(f"{http1}/topics/{topic}", headers={"Content-Type": "application/vnd.kafka.binary.v2+json"}, json={"records": recs}, timeout=30)
    assert r.status_code == 200, r.text
    offsets = r.json()["offsets"]
    assert all(o.get("error_code") is None and o["offset"] >= 0 for o in offsets), offsets
    got = read_all(c.bootstrap, topic, 6)
    assert sorted(r.value for rs in got.values() for r in rs if r.value.startswith(b"h")) == [b"h%03d" % i for i in range(60)]


def test_kill9_moves_the_partitions_and_the_producer_recovers(cluster):
    """Placement and failover alone: everything acknowledged before the kill is sealed."""
    c = cluster(3, flush_interval=FLUSH)
    topic = create_topic(c.bootstrap, unique("kill"), 6)
    before = c.leaders(topic)
    prod = ProducerThread(c.bootstrap, topic, rate=300)
    prod.start()
    try:
        wait_until(lambda: prod.acked_count() > 300, timeout=20, what="first acks")
        prod.paused.set()
        time.sleep(SEAL_WAIT_S)
        victim = 3
        moved = led_by(before, victim)
        c.kill9(victim)
        killed_at = time.monotonic()
        prod.paused.clear()
        after = c.wait_leaders_on(topic, {1, 2}, timeout=15, partitions=6)
        moved_at = time.monotonic()
        wait_until(lambda: prod.acks_after(killed_at + 0.05, moved), timeout=20, what="an ack on a moved partition")
        first_ack = prod.acks_after(killed_at + 0.05, moved)[0]
        print(f"\nkill -9 → leaders moved in {moved_at - killed_at:.2f}s, "
              f"first ack on a moved partition {first_ack - killed_at:.2f}s after the kill")
        assert first_ack - killed_at < 3.0 + 5.0, "a partition accepts writes within 5 s of lease expiry"
        assert counts(after) == {1: 3, 2: 3}, after
        time.sleep(1)
    finally:
        left = prod.finish(60)
    assert left == 0
    assert not prod.errors, prod.errors[:3]
    summary = check_history([prod], read_all(c.live_bootstrap(), topic, 6))
    assert not summary["problems"], summary
    # The epochs moved with the leaders.
    described = c.describe(topic)
    epochs = {p["partition"]: p["leader_epoch"] for p in described["partitions"]}
    assert all(epochs[p] >= 1 for p in moved) and all(epochs[p] == 0 for p in set(range(6)) - moved), epochs


def test_kill9_under_load_loses_nothing(cluster):
    """kill -9 mid-stream: acknowledged writes still in the dead broker's WAL must be
    recovered by the new leaders from the WAL replicas (segment-writer recovery)."""
    c = cluster(3, flush_interval="250ms")
    topic = create_topic(c.bootstrap, unique("killload"), 6)
    prod = ProducerThread(c.bootstrap, topic, rate=400)
    prod.start()
    try:
        wait_until(lambda: prod.acked_count() > 400, timeout=20, what="first acks")
        c.kill9(2)
        c.wait_leaders_on(topic, {1, 3}, timeout=15, partitions=6)
        time.sleep(2)
    finally:
        left = prod.finish(60)
    assert left == 0
    summary = check_history([prod], read_all(c.live_bootstrap(), topic, 6))
    print(f"\n{summary}")
    assert not summary["problems"], summary


def test_sigterm_hands_partitions_over_without_client_errors(cluster):
    c = cluster(3, flush_interval=FLUSH)
    topic = create_topic(c.bootstrap, unique("term"), 6)
    prod = ProducerThread(c.bootstrap, topic, rate=300)
    prod.start()
    try:
        wait_until(lambda: prod.acked_count() > 300, timeout=20, what="first acks")
        t0 = time.monotonic()
        assert c.stop(1) == 0
        stopped = time.monotonic() - t0
        after = c.wait_leaders_on(topic, {2, 3}, timeout=5, partitions=6)
        assert counts(after) == {2: 3, 3: 3}, after
        moved_p = led_by(after, 2) | led_by(after, 3)
        wait_until(lambda: prod.acks_after(time.monotonic() - 0.5, moved_p), timeout=10, what="acks after the handoff")
        print(f"\nSIGTERM → exit 0 in {stopped:.2f}s with every partition handed over")
        time.sleep(1)
    finally:
        left = prod.finish(60)
    assert left == 0
    # Retries are allowed; errors surfacing to the application are not.
    assert not prod.errors, prod.errors[:3]
    summary = check_history([prod], read_all(c.live_bootstrap(), topic, 6))
    assert not summary["problems"], summary
    assert summary["duplicates"] == 0, summary
    # It deregistered: the cluster no longer lists it.
    assert {b["id"] for b in c.describe()["brokers"] if b["lease_alive"]} == {2, 3}


def test_a_new_broker_takes_its_share(cluster):
    c = cluster(3, flush_interval=FLUSH, zones=3)
    topic = create_topic(c.bootstrap, unique("join"), 12)
    prod = ProducerThread(c.bootstrap, topic, rate=300)
    prod.start()
    try:
        wait_until(lambda: prod.acked_count() > 200, timeout=20, what="first acks")
        t0 = time.monotonic()
        c.add_broker()
        after = wait_until(
            lambda: (lambda l: l if counts(l).get(4) == 3 and len(l) == 12 else None)(c.leaders(topic)),
            timeout=30,
            interval=0.1,
            what="broker 4 leading 3 partitions",
        )
        took = time.monotonic() - t0
        print(f"\na 4th broker took its share (3 of 12) {took:.2f}s after it started")
        assert counts(after) == {1: 3, 2: 3, 3: 3, 4: 3}, after
        mine = led_by(after, 4)
        wait_until(lambda: prod.acks_after(time.monotonic() - 0.5, mine), timeout=10, what="acks on broker 4")
    finally:
        left = prod.finish(60)
    assert left == 0
    assert not prod.errors, prod.errors[:3]
    summary = check_history([prod], read_all(c.bootstrap, topic, 12))
    assert not summary["problems"], summary


def coordinator_of(bootstrap: str, group: str) -> int:
    client = admin(bootstrap)  # keep a reference: a destroyed client fails its futures
    desc = client.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    return desc.coordinator.id


def surviving_coordinator(bootstrap: str, group: str, survivors: set[int]) -> int | None:
    """The group's coordinator if it is a survivor; None while the answer is still the dead
    broker (its lease has not ended) or the admin request timed out against it."""
    try:
        coord = coordinator_of(bootstrap, group)
    except KafkaException:
        return None
    return coord if coord in survivors else None


def test_coordinator_failover_keeps_committed_offsets(cluster):
    c = cluster(3, flush_interval=FLUSH)
    topic = create_topic(c.bootstrap, unique("grp"), 6)
    produce_all(producer(c.bootstrap), topic, ({"key": b"k%d" % i, "value": b"v%04d" % i} for i in range(600)))
    group = unique("g")
    # Coordinators are spread: every broker agrees on this group's coordinator.
    coords = {coordinator_of(b.bootstrap, group) for b in c.brokers}
    assert len(coords) == 1, coords

    consumer = Consumer({
        "bootstrap.servers": c.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
        "log_level": 3,
    })  # fmt: skip
    try:
        consumer.subscribe([topic])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < 300 and time.monotonic() < deadline:
            for m in consumer.consume(100, timeout=0.5):
                if m.error() is None:
                    seen.append(m.value())
        assert len(seen) >= 300, len(seen)
        consumer.commit(asynchronous=False)
        committed = {tp.partition: tp.offset for tp in consumer.committed(
            [TopicPartition(topic, p) for p in range(6)], timeout=10)}
        coordinator = coordinator_of(c.bootstrap, group)
        time.sleep(SEAL_WAIT_S)
        c.kill9(coordinator)
        t0 = time.monotonic()
        survivors = {1, 2, 3} - {coordinator}
        new_coord = wait_until(
            lambda: surviving_coordinator(c.live_bootstrap(), group, survivors),
            timeout=40, what="a new coordinator",
        )
        # The same consumer keeps going: it re-finds the coordinator, rejoins, and the
        # committed offsets are where they were.
        after = {tp.partition: tp.offset for tp in consumer.committed(
            [TopicPartition(topic, p) for p in range(6)], timeout=20)}
        print(f"\ncoordinator {coordinator} killed; broker {new_coord} coordinates after "
              f"{time.monotonic() - t0:.2f}s; committed offsets kept")
        assert after == committed
        deadline = time.monotonic() + 45
        while len(set(seen)) < 600 and time.monotonic() < deadline:
            for m in consumer.consume(100, timeout=0.5):
                if m.error() is None:
                    seen.append(m.value())
        assert len(set(seen)) == 600, len(set(seen))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    # A fresh member of the group starts from the commits: nothing left to read.
    fresh = Consumer({"bootstrap.servers": c.live_bootstrap(), "group.id": group, "enable.auto.commit": False,
                      "log_level": 3})
    try:
        final = fresh.committed([TopicPartition(topic, p) for p in range(6)], timeout=20)
        assert sum(tp.offset for tp in final) == 600, final
    finally:
        fresh.close()


def test_cli_describes_and_reassigns(cluster):
    c = cluster(3, flush_interval=FLUSH)
    topic = create_topic(c.bootstrap, unique("cli"), 4)
    leaders = c.leaders(topic)
    d = c.describe(topic)
    assert sorted(b["id"] for b in d["brokers"]) == [1, 2, 3]
    assert all(b["lease_alive"] for b in d["brokers"])
    assert sum(b["controller"] for b in d["brokers"]) == 1
    assert {b["id"]: b["partitions"] for b in d["brokers"]} == {b: n for b, n in
                                                               {1: 0, 2: 0, 3: 0, **counts(leaders)}.items()}
    text = c.cli("cluster", "describe", "--topic", topic).stdout
    assert "LeaderEpoch: 0" in text and "(controller)" in text, text

    # Move a partition of the broker leading two to one leading one: still balanced, so
    # the balancer leaves it there.
    src = next(b for b, n in counts(leaders).items() if n == 2)
    dst = next(b for b in (1, 2, 3) if counts(leaders).get(b, 0) == 1)
    part = min(led_by(leaders, src))
    produce_all(producer(c.bootstrap), topic, [{"value": b"before", "partition": part}])
    out = c.cli("partitions", "reassign", "--topic", topic, "--partition", str(part), "--to", str(dst), "--wait")
    assert f"led by broker {dst}" in out.stdout, out.stdout
    moved = {p["partition"]: p for p in c.describe(topic)["partitions"]}[part]
    assert moved["leader"] == dst and moved["leader_epoch"] == 1, moved
    produce_all(producer(c.bootstrap), topic, [{"value": b"after", "partition": part}])
    got = read_all(c.bootstrap, topic, 4)[part]
    assert [r.value for r in got] == [b"before", b"after"]
    assert c.cli("partitions", "list-reassignments").stdout.strip() == ""

    # A broker that does not exist is refused.
    bad = c.cli("partitions", "reassign", "--topic", topic, "--partition", "0", "--to", "99", check=False)
    assert bad.returncode != 0 and "99" in bad.stderr, bad.stderr
    json.loads(c.cli("cluster", "describe", "--json").stdout)


def test_wal_copies_of_a_broker_gone_for_good_are_dropped(cluster):
    """Once a dead broker leads nothing and no partition recovers from it, the WAL copies the
    others hold of it go (after --wal-copy-grace); copies of live brokers stay."""
    c = cluster(3, flush_interval=FLUSH, extra_args=["--wal-copy-grace", "2s"])
    topic = create_topic(c.bootstrap, unique("copies"), 6)
    produce_all(producer(c.bootstrap), topic, [{"value": b"x" * 100, "partition": i % 6} for i in range(600)])

    def copies_of(holder: int, source: int) -> bool:
        root = c.broker(holder).data_dir
        return any(p.is_dir() and p.name == f"b{source}" for p in root.rglob(f"b{source}"))

    wait_until(lambda: copies_of(1, 3) or copies_of(2, 3), timeout=20, what="a copy of broker 3's WAL")
    c.kill9(3)
    c.wait_leaders_on(topic, {1, 2}, timeout=20, partitions=6)
    wait_until(
        lambda: not copies_of(1, 3) and not copies_of(2, 3),
        timeout=60,
        what="broker 3's WAL copies dropped by the survivors",
    )
    # The survivors' copies of each other are still there (both are alive).
    assert copies_of(1, 2) or copies_of(2, 1)
    # Nothing acknowledged is lost by it.
    got = read_all(c.live_bootstrap(), topic, 6)
    assert sum(len(v) for v in got.values()) == 600


def test_admin_apis_across_the_cluster(cluster):
    """Issue 16's admin APIs on three brokers over etcd + S3: each partition's bytes are
    reported by its leader alone (WAL dir and bucket), an election is never needed while
    leaders live, and a manual assignment places a new partition on the broker named."""
    from confluent_kafka import ElectionType
    from confluent_kafka.admin import NewPartitions
    from kafka import KafkaAdminClient

    c = cluster(3, flush_interval=FLUSH)
    topic = create_topic(c.bootstrap, unique("admin"), 6)
    p = producer(c.bootstrap)
    for part in range(6):
        for i in range(20):
            p.produce(topic, value=b"y" * 512, partition=part)
    assert p.flush(30) == 0
    leaders = c.leaders(topic)

    def reported() -> dict[int, set[tuple[int, str]]]:
        """partition → {(broker, log dir)} holding bytes of it."""
        client = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=10000)
        try:
            described = client.describe_log_dirs()
        finally:
            client.close()
        out: dict[int, set[tuple[int, str]]] = {}
        for b in described:
            for d in b["log_dirs"]:
                for t in d["topics"]:
                    if t["name"] != topic:
                        continue
                    for part in t["partitions"]:
                        out.setdefault(part["partition_index"], set()).add((b["broker"], d["log_dir"]))
        return out

    seen: dict = {}

    def by_leaders() -> bool:
        seen["r"] = reported()
        return set(seen["r"]) == set(range(6)) and all(
            {broker for broker, _ in holders} == {leaders[part]} for part, holders in seen["r"].items()
        )

    wait_until(by_leaders, timeout=30, what=f"each partition reported by its leader {leaders}: {seen}")
    for part, holders in seen["r"].items():
        dirs = {d for _, d in holders}
        assert any(d.startswith("s3://") for d in dirs), (part, dirs)
        assert any(d.endswith("/wal") for d in dirs), (part, dirs)

    a = admin(c.bootstrap)
    elected = a.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, i) for i in range(6)]).result(30)
    assert {e.code() for e in elected.values()} == {84}, elected  # ELECTION_NOT_NEEDED

    a.create_partitions([NewPartitions(topic, 7, replica_assignment=[[2]])])[topic].result(30)
    wait_until(lambda: c.leaders(topic).get(6) == 2, timeout=20, what="partition 6 led by broker 2")
