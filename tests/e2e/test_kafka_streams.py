"""Issue 16: Apache Kafka Streams with processing.guarantee=exactly_once_v2 end to end.

A word count (streams_eos/WordCount.java: input -> flatMapValues -> groupBy(word), a
repartition topic -> count(), a compacted changelog -> output) runs against the broker while
the test produces a known, deterministic multiset of words. Its output, read as a
read_committed consumer sees it, must converge to the true count of every word, and at no
read may a word's committed count exceed the number of its occurrences produced so far, nor
may a word's committed counts be anything but 1, 2, 3, ... (every increment is emitted
once: no repeat, no gap). Then the same after a disruption in the middle of the stream:

- the application instance is killed (SIGKILL) mid-stream while input keeps arriving, and
  restarted with the same application.id and state dir (an unclean EOS shutdown makes it
  wipe its local state and restore from the changelog);
- the broker is killed (SIGKILL) mid-stream and restarted on the same data, the
  application staying up.

An input record processed twice would overshoot the final count, one lost would undershoot.

What Streams asks of the broker here (its clients' requests, seen with
STREAMS_E2E_NETWORK_DEBUG=1): CreateTopics for the internal topics (the repartition topic
with cleanup.policy=delete, retention.ms=-1, segment.bytes, message.timestamp.type=CreateTime;
the changelog with cleanup.policy=compact), Metadata, DescribeCluster,
DescribeTopicPartitions, ListOffsets, the classic group protocol (FindCoordinator, JoinGroup,
SyncGroup, Heartbeat, OffsetFetch), InitProducerId, transactions of protocol 2 (KIP-890:
transaction.version 2 is finalized on both, so partitions are added by Produce v12 and the
group by TxnOffsetCommit v5, with the group's generation for EOS v2 fencing, and EndTxn v5
bumps the epoch), read_committed Fetch, OffsetForLeaderEpoch, and DeleteRecords
on the repartition topic after commits (repartition.purge.interval.ms, 1 s here).

The Java program is compiled at test time against .tools/kafka/libs (kafka-streams comes with
the suite's jars, scripts/test.sh setup). The jars carry no SLF4J binding, so the
application logs nothing but its own lines; to see the clients' logs put one on the class
path: STREAMS_E2E_EXTRA_CP=/path/to/log4j-slf4j-impl-2.24.3.jar (and, for every request the
clients send, STREAMS_E2E_NETWORK_DEBUG=1).
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import signal
import struct
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from brokers import KAFKA_LIBS
from helpers import create_topic, produce_all, producer, run, unique, wait_until

SRC = Path(__file__).parent / "streams_eos" / "WordCount.java"
VOCAB = [
    "alder", "birch", "cedar", "elm", "fir", "hazel", "larch", "maple",
    "oak", "pine", "rowan", "spruce", "willow", "yew",
]  # fmt: skip
PARTITIONS = 3
APP_MAX_S = 240  # the application closes itself after this, whatever happens to the test
START_TIMEOUT_S = 90  # JVM start, internal topics, first rebalance
CONVERGE_TIMEOUT_S = 90


def make_lines(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(VOCAB) for _ in range(rng.randint(1, 6))) for _ in range(n)]


def word_counts(lines) -> Counter:
    return Counter(w for line in lines for w in line.split())


# -- the Java application ---------------------------------------------------------------

_LIVE_APPS: list["StreamsApp"] = []


@atexit.register
def _kill_live_apps():
    for app in list(_LIVE_APPS):
        app.kill9()


@pytest.fixture(scope="module")
def wordcount_classes(tmp_path_factory):
    if shutil.which("javac") is None:
        pytest.fail("javac not found (a JDK is needed to compile the Streams application)")
    if not any(KAFKA_LIBS.glob("kafka-streams-[0-9]*.jar")):
        pytest.fail(f"no kafka-streams jar in {KAFKA_LIBS}: run `scripts/test.sh setup`")
    out = tmp_path_factory.mktemp("wordcount-classes")
    run(["javac", "-cp", f"{KAFKA_LIBS}/*", "-d", str(out), str(SRC)], timeout=120)
    return out


class StreamsApp:
    """One instance of WordCount; every start writes a log of its own (app-<n>.log)."""

    def __init__(self, classes: Path, workdir: Path, bootstrap: str, app_id: str, input: str, output: str):
        self.classes, self.workdir = classes, workdir
        self.bootstrap, self.app_id, self.input, self.output = bootstrap, app_id, input, output
        self.state_dir = workdir / "state"
        self.stop_file = workdir / "stop"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.log_path: Path | None = None
        self.log4j = workdir / "log4j2.properties"
        network_debug = os.environ.get("STREAMS_E2E_NETWORK_DEBUG") == "1"
        self.log4j.write_text(
            "status = error\n"
            "appender.out.type = Console\n"
            "appender.out.name = STDOUT\n"
            "appender.out.layout.type = PatternLayout\n"
            "appender.out.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = INFO\n"
            "rootLogger.appenderRef.out.ref = STDOUT\n"
            + (
                "logger.nc.name = org.apache.kafka.clients.NetworkClient\nlogger.nc.level = DEBUG\n"
                if network_debug
                else ""
            )
        )

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> "StreamsApp":
        assert not self.alive
        self.stop_file.unlink(missing_ok=True)
        self.starts += 1
        self.log_path = self.workdir / f"app-{self.starts}.log"
        cp = [str(self.classes), f"{KAFKA_LIBS}/*"]
        if os.environ.get("STREAMS_E2E_EXTRA_CP"):
            cp.append(os.environ["STREAMS_E2E_EXTRA_CP"])
        cmd = [
            "java", "-Xms128m", "-Xmx384m",
            f"-Dlog4j2.configurationFile={self.log4j}",
            "-cp", ":".join(cp),
            "WordCount", self.bootstrap, self.app_id, self.input, self.output,
            str(self.state_dir), str(self.stop_file), str(APP_MAX_S),
        ]  # fmt: skip
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        _LIVE_APPS.append(self)
        return self

    def wait_running(self, timeout: float = START_TIMEOUT_S) -> None:
        def running():
            if self.proc.poll() is not None:
                raise AssertionError(f"WordCount exited with {self.proc.returncode} before RUNNING\n{self.log_tail()}")
            return "RUNNING" in self.log_path.read_text(errors="replace").splitlines()

        try:
            wait_until(running, timeout=timeout, interval=0.2, what="WordCount to reach RUNNING")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.log_tail()}") from None

    def kill9(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        if self in _LIVE_APPS:
            _LIVE_APPS.remove(self)

    def stop(self, timeout: float = 45) -> int:
        """Clean close through the stop file; SIGKILL (and fail) when it takes too long."""
        if self.proc is None:
            return 0
        if self.alive:
            self.stop_file.touch()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
                raise AssertionError(f"WordCount did not close within {timeout}s\n{self.log_tail()}") from None
        self.kill9()
        return self.proc.returncode

    def log_tail(self, lines: int = 60) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no application log)"
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return f"--- last {lines} lines of {self.log_path}:\n" + "\n".join(tail)


@pytest.fixture
def streams_app(broker_factory, wordcount_classes, tmp_path):
    """A factory of WordCount instances; each is stopped (killed if need be) at teardown,
    before the broker (this fixture depends on broker_factory, so it is torn down first)."""
    apps: list[StreamsApp] = []

    def make(bootstrap: str, app_id: str, input: str, output: str) -> StreamsApp:
        workdir = tmp_path / f"app{len(apps)}"
        workdir.mkdir()
        app = StreamsApp(wordcount_classes, workdir, bootstrap, app_id, input, output)
        apps.append(app)
        return app

    yield make
    for app in apps:
        try:
            app.stop(timeout=20)
        except AssertionError:
            pass  # teardown: only make sure it is gone
        finally:
            app.kill9()


# -- reading the output ------------------------------------------------------------------


def read_output(bootstrap: str, topic: str, isolation: str = "read_committed", timeout: float = 30) -> dict[str, list[int]]:
    """Every count in `topic` per word, in offset order, from the beginning up to the end seen
    when the read began (for read_committed: the last stable offset then). A partition is done
    at that end or at an EOF. (librdkafka reports no EOF under read_committed while a
    transaction stays open, and the application always has one open while it works.) A word
    lives in one partition, so what is read of each word is a prefix of its counts."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("streams-reader"),
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "log_level": 3,
        }
    )
    out: dict[str, list[int]] = {}
    deadline = time.monotonic() + timeout
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        ends = {tp.partition: c.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in tps}
        pending = {p for p, end in ends.items() if end > 0}
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        while pending:
            assert time.monotonic() < deadline, f"reading {topic} ({isolation}) took over {timeout}s: {pending} short of {ends}"
            for m in c.consume(num_messages=10000, timeout=0.2):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        pending.discard(m.partition())
                        continue
                    raise KafkaException(m.error())
                (count,) = struct.unpack(">q", m.value())
                out.setdefault(m.key().decode(), []).append(count)
                if m.offset() + 1 >= ends[m.partition()]:
                    pending.discard(m.partition())
            # The position passes control records (commit markers) and aborted records too.
            for tp in c.position([TopicPartition(topic, p) for p in pending]):
                if tp.offset >= ends[tp.partition]:
                    pending.discard(tp.partition)
    finally:
        c.close()
    return out


