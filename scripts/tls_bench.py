#!/usr/bin/env python3
"""TLS vs plaintext on one broker (issue 15): produce and fetch throughput, and produce
latency at a steady 1000 records/s, over the broker's PLAINTEXT and SSL listeners in
alternation, so both see the same machine load.

Starts target/debug/oxbow (or --oxbow-bin) through the e2e harness with both listeners and
certificates made for the run (tests/e2e/test_tls.py's `Certs`), then per round and
protocol: a new topic, --records 1 KiB records as fast as librdkafka takes them (acks=all,
linger 5 ms), 5000 records paced at 1000/s (p50/p99 of send-to-acknowledgement), then a
consumer reads everything back. Prints each round and the medians. On a shared machine
only the ratio means anything; a debug build is slower than a release one for both.

  .venv/bin/python scripts/tls_bench.py [--records 100000] [--rounds 5] [--oxbow-bin PATH]
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

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import brokers  # noqa: E402
from test_tls import Certs  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--records", type=int, default=100_000)
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--oxbow-bin")
opts = ap.parse_args()
if opts.oxbow_bin:
    os.environ["OXBOW_BIN"] = opts.oxbow_bin
n, rounds, size = opts.records, opts.rounds, 1024
value = b"x" * size
work = Path(tempfile.mkdtemp(prefix="tls-bench-"))
certs = Certs(work)
ca = str(certs.ca)


def conf(addr, secure):
    c = {"bootstrap.servers": addr, "log_level": 3}
    if secure:
        c |= {"security.protocol": "SSL", "ssl.ca.location": ca}
    return c

def run(addr, secure):
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(conf(addr, secure))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer(conf(addr, secure) | {"acks": "all", "linger.ms": 5, "queue.buffering.max.messages": 1000000})
    lat = []
    def cb(err, msg, t0):
        assert err is None, err
        lat.append(time.perf_counter() - t0)
    start = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        while True:
            try:
                p.produce(topic, value, on_delivery=lambda e, m, t0=t0: cb(e, m, t0)); break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(60)
    produce_s = time.perf_counter() - start
    assert len(lat) == n
    # Latency at a rate well under saturation: 1000 records/s for 5 s.
    paced = []
    def pcb(err, msg, t0):
        assert err is None, err
        paced.append(time.perf_counter() - t0)
    start = time.perf_counter()
    for i in range(5000):
        due = start + i / 1000
        while time.perf_counter() < due:
            p.poll(0.0005)
        t0 = time.perf_counter()
        p.produce(topic, value, on_delivery=lambda e, m, t0=t0: pcb(e, m, t0))
        p.poll(0)
    p.flush(60)
    paced.sort()
    n_all = n + 5000
    c = Consumer(conf(addr, secure) | {"group.id": "bench", "enable.auto.commit": False, "enable.partition.eof": True,
                                       "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0; start = time.perf_counter()
    while got < n_all:
        for m in c.consume(10000, timeout=1):
            if m.error() is None: got += 1
            elif m.error().code() != KafkaError._PARTITION_EOF: raise Exception(m.error())
    fetch_s = time.perf_counter() - start
    fetched = n_all * size / fetch_s / 2**20
    c.close()
    lat.sort()
    return n * size / produce_s / 2**20, paced[int(len(paced) * 0.99)] * 1000, fetched, paced[len(paced) // 2] * 1000

(ssl_port,) = brokers.free_ports(1)
broker = brokers.OxbowBroker(work / "broker", name="tls-bench", extra_args=[
    "--listeners", "PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl}",
    "--ssl-certificate-file", str(certs.server), "--ssl-key-file", str(certs.server_key)])
broker.options["extra_args"][1] = broker.options["extra_args"][1].format(
    plain=broker.kafka_port, ssl=ssl_port)
plain, tls = broker.bootstrap, f"127.0.0.1:{ssl_port}"
broker.start()
try:
    results = {"PLAINTEXT": [], "SSL": []}
    for r in range(rounds):
        for name, addr, secure in (("PLAINTEXT", plain, False), ("SSL", tls, True)):
            res = run(addr, secure)
            results[name].append(res)
            print(f"round {r} {name:9} produce {res[0]:6.1f} MiB/s  fetch {res[2]:6.1f} MiB/s  "
                  f"at 1000/s: p50 {res[3]:5.1f} ms p99 {res[1]:5.1f} ms", flush=True)
    for name, rs in results.items():
        med = [statistics.median(x[i] for x in rs) for i in range(4)]
        print(f"median {name:9} produce {med[0]:6.1f} MiB/s  fetch {med[2]:6.1f} MiB/s  "
              f"at 1000/s: p50 {med[3]:5.1f} ms p99 {med[1]:5.1f} ms")
finally:
    broker.close()
