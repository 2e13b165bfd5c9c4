"""Issue 16: transactional anomalies, Jepsen-style (the "txn"/"queue" workloads of
jepsen.io's Kafka and Redpanda analyses), bounded in time.

3 brokers, a real etcd, a real S3-compatible server (moto), `--flush-interval 100ms`.
Three transactional producers (each its own transactional.id) run a loop of
transactions; each transaction writes 2-4 unique values (`{producer}-{txn}-{i}`) to 2-3
partitions of a 6-partition topic (chosen per transaction) and then commits, or aborts on
purpose (1 in 5). Each transaction is recorded with its outcome:

- `committed`: commit_transaction returned success (an acknowledged commit);
- `aborted`: aborted on purpose, EndTxn(commit) never sent;
- `failed`: an error before commit_transaction was called, or the client crashed (was
  destroyed) before it (never committed);
- `zombie`: the client was left open while a new client with the same transactional.id
  started, then wrote one more value and committed: it must be fenced (its commit must
  fail: "fencing" violation otherwise) and nothing of it may be visible;
- `commit-aborted`: commit_transaction raised an abortable error
  (`txn_requires_abort()`) before any EndTxn(commit) could have taken effect, and
  abort_transaction then succeeded: definitely aborted;
- `indeterminate`: commit_transaction raised a fatal error (fenced, timed out...), a
  retriable error that outlasted its retries, an abortable error after EndTxn(commit) had
  been sent (librdkafka's "EndTxn failed with X but transaction had already failed"), or
  the abort after it failed. Either outcome is allowed, but all or nothing.

Some clients are crashed on purpose (destroyed before commit, or right after
EndTxn(commit) went out) or turned into zombies (above); the next client with the
transactional.id must end what they left. A nemesis kills -9 and restarts each broker in
turn and SIGSTOPs one past its session timeout (so partition leaders, transaction
coordinators and fetch sessions move) while the loops run. Producers start a new client
after fatal errors. A read_committed consumer
reads the topic throughout; afterwards, once no transaction is open, a fresh one reads it
all. Checked (every one is a violation):

- G1a aborted read: a value of a transaction that never sent its commit, or whose abort
  succeeded, is seen — by the final reader or by the one polling during the faults;
- G1b partial visibility: some but not all values of a transaction are visible;
- lost write: a value of an acknowledged commit is not visible;
- duplicate: a value appears more than once in the read_committed view;
- order: within a partition, one producer's values out of (txn, i) order; read_committed
  offsets not strictly increasing per partition;
- fencing: a zombie's commit_transaction succeeded;
- unstable read: what the consumer polling during the faults read of a partition differs
  from the final view (a value read at another offset, a value read and then gone, a
  value skipped by the poller).

Reproduce: the seed is printed (OXBOW_JEPSEN_SEED=N replays the same transaction plans and
nemesis schedule; client timing still varies). OXBOW_JEPSEN_TXN_NEMESIS (default
`kill,pause,kill,kill`) sets the fault cycles. A failure prints the summary, the first
violations and the nemesis history.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from cluster import SESSION_TIMEOUT, cluster, etcd_server, moto_server  # noqa: F401
from helpers import create_topic, unique, wait_until

pytestmark = pytest.mark.oxbow_only

PARTITIONS = 6
PRODUCERS = 3
ABORT_ONE_IN = 5
# Of the others, about 1 in 20 crashes its client before the commit, 1 in 20 while
# EndTxn(commit) is on its way (the next client, same transactional.id, must fence it),
# and 1 in 20 becomes a zombie: a new client with its transactional.id starts while it
# is still open, then the old one writes one more value and commits (it must be fenced,
# its transaction aborted).
CRASH_ONE_IN = 20
NEMESIS = os.environ.get("OXBOW_JEPSEN_TXN_NEMESIS", "kill,pause,kill,kill").split(",")
SESSION_S = float(SESSION_TIMEOUT.rstrip("s"))
# Client-side bounds (seconds). Generous: the machine is small and shared.
INIT_TIMEOUT = 30
COMMIT_TIMEOUT = 15
COMMIT_ATTEMPTS = 3
ABORT_TIMEOUT = 20

# Outcomes.
COMMITTED = "committed"
ABORTED = "aborted"
FAILED = "failed"
ZOMBIE = "zombie"  # written by a client after another with its transactional.id started
COMMIT_ABORTED = "commit-aborted"
INDETERMINATE = "indeterminate"
# Never committed: none of their values may ever be visible.
MUST_BE_INVISIBLE = {ABORTED, FAILED, COMMIT_ABORTED, ZOMBIE}


@dataclass
class Txn:
    producer: str
    n: int
    planned_abort: bool
    crash: str | None = None  # a client crash: "before-commit", "in-commit" or "zombie"
    planned: list[tuple[bytes, int]] = field(default_factory=list)  # (value, partition)
    values: list[tuple[bytes, int]] = field(default_factory=list)  # those enqueued
    outcome: str | None = None
    detail: str = ""
    abort_ok: bool | None = None
    zombie_acked: bool = False  # a fenced client's commit_transaction returned success


def value_of(producer: str, n: int, i: int) -> bytes:
    return b"%s-%06d-%d" % (producer.encode(), n, i)


def parse_value(v: bytes) -> tuple[str, int, int]:
    producer, n, i = v.decode().rsplit("-", 2)
    return producer, int(n), int(i)


def err_of(e: KafkaException) -> KafkaError:
    return e.args[0]


def describe(err: KafkaError) -> str:
    flags = [f for f, on in (("fatal", err.fatal()), ("retriable", err.retriable()), ("abortable", err.txn_requires_abort())) if on]
    return f"{err.name()} [{','.join(flags) or 'no flags'}]: {err.str()}"


class TxnProducer(threading.Thread):
    """One transactional.id running transactions until stopped; a new client after fatal
    errors (the new one's InitProducerId fences the old and ends what it left open)."""

    def __init__(self, bootstrap: str, topic: str, name: str, tid: str, seed: int):
        super().__init__(daemon=True, name=f"txn-{name}")
        self.bootstrap, self.topic, self.name, self.tid = bootstrap, topic, name, tid
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.txns: list[Txn] = []
        self.restarts = 0
        self.delivery_errors: Counter = Counter()
        self.crashes = 0
        self.t0 = time.monotonic()
        self.inits: list[tuple[float, float]] = []  # (start, seconds) of init_transactions
        self.errors: list[str] = []
        self.died: BaseException | None = None
        self.p: Producer | None = None

    def client(self) -> Producer:
        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": self.tid,
                "transaction.timeout.ms": 30000,
                "message.timeout.ms": 30000,
                "linger.ms": 5,
                # A SIGSTOPped broker accepts connections and never answers: give up on a
                # request (and look the coordinator/leader up again) sooner than 60 s.
                "socket.timeout.ms": 10000,
                "request.timeout.ms": 8000,
                "topic.metadata.refresh.interval.ms": 1000,
                "retry.backoff.ms": 50,
                "retry.backoff.max.ms": 500,
                "log_level": 3,
            }
        )
        t0 = time.monotonic()
        try:
            p.init_transactions(INIT_TIMEOUT)
        finally:
            self.inits.append((t0 - self.t0, time.monotonic() - t0))
        return p

    def drop_client(self, why: str) -> None:
        self.errors.append(f"restart: {why}")
        self.restarts += 1
        p, self.p = self.p, None
        if p is not None:
            try:
                p.purge()  # nothing of the broken client may be retried later
                p.flush(1)
            except Exception:
                pass
        time.sleep(0.3)

    def _dr(self, err, msg):
        if err is not None:
            self.delivery_errors[err.name()] += 1

    def crash_client(self, t: Txn) -> None:
        """The client process dies: no abort, no flush, no purge; whatever it had in flight
        is on its own. The next client's InitProducerId must fence it."""
        self.crashes += 1
        self.errors.append(f"crash: txn {t.n} {t.crash}: {t.outcome}{' ' + t.detail if t.detail else ''}")
        p, self.p = self.p, None
        del p  # rd_kafka_destroy (does not flush)

    def zombie(self, t: Txn) -> None:
        """t's records are written and its transaction open; a new client with the same
        transactional.id starts (its InitProducerId must abort t), then the old client
        writes one more value — to a partition of t on even t.n, to another one on odd —
        and commits. Nothing of t may become visible; the commit must fail."""
        old, self.p = self.p, None
        assert old is not None
        old.flush(COMMIT_TIMEOUT)
        try:
            self.p = self.client()
        except KafkaException as e:
            # Not fenced: t stays the old client's, uncommitted; drop it.
            t.outcome = FAILED
            t.detail = f"zombie: the new client failed to start ({describe(err_of(e))}); old one dropped"
            self.errors.append(f"txn {t.n}: {t.detail}")
            self.crashes += 1
            return
        mine = [part for _, part in t.values]
        others = [part for part in range(PARTITIONS) if part not in mine]
        extra = (value_of(self.name, t.n, len(t.planned)), mine[0] if t.n % 2 == 0 else others[0])
        t.outcome = ZOMBIE
        try:
            old.produce(self.topic, value=extra[0], partition=extra[1], on_delivery=self._dr)
            t.values.append(extra)
        except (KafkaException, BufferError) as e:
            t.detail += f"zombie produce: {e}; "
        try:
            old.commit_transaction(COMMIT_TIMEOUT)
            t.zombie_acked = True
            t.detail += "zombie commit acknowledged"
        except KafkaException as e:
            t.detail += f"zombie commit: {describe(err_of(e))}"
        self.crashes += 1
        self.errors.append(f"zombie: txn {t.n}: {t.detail}")
        del old

    def plan(self, n: int) -> Txn:
        """Decided before the transaction runs, from this producer's own seeded RNG, so a
        seed replays the same plans whatever the timing."""
        k = self.rng.randint(2, 3)
        parts = self.rng.sample(range(PARTITIONS), k)
        count = self.rng.randint(max(2, k), 4)
        abort = self.rng.randrange(ABORT_ONE_IN) == 0
        crash = self.rng.randrange(CRASH_ONE_IN)
        crash = None if abort or crash > 2 else ("before-commit", "in-commit", "zombie")[crash]
        return Txn(self.name, n, abort, crash, [(value_of(self.name, n, i), parts[i % k]) for i in range(count)])

    def run_one(self, t: Txn) -> None:
        p = self.p
        assert p is not None
        commit_sent = False
        try:
            p.begin_transaction()
            for v, part in t.planned:
                while True:
                    try:
                        p.produce(self.topic, value=v, partition=part, on_delivery=self._dr)
                        break
                    except BufferError:
                        p.poll(0.05)
                t.values.append((v, part))
                p.poll(0)
            if t.crash == "before-commit":
                p.poll(self.rng.uniform(0, 0.2))  # some of it on its way or written
                t.outcome = FAILED
                t.detail = "client crashed before commit"
                self.crash_client(t)
                return
            if t.crash == "in-commit":
                # Until every record is written, then EndTxn(commit) goes out and the
                # client dies before (or maybe after) the answer.
                commit_sent = True
                p.flush(COMMIT_TIMEOUT)
                try:
                    p.commit_transaction(0.002)
                    t.outcome = COMMITTED
                except KafkaException as e:
                    t.outcome = INDETERMINATE
                    t.detail = f"client crashed in commit: {describe(err_of(e))}"
                self.crash_client(t)
                return
            if t.crash == "zombie":
                self.zombie(t)
                return
            if t.planned_abort:
                try:
                    p.abort_transaction(ABORT_TIMEOUT)
                    t.abort_ok = True
                except KafkaException as e:
                    t.abort_ok = False
                    t.detail = f"abort: {describe(err_of(e))}"
                    raise
                finally:
                    t.outcome = ABORTED
                return
            last: KafkaError | None = None
            for _ in range(COMMIT_ATTEMPTS):
                commit_sent = True
                try:
                    p.commit_transaction(COMMIT_TIMEOUT)
                    t.outcome = COMMITTED
                    return
                except KafkaException as e:
                    last = err_of(e)
                    t.detail += f"commit: {describe(last)}; "
                    if last.retriable() and not last.fatal() and not last.txn_requires_abort():
                        continue  # librdkafka resumes the same commit
                    break
            assert last is not None
            if last.txn_requires_abort() and not last.fatal():
                # Definite only when the error is from before EndTxn(commit) went out (a
                # failed delivery). When librdkafka names EndTxn ("EndTxn commit failed:
                # X", "EndTxn failed with X but transaction had already failed locally")
                # the request was sent and may have taken effect, and an abort that then
                # succeeds (maybe by an epoch bump) does not prove it did not.
                endtxn_unknown = "EndTxn" in last.str()
                try:
                    p.abort_transaction(ABORT_TIMEOUT)
                    t.abort_ok = True
                    t.outcome = INDETERMINATE if endtxn_unknown else COMMIT_ABORTED
                    return
                except KafkaException as e2:
                    t.abort_ok = False
                    t.detail += f"abort: {describe(err_of(e2))}; "
                    t.outcome = INDETERMINATE
                    raise
            t.outcome = INDETERMINATE
            raise KafkaException(last)
        except KafkaException as e:
            err = err_of(e)
            if t.outcome is None:
                # Before commit_transaction: no EndTxn(commit) was ever sent for it.
                t.outcome = INDETERMINATE if commit_sent else FAILED
                t.detail += describe(err)
                if not commit_sent and err.txn_requires_abort() and not err.fatal():
                    try:
                        p.abort_transaction(ABORT_TIMEOUT)
                        t.abort_ok = True
                        return
                    except KafkaException as e2:
                        t.abort_ok = False
                        t.detail += f"; abort: {describe(err_of(e2))}"
            self.drop_client(f"txn {t.n}: {t.outcome}: {t.detail}")

    def run(self):
        try:
            n = 0
            while not self.stop.is_set():
                if self.p is None:
                    try:
                        self.p = self.client()
                    except KafkaException as e:
                        self.errors.append(f"init: {describe(err_of(e))}")
                        self.p = None
                        time.sleep(0.5)
                        continue
                t = self.plan(n)
                n += 1
                self.txns.append(t)
                self.run_one(t)
                time.sleep(self.rng.uniform(0.01, 0.05))
            # Leave nothing open: a fresh client's InitProducerId ends (fences) anything a
            # broken one left behind, so the last stable offset can reach the end.
            for _ in range(5):
                if self.p is not None:
                    break
                try:
                    self.p = self.client()
                except KafkaException as e:
                    self.errors.append(f"final init: {describe(err_of(e))}")
                    time.sleep(1)
        except BaseException as e:  # surfaced by the test
            self.died = e
        finally:
            # Closed here, not at garbage collection while the cluster is torn down.
            p, self.p = self.p, None
            if p is not None:
                try:
                    p.flush(10)
                except Exception:
                    pass
                del p

    def counts(self) -> Counter:
        return Counter(t.outcome for t in self.txns)


