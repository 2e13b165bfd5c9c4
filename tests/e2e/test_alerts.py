"""The shipped alerting rules that need a fault to fire (deploy/monitoring/alerts.yml), caused
one after another on a cluster watched by a real Prometheus: each fires while its
condition holds, and all clear once the faults are repaired; every acknowledged record is
still readable at the end.

The cluster has an etcd of its own (it is SIGSTOPped) and reaches S3 through a relay in
front of the shared moto server (`S3Gate`: closing it is an unreachable S3; moto keeps the
objects, being in memory). The rules are used as shipped except `for:` (0 s, as in
test_monitoring.py), rate windows shortened to tens of seconds (or the alerts would take
the shipped 5 or 10 minutes to clear) and the unsealed-bytes threshold (1 MiB, not 0.8 GiB).

OxbowDiskFilling and OxbowWalUnhealthy need the WAL on a filesystem that can fill without
harm: a broker runs in a mount namespace of its own (`unshare`, unprivileged through a
user namespace) with a 32 MiB tmpfs on its WAL directory, which the test fills through
/proc/PID/root.

OxbowMetadataWatchBehind needs a watch whose reader waits on something while changes come:
the controller, which moves a dead broker's partitions by compare-and-swaps in etcd (16 at a
time) and reads the changes they cause only when it is through. Its etcd is made slow (a
relay holding each request 300 ms; answers and watch events pass at once) and a broker
leading 300 partitions is killed. (A broker's own watches are applied in microseconds; the
one thing the catalogue's loop used to wait on, its periodic sweep's etcd transaction, now
runs beside its watches: `catalog_follow.rs`.)
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from cluster import Cluster, EtcdServer, ProducerThread, check_history, etcd_server, in_parallel, moto_server, read_all  # noqa: F401
from helpers import create_topic, unique, wait_until
from tcp_proxy import CuttableProxy
from test_monitoring import UNCAUSED, host_port, metric_sum, prometheus  # noqa: F401 (fixture)

pytestmark = pytest.mark.oxbow_only

# Shipped expression fragment -> what the test evaluates instead (see the module docs).
OVERRIDES = {
    "OxbowObjectStoreErrors": ("[5m]", "[20s]"),
    "OxbowUnsealedBytesGrowing": ("0.8 * 1073741824", "1048576"),
    "OxbowMetadataSlow": ("[5m]", "[20s]"),
    "OxbowIsrFlapping": ("[10m])) * 600", "[30s])) * 30"),
    "OxbowProduceLatencyHigh": ("[5m]", "[20s]"),
    "OxbowRequestQueueing": ("[5m]", "[20s]"),
}


class S3Gate(CuttableProxy):
    """A relay to moto's port: `close()` makes S3 unreachable (connections refused, open
    ones reset), `open()` reachable again on the same port. Stands in for a `MotoServer`
    in `Cluster` (it has `port` and `bucket`)."""

    def __init__(self, moto):
        super().__init__(moto.port)
        self.bucket = moto.bucket

    def open(self) -> None:
        self.restore()

    def close(self) -> None:
        self.cut()


def wait_cleared(prom, timeout: float) -> None:
    """Until no alert fires (but those that depend on the test machine's own disk)."""
    try:
        wait_until(lambda: prom.firing() - UNCAUSED == set(), timeout=timeout, interval=1, what="every alert cleared")
    except AssertionError:
        pytest.fail(f"still firing after {timeout} s: {sorted(prom.firing() - UNCAUSED)}")


def sample(http: str, name: str) -> float:
    try:
        return metric_sum(http, name)
    except OSError:
        return float("nan")


def test_faults_fire_their_alerts_which_clear_after_repair(tmp_path, moto_server, prometheus):  # noqa: F811
    etcd = EtcdServer(tmp_path / "etcd")
    gate = S3Gate(moto_server)
    # A 6 s session: etcd is stopped for 2.5 s without leases ending, and a killed
    # controller's post stays empty long enough for a scrape to see it.
    c = Cluster(
        tmp_path / "cluster", etcd, gate, flush_interval="250ms", session_timeout="6s",
        extra_args=["--replica-lag-max", "2s", "--queued-max-request-bytes", "512KiB"],
    )  # fmt: skip
    prod = None
    try:
        for _ in range(3):
            c.add_broker(start=False)
        in_parallel(lambda b: b.start(), c.brokers)
        c.event("started brokers 1..3")
        topic = unique("faults")
        create_topic(c.bootstrap, topic, partitions=6, config={"min.insync.replicas": "2"})
        prom = prometheus([host_port(b.http) for b in c.brokers], OVERRIDES)
        wait_until(lambda: prom.targets_up() == 3, timeout=30, interval=0.5, what="3 targets up")
        # ~1.5 MB/s of 1 KiB records (the name pads each value), acks=all, pipelined: about
        # one produce request of ~500 KB per broker a second, so one fits in the request
        # memory and the next waits only while an answer takes most of a second.
        prod = ProducerThread(
            c.bootstrap, topic, name="p" + "x" * 1000, rate=1500,
            **{"linger.ms": 1000, "max.in.flight.requests.per.connection": 5},
        )  # fmt: skip
        prod.start()
        time.sleep(4)  # a few evaluations of every rule on a healthy, busy cluster
        assert prom.firing() - UNCAUSED == set(), "a healthy cluster fires nothing"
        fired: dict[str, float] = {}

        def quiet(alerts: set[str]) -> float:
            """Until none of `alerts` fires (an earlier fault's window may still hold it), so
            that they fire because of the fault caused next; returns now."""
            wait_until(lambda: not alerts & prom.firing(), timeout=45, interval=0.5,
                       what=f"{sorted(alerts)} quiet before the fault")
            return time.monotonic()

        def wait_firing(alerts: set[str], timeout: float, since: float) -> None:
            """Until each of `alerts` has been seen firing since `since` (not necessarily at
            once: each while its own window holds the fault)."""
            seen: set[str] = set()

            def all_seen() -> bool:
                now = prom.firing() & alerts
                for a in now - seen:
                    fired[a] = time.monotonic() - since
                seen.update(now)
                return alerts <= seen

            try:
                wait_until(all_seen, timeout=timeout, interval=0.5, what=f"{sorted(alerts)} firing")
            except AssertionError:
                exprs = {r["name"]: r["query"] for r in prom.rules()}
                values = {a: prom.query(f"max_over_time(({exprs[a].rsplit('>', 1)[0]})[60s:1s])") for a in alerts - seen}
                waits = {b.broker_id: sample(b.http, "oxbow_requests_waited_for_memory_total") for b in c.brokers}
                pytest.fail(f"not fired: {sorted(alerts - seen)}; highest in the last 60 s: {values}; "
                            f"requests that waited for memory: {waits}\n{c.history()}")

        # A zone's broker stalls three times for 3 s (past --replica-lag-max, 2 s): the
        # other brokers' in-sync sets shrink each time and their acks=all produces wait for
        # it meanwhile; when it resumes, the requests its clients sent it meanwhile queue
        # for request memory (--queued-max-request-bytes) behind the first of them, whose
        # answers wait for the replicas.
        flapper = 3
        flap_alerts = {"OxbowIsrFlapping", "OxbowProduceLatencyHigh", "OxbowRequestQueueing"}
        t = quiet(flap_alerts)
        for _ in range(3):
            c.pause(flapper)
            time.sleep(3)
            c.resume(flapper)
            time.sleep(2)
        wait_firing(flap_alerts, 30, t)

        # S3 unreachable: seals fail (retried), unsealed data piles up in the WALs.
        s3_alerts = {"OxbowObjectStoreErrors", "OxbowUnsealedBytesGrowing"}
        t = quiet(s3_alerts)
        gate.close()
        c.event("S3 unreachable")
        wait_firing(s3_alerts, 60, t)
        assert any(sample(b.http, "oxbow_upload_failures_total") > 0 for b in c.brokers)
        gate.open()
        c.event("S3 reachable again")
        # Uploads catch up: the WALs drain to what a flush interval holds.
        wait_until(
            lambda: all(sample(b.http, "oxbow_unsealed_bytes") < 1048576 for b in c.brokers),
            timeout=60, interval=0.5, what="unsealed bytes uploaded",
        )  # fmt: skip

        # etcd stops answering for 2.5 s: requests in flight take that long.
        t = quiet({"OxbowMetadataSlow"})
        os.kill(etcd.proc.pid, signal.SIGSTOP)
        c.event("etcd SIGSTOP")
        try:
            time.sleep(2.5)
        finally:
            os.kill(etcd.proc.pid, signal.SIGCONT)
            c.event("etcd SIGCONT")
        wait_firing({"OxbowMetadataSlow"}, 30, t)

        # The controller is killed: no broker holds the post until its lease ends.
        controller = wait_until(
            lambda: next((b.broker_id for b in c.brokers if sample(b.http, "oxbow_active_controller") == 1), None),
            timeout=20, interval=0.5, what="a controller",
        )  # fmt: skip
        t = quiet({"OxbowNoActiveController"})
        c.kill9(controller)
        wait_firing({"OxbowNoActiveController"}, 30, t)
        wait_until(lambda: "OxbowNoActiveController" not in prom.firing(), timeout=30, interval=0.5,
                   what="a new controller elected")
        c.restart(controller)

        t = time.monotonic()
        wait_cleared(prom, 90)
        print(f"\nfired after (s): { {a: round(s, 1) for a, s in sorted(fired.items())} }; "
              f"all cleared {time.monotonic() - t:.1f} s after the last repair")
        assert prod.finish(timeout=60) == 0, "deliveries left"
        summary = check_history([prod], read_all(c.bootstrap, topic, 6))
        print(f"history: {summary}")
        assert summary["problems"] == [], f"{summary}\n{c.history()}"
        assert summary["acked"] > 0 and summary["delivery_errors"] == 0, summary
    finally:
        if prod is not None and prod.is_alive():
            prod.stop_event.set()
        if etcd.proc.poll() is None:
            os.kill(etcd.proc.pid, signal.SIGCONT)
        print(f"\n--- cluster {c.name} history:\n{c.history()}")
        c.close()
        gate.close()
        etcd.close()


WAL_TMPFS_BYTES = 32 << 20


def unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", "mount -t tmpfs none /mnt"],
        capture_output=True, timeout=10,
    )  # fmt: skip
    return probe.returncode == 0


