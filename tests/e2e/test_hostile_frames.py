"""Issue 11, defect 2: one small unauthenticated frame whose array count is 2^31-1 (or the
compact varint maximum) made the decoder reserve that much memory and aborted the broker
("memory allocation of 68719476704 bytes failed"). For every API and version the broker
advertises, such frames must get that connection closed (or an ordinary answer), and the
broker must keep serving: a produce and consume afterwards work and its RSS stays bounded.

The count is placed after 0..MAX_PREFIX zero bytes, so it lands on the first array of each
request whatever fields precede it (zero bytes decode as empty strings, zero integers and
empty arrays). Runs against a real Kafka too (OXBOW_E2E_TARGET=kafka), which closes the
connection the same way."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest

import kafka_wire as w
from helpers import consume_partitions, create_topic, produce_all, producer, unique

# First flexible version of each API the broker advertises (Kafka's message specs,
# "flexibleVersions"); None: never flexible. Flexible requests use request header v2
# and compact (varint) counts.
FLEXIBLE_FROM = {
    0: 9, 1: 12, 2: 6, 3: 9, 8: 8, 9: 6, 10: 3, 11: 6, 12: 4, 13: 4, 14: 4, 15: 5, 16: 3,
    18: 3, 19: 5, 20: 4, 22: 2, 23: 4, 32: 4, 37: 2, 42: 2, 47: None, 60: 0, 45: 0, 46: 0,
}
MAX_PREFIX = 12
INT32_MAX = struct.pack(">i", 2**31 - 1)
VARINT_MAX = b"\xff\xff\xff\xff\x0f"
RSS_GROWTH_MAX = 256 << 20


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def hostile_frames(api: int, version: int) -> list[bytes]:
    flex_from = FLEXIBLE_FROM.get(api)
    flexible = flex_from is not None and version >= flex_from
    header = w.request_header(api, version, 7, "hostile", flexible)
    frames = []
    for n in range(MAX_PREFIX + 1):
        for count in (INT32_MAX, VARINT_MAX):
            frames.append(w.frame(header + b"\x00" * n + count))
    return frames


def send_and_drop(bootstrap: str, frames: list[bytes]) -> int:
    """Sends each frame on its own connection and returns how many were refused by a close."""
    host, port = bootstrap.rsplit(":", 1)
    closed = 0
    for f in frames:
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(f)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(10)
            # EOF after at most a response: the broker either refused it (closed at once)
            # or answered it; both are fine, a dead broker is not.
            data = b""
            try:
                while chunk := s.recv(65536):
                    data += chunk
            except ConnectionResetError:
                pass
            closed += not data
    return closed


@pytest.fixture(scope="module")
def hostile_broker(module_broker_factory):
    return module_broker_factory(name="hostile", auto_create_topics=False)


def assert_produce_consume(broker) -> None:
    topic = create_topic(broker.bootstrap, unique("after-hostile"), 1)
    values = [f"v{i}".encode() for i in range(20)]
    reports = produce_all(producer(broker.bootstrap), topic, ({"value": v} for v in values), timeout=30)
    assert [r.offset for r in reports] == list(range(20))
    got = consume_partitions(broker.bootstrap, topic, [0], timeout=30)[0]
    assert [r.value for r in got] == values


def test_max_count_frames_for_every_api_and_version(hostile_broker):
    b = hostile_broker
    with w.KafkaConn(b.bootstrap) as conn:
        advertised = conn.api_versions()
    rss_before = rss_bytes(b.pid) if b.kind == "oxbow" else 0
    started = time.monotonic()
    sent = closed = 0
    for api, (lo, hi) in sorted(advertised.items()):
        if api not in FLEXIBLE_FROM:
            continue  # (a real Kafka advertises APIs Oxbow does not have)
        for version in range(lo, hi + 1):
            frames = hostile_frames(api, version)
            closed += send_and_drop(b.bootstrap, frames)
            sent += len(frames)
            assert b.alive, f"broker died on API {api} v{version}\n{b.log_tail()}"
    print(f"{sent} hostile frames, {closed} refused by closing, in {time.monotonic() - started:.1f} s")
    assert closed > sent // 2, "most of these frames cannot decode; the broker must close on them"
    assert_produce_consume(b)
    if b.kind == "oxbow":
        grown = rss_bytes(b.pid) - rss_before
        assert grown < RSS_GROWTH_MAX, f"RSS grew by {grown} bytes"


@pytest.mark.parametrize(
    "api,version,body",
    [
        (15, 0, INT32_MAX),  # DescribeGroups v0: groups[] first — the reported 19-byte frame
        (3, 1, INT32_MAX),  # Metadata v1: topics[] first
        (3, 9, VARINT_MAX),  # Metadata v9 (flexible): compact topics[] first
        (42, 2, VARINT_MAX),  # DeleteGroups v2: compact groups_names[] first
    ],
    ids=["DescribeGroups-v0", "Metadata-v1", "Metadata-v9-compact", "DeleteGroups-v2-compact"],
)
def test_the_reported_frames_close_the_connection(hostile_broker, api, version, body):
    b = hostile_broker
    payload = w.request_header(api, version, 7, None if version < 9 else "x", version >= FLEXIBLE_FROM[api]) + body
    with w.KafkaConn(b.bootstrap) as other:
        other.api_versions()
        with w.KafkaConn(b.bootstrap) as bad:
            bad.send_raw(w.frame(payload))
            assert bad.wait_closed(10), "broker kept a connection whose request cannot decode"
        other.api_versions()  # an unrelated connection is unaffected
    assert b.alive, b.log_tail()


def _metadata_v1_null_names(names: int) -> bytes:
    return w.request_header(3, 1, 7, "x", False) + struct.pack(">i", names) + b"\xff\xff" * names


def _produce_v9_empty_topics(topics: int) -> bytes:
    body = b"\x00" + struct.pack(">hi", 1, 1000) + w.uvarint(topics + 1) + b"\x01\x01\x00" * topics + b"\x00"
    return w.request_header(0, 9, 7, "x", True) + body


@pytest.mark.parametrize(
    "payload",
    [_metadata_v1_null_names(4 << 20), _produce_v9_empty_topics(1 << 20)],
    ids=["Metadata-v1-8MiB-null-names", "Produce-v9-3MiB-empty-topics"],
)
def test_frames_that_decode_into_gigabytes_are_refused(hostile_broker, payload):
    """Truthful counts of tiny elements: 8 MiB of null topic names would build 512 MiB of
    structs (a 100 MiB frame 6.4 GiB), 3 MiB of empty Produce topics 96 MiB (100 MiB:
    3.2 GiB). Decoding one request may build at most 64 MiB, so both are refused."""
    b = hostile_broker
    if b.kind != "oxbow":
        pytest.skip("Oxbow's decode budget; Kafka decodes these")
    rss_before = rss_bytes(b.pid)
    with w.KafkaConn(b.bootstrap, timeout=30) as bad:
        bad.send_raw(w.frame(payload))
        assert bad.wait_closed(30)
    assert b.alive, b.log_tail()
    assert rss_bytes(b.pid) - rss_before < RSS_GROWTH_MAX
    assert_produce_consume(b)
