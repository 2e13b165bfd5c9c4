"""A multi-broker Oxbow cluster for end-to-end tests: a real etcd, a real S3-compatible
server (moto) and N `oxbow serve` processes sharing them.

Fixtures (import them into a test module, or use them through conftest):

- `etcd_server` (module scope): one `etcd` process (Debian `etcd-server`, installed by
  `scripts/test.sh setup`) on free loopback ports with a data dir of its own. Clusters
  sharing it are kept apart by a unique cluster name (`etcd://127.0.0.1:P/{name}` puts
  every key under `/oxbow/{name}/`).
- `moto_server` (module scope): `moto_server` with one bucket. Clusters sharing it are kept
  apart by a unique key prefix (`s3://bucket/{name}`).
- `cluster` (function scope): a factory, `cluster(n=3, **options) -> Cluster`, whose
  brokers are always stopped at teardown (paused ones are resumed first).

`Cluster` helpers: `kill9(i)`, `restart(i)`, `stop(i)` (SIGTERM), `pause(i)` (SIGSTOP) /
`resume(i)` (SIGCONT), `add_broker()`, `bootstrap` (every broker started), `leaders(topic)`
(partition -> leader id, from a fresh Metadata request to a live broker),
`wait_leader_change(...)`, `wait_leaders_on(...)`, `describe(topic)` (`oxbow cluster
describe --json`: leader epochs, controller, lease state).

Teardown order matters: brokers first (they deregister from etcd and seal into S3 on the
way out), then etcd and moto.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests

from brokers import LIVE, REPO_ROOT, OxbowBroker, free_ports, oxbow_bin
from helpers import admin, run, wait_until

BUCKET = "oxbow-e2e"
# Short, so the cluster tests finish quickly: a dead broker's lease is gone 3 s after its
# last renewal.
SESSION_TIMEOUT = "3s"


# -- etcd ---------------------------------------------------------------------------


def etcd_bin() -> str:
    found = shutil.which("etcd")
    if not found:
        pytest.fail("etcd not found: run `scripts/test.sh setup` (installs Debian's etcd-server)")
    return found


class EtcdServer:
    """One etcd member on free loopback ports, with a data dir of its own."""

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.client_port, self.peer_port = free_ports(2)
        self.url = f"http://127.0.0.1:{self.client_port}"
        self.log_path = self.workdir / "etcd.log"
        self._start()

    def _start(self) -> None:
        peer = f"http://127.0.0.1:{self.peer_port}"
        cmd = [
            etcd_bin(),
            "--name", "default",
            "--data-dir", str(self.workdir / "data"),
            "--listen-client-urls", self.url,
            "--advertise-client-urls", self.url,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"default={peer}",
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(self._healthy, timeout=20, interval=0.1, what="etcd healthy")
        except BaseException:
            self.close()
            raise

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"etcd exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
        try:
            r = requests.get(f"{self.url}/health", timeout=1)
            return r.status_code == 200 and json.loads(r.text).get("health") in ("true", True)
        except (requests.RequestException, ValueError):
            return False

    def kill9(self) -> None:
        """The metadata service dies at once (its data dir stays, as a crashed member's)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> None:
        """Starts the member again on the same ports and data: what it had committed is
        back, and its leader re-grants every lease a full TTL (etcd's rule after a restart)."""
        self.kill9()
        self._start()

    def metadata_url(self, cluster_name: str) -> str:
        return f"etcd://127.0.0.1:{self.client_port}/{cluster_name}"

    def close(self) -> None:
        terminate(self.proc)


def terminate(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s: a helper server ends either way."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


# -- S3 (moto, or another server started here) ----------------------------------------


def moto_bin() -> str:
    # The repository's venv, else the venv of the running interpreter (a script run from a
    # worktree with another checkout's venv), else PATH.
    for venv in (REPO_ROOT / ".venv" / "bin" / "moto_server", Path(sys.executable).parent / "moto_server"):
        if venv.is_file():
            return str(venv)
    found = shutil.which("moto_server")
    if not found:
        pytest.fail("moto_server not found: run `scripts/test.sh setup` (installs tests/e2e/requirements.txt)")
    return found


class S3Process:
    """An S3-compatible server started here on a free loopback port, with one bucket: what
    `Cluster` uses of it (port, bucket, url, close)."""

    def __init__(self, workdir: Path, bucket: str, name: str, argv: list[str]):
        """Starts `argv` (its `{port}` replaced by the port picked) and waits until it
        answers; `name` names it in messages and its log file."""
        (self.port,) = free_ports(1)
        self.bucket = bucket
        self.name = name
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(workdir) / f"{name}.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [a.replace("{port}", str(self.port)) for a in argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_until(self._up, timeout=30, what=f"{name} answering")
        except BaseException:
            self.close()
            raise

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
        try:
            requests.get(f"{self.url}/", timeout=1)
            return True
        except requests.RequestException:
            return False

    def close(self) -> None:
        terminate(self.proc)


class MotoServer(S3Process):
    """`moto_server` on a free loopback port, with one bucket (in memory)."""

    def __init__(self, workdir: Path, bucket: str = BUCKET):
        self.sizes: dict[str, str] = {}  # key -> size, from the last listings
        super().__init__(workdir, bucket, "moto", [moto_bin(), "-H", "127.0.0.1", "-p", "{port}"])
        try:
            r = requests.put(f"{self.url}/{bucket}", timeout=10)
            assert r.status_code == 200, r.text
        except BaseException:
            self.close()
            raise

    def keys(self, prefix: str = "") -> list[str]:
        """Every key in the bucket under prefix (ListObjectsV2, following continuation)."""
        keys: list[str] = []
        params = {"list-type": "2", "prefix": prefix}
        while True:
            r = requests.get(f"{self.url}/{self.bucket}", params=params, timeout=10)
            assert r.status_code == 200, r.text
            keys += re.findall(r"<Key>([^<]*)</Key>", r.text)
            self.sizes.update(re.findall(r"<Key>([^<]*)</Key>.*?<Size>(\d+)</Size>", r.text, re.S))
            token = re.search(r"<NextContinuationToken>([^<]*)</NextContinuationToken>", r.text)
            if not token:
                return keys
            params["continuation-token"] = token.group(1)


def s3_env(port: int) -> dict[str, str]:
    """The AWS variables that point a broker's S3 client at a local S3-compatible server."""
    return {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ALLOW_HTTP": "true",
        "AWS_EC2_METADATA_DISABLED": "true",
        "RUST_LOG": os.environ.get("RUST_LOG", "info"),
    }


# -- the cluster -----------------------------------------------------------------------


def in_parallel(action, brokers, timeout: float = 60) -> None:
    """Runs `action(broker)` for every broker at once (starts and stops of several brokers
    do not add up); re-raises the first error once all are done."""
    errors: list[BaseException] = []

    def run(b):
        try:
            action(b)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(b,)) for b in brokers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    if errors:
        raise errors[0]


class Cluster:
    """N `oxbow serve` brokers sharing one etcd cluster name and one S3 prefix.

    Broker i (1-based) runs with `--broker-id i --az az{z}` where z = i by default, or
    ((i - 1) % zones) + 1 when `zones` is given. `brokers[i - 1]` is broker i.
    Options: flush_interval, session_timeout, default_partitions, auto_create_topics,
    extra_args (list, every broker), env (dict, every broker).
    """

    def __init__(self, workdir: Path, etcd: EtcdServer, moto: MotoServer, *, zones: int | None = None, **options):
        self.workdir = Path(workdir)
        self.etcd = etcd
        self.moto = moto
        self.name = f"c{uuid.uuid4().hex[:10]}"
        self.zones = zones
        self.options = options
        self.brokers: list[OxbowBroker] = []
        self.paused: set[int] = set()
        # (monotonic time, event) for every nemesis action, printed when a test fails.
        self.events: list[tuple[float, str]] = []
        self._t0 = time.monotonic()

    # -- brokers ---------------------------------------------------------------------

    @property
    def metadata_url(self) -> str:
        return self.etcd.metadata_url(self.name)

    @property
    def object_store_url(self) -> str:
        return f"s3://{self.moto.bucket}/{self.name}"

    def az_of(self, broker_id: int) -> str:
        z = broker_id if self.zones is None else ((broker_id - 1) % self.zones) + 1
        return f"az{z}"

    def add_broker(self, start: bool = True, **overrides) -> OxbowBroker:
        """Creates broker len(brokers)+1 and starts it unless start=False."""
        i = len(self.brokers) + 1
        opts = {**self.options, **overrides}
        session_timeout = opts.pop("session_timeout", SESSION_TIMEOUT)
        # `etcd_port`: this broker reaches etcd on another port (a relay in front of it).
        etcd_port = opts.pop("etcd_port", None)
        metadata = self.metadata_url if etcd_port is None else f"etcd://127.0.0.1:{etcd_port}/{self.name}"
        extra = [
            "--metadata", metadata,
            "--object-store", self.object_store_url,
            "--az", self.az_of(i),
            "--session-timeout", session_timeout,
        ] + list(opts.pop("extra_args", []))  # fmt: skip
        env = {**s3_env(self.moto.port), **opts.pop("env", {})}
        b = OxbowBroker(self.workdir / f"broker{i}", name=f"{self.name}-b{i}", broker_id=i, extra_args=extra, env=env, **opts)
        self.brokers.append(b)
        if start:
            b.start()
            self.event(f"started broker {i}")
        return b

    def broker(self, broker_id: int) -> OxbowBroker:
        return self.brokers[broker_id - 1]

    @property
    def bootstrap(self) -> str:
        """Every broker ever added, so a client finds the cluster while some are down."""
        return ",".join(b.bootstrap for b in self.brokers)

    def live(self) -> list[OxbowBroker]:
        return [b for b in self.brokers if b.alive and b.broker_id not in self.paused]

    def live_bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.live())

    # -- nemesis -------------------------------------------------------------------

    def event(self, what: str) -> None:
        self.events.append((time.monotonic() - self._t0, what))

    def history(self) -> str:
        return "\n".join(f"  t+{t:7.2f}s  {what}" for t, what in self.events)

    def kill9(self, broker_id: int) -> None:
        self.broker(broker_id).kill9()
        self.paused.discard(broker_id)
        self.event(f"kill -9 broker {broker_id}")

    def stop(self, broker_id: int, timeout: float = 30) -> int:
        """SIGTERM (graceful handoff), asserting a clean exit."""
        code = self.broker(broker_id).stop(timeout=timeout)
        self.event(f"SIGTERM broker {broker_id} -> exit {code}")
        return code

    def restart(self, broker_id: int) -> OxbowBroker:
        """Starts a stopped or killed broker again on the same ports and data dir."""
        b = self.broker(broker_id)
        if b.alive:
            self.resume(broker_id)
            b.kill9()
        b.start()
        self.event(f"restarted broker {broker_id}")
        return b

    def pause(self, broker_id: int) -> None:
        os.kill(self.broker(broker_id).pid, signal.SIGSTOP)
        self.paused.add(broker_id)
        self.event(f"SIGSTOP broker {broker_id}")

    def resume(self, broker_id: int) -> None:
        if broker_id in self.paused:
            b = self.broker(broker_id)
            if b.alive:
                os.kill(b.pid, signal.SIGCONT)
            self.paused.discard(broker_id)
            self.event(f"SIGCONT broker {broker_id}")

    # -- looking at placement --------------------------------------------------------

    def leaders(self, topic: str, timeout: float = 5) -> dict[int, int]:
        """partition -> leader broker id, from a fresh Metadata request to the live brokers
        (empty when the topic is unknown or no broker answered)."""
        bootstrap = self.live_bootstrap()
        if not bootstrap:
            return {}
        try:
            md = admin(bootstrap).list_topics(topic, timeout=timeout)
        except Exception:
            return {}
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            return {}
        return {p.id: p.leader for p in t.partitions.values()}

    def brokers_in_metadata(self, timeout: float = 5) -> set[int]:
        md = admin(self.live_bootstrap()).list_topics(timeout=timeout)
        return set(md.brokers)

    def wait_leader_change(
        self, topic: str, partition: int, old_leader: int, timeout: float = 20
    ) -> int:
        """Until the partition has a leader other than old_leader; returns it."""

        def moved():
            leader = self.leaders(topic).get(partition, -1)
            return leader if leader >= 0 and leader != old_leader else None

        return wait_until(moved, timeout=timeout, interval=0.1, what=f"{topic}[{partition}] to leave broker {old_leader}")

    def wait_leaders_on(self, topic: str, allowed: set[int], timeout: float = 20, partitions: int | None = None) -> dict[int, int]:
        """Until every partition is led by a broker in allowed; returns partition -> leader."""

        def ok():
            leaders = self.leaders(topic)
            if not leaders or (partitions is not None and len(leaders) != partitions):
                return None
            return leaders if all(l in allowed for l in leaders.values()) else None

        return wait_until(ok, timeout=timeout, interval=0.2, what=f"{topic} led only by {sorted(allowed)}")

    def cli(self, *args: str, timeout: float = 30, check: bool = True):
        """Runs `oxbow ARGS --bootstrap <live brokers>`."""
        return run([str(oxbow_bin()), *args, "--bootstrap", self.live_bootstrap()], timeout=timeout, check=check)

    def describe(self, topic: str | None = None) -> dict:
        """`oxbow cluster describe --json [--topic T]`, parsed."""
        args = ["cluster", "describe", "--json"] + (["--topic", topic] if topic else [])
        return json.loads(self.cli(*args).stdout)

    # -- teardown --------------------------------------------------------------------

    def close(self) -> None:
        """Stops every broker (paused ones are resumed first), in parallel so handoffs
        between stopping brokers do not add up; kills any that do not exit in time."""
        for i in list(self.paused):
            self.resume(i)

        def stop(b: OxbowBroker) -> None:
            try:
                if b.alive:
                    b.signal_stop(signal.SIGTERM, timeout=30)
            finally:
                b.kill9(missing_ok=True)
                if b in LIVE:
                    LIVE.remove(b)
                b.discard_data()

        in_parallel(stop, self.brokers)


