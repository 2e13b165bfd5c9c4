#!/usr/bin/env python3
"""Transactions on one Oxbow broker next to one Apache Kafka broker (issue 16), in
alternating rounds so both see the same machine load:

- transactions per second and commit latency (p50/p99 of `commit_transaction`) for one
  transactional producer writing one 100-byte record to each of 1 or 10 partitions per
  transaction, --txns transactions per round and shape;
- read_committed fetch throughput as a ratio to read_uncommitted: --records 1 KiB records
  written in committed transactions of 1000 records over 4 partitions, then read back
  whole by a consumer of each isolation level (in alternating order).

Starts target/debug/oxbow (or --oxbow-bin) and Kafka from .tools/kafka/libs through the
e2e harness, each on its own ports and data dir; both are stopped at the end. Prints each
round and the medians; on a shared machine only the ratios mean anything, and a debug
build is slower than a release one.

  .venv/bin/python scripts/txn_bench.py [--txns 300] [--records 100000] [--rounds 3] [--oxbow-bin PATH]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "e2e"))

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import brokers  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--txns", type=int, default=300)
ap.add_argument("--records", type=int, default=100_000)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--oxbow-bin")
opts = ap.parse_args()
if opts.oxbow_bin:
    os.environ["OXBOW_BIN"] = opts.oxbow_bin
work = Path(tempfile.mkdtemp(prefix="txn-bench-"))


def topic(addr, partitions):
    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": addr})  # kept alive until the topic exists
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    time.sleep(0.5)
    return name


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def txn_round(addr, per_txn):
    t = topic(addr, 10)
    p = Producer({"bootstrap.servers": addr, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}", "linger.ms": 0, "log_level": 3})
    p.init_transactions(30)
    value = b"x" * 100
    # Warm up: the first transaction finds coordinators and leaders.
    p.begin_transaction()
    p.produce(t, value=value, partition=0)
    p.commit_transaction(30)
    commits = []
    started = time.monotonic()
    for i in range(opts.txns):
        p.begin_transaction()
        for k in range(per_txn):
            p.produce(t, value=value, partition=(i + k) % 10)
        t0 = time.monotonic()
        p.commit_transaction(30)
        commits.append((time.monotonic() - t0) * 1000)
    elapsed = time.monotonic() - started
    return opts.txns / elapsed, pct(commits, 0.5), pct(commits, 0.99)


def read_round(addr):
    t = topic(addr, 4)
    p = Producer({"bootstrap.servers": addr, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}", "linger.ms": 5, "log_level": 3})
    p.init_transactions(30)
    value = b"y" * 1024
    for start in range(0, opts.records, 1000):
        p.begin_transaction()
        for i in range(start, min(start + 1000, opts.records)):
            p.produce(t, value=value, partition=i % 4)
            p.poll(0)
        p.commit_transaction(60)
    rates = {}
    order = ["read_uncommitted", "read_committed"]
    for isolation in order:
        c = Consumer(
            {
                "bootstrap.servers": addr,
                "group.id": uuid.uuid4().hex,
                "isolation.level": isolation,
                "enable.partition.eof": True,
                "fetch.max.bytes": 52428800,
                "log_level": 3,
            }
        )
        c.assign([TopicPartition(t, i, 0) for i in range(4)])
        got, eof = 0, set()
        t0 = time.monotonic()
        while len(eof) < 4 and time.monotonic() - t0 < 120:
            for m in c.consume(10000, 0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
                    continue
                got += 1
        rates[isolation] = got * 1024 / (1 << 20) / (time.monotonic() - t0)
        c.close()
        assert got == opts.records, (isolation, got)
    return rates["read_committed"] / rates["read_uncommitted"], rates


targets = {
    "oxbow": brokers.OxbowBroker(work / "oxbow", name="oxbow"),
    "kafka": brokers.KafkaBroker(work / "kafka", name="kafka", broker_id=1),
}
for b in targets.values():
    b.start()
rows = {name: {"txn1": [], "txn10": [], "read": []} for name in targets}
try:
    for r in range(opts.rounds):
        names = list(targets) if r % 2 == 0 else list(reversed(targets))
        for name in names:
            addr = targets[name].bootstrap
            for per in (1, 10):
                tps, p50, p99 = txn_round(addr, per)
                rows[name][f"txn{per}"].append((tps, p50, p99))
                print(f"round {r} {name:5} {per:2} partitions/txn: {tps:7.1f} txn/s  commit p50 {p50:6.1f} ms  p99 {p99:6.1f} ms", flush=True)
            ratio, rates = read_round(addr)
            rows[name]["read"].append(ratio)
            print(f"round {r} {name:5} read_committed/read_uncommitted {ratio:.2f} ({rates['read_committed']:.0f} vs {rates['read_uncommitted']:.0f} MiB/s)", flush=True)
finally:
    for b in targets.values():
        b.close()

print("\nmedians (oxbow vs kafka, ratio oxbow/kafka):")
for per in (1, 10):
    key = f"txn{per}"
    for i, what in enumerate(("txn/s", "commit p50 ms", "commit p99 ms")):
        o = statistics.median(x[i] for x in rows["oxbow"][key])
        k = statistics.median(x[i] for x in rows["kafka"][key])
        print(f"  {per:2} partitions/txn {what:14} oxbow {o:8.1f}  kafka {k:8.1f}  ratio {o / k:5.2f}")
for name in targets:
    print(f"  {name}: read_committed / read_uncommitted throughput {statistics.median(rows[name]['read']):.2f}")
