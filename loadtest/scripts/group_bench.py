#!/usr/bin/env python3
"""Consumer-group figures through librdkafka (confluent-kafka), against any Kafka-compatible
broker:

  rebalance  time for a group of N members over P partitions to settle (every partition
             owned by exactly one member) after the N members start, after one more member
             joins, and after one leaves — eager (range) and cooperative-sticky;
  commits    synchronous offset commits per second (1 partition per commit, and P per commit);
  fanout     consume MB/s of one group reading a topic, then of G groups reading it at once.

Usage: .venv/bin/python loadtest/scripts/group_bench.py --bootstrap 127.0.0.1:9092 [--only rebalance]
Prints one JSON object per measurement. Bounded: every wait has a timeout.
"""

import argparse
import json
import multiprocessing
import threading
import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap, partitions):
    name = f"gbench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)
    return name


class Member(threading.Thread):
    def __init__(self, bootstrap, group, topic, strategy):
        super().__init__(daemon=True)
        self.c = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "partition.assignment.strategy": strategy, "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500, "log_level": 3,
        })
        self.topic = topic
        self.coop = strategy == "cooperative-sticky"
        self.owned = set()
        self.stop = threading.Event()

    def on_assign(self, c, parts):
        if self.coop:
            c.incremental_assign(parts)
        self.owned |= {p.partition for p in parts}

    def on_revoke(self, c, parts):
        if self.coop:
            c.incremental_unassign(parts)
        self.owned -= {p.partition for p in parts}

    def run(self):
        self.c.subscribe([self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke)
        while not self.stop.is_set():
            self.c.poll(0.05)
        self.c.close()


def settled(members, partitions):
    owned = [set(m.owned) for m in members]
    return set().union(*owned) == set(range(partitions)) and sum(map(len, owned)) == partitions


def wait_settled(members, partitions, timeout=120, also=lambda: True):
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if also() and settled(members, partitions):
            return time.monotonic() - start
        time.sleep(0.01)
    raise SystemExit("group did not settle")


def rebalance(bootstrap, members_n, partitions, strategy):
    topic = create_topic(bootstrap, partitions)
    group = f"gb-{uuid.uuid4().hex[:8]}"
    members = [Member(bootstrap, group, topic, strategy) for _ in range(members_n)]
    for m in members:
        m.start()
    start_s = wait_settled(members, partitions)
    time.sleep(1)
    extra = Member(bootstrap, group, topic, strategy)
    extra.start()
    members.append(extra)
    # Settled again once the newcomer owns partitions and every partition has one owner.
    join_s = wait_settled(members, partitions, also=lambda: bool(extra.owned))
    time.sleep(1)
    leaving = members.pop(0)
    leaving.stop.set()
    leaving.join(30)
    leave_s = wait_settled(members, partitions)
    for m in members:
        m.stop.set()
    for m in members:
        m.join(30)
    print(json.dumps({"measure": "rebalance", "strategy": strategy, "members": members_n,
                      "partitions": partitions, "start_s": round(start_s, 2),
                      "join_s": round(join_s, 2), "leave_s": round(leave_s, 2)}), flush=True)


def commits(bootstrap, partitions, seconds=5.0):
    topic = create_topic(bootstrap, partitions)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"gc-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "log_level": 3})
    for per_commit in (1, partitions):
        n = 0
        lat = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            offs = [TopicPartition(topic, (n + i) % partitions, n + 1) for i in range(per_commit)]
            t = time.monotonic()
            c.commit(offsets=offs, asynchronous=False)
            lat.append(time.monotonic() - t)
            n += 1
        lat.sort()
        print(json.dumps({"measure": "commits", "partitions_per_commit": per_commit,
                          "commits_per_s": round(n / seconds), "offsets_per_s": round(n * per_commit / seconds),
                          "p50_ms": round(lat[len(lat) // 2] * 1000, 2),
                          "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 2)}), flush=True)
    c.close()


def consume_all(bootstrap, topic, partitions, total, out, key):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"gf-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "fetch.max.bytes": 52428800, "log_level": 3})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    n = 0
    size = 0
    t = time.monotonic()
    while n < total and time.monotonic() - t < 120:
        for m in c.consume(10000, 0.5):
            if not m.error():
                n += 1
                size += len(m.value())
    out[key] = (n, size, time.monotonic() - t)
    c.close()


def fanout(bootstrap, groups, partitions=12, records=100_000, size=1024):
    topic = create_topic(bootstrap, partitions)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "log_level": 3})
    v = b"x" * size
    for i in range(records):
        while True:
            try:
                p.produce(topic, value=v, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    for g in (1, groups):
        # One process per group: Python threads would share one core through the GIL and
        # measure the client, not the broker.
        with multiprocessing.Manager() as manager:
            shared = manager.dict()
            procs = [multiprocessing.Process(target=consume_all, args=(bootstrap, topic, partitions, records, shared, i))
                     for i in range(g)]
            t = time.monotonic()
            for pr in procs:
                pr.start()
            for pr in procs:
                pr.join(180)
            wall = time.monotonic() - t
            out = dict(shared)
        total_mb = sum(s for _, s, _ in out.values()) / 1e6
        print(json.dumps({"measure": "fanout", "groups": g, "records_each": records,
                          "all_complete": all(n == records for n, _, _ in out.values()),
                          "total_mb_per_s": round(total_mb / wall, 1),
                          "per_group_mb_per_s": sorted(round(s / 1e6 / d, 1) for _, s, d in out.values())}),
              flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--only", choices=["rebalance", "commits", "fanout"])
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=60)
    ap.add_argument("--groups", type=int, default=5)
    args = ap.parse_args()
    if args.only in (None, "rebalance"):
        for strategy in ("range", "cooperative-sticky"):
            rebalance(args.bootstrap, args.members, args.partitions, strategy)
    if args.only in (None, "commits"):
        commits(args.bootstrap, args.partitions)
    if args.only in (None, "fanout"):
        fanout(args.bootstrap, args.groups)


if __name__ == "__main__":
    main()