# -- producing and checking -------------------------------------------------------------


class ProducerThread(threading.Thread):
    """An idempotent acks=all librdkafka producer writing unique values (`{name}-{seq:09}`)
    with keys `k{seq % keys:02}`, at most `rate` per second, and recording every delivery:
    `acked[value] = (monotonic time, partition, offset)`; `errors` holds delivery errors
    (after librdkafka's own retries, bounded by message.timeout.ms)."""

    def __init__(self, bootstrap: str, topic: str, name: str = "p", rate: float = 300.0, keys: int = 24, **conf):
        super().__init__(daemon=True)
        from helpers import producer

        self.topic = topic
        self.name = name
        self.rate = rate
        self.keys = keys
        # A SIGSTOPped leader accepts connections but never answers: the client only moves
        # on after its request timeout (librdkafka's default is 30 s, as Kafka's), so keep it
        # short, as a latency-sensitive deployment would.
        settings = {
            "message.timeout.ms": 60000,
            "request.timeout.ms": 4000,
            # ...and a request that timed out does not by itself make librdkafka look the
            # leader up again: refresh metadata often so a moved partition is found.
            "topic.metadata.refresh.interval.ms": 1000,
            "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 500,
        }
        settings.update(conf)
        self.p = producer(bootstrap, **settings)
        self.stop_event = threading.Event()
        self.paused = threading.Event()
        self.lock = threading.Lock()
        self.sent = 0
        self.acked: dict[bytes, tuple[float, int, int]] = {}
        self.errors: list[str] = []
        self.error: BaseException | None = None

    def value(self, seq: int) -> bytes:
        return b"%s-%09d" % (self.name.encode(), seq)

    def key(self, seq: int) -> bytes:
        return b"k%02d" % (seq % self.keys)

    def _cb(self, err, msg):
        with self.lock:
            if err is None:
                self.acked[msg.value()] = (time.monotonic(), msg.partition(), msg.offset())
            else:
                self.errors.append(f"{msg.value()!r}: {err}")

    def run(self):
        try:
            start = time.monotonic()
            while not self.stop_event.is_set():
                if self.paused.is_set() or self.sent > (time.monotonic() - start) * self.rate:
                    self.p.poll(0.01)
                    if self.paused.is_set():
                        start = time.monotonic() - self.sent / self.rate
                    continue
                try:
                    self.p.produce(self.topic, key=self.key(self.sent), value=self.value(self.sent), on_delivery=self._cb)
                    self.sent += 1
                except BufferError:
                    self.p.poll(0.05)
                    continue
                self.p.poll(0)
        except BaseException as e:  # surfaced by finish()
            self.error = e

    def acks_after(self, t0: float, partitions: set[int] | None = None) -> list[float]:
        """Delivery times after t0 (on the given partitions), sorted."""
        with self.lock:
            return sorted(t for t, p, _ in self.acked.values() if t > t0 and (partitions is None or p in partitions))

    def acked_count(self) -> int:
        with self.lock:
            return len(self.acked)

    def finish(self, timeout: float = 60, check: bool = True) -> int:
        """Stops producing and waits for outstanding deliveries; returns how many are left.
        A producer that failed (librdkafka's fatal idempotence errors surface from
        `produce`) fails here, unless `check=False`: then `check_history` reports it among
        its problems, after checking what was acknowledged before it."""
        self.stop_event.set()
        self.join(10)
        try:
            left = self.p.flush(timeout)
        except BaseException as e:  # a fatal error raises from flush too
            self.error = self.error or e
            left = len(self.p)
        assert not check or self.error is None, self.error
        return left


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 90) -> dict:
    """Every record of every partition, from the start to the high watermark."""
    from helpers import consume_partitions

    return consume_partitions(bootstrap, topic, range(partitions), timeout=timeout)