def check_committed_view(view: dict[str, list[int]], produced: Counter) -> None:
    """What exactly-once promises of any read_committed read. The application forwards every
    increment (no record cache), so a word's committed counts are exactly 1, 2, ..., k with
    k <= its occurrences produced so far: a repeated count is an input (or a repartition
    record) processed twice, a count above the produced occurrences an input counted twice,
    a gap an update lost."""
    for word, seq in view.items():
        assert word in produced, f"a count for {word!r}, a word never produced"
        assert max(seq) <= produced[word], (
            f"{word!r}: committed count {max(seq)} > {produced[word]} occurrences produced so far "
            f"(an input counted twice); last counts {seq[-8:]}"
        )
        bad = next((i for i, n in enumerate(seq) if n != i + 1), None)
        assert bad is None, (
            f"{word!r}: committed counts are not 1, 2, 3, ...: at index {bad}: {seq[max(0, bad - 4) : bad + 4]}"
        )


def wait_converged(bootstrap: str, topic: str, produced: Counter, app: StreamsApp, timeout: float = CONVERGE_TIMEOUT_S):
    """Read the committed output until every word's latest count is its true count, checking
    each read on the way."""
    deadline = time.monotonic() + timeout
    reads = 0
    while True:
        view = read_output(bootstrap, topic)
        reads += 1
        check_committed_view(view, produced)
        latest = {w: seq[-1] for w, seq in view.items()}
        if latest == dict(produced):
            return view, reads
        if time.monotonic() > deadline:
            behind = {w: (latest.get(w), n) for w, n in produced.items() if latest.get(w) != n}
            raise AssertionError(
                f"output did not converge within {timeout}s ({reads} reads); (latest, true) where they differ: "
                f"{behind}\napp alive: {app.alive}\n{app.log_tail()}"
            )
        if not app.alive:
            raise AssertionError(f"WordCount exited ({app.proc.returncode}) before the output converged\n{app.log_tail()}")
        time.sleep(0.5)


