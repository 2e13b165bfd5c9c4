#!/usr/bin/env python3
"""A soak at steady load with short retention (issue 14): do the object store and the
metadata service stop growing once retention deletes as fast as the producer writes?

One broker on a fresh etcd and a fresh moto S3 server (the e2e harness, through
scripts/metadata_scale.py's `Stack`), one topic of --partitions with the topic configs
from --topic-config (default `retention.ms=60000`), and a steady produce load of
--rate-mb MB/s (10^6 bytes) of --value-bytes values (acks=all, idempotent, confluent-kafka,
message i to partition i % partitions) for --seconds. Every --sample-every seconds it
records:

- S3: objects and bytes under the cluster's prefix, `data/` (sealed objects), `segments/`
  (compacted per-partition segments) and anything else separately (ListObjectsV2);
- etcd: revision, dbSize and dbSizeInUse (the JSON gateway's /v3/maintenance/status) and
  the number of keys under the cluster's root (a count-only range);
- the value bytes and messages acknowledged so far;
- every partition's log start and log end offset (ListOffsets earliest / latest through
  confluent-kafka's `get_watermark_offsets`, uncached);
- a few broker gauges and counters from /metrics (catalogue entries, compacted revision,
  objects deleted by compaction, unsealed bytes).

At the end it fits a least-squares line to each quantity over the first half of the
samples and over the second half (the middle sample belongs to both) and reports the
growth per minute of each. A quantity that should stop growing is called **flat** when its
second-half growth is below 10% of its first-half growth (--flat-fraction), or below 1% of
its own mean second-half level per minute (--flat-level-fraction; for quantities that did
not grow in the first half either), or below two standard errors of the fitted slope (a
sawtooth around a level, not a trend). Least squares, not end points, because retention and
compaction make every store quantity a sawtooth of one compaction round's period.

  .venv/bin/python scripts/retention_soak.py --oxbow-bin /work/bin/oxbow-retention \
      [--rate-mb 10] [--seconds 360] [--partitions 24] [--topic-config retention.ms=60000] \
      [--broker-arg=--compaction-interval --broker-arg=10s ...] [--json out.json] [--keep]
  .venv/bin/python scripts/retention_soak.py --compare before.json after.json
  .venv/bin/python scripts/retention_soak.py --report run.json

`--compare` prints a before/after table of saved runs (etcd's database, revisions and keys,
the bucket) and `--report` a saved run's report again; neither starts anything.

Bounded: every wait has a timeout, and every process it starts (etcd, moto, the broker) is
stopped at the end, also on Ctrl-C or SIGTERM. The work dir (broker and etcd logs, the
etcd data dir) is removed unless --keep or the run failed.

Note: etcd's dbSize only shrinks on `etcdctl defrag` (README, "etcd settings"); what has
to be flat is dbSizeInUse. Oxbow compacts etcd's history to --metadata-history-retention
ago (default 5 min, ARCHITECTURE.md decision 24), so the history in use only levels off
once a run is longer than that plus one sampling period of it (a tenth).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import metadata_scale as ms  # noqa: E402  (also puts tests/e2e on sys.path)
import requests  # noqa: E402
from confluent_kafka import Producer, TopicPartition  # noqa: E402

import brokers  # noqa: E402
from helpers import consumer, create_topic  # noqa: E402

# Broker metrics kept with each sample (summed over labels).
BROKER_METRICS = (
    "oxbow_catalog_entries",
    "oxbow_catalog_objects",
    "oxbow_metadata_compacted_revision",
    "oxbow_metadata_compactions_total",
    "oxbow_compaction_rounds_total",
    "oxbow_compaction_objects_deleted_total",
    "oxbow_compaction_segments_written_total",
    "oxbow_compaction_failures_total",
    "oxbow_orphan_objects_deleted_total",
    "oxbow_objects_uploaded_total",
    "oxbow_upload_failures_total",
    "oxbow_unsealed_bytes",
)

# (key, label, unit divisor, unit, should it stop growing?)
QUANTITIES = (
    ("s3_data_objects", "S3 data/ objects", 1, "", True),
    ("s3_data_bytes", "S3 data/ bytes", 2**20, "MiB", True),
    ("s3_segments_objects", "S3 segments/ objects", 1, "", True),
    ("s3_segments_bytes", "S3 segments/ bytes", 2**20, "MiB", True),
    ("s3_other_objects", "S3 other objects", 1, "", True),
    ("s3_objects", "S3 objects, all", 1, "", True),
    ("s3_bytes", "S3 bytes, all", 2**20, "MiB", True),
    ("etcd_db_size_in_use", "etcd dbSizeInUse", 2**20, "MiB", True),
    ("etcd_db_size", "etcd dbSize (no defrag)", 2**20, "MiB", True),
    ("etcd_keys", "etcd keys under the root", 1, "", True),
    ("catalog_entries", "broker catalogue entries", 1, "", True),
    ("retained_records", "records retained (Σ end − start)", 1, "", True),
    ("etcd_revision", "etcd revision", 1, "", False),
    ("produced_bytes", "produced (acked) bytes", 2**20, "MiB", False),
    ("log_start_sum", "Σ log start offsets", 1, "", False),
    ("log_end_sum", "Σ log end offsets", 1, "", False),
)


# -- load -------------------------------------------------------------------------------


class SoakLoad(ms.Load):
    """metadata_scale's paced producer (message seq to partition seq % partitions), with
    batching suited to MB/s rather than messages/s, and delivery reports that only count:
    a soak acknowledges millions of messages, too many to keep."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float, value_bytes: int, linger_ms: int):
        super().__init__(bootstrap, topic, partitions, rate, value_bytes, tag=uuid.uuid4().hex[:6])
        self.p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": linger_ms,
                "batch.size": 1_000_000,
                "message.timeout.ms": 60000,
                "request.timeout.ms": 10000,
                "retry.backoff.ms": 50,
                "retry.backoff.max.ms": 500,
                "queue.buffering.max.messages": 1_000_000,
                "queue.buffering.max.kbytes": 512 * 1024,
                "log_level": 3,
            }
        )
        self.acked_msgs = 0
        self.acked_bytes = 0

    def _cb(self, err, msg):
        with self.lock:
            if err is None:
                self.acked_msgs += 1
                self.acked_bytes += len(msg.value())
                self.first_ack.setdefault(msg.partition(), time.monotonic())
            else:
                self.failed += 1
                self.error_samples[err.name()] += 1

    def progress(self) -> tuple[int, int, int, int]:
        """(sent, acked messages, acked value bytes, failed)."""
        with self.lock:
            return self.sent, self.acked_msgs, self.acked_bytes, self.failed