def check_history(producers: list[ProducerThread], records: dict) -> dict:
    """Jepsen-style checks over what was acknowledged and what is in the log. Returns a
    summary; `problems` lists every violation (empty = pass):
    - lost: acknowledged values not in the log;
    - an acknowledged value read at another offset than acknowledged;
    - offsets not dense from 0 in some partition;
    - per-key order: one producer's values of one key out of sequence order;
    - duplicates: values present more than once (counted, reported separately).
    """
    problems: list[str] = []
    seen: dict[bytes, list[tuple[int, int]]] = {}
    for part, recs in records.items():
        offsets = [r.offset for r in recs]
        if offsets != list(range(len(offsets))):
            bad = next(i for i, o in enumerate(offsets) if o != i)
            problems.append(f"partition {part}: offsets not dense, first gap at index {bad}: {offsets[bad:bad + 5]}")
        for r in recs:
            seen.setdefault(r.value, []).append((part, r.offset))
    duplicates = sum(len(v) - 1 for v in seen.values() if len(v) > 1)
    acked = {}
    for p in producers:
        acked.update(p.acked)
        if p.error is not None:
            problems.append(f"producer {p.name} failed after {len(p.acked)} acks: {p.error}")
    lost = [v for v in acked if v not in seen]
    if lost:
        problems.append(f"lost {len(lost)} acknowledged values, e.g. {sorted(lost)[:5]}")
    # An idempotent producer may report a message delivered without its offset (None): one
    # it had retried, implicitly acknowledged by the broker's ack of a later sequence.
    moved = [
        (v, acked[v][1:], seen[v])
        for v in acked
        if v in seen and acked[v][2] is not None and (acked[v][1], acked[v][2]) not in seen[v]
    ]
    if moved:
        problems.append(f"{len(moved)} values read at another offset than acknowledged, e.g. {moved[:3]}")
    # Per key and producer: sequence numbers must increase in log order.
    for part, recs in records.items():
        last: dict[tuple[bytes, bytes], int] = {}
        for r in recs:
            name, _, seq = r.value.rpartition(b"-")
            k = (r.key, name)
            n = int(seq)
            if k in last and n < last[k] and seen.get(r.value, [None])[0] == (part, r.offset):
                problems.append(f"partition {part}: key {r.key!r} of {name!r}: {n} after {last[k]} at offset {r.offset}")
                break
            last[k] = max(n, last.get(k, -1))
    return {
        "acked": len(acked),
        "read": sum(len(r) for r in records.values()),
        "lost": len(lost),
        "duplicates": duplicates,
        # (value, [(partition, offset), ...], acknowledged at) for the first few duplicates.
        "duplicate_examples": [(v, pos, acked.get(v, (None,))[1:]) for v, pos in seen.items() if len(pos) > 1][:5],
        "delivery_errors": sum(len(p.errors) for p in producers),
        "problems": problems,
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(round(q * (len(v) - 1)))))]


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def etcd_server(tmp_path_factory):
    server = EtcdServer(tmp_path_factory.mktemp("etcd"))
    yield server
    server.close()


@pytest.fixture(scope="module")
def moto_server(tmp_path_factory):
    server = MotoServer(tmp_path_factory.mktemp("moto"))
    yield server
    server.close()


@pytest.fixture
def cluster(tmp_path_factory, etcd_server, moto_server):
    """Factory: `cluster(n=3, **options)` starts n brokers (in parallel) and returns the
    Cluster; every cluster made is torn down after the test. On failure the nemesis
    history is printed."""
    made: list[Cluster] = []

    def make(n: int = 3, **options) -> Cluster:
        c = Cluster(tmp_path_factory.mktemp("cluster"), etcd_server, moto_server, **options)
        made.append(c)
        for _ in range(n):
            c.add_broker(start=False)
        in_parallel(lambda b: b.start(), c.brokers)
        c.event(f"started brokers 1..{n}")
        return c

    yield make
    for c in made:
        # Captured by pytest: shown only when the test fails.
        print(f"\n--- cluster {c.name} history:\n{c.history()}")
        c.close()
