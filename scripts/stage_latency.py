#!/usr/bin/env python3
"""Where a broker's produce latency goes: quantiles of its stage histograms over a run.

Scrapes an Oxbow broker's /metrics before and after COMMAND (or SECONDS of waiting), and
prints p50 / p99 / p99.9 / count of every latency histogram that moved in between
(`oxbow_request_stage_seconds` per request and stage, `oxbow_wal_*`, `oxbow_replica_wait`,
`oxbow_seal_*`). Quantiles are read from the buckets (linear within a bucket), so they are
within the bucket ratio (sqrt 2) of the truth.

    scripts/stage_latency.py http://127.0.0.1:8080 -- oxbow-loadtest produce --rate 10MiB/s ...
    scripts/stage_latency.py http://127.0.0.1:8080 --seconds 30
"""

import argparse
import re
import subprocess
import sys
import time
import urllib.request

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)_(bucket|count)(\{[^}]*\})? ([0-9.eE+-]+|\+Inf|NaN)$')
LE = re.compile(r'le="([^"]+)"')


def scrape(base):
    with urllib.request.urlopen(base.rstrip("/") + "/metrics", timeout=10) as r:
        text = r.read().decode()
    series = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if not m or m.group(2) != "bucket":
            continue
        name, labels = m.group(1), m.group(3) or ""
        le = LE.search(labels).group(1)
        key_labels = LE.sub("", labels).replace(",}", "}").replace("{,", "{").replace("{}", "")
        bound = float("inf") if le == "+Inf" else float(le)
        series.setdefault((name, key_labels), {})[bound] = float(m.group(4))
    return series


def quantile(buckets, q):
    """buckets: sorted [(upper bound, cumulative count)] of one run's deltas."""
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, cum in buckets:
        if cum >= rank:
            if bound == float("inf"):
                return lower
            inside = cum - below
            frac = (rank - below) / inside if inside else 1.0
            return lower + (bound - lower) * frac
        lower, below = bound, cum
    return lower


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("http", help="the broker's HTTP base URL")
    ap.add_argument("--seconds", type=float, help="wait this long instead of running a command")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- command to run")
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd and args.seconds is None:
        ap.error("give a command after -- or --seconds")
    before = scrape(args.http)
    rc = 0
    if cmd:
        rc = subprocess.call(cmd)
    else:
        time.sleep(args.seconds)
    after = scrape(args.http)
    print("| histogram | labels | p50 ms | p99 ms | p99.9 ms | count |")
    print("|---|---|---:|---:|---:|---:|")
    for key in sorted(after):
        a, b = after[key], before.get(key, {})
        deltas = sorted((bound, a[bound] - b.get(bound, 0.0)) for bound in a)
        if deltas[-1][1] <= 0:
            continue
        qs = [quantile(deltas, q) for q in (0.5, 0.99, 0.999)]
        cells = " | ".join("-" if v is None else f"{v * 1000:.2f}" for v in qs)
        print(f"| {key[0]} | {key[1]} | {cells} | {int(deltas[-1][1])} |")
    return rc


if __name__ == "__main__":
    sys.exit(main())
