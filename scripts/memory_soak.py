#!/usr/bin/env python3
"""Memory under a steady load (issue 17): does the broker's resident memory stay within
its configured budgets, and flat?

Starts one broker (embedded metadata and object store, a fresh data dir) with the memory
flags given (--broker-arg), runs `oxbow-loadtest fanout` against it for --seconds (a fixed
produce rate, acks=all, N tailing consumer groups), and every --sample-every seconds
records the broker's VmRSS and its memory gauges from /metrics:

  oxbow_unsealed_bytes          durable in the WAL, not yet uploaded (bounded by --wal-max-bytes)
  oxbow_partition_tail_bytes    uploaded data kept in partitions' tails (--tail-memory-bytes)
  oxbow_read_cache_bytes        the read cache's memory (--cache-bytes)
  oxbow_catalog_memory_bytes    the in-memory catalogue (estimate)

It prints a table of the samples, the peak RSS, the RSS slope over the first and the
second half (least squares, MiB per minute) and the budgets the flags add up to.

  .venv/bin/python scripts/memory_soak.py --oxbow-bin target/release/oxbow \\
      --loadtest-bin target/release/oxbow-loadtest [--seconds 600] [--rate 40MiB/s] \\
      [--groups 5] [--partitions 6] [--env MALLOC_ARENA_MAX=2] [--json out.json] \\
      [--broker-arg=--cache-bytes --broker-arg=128MiB ...]

Bounded: every wait has a timeout; the broker and the load generator are stopped at the
end, also on Ctrl-C; the data dir is removed unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

GAUGES = (
    "oxbow_unsealed_bytes",
    "oxbow_partition_tail_bytes",
    "oxbow_read_cache_bytes",
    "oxbow_catalog_memory_bytes",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            m = re.search(r"^VmRSS:\s+(\d+)\s+kB", f.read(), re.M)
    except OSError:
        return None
    return int(m.group(1)) * 1024 if m else None


def scrape(http: str) -> dict[str, float]:
    out: dict[str, float] = {}
    try:
        with urllib.request.urlopen(f"http://{http}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return out
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in GAUGES:
            out[name] = float(value)
    return out


def slope_mib_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, bytes), in MiB per minute."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    cov = sum((t - mx) * (v - my) for t, v in points)
    return cov / var * 60 / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--oxbow-bin", required=True)
    ap.add_argument("--loadtest-bin", required=True)
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--sample-every", type=float, default=5.0)
    ap.add_argument("--rate", default="40MiB/s")
    ap.add_argument("--groups", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--retention-ms", type=int, default=120_000,
                    help="--log-retention-ms of the broker: the soak writes tens of GB to the "
                         "local object store, which must not fill the disk")
    ap.add_argument("--broker-arg", action="append", default=[])
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for the broker")
    ap.add_argument("--json")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()

    work = tempfile.mkdtemp(prefix="oxbow-memsoak-")
    kafka, http = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    env = dict(os.environ)
    for kv in a.env:
        k, _, v = kv.partition("=")
        env[k] = v
    log = open(os.path.join(work, "broker.log"), "wb")
    broker = subprocess.Popen(
        [a.oxbow_bin, "serve", "--data-dir", os.path.join(work, "data"),
         "--kafka-addr", kafka, "--http-addr", http,
         "--log-retention-ms", str(a.retention_ms), "--compaction-delete-delay", "30s",
         *a.broker_arg],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    load = None
    samples: list[dict] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://{http}/readyz", timeout=2):
                    break
            except OSError:
                if broker.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"broker did not become ready; see {work}/broker.log")
                time.sleep(0.2)
        load = subprocess.Popen(
            [a.loadtest_bin, "fanout", "-b", kafka, "--duration", f"{a.seconds}s",
             "--warmup", "2s", "--record-size", str(a.record_size),
             "--partitions", str(a.partitions), "--acks", "all", "--rate", a.rate,
             "--groups", str(a.groups)],
            stdout=open(os.path.join(work, "load.out"), "wb"), stderr=subprocess.STDOUT)
        start = time.monotonic()
        end = start + a.seconds + 120
        while load.poll() is None and time.monotonic() < end:
            t = time.monotonic() - start
            s = {"t": round(t, 1), "rss": rss_bytes(broker.pid), **scrape(http)}
            samples.append(s)
            print(f"{t:7.1f}s rss {(s['rss'] or 0) / 2**20:8.1f} MiB  " + "  ".join(
                f"{g[6:-6]} {s.get(g, 0) / 2**20:.1f}" for g in GAUGES), flush=True)
            time.sleep(a.sample_every)
        load_rc = load.poll()
    finally:
        for p in (load, broker):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    with open(os.path.join(work, "load.out"), encoding="utf-8", errors="replace") as f:
        load_out = f.read()
    pts = [(s["t"], s["rss"]) for s in samples if s["rss"] is not None]
    half = len(pts) // 2
    result = {
        "broker_args": a.broker_arg, "env": a.env, "rate": a.rate, "groups": a.groups,
        "seconds": a.seconds, "load_rc": load_rc,
        "rss_peak_mib": max((v for _, v in pts), default=0) / 2**20,
        "rss_end_mib": (pts[-1][1] / 2**20) if pts else None,
        "rss_slope_first_half_mib_per_min": slope_mib_per_min(pts[: half + 1]),
        "rss_slope_second_half_mib_per_min": slope_mib_per_min(pts[half:]),
        "gauge_peaks_mib": {g: max((s.get(g, 0) for s in samples), default=0) / 2**20
                            for g in GAUGES},
        "samples": samples,
        "load_summary": load_out[-3000:],
    }
    print(json.dumps({k: v for k, v in result.items() if k not in ("samples",)}, indent=1))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    if a.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if load_rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