def on_wal_tmpfs(b) -> None:
    """Makes broker `b` start in a mount namespace of its own with a fresh 32 MiB tmpfs on
    its WAL directory (so each start is a start with a new, empty WAL disk)."""
    inner = b.command

    def command():
        cmd, env = inner()
        mount = 'mkdir -p "$1" && mount -t tmpfs -o size=%d oxbow-wal "$1" && shift && exec "$@"' % WAL_TMPFS_BYTES
        wal = str(b.data_dir / "wal")
        return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", mount, "sh", wal, *cmd], env

    b.command = command


def firing_on(prom, b) -> set[str]:
    """Alerts firing for broker `b`'s scrape target (the WAL disk alerts are per broker;
    another broker's real disk may be fuller than the test's tmpfs)."""
    instance = host_port(b.http)
    return {
        a["labels"]["alertname"]
        for a in prom.api("alerts")["alerts"]
        if a["state"] == "firing" and a["labels"].get("instance") == instance
    }


def wal_dir_seen_by(b) -> Path:
    """The broker's WAL directory in its own mount namespace."""
    return Path(f"/proc/{b.pid}/root") / str(b.data_dir / "wal").lstrip("/")


def fill(path: Path, leave: int) -> None:
    """Writes `path/filler` until `leave` bytes are free (0: until the filesystem is full)."""
    st = os.statvfs(path)
    want = st.f_bavail * st.f_frsize - leave
    chunk = b"\0" * (1 << 20)
    with open(path / "filler", "ab") as f:
        while want > 0:
            try:
                want -= f.write(chunk[: min(len(chunk), want)])
                f.flush()
            except OSError as e:
                if e.errno == errno.ENOSPC:
                    return
                raise


