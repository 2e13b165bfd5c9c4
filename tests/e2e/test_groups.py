"""Consumer groups with real clients: librdkafka (confluent-kafka) subscribe() with the
eager and cooperative assignors, committed offsets, restarts, independent groups, static
membership, and a zombie member's commit refused on the wire."""

from __future__ import annotations

import struct
import threading
import time
from collections import defaultdict

import pytest
import requests
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from helpers import create_topic, produce_all, producer, unique, wait_until
from kafka_wire import KafkaConn, Reader, bytes_field, string

PARTITIONS = 12


def group_consumer(bootstrap: str, group: str, **conf) -> Consumer:
    base = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
        "log_level": 3,
    }
    base.update(conf)
    return Consumer(base)


class Member(threading.Thread):
    """A consumer in its own thread: processes each record, then commits it synchronously
    (commit-after-process), and records what it owns. A commit refused because a rebalance
    is completing (REBALANCE_IN_PROGRESS, or ILLEGAL_GENERATION when it raced the new
    generation — Kafka answers the same) is retried, at the latest
    in the revoke callback, where the group is stable again — so a partition never moves
    with processed-but-uncommitted records, and nothing is consumed twice."""

    def __init__(self, name, bootstrap, group, topic, seen, lock, **conf):
        super().__init__(daemon=True, name=name)
        self.c = group_consumer(bootstrap, group, **conf)
        self.topic = topic
        self.seen = seen
        self.lock = lock
        self.owned: set[int] = set()
        self.revoked_log: list[int] = []  # every partition ever revoked, in order
        self.pending: dict[int, int] = {}  # partition -> next offset not yet committed
        self.stop = threading.Event()
        self.errors: list = []
        self.cooperative = conf.get("partition.assignment.strategy") == "cooperative-sticky"

    def commit_pending(self, partitions=None, attempts=1):
        for p in list(partitions if partitions is not None else self.pending):
            if p not in self.pending:
                continue
            for _ in range(attempts):
                try:
                    self.c.commit(offsets=[TopicPartition(self.topic, p, self.pending[p])], asynchronous=False)
                    del self.pending[p]
                    break
                except KafkaException as e:
                    # Both mean "the group moved on while this commit was in flight": the
                    # offset stays pending and goes with the member's next generation.
                    if e.args[0].code() not in (KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION):
                        self.errors.append(e)
                        break
                    time.sleep(0.1)

    def on_assign(self, consumer, partitions):
        if self.cooperative:
            consumer.incremental_assign(partitions)
        self.owned |= {p.partition for p in partitions}

    def on_revoke(self, consumer, partitions):
        revoked = {p.partition for p in partitions}
        self.commit_pending(revoked, attempts=50)
        lost = revoked & set(self.pending)
        if lost:
            self.errors.append(f"could not commit {lost} before giving them up")
        if self.cooperative:
            consumer.incremental_unassign(partitions)
        self.owned -= revoked
        self.revoked_log.extend(sorted(revoked))

    def run(self):
        self.c.subscribe([self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke)
        try:
            while not self.stop.is_set():
                m = self.c.poll(0.1)
                if m is None:
                    self.commit_pending()
                    continue
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        self.errors.append(m.error())
                    continue
                with self.lock:
                    self.seen[(m.partition(), m.offset())].append(self.name)
                self.pending[m.partition()] = m.offset() + 1
                self.commit_pending([m.partition()])
            self.commit_pending(attempts=50)
        except Exception as e:  # surfaced by the test
            self.errors.append(e)
        finally:
            self.c.close()


def produce_n(bootstrap, topic, n, start=0):
    p = producer(bootstrap)
    produce_all(p, topic, ({"key": f"k{i % 97}".encode(), "value": f"v{i}".encode()} for i in range(start, start + n)))


def wait_seen(seen, lock, n, timeout=60):
    def done():
        with lock:
            return len(seen) >= n
    wait_until(done, timeout=timeout, what=f"{n} records consumed")


def wait_assigned(members, timeout=60):
    def complete():
        owned = [m.owned for m in members]
        union = set().union(*owned)
        return union == set(range(PARTITIONS)) and sum(len(o) for o in owned) == PARTITIONS
    wait_until(complete, timeout=timeout, what="every partition owned by exactly one member")


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
@pytest.mark.timeout(240)
def test_three_members_share_partitions_and_rebalance(shared_broker, strategy):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique(f"grp-{strategy[:4]}"), PARTITIONS)
    group = unique("g")
    seen: dict = defaultdict(list)
    lock = threading.Lock()
    conf = {"partition.assignment.strategy": strategy}
    members = [Member(f"m{i}", b, group, topic, seen, lock, **conf) for i in range(3)]
    for m in members:
        m.start()
    produce_n(b, topic, 1200)
    wait_seen(seen, lock, 1200)
    wait_assigned(members)

    # A member leaves: its partitions move to the others, consumption goes on.
    leaving = members.pop()
    leaving.stop.set()
    leaving.join(20)
    produce_n(b, topic, 1200, start=1200)
    wait_seen(seen, lock, 2400)
    wait_assigned(members)

    # A member joins: rebalance to three again.
    before = {m.name: (set(m.owned), len(m.revoked_log)) for m in members}
    joining = Member("m3", b, group, topic, seen, lock, **conf)
    joining.start()
    members.append(joining)
    wait_assigned(members)
    if strategy == "cooperative-sticky":
        # Incremental rebalancing: members give up only what moves, and keep consuming the rest.
        for m in members[:-1]:
            owned_before, mark = before[m.name]
            revoked = set(m.revoked_log[mark:])
            assert revoked < owned_before, f"{m.name} gave up {revoked} of {owned_before}"
            assert owned_before - revoked <= m.owned
    produce_n(b, topic, 600, start=2400)
    wait_seen(seen, lock, 3000)
    for m in members:
        m.stop.set()
    for m in members:
        m.join(20)
    errors = [e for m in members + [leaving] for e in m.errors]
    assert not errors, errors[:3]
    # Commit-after-process and no crash: every record consumed exactly once.
    dups = {k: v for k, v in seen.items() if len(v) > 1}
    assert len(seen) == 3000 and not dups, f"{len(seen)} distinct, duplicates: {list(dups.items())[:5]}"


