"""Honest storage failure signals (issue 11, defect 5): a WAL on a filesystem that fills up.

The WAL directory is a small tmpfs mounted for the test (needs root and `mount`; skipped
otherwise), so ENOSPC is real: the kernel refuses the WAL's write. A filler file takes the
rest of the space; deleting it is "freeing space". The test acts as the supervisor: it
checks the exit code (74) and restarts the broker.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from pathlib import Path

import pytest
import requests
from kafka import KafkaProducer
from kafka.errors import KafkaStorageError

from helpers import Rec, consume_partitions, create_topic, produce_all, producer, unique

pytestmark = pytest.mark.oxbow_only

EXIT_STORAGE_FAILED = 74


def mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, timeout=10
        )
    except (FileNotFoundError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"cannot mount a tmpfs for the WAL: {e}")
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the WAL: {proc.stderr.decode(errors='replace').strip()}")


def fill(path: Path) -> Path:
    """Writes a filler file until the filesystem refuses (ENOSPC)."""
    filler = path / "filler"
    chunk = b"\0" * (64 << 10)
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    return filler


def readyz(b) -> tuple[int, dict]:
    r = requests.get(f"{b.http}/readyz", timeout=5)
    return r.status_code, r.json()


def metric(b, name: str) -> float:
    for line in requests.get(f"{b.http}/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def produce_one(bootstrap: str, topic: str, value: bytes):
    """One record to partition 0 with no client retries: (error name or the acknowledged
    record, seconds to the delivery report)."""
    p = producer(bootstrap, enable_idempotence=False, retries=0, message_timeout_ms=30000, linger_ms=0)
    got = []
    t0 = time.monotonic()
    p.produce(topic, value=value, partition=0, on_delivery=lambda err, msg: got.append((err, msg)))
    p.flush(40)
    assert got, "no delivery report"
    err, msg = got[0]
    outcome = err.name() if err is not None else Rec(msg.partition(), msg.offset(), msg.key(), msg.value())
    return outcome, time.monotonic() - t0


def test_disk_full_answers_storage_error_reports_not_ready_exits_74_and_serves_after_space_returns(broker_factory):
    b = broker_factory(start=False, extra_args=["--storage-failure-exit-delay", "20s"])
    wal_dir = b.data_dir / "wal"
    mount_tmpfs(wal_dir, "32m")
    try:
        b.start()
        topic = create_topic(b.bootstrap, unique("full"), partitions=2)
        before = produce_all(
            producer(b.bootstrap), topic, [{"value": f"before-{i}".encode(), "partition": i % 2} for i in range(300)]
        )
        assert readyz(b)[0] == 200 and metric(b, "oxbow_wal_healthy") == 1

        filler = fill(wal_dir)
        # The first produce the WAL cannot write fails at once with the retriable storage
        # error (not a client timeout), as does every one after it. (A few may still fit in
        # the WAL file's last page: those are acknowledged and must stay readable.)
        for i in range(200):
            outcome, seconds = produce_one(b.bootstrap, topic, f"filling-{i}".encode())
            if not isinstance(outcome, Rec):
                break
            before.append(outcome)
        assert outcome == "KAFKA_STORAGE_ERROR", outcome
        assert seconds < 5, f"the error took {seconds:.1f}s"
        outcome, seconds = produce_one(b.bootstrap, topic, b"after-the-disk-filled")
        assert (outcome, seconds < 5) == ("KAFKA_STORAGE_ERROR", True), (outcome, seconds)
        kp = KafkaProducer(bootstrap_servers=b.bootstrap, acks="all", retries=0, request_timeout_ms=30000)
        try:
            t0 = time.monotonic()
            with pytest.raises(KafkaStorageError):
                kp.send(topic, b"kafka-python", partition=0).get(timeout=30)
            assert time.monotonic() - t0 < 5
        finally:
            kp.close(timeout=5)
        r = requests.post(
            f"{b.http}/topics/{topic}",
            json={"records": [{"value": "http"}]},
            headers={"Content-Type": "application/vnd.kafka.json.v2+json"},
            timeout=10,
        )
        offsets = r.json()["offsets"]
        assert offsets[0]["error_code"] == 1, r.text  # retriable, as the REST Proxy says

        status, body = readyz(b)
        assert status == 503 and body["status"] == "not_ready", body
        assert any("No space left on device" in reason for reason in body["reasons"]), body
        assert metric(b, "oxbow_wal_healthy") == 0
        assert metric(b, "oxbow_storage_errors_total") >= 4

        # It exits for its supervisor with the storage-failure code.
        b.proc.wait(60)
        assert b.proc.returncode == EXIT_STORAGE_FAILED, b.log_tail()

        # Started on the still-full disk, it says so and exits with the same code at once.
        with pytest.raises(AssertionError, match=f"exited with code {EXIT_STORAGE_FAILED}"):
            b.start(timeout=30)
        assert "cannot take writes" in b.log_tail(20)

        os.remove(filler)
        b.start()
        after = produce_all(producer(b.bootstrap), topic, [{"value": b"after", "partition": p} for p in (0, 1)])
        assert readyz(b)[0] == 200 and metric(b, "oxbow_wal_healthy") == 1
        records = consume_partitions(b.bootstrap, topic, [0, 1])
        stored = {(r.partition, r.offset): r.value for recs in records.values() for r in recs}
        for rec in before + after:
            assert stored.get((rec.partition, rec.offset)) == rec.value, f"acknowledged {rec} lost"
        # Nothing unacknowledged appears: the failed produces never reached the log.
        values = [r.value for recs in records.values() for r in recs]
        assert b"after-the-disk-filled" not in values and b"kafka-python" not in values
        assert f"filling-{i}".encode() not in values
        b.stop()
    finally:
        b.kill9(missing_ok=True)
        subprocess.run(["umount", "-l", str(wal_dir)], capture_output=True, timeout=30)


@pytest.mark.oxbow_only
def test_the_read_cache_disk_tier_serves_catch_up_reads(broker_factory, tmp_path):
    """--cache-dir: ranges the memory tier evicts land in the disk tier; a reader catching
    up reads everything back intact (disk-tier reads are checksummed like GETs)."""
    cache_dir = tmp_path / "read-cache"
    b = broker_factory(
        flush_interval="200ms",
        extra_args=[
            "--cache-dir", str(cache_dir), "--cache-bytes", "2MiB", "--cache-disk-bytes", "64MiB",
            "--partition-tail-bytes", "0",
        ],
    )
    topic = create_topic(b.bootstrap, unique("diskcache"), partitions=2)
    values = [f"{i:06d}".encode() * 170 for i in range(6000)]  # ~6 MiB, three times the memory
    produce_all(producer(b.bootstrap), topic, [{"value": v, "partition": i % 2} for i, v in enumerate(values)])
    time.sleep(1.0)  # sealed: the memory tier overflowed into the disk tier
    used = sum(f.stat().st_size for f in cache_dir.rglob("*") if f.is_file())
    assert used > 0, "nothing in the disk tier"
    for _ in range(2):
        got = consume_partitions(b.bootstrap, topic, [0, 1], timeout=60)
        assert sorted(r.value for recs in got.values() for r in recs) == sorted(values)


@pytest.mark.oxbow_only
def test_a_cache_dir_that_cannot_be_made_stops_the_start_naming_the_flag(broker_factory, tmp_path):
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("x")
    b = broker_factory(start=False, extra_args=["--cache-dir", str(not_a_dir)])
    with pytest.raises(Exception):
        b.start(timeout=20)
    assert "--cache-dir" in b.log_path.read_text()
