"""The durability test of the cluster issue, Jepsen-style and bounded in time.

3 brokers in 3 AZs, a real etcd, a real S3-compatible server (moto). Two idempotent
acks=all producers write unique values (`{producer}-{seq}`, 24 keys) to a 12-partition
topic while a nemesis runs a fixed number of cycles, alternating:
- kill -9 a random broker, restart it a few seconds later (its partitions fail over with
  WAL-tail recovery; it rejoins and is given its share back by graceful transfers);
- SIGSTOP a random broker past its session timeout, then SIGCONT (it is fenced, its
  partitions fail over, it comes back with a new lease).
Then every partition is read from the start and checked: lost = 0 (every acknowledged
value present, at the offset it was acknowledged at), offsets dense from 0, per-key order
per producer; duplicates and delivery errors are counted and printed.

Reproduce: the seed is printed (OXBOW_JEPSEN_SEED=N replays the same nemesis schedule;
client timing still varies); a failure prints the event history. OXBOW_JEPSEN_CYCLES and
OXBOW_JEPSEN_NEMESIS (e.g. `kill`) change the schedule for measurements. Figures printed: failover
time from the fault to the first acknowledged write on a moved partition (p50/p99 over
the cycles), throughput in steady state vs during failover.
"""

from __future__ import annotations

import os
import random
import shutil
import time

import pytest

from cluster import ProducerThread, check_history, cluster, etcd_server, moto_server, percentile, read_all  # noqa: F401
from helpers import create_topic, unique, wait_until

pytestmark = pytest.mark.oxbow_only

PARTITIONS = 12
CYCLES = int(os.environ.get("OXBOW_JEPSEN_CYCLES", "4"))
# Which faults the nemesis alternates between (comma-separated: kill, pause).
NEMESIS = os.environ.get("OXBOW_JEPSEN_NEMESIS", "kill,pause").split(",")
SESSION_S = 3.0
RATE_PER_PRODUCER = 250.0


def test_jepsen_durability_under_kills_and_pauses(cluster):
    seed = int(os.environ.get("OXBOW_JEPSEN_SEED", str(random.randrange(1 << 32))))
    rng = random.Random(seed)
    print(f"\njepsen seed {seed} ({CYCLES} nemesis cycles); replay with OXBOW_JEPSEN_SEED={seed}")
    c = cluster(3)  # default --flush-interval (250 ms): kills land on unsealed data
    topic = create_topic(c.bootstrap, unique("jepsen"), PARTITIONS)
    producers = [ProducerThread(c.bootstrap, topic, name=f"p{i}", rate=RATE_PER_PRODUCER) for i in range(2)]
    failovers: list[float] = []
    during: list[float] = []
    started = time.monotonic()
    summary = None
    try:
        for p in producers:
            p.start()
        wait_until(lambda: all(p.acked_count() > 200 for p in producers), timeout=20, what="first acks")
        steady_from = time.monotonic()
        time.sleep(2)
        steady = sum(len(p.acks_after(steady_from)) for p in producers) / (time.monotonic() - steady_from)
        for cycle in range(CYCLES):
            victim = rng.choice([1, 2, 3])
            kind = NEMESIS[cycle % len(NEMESIS)]
            before = c.leaders(topic)
            moved = {p for p, b in before.items() if b == victim}
            t0 = time.monotonic()
            if kind == "kill":
                c.kill9(victim)
            else:
                c.pause(victim)
            # Its partitions move once its lease is gone; the first ack on one of them ends
            # the failover.
            c.wait_leaders_on(topic, {1, 2, 3} - {victim}, timeout=SESSION_S + 12, partitions=PARTITIONS)
            wait_until(
                lambda: any(p.acks_after(t0 + 0.05, moved) for p in producers) or not moved,
                timeout=20,
                what=f"an ack on a partition moved off broker {victim}",
            )
            if moved:
                first = min(p.acks_after(t0 + 0.05, moved)[0] for p in producers if p.acks_after(t0 + 0.05, moved))
                failovers.append(first - t0)
                c.event(f"cycle {cycle}: first ack on a moved partition {first - t0:.2f}s after the {kind}")
            window_end = t0 + SESSION_S + 2
            time.sleep(max(0.0, window_end - time.monotonic()))
            during.append(sum(len(p.acks_after(t0)) for p in producers) / (time.monotonic() - t0))
            if kind == "kill":
                c.restart(victim)
            else:
                c.resume(victim)
            # Back in the cluster, it gets its share again (balance delay + handoff).
            time.sleep(3)
        c.event("nemesis done")
    finally:
        for i in range(1, 4):
            c.resume(i)
        for b in c.brokers:
            if not b.alive:
                c.restart(b.broker_id)
        left = [p.finish(60) for p in producers]
    records = read_all(c.bootstrap, topic, PARTITIONS, timeout=120)
    summary = check_history(producers, records)
    elapsed = time.monotonic() - started
    print(
        f"jepsen: {elapsed:.0f}s, {summary['acked']} acked, {summary['read']} read, lost {summary['lost']}, "
        f"duplicates {summary['duplicates']}, delivery errors {summary['delivery_errors']}, undelivered {sum(left)}\n"
        f"failover (fault → first ack on a moved partition) over {len(failovers)} cycles: "
        f"p50 {percentile(failovers, 0.5):.2f}s p99 {percentile(failovers, 0.99):.2f}s "
        f"(all: {', '.join(f'{f:.2f}' for f in failovers)})\n"
        f"throughput: steady {steady:.0f} acks/s, during failover windows "
        f"{(sum(during) / len(during)) if during else float('nan'):.0f} acks/s"
    )
    if summary["problems"]:
        pytest.fail(
            f"seed {seed}: {len(summary['problems'])} problems:\n  " + "\n  ".join(summary["problems"][:20])
            + f"\nhistory:\n{c.history()}"
        )
    assert sum(left) == 0, f"seed {seed}: {sum(left)} records never delivered\nhistory:\n{c.history()}"


