#!/usr/bin/env python3
"""Metadata cost against partition count (issue 13): etcd revisions, requests and bytes per
second, S3 objects per second, catalog commits and seal failures, topic-creation and
Metadata latency, and broker memory — for one topic whose every partition receives data.

For each partition count in --partitions it starts a fresh etcd, a fresh moto S3 server and
--brokers `oxbow serve` processes on loopback (the e2e harness: tests/e2e/cluster.py),
creates the topic through CreateTopics (timed), produces --rate-msgs messages a second of
--value-bytes each, spread evenly over all partitions with an explicit partition per
message (idempotent, acks=all, confluent-kafka), waits until every partition has
acknowledged a write (timed: a broker may open a partition only on its first write), warms
up for --warmup seconds and then measures for --seconds: every counter is read before and
after and reported as a rate.

  .venv/bin/python scripts/metadata_scale.py --partitions 10,100,1000,4000 [--brokers 1]
      [--seconds 30] [--rate-msgs 2000] [--json out.json] [--oxbow-bin target/debug/oxbow]

With --failover (needs --brokers >= 2, e.g. 3), after the measurement and still under load,
the broker leading the most partitions is killed with SIGKILL; the script then probes every
partition with a small acks=all produce until each has accepted one, and reports the time
until every partition was writable again, the etcd revisions that took (a revision is one
committed write request: about one metadata transaction), and, once the load has stopped,
whether every acknowledged message (load and probes) can still be read: lost = acked − read.

Where the figures come from:
- etcd: revision, dbSize and dbSizeInUse from the JSON gateway's /v3/maintenance/status;
  requests and bytes from etcd's /metrics (etcd_server_proposals_committed_total = write
  requests, etcd_mvcc_put_total, etcd_debugging_mvcc_total_put_size_in_bytes,
  etcd_network_client_grpc_received_bytes_total, grpc_server_handled_total per method).
  The etcd belongs to this run alone, so everything in it is the cluster's.
- S3: the keys under the cluster's prefix (ListObjectsV2 on moto).
- brokers: every `oxbow_*_total` counter on each broker's /metrics (objects uploaded =
  seals whose catalog commit succeeded; upload failures = failed PUTs or commits); RSS
  from /proc/PID/status. "Orphaned" objects are the new S3 objects that no successful
  commit or compaction accounts for: Δobjects − Δcommits − Δcompaction segments +
  Δcompaction deletions. Compaction commits to the catalog too (a transaction per
  partition it rewrites, every --compaction-interval), so its segments/s are shown beside
  the seals'.

Prints markdown tables (and writes every raw delta to --json). Bounded: every wait has a
timeout, every process started is stopped at the end (also on Ctrl-C or SIGTERM), and a run
of the defaults for one partition count takes about a minute plus topic creation.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import collections
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from confluent_kafka import OFFSET_BEGINNING, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

import brokers  # noqa: E402
from cluster import Cluster, EtcdServer, MotoServer, in_parallel  # noqa: E402
from helpers import admin, consumer  # noqa: E402

# etcd counters taken as deltas: report name -> metric name (summed over its label sets).
ETCD_COUNTERS = {
    "write_requests": "etcd_server_proposals_committed_total",
    "puts": "etcd_mvcc_put_total",
    "deletes": "etcd_mvcc_delete_total",
    "txns": "etcd_mvcc_txn_total",
    "ranges": "etcd_mvcc_range_total",
    "put_bytes": "etcd_debugging_mvcc_total_put_size_in_bytes",
    "client_rx_bytes": "etcd_network_client_grpc_received_bytes_total",
    "client_tx_bytes": "etcd_network_client_grpc_sent_bytes_total",
}
# Broker gauges read at the end of the measurement (counters are all `oxbow_*_total`).
BROKER_GAUGES = (
    "oxbow_unsealed_bytes",
    "oxbow_wal_bytes",
    "oxbow_catalog_memory_bytes",
    "oxbow_catalog_entries",
)


class Interrupted(KeyboardInterrupt):
    pass


# -- reading the servers -------------------------------------------------------------------


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text format -> metric name -> [(labels, value)]."""
    out: dict[str, list[tuple[dict[str, str], float]]] = collections.defaultdict(list)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{([^}]*)\})?\s+(\S+)", line)
        if not m:
            continue
        labels = dict(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        try:
            out[m.group(1)].append((labels, float(m.group(4))))
        except ValueError:
            continue
    return out


def metric_sum(metrics: dict, name: str, **match: str) -> float:
    return sum(v for labels, v in metrics.get(name, []) if all(labels.get(k) == want for k, want in match.items()))


def etcd_status(url: str) -> dict[str, int]:
    r = requests.post(f"{url}/v3/maintenance/status", json={}, timeout=10)
    r.raise_for_status()
    s = r.json()
    return {
        "revision": int(s["header"]["revision"]),
        "db_size": int(s.get("dbSize", 0)),
        "db_size_in_use": int(s.get("dbSizeInUse", 0)),
    }


def etcd_key_count(url: str, prefix: str) -> int:
    """Keys under prefix (a count-only range through the JSON gateway)."""
    start = prefix.encode()
    end = start[:-1] + bytes([start[-1] + 1])
    body = {
        "key": base64.b64encode(start).decode(),
        "range_end": base64.b64encode(end).decode(),
        "count_only": True,
    }
    r = requests.post(f"{url}/v3/kv/range", json=body, timeout=10)
    r.raise_for_status()
    return int(r.json().get("count", 0))


def key_kind(key: str, root: str) -> str:
    """The first component of a key under the cluster root (`catalog`, `brokers`, ...; two
    for `topics/...`): coarse enough to survive key-schema changes."""
    if not key.startswith(root):
        return "(outside the cluster root)"
    parts = key[len(root) :].split("/")
    return "/".join(parts[:2]) if parts[0] == "topics" and len(parts) > 1 else parts[0]


def etcd_history(url: str, root: str, rev_from: int, rev_to: int, timeout: float = 20) -> dict | None:
    """What every revision in (rev_from, rev_to] wrote, replayed through a watch from
    rev_from + 1: {"revisions": n, "by_kinds": {"catalog": n, "catalog+topics/partitions":
    n, ...}} where each revision (one committed write request) is counted once under the
    set of key kinds it touched. None if etcd compacted that history or did not answer."""
    if rev_to <= rev_from:
        return {"revisions": 0, "by_kinds": {}}
    everything = base64.b64encode(b"\0").decode()
    body = {"create_request": {"key": everything, "range_end": everything, "start_revision": rev_from + 1}}
    kinds: dict[int, set[str]] = collections.defaultdict(set)
    deadline = time.monotonic() + timeout
    try:
        with requests.post(f"{url}/v3/watch", json=body, stream=True, timeout=(5, 5)) as r:
            r.raise_for_status()
            # One JSON object per line, a line per watch response (megabytes for a revision
            # with many values): split the stream as it arrives, not 512 bytes at a time.
            buf = b""
            done = False
            for chunk in r.iter_content(chunk_size=None):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    res = json.loads(line).get("result", {})
                    if int(res.get("compact_revision", 0) or 0) > 0:
                        return None
                    for ev in res.get("events", []):
                        kv = ev.get("kv", {})
                        rev = int(kv.get("mod_revision", 0))
                        if rev_from < rev <= rev_to:
                            key = base64.b64decode(kv.get("key", "")).decode(errors="replace")
                            kinds[rev].add(key_kind(key, root))
                    done = bool(kinds) and max(kinds) >= rev_to
                if done or time.monotonic() > deadline:
                    break
    except (requests.RequestException, ValueError):
        if not kinds:
            return None
    by = collections.Counter("+".join(sorted(k)) for k in kinds.values())
    return {"revisions": len(kinds), "complete": len(kinds) == rev_to - rev_from, "by_kinds": dict(by.most_common())}


def etcd_counters(url: str) -> dict[str, float]:
    metrics = parse_prometheus(requests.get(f"{url}/metrics", timeout=10).text)
    out = {k: metric_sum(metrics, name) for k, name in ETCD_COUNTERS.items()}
    for labels, v in metrics.get("grpc_server_handled_total", []):
        method = labels.get("grpc_method", "?")
        out[f"rpc_{method}"] = out.get(f"rpc_{method}", 0.0) + v
        if labels.get("grpc_code") != "OK":
            out["rpc_errors"] = out.get("rpc_errors", 0.0) + v
    return out


def broker_metrics(http: str) -> dict[str, float]:
    """Every oxbow_*_total counter and the gauges in BROKER_GAUGES, summed over labels."""
    metrics = parse_prometheus(requests.get(f"{http}/metrics", timeout=10).text)
    return {
        name: sum(v for _, v in series)
        for name, series in metrics.items()
        if name.startswith("oxbow_") and (name.endswith("_total") or name in BROKER_GAUGES)
    }


def rss_bytes(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    m = re.search(r"^VmRSS:\s+(\d+)\s+kB", text, re.M)
    return int(m.group(1)) * 1024 if m else None


def log_problems(path: Path, offset: int) -> dict:
    """WARN/ERROR lines a broker logged past `offset`: how many, and the commonest (digits
    folded so repeats of one failure count together)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return {"count": 0}
    lines = [line for line in text.splitlines() if " WARN " in line or " ERROR " in line]
    shapes = collections.Counter(re.sub(r"\d+", "N", line.split(" ", 1)[-1])[:240] for line in lines)
    top = shapes.most_common(1)
    return {"count": len(lines), "top": top[0][0] if top else None, "top_count": top[0][1] if top else 0}


# -- the stack ---------------------------------------------------------------------------


class Stack:
    """etcd + moto + N brokers for one run; `close()` stops them all (brokers first, with
    SIGTERM and a bounded wait, then SIGKILL), and records how each broker stopped."""

    def __init__(self, workdir: Path, args, n_brokers: int):
        self.workdir = workdir
        self.stopped: dict[int, str] = {}
        self.etcd: EtcdServer | None = None
        self.moto: MotoServer | None = None
        self.cluster: Cluster | None = None
        self.stop_timeout = args.stop_timeout
        try:
            for sub_dir in ("etcd", "moto", "cluster"):
                (workdir / sub_dir).mkdir(parents=True, exist_ok=True)
            self.etcd = EtcdServer(workdir / "etcd")
            self.moto = MotoServer(workdir / "moto")
            extra = list(args.broker_arg or [])
            self.cluster = Cluster(
                workdir / "cluster",
                self.etcd,
                self.moto,
                flush_interval=args.flush_interval,
                session_timeout=args.session_timeout,
                extra_args=extra,
            )
            for _ in range(n_brokers):
                self.cluster.add_broker(start=False)
            in_parallel(lambda b: b.start(timeout=60), self.cluster.brokers, timeout=90)
        except BaseException:
            self.close()
            raise

    @property
    def s3_prefix(self) -> str:
        return f"{self.cluster.name}/"

    @property
    def etcd_prefix(self) -> str:
        return f"/oxbow/{self.cluster.name}/"

    def close(self) -> None:
        try:
            if self.cluster is not None:

                def stop(b):
                    if not b.alive:
                        self.stopped[b.broker_id] = "already dead"
                        return
                    t0 = time.monotonic()
                    try:
                        code = b.signal_stop(signal.SIGTERM, timeout=self.stop_timeout)
                        self.stopped[b.broker_id] = f"exit {code} in {time.monotonic() - t0:.1f}s"
                    except brokers.BrokerError:
                        self.stopped[b.broker_id] = f"SIGKILL after {self.stop_timeout:.0f}s"
                    finally:
                        b.kill9(missing_ok=True)
                        if b in brokers.LIVE:
                            brokers.LIVE.remove(b)

                in_parallel(stop, self.cluster.brokers, timeout=self.stop_timeout + 15)
        finally:
            for server in (self.moto, self.etcd):
                if server is not None:
                    with contextlib.suppress(Exception):
                        server.close()


def snapshot(stack: Stack) -> dict:
    c = stack.cluster
    # A seal PUTs, then commits, then counts: an object in flight at either end of the
    # window is listed without its commit counted (or the reverse), so the orphan figure is
    # exact to about one object per broker.
    t = time.monotonic()
    brokers_now = {b.broker_id: broker_metrics(b.http) for b in c.brokers if b.alive}
    return {
        "t": t,
        "brokers": brokers_now,
        "s3_objects": len(stack.moto.keys(stack.s3_prefix)),
        "etcd_status": etcd_status(stack.etcd.url),
        "etcd": etcd_counters(stack.etcd.url),
    }


def sub(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in set(after) | set(before)}


# -- load -------------------------------------------------------------------------------


class Load(threading.Thread):
    """Paced producer: message `seq` goes to partition seq % partitions with value
    `{tag}-{seq:010}` padded to value_bytes. Records acknowledged ids, failures and ack
    latencies (librdkafka's Message.latency(): produce() to delivery report)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float, value_bytes: int, tag: str):
        super().__init__(daemon=True)
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.value_bytes = value_bytes
        self.tag = tag.encode()
        self.p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 30000,
                "request.timeout.ms": 5000,
                "topic.metadata.refresh.interval.ms": 1000,
                "retry.backoff.ms": 50,
                "retry.backoff.max.ms": 500,
                "queue.buffering.max.messages": 1000000,
                "log_level": 3,
            }
        )
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.sent = 0
        self.acked: set[int] = set()
        # partition -> when it first acknowledged a message (monotonic).
        self.first_ack: dict[int, float] = {}
        self.failed = 0
        self.failed_seqs: set[int] = set()
        self.error_samples: collections.Counter = collections.Counter()
        self.latencies: list[float] = []
        self.error: BaseException | None = None

    def value(self, seq: int) -> bytes:
        return (b"%s-%010d" % (self.tag, seq)).ljust(self.value_bytes, b".")

    def seq_of(self, value: bytes) -> int | None:
        head = self.tag + b"-"
        if not value.startswith(head):
            return None
        return int(value[len(head) : len(head) + 10])

    def _cb(self, err, msg):
        with self.lock:
            if err is None:
                self.acked.add(self.seq_of(msg.value()))
                self.first_ack.setdefault(msg.partition(), time.monotonic())
                self.latencies.append(msg.latency() or 0.0)
            else:
                self.failed += 1
                self.failed_seqs.add(self.seq_of(msg.value()))
                self.error_samples[err.name()] += 1

    def run(self):
        try:
            start = time.monotonic()
            while not self.stop_event.is_set():
                due = start + self.sent / self.rate
                now = time.monotonic()
                if now < due:
                    self.p.poll(min(0.01, due - now))
                    continue
                try:
                    self.p.produce(
                        self.topic, self.value(self.sent), partition=self.sent % self.partitions, on_delivery=self._cb
                    )
                    self.sent += 1
                except BufferError:
                    self.p.poll(0.05)
                    continue
                if self.sent % 64 == 0:
                    self.p.poll(0)
        except BaseException as e:  # reported by finish()
            self.error = e

    def wait_every_partition_acked(self, timeout: float) -> float:
        """Until every partition has acknowledged a message; returns when the last did
        (monotonic). A broker may open a partition's log only on its first write, so this,
        not Metadata showing a leader, is when the whole topic takes writes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.error is not None:
                raise RuntimeError(f"producer failed: {self.error!r}")
            with self.lock:
                if len(self.first_ack) == self.partitions:
                    return max(self.first_ack.values())
                got = len(self.first_ack)
            time.sleep(0.1)
        raise TimeoutError(f"only {got} of {self.partitions} partitions acknowledged a write within {timeout:.0f}s")

    def counts(self) -> tuple[int, int, int]:
        with self.lock:
            return self.sent, len(self.acked), self.failed

    def finish(self, timeout: float) -> int:
        """Stops producing and waits (bounded) for outstanding deliveries; returns how many
        are left undelivered."""
        self.stop_event.set()
        self.join(10)
        return self.p.flush(timeout)


def sleep_watching(seconds: float, load: Load, stack: Stack, alive: set[int]) -> None:
    """Sleeps, failing early if the load thread died or a broker in `alive` exited."""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(0.5, left))
        if load.error is not None:
            raise RuntimeError(f"producer failed: {load.error!r}")
        for b in stack.cluster.brokers:
            if b.broker_id in alive and not b.alive:
                raise RuntimeError(f"broker {b.broker_id} exited with {b.proc.returncode}\n{b.log_tail(30)}")


# -- client-side figures ----------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int, timeout: float) -> tuple[float, float, float]:
    """Creates the topic; returns (its start, seconds CreateTopics took, seconds until
    Metadata shows every partition with a leader, from that start)."""
    client = admin(bootstrap)  # keep a reference: a destroyed client fails its futures
    t0 = time.monotonic()
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    futures[topic].result(timeout=timeout)
    created = time.monotonic() - t0
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        try:
            md = client.list_topics(topic, timeout=max(1.0, min(30.0, deadline - time.monotonic())))
            t = md.topics.get(topic)
            if t is not None and t.error is None and len(t.partitions) == partitions:
                if all(p.leader >= 0 for p in t.partitions.values()):
                    return t0, created, time.monotonic() - t0
        except Exception:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"topic {topic}: not every partition had a leader within {timeout:.0f}s")


def metadata_latency_ms(bootstrap: str, topic: str, partitions: int, samples: int = 7) -> dict:
    """Median and max wall time of a Metadata request for the topic (one connected client;
    the first request, which also connects, is not counted)."""
    client = admin(bootstrap)
    client.list_topics(topic, timeout=30)
    times = []
    for _ in range(samples):
        t0 = time.monotonic()
        md = client.list_topics(topic, timeout=30)
        times.append((time.monotonic() - t0) * 1000)
        got = len(md.topics[topic].partitions) if topic in md.topics else 0
        if got != partitions:
            raise RuntimeError(f"Metadata for {topic} listed {got} partitions, not {partitions}")
    return {"median": statistics.median(times), "max": max(times)}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(round(q * (len(v) - 1)))))]


# -- failover ---------------------------------------------------------------------------


def probe_until_writable(bootstrap: str, topic: str, partitions: int, t_kill: float, timeout: float):
    """Keeps one small acks=all produce in flight per partition (re-sent when it fails)
    until every partition has acknowledged one; returns ({partition: seconds from t_kill to
    its first ack}, set of acknowledged probe values)."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 1,
            "message.timeout.ms": 3000,
            "request.timeout.ms": 2000,
            "topic.metadata.refresh.interval.ms": 250,
            "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 250,
            "log_level": 0,
        }
    )
    writable: dict[int, float] = {}
    acked: set[bytes] = set()
    inflight: set[int] = set()
    n = 0

    def cb(err, msg):
        inflight.discard(msg.partition())
        if err is None:
            acked.add(msg.value())
            writable.setdefault(msg.partition(), time.monotonic() - t_kill)

    deadline = time.monotonic() + timeout
    try:
        while len(writable) < partitions and time.monotonic() < deadline:
            for part in range(partitions):
                if part not in writable and part not in inflight:
                    n += 1
                    try:
                        p.produce(topic, b"probe-%d-%d" % (part, n), partition=part, on_delivery=cb)
                        inflight.add(part)
                    except BufferError:
                        break
            p.poll(0.05)
    finally:
        # Deliveries still outstanding count only if they land within this bound.
        p.flush(5)
    return writable, acked