class Poller(threading.Thread):
    """A read_committed consumer assigned every partition from the beginning, polling
    while the nemesis runs and until told to stop; records (partition, offset, value)."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True, name="poller")
        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": unique("jepsen-txn-poll"),
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": 1000,
                "socket.timeout.ms": 10000,
                "fetch.wait.max.ms": 200,
                "log_level": 3,
            }
        )
        self.c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.seen: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        self.faults_over = threading.Event()
        self.during_faults = 0  # records read before the faults were over
        self.errors: list[str] = []
        self.died: BaseException | None = None

    def run(self):
        try:
            while not self.stop.is_set():
                for m in self.c.consume(500, 0.3):
                    if m.error():
                        self.errors.append(str(m.error()))
                        continue
                    with self.lock:
                        self.seen[m.partition()].append((m.offset(), m.value()))
                    if not self.faults_over.is_set():
                        self.during_faults += 1
        except BaseException as e:
            self.died = e
        finally:
            self.c.close()


def end_offsets(bootstrap: str, topic: str, isolation: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("ends"), "isolation.level": isolation, "log_level": 3})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in range(PARTITIONS)}
    finally:
        c.close()


def settled_ends(bootstrap: str, topic: str) -> dict[int, int] | None:
    """The log end offsets once no transaction is open anywhere (read_committed's end, the
    last stable offset, equals the high watermark on every partition)."""
    try:
        hw = end_offsets(bootstrap, topic, "read_uncommitted")
        lso = end_offsets(bootstrap, topic, "read_committed")
    except KafkaException:
        return None
    return hw if hw == lso else None


def read_committed_all(bootstrap: str, topic: str, ends: dict[int, int], timeout: float = 60) -> dict[int, list[tuple[int, bytes]]]:
    """Every read_committed record of every partition from the start to `ends`."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("jepsen-txn-final"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "log_level": 3,
        }
    )
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    pending = {p for p in range(PARTITIONS) if ends[p] > 0}
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                err = m.error()
                if err is not None:
                    # EOF carries the position: past the trailing markers, at the end.
                    if err.code() == KafkaError._PARTITION_EOF and m.offset() >= ends[m.partition()]:
                        pending.discard(m.partition())
                    continue
                out[m.partition()].append((m.offset(), m.value()))
        assert not pending, f"timed out after {timeout}s reading {topic}: partitions {sorted(pending)} short of {ends}"
        return out
    finally:
        c.close()


