"""The internal port's broker authentication (issue 15, `--internal-auth-secret-file`).

Brokers started with one secret file replicate their WALs (acks=all works, a failover
recovers the dead leader's unsealed tail from its replicas, over authenticated tail
requests); a raw socket speaking the old protocol is closed without a byte of data and
counted; a bad secret file stops the broker with a message naming the flag.
"""

from __future__ import annotations

import os
import re
import secrets as pysecrets
import socket
import struct
import subprocess
import time

import pytest
import requests

from cluster import cluster, etcd_server, moto_server  # noqa: F401 (fixtures)
from helpers import consume_partitions, create_topic, produce_all, producer, unique, wait_until

pytestmark = pytest.mark.oxbow_only

FLAG = "--internal-auth-secret-file"


def secret_file(path, *lines: str):
    path.write_text("".join(f"{line}\n" for line in lines))
    os.chmod(path, 0o600)
    return path


def failures(broker) -> float:
    text = requests.get(f"{broker.http}/metrics", timeout=5).text
    m = re.search(r"^oxbow_internal_auth_failures_total(?:\{[^}]*\})? (\S+)$", text, re.M)
    assert m, "oxbow_internal_auth_failures_total is not exported"
    return float(m.group(1))


def old_protocol_hello(source: int) -> bytes:
    # replica_proto.rs: len u32 | kind u8 (1 = Hello) | source i32 | incarnation u64 | start u64
    return struct.pack(">IBiQQ", 21, 1, source, 1, 0)


def old_protocol_fetch_tail(source: int) -> bytes:
    return struct.pack(">IBi", 5, 5, source)


def read_until_closed(sock: socket.socket, timeout: float = 15) -> bytes:
    sock.settimeout(timeout)
    got = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return got
        except socket.timeout:
            raise AssertionError(f"the internal port kept the connection open; received {got!r}")
        if not chunk:
            return got
        got += chunk


def test_brokers_sharing_a_secret_replicate_and_fail_over(cluster, tmp_path):
    path = secret_file(tmp_path / "internal.secret", pysecrets.token_hex(32))
    # Seals held back: what survives the leader's kill -9 comes from its WAL replicas.
    c = cluster(3, flush_interval="1h", extra_args=[FLAG, str(path)])
    topic = unique("iauth")
    create_topic(c.bootstrap, topic, partitions=1, config={"min.insync.replicas": "3"})
    # acks=all needs 3 in-sync WAL copies: only authenticated replication streams give them.
    p = producer(c.bootstrap, message_timeout_ms=60000)
    values = [f"v{i}".encode() for i in range(500)]
    acked = produce_all(p, topic, [{"value": v, "partition": 0} for v in values], timeout=90)
    assert len(acked) == len(values)

    leader = c.leaders(topic)[0]
    c.kill9(leader)
    new_leader = c.wait_leader_change(topic, 0, leader, timeout=30)
    got = consume_partitions(c.broker(new_leader).bootstrap, topic, [0], timeout=90)
    seen = {r.value for r in got[0]}
    missing = set(values) - seen
    assert not missing, f"{len(missing)} acknowledged records lost\n{c.history()}"
    for b in c.live():
        assert "internal-port authentication failed" not in b.log_tail(400), b.log_tail(40)


def test_a_broker_with_another_secret_is_not_a_replica(cluster, tmp_path):
    path = secret_file(tmp_path / "internal.secret", pysecrets.token_hex(32))
    other = secret_file(tmp_path / "other.secret", pysecrets.token_hex(32))
    c = cluster(2, flush_interval="1h", extra_args=[FLAG, str(path)])
    stranger = c.add_broker(extra_args=[FLAG, str(other)])
    # Its peers refuse it as a replica and it refuses them: both sides count and warn,
    # naming the likely cause, and no stream reaches it.
    wait_until(lambda: failures(stranger) > 0 and failures(c.broker(1)) > 0, timeout=30, what="failures counted")
    logs = "".join(b.log_tail(2000) for b in c.brokers)
    assert "secret differs" in logs, logs[-4000:]
    assert "WAL replication stream started source=" not in stranger.log_tail(2000)
    assert "WAL replica is in sync replica=3" not in c.broker(1).log_tail(2000)


def test_the_old_protocol_is_closed_without_data_and_warned_about_once(broker_factory, tmp_path):
    path = secret_file(tmp_path / "internal.secret", pysecrets.token_hex(32))
    b = broker_factory(extra_args=[FLAG, str(path)])
    assert failures(b) == 0
    for frame in [old_protocol_hello(1), old_protocol_fetch_tail(1), old_protocol_hello(b.broker_id)] * 2:
        with socket.create_connection(("127.0.0.1", b.controller_port), timeout=5) as s:
            s.sendall(frame)
            assert read_until_closed(s) == b"", "the internal port answered an unauthenticated peer"
    wait_until(lambda: failures(b) == 6, timeout=10, what="six failures counted")
    # One warning for the host; the rest at debug (a scanner cannot flood the log).
    warned = b.log_tail(2000).count("internal-port authentication failed")
    assert warned == 1, b.log_tail(40)


def test_a_bad_secret_file_stops_the_broker_naming_the_flag(broker_factory, tmp_path):
    short = secret_file(tmp_path / "short.secret", "hunter2")
    cases = [
        (tmp_path / "absent.secret", "cannot open"),
        (short, "at least 32"),
        (secret_file(tmp_path / "three.secret", *(pysecrets.token_hex(32) for _ in range(3))), "at most two"),
    ]
    for path, why in cases:
        b = broker_factory(start=False, extra_args=[FLAG, str(path)])
        cmd, env = b.command()
        started = time.monotonic()
        proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, timeout=60)
        out = (proc.stdout + proc.stderr).decode(errors="replace")
        assert proc.returncode != 0, out
        assert FLAG in out and why in out, out
        assert "hunter2" not in out, "the secret leaked into the error"
        assert time.monotonic() - started < 60
    # The environment variable is read as the flag is.
    b = broker_factory(start=False)
    cmd, env = b.command()
    env = {**os.environ, **env, "OXBOW_INTERNAL_AUTH_SECRET_FILE": str(short)}
    proc = subprocess.run(cmd, env=env, capture_output=True, timeout=60)
    out = (proc.stdout + proc.stderr).decode(errors="replace")
    assert proc.returncode != 0 and FLAG in out, out