def test_a_filling_wal_disk_fires_disk_filling_and_a_full_one_wal_unhealthy(tmp_path, etcd_server, moto_server, prometheus):  # noqa: F811
    if not unshare_works():
        pytest.skip("needs unprivileged user and mount namespaces (unshare -rm) for a WAL tmpfs")
    gate = S3Gate(moto_server)
    # Files of 2 MiB: the WAL needs a new one soon after uploads stop.
    c = Cluster(tmp_path / "cluster", etcd_server, gate, flush_interval="250ms",
                extra_args=["--wal-max-bytes", "16MiB", "--storage-failure-exit-delay", "10s"])
    prod = None
    try:
        for _ in range(2):
            c.add_broker(start=False)
        victim = c.broker(2)
        on_wal_tmpfs(victim)
        in_parallel(lambda b: b.start(), c.brokers)
        c.event("started brokers 1..2, broker 2's WAL on a tmpfs")
        topic = unique("disk")
        create_topic(c.bootstrap, topic, partitions=4, config={"min.insync.replicas": "2"})
        prom = prometheus([host_port(b.http) for b in c.brokers], OVERRIDES)
        wait_until(lambda: prom.targets_up() == 2, timeout=30, interval=0.5, what="2 targets up")
        prod = ProducerThread(c.bootstrap, topic, name="d" + "x" * 1000, rate=1200)
        prod.start()
        time.sleep(3)  # a few evaluations on a healthy cluster
        assert prom.firing() - UNCAUSED == set(), "a healthy cluster fires nothing"
        wal = wal_dir_seen_by(victim)
        st = os.statvfs(wal)
        assert st.f_blocks * st.f_frsize == WAL_TMPFS_BYTES, "the WAL is not on the tmpfs"

        # Something else fills the WAL's filesystem past 90%: a warning, the WAL still works.
        fill(wal, leave=WAL_TMPFS_BYTES // 16)
        c.event("broker 2's WAL filesystem filled to ~94%")
        wait_until(lambda: "OxbowDiskFilling" in firing_on(prom, victim), timeout=20, interval=0.5,
                   what="disk filling alert")
        assert "OxbowWalUnhealthy" not in prom.firing()
        (wal / "filler").unlink()
        c.event("filler removed")
        wait_until(lambda: "OxbowDiskFilling" not in firing_on(prom, victim), timeout=20, interval=0.5,
                   what="disk filling alert cleared")

        # Full, while uploads fail: the WAL needs a new file and cannot have one.
        gate.close()
        c.event("S3 unreachable")
        fill(wal, leave=0)
        c.event("broker 2's WAL filesystem full")
        wait_until(lambda: {"OxbowWalUnhealthy", "OxbowDiskFilling"} <= firing_on(prom, victim), timeout=40, interval=0.5,
                   what="WAL unhealthy and disk filling alerts")
        # S3 is back. The broker exits (--storage-failure-exit-delay, then a last seal of
        # what it holds) for its supervisor to restart it: here, on a new empty WAL disk.
        # Its acknowledged records are on broker 1's copy.
        gate.open()
        c.event("S3 reachable again")
        assert victim.proc.wait(timeout=60) == 74
        c.event("broker 2 exited (storage failure)")
        c.restart(2)
        wait_cleared(prom, 60)
        assert prod.finish(timeout=60) == 0, "deliveries left"
        summary = check_history([prod], read_all(c.bootstrap, topic, 4))
        print(f"\nhistory: {summary}")
        assert summary["problems"] == [], f"{summary}\n{c.history()}"
        assert summary["acked"] > 0, summary
    finally:
        if prod is not None and prod.is_alive():
            prod.stop_event.set()
        print(f"\n--- cluster {c.name} history:\n{c.history()}")
        c.close()
        gate.close()


def test_a_controller_behind_its_watch_fires_metadata_watch_behind(tmp_path, moto_server, prometheus):  # noqa: F811
    etcd = EtcdServer(tmp_path / "etcd")
    relay = CuttableProxy(etcd.client_port)
    c = Cluster(tmp_path / "cluster", etcd, moto_server, flush_interval="250ms", session_timeout="6s")
    try:
        # Broker 1, alone at first, is the controller; it reaches etcd through the relay.
        c.add_broker(etcd_port=relay.port)
        wait_until(lambda: sample(c.broker(1).http, "oxbow_active_controller") == 1, timeout=30, interval=0.5,
                   what="broker 1 the controller")  # fmt: skip
        c.add_broker(start=False)
        c.add_broker(start=False)
        in_parallel(lambda b: b.start(), c.brokers[1:])
        topic = unique("failover")
        create_topic(c.bootstrap, topic, partitions=900)
        led = lambda b: sample(b.http, "oxbow_partitions_led")  # noqa: E731
        wait_until(lambda: led(c.broker(2)) >= 200, timeout=30, interval=0.5, what="broker 2 leads its share")
        prom = prometheus([host_port(b.http) for b in c.brokers], OVERRIDES)
        wait_until(lambda: prom.targets_up() == 3, timeout=30, interval=0.5, what="3 targets up")
        time.sleep(3)
        assert "OxbowMetadataWatchBehind" not in prom.firing(), "a settled cluster is not behind"

        relay.request_delay = 0.3
        c.event("etcd 300 ms away from the controller")
        moved = led(c.broker(2))
        c.kill9(2)
        t = time.monotonic()
        seen = wait_until(lambda: "OxbowMetadataWatchBehind" in prom.firing(), timeout=60, interval=0.5,
                          what="OxbowMetadataWatchBehind firing")  # fmt: skip
        assert seen
        behind = prom.query('max by (watch) (oxbow_metadata_watch_queued_events) > 100')
        print(f"\nfired {time.monotonic() - t:.1f} s after broker 2 ({moved:.0f} partitions) was killed: {behind}")
        wait_until(lambda: led(c.broker(1)) + led(c.broker(3)) >= 900, timeout=90, interval=1,
                   what="every partition led again")  # fmt: skip
        relay.request_delay = 0.0
        c.restart(2)
        wait_cleared(prom, 90)
    finally:
        print(f"\n--- cluster {c.name} history:\n{c.history()}")
        c.close()
        relay.close()
        etcd.close()
