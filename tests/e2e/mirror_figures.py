"""Figures for mirror topics (issue 20): backlog catch-up throughput, steady-state lag at a
fixed produce rate, promotion time. Two real `oxbow serve` brokers on this machine (the
binary at OXBOW_BIN or target/debug/oxbow: say which build when quoting the figures).

    .venv/bin/python tests/e2e/mirror_figures.py [--backlog-mib 256] [--rate 2000] [--seconds 20]

Not a test: it asserts only that the mirror ends identical in length to the source.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import requests  # noqa: E402
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition  # noqa: E402

import brokers  # noqa: E402
from helpers import create_topic, run  # noqa: E402

PARTITIONS = 4
RECORD = 1024


def hws(bootstrap, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "fig", "log_level": 3})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in range(PARTITIONS)]
    finally:
        c.close()


def produce(bootstrap, topic, n, rate=None):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20, "acks": "all", "log_level": 3})
    value = b"x" * RECORD
    start = time.monotonic()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
        if rate and i % 100 == 0:
            ahead = start + i / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        p.poll(0)
    assert p.flush(300) == 0


def mirror_lag(http):
    """(sum of lag records, max lag seconds) over the mirror partitions, from /metrics."""
    text = requests.get(f"{http}/metrics", timeout=5).text
    records = sum(float(v) for v in re.findall(r"^oxbow_mirror_lag_records\{[^}]*\} (\S+)$", text, re.M))
    seconds = [float(v) for v in re.findall(r"^oxbow_mirror_lag_seconds\{[^}]*\} (\S+)$", text, re.M)]
    return records, max(seconds, default=0.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backlog-mib", type=int, default=256)
    ap.add_argument("--rate", type=int, default=2000, help="records/s of 1 KiB in the steady-state phase")
    ap.add_argument("--seconds", type=int, default=20)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mirror-fig-"))
    src = brokers.OxbowBroker(tmp / "src", name="src").start()
    dst = brokers.OxbowBroker(tmp / "dst", name="dst", broker_id=1).start()
    oxbow = str(brokers.oxbow_bin())
    try:
        topic = "fig"
        create_topic(src.bootstrap, topic, partitions=PARTITIONS)
        n = args.backlog_mib * 1024 * 1024 // RECORD
        t0 = time.monotonic()
        produce(src.bootstrap, topic, n)
        print(f"backlog: {n} records of {RECORD} B ({args.backlog_mib} MiB) produced in {time.monotonic() - t0:.1f} s")
        target = hws(src.bootstrap, topic)
        t0 = time.monotonic()
        run([oxbow, "links", "--http-url", dst.http, "create", "fig", "--bootstrap", src.bootstrap, "--topics", topic], timeout=60)
        first_data = None
        while True:
            try:
                now = hws(dst.bootstrap, topic)
                if first_data is None and sum(now) > 0:
                    first_data = (time.monotonic(), sum(now))
                if now == target:
                    break
            except Exception:
                pass
            if time.monotonic() - t0 > 1800:
                raise SystemExit("catch-up did not finish in 30 min")
            time.sleep(0.1)
        done = time.monotonic()
        took = done - t0
        rest_mib = (n - first_data[1]) * RECORD / 1048576
        print(f"catch-up: {args.backlog_mib} MiB in {took:.1f} s from link creation (incl. the wait, up to 5 s, "
              f"until the controller creates the mirror topic); from the first mirrored records: "
              f"{rest_mib:.0f} MiB in {done - first_data[0]:.1f} s = {rest_mib / (done - first_data[0]):.1f} MiB/s")

        # Steady state: a fixed rate at the source; lag from /metrics, and end-to-end from
        # a consumer of the mirror (now - record CreateTime).
        lags, e2e = [], []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                lags.append(mirror_lag(dst.http))
                time.sleep(0.5)

        def consume():
            c = Consumer({"bootstrap.servers": dst.bootstrap, "group.id": "fig-e2e", "log_level": 3})
            c.assign([TopicPartition(topic, p, OFFSET_END) for p in range(PARTITIONS)])
            while not stop.is_set():
                for m in c.consume(1000, 0.2):
                    if m.error() is None:
                        e2e.append(time.time() * 1000 - m.timestamp()[1])
            c.close()

        threads = [threading.Thread(target=sample), threading.Thread(target=consume)]
        for t in threads:
            t.start()
        time.sleep(1)
        produce(src.bootstrap, topic, args.rate * args.seconds, rate=args.rate)
        time.sleep(2)
        stop.set()
        for t in threads:
            t.join(30)
        e2e.sort()
        q = lambda f: e2e[min(len(e2e) - 1, int(f * len(e2e)))] if e2e else float("nan")  # noqa: E731
        print(f"steady state at {args.rate} records/s ({args.rate * RECORD / 1048576:.1f} MiB/s) for {args.seconds} s: "
              f"oxbow_mirror_lag_records (sum over partitions) median {statistics.median(r for r, _ in lags):.0f}, "
              f"max {max(r for r, _ in lags):.0f}; oxbow_mirror_lag_seconds median {statistics.median(x for _, x in lags) * 1000:.0f} ms, "
              f"max {max(x for _, x in lags) * 1000:.0f} ms; "
              f"source produce -> consumable on the mirror: p50 {q(0.5):.0f} ms, p99 {q(0.99):.0f} ms ({len(e2e)} records)")

        cid = requests.get(f"{dst.http}/v3/clusters", timeout=5).json()["data"][0]["cluster_id"]
        t0 = time.monotonic()
        r = requests.post(f"{dst.http}/v3/clusters/{cid}/links/fig/mirrors:promote", timeout=60)
        r.raise_for_status()
        print(f"promotion: {(time.monotonic() - t0) * 1000:.0f} ms over HTTP; broker says {r.json()['data']}")
        # Writable: the first produce after promotion, timed from the promote call.
        p = Producer({"bootstrap.servers": dst.bootstrap, "log_level": 3})
        done = []
        p.produce(topic, value=b"after", partition=0, on_delivery=lambda e, m: done.append(e))
        p.flush(30)
        print(f"first produce after promotion: {'ok' if done and done[0] is None else done} "
              f"{(time.monotonic() - t0) * 1000:.0f} ms after the promote call began")
    finally:
        src.close()
        dst.close()


if __name__ == "__main__":
    main()