def check(txns: list[Txn], final: dict[int, list[tuple[int, bytes]]], polled: dict[int, list[tuple[int, bytes]]]) -> dict:
    violations: list[tuple[str, str]] = []
    by_value: dict[bytes, Txn] = {}
    for t in txns:
        for v, _ in t.values:
            by_value[v] = t

    # Offsets and order, per partition, in the final view.
    where: dict[bytes, list[tuple[int, int]]] = {}
    for part, recs in final.items():
        last_offset = -1
        last_pos: dict[str, tuple[int, int]] = {}
        for off, v in recs:
            if off <= last_offset:
                violations.append(("order", f"p{part}: offset {off} after {last_offset}"))
            last_offset = off
            where.setdefault(v, []).append((part, off))
            try:
                prod, n, i = parse_value(v)
            except ValueError:
                violations.append(("unexpected", f"p{part}@{off}: {v!r}"))
                continue
            if prod in last_pos and (n, i) < last_pos[prod]:  # equal: a duplicate, below
                violations.append(("order", f"p{part}@{off}: {v!r} after {prod}'s txn {last_pos[prod][0]} value {last_pos[prod][1]}"))
            last_pos[prod] = max((n, i), last_pos.get(prod, (-1, -1)))
    visible = set(where)

    for v, locs in where.items():
        if len(locs) > 1:
            violations.append(("duplicate", f"{v!r} at {locs}"))
        if v not in by_value:
            violations.append(("unexpected", f"{v!r} at {locs}: no transaction wrote it"))
        else:
            t = by_value[v]
            planned = dict(t.values)
            if planned[v] != locs[0][0]:
                violations.append(("unexpected", f"{v!r} at {locs}, produced to partition {planned[v]}"))

    visible_txns = Counter()
    for t in txns:
        if t.zombie_acked:
            violations.append(("fencing", f"txn {t.producer}/{t.n}: a fenced client's commit_transaction succeeded ({t.detail})"))
        if not t.values:
            continue
        seen = [v for v, _ in t.values if v in visible]
        missing = [v for v, _ in t.values if v not in visible]
        if seen:
            visible_txns[t.outcome] += 1
        if t.outcome in MUST_BE_INVISIBLE and seen:
            violations.append(
                ("G1a", f"{t.outcome} txn {t.producer}/{t.n} (abort_ok={t.abort_ok}, {t.detail or 'no error'}): "
                 f"visible {[(v, where[v]) for v in seen]}")
            )
        elif t.outcome == COMMITTED and missing:
            violations.append(("lost", f"committed txn {t.producer}/{t.n}: missing {missing}, visible {[(v, where[v]) for v in seen]}"))
        if seen and missing:
            violations.append(
                ("G1b", f"{t.outcome} txn {t.producer}/{t.n} ({t.detail or 'no error'}): visible {[(v, where[v]) for v in seen]}, "
                 f"missing {[(v, p) for v, p in t.values if v not in visible]}")
            )

    # What the consumer polling through the faults saw.
    final_at = {(part, off): v for part, recs in final.items() for off, v in recs}
    polled_count = 0
    for part, recs in polled.items():
        polled_count += len(recs)
        last_offset = -1
        for off, v in recs:
            t = by_value.get(v)
            if t is not None and t.outcome in MUST_BE_INVISIBLE:
                violations.append(("G1a", f"poller read {t.outcome} txn {t.producer}/{t.n} value {v!r} at p{part}@{off} ({t.detail or 'no error'})"))
            if off <= last_offset:
                violations.append(("order", f"poller: p{part}: offset {off} after {last_offset}"))
            last_offset = off
            if final_at.get((part, off)) != v:
                violations.append(("unstable", f"poller read {v!r} at p{part}@{off}; the final view has {final_at.get((part, off))!r} there"))
        # The poller ran to the end: it must have read exactly the final view.
        final_offsets = [off for off, _ in final[part]]
        polled_offsets = [off for off, _ in recs]
        if polled_offsets != final_offsets[: len(polled_offsets)]:
            skipped = sorted(set(final_offsets[: len(polled_offsets)]) - set(polled_offsets))
            extra = sorted(set(polled_offsets) - set(final_offsets))
            violations.append(
                ("unstable", f"poller's p{part} is not a prefix of the final view: skipped offsets {skipped[:10]}, "
                 f"offsets not in the final view {extra[:10]}")
            )
        elif len(polled_offsets) < len(final_offsets):
            violations.append(("unstable", f"poller stopped short on p{part}: {len(polled_offsets)} of {len(final_offsets)} records"))

    outcomes = Counter(t.outcome for t in txns)
    return {
        "txns": len(txns),
        "outcomes": dict(outcomes),
        "visible_txns": dict(visible_txns),
        "read": sum(len(r) for r in final.values()),
        "polled": polled_count,
        "violations": violations,
        "by_kind": dict(Counter(k for k, _ in violations)),
    }


