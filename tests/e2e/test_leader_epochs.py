"""Consumer groups across leader changes (issue 11, defect 1): after a leader change
librdkafka validates its position with OffsetForLeaderEpoch (KIP-320); a wrong answer makes
it report truncation and apply `auto.offset.reset`, skipping acknowledged records (`latest`)
or re-reading the partition (`earliest`).

Two groups, one with `auto.offset.reset=latest` and one with `earliest`, each a single
librdkafka member, read while an idempotent `acks=all` producer writes continuously. The
cluster test moves leadership every way Oxbow does: graceful moves
(`oxbow partitions reassign --wait`), a kill -9 of a leader (failover with WAL-tail
recovery) and the broker coming back (the balancer moves partitions back to it), and a
graceful broker restart (SIGTERM handoff, then the balancer again). The groups are
coordinated by a broker that is never touched, so no rebalance moves a position: every
acknowledged record of a consumer's range must be seen exactly once, in offset order, and
librdkafka must log no offset reset.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from cluster import ProducerThread, cluster, etcd_server, moto_server  # noqa: F401
import kafka_wire as w
from helpers import admin, create_topic, high_watermark, produce_all, producer, unique, wait_until

PARTITIONS = 6


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


class GroupConsumer(threading.Thread):
    """One member of `group`, recording every record it is given:
    `records[partition] = [(offset, value, leader_epoch), ...]` in delivery order, and every
    warning librdkafka logs (offset resets after a failed validation are logged at WARNING)."""

    def __init__(self, bootstrap: str, topic: str, group: str, reset: str):
        super().__init__(daemon=True)
        self.topic = topic
        self.group = group
        self.reset = reset
        self.log = logging.getLogger(f"e2e.rdkafka.{group}")
        self.log.propagate = False
        self.lines = _Lines()
        self.log.addHandler(self.lines)
        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": reset,
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 200,
                # Find a moved partition quickly (as the producer does).
                "topic.metadata.refresh.interval.ms": 1000,
                "session.timeout.ms": 30000,
                "log_level": 4,
                "on_commit": self._on_commit,
            },
            logger=self.log,
        )
        self.lock = threading.Lock()
        # partition -> [(offset, value, leader epoch, assignment number)] in delivery order
        self.records: dict[int, list[tuple[int, bytes, int, int]]] = defaultdict(list)
        self.errors: list[str] = []
        self.assignments = 0
        # partition -> highest offset committed (the next to read), and a copy of it taken at
        # each assignment: a new assignment legitimately resumes from the committed offset.
        self.committed: dict[int, int] = {}
        self.committed_at_assign: dict[int, dict[int, int]] = {}
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def _on_assign(self, consumer, partitions):
        with self.lock:
            self.assignments += 1
            self.committed_at_assign[self.assignments] = dict(self.committed)

    def _on_commit(self, err, partitions):
        if err is not None:
            return
        with self.lock:
            for tp in partitions:
                if tp.error is None and tp.offset >= 0:
                    self.committed[tp.partition] = max(self.committed.get(tp.partition, -1), tp.offset)

    def run(self):
        try:
            self.c.subscribe([self.topic], on_assign=self._on_assign)
            while not self.stop_event.is_set():
                for m in self.c.consume(num_messages=500, timeout=0.2):
                    if m.error() is not None:
                        self.errors.append(str(m.error()))
                        continue
                    epoch = m.leader_epoch()
                    with self.lock:
                        self.records[m.partition()].append(
                            (m.offset(), m.value(), -1 if epoch is None else epoch, self.assignments)
                        )
        except BaseException as e:  # surfaced by finish()
            self.error = e
        finally:
            self.c.close()

    def last_offsets(self) -> dict[int, int]:
        with self.lock:
            return {p: max(o for o, _, _, _ in r) for p, r in self.records.items() if r}

    def consumed(self) -> int:
        with self.lock:
            return sum(len(r) for r in self.records.values())

    def resets(self) -> list[str]:
        return [l for l in self.lines.lines if "offset reset" in l or "truncation" in l.lower()]

    def finish(self) -> None:
        self.stop_event.set()
        self.join(30)
        assert self.error is None, self.error


def caught_up(consumers: list[GroupConsumer], marks: dict[int, int], timeout: float = 60) -> None:
    """Until every consumer has read, in every partition, at least up to `marks[partition]`."""

    def ok():
        return all(c.last_offsets().get(p, -1) >= o for c in consumers for p, o in marks.items())

    def state():
        return [(c.group, c.assignments, c.last_offsets(), c.errors[-3:]) for c in consumers]

    try:
        wait_until(ok, timeout=timeout, interval=0.1, what=f"consumers to read up to {marks}")
    except AssertionError as e:
        raise AssertionError(f"{e}; consumers: {state()}") from None


def committed(consumers: list[GroupConsumer], marks: dict[int, int], timeout: float = 30) -> None:
    """Until every consumer's group has committed past `marks[partition]` everywhere, so a
    rebalance (its coordinator restarting) resumes after what it has read."""

    def ok():
        with_lock = []
        for c in consumers:
            with c.lock:
                with_lock.append(all(c.committed.get(p, -1) > o for p, o in marks.items()))
        return all(with_lock)

    wait_until(ok, timeout=timeout, interval=0.1, what=f"commits past {marks}")


def acked_marks(prod: ProducerThread) -> dict[int, int]:
    """The highest acknowledged offset per partition so far."""
    with prod.lock:
        marks: dict[int, int] = {}
        for _, p, o in prod.acked.values():
            marks[p] = max(marks.get(p, -1), o)
        return marks


def progress(consumers: list[GroupConsumer], prod: ProducerThread, after: float, timeout: float = 60) -> None:
    """Until the producer has acknowledged on every partition after `after` and every
    consumer has read past those acknowledgements."""

    def acked_everywhere():
        with prod.lock:
            return {p for t, p, _ in prod.acked.values() if t > after} >= set(range(PARTITIONS))

    wait_until(acked_everywhere, timeout=timeout, interval=0.1, what="acknowledgements on every partition")
    marks = acked_marks(prod)
    caught_up(consumers, marks, timeout)
    committed(consumers, marks, timeout)


def check(consumer: GroupConsumer, prod: ProducerThread, ends: dict[int, int], first_allowed: dict[int, int]) -> dict:
    """Every acknowledged record of the consumer's range, in offset order, with no skip and
    no rewind: within one assignment each partition's offsets go up by exactly one; a new
    assignment (a rebalance, e.g. after its coordinator restarted) may resume from the
    offset committed by then, as the group protocol does, never earlier and never later
    than the next offset; every acknowledged value is read at its acknowledged offset; and
    librdkafka logs no offset reset."""
    problems: list[str] = []
    acked_at = {(p, o): v for v, (_, p, o) in prod.acked.items()}
    with consumer.lock:
        records = {p: list(r) for p, r in consumer.records.items()}
        snapshots = dict(consumer.committed_at_assign)
    reread = 0
    for p in range(PARTITIONS):
        got = records.get(p, [])
        if not got:
            problems.append(f"partition {p}: nothing read")
            continue
        first = got[0][0]
        if first > first_allowed[p]:
            problems.append(f"partition {p}: started at {first}, after {first_allowed[p]}")
        expected = first
        generation = got[0][3]
        for offset, _, _, gen in got:
            if gen != generation:
                generation = gen
                committed = snapshots.get(gen, {}).get(p, first)
                if committed <= offset <= expected:
                    reread += expected - offset
                    expected = offset
            if offset != expected:
                kind = "skipped to" if offset > expected else "rewound to"
                problems.append(f"partition {p}: {kind} {offset} where {expected} was next (assignment {gen})")
                break
            expected = offset + 1
        if expected != ends[p]:
            problems.append(f"partition {p}: read up to {expected - 1}, the log ends at {ends[p] - 1}")
        values = {o: v for o, v, _, _ in got}
        wrong = [(o, values.get(o)) for (q, o), v in acked_at.items() if q == p and o >= first and values.get(o) != v]
        if wrong:
            problems.append(f"partition {p}: {len(wrong)} acknowledged records missing or different, e.g. {wrong[:3]}")
    resets = consumer.resets()
    if resets:
        problems.append(f"{len(resets)} offset resets, e.g. {resets[:2]}")
    return {
        "group": consumer.group,
        "reset": consumer.reset,
        "consumed": sum(len(r) for r in records.values()),
        "reread_after_rebalance": reread,
        "assignments": consumer.assignments,
        "epochs_seen": sorted({e for r in records.values() for _, _, e, _ in r}),
        "resets": len(resets),
        "problems": problems,
    }


def group_coordinated_by(bootstrap: str, broker_id: int, prefix: str) -> str:
    """A fresh group id whose coordinator is `broker_id` (rendezvous hashing over the live
    brokers: it stays there while that broker lives, whoever else comes and goes)."""
    client = admin(bootstrap)
    for i in range(200):
        group = f"{prefix}-{i}"
        desc = client.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
        if desc.coordinator.id == broker_id:
            return group
    raise AssertionError(f"no group of 200 is coordinated by broker {broker_id}")


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "oxbow-e2e-hw"})
    try:
        return {p: high_watermark(c, topic, p) for p in range(PARTITIONS)}
    finally:
        c.close()


def run_and_check(consumers, prod, bootstrap, topic, first_allowed):
    left = prod.finish(60)
    assert left == 0, f"{left} records undelivered"
    assert not prod.errors, prod.errors[:3]
    ends = high_watermarks(bootstrap, topic)
    caught_up(consumers, {p: e - 1 for p, e in ends.items()})
    for c in consumers:
        c.finish()
    summaries = [check(c, prod, ends, first_allowed[c.group]) for c in consumers]
    print(f"\nproduced {prod.sent}, acknowledged {prod.acked_count()}, log ends {sum(ends.values())}")
    for s in summaries:
        print(f"  {s}")
    for s in summaries:
        assert not s["problems"], s
    return summaries


@pytest.mark.oxbow_only
def test_groups_read_every_record_once_across_moves_failover_and_restart(cluster):
    c = cluster(3, flush_interval="250ms")
    topic = create_topic(c.bootstrap, unique("epochs"), PARTITIONS)
    # Broker 1 is never stopped: it coordinates both groups throughout.
    groups = {reset: group_coordinated_by(c.bootstrap, 1, unique(f"g-{reset}")) for reset in ("latest", "earliest")}
    consumers = [GroupConsumer(c.bootstrap, topic, g, reset) for reset, g in groups.items()]
    for gc in consumers:
        gc.start()
    wait_until(lambda: all(gc.assignments for gc in consumers), timeout=30, what="both groups assigned")
    prod = ProducerThread(c.bootstrap, topic, rate=300)
    prod.start()
    try:
        progress(consumers, prod, time.monotonic())
        # `latest` starts wherever the log ended when it joined; it must be reading before
        # the first leader change.
        first_allowed = {
            g: ({p: 0 for p in range(PARTITIONS)} if reset == "earliest" else acked_marks(prod))
            for reset, g in groups.items()
        }

        # (a) graceful moves: every partition to another broker, one by one.
        leaders = c.leaders(topic)
        for p in range(PARTITIONS):
            to = 1 + leaders[p] % 3
            c.cli("partitions", "reassign", "--topic", topic, "--partition", str(p), "--to", str(to), "--wait", timeout=60)
            c.event(f"moved {topic}[{p}] {leaders[p]} -> {to}")
        progress(consumers, prod, time.monotonic())

        # (b) kill -9 of a leader: its partitions fail over (tail recovered from its WAL
        # replicas); then it comes back and the balancer moves partitions back to it.
        c.kill9(2)
        c.wait_leaders_on(topic, {1, 3}, timeout=30, partitions=PARTITIONS)
        progress(consumers, prod, time.monotonic())
        c.restart(2)
        wait_until(lambda: 2 in c.leaders(topic).values() or None, timeout=60, what="broker 2 to lead again")
        progress(consumers, prod, time.monotonic())

        # (c) a graceful restart: SIGTERM hands everything over, the balancer gives the
        # restarted broker its share back.
        assert c.stop(3) == 0
        c.wait_leaders_on(topic, {1, 2}, timeout=30, partitions=PARTITIONS)
        progress(consumers, prod, time.monotonic())
        c.broker(3).start()
        c.event("started broker 3 again")
        wait_until(lambda: 3 in c.leaders(topic).values() or None, timeout=60, what="broker 3 to lead again")
        progress(consumers, prod, time.monotonic())
    finally:
        summaries = run_and_check(consumers, prod, c.live_bootstrap(), topic, first_allowed)
    # Leadership did change under the consumers: they read batches of several epochs.
    assert all(len(s["epochs_seen"]) >= 3 for s in summaries), summaries
    # ListOffsets gives the epoch of the offset it returns: the first epoch for the
    # earliest offset, the leader's current epoch for the latest.
    current = {p["partition"]: p["leader_epoch"] for p in c.describe(topic)["partitions"]}
    client = admin(c.live_bootstrap())
    for spec, want in ((OffsetSpec.earliest(), {p: 0 for p in current}), (OffsetSpec.latest(), current)):
        got = client.list_offsets({TopicPartition(topic, p): spec for p in current}, request_timeout=10)
        epochs = {tp.partition: f.result(timeout=15).leader_epoch for tp, f in got.items()}
        assert epochs == want, (spec, epochs, want)
    assert all(e >= 1 for e in current.values()), current


def test_groups_read_every_record_once_across_a_single_node_restart(broker_factory):
    """The embedded default (and, with OXBOW_E2E_TARGET=kafka, Apache Kafka, whose restart
    elects the broker again at a new epoch): a restart under both groups."""
    b = broker_factory()
    topic = create_topic(b.bootstrap, unique("epochs1"), PARTITIONS)
    groups = {reset: unique(f"g1-{reset}") for reset in ("latest", "earliest")}
    consumers = [GroupConsumer(b.bootstrap, topic, g, reset) for reset, g in groups.items()]
    for gc in consumers:
        gc.start()
    wait_until(lambda: all(gc.assignments for gc in consumers), timeout=30, what="both groups assigned")
    prod = ProducerThread(b.bootstrap, topic, rate=300)
    prod.start()
    first_allowed = {}
    try:
        progress(consumers, prod, time.monotonic())
        first_allowed = {
            g: ({p: 0 for p in range(PARTITIONS)} if reset == "earliest" else acked_marks(prod))
            for reset, g in groups.items()
        }
        b.restart(graceful=True)
        progress(consumers, prod, time.monotonic(), timeout=90)
        b.restart(graceful=False)
        progress(consumers, prod, time.monotonic(), timeout=90)
    finally:
        run_and_check(consumers, prod, b.bootstrap, topic, first_allowed)


API_OFFSET_FOR_LEADER_EPOCH = 23
ERR_UNKNOWN_TOPIC_OR_PARTITION = 3
ERR_UNKNOWN_LEADER_EPOCH = 75


def offset_for_leader_epoch_v3(conn, topic: str, asks: list[tuple[int, int, int]]) -> list[tuple[int, int, int, int]]:
    """OffsetForLeaderEpoch v3 for (partition, current_leader_epoch, leader_epoch) asks;
    returns (partition, error_code, leader_epoch, end_offset) per answer."""
    body = struct.pack(">i", -1) + struct.pack(">i", 1) + w.string(topic) + struct.pack(">i", len(asks))
    for partition, current, epoch in asks:
        body += struct.pack(">iii", partition, current, epoch)
    r = w.Reader(conn.call(API_OFFSET_FOR_LEADER_EPOCH, 3, body))
    r.int32()  # throttle_time_ms
    out = []
    for _ in range(r.int32()):
        r.string()
        for _ in range(r.int32()):
            code, partition, epoch, end = r.int16(), r.int32(), r.int32(), r.int64()
            out.append((partition, code, epoch, end))
    return out


def test_offset_for_leader_epoch_answers_as_kafka_does(broker):
    """The edges of the protocol on a fresh partition (leader epoch 0, like Kafka's): the
    current epoch ends at the log end; an undefined or newer epoch has no end (-1, -1, no
    error); a current_leader_epoch newer than the leader's is UNKNOWN_LEADER_EPOCH; an
    unknown partition is UNKNOWN_TOPIC_OR_PARTITION."""
    topic = create_topic(broker.bootstrap, unique("ofle"), 1)
    produce_all(producer(broker.bootstrap), topic, ({"value": b"v%d" % i} for i in range(7)))
    with w.KafkaConn(broker.bootstrap) as conn:
        got = offset_for_leader_epoch_v3(conn, topic, [(0, -1, 0), (0, 0, 0), (0, 0, 1), (0, -1, -1), (0, 1, 0), (5, -1, 0)])
    assert got == [
        (0, 0, 0, 7),
        (0, 0, 0, 7),
        (0, 0, -1, -1),
        (0, 0, -1, -1),
        (0, ERR_UNKNOWN_LEADER_EPOCH, -1, -1),
        (5, ERR_UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    ], got


API_FETCH = 1
ERR_OFFSET_OUT_OF_RANGE = 1


def fetch_v12(conn, topic: str, fetch_offset: int, last_fetched_epoch: int) -> dict:
    """One-partition Fetch v12 (flexible; `last_fetched_epoch` exists from v12). Returns the
    partition's error code, high watermark, record bytes and diverging epoch (tag 0)."""
    part = struct.pack(">iiqiqi", 0, -1, fetch_offset, last_fetched_epoch, -1, 1 << 20) + w.uvarint(0)
    body = struct.pack(">iiiibii", -1, 0, 1, 1 << 20, 0, 0, -1)
    body += w.uvarint(2) + w.compact_string(topic) + w.uvarint(2) + part + w.uvarint(0)
    body += w.uvarint(1) + w.compact_string("") + w.uvarint(0)
    r = w.Reader(conn.call(API_FETCH, 12, body, flexible=True))
    r.int32(), r.int16(), r.int32()  # throttle, error, session id
    assert r.uvarint() == 2 and r.compact_string() == topic and r.uvarint() == 2
    out = {"partition": r.int32(), "error": r.int16(), "high_watermark": r.int64()}
    r.int64(), r.int64()  # last stable offset, log start offset
    aborted = r.uvarint()
    assert aborted <= 1, "no aborted transactions here"
    r.int32()  # preferred read replica
    n = r.uvarint()
    out["records"] = b"" if n == 0 else r.take(n - 1)
    out["diverging"] = None
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        data = w.Reader(r.take(size))
        if tag == 0:
            out["diverging"] = (data.int32(), data.int64())
    return out


def test_fetch_checks_the_last_fetched_epoch_as_kafka_does(broker):
    """Fetch v12's `last_fetched_epoch` (KIP-595), on a fresh partition at epoch 0: a
    position within the epoch reads normally; a position past where that epoch ends gets a
    diverging epoch (the epoch and its end) and no records; an epoch newer than the
    leader's cannot be placed: OFFSET_OUT_OF_RANGE."""
    topic = create_topic(broker.bootstrap, unique("diverge"), 1)
    produce_all(producer(broker.bootstrap), topic, ({"value": b"v%d" % i} for i in range(5)))
    with w.KafkaConn(broker.bootstrap) as conn:
        within = fetch_v12(conn, topic, 2, 0)
        past = fetch_v12(conn, topic, 9, 0)
        newer = fetch_v12(conn, topic, 2, 1)
    assert (within["error"], within["diverging"], within["high_watermark"]) == (0, None, 5), within
    assert within["records"], within
    assert (past["error"], past["diverging"], past["records"]) == (0, (0, 5), b""), past
    assert newer["error"] == ERR_OFFSET_OUT_OF_RANGE, newer