# -- the scenarios ---------------------------------------------------------------------------


@pytest.fixture
def streams_broker(broker_factory, java):
    # Timed-out transactions (a killed instance's) are looked for every second, not every 10 s.
    b = broker_factory(
        name="streams",
        extra_args=["--transaction-abort-check-interval", "1s"],
        kafka_props={"transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000},
    )
    return b


PHASE1_LINES = 2000
CHUNK = 100
PHASE2_CHUNKS = 30  # 3,000 more lines around the disruption
CHUNK_PAUSE_S = 0.15  # phase 2 takes ~5 s to produce: the disruption lands in the middle


class Feeder(threading.Thread):
    """Produces lines[start:] in chunks, counting each chunk's words into `produced` before
    sending it (so `produced` bounds whatever the application may have seen)."""

    def __init__(self, p, topic: str, lines: list[str], start: int, produced: Counter):
        super().__init__(daemon=True, name="feeder")
        self.p, self.topic, self.lines, self.sent, self.produced = p, topic, lines, start, produced
        self.lock = threading.Lock()
        self.stopping = False
        self.error: BaseException | None = None

    def snapshot(self) -> Counter:
        with self.lock:
            return Counter(self.produced)

    def run(self):
        try:
            while self.sent < len(self.lines) and not self.stopping:
                chunk = self.lines[self.sent : self.sent + CHUNK]
                with self.lock:
                    self.produced.update(word_counts(chunk))
                produce_all(self.p, self.topic, [{"value": line.encode()} for line in chunk], timeout=90)
                self.sent += len(chunk)
                time.sleep(CHUNK_PAUSE_S)
        except BaseException as e:
            self.error = e

    def finish(self, timeout: float) -> None:
        """Wait for the rest to be produced (all of it unless `stopping` was set)."""
        self.join(timeout)
        assert not self.is_alive(), f"the input feeder did not finish within {timeout}s ({self.sent} lines sent)"
        if self.error is not None:
            raise AssertionError(f"the input feeder failed after {self.sent} lines: {self.error!r}") from self.error


@pytest.mark.parametrize("disruption", ["app-kill9", "broker-kill9"])
def test_streams_word_count_exactly_once_v2(streams_broker, streams_app, disruption):
    t0 = time.monotonic()
    bootstrap = streams_broker.bootstrap
    input_topic = create_topic(bootstrap, unique("streams-in"), PARTITIONS)
    output_topic = create_topic(bootstrap, unique("streams-out"), PARTITIONS)
    app_id = unique("wordcount")
    lines = make_lines(16, PHASE1_LINES + PHASE2_CHUNKS * CHUNK)
    p = producer(bootstrap)  # idempotent: the input itself holds each line exactly once

    # Phase 1: a backlog of 2,000 lines, then the application; all of it counted once.
    produce_all(p, input_topic, [{"value": line.encode()} for line in lines[:PHASE1_LINES]])
    produced = word_counts(lines[:PHASE1_LINES])
    app = streams_app(bootstrap, app_id, input_topic, output_topic).start()
    app.wait_running()
    _, reads = wait_converged(bootstrap, output_topic, produced, app)
    print(f"\nphase 1: {PHASE1_LINES} lines counted exactly once at t+{time.monotonic() - t0:.1f}s ({reads} reads)")

    # Phase 2: 3,000 more lines arrive in chunks from a thread of their own, and the
    # disruption lands while they do, once the application has counted some of them: it is
    # busy then, with a transaction open (repartition, changelog and output records in it).
    feeder = Feeder(p, input_topic, lines, PHASE1_LINES, produced)
    phase1_words = sum(produced.values())

    def progressed():
        view = read_output(bootstrap, output_topic)
        check_committed_view(view, feeder.snapshot())
        return sum(seq[-1] for seq in view.values()) > phase1_words

    feeder.start()
    try:
        wait_until(progressed, timeout=60, interval=0.1, what="the application to count some of the new input")
        if disruption == "app-kill9":
            app.kill9()
            print(f"killed the application (SIGKILL) at t+{time.monotonic() - t0:.1f}s, {feeder.sent} lines produced")
            time.sleep(1)  # input keeps arriving while it is down
            app.start()
            app.wait_running()
            print(f"application restarted (same application.id and state dir) at t+{time.monotonic() - t0:.1f}s")
        else:
            streams_broker.kill9()
            print(f"killed the broker (SIGKILL) at t+{time.monotonic() - t0:.1f}s, {feeder.sent} lines produced")
            streams_broker.start()
            print(f"broker restarted on the same data at t+{time.monotonic() - t0:.1f}s")
            assert app.alive, f"WordCount died with the broker\n{app.log_tail()}"
    except BaseException:
        feeder.stopping = True  # the test failed already: stop feeding, then unwind
        raise
    finally:
        feeder.finish(timeout=120)
    sent = feeder.sent
    assert sent == len(lines) and produced == word_counts(lines)

    view, reads = wait_converged(bootstrap, output_topic, produced, app)
    print(
        f"phase 2 ({disruption}): all {sent} lines ({sum(produced.values())} words) counted exactly once "
        f"at t+{time.monotonic() - t0:.1f}s ({reads} reads, {sum(map(len, view.values()))} committed outputs)"
    )

    # The input holds every line exactly once (so a wrong count is the application's, not
    # the test producer's).
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("wm"), "log_level": 3})
    try:
        total = sum(c.get_watermark_offsets(TopicPartition(input_topic, q), timeout=10)[1] for q in range(PARTITIONS))
    finally:
        c.close()
    assert total == len(lines), f"input topic has {total} records, {len(lines)} lines were produced"

    # For the record: what the read_uncommitted view holds beyond the committed one (the
    # aborted transactions' outputs, when the disruption caught one open).
    dirty = read_output(bootstrap, output_topic, isolation="read_uncommitted")
    extra = sum(map(len, dirty.values())) - sum(map(len, view.values()))
    over = {w: max(seq) - produced[w] for w, seq in dirty.items() if max(seq) > produced[w]}
    print(f"read_uncommitted shows {extra} more outputs than read_committed; above the true count: {over or 'none'}")

    # A clean close commits and exits 0.
    code = app.stop()
    assert code == 0, f"WordCount exited {code} on a clean stop\n{app.log_tail()}"
    print(f"done at t+{time.monotonic() - t0:.1f}s")