def test_jepsen_transactions_under_kills_and_pauses(cluster):
    seed = int(os.environ.get("OXBOW_JEPSEN_SEED", str(random.randrange(1 << 32))))
    rng = random.Random(seed)
    print(f"\njepsen txn seed {seed} (nemesis {','.join(NEMESIS)}); replay with OXBOW_JEPSEN_SEED={seed}")
    c = cluster(3, flush_interval="100ms")
    topic = create_topic(c.broker(1).bootstrap, unique("jepsen-txn"), PARTITIONS)
    producers = [
        TxnProducer(c.bootstrap, topic, f"t{i}", unique(f"jepsen-tid{i}"), seed * 31 + i) for i in range(PRODUCERS)
    ]
    poller = Poller(c.bootstrap, topic)
    started = time.monotonic()

    def committed() -> int:
        return sum(p.counts()[COMMITTED] for p in producers)

    def progress(what: str) -> None:
        outcomes = sum((p.counts() for p in producers), Counter())
        outcomes.pop(None, None)  # running
        c.event(
            f"{what}: txns {dict(outcomes)}, restarts {sum(p.restarts for p in producers)}, "
            f"client crashes {sum(p.crashes for p in producers)}"
        )

    try:  # the poller is stopped (and its consumer closed) whatever happens
        try:
            poller.start()
            for p in producers:
                p.start()
            wait_until(lambda: committed() >= 30, timeout=60, what="first committed transactions")
            progress("steady")
            # Each broker in turn first, then at random.
            victims = rng.sample([1, 2, 3], 3) + [rng.choice([1, 2, 3]) for _ in range(max(0, len(NEMESIS) - 3))]
            for cycle, kind in enumerate(NEMESIS):
                victim = victims[cycle]
                if kind == "kill":
                    c.kill9(victim)
                    time.sleep(SESSION_S + 2)  # the lease lapses; partitions and coordinators move
                    c.restart(victim)
                elif kind == "pause":
                    c.pause(victim)
                    time.sleep(SESSION_S + 2)  # past the session timeout: fenced
                    c.resume(victim)
                else:
                    raise ValueError(f"unknown nemesis {kind!r}")
                time.sleep(2.5)  # back in the cluster; leadership may move back
                progress(f"cycle {cycle} ({kind} broker {victim}) done")
            time.sleep(1)
        finally:
            for i in range(1, 4):
                c.resume(i)
            for b in c.brokers:
                if not b.alive:
                    c.restart(b.broker_id)
            for p in producers:
                p.stop.set()
            for p in producers:
                p.join(90)
            c.event("producers stopped")
            poller.faults_over.set()
        run_s = time.monotonic() - started
        stuck = [p.name for p in producers if p.is_alive()]
        assert not stuck, f"seed {seed}: producers {stuck} did not stop within 90 s\nhistory:\n{c.history()}"
        for p in producers:
            assert p.died is None, f"seed {seed}: producer {p.name} crashed: {p.died!r}\nhistory:\n{c.history()}"

        # Settle: no transaction open (last stable offset = high watermark everywhere).
        ends = wait_until(lambda: settled_ends(c.bootstrap, topic), timeout=90, interval=1, what="no open transaction (LSO == HW)")
        c.event(f"settled: ends {ends}")
        # The poller must catch up with everything read_committed before it is compared.
        final = read_committed_all(c.bootstrap, topic, ends)
        final_counts = {p: len(r) for p, r in final.items()}
        try:
            wait_until(
                lambda: all(len(poller.seen[p]) >= final_counts[p] for p in range(PARTITIONS)),
                timeout=30,
                what="the poller caught up",
            )
        except AssertionError:
            pass  # reported as "stopped short" by the checker
    finally:
        poller.stop.set()
        poller.join(30)
    assert poller.died is None, f"poller crashed: {poller.died!r}"

    txns = [t for p in producers for t in p.txns]
    summary = check(txns, final, poller.seen)
    per_producer = ", ".join(f"{p.name}: {dict(p.counts())} restarts {p.restarts} crashes {p.crashes}" for p in producers)
    delivery_errors = sum((p.delivery_errors for p in producers), Counter())
    print(
        f"jepsen txn: {time.monotonic() - started:.0f}s ({run_s:.0f}s under faults), {summary['txns']} transactions "
        f"{summary['outcomes']}; visible transactions by outcome {summary['visible_txns']}; "
        f"{summary['read']} values read_committed, {summary['polled']} read by the poller ({poller.during_faults} of them while the faults ran)\n"
        f"  per producer: {per_producer}\n"
        f"  delivery errors {dict(delivery_errors)} (aborts purge theirs), poller errors {len(poller.errors)} {poller.errors[:3]}\n"
        f"  violations: {summary['by_kind'] or 'none'}"
    )
    for p in producers:
        slow = [f"{d:.1f}s@{t:.0f}s" for t, d in p.inits if d > 1]
        print(f"  {p.name}: {len(p.inits)} init_transactions, those over 1 s: {slow[:10]}")
        for e in p.errors[:12]:
            print(f"  {p.name} error: {e}")
    if summary["violations"]:
        pytest.fail(
            f"seed {seed}: {len(summary['violations'])} violations {summary['by_kind']}:\n  "
            + "\n  ".join(f"{k}: {d}" for k, d in summary["violations"][:15])
            + f"\nhistory:\n{c.history()}"
        )
    # The test must have exercised something.
    assert summary["outcomes"].get(COMMITTED, 0) >= 20, summary
    assert summary["outcomes"].get(ABORTED, 0) >= 3, summary