@pytest.mark.oxbow_only
@pytest.mark.timeout(120)
def test_restarted_consumer_resumes_from_committed_offset(shared_broker):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("resume"), 1)
    group = unique("g")
    produce_n(b, topic, 100)
    c = group_consumer(b, group)
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 40 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        got.append(m.offset())
        c.commit(message=m, asynchronous=False)
    c.close()
    assert got == list(range(40))
    # Consumer lag per group and partition on /metrics: 100 produced, 40 committed.
    metrics = requests.get(f"{shared_broker.http}/metrics", timeout=10).text
    line = f'oxbow_consumer_group_lag{{group="{group}",topic="{topic}",partition="0"}} 60'
    assert line in metrics, [l for l in metrics.splitlines() if "lag" in l][:10]

    c = group_consumer(b, group)
    c.subscribe([topic])
    first = None
    deadline = time.monotonic() + 60
    while first is None and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            first = m.offset()
    committed = c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    c.close()
    assert first == 40, f"resumed at {first}, committed {committed}"
    assert committed == 40


@pytest.mark.timeout(120)
def test_two_groups_read_independently(shared_broker):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("two"), 3)
    produce_n(b, topic, 300)
    counts = {}
    for name in ("a", "b"):
        group = unique(f"g{name}")
        c = group_consumer(b, group)
        c.subscribe([topic])
        n = 0
        deadline = time.monotonic() + 60
        while n < 300 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                n += 1
        c.commit(asynchronous=False)
        c.close()
        counts[name] = n
    assert counts == {"a": 300, "b": 300}


@pytest.mark.timeout(120)
def test_static_member_restart_within_session_keeps_assignment(shared_broker):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("static"), 4)
    group = unique("g")
    seen: dict = defaultdict(list)
    lock = threading.Lock()
    members = [
        Member(f"s{i}", b, group, topic, seen, lock, **{"group.instance.id": f"inst-{i}", "session.timeout.ms": 10000})
        for i in range(2)
    ]
    for m in members:
        m.start()
    wait_until(lambda: set().union(*[m.owned for m in members]) == set(range(4)), timeout=60, what="assigned")
    before = {m.name: set(m.owned) for m in members}
    # Restart s1 with the same instance id: librdkafka sends no LeaveGroup for static members.
    members[1].stop.set()
    members[1].join(20)
    again = Member("s1", b, group, topic, seen, lock, **{"group.instance.id": "inst-1", "session.timeout.ms": 10000})
    again.start()
    wait_until(lambda: again.owned, timeout=30, what="static member reassigned")
    time.sleep(1.0)  # let any (unexpected) rebalance of the other member show
    assert again.owned == before["s1"], "the static member got its old partitions back"
    assert members[0].owned == before["s0"], "the other member kept its partitions (no rebalance)"
    again.stop.set()
    members[0].stop.set()
    again.join(20)
    members[0].join(20)


# -- the wire: a zombie member's commit -------------------------------------------