# -- sampling ---------------------------------------------------------------------------


def bucket_usage(stack: ms.Stack) -> dict[str, int]:
    prefix = stack.s3_prefix
    keys = stack.moto.keys(prefix)  # also refreshes stack.moto.sizes for these keys
    out = {f"s3_{k}_{u}": 0 for k in ("data", "segments", "other") for u in ("objects", "bytes")}
    for key in keys:
        top = key[len(prefix) :].split("/", 1)[0]
        kind = top if top in ("data", "segments") else "other"
        out[f"s3_{kind}_objects"] += 1
        out[f"s3_{kind}_bytes"] += int(stack.moto.sizes.get(key, 0))
    out["s3_objects"] = len(keys)
    out["s3_bytes"] = out["s3_data_bytes"] + out["s3_segments_bytes"] + out["s3_other_bytes"]
    return out


def watermarks(c, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    out = {}
    for part in range(partitions):
        low, high = c.get_watermark_offsets(TopicPartition(topic, part), timeout=10, cached=False)
        out[part] = (low, high)
    return out


def sample(stack: ms.Stack, load: SoakLoad, wm_client, topic: str, partitions: int, t0: float) -> dict:
    t = time.monotonic()
    sent, acked_msgs, acked_bytes, failed = load.progress()
    s = {"t_s": t - t0, "sent_msgs": sent, "acked_msgs": acked_msgs, "produced_bytes": acked_bytes, "failed_msgs": failed}
    s.update(bucket_usage(stack))
    st = ms.etcd_status(stack.etcd.url)
    s["etcd_revision"] = st["revision"]
    s["etcd_db_size"] = st["db_size"]
    s["etcd_db_size_in_use"] = st["db_size_in_use"]
    s["etcd_keys"] = ms.etcd_key_count(stack.etcd.url, stack.etcd_prefix)
    wm = watermarks(wm_client, topic, partitions)
    s["partitions"] = {p: list(v) for p, v in wm.items()}
    s["log_start_sum"] = sum(lo for lo, _ in wm.values())
    s["log_end_sum"] = sum(hi for _, hi in wm.values())
    s["retained_records"] = s["log_end_sum"] - s["log_start_sum"]
    s["partitions_started_above_0"] = sum(1 for lo, _ in wm.values() if lo > 0)
    b = stack.cluster.brokers[0]
    metrics = ms.parse_prometheus(requests.get(f"{b.http}/metrics", timeout=10).text) if b.alive else {}
    s["broker"] = {name: ms.metric_sum(metrics, name) for name in BROKER_METRICS}
    s["catalog_entries"] = s["broker"]["oxbow_catalog_entries"]
    s["sample_s"] = time.monotonic() - t
    return s


# -- analysis ---------------------------------------------------------------------------


def slope_per_min(points: list[tuple[float, float]]) -> tuple[float | None, float | None]:
    """Least-squares slope per minute and its standard error (None when undefined)."""
    if len(points) < 2:
        return None, None
    mt = statistics.fmean(t for t, _ in points)
    mv = statistics.fmean(v for _, v in points)
    den = sum((t - mt) ** 2 for t, _ in points)
    if den == 0:
        return None, None
    slope = sum((t - mt) * (v - mv) for t, v in points) / den
    if len(points) < 3:
        return 60.0 * slope, None
    resid = sum((v - (mv + slope * (t - mt))) ** 2 for t, v in points)
    return 60.0 * slope, 60.0 * (resid / (len(points) - 2) / den) ** 0.5


def halves(samples: list[dict]) -> tuple[list[dict], list[dict]]:
    end = samples[-1]["t_s"]
    mid = end / 2
    # The sample nearest the middle belongs to both halves.
    i_mid = min(range(len(samples)), key=lambda i: abs(samples[i]["t_s"] - mid))
    return samples[: i_mid + 1], samples[i_mid:]


def analyse(samples: list[dict], flat_fraction: float, flat_level_fraction: float) -> dict:
    first, second = halves(samples)
    out = {}
    for key, _, _, _, should_flatten in QUANTITIES:
        g1, _ = slope_per_min([(s["t_s"], s[key]) for s in first])
        g2, se2 = slope_per_min([(s["t_s"], s[key]) for s in second])
        level2 = statistics.fmean(s[key] for s in second)
        flat = None
        if should_flatten and g1 is not None and g2 is not None:
            flat = (
                (g1 > 0 and g2 < flat_fraction * g1)
                or g2 <= flat_level_fraction * abs(level2)
                # A sawtooth around a level: the trend is not told apart from zero.
                or (se2 is not None and g2 < 2 * se2)
            )
        out[key] = {
            "first_half_per_min": g1,
            "second_half_per_min": g2,
            "second_half_per_min_se": se2,
            "second_half_mean": level2,
            "start": samples[0][key],
            "mid": second[0][key],
            "end": samples[-1][key],
            "min": min(s[key] for s in samples),
            "max": max(s[key] for s in samples),
            "flat": flat,
        }
    span1 = first[-1]["t_s"] - first[0]["t_s"]
    span2 = second[-1]["t_s"] - second[0]["t_s"]
    out["_halves"] = {
        "first": [first[0]["t_s"], first[-1]["t_s"]],
        "second": [second[0]["t_s"], second[-1]["t_s"]],
        "revisions_per_s_first": (first[-1]["etcd_revision"] - first[0]["etcd_revision"]) / span1 if span1 else None,
        "revisions_per_s_second": (second[-1]["etcd_revision"] - second[0]["etcd_revision"]) / span2 if span2 else None,
        "produced_mb_per_s_first": (first[-1]["produced_bytes"] - first[0]["produced_bytes"]) / span1 / 1e6 if span1 else None,
        "produced_mb_per_s_second": (second[-1]["produced_bytes"] - second[0]["produced_bytes"]) / span2 / 1e6
        if span2
        else None,
    }
    return out


def retained_seconds(s: dict, rate_msgs_per_partition: float) -> float | None:
    """The median partition's retained window, in seconds of the load."""
    if rate_msgs_per_partition <= 0:
        return None
    return statistics.median((hi - lo) / rate_msgs_per_partition for lo, hi in s["partitions"].values())


# -- output -------------------------------------------------------------------------------

fmt = ms.fmt
table = ms.table


def report(result: dict, args) -> str:
    out = []
    samples = result.get("samples", [])
    out.append(
        f"Load: target {args.rate_mb:g} MB/s = {result['rate_msgs']:,.0f} msg/s of {args.value_bytes} B, "
        f"{args.partitions} partitions, acks=all, idempotent, linger.ms={args.linger_ms}; topic configs "
        f"{result['topic_config']}; broker args `{' '.join(result['broker_args'])}`; "
        f"{args.seconds:g} s of load, a sample every {args.sample_every:g} s.\n"
    )
    if len(samples) < 3:
        out.append(f"too few samples ({len(samples)})")
        if "error" in result:
            out.append(f"\nFAILED: {result['error']}")
        return "\n".join(out)
    per_part = result["rate_msgs"] / args.partitions
    out.append("**Samples**\n")
    rows = []
    prev = None
    for s in samples:
        rate = (
            (s["produced_bytes"] - prev["produced_bytes"]) / (s["t_s"] - prev["t_s"]) / 1e6
            if prev is not None and s["t_s"] > prev["t_s"]
            else None
        )
        rows.append(
            [
                fmt(s["t_s"], 0),
                fmt(s["produced_bytes"] / 1e6, 0),
                fmt(rate),
                f"{fmt(s['s3_data_objects'])} / {fmt(s['s3_data_bytes'] / 2**20)}",
                f"{fmt(s['s3_segments_objects'])} / {fmt(s['s3_segments_bytes'] / 2**20)}",
                f"{fmt(s['s3_objects'])} / {fmt(s['s3_bytes'] / 2**20)}",
                fmt(s["etcd_revision"]),
                fmt(s["etcd_db_size"] / 2**20, 2),
                fmt(s["etcd_db_size_in_use"] / 2**20, 2),
                fmt(s["etcd_keys"]),
                fmt(int(s["catalog_entries"])),
                f"{s['partitions_started_above_0']}/{len(s['partitions'])}",
                fmt(s["log_start_sum"]),
                fmt(s["log_end_sum"]),
                fmt(retained_seconds(s, per_part), 0),
            ]
        )
        prev = s
    out.append(
        table(
            [
                "t s",
                "produced MB",
                "MB/s",
                "data/ objects / MiB",
                "segments/ objects / MiB",
                "all objects / MiB",
                "etcd rev",
                "dbSize MiB",
                "dbSizeInUse MiB",
                "etcd keys",
                "catalogue entries",
                "partitions with log start > 0",
                "Σ log start",
                "Σ log end",
                "retained s (median partition)",
            ],
            rows,
        )
    )
    a = result["analysis"]
    h = a["_halves"]
    out.append(
        f"\n**Growth per minute** (least squares; first half t={h['first'][0]:.0f}–{h['first'][1]:.0f} s, "
        f"second half t={h['second'][0]:.0f}–{h['second'][1]:.0f} s; ± one standard error). Flat: second-half growth < "
        f"{args.flat_fraction:.0%} of the first half's, or < {args.flat_level_fraction:.0%} of its own level per minute, "
        f"or less than two standard errors (a sawtooth around a level).\n"
    )
    rows = []
    for key, label, div, unit, should in QUANTITIES:
        q = a[key]
        u = f" {unit}" if unit else ""
        rows.append(
            [
                label + (f" ({unit})" if unit else ""),
                fmt(q["start"] / div, 2 if div > 1 else 0) if isinstance(q["start"], (int, float)) else "–",
                fmt(q["mid"] / div, 2 if div > 1 else 0),
                fmt(q["end"] / div, 2 if div > 1 else 0),
                fmt(q["first_half_per_min"] / div if q["first_half_per_min"] is not None else None, 2) + u,
                fmt(q["second_half_per_min"] / div if q["second_half_per_min"] is not None else None, 2)
                + (f" ± {fmt(q['second_half_per_min_se'] / div, 2)}" if q.get("second_half_per_min_se") is not None else "")
                + u,
                ("**flat**" if q["flat"] else "**GROWING**") if should else "grows with the load",
            ]
        )
    out.append(table(["quantity", "start", "middle", "end", "first half /min", "second half /min", "second half"], rows))
    last = samples[-1]
    out.append("\n**Figures**\n")
    db2 = a["etcd_db_size"]["second_half_per_min"]
    use2 = a["etcd_db_size_in_use"]["second_half_per_min"]
    out.append(
        f"- produced: {fmt(h['produced_mb_per_s_first'], 2)} MB/s (first half), {fmt(h['produced_mb_per_s_second'], 2)} MB/s "
        f"(second half); {fmt(last['acked_msgs'])} acked, {fmt(last['failed_msgs'])} failed, "
        f"{fmt(result.get('undelivered'))} undelivered at the end"
    )
    out.append(
        f"- etcd revisions/s: {fmt(h['revisions_per_s_first'], 2)} (first half), {fmt(h['revisions_per_s_second'], 2)} (second half)"
    )
    out.append(
        f"- etcd db growth per hour, extrapolated from the second half: dbSize {fmt(db2 * 60 / 2**20 if db2 is not None else None, 1)} MiB/h, "
        f"dbSizeInUse {fmt(use2 * 60 / 2**20 if use2 is not None else None, 1)} MiB/h"
    )
    out.append(
        f"- bucket across the run: {fmt(a['s3_objects']['min'])}–{fmt(a['s3_objects']['max'])} objects, "
        f"{fmt(a['s3_bytes']['min'] / 2**20)}–{fmt(a['s3_bytes']['max'] / 2**20)} MiB; second-half mean "
        f"{fmt(a['s3_objects']['second_half_mean'], 0)} objects, {fmt(a['s3_bytes']['second_half_mean'] / 2**20)} MiB "
        f"(= {fmt(a['s3_bytes']['second_half_mean'] / 1e6 / h['produced_mb_per_s_second'] if h['produced_mb_per_s_second'] else None, 0)} s of load)"
    )
    first, second = halves(samples)
    rounds = [h_[-1]["broker"]["oxbow_compaction_rounds_total"] - h_[0]["broker"]["oxbow_compaction_rounds_total"] for h_ in (first, second)]
    span2 = second[-1]["t_s"] - second[0]["t_s"]
    out.append(
        f"- compaction rounds started: {fmt(int(rounds[0]))} in the first half, {fmt(int(rounds[1]))} in the second "
        f"(one per {fmt(span2 / rounds[1] if rounds[1] else None, 0)} s; asked: every --compaction-interval). Retention is "
        f"applied at the start of a round and deletions at its end, so a half with fewer rounds than its length / "
        f"interval has lagging retention, and a least-squares slope over it can hide a sawtooth longer than the half"
    )
    bm = last["broker"]
    out.append(
        f"- broker at the end: compacted etcd revision {fmt(int(bm['oxbow_metadata_compacted_revision']))} "
        f"({fmt(int(bm['oxbow_metadata_compactions_total']))} compactions), "
        f"{fmt(int(bm['oxbow_compaction_rounds_total']))} compaction rounds, "
        f"{fmt(int(bm['oxbow_compaction_objects_deleted_total']))} objects deleted by compaction/retention, "
        f"{fmt(int(bm['oxbow_compaction_failures_total']))} compaction failures, "
        f"{fmt(int(bm['oxbow_upload_failures_total']))} upload failures, "
        f"{fmt(int(bm['oxbow_orphan_objects_deleted_total']))} orphans deleted"
    )
    lp = result.get("broker_log", {})
    if lp:
        out.append(
            f"- broker log: {fmt(lp.get('log_start_advanced'))} 'log start offset advanced' lines; "
            f"{fmt(lp.get('count'))} WARN/ERROR lines"
            + (f", commonest ({lp['top_count']}×): `{lp['top']}`" if lp.get("top") else "")
        )
    if result.get("problems"):
        out.append("\n**Looked wrong**\n")
        out += [f"- {p}" for p in result["problems"]]
    if "error" in result:
        out.append(f"\nFAILED: {result['error']}")
    return "\n".join(out)


def compare(paths: list[str]) -> str:
    runs = [json.loads(Path(p).read_text()) for p in paths]
    headers = ["quantity"] + [
        f"{Path(p).stem}: {', '.join(f'{k}={v}' for k, v in r['topic_config'].items())}" for p, r in zip(paths, runs)
    ]
    rows = []

    def row(label, f):
        rows.append([label] + [f(r) for r in runs])

    def per_h(key, div=2**20):
        return lambda r: fmt(
            r["analysis"][key]["second_half_per_min"] * 60 / div
            if r["analysis"][key]["second_half_per_min"] is not None
            else None
        )

    row("broker args", lambda r: "`" + " ".join(r["broker_args"]) + "`")
    row("produced MB/s (second half)", lambda r: fmt(r["analysis"]["_halves"]["produced_mb_per_s_second"], 2))
    row("etcd revisions/s (first / second half)", lambda r: f"{fmt(r['analysis']['_halves']['revisions_per_s_first'], 2)} / {fmt(r['analysis']['_halves']['revisions_per_s_second'], 2)}")
    row("etcd dbSize at end MiB", lambda r: fmt(r["samples"][-1]["etcd_db_size"] / 2**20, 2))
    row("etcd dbSizeInUse at end MiB", lambda r: fmt(r["samples"][-1]["etcd_db_size_in_use"] / 2**20, 2))
    row("etcd dbSize growth MiB/h (second half)", per_h("etcd_db_size"))
    row("etcd dbSizeInUse growth MiB/h (second half)", per_h("etcd_db_size_in_use"))
    row("etcd keys at end", lambda r: fmt(r["samples"][-1]["etcd_keys"]))
    row("etcd keys growth /h (second half)", per_h("etcd_keys", 1))
    row("S3 objects at end", lambda r: fmt(r["samples"][-1]["s3_objects"]))
    row("S3 MiB at end", lambda r: fmt(r["samples"][-1]["s3_bytes"] / 2**20))
    row("S3 MiB growth /h (second half)", per_h("s3_bytes"))
    row("Σ log start at end", lambda r: fmt(r["samples"][-1]["log_start_sum"]))
    return table(headers, rows)


# -- one run ------------------------------------------------------------------------------


def progress(t0: float, what: str) -> None:
    print(f"    t+{time.monotonic() - t0:6.1f}s  {what}", file=sys.stderr, flush=True)


def check(result: dict, args) -> list[str]:
    """What looked wrong, from the samples alone."""
    problems = []
    samples = result["samples"]
    last = samples[-1]
    target = result["rate_msgs"] * args.value_bytes / 1e6
    got = result["analysis"]["_halves"]["produced_mb_per_s_second"] or 0
    if got < 0.9 * target:
        problems.append(f"the load was not sustained: {got:.2f} MB/s in the second half against {target:.2f} MB/s asked")
    if last["failed_msgs"]:
        problems.append(f"{last['failed_msgs']} messages failed delivery")
    retention_ms = int(result["topic_config"].get("retention.ms", "604800000"))
    if 0 <= retention_ms and retention_ms / 1000 + 60 < last["t_s"]:
        stuck = [p for p, (lo, _) in last["partitions"].items() if lo == 0]
        if stuck:
            problems.append(f"log start still 0 at t={last['t_s']:.0f} s on partitions {stuck[:24]}")
        for key, _, _, _, should in QUANTITIES:
            if should and result["analysis"][key]["flat"] is False:
                problems.append(f"{key} still grows in the second half")
    return problems


def run(args, result: dict) -> None:
    """One soak; fills `result` as it goes, so a failure part-way keeps the samples."""
    topic_config = dict(kv.split("=", 1) for kv in (args.topic_config or ["retention.ms=60000"]))
    rate_msgs = args.rate_mb * 1e6 / args.value_bytes
    result.update(
        {"topic_config": topic_config, "broker_args": list(args.broker_arg), "rate_msgs": rate_msgs, "samples": []}
    )
    t0 = time.monotonic()
    workdir = Path(args.workdir)
    stack = ms.Stack(workdir, args, 1)
    progress(t0, "etcd, moto and the broker ready")
    load: SoakLoad | None = None
    wm = None
    try:
        c = stack.cluster
        b = c.brokers[0]
        result["broker_log_path"] = str(b.log_path)
        topic = f"soak-{uuid.uuid4().hex[:8]}"
        create_topic(c.bootstrap, topic, args.partitions, config=topic_config, timeout=args.create_timeout)
        result["topic"] = topic
        progress(t0, f"topic {topic} created ({args.partitions} partitions, {topic_config})")
        load = SoakLoad(c.bootstrap, topic, args.partitions, rate_msgs, args.value_bytes, args.linger_ms)
        load.start()
        load.wait_every_partition_acked(args.create_timeout)
        progress(t0, "every partition acknowledged a write; sampling")
        wm = consumer(c.bootstrap)
        alive = {b.broker_id}
        t_load = time.monotonic()
        k = 0
        while True:
            s = sample(stack, load, wm, topic, args.partitions, t_load)
            result["samples"].append(s)
            progress(
                t0,
                f"t={s['t_s']:5.0f}s  {s['produced_bytes'] / 1e6:8.0f} MB acked  objects {s['s3_objects']:5d} "
                f"({s['s3_bytes'] / 2**20:7.1f} MiB)  etcd rev {s['etcd_revision']} in-use "
                f"{s['etcd_db_size_in_use'] / 2**20:.2f} MiB keys {s['etcd_keys']}  log start>0 on "
                f"{s['partitions_started_above_0']}/{args.partitions}  (sampled in {s['sample_s']:.1f}s)",
            )
            if args.json_out:
                write_json(args, result)
            k += 1
            due = t_load + k * args.sample_every
            if due > t_load + args.seconds + 0.5:
                break
            ms.sleep_watching(max(0.0, due - time.monotonic()), load, stack, alive)
        result["undelivered"] = load.finish(timeout=30)
        progress(t0, f"load stopped ({result['undelivered']} undelivered)")
    finally:
        try:
            if wm is not None:
                wm.close()
            if load is not None:
                load.stop_event.set()
                load.join(10)
                load.p = None  # destroyed before the broker stops, so it does not log its going away
        finally:
            stack.close()
            result["broker_stop"] = dict(stack.stopped)
            progress(t0, "stopped")
    if len(result["samples"]) >= 3:
        result["analysis"] = analyse(result["samples"], args.flat_fraction, args.flat_level_fraction)
        result["problems"] = check(result, args)
    b = stack.cluster.brokers[0]
    result["broker_log"] = ms.log_problems(b.log_path, 0)
    with open(b.log_path, errors="replace") as f:
        result["broker_log"]["log_start_advanced"] = f.read().count("log start offset advanced")


def write_json(args, result: dict) -> None:
    Path(args.json_out).write_text(json.dumps({"args": vars(args), **result}, indent=2, default=str))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--oxbow-bin",
        default=os.environ.get("OXBOW_BIN", str(ROOT / "target" / "debug" / "oxbow")),
        help="the oxbow binary (default: $OXBOW_BIN or target/debug/oxbow)",
    )
    ap.add_argument("--partitions", type=int, default=24)
    ap.add_argument("--topic-config", action="append", help="k=v topic config (repeatable; default retention.ms=60000)")
    ap.add_argument("--rate-mb", type=float, default=10, help="MB/s (10^6 bytes) of values, over all partitions")
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--linger-ms", type=int, default=20, help="the producer's linger.ms")
    ap.add_argument("--seconds", type=float, default=360, help="load duration (sampled throughout)")
    ap.add_argument("--sample-every", type=float, default=20)
    ap.add_argument(
        "--broker-arg",
        action="append",
        help="extra `oxbow serve` argument (repeatable; default --compaction-interval 10s --compaction-delete-delay 10s)",
    )
    ap.add_argument("--flush-interval", default="250ms", help="the broker's --flush-interval")
    ap.add_argument("--session-timeout", default="6s", help="the broker's --session-timeout (lease TTL)")
    ap.add_argument("--flat-fraction", type=float, default=0.10)
    ap.add_argument("--flat-level-fraction", type=float, default=0.01)
    ap.add_argument("--create-timeout", type=float, default=120)
    ap.add_argument("--stop-timeout", type=float, default=30, help="SIGTERM grace before SIGKILL")
    ap.add_argument("--json", dest="json_out", help="write the raw samples and the analysis here")
    ap.add_argument("--workdir", help="where logs and data go (default: a temp dir, removed unless --keep)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (logs) after the run")
    ap.add_argument("--compare", nargs="+", metavar="JSON", help="print a before/after table of saved runs; run nothing")
    ap.add_argument("--report", metavar="JSON", help="print the report of a saved run (--json) again; run nothing")
    args = ap.parse_args()

    if args.compare:
        print(compare(args.compare))
        return 0
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        saved_args = argparse.Namespace(**saved["args"])
        saved["analysis"] = analyse(saved["samples"], saved_args.flat_fraction, saved_args.flat_level_fraction)
        saved["problems"] = check(saved, saved_args)
        print(report(saved, saved_args))
        return 0
    if args.broker_arg is None:
        args.broker_arg = ["--compaction-interval", "10s", "--compaction-delete-delay", "10s"]
    if not Path(args.oxbow_bin).is_file():
        print(f"no oxbow binary at {args.oxbow_bin}", file=sys.stderr)
        return 2
    os.environ["OXBOW_BIN"] = str(Path(args.oxbow_bin).resolve())

    def on_sigterm(signum, frame):
        raise ms.Interrupted("SIGTERM")

    signal.signal(signal.SIGTERM, on_sigterm)
    atexit.register(brokers.kill_all)

    args.workdir = args.workdir or tempfile.mkdtemp(prefix="oxbow-retention-soak-")
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    print(f"work dir: {args.workdir}  binary: {args.oxbow_bin}", file=sys.stderr)
    result: dict = {}
    failed = False
    try:
        run(args, result)
    except (KeyboardInterrupt, ms.Interrupted):
        print("interrupted: everything started was stopped", file=sys.stderr)
        failed = True
        result["error"] = "interrupted"
    except Exception as e:
        failed = True
        result["error"] = f"{type(e).__name__}: {e}"[:2000]
    finally:
        brokers.kill_all()
        if "analysis" not in result and len(result.get("samples", [])) >= 3:
            result["analysis"] = analyse(result["samples"], args.flat_fraction, args.flat_level_fraction)
        if args.json_out and result:
            write_json(args, result)
        if result.get("analysis"):
            print(report(result, args))
        elif result:
            print(f"FAILED: {result.get('error')}")
        if args.keep or failed:
            print(f"work dir kept: {args.workdir}", file=sys.stderr)
        else:
            shutil.rmtree(args.workdir, ignore_errors=True)
    return 1 if failed or result.get("problems") else 0


if __name__ == "__main__":
    sys.exit(main())