def read_back(bootstrap: str, topic: str, partitions: int, load: Load, timeout: float) -> dict:
    """Reads every partition from the beginning to its end (partition EOF); returns the
    load's sequence numbers and the probe values found, and how often each was found."""
    c = consumer(bootstrap, **{"fetch.wait.max.ms": 100})
    seqs: collections.Counter = collections.Counter()
    probes: set[bytes] = set()
    errors: collections.Counter = collections.Counter()
    records = 0
    pending = set(range(partitions))
    try:
        c.assign([TopicPartition(topic, part, OFFSET_BEGINNING) for part in range(partitions)])
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for m in c.consume(num_messages=5000, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(m.partition())
                    else:
                        errors[err.name()] += 1
                    continue
                records += 1
                v = m.value() or b""
                seq = load.seq_of(v)
                if seq is not None:
                    seqs[seq] += 1
                elif v.startswith(b"probe-"):
                    probes.add(v)
    finally:
        c.close()
    return {"seqs": seqs, "probes": probes, "records": records, "unfinished": sorted(pending), "errors": dict(errors)}


def failover(stack: Stack, topic: str, partitions: int, load: Load, args) -> dict:
    c = stack.cluster
    leaders = c.leaders(topic, timeout=10)
    if len(leaders) != partitions:
        raise RuntimeError(f"Metadata listed leaders for {len(leaders)} of {partitions} partitions")
    led = collections.Counter(leaders.values())
    victim, victim_led = led.most_common(1)[0]
    victim_parts = {p for p, b in leaders.items() if b == victim}
    survivors = [b for b in c.brokers if b.broker_id != victim]
    before = etcd_status(stack.etcd.url)
    t_kill = time.monotonic()
    c.kill9(victim)
    bootstrap = ",".join(b.bootstrap for b in survivors)
    writable, probe_acked = probe_until_writable(bootstrap, topic, partitions, t_kill, args.failover_timeout)
    t_done = time.monotonic()
    after = etcd_status(stack.etcd.url)
    if load.error is not None:
        raise RuntimeError(f"producer failed: {load.error!r}")
    new_leaders = c.leaders(topic, timeout=10)
    # A little more load on the new leaders, then stop and read everything back.
    time.sleep(2)
    undelivered = load.finish(timeout=40)
    time.sleep(1)
    got = read_back(bootstrap, topic, partitions, load, timeout=args.read_timeout)
    lost_load = load.acked - set(got["seqs"])
    lost_probes = probe_acked - got["probes"]
    revisions = after["revision"] - before["revision"]
    history = etcd_history(stack.etcd.url, stack.etcd_prefix, before["revision"], after["revision"])
    return {
        "victim": victim,
        "victim_partitions": victim_led,
        "leaders_before": dict(sorted(led.items())),
        "leaders_after": dict(sorted(collections.Counter(new_leaders.values()).items())),
        "writable": len(writable),
        "never_writable": sorted(set(range(partitions)) - set(writable))[:20],
        "all_writable_s": max(writable.values()) if len(writable) == partitions else None,
        "victim_partitions_writable_s_p50": percentile([writable[p] for p in victim_parts if p in writable], 0.5),
        "victim_partitions_writable_s_max": max((writable[p] for p in victim_parts if p in writable), default=None),
        "other_partitions_writable_s_max": max(
            (s for p, s in writable.items() if p not in victim_parts), default=None
        ),
        "etcd_revisions": revisions,
        # Seals of the surviving brokers go on meanwhile; the failover's own transactions
        # are the revisions that wrote more than catalog keys.
        "etcd_revisions_by_kinds": history,
        "etcd_revisions_not_catalog_only": (
            None if history is None else sum(n for k, n in history["by_kinds"].items() if k != "catalog")
        ),
        "etcd_db_growth_bytes": after["db_size"] - before["db_size"],
        "acked": len(load.acked) + len(probe_acked),
        "undelivered": undelivered,
        "failed": load.failed,
        "failed_by_error": dict(load.error_samples),
        "read_records": got["records"],
        "lost": len(lost_load) + len(lost_probes),
        "lost_examples": sorted(lost_load)[:10] + sorted(lost_probes)[:5],
        "duplicates": sum(n - 1 for n in got["seqs"].values() if n > 1),
        # Message seq went to partition seq % partitions.
        "duplicate_partitions": sorted({q % partitions for q, n in got["seqs"].items() if n > 1}),
        "failed_but_read": len(load.failed_seqs & set(got["seqs"])),
        "victim_partition_ids": sorted(victim_parts),
        "read_unfinished_partitions": got["unfinished"][:20],
        "read_errors": got["errors"],
    }


# -- one run ------------------------------------------------------------------------------


def progress(t0: float, what: str) -> None:
    print(f"    t+{time.monotonic() - t0:6.1f}s  {what}", file=sys.stderr, flush=True)


def run_one(args, partitions: int, workdir: Path) -> dict:
    result: dict = {"partitions": partitions, "brokers": args.brokers, "seconds": args.seconds}
    t0 = time.monotonic()
    stack = Stack(workdir, args, args.brokers)
    progress(t0, "etcd, moto and brokers ready")
    load: Load | None = None
    try:
        c = stack.cluster
        log_offsets = {b.broker_id: b.log_path.stat().st_size for b in c.brokers}
        rss_idle = {b.broker_id: rss_bytes(b.pid) for b in c.brokers}
        topic = f"scale-{uuid.uuid4().hex[:8]}"
        t_create, created_s, ready_s = create_topic(c.bootstrap, topic, partitions, args.create_timeout)
        result["create_topic_ms"] = created_s * 1000
        result["topic_ready_ms"] = ready_s * 1000

        load = Load(c.bootstrap, topic, partitions, args.rate_msgs, args.value_bytes, tag=uuid.uuid4().hex[:6])
        load.start()
        alive = {b.broker_id for b in c.brokers}
        # The warm-up starts once the whole topic takes writes, so the measurement does not
        # include partitions opening on their first write.
        t_written = load.wait_every_partition_acked(args.create_timeout)
        result["all_partitions_written_ms"] = (t_written - t_create) * 1000
        progress(t0, "topic created; every partition acknowledged a write")
        sleep_watching(args.warmup, load, stack, alive)
        a = snapshot(stack)
        sent_a, acked_a, failed_a = load.counts()
        with load.lock:
            load.latencies.clear()
        sleep_watching(args.seconds, load, stack, alive)
        b = snapshot(stack)
        sent_b, acked_b, failed_b = load.counts()
        progress(t0, "measured")
        with load.lock:
            lat = list(load.latencies)
        result["produce_latency_ms_p50"] = percentile(lat, 0.5) * 1000
        result["produce_latency_ms_p99"] = percentile(lat, 0.99) * 1000
        dt = b["t"] - a["t"]
        n = args.brokers

        etcd = sub(b["etcd"], a["etcd"])
        revisions = b["etcd_status"]["revision"] - a["etcd_status"]["revision"]
        result["etcd_revisions_by_kinds"] = etcd_history(
            stack.etcd.url, stack.etcd_prefix, a["etcd_status"]["revision"], b["etcd_status"]["revision"]
        )
        per_broker = {
            bid: {k: v for k, v in sub(b["brokers"][bid], a["brokers"].get(bid, {})).items() if k.endswith("_total")}
            for bid in b["brokers"]
        }
        total = collections.Counter()
        for d in per_broker.values():
            total.update(d)
        objects = b["s3_objects"] - a["s3_objects"]
        commits = total["oxbow_objects_uploaded_total"]
        failures = total["oxbow_upload_failures_total"]
        accounted = (
            commits
            + total["oxbow_compaction_segments_written_total"]
            - total["oxbow_compaction_objects_deleted_total"]
        )
        result.update(
            {
                "measured_s": dt,
                "etcd_revisions": revisions,
                "etcd_revisions_per_s": revisions / dt,
                "etcd_revisions_per_s_per_broker": revisions / dt / n,
                "etcd_write_requests_per_s": etcd["write_requests"] / dt,
                "etcd_puts_per_s": etcd["puts"] / dt,
                "etcd_put_bytes_per_s": etcd["put_bytes"] / dt,
                "etcd_client_rx_bytes_per_s": etcd["client_rx_bytes"] / dt,
                "etcd_client_rx_bytes_per_s_per_broker": etcd["client_rx_bytes"] / dt / n,
                "etcd_rpcs_per_s": {
                    k[4:]: v / dt for k, v in sorted(etcd.items()) if k.startswith("rpc_") and v > 0
                },
                "etcd_db_size_end": b["etcd_status"]["db_size"],
                "etcd_db_in_use_end": b["etcd_status"]["db_size_in_use"],
                "etcd_db_growth_bytes_per_s": (b["etcd_status"]["db_size"] - a["etcd_status"]["db_size"]) / dt,
                "etcd_db_growth_bytes_per_s_per_broker": (
                    (b["etcd_status"]["db_size"] - a["etcd_status"]["db_size"]) / dt / n
                ),
                "etcd_db_in_use_growth_bytes_per_s": (
                    (b["etcd_status"]["db_size_in_use"] - a["etcd_status"]["db_size_in_use"]) / dt
                ),
                "etcd_keys_end": etcd_key_count(stack.etcd.url, stack.etcd_prefix),
                "s3_objects_end": b["s3_objects"],
                "s3_objects_per_s": objects / dt,
                "s3_objects_per_s_per_broker": objects / dt / n,
                "flush_rate_per_s_per_broker": 1.0 / parse_duration_s(args.flush_interval),
                "catalog_commits": commits,
                "catalog_commits_per_s": commits / dt,
                "upload_failures": failures,
                "upload_failures_per_s": failures / dt,
                # Compaction also commits to the catalog (one transaction per partition it
                # rewrites), so it shows in the etcd figures too.
                "compaction_segments_per_s": total["oxbow_compaction_segments_written_total"] / dt,
                "orphaned_objects": objects - accounted,
                "msgs_sent": sent_b - sent_a,
                "msgs_acked": acked_b - acked_a,
                "msgs_failed": failed_b - failed_a,
                "broker_counters": {
                    bid: {k: v for k, v in sorted(d.items()) if v} for bid, d in sorted(per_broker.items())
                },
                "broker_gauges_end": {
                    bid: {k: m[k] for k in BROKER_GAUGES if k in m} for bid, m in sorted(b["brokers"].items())
                },
            }
        )
        result["unsealed_bytes_end"] = sum(
            g.get("oxbow_unsealed_bytes", 0.0) for g in result["broker_gauges_end"].values()
        )
        # Every broker holds the whole cluster's catalogue: per partition is one broker's
        # (the largest) over all partitions.
        result["catalog_bytes_per_partition"] = (
            max(g.get("oxbow_catalog_memory_bytes", 0.0) for g in result["broker_gauges_end"].values()) / partitions
        )
        result["catalog_entries_per_partition"] = (
            max(g.get("oxbow_catalog_entries", 0.0) for g in result["broker_gauges_end"].values()) / partitions
        )
        progress(t0, "etcd history read")
        result["metadata_ms"] = metadata_latency_ms(c.bootstrap, topic, partitions)
        progress(t0, "Metadata latency measured")
        rss_end = {x.broker_id: rss_bytes(x.pid) for x in c.brokers}
        result["rss_bytes_idle"] = rss_idle
        result["rss_bytes_end"] = rss_end
        grown = [rss_end[i] - rss_idle[i] for i in rss_end if rss_end[i] is not None and rss_idle[i] is not None]
        # The partitions are spread over the brokers: memory per partition is the growth of
        # all of them over all partitions.
        result["rss_growth_bytes_per_partition"] = sum(grown) / partitions if grown else None

        if args.failover:
            result["failover"] = failover(stack, topic, partitions, load, args)
            progress(t0, "failover measured and read back")
        else:
            result["undelivered"] = load.finish(timeout=30)
        sent, acked, failed = load.counts()
        result.update({"msgs_sent_total": sent, "msgs_acked_total": acked, "msgs_failed_total": failed})
        result["failed_by_error"] = dict(load.error_samples)
        result["broker_log_problems"] = {
            x.broker_id: log_problems(x.log_path, log_offsets[x.broker_id]) for x in c.brokers
        }
        return result
    finally:
        if load is not None:
            load.stop_event.set()
            load.join(10)
            # Destroyed before the brokers stop, so it does not log their going away.
            load.p = None
        stack.close()
        progress(t0, "stopped")
        result["broker_stop"] = dict(sorted(stack.stopped.items()))


def parse_duration_s(text: str) -> float:
    m = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|m)\s*", text)
    if not m:
        raise ValueError(f"not a duration: {text!r} (use e.g. 250ms, 1s)")
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0}[m.group(2)]