# How long the metadata service stays dead in each outage (seconds). What else happens
# meanwhile, by cycle: nothing; a broker killed -9 (restarted after etcd is back); a broker
# killed -9 whose disk is lost (restarted on an empty data directory).
ETCD_OUTAGES = [float(s) for s in os.environ.get("OXBOW_JEPSEN_ETCD_OUTAGES", "12,20,20").split(",")]


def test_jepsen_durability_across_metadata_outages(cluster, etcd_server):  # noqa: F811
    """etcd killed -9 past every broker's session (alone; with a broker killed while it is
    gone; with a broker killed and its disk lost), restarted on its data: nothing acknowledged is lost, the log stays
    dense, and every partition takes writes again after it is back. While etcd is gone a
    broker cannot renew its lease, so it stops acknowledging once the lease it last renewed
    would have run out (decision 11); etcd re-grants leases a full TTL when it restarts, so
    the brokers may keep their partitions — or lose them and fail over, which the checks
    cover the same way."""
    c = cluster(3)
    topic = create_topic(c.bootstrap, unique("etcdout"), PARTITIONS, config={"min.insync.replicas": "2"})
    producers = [ProducerThread(c.bootstrap, topic, name=f"p{i}", rate=RATE_PER_PRODUCER) for i in range(2)]
    gaps: list[str] = []
    try:
        for p in producers:
            p.start()
        wait_until(lambda: all(p.acked_count() > 200 for p in producers), timeout=20, what="first acks")
        for cycle, outage in enumerate(ETCD_OUTAGES):
            # The partitions the producers' keys map to (not necessarily all of them).
            used = {part for p in producers for _, part, _ in list(p.acked.values())}
            t0 = time.monotonic()
            etcd_server.kill9()
            c.event(f"cycle {cycle}: kill -9 etcd for {outage:.0f}s")
            victim = None
            if cycle % 3 > 0:
                time.sleep(outage / 2)
                victim = 1 + cycle % 3
                c.kill9(victim)
                if cycle % 3 == 2:
                    shutil.rmtree(c.broker(victim).data_dir)
                    c.event(f"wiped broker {victim}'s data directory")
            time.sleep(max(0.0, t0 + outage - time.monotonic()))
            last_ack = max((t for p in producers for t in p.acks_after(t0)), default=None)
            etcd_server.restart()
            back = time.monotonic()
            c.event(f"cycle {cycle}: etcd back; last ack during the outage "
                    f"{'none' if last_ack is None else f'{last_ack - t0:.1f}s'} after the kill")
            if victim is not None:
                time.sleep(3)
                c.restart(victim)
            try:
                wait_until(
                    lambda: all(any(p.acks_after(back, {part}) for p in producers) for part in used),
                    timeout=60, interval=0.5, what=f"an ack on each of partitions {sorted(used)} after etcd is back",
                )
            except AssertionError as e:
                acked_since = sorted({part for p in producers for t, part, _ in list(p.acked.values()) if t > back})
                raise AssertionError(
                    f"{e}; partitions acked since: {acked_since}; producers: "
                    + "; ".join(f"{p.name}: error {p.error!r}, last delivery errors {p.errors[-3:]}" for p in producers)
                ) from None
            gaps.append(f"cycle {cycle}: every written partition acked {time.monotonic() - back:.1f}s after etcd came back")
            c.event(gaps[-1])
            time.sleep(2)
    finally:
        if etcd_server.proc.poll() is not None:
            etcd_server.restart()
        for b in c.brokers:
            if not b.alive:
                c.restart(b.broker_id)
        left = [p.finish(60, check=False) for p in producers]
    records = read_all(c.bootstrap, topic, PARTITIONS, timeout=120)
    summary = check_history(producers, records)
    print(f"\netcd outages {ETCD_OUTAGES}: {summary['acked']} acked, lost {summary['lost']}, "
          f"duplicates {summary['duplicates']} {summary['duplicate_examples']}, undelivered {sum(left)}\n  "
          + "\n  ".join(gaps))
    assert summary["problems"] == [], f"{summary['problems'][:20]}\nhistory:\n{c.history()}"
    # Idempotent producers: nothing written twice. (Before the lease fixes of issue 17 a
    # batch written just before the lapse was answered NOT_LEADER, and librdkafka's epoch
    # bump on the gap that followed wrote it again: 2-7 duplicates in 4 of 7 runs.)
    assert summary["duplicates"] == 0, f"{summary['duplicate_examples']}\nhistory:\n{c.history()}"
    assert sum(left) == 0, f"{sum(left)} records never delivered\nhistory:\n{c.history()}"