def join_v0(conn, group, member_id=""):
    body = string(group) + struct.pack(">i", 10000) + string(member_id) + string("consumer")
    body += struct.pack(">i", 1) + string("range") + bytes_field(b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")
    r = Reader(conn.call(11, 0, body, timeout=30))
    error, generation = r.int16(), r.int32()
    _protocol, leader, member = r.string(), r.string(), r.string()
    return error, generation, leader, member


def sync_v0(conn, group, generation, member, assign_self=True):
    body = string(group) + struct.pack(">i", generation) + string(member)
    body += struct.pack(">i", 1) + string(member) + bytes_field(b"") if assign_self else struct.pack(">i", 0)
    r = Reader(conn.call(14, 0, body, timeout=30))
    return r.int16()


def commit_v2(conn, group, generation, member, topic):
    body = string(group) + struct.pack(">i", generation) + string(member) + struct.pack(">q", -1)
    body += struct.pack(">i", 1) + string(topic) + struct.pack(">i", 1)
    body += struct.pack(">i", 0) + struct.pack(">q", 5) + string("")
    r = Reader(conn.call(8, 2, body))
    assert r.int32() == 1
    r.string()
    assert r.int32() == 1
    r.int32()
    return r.int16()


@pytest.mark.timeout(120)
def test_zombie_member_with_stale_generation_cannot_commit(shared_broker):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("zombie"), 1)
    group = unique("g")
    with KafkaConn(b) as conn:
        err, gen1, leader, member = join_v0(conn, group)
        assert err == 0 and leader == member
        assert sync_v0(conn, group, gen1, member) == 0
        assert commit_v2(conn, group, gen1, member, topic) == 0
        # Rejoin starts generation 2; the old generation is a zombie's.
        err, gen2, _, member2 = join_v0(conn, group, member)
        assert err == 0 and gen2 == gen1 + 1 and member2 == member
        # While generation 2 completes, any commit is told to retry (as Kafka does).
        assert commit_v2(conn, group, gen1, member, topic) == 27  # REBALANCE_IN_PROGRESS
        assert sync_v0(conn, group, gen2, member) == 0
        assert commit_v2(conn, group, gen1, member, topic) == 22  # ILLEGAL_GENERATION
        assert commit_v2(conn, group, gen2, "not-a-member", topic) == 25  # UNKNOWN_MEMBER_ID
        assert commit_v2(conn, group, gen2, member, topic) == 0


@pytest.mark.oxbow_only
@pytest.mark.timeout(180)
def test_group_keeps_committed_offsets_across_a_coordinator_crash(broker_factory):
    """kill -9 of the coordinator (the only broker here): the consumer re-finds it after the
    restart, rejoins, and continues from its committed offsets — nothing consumed twice."""
    b = broker_factory()
    topic = create_topic(b.bootstrap, unique("crash"), 4)
    group = unique("g")
    produce_n(b.bootstrap, topic, 400)
    seen: dict = defaultdict(list)
    lock = threading.Lock()
    m = Member("m0", b.bootstrap, group, topic, seen, lock)
    m.start()
    wait_seen(seen, lock, 400)
    # Let the last commit land before the crash.
    wait_until(lambda: not m.pending, timeout=30, what="commits acknowledged")
    b.restart(graceful=False)
    produce_n(b.bootstrap, topic, 400, start=400)
    wait_seen(seen, lock, 800, timeout=90)
    m.stop.set()
    m.join(30)
    twice = {k: v for k, v in seen.items() if len(v) > 1}
    assert not twice, f"re-consumed after the restart: {list(twice)[:5]}"


KILLED_CONSUMER = r'''
import sys
from confluent_kafka import Consumer
bootstrap, group, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "log_level": 3})
c.subscribe([topic])
done = 0
while done < n:
    m = c.poll(0.2)
    if m is None or m.error():
        continue
    c.commit(message=m, asynchronous=False)
    done += 1
print("committed", done, flush=True)
import time
time.sleep(600)  # killed here, without leaving the group
'''


@pytest.mark.timeout(120)
def test_killed_consumer_is_replaced_and_its_successor_resumes_from_the_commit(shared_broker, tmp_path):
    """kill -9 of a consumer (no LeaveGroup): the group notices within its session timeout,
    and a new member starts from the committed offset."""
    import subprocess
    import sys

    b = shared_broker.bootstrap
    topic = create_topic(b, unique("killed"), 1)
    group = unique("g")
    produce_n(b, topic, 100)
    script = tmp_path / "consumer.py"
    script.write_text(KILLED_CONSUMER)
    proc = subprocess.Popen([sys.executable, str(script), b, group, topic, "30"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "committed 30", line
    finally:
        proc.kill()
        proc.wait(10)
    c = group_consumer(b, group)
    c.subscribe([topic])
    first = None
    started = time.monotonic()
    while first is None and time.monotonic() - started < 60:
        m = c.poll(0.2)
        if m is not None and not m.error():
            first = m.offset()
    c.close()
    assert first == 30, f"successor started at {first}"