# -- output -------------------------------------------------------------------------------


def fmt(v, digits: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if v != v:  # NaN
            return "–"
        return f"{v:,.{digits}f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def report(results: list[dict], args) -> str:
    ok = [r for r in results if "error" not in r]
    out = []
    if not ok:
        return "\n".join(f"{r['partitions']} partitions: FAILED: {r['error']}" for r in results)
    out.append(
        f"Load: {fmt(args.rate_msgs, 0)} msg/s of {args.value_bytes} B over all partitions, acks=all, idempotent; "
        f"{args.brokers} broker(s); flush interval {args.flush_interval} "
        f"(≈{1 / parse_duration_s(args.flush_interval):.0f} seals/s per broker); measured {args.seconds:.0f} s "
        f"after {args.warmup:.0f} s warm-up. Per-broker figures are cluster totals ÷ brokers.\n"
    )
    out.append("**etcd and objects**\n")
    out.append(
        table(
            [
                "partitions",
                "etcd rev/s per broker",
                "etcd write req/s",
                "etcd puts/s",
                "etcd put B/s",
                "etcd rx B/s per broker",
                "etcd db growth B/s per broker",
                "etcd keys",
                "S3 objects/s per broker",
                "catalog commits/s",
                "upload/commit failures/s",
                "compaction segments/s",
                "orphaned objects",
            ],
            [
                [
                    fmt(r["partitions"]),
                    fmt(r["etcd_revisions_per_s_per_broker"]),
                    fmt(r["etcd_write_requests_per_s"]),
                    fmt(r["etcd_puts_per_s"]),
                    fmt(r["etcd_put_bytes_per_s"], 0),
                    fmt(r["etcd_client_rx_bytes_per_s_per_broker"], 0),
                    fmt(r["etcd_db_growth_bytes_per_s_per_broker"], 0),
                    fmt(r["etcd_keys_end"]),
                    fmt(r["s3_objects_per_s_per_broker"], 2),
                    fmt(r["catalog_commits_per_s"], 2),
                    fmt(r["upload_failures_per_s"], 2),
                    fmt(r["compaction_segments_per_s"], 2),
                    fmt(int(r["orphaned_objects"])),
                ]
                for r in ok
            ],
        )
    )
    # Issue 14: is etcd's footprint bounded? Growth per hour of the file and of its live
    # part (what `etcdctl defrag` would leave), at the measured rate.
    out.append("\n**etcd footprint** (per hour at the measured rate; in use = what defrag leaves)\n")
    out.append(
        table(
            [
                "partitions",
                "etcd rev/s",
                "db size end MiB",
                "db in use end MiB",
                "db growth MiB/h",
                "db in-use growth MiB/h",
            ],
            [
                [
                    fmt(r["partitions"]),
                    fmt(r["etcd_revisions_per_s"]),
                    fmt(r["etcd_db_size_end"] / 2**20),
                    fmt(r["etcd_db_in_use_end"] / 2**20),
                    fmt(r["etcd_db_growth_bytes_per_s"] * 3600 / 2**20),
                    fmt(r["etcd_db_in_use_growth_bytes_per_s"] * 3600 / 2**20),
                ]
                for r in ok
            ],
        )
    )
    out.append("\n**clients and memory**\n")
    out.append(
        table(
            [
                "partitions",
                "CreateTopics ms",
                "all leaders ms",
                "every partition acked a write ms",
                "Metadata ms (median / max)",
                "acked / failed (measured)",
                "produce p50 / p99 ms (measured)",
                "unsealed MiB at end",
                "RSS MiB idle → end",
                "RSS growth KiB per partition",
                "catalogue KiB (entries) per partition, estimated",
                "broker stop",
            ],
            [
                [
                    fmt(r["partitions"]),
                    fmt(r["create_topic_ms"], 0),
                    fmt(r["topic_ready_ms"], 0),
                    fmt(r["all_partitions_written_ms"], 0),
                    f"{fmt(r['metadata_ms']['median'])} / {fmt(r['metadata_ms']['max'])}",
                    f"{fmt(r['msgs_acked'])} / {fmt(r['msgs_failed'])}",
                    f"{fmt(r['produce_latency_ms_p50'])} / {fmt(r['produce_latency_ms_p99'])}",
                    fmt(r["unsealed_bytes_end"] / 2**20),
                    " + ".join(
                        f"{fmt((r['rss_bytes_idle'][i] or 0) / 2**20, 0)} → {fmt((r['rss_bytes_end'][i] or 0) / 2**20, 0)}"
                        for i in sorted(r["rss_bytes_end"])
                    ),
                    fmt((r["rss_growth_bytes_per_partition"] or 0) / 1024),
                    f"{fmt(r.get('catalog_bytes_per_partition', 0) / 1024)} ({fmt(r.get('catalog_entries_per_partition', 0))})",
                    "; ".join(f"b{i}: {s}" for i, s in r.get("broker_stop", {}).items()),
                ]
                for r in ok
            ],
        )
    )
    fo = [r for r in ok if "failover" in r]
    if fo:
        out.append("\n**failover (kill -9 of the broker leading the most partitions, under load)**\n")
        out.append(
            table(
                [
                    "partitions",
                    "killed (leading)",
                    "all writable s",
                    "killed's partitions p50 / max s",
                    "others max s",
                    "etcd revisions (not catalog-only)",
                    "acked",
                    "read",
                    "lost",
                    "duplicates",
                    "delivery failures (in the log anyway)",
                ],
                [
                    [
                        fmt(r["partitions"]),
                        f"b{f['victim']} ({f['victim_partitions']})",
                        fmt(f["all_writable_s"], 2)
                        if f["all_writable_s"] is not None
                        else f"not within {args.failover_timeout:.0f} s ({f['writable']} of {r['partitions']})",
                        f"{fmt(f['victim_partitions_writable_s_p50'], 2)} / {fmt(f['victim_partitions_writable_s_max'], 2)}",
                        fmt(f["other_partitions_writable_s_max"], 2),
                        f"{fmt(f['etcd_revisions'])} ({fmt(f['etcd_revisions_not_catalog_only'])})",
                        fmt(f["acked"]),
                        fmt(f["read_records"]),
                        fmt(f["lost"]),
                        fmt(f["duplicates"]),
                        f"{fmt(f['failed'])} ({fmt(f['failed_but_read'])})",
                    ]
                    for r in fo
                    for f in [r["failover"]]
                ],
            )
        )
        for r in fo:
            f = r["failover"]
            if f["duplicates"]:
                on_victim = set(f["duplicate_partitions"]) & set(f["victim_partition_ids"])
                out.append(
                    f"\n{r['partitions']} partitions: duplicates on {len(f['duplicate_partitions'])} partitions, "
                    f"{len(on_victim)} of them led by the killed broker: {f['duplicate_partitions'][:20]}"
                )
    kinds = [(r, r.get("etcd_revisions_by_kinds")) for r in ok]
    if any(h for _, h in kinds):
        out.append("\n**etcd revisions by the key kinds each wrote** (measured window; failover window after →)\n")
        for r, h in kinds:
            line = f"- {r['partitions']} partitions: " + (
                (", ".join(f"{k} {n}" for k, n in h["by_kinds"].items()) or "no revisions")
                if h
                else "history unavailable"
            )
            fh = r.get("failover", {}).get("etcd_revisions_by_kinds")
            if fh:
                line += " → failover: " + (", ".join(f"{k} {n}" for k, n in fh["by_kinds"].items()) or "none")
            out.append(line)
    problems = [
        (r["partitions"], i, p)
        for r in ok
        for i, p in sorted(r.get("broker_log_problems", {}).items())
        if p.get("count")
    ]
    if problems:
        out.append("\n**broker WARN/ERROR lines (commonest shape)**\n")
        for parts, i, p in problems:
            out.append(f"- {parts} partitions, broker {i}: {p['count']} lines; {p['top_count']}× `{p['top']}`")
    for r in results:
        if "error" in r:
            out.append(f"\n{r['partitions']} partitions: FAILED: {r['error']}")
    return "\n".join(out)


# -- main -----------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--oxbow-bin",
        default=os.environ.get("OXBOW_BIN", str(ROOT / "target" / "debug" / "oxbow")),
        help="the oxbow binary (default: $OXBOW_BIN or target/debug/oxbow)",
    )
    ap.add_argument("--partitions", default="10,100,1000,4000", help="comma-separated; one fresh run each")
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=30, help="measured steady load")
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--rate-msgs", type=float, default=2000, help="messages/s in total, over all partitions")
    ap.add_argument("--value-bytes", type=int, default=200)
    ap.add_argument("--flush-interval", default="250ms", help="the brokers' --flush-interval")
    ap.add_argument("--session-timeout", default="6s", help="the brokers' --session-timeout (lease TTL)")
    ap.add_argument("--broker-arg", action="append", help="extra `oxbow serve` argument (repeatable)")
    ap.add_argument("--failover", action="store_true", help="after measuring, kill -9 the busiest leader")
    ap.add_argument("--failover-timeout", type=float, default=60, help="bound on waiting for every partition")
    ap.add_argument("--read-timeout", type=float, default=120, help="bound on reading everything back")
    ap.add_argument("--create-timeout", type=float, default=120, help="bound on topic creation")
    ap.add_argument("--stop-timeout", type=float, default=15, help="SIGTERM grace before SIGKILL")
    ap.add_argument("--json", dest="json_out", help="write every figure of every run here")
    ap.add_argument("--workdir", help="where logs and data go (default: a temp dir, removed unless --keep)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (logs) after the run")
    args = ap.parse_args()

    if not Path(args.oxbow_bin).is_file():
        print(f"no oxbow binary at {args.oxbow_bin}", file=sys.stderr)
        return 2
    if args.failover and args.brokers < 2:
        print("--failover needs --brokers 2 or more (e.g. 3)", file=sys.stderr)
        return 2
    partition_counts = [int(x) for x in args.partitions.split(",") if x.strip()]
    parse_duration_s(args.flush_interval)
    os.environ["OXBOW_BIN"] = str(Path(args.oxbow_bin).resolve())

    def on_sigterm(signum, frame):
        raise Interrupted("SIGTERM")

    signal.signal(signal.SIGTERM, on_sigterm)
    atexit.register(brokers.kill_all)

    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="oxbow-metadata-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"work dir: {workdir}  binary: {args.oxbow_bin}", file=sys.stderr)
    results: list[dict] = []
    failed = False
    try:
        for n in partition_counts:
            print(f"--- {n} partitions, {args.brokers} broker(s) ...", file=sys.stderr, flush=True)
            t0 = time.monotonic()
            try:
                r = run_one(args, n, workdir / f"p{n}")
            except (KeyboardInterrupt, Interrupted):
                raise
            except Exception as e:
                failed = True
                r = {"partitions": n, "brokers": args.brokers, "error": f"{type(e).__name__}: {e}"[:2000]}
            r["wall_s"] = time.monotonic() - t0
            results.append(r)
            print(f"    done in {r['wall_s']:.0f} s", file=sys.stderr, flush=True)
            if args.json_out:
                write_json(args, results)
    except (KeyboardInterrupt, Interrupted):
        print("interrupted: everything started was stopped", file=sys.stderr)
        failed = True
    finally:
        brokers.kill_all()
        if args.json_out:
            write_json(args, results)
        if results:
            print(report(results, args))
        if args.keep or failed:
            print(f"logs kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


def write_json(args, results: list[dict]) -> None:
    Path(args.json_out).write_text(json.dumps({"args": vars(args), "runs": results}, indent=2, default=str))


if __name__ == "__main__":
    sys.exit(main())
