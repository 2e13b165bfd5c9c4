#!/usr/bin/env python3
"""acks=all on a 3-broker Oxbow cluster in 3 zones (real etcd, S3 on loopback: moto or s3s-fs):
records/s, MB/s, produce latency p50/p99/p999, S3 PUTs per GiB ingested, and local disk
bytes written (WAL + WAL replica copies) per produced byte — for `--durability wal` and
`--durability direct`.

Starts and stops everything itself (etcd, the S3 server, brokers) through the e2e harness
(tests/e2e/cluster.py). Usage, after `scripts/test.sh setup` and a release build:

  OXBOW_BIN=target/release/oxbow .venv/bin/python loadtest/scripts/cluster_durability_bench.py \\
      --durability wal --records 200000 [--rate 20000]

Prints one JSON object. Latency is librdkafka's Message.latency() (produce() to delivery
report); with --rate the producer is paced (open loop) so latency is measured at a known
load, not at saturation where it only shows the client's queue. Bounded: every wait has a
timeout.

`--s3 s3s-fs` runs the cluster on s3s-fs (`cargo install s3s-fs --version 0.14.1 --features
binary --locked`; a Rust server writing objects to files) instead of moto: moto keeps every
object in one Python process, which on a small machine takes the CPU the brokers need and
takes PUTs at ~100 MiB/s. s3s-fs does not make conditional PUTs atomic under racing writers
(the fencing tests need moto), which a benchmark with unique keys does not depend on.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from cluster import BUCKET, Cluster, EtcdServer, MotoServer, S3Process  # noqa: E402

COUNTERS = (
    "oxbow_appended_bytes_total",
    "oxbow_objects_uploaded_total",
    "oxbow_object_bytes_uploaded_total",
    "oxbow_wal_written_bytes_total",
    "oxbow_wal_replica_written_bytes_total",
)


def scrape(http: str) -> dict[str, float]:
    text = requests.get(f"{http}/metrics", timeout=5).text
    out = {}
    for name in COUNTERS:
        m = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    return out


def totals(cluster: Cluster) -> dict[str, float]:
    sums = {n: 0.0 for n in COUNTERS}
    for b in cluster.brokers:
        for k, v in scrape(b.http).items():
            sums[k] += v
    return sums


class S3sFsServer(S3Process):
    """s3s-fs on a free loopback port, with one bucket (a directory under `workdir`)."""

    def __init__(self, workdir: Path, binary: str, bucket: str = BUCKET):
        root = Path(workdir) / "data"
        (root / bucket).mkdir(parents=True)
        argv = [binary, "--host", "127.0.0.1", "--port", "{port}", "--access-key", "test", "--secret-key", "test", str(root)]
        super().__init__(workdir, bucket, "s3s-fs", argv)


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, int(round(p / 100.0 * (len(sorted_values) - 1))))
    return sorted_values[k]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--durability", choices=["wal", "direct"], default="wal")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--min-insync", type=int, default=2)
    ap.add_argument("--rate", type=float, default=0, help="records/s to pace at (0: as fast as possible)")
    ap.add_argument("--flush-interval", default=None, help="default 250ms (wal) / 50ms (direct)")
    ap.add_argument("--timeout-s", type=float, default=300)
    ap.add_argument("--wal-replication-factor", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, data) instead of deleting it")
    ap.add_argument("--s3", choices=["moto", "s3s-fs"], default="moto", help="the S3-compatible server (see above)")
    ap.add_argument("--s3s-fs-bin", default=shutil.which("s3s-fs"), help="the s3s-fs binary (default: on PATH)")
    ap.add_argument(
        "--external",
        default=None,
        help="instead of the built-in producer, run this command ({bootstrap}, {topic} and {http}, the brokers' "
        "HTTP addresses, are filled in; e.g. an oxbow-loadtest invocation) and report the broker counters around it",
    )
    args = ap.parse_args()

    flush = args.flush_interval or ("250ms" if args.durability == "wal" else "50ms")
    work = Path(tempfile.mkdtemp(prefix="oxbow-cluster-bench-"))
    for sub in ("etcd", "s3", "cluster"):
        (work / sub).mkdir()
    if args.s3 == "s3s-fs" and not args.s3s_fs_bin:
        ap.error("--s3 s3s-fs: no s3s-fs binary on PATH; give --s3s-fs-bin")
    etcd = EtcdServer(work / "etcd")
    try:
        s3 = MotoServer(work / "s3") if args.s3 == "moto" else S3sFsServer(work / "s3", args.s3s_fs_bin)
    except BaseException:
        etcd.close()
        raise
    cluster = Cluster(
        work / "cluster",
        etcd,
        s3,
        flush_interval=flush,
        extra_args=["--durability", args.durability, "--wal-replication-factor", str(args.wal_replication_factor)],
        log_format="json",
    )
    try:
        for _ in range(3):
            cluster.add_broker()
        bootstrap = cluster.bootstrap
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics(
            [NewTopic(topic, num_partitions=args.partitions, replication_factor=3, config={"min.insync.replicas": str(args.min_insync)})]
        )[topic].result(30)
        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "batch.size": 65536,
                "message.timeout.ms": 60000,
                "log_level": 3,
            }
        )
        # Warm up until every partition takes an acks=all write (replicas in sync).
        warm_errors = []
        for part in range(args.partitions):
            p.produce(topic, b"warm", partition=part, on_delivery=lambda e, m: e and warm_errors.append(e))
        assert p.flush(60) == 0 and not warm_errors, warm_errors
        before = totals(cluster)
        if args.external:
            import shlex
            import subprocess

            cmd = args.external.format(bootstrap=bootstrap, topic=topic, http=" ".join(b.http for b in cluster.brokers))
            t0 = time.monotonic()
            done = subprocess.run(shlex.split(cmd), timeout=args.timeout_s, capture_output=True, text=True)
            elapsed = time.monotonic() - t0
            time.sleep(1.5)
            d = {k: totals(cluster)[k] - before[k] for k in COUNTERS}
            appended = d["oxbow_appended_bytes_total"] or 1.0
            print(done.stdout[-6000:])
            print(done.stderr[-2000:], file=sys.stderr)
            print(
                json.dumps(
                    {
                        "durability": args.durability,
                        "external_exit": done.returncode,
                        "elapsed_s": round(elapsed, 2),
                        "appended_mb_per_s": round(appended / elapsed / 1e6, 1),
                        "s3_puts_per_gib": round(d["oxbow_objects_uploaded_total"] / (appended / 2**30), 1),
                        "local_wal_bytes_per_produced_byte": round(d["oxbow_wal_written_bytes_total"] / appended, 3),
                        "replica_wal_bytes_per_produced_byte": round(d["oxbow_wal_replica_written_bytes_total"] / appended, 3),
                    }
                )
            )
            return

        payload = b"x" * args.record_size
        latencies: list[float] = []
        errors: list[str] = []

        def on_delivery(err, msg):
            if err is not None:
                errors.append(str(err))
            else:
                latencies.append(msg.latency())

        start = time.monotonic()
        deadline = start + args.timeout_s
        for i in range(args.records):
            if args.rate > 0:
                due = start + i / args.rate
                while time.monotonic() < due:
                    p.poll(0)
            while True:
                try:
                    p.produce(topic, payload, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.01)
            if i % 1000 == 0:
                p.poll(0)
            if time.monotonic() > deadline:
                break
        left = p.flush(max(1.0, deadline - time.monotonic()))
        elapsed = time.monotonic() - start
        time.sleep(1.5)  # let the last seals land before reading the counters
        after = totals(cluster)
        d = {k: after[k] - before[k] for k in COUNTERS}
        appended = d["oxbow_appended_bytes_total"] or 1.0
        lat = sorted(latencies)
        acked = len(latencies)
        print(
            json.dumps(
                {
                    "durability": args.durability,
                    "flush_interval": flush,
                    "records_acked": acked,
                    "errors": len(errors),
                    "undelivered": left,
                    "elapsed_s": round(elapsed, 2),
                    "records_per_s": round(acked / elapsed),
                    "mb_per_s": round(acked * args.record_size / elapsed / 1e6, 1),
                    "latency_ms_p50": round(percentile(lat, 50) * 1000, 2),
                    "latency_ms_p99": round(percentile(lat, 99) * 1000, 2),
                    "latency_ms_p999": round(percentile(lat, 99.9) * 1000, 2),
                    "s3_puts_per_gib": round(d["oxbow_objects_uploaded_total"] / (appended / 2**30), 1),
                    "object_bytes_per_produced_byte": round(d["oxbow_object_bytes_uploaded_total"] / appended, 3),
                    "local_wal_bytes_per_produced_byte": round(d["oxbow_wal_written_bytes_total"] / appended, 3),
                    "replica_wal_bytes_per_produced_byte": round(d["oxbow_wal_replica_written_bytes_total"] / appended, 3),
                    "rate": args.rate,
                }
            )
        )
    finally:
        cluster.close()
        s3.close()
        etcd.close()
        # WALs, replica copies and (s3s-fs) objects: gigabytes after a compare.
        if args.keep:
            print(f"work directory kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
