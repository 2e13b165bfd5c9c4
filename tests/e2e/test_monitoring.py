"""The monitoring that ships with Oxbow (deploy/monitoring/): the alerting rules pass
`promtool check rules`, every metric the rules and the Grafana dashboard name is one a real
broker exports, and the alerts fire in a real Prometheus (Debian's) scraping real brokers
when their condition is caused — a lost zone's broker, a stopped consumer — and clear
after recovery. The rules are used as shipped except `for:` (0 s, so a test does not wait
minutes) and the lag threshold (seconds, not minutes)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from confluent_kafka import KafkaError, TopicPartition

from brokers import REPO_ROOT, free_ports
from cluster import cluster, etcd_server, moto_server  # noqa: F401 (fixtures)
from cluster import read_all
from helpers import consume_partitions, consumer, create_topic, produce_all, producer, unique, wait_until

pytestmark = pytest.mark.oxbow_only

MONITORING = REPO_ROOT / "deploy" / "monitoring"
RULES = MONITORING / "alerts.yml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
METRIC = re.compile(r"\boxbow_[a-z0-9_]+")
# Depends on the test machine's own disk, not on what a test causes.
UNCAUSED = {"OxbowDiskFilling"}


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def dashboard_exprs() -> list[str]:
    d = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in d["panels"] for t in p.get("targets", [])]


def exported_names(metrics_text: str) -> set[str]:
    """Every series name a scrape can hold: sampled ones, and each declared family's
    (a histogram's _bucket/_sum/_count), even when it has no sample yet."""
    names = set()
    for line in metrics_text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "histogram":
                names.update(f"{name}_{s}" for s in ("bucket", "sum", "count"))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def scrape(http: str) -> str:
    with urllib.request.urlopen(f"{http}/metrics", timeout=10) as r:
        return r.read().decode()


def test_the_alerting_rules_pass_promtool():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool missing (Debian's prometheus package; scripts/test.sh setup installs it)")
    out = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules())} rules found" in out.stdout