def test_checker_finds_each_anomaly():
    """The checker on a made-up history with one anomaly of each kind (no cluster): a
    checker that finds nothing would pass the test above vacuously."""

    def txn(producer, n, outcome, values):
        t = Txn(producer, n, False, None, list(values), list(values), outcome)
        return t

    v = value_of
    txns = [
        txn("t0", 0, COMMITTED, [(v("t0", 0, 0), 0), (v("t0", 0, 1), 1)]),  # fine
        txn("t0", 1, ABORTED, [(v("t0", 1, 0), 0), (v("t0", 1, 1), 1)]),  # G1a
        txn("t0", 2, INDETERMINATE, [(v("t0", 2, 0), 2), (v("t0", 2, 1), 3)]),  # G1b
        txn("t1", 0, COMMITTED, [(v("t1", 0, 0), 4), (v("t1", 0, 1), 5)]),  # lost + G1b
        txn("t1", 1, COMMITTED, [(v("t1", 1, 0), 4)]),  # duplicate
        txn("t2", 0, COMMITTED, [(v("t2", 0, 0), 2)]),
        txn("t2", 1, COMMITTED, [(v("t2", 1, 0), 2)]),  # order: before t2/0
        txn("t2", 2, INDETERMINATE, [(v("t2", 2, 0), 3)]),  # invisible: fine
        txn("t2", 3, ZOMBIE, [(v("t2", 3, 0), 5)]),  # fencing: its commit succeeded
    ]
    txns[-1].zombie_acked = True
    final = {
        0: [(0, v("t0", 0, 0)), (3, v("t0", 1, 0))],
        1: [(0, v("t0", 0, 1)), (2, v("t0", 1, 1))],
        2: [(0, v("t0", 2, 0)), (1, v("t2", 1, 0)), (2, v("t2", 0, 0))],
        3: [],
        4: [(0, v("t1", 0, 0)), (1, v("t1", 1, 0)), (2, v("t1", 1, 0))],
        5: [],
    }
    polled = {p: list(recs) for p, recs in final.items()}
    polled[3] = [(7, v("t2", 2, 0))]  # read, then gone
    polled[1] = [(2, v("t0", 1, 1))]  # skipped offset 0
    summary = check(txns, final, polled)
    print(summary["violations"])
    assert set(summary["by_kind"]) == {"G1a", "G1b", "lost", "duplicate", "order", "unstable", "fencing"}, summary["by_kind"]
    clean = check(txns[:1], {p: [r for r in final[p] if r[1] in dict(txns[0].values)] for p in final}, {p: [] for p in final})
    assert not [x for x in clean["violations"] if x[0] != "unstable"], clean["violations"]
