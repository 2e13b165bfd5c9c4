"""The autoscaling contract of terraform/modules/brokers, simulated on one machine: three
brokers (three zones) on a real etcd and S3 (moto), an idempotent acks=all producer under
load, then

- scale-in through the same path the group's termination lifecycle hook uses: the
  instance's `oxbow-lifecycle` script (terraform/modules/brokers/files/oxbow-lifecycle.sh,
  run unchanged) polls a fake instance-metadata service, sees
  autoscaling/target-lifecycle-state become "Terminated", stops the broker (SIGTERM, as
  `systemctl stop oxbow` does) and only after it exited calls `aws autoscaling
  complete-lifecycle-action` (a fake CLI that records the call). Every partition the
  broker led must be led by the survivors;
- scale-out: a new broker joins and must take its share of leadership within a bound;

and finally every acknowledged record must be read back at its acknowledged offset.
Scale-in and scale-out times and partitions moved are printed (run with -s to see them).
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from aws_fakes import FakeImds, arg, fake_aws_cli, path_with, read_calls
from brokers import REPO_ROOT
from cluster import ProducerThread, check_history, cluster, etcd_server, moto_server, read_all  # noqa: F401
from helpers import create_topic, unique, wait_until

pytestmark = pytest.mark.oxbow_only

LIFECYCLE_SCRIPT = REPO_ROOT / "terraform/modules/brokers/files/oxbow-lifecycle.sh"
PARTITIONS = 12
# Bounds the test holds the cluster to (the lifecycle hook's heartbeat timeout is 300 s;
# these are what a healthy cluster must do far better than).
SCALE_IN_BOUND_S = 20.0
SCALE_OUT_BOUND_S = 30.0


def counts(leaders: dict[int, int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for b in leaders.values():
        out[b] = out.get(b, 0) + 1
    return out


def test_scale_in_through_the_lifecycle_hook_then_scale_out(cluster, tmp_path):
    c = cluster(3, flush_interval="100ms", zones=3)
    topic = create_topic(c.bootstrap, unique("autoscale"), PARTITIONS)
    leaving = c.broker(1)

    imds = FakeImds({
        "instance-id": "i-0000000000000001",
        "placement/region": "test-region-1",
        "autoscaling/target-lifecycle-state": "InService",
    })  # fmt: skip
    calls = fake_aws_cli(tmp_path)
    deploy_env = tmp_path / "deploy.env"
    deploy_env.write_text("ASG_NAME=oxbow-test-brokers\nLIFECYCLE_HOOK_NAME=oxbow-handoff\n")
    pid = leaving.pid
    # What `systemctl stop oxbow` does: SIGTERM, then wait until the process is gone (here:
    # exited; pytest reaps it, so a zombie counts as gone).
    stop = (
        f"kill -TERM {pid}; "
        f"while [ -e /proc/{pid} ] && ! grep -q '^State:.*Z' /proc/{pid}/status; do sleep 0.05; done"
    )
    lifecycle_log = open(tmp_path / "lifecycle.log", "wb")
    hook = subprocess.Popen(
        ["bash", str(LIFECYCLE_SCRIPT)],
        env={
            **os.environ,
            "PATH": path_with(tmp_path / "bin"),
            "OXBOW_DEPLOY_ENV": str(deploy_env),
            "IMDS_ENDPOINT": imds.url,
            "OXBOW_LIFECYCLE_POLL_SECONDS": "0.2",
            "OXBOW_STOP_COMMAND": stop,
        },
        stdin=subprocess.DEVNULL,
        stdout=lifecycle_log,
        stderr=subprocess.STDOUT,
    )
    prod = ProducerThread(c.bootstrap, topic, rate=400)
    prod.start()
    try:
        wait_until(lambda: prod.acked_count() > 600, timeout=30, what="first acks")
        before = c.leaders(topic)
        led_by_leaving = {p for p, b in before.items() if b == 1}
        assert len(before) == PARTITIONS and led_by_leaving, before
        time.sleep(1)
        assert hook.poll() is None, "the lifecycle script exited while the instance was InService"
        assert not read_calls(calls), "no lifecycle action may be completed before termination"

        # -- scale in: the group marks the instance for termination ---------------------
        t0 = time.monotonic()
        imds.items["autoscaling/target-lifecycle-state"] = "Terminated"
        c.event("target-lifecycle-state -> Terminated (broker 1)")
        assert hook.wait(60) == 0, (tmp_path / "lifecycle.log").read_text()
        completed_at = time.monotonic()
        exit_code = leaving.proc.wait(5)
        assert exit_code == 0, leaving.log_tail()
        c.event(f"lifecycle action completed; broker 1 exited {exit_code}")
        after_in = c.wait_leaders_on(topic, {2, 3}, timeout=SCALE_IN_BOUND_S, partitions=PARTITIONS)
        scale_in_s = time.monotonic() - t0
        # The broker was gone before the action was completed (terminating the instance).
        (call,) = read_calls(calls)
        assert call["args"][:2] == ["autoscaling", "complete-lifecycle-action"], call
        assert arg(call, "--lifecycle-action-result") == "CONTINUE"
        assert arg(call, "--auto-scaling-group-name") == "oxbow-test-brokers"
        assert arg(call, "--lifecycle-hook-name") == "oxbow-handoff"
        assert arg(call, "--instance-id") == "i-0000000000000001"
        assert arg(call, "--region") == "test-region-1"
        assert imds.refused == 0, "the script made an IMDSv1 (token-less) request"
        assert counts(after_in) == {2: PARTITIONS // 2, 3: PARTITIONS // 2}, after_in
        wait_until(lambda: prod.acks_after(time.monotonic() - 0.5, led_by_leaving), timeout=10,
                   what="acks on the moved partitions")  # fmt: skip

        # -- scale out: a new instance starts a broker in zone 1 -------------------------
        t1 = time.monotonic()
        c.add_broker()  # broker 4, az1
        share = PARTITIONS // 3
        after_out = wait_until(
            lambda: (lambda l: l if counts(l).get(4) == share and len(l) == PARTITIONS else None)(c.leaders(topic)),
            timeout=SCALE_OUT_BOUND_S,
            interval=0.1,
            what=f"broker 4 leading {share} partitions",
        )
        scale_out_s = time.monotonic() - t1
        taken = {p for p, b in after_out.items() if b == 4}
        wait_until(lambda: prod.acks_after(time.monotonic() - 0.5, taken), timeout=10, what="acks on broker 4")
        time.sleep(1)
    finally:
        left = prod.finish(60)
        if hook.poll() is None:
            hook.kill()
            hook.wait(5)
        lifecycle_log.close()
        imds.close()
    assert left == 0
    assert not prod.errors, prod.errors[:3]
    summary = check_history([prod], read_all(c.live_bootstrap(), topic, PARTITIONS))
    print(
        f"\nscale-in: {len(led_by_leaving)} of {PARTITIONS} partitions moved off broker 1 in {scale_in_s:.2f}s "
        f"(lifecycle action completed {completed_at - t0:.2f}s after the Terminated state)"
        f"\nscale-out: broker 4 took {len(taken)} of {PARTITIONS} partitions in {scale_out_s:.2f}s after it started"
        f"\nproducer: {summary['acked']} acknowledged, {summary['read']} read, lost {summary['lost']}, "
        f"duplicates {summary['duplicates']}"
    )
    assert not summary["problems"], summary
    assert summary["lost"] == 0