def test_the_dashboard_is_well_formed():
    d = json.loads(DASHBOARD.read_text())
    assert d["uid"] and d["title"] and d["schemaVersion"] >= 30
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in d["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        if p["type"] != "row":
            assert p["targets"], f"panel {p['title']} has no query"
            assert p["datasource"]["uid"] == "${datasource}", "no hard-coded data source"
    # Panels do not overlap.
    cells = set()
    for p in d["panels"]:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps another panel"
                cells.add((x, y))
    # Every alert's metric is on the dashboard too, so the page on-call opens shows it.
    on_dashboard = {m for e in dashboard_exprs() for m in METRIC.findall(e)}
    for r in rules():
        for m in METRIC.findall(r["expr"]):
            base = re.sub(r"_(bucket|count|sum)$", "", m)
            assert any(n.startswith(base) for n in on_dashboard), f"{r['alert']}: {m} is on no panel"


def prometheus_bin() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.skip("prometheus missing (Debian's prometheus package; scripts/test.sh setup installs it)")
    return path


class Prometheus:
    """A real Prometheus scraping `targets` every second and evaluating the shipped rules
    (with `for: 0s` and `overrides` applied to their expressions) every second."""

    def __init__(self, workdir: Path, targets: list[str], overrides: dict[str, tuple[str, str]]):
        workdir.mkdir(parents=True, exist_ok=True)
        doc = yaml.safe_load(RULES.read_text())
        for g in doc["groups"]:
            for r in g["rules"]:
                r.pop("for", None)
                if r["alert"] in overrides:
                    old, new = overrides[r["alert"]]
                    assert old in r["expr"], (r["alert"], r["expr"])
                    r["expr"] = r["expr"].replace(old, new)
        (workdir / "rules.yml").write_text(yaml.safe_dump(doc))
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
            "rule_files": [str(workdir / "rules.yml")],
            "scrape_configs": [{"job_name": "oxbow", "static_configs": [{"targets": targets}]}],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        (self.port,) = free_ports(1)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(workdir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [prometheus_bin(), f"--config.file={workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        wait_until(self._ready, timeout=30, interval=0.3, what="prometheus ready")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path: str) -> dict:
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}", timeout=10) as r:
            return json.loads(r.read())["data"]

    def rules(self) -> list[dict]:
        """The rules as evaluated (overrides applied)."""
        return [r for g in self.api("rules")["groups"] for r in g["rules"]]

    def query(self, expr: str) -> list:
        """`expr`'s instant value now, as (labels, value) pairs."""
        q = urllib.parse.urlencode({"query": expr})
        return [(r["metric"], r["value"][1]) for r in self.api(f"query?{q}")["result"]]

    def firing(self) -> set[str]:
        return {a["labels"]["alertname"] for a in self.api("alerts")["alerts"] if a["state"] == "firing"}

    def targets_up(self) -> int:
        return sum(t["health"] == "up" for t in self.api("targets")["activeTargets"])

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()


@pytest.fixture
def prometheus(tmp_path):
    made: list[Prometheus] = []

    def make(targets: list[str], overrides: dict | None = None) -> Prometheus:
        p = Prometheus(tmp_path / f"prometheus-{len(made)}", targets, overrides or {})
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def host_port(http: str) -> str:
    return http.removeprefix("http://")


def test_a_lost_zone_fires_under_replicated_and_broker_down_which_clear_when_it_returns(cluster, prometheus):
    c = cluster(3, flush_interval="250ms", extra_args=["--replica-lag-max", "1s"])
    topic = unique("alerts")
    create_topic(c.bootstrap, topic, partitions=6, config={"min.insync.replicas": "2"})
    produce_all(producer(c.bootstrap), topic, [{"value": b"x", "partition": p} for p in range(6)], timeout=30)
    # Every name the rules and the dashboard use is exported by a broker on etcd + S3 (a
    # family appears with its first sample: the seals' PUTs come within a second).
    wanted = {m for e in dashboard_exprs() + [r["expr"] for r in rules()] for m in METRIC.findall(e)}
    missing: list[str] = []

    def all_exported() -> bool:
        missing[:] = sorted(wanted - exported_names(scrape(c.broker(1).http)))
        return not missing

    try:
        wait_until(all_exported, timeout=20, interval=0.5, what="every named metric exported")
    except AssertionError:
        pytest.fail(f"named but not exported: {missing}")

    prom = prometheus([host_port(b.http) for b in c.brokers])
    wait_until(lambda: prom.targets_up() == 3, timeout=30, interval=0.5, what="3 targets up")
    time.sleep(3)  # a few evaluations of every rule on a healthy cluster
    assert prom.firing() - UNCAUSED == set(), "a healthy cluster fires nothing"

    leader_of = c.leaders(topic)
    victim = next(b for b in (1, 2, 3) if b in leader_of.values())
    survivors = [b for b in (1, 2, 3) if b != victim]
    c.kill9(victim)
    started = time.monotonic()
    wait_until(
        lambda: {"OxbowUnderReplicatedPartitions", "OxbowBrokerDown"} <= prom.firing(),
        timeout=60, interval=0.5, what="under-replicated and broker-down alerts",
    )
    print(f"\nunder-replicated alert fired {time.monotonic() - started:.1f} s after the kill")
    # Its partitions moved to the survivors; the alert is about the survivors' WALs.
    urp = sum(
        float(line.split()[-1])
        for b in survivors
        for line in scrape(c.broker(b).http).splitlines()
        if line.startswith("oxbow_under_replicated_partitions ")
    )
    assert urp > 0
    c.restart(victim)
    wait_until(lambda: prom.firing() - UNCAUSED == set(), timeout=90, interval=1, what="every alert cleared")


def metric_sum(http: str, name: str) -> float:
    """The sum of `name`'s samples (every label set) in one scrape of `http`."""
    return sum(
        float(line.split()[-1])
        for line in scrape(http).splitlines()
        if line.startswith(f"{name} ") or line.startswith(f"{name}{{")
    )


def test_the_only_holder_of_a_wal_tail_lost_fires_offline_partitions_which_clear_when_it_returns(cluster, prometheus):
    """Any broker may lead any partition, but a dead leader's unsealed WAL tail must be
    recovered before its partitions are served again (decision 13). With
    `--wal-replication-factor 1` the leader's WAL is the tail's only copy: killed, its
    partitions move to the survivor, which cannot recover the tail and keeps them offline
    (answering NOT_LEADER_OR_FOLLOWER) until the leader returns — Kafka keeps a partition
    offline until its last in-sync replica returns, for the same reason."""
    c = cluster(2, flush_interval="60s", extra_args=["--wal-replication-factor", "1"])
    topic = unique("offline")
    create_topic(c.bootstrap, topic, partitions=4)
    values = [{"value": f"v{i}".encode(), "partition": i % 4} for i in range(40)]
    produce_all(producer(c.bootstrap), topic, values, timeout=30)
    leader_of = c.leaders(topic)
    victim = next(b for b in (1, 2) if b in leader_of.values())
    survivor = 3 - victim
    victims_partitions = {p for p, b in leader_of.items() if b == victim}

    prom = prometheus([host_port(b.http) for b in c.brokers])
    wait_until(lambda: prom.targets_up() == 2, timeout=30, interval=0.5, what="2 targets up")
    time.sleep(3)  # a few evaluations of every rule on a healthy cluster
    assert prom.firing() - UNCAUSED == set(), "a healthy cluster fires nothing"

    c.kill9(victim)  # with its WAL: the only copy of what it had not sealed (flush 60 s)
    started = time.monotonic()
    wait_until(lambda: "OxbowOfflinePartitions" in prom.firing(), timeout=30, interval=0.5, what="offline alert")
    print(f"\noffline alert fired {time.monotonic() - started:.1f} s after the kill")
    # Leadership moved (the controller's failover), yet the partitions stay offline: the
    # survivor leads them of record but is still recovering the dead leader's tail.
    wait_until(
        lambda: {p: b for p, b in c.leaders(topic).items() if p in victims_partitions}
        == {p: survivor for p in victims_partitions},
        timeout=30, interval=0.5, what="failover to the survivor",
    )
    http = c.broker(survivor).http
    wait_until(lambda: metric_sum(http, "oxbow_recoveries_pending") >= 1, timeout=15, interval=0.5,
               what="a recovery waiting for the dead leader")
    time.sleep(6)  # past the longest recovery backoff (5 s): retries keep failing
    assert metric_sum(http, "oxbow_offline_partitions") == len(victims_partitions)
    assert "OxbowOfflinePartitions" in prom.firing()

    c.restart(victim)
    restarted = time.monotonic()
    wait_until(lambda: prom.firing() - UNCAUSED == set(), timeout=60, interval=0.5, what="every alert cleared")
    print(f"offline alert cleared {time.monotonic() - restarted:.1f} s after the restart")
    assert metric_sum(http, "oxbow_offline_partitions") == 0
    # What the tail held is served again: nothing acknowledged was lost while offline.
    records = read_all(c.bootstrap, topic, 4, timeout=60)
    got = sorted(r.value for recs in records.values() for r in recs)
    assert got == sorted(v["value"] for v in values)


def group_series(http: str, name: str, group: str) -> dict[int, float]:
    """partition -> value of `name`'s samples for `group` in one scrape of `http`."""
    out = {}
    for line in scrape(http).splitlines():
        if line.startswith(name + "{") and f'group="{group}"' in line:
            partition = int(re.search(r'partition="(\d+)"', line).group(1))
            out[partition] = float(line.split()[-1])
    return out


def test_a_coordinator_reports_lag_for_partitions_led_by_other_brokers(cluster):
    """A group's coordinator knows its committed offsets but leads only some of its
    partitions: it asks the other leaders for their high watermarks (one ListOffsets per
    broker every 5 s), so lag in records and seconds covers every partition, from one
    broker."""
    c = cluster(3)
    topic = unique("spread")
    group = unique("g")
    partitions = 6
    create_topic(c.bootstrap, topic, partitions=partitions)
    # Partition p holds p + 1 records; the group commits offset 1 everywhere: lag p.
    produce_all(producer(c.bootstrap), topic,
                [{"value": b"v", "partition": p} for p in range(partitions) for _ in range(p + 1)], timeout=30)
    leaders = c.leaders(topic)
    assert len(set(leaders.values())) >= 2, f"partitions not spread over brokers: {leaders}"
    con = consumer(c.bootstrap, **{"group.id": group})
    try:
        con.commit(offsets=[TopicPartition(topic, p, 1) for p in range(partitions)], asynchronous=False)
    finally:
        con.close()
    want = {p: float(p) for p in range(partitions)}
    seen: dict[int, dict] = {}

    def complete() -> bool:
        for b in c.brokers:
            seen[b.broker_id] = group_series(b.http, "oxbow_consumer_group_lag", group)
        return want in seen.values()

    try:
        wait_until(complete, timeout=30, interval=1, what="lag of every partition on the coordinator")
    except AssertionError:
        pytest.fail(f"lag per broker: {seen}, leaders: {leaders}")
    coordinator = next(b for b in c.brokers if seen[b.broker_id] == want)
    assert [b.broker_id for b in c.brokers if seen[b.broker_id]] == [coordinator.broker_id], seen
    led_here = {p for p, b in leaders.items() if b == coordinator.broker_id}
    assert led_here != set(range(partitions)), "the coordinator leads every partition: nothing to show"
    seconds = group_series(coordinator.http, "oxbow_consumer_group_lag_seconds", group)
    assert set(seconds) == set(range(partitions)), seconds
    # Every broker reports its metadata watches; the controller its own too (its queue).
    watches = {
        b.broker_id: set(re.findall(r'oxbow_metadata_watch_queued_events\{watch="(\w+)"\}', scrape(b.http)))
        for b in c.brokers
    }
    assert all({"brokers", "topics", "security"} <= w for w in watches.values()), watches
    assert sum("controller_topics" in w for w in watches.values()) == 1, watches


def test_a_stopped_consumer_fires_the_lag_alert_which_clears_when_it_catches_up(broker, prometheus):
    topic = unique("lag")
    group = unique("group")
    create_topic(broker.bootstrap, topic, partitions=1)
    p = producer(broker.bootstrap)
    produce_all(p, topic, [{"value": b"a", "partition": 0}] * 10)

    def consume_all_and_commit() -> None:
        con = consumer(broker.bootstrap, **{"group.id": group, "enable.partition.eof": True})
        con.subscribe([topic])
        last = None
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                m = con.poll(0.5)
                if m is None:
                    continue
                if m.error() is None:
                    last = m.offset()
                elif m.error().code() == KafkaError._PARTITION_EOF and last is not None:
                    break
            assert last is not None, "consumed nothing"
            con.commit(offsets=[TopicPartition(topic, 0, last + 1)], asynchronous=False)
        finally:
            con.close()

    consume_all_and_commit()
    # The group's join was timed, and the consumer's reads came from the partition's tail.
    assert metric_sum(broker.http, "oxbow_group_rebalances_total") >= 1
    assert metric_sum(broker.http, "oxbow_group_rebalance_seconds_count") >= 1
    tail_reads = [line for line in scrape(broker.http).splitlines()
                  if line.startswith('oxbow_fetch_read_seconds_count{source="tail"}')]
    assert tail_reads and float(tail_reads[0].split()[-1]) >= 1, tail_reads
    prom = prometheus([host_port(broker.http)], {"OxbowConsumerLagSeconds": ("> 300", "> 4")})
    wait_until(lambda: prom.targets_up() == 1, timeout=30, interval=0.5, what="target up")
    # The consumer is gone; records keep arriving: their age grows past the threshold.
    produce_all(p, topic, [{"value": b"b", "partition": 0}] * 10)
    started = time.monotonic()
    wait_until(lambda: "OxbowConsumerLagSeconds" in prom.firing(), timeout=60, interval=0.5, what="lag alert")
    print(f"\nlag alert fired {time.monotonic() - started:.1f} s after the consumer stopped")
    lag = [
        float(line.split()[-1])
        for line in scrape(broker.http).splitlines()
        if line.startswith("oxbow_consumer_group_lag_seconds{") and f'group="{group}"' in line
    ]
    assert lag and lag[0] > 4
    consume_all_and_commit()
    wait_until(lambda: "OxbowConsumerLagSeconds" not in prom.firing(), timeout=30, interval=0.5, what="lag alert cleared")


def test_fetch_reads_are_timed_by_the_tier_they_came_from(broker):
    """After a restart a partition's records are in the object store only: the first
    consumer's reads are GETs, a second consumer's come from the read cache they filled."""
    topic = unique("tiers")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce_all(producer(broker.bootstrap), topic, [{"value": b"r", "partition": 0}] * 20)
    broker.restart()  # graceful: everything sealed; memory and the (memory-only) cache empty

    def reads(source: str) -> float:
        return metric_sum(broker.http, f'oxbow_fetch_read_seconds_count{{source="{source}"}}')

    assert reads("object_store") == reads("cache_memory") == 0
    for _ in range(2):
        got = consume_partitions(broker.bootstrap, topic, [0], timeout=30)
        assert len(got[0]) == 20
    assert reads("object_store") >= 1
    assert reads("cache_memory") >= 1


def test_series_stay_bounded_at_1000_partitions(broker):
    """Per-partition series are a handful per partition led here, everything else is
    fixed: a scrape of a broker leading 1,000 partitions, each with a committed group
    offset, stays within a bound (printed for the closing note)."""
    topic = unique("many")
    group = unique("g")
    create_topic(broker.bootstrap, topic, partitions=1000)
    produce_all(producer(broker.bootstrap), topic, [{"value": b"v", "partition": p} for p in range(1000)], timeout=120)
    con = consumer(broker.bootstrap, **{"group.id": group})
    try:
        con.commit(offsets=[TopicPartition(topic, p, 1) for p in range(1000)], asynchronous=False)
    finally:
        con.close()
    text = scrape(broker.http)
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    per_partition = [line for line in series if f'topic="{topic}"' in line]
    fixed = len(series) - len(per_partition)
    print(f"\n{len(series)} series: {len(per_partition)} for 1,000 partitions, {fixed} others, {len(text)} bytes")
    # 4 per partition (high watermark, log start, stored bytes and entries) and 3 per
    # group partition (committed, lag, lag seconds).
    assert len(per_partition) <= 7 * 1000
    assert fixed < 3000
