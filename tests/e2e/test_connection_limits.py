"""Connections that hold a file descriptor without using it are closed; a connection cap
keeps the rest from exhausting descriptors (issue 11, defect 6).

HTTP: a request head must arrive within --http-header-timeout (slow loris), a keep-alive
connection is closed after --http-idle-timeout, and past --http-connections-max new
connections wait in the accept backlog without taking the broker down. Kafka: a connection
with no request in flight is closed after --connections-max-idle (Kafka's
connections.max.idle.ms) while one with a long-poll fetch in flight is not, and a frame
that stalls after its length is cut off after --request-read-timeout.

Timeouts are set to a few seconds so each test runs in well under 30 s; every socket is
closed by the test, every wait has a deadline.
"""

from __future__ import annotations

import select
import socket
import struct
import time

import pytest
import requests

import kafka_wire as w
from helpers import create_topic, produce_all, producer, unique

HEADER_TIMEOUT_S = 2.0
IDLE_TIMEOUT_S = 3.0
KAFKA_IDLE_S = 3.0
READ_TIMEOUT_S = 2.0
# How late a close may come: timers, scheduling on a loaded 2-core machine.
SLACK_S = 2.5

API_FETCH = 1


@pytest.fixture(scope="module")
def timed_broker(module_broker_factory):
    return module_broker_factory(
        name="timed",
        extra_args=[
            "--http-header-timeout", f"{HEADER_TIMEOUT_S}s",
            "--http-idle-timeout", f"{IDLE_TIMEOUT_S}s",
            "--connections-max-idle", f"{KAFKA_IDLE_S}s",
            "--request-read-timeout", f"{READ_TIMEOUT_S}s",
        ],
        kafka_props={"connections.max.idle.ms": int(KAFKA_IDLE_S * 1000)},
    )


def http_socket(broker) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", broker.http_port), timeout=5)
    s.setblocking(False)
    return s


def wait_all_closed(socks: list[socket.socket], deadline: float, trickle=None) -> dict[socket.socket, float]:
    """When each socket saw EOF or a reset (monotonic time), until `deadline`. `trickle(s)`
    is called on each open socket every 0.5 s (a slow-loris client keeps sending)."""
    closed: dict[socket.socket, float] = {}
    next_trickle = time.monotonic() + 0.5
    while len(closed) < len(socks) and time.monotonic() < deadline:
        open_socks = [s for s in socks if s not in closed]
        ready, _, _ = select.select(open_socks, [], [], 0.1)
        for s in ready:
            try:
                data = s.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            except BlockingIOError:
                continue
            if not data:
                closed[s] = time.monotonic()
        if trickle and time.monotonic() >= next_trickle:
            for s in socks:
                if s not in closed:
                    try:
                        trickle(s)
                    except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                        pass
            next_trickle += 0.5
    return closed


def close_all(socks):
    for s in socks:
        s.close()


@pytest.mark.oxbow_only
def test_slow_loris_http_connections_are_closed_within_the_header_timeout(timed_broker):
    n = 200
    socks, connected = [], {}
    try:
        for _ in range(n):
            s = http_socket(timed_broker)
            connected[s] = time.monotonic()  # the server's clock starts at accept, just after
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        # Keep trickling header lines: the head's clock must not restart with each one.
        closed = wait_all_closed(
            socks, time.monotonic() + HEADER_TIMEOUT_S + SLACK_S + 5, trickle=lambda s: s.send(b"X-Slow: 1\r\n")
        )
        assert len(closed) == n, f"{n - len(closed)} of {n} slow-loris connections still open"
        latest = max(closed[s] - connected[s] for s in socks)
        earliest = min(closed[s] - connected[s] for s in socks)
        assert latest <= HEADER_TIMEOUT_S + SLACK_S, f"closed after {latest:.1f}s"
        assert earliest >= HEADER_TIMEOUT_S - 0.5, f"closed too early, after {earliest:.1f}s"
        # The broker is fine and answers others.
        assert requests.get(f"{timed_broker.http}/healthz", timeout=5).status_code == 200
    finally:
        close_all(socks)


@pytest.mark.oxbow_only
def test_idle_http_keep_alive_connections_are_closed_after_the_idle_timeout(timed_broker):
    n = 100
    socks = [socket.create_connection(("127.0.0.1", timed_broker.http_port), timeout=5) for _ in range(n)]
    try:
        for s in socks:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answered_at = {}
        for s in socks:
            head = s.recv(65536)
            answered_at[s] = time.monotonic()
            assert head.startswith(b"HTTP/1.1 200"), head[:100]
        answered = max(answered_at.values())
        # A connection used again within the idle timeout still serves (keep-alive works).
        reused = socks[0]
        time.sleep(IDLE_TIMEOUT_S / 2)  # a client pausing between requests, not a wait for the server
        reused.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert reused.recv(65536).startswith(b"HTTP/1.1 200")
        for s in socks:
            s.setblocking(False)
        closed = wait_all_closed(socks, answered + IDLE_TIMEOUT_S + SLACK_S + 5)
        assert len(closed) == n, f"{n - len(closed)} of {n} idle connections still open"
        others = [t - answered_at[s] for s, t in closed.items() if s is not reused]
        assert max(others) <= IDLE_TIMEOUT_S + SLACK_S, f"closed after {max(others):.1f}s"
        assert min(others) >= IDLE_TIMEOUT_S - 0.5, f"closed too early, after {min(others):.1f}s"
        # The reused one's idle time restarted at its second response.
        assert closed[reused] - answered_at[reused] >= IDLE_TIMEOUT_S / 2 + IDLE_TIMEOUT_S - 0.5
        metrics = requests.get(f"{timed_broker.http}/metrics", timeout=5).text
        assert 'oxbow_connections_timed_out_total{listener="http",reason="idle"}' in metrics
    finally:
        close_all(socks)


@pytest.mark.oxbow_only
def test_past_the_http_connection_cap_connections_wait_and_the_broker_stays_up(broker_factory):
    cap = 20
    b = broker_factory(name="capped", extra_args=["--http-connections-max", str(cap), "--http-header-timeout", "60s"])
    holders = [socket.create_connection(("127.0.0.1", b.http_port), timeout=5) for _ in range(cap)]
    extra = []
    try:
        # Every slot is taken (the broker accepted them: one request on one proves it).
        holders[0].sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert holders[0].recv(65536).startswith(b"HTTP/1.1 200")
        # More than the cap: they queue in the kernel's accept backlog (128 here), none is
        # served yet; past the backlog, connects stall in SYN retries. No descriptor of the
        # broker's is taken by any of them.
        extra = [socket.create_connection(("127.0.0.1", b.http_port), timeout=5) for _ in range(100)]
        for _ in range(100):
            try:
                extra.append(socket.create_connection(("127.0.0.1", b.http_port), timeout=0.2))
            except (socket.timeout, ConnectionRefusedError):
                pass
        waiting = extra[0]
        waiting.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        waiting.settimeout(1.5)
        with pytest.raises(socket.timeout):
            waiting.recv(65536)
        # The broker is up and its Kafka listener, with its own cap, still serves.
        assert b.alive
        with w.KafkaConn(b.bootstrap) as conn:
            assert w.API_METADATA in conn.api_versions()
        # Once the holders close, the waiting connection is served.
        close_all(holders)
        holders = []
        waiting.settimeout(10)
        assert waiting.recv(65536).startswith(b"HTTP/1.1 200")
        close_all(extra)
        extra = []
        got = requests.get(f"{b.http}/healthz", timeout=10)
        assert got.status_code == 200
        metrics = requests.get(f"{b.http}/metrics", timeout=10).text
        open_now = [l for l in metrics.splitlines() if l.startswith("oxbow_http_connections_open ")]
        assert open_now and float(open_now[0].split()[1]) <= cap
    finally:
        close_all(holders)
        close_all(extra)


def test_an_idle_kafka_connection_is_closed_after_connections_max_idle(timed_broker):
    with w.KafkaConn(timed_broker.bootstrap) as conn:
        conn.api_versions()
        start = time.monotonic()
        assert conn.wait_closed(timeout=KAFKA_IDLE_S + SLACK_S + 3), "idle Kafka connection still open"
        took = time.monotonic() - start
        assert took >= KAFKA_IDLE_S - 0.5, f"closed too early, after {took:.1f}s"


def fetch_v4_body(topic: str, partition: int, offset: int, max_wait_ms: int) -> bytes:
    partitions = struct.pack(">i", 1) + struct.pack(">iqi", partition, offset, 1 << 20)
    topics = struct.pack(">i", 1) + w.string(topic) + partitions
    # replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level
    return struct.pack(">iiiib", -1, max_wait_ms, 1, 1 << 20, 0) + topics


@pytest.mark.oxbow_only
def test_a_kafka_connection_with_a_long_poll_in_flight_is_not_idle(timed_broker):
    # Kafka times idleness by socket activity alone and closes this connection mid-poll
    # (checked with OXBOW_E2E_TARGET=kafka); with the default 10 minutes no client's poll is
    # that long. Oxbow does not count a request in flight as idle time.
    topic = create_topic(timed_broker.bootstrap, unique("longpoll"), 1)
    wait_ms = int((KAFKA_IDLE_S + 3) * 1000)
    with w.KafkaConn(timed_broker.bootstrap, timeout=30) as conn:
        # Wait for data at the end of an empty partition for longer than the idle timeout.
        start = time.monotonic()
        cid = conn.send(API_FETCH, 4, fetch_v4_body(topic, 0, 0, wait_ms))
        got, body = conn.recv(timeout=wait_ms / 1000 + 10)
        took = time.monotonic() - start
        assert got == cid
        assert took >= KAFKA_IDLE_S, f"long poll answered after {took:.1f}s, before the idle timeout"
        # Still open right after: idle time starts from the response.
        conn.api_versions()


def test_a_kafka_frame_that_stalls_after_its_length_is_closed(timed_broker):
    # Both Oxbow (--request-read-timeout) and Kafka (the connection is idle) close it.
    bound = max(READ_TIMEOUT_S, KAFKA_IDLE_S) + SLACK_S + 3
    with w.KafkaConn(timed_broker.bootstrap) as conn:
        conn.api_versions()
        conn.send_raw(struct.pack(">i", 100) + b"\x00\x12")
        start = time.monotonic()
        assert conn.wait_closed(timeout=bound), "half-frame connection still open"
        assert time.monotonic() - start >= min(READ_TIMEOUT_S, KAFKA_IDLE_S) - 0.5


@pytest.mark.oxbow_only
def test_a_trickled_kafka_frame_is_cut_at_the_read_timeout(timed_broker):
    # Kafka counts each byte as activity and keeps such a connection; Oxbow bounds the frame.
    s = socket.create_connection(("127.0.0.1", timed_broker.kafka_port), timeout=5)
    s.setblocking(False)
    try:
        start = time.monotonic()
        s.sendall(struct.pack(">i", 1000))
        closed = wait_all_closed([s], start + READ_TIMEOUT_S + SLACK_S + 5, trickle=lambda s: s.send(b"\x00"))
        assert s in closed, "trickled half-frame connection still open"
        took = closed[s] - start
        assert READ_TIMEOUT_S - 0.5 <= took <= READ_TIMEOUT_S + SLACK_S, f"closed after {took:.1f}s"
        metrics = requests.get(f"{timed_broker.http}/metrics", timeout=5).text
        line = [l for l in metrics.splitlines() if l.startswith('oxbow_connections_timed_out_total{listener="kafka",reason="read"}')]
        assert line and float(line[0].split()[1]) >= 1
    finally:
        s.close()


@pytest.mark.oxbow_only
def test_an_http_client_that_stops_reading_its_response_is_cut_off(timed_broker):
    # A response far larger than the socket buffers, and a client that reads none of it:
    # hyper's writes block, and the connection is closed after --http-idle-timeout.
    topic = create_topic(timed_broker.bootstrap, unique("slowreader"), 1)
    value = b"v" * 2048
    produce_all(producer(timed_broker.bootstrap, **{"linger.ms": 50}), topic, [{"value": value}] * 3000)
    path = f"/topics/{topic}/partitions/0/records?offset=0&max_bytes={16 << 20}"
    full = requests.get(f"{timed_broker.http}{path}", timeout=30)
    assert full.status_code == 200 and len(full.content) > 4 << 20
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", timed_broker.http_port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        stopped = time.monotonic()
        # Read nothing until the server must have given up, then drain what was buffered.
        deadline = stopped + IDLE_TIMEOUT_S + SLACK_S
        select.select([], [], [], max(0.0, deadline - time.monotonic()))  # a client not reading
        got = 0
        s.settimeout(10)
        while True:
            try:
                chunk = s.recv(1 << 20)
            except (ConnectionResetError, BrokenPipeError):
                break
            if not chunk:
                break
            got += len(chunk)
        assert got < len(full.content), "the whole response arrived: the connection was not cut off"
    finally:
        s.close()
    assert requests.get(f"{timed_broker.http}/healthz", timeout=5).status_code == 200


@pytest.mark.oxbow_only
def test_a_slow_but_steady_http_download_is_not_cut_off(timed_broker):
    # Idle time counts from the last response byte the client took, not from when the
    # handler finished: a download slower than --http-idle-timeout completes.
    topic = create_topic(timed_broker.bootstrap, unique("slowdownload"), 1)
    # ~12 MB of JSON: far more than the socket buffers hold (up to 4 MB on the server side),
    # so the server's writes wait on this reader.
    produce_all(producer(timed_broker.bootstrap, **{"linger.ms": 50}), topic, [{"value": b"d" * 2048}] * 4500)
    path = f"/topics/{topic}/partitions/0/records?offset=0&max_bytes={16 << 20}"
    full = requests.get(f"{timed_broker.http}{path}", timeout=30).content
    assert len(full) > 10 << 20
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.settimeout(10)
    rate = 1.5e6  # bytes/s: the server's writes go on for (12 - 4) MB / rate > the idle timeout
    try:
        s.connect(("127.0.0.1", timed_broker.http_port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        start = time.monotonic()
        got = bytearray()
        while len(got) < len(full) + 100 and time.monotonic() - start < 60:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
            if full[-64:] in got[-200:]:
                break
            # A slow reader: no faster than `rate`.
            select.select([], [], [], max(0.0, start + len(got) / rate - time.monotonic()))
        took = time.monotonic() - start
        assert full[-64:] in bytes(got[-200:]), f"download cut after {len(got)} of ~{len(full)} bytes, {took:.1f}s"
        assert took > IDLE_TIMEOUT_S, f"download took {took:.1f}s: not slower than the idle timeout"
    finally:
        s.close()


@pytest.mark.oxbow_only
def test_past_the_kafka_connection_cap_connections_wait_until_one_closes(broker_factory):
    cap = 3
    b = broker_factory(name="kcapped", extra_args=["--connections-max", str(cap)])
    held = [w.KafkaConn(b.bootstrap) for _ in range(cap)]
    try:
        for conn in held:
            conn.api_versions()
        waiting = w.KafkaConn(b.bootstrap)
        held.append(waiting)
        cid = waiting.send(w.API_API_VERSIONS, 0, b"")
        with pytest.raises(socket.timeout):
            waiting.recv(timeout=1.5)
        # HTTP has its own cap and still answers.
        assert requests.get(f"{b.http}/healthz", timeout=5).status_code == 200
        held.pop(0).close()
        got, _ = waiting.recv(timeout=10)
        assert got == cid
    finally:
        for conn in held:
            conn.close()


def metric(broker, name: str) -> float:
    for line in requests.get(f"{broker.http}/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


@pytest.mark.oxbow_only
def test_past_queued_max_request_bytes_requests_wait_and_all_are_answered(broker_factory):
    """Kafka's queued.max.request.bytes: four producers sending ~900 KiB requests into a
    1 MiB request budget are slowed (their connections read nothing while they wait), not
    refused; every record is acknowledged once and read back; and the budget is free again
    when they are done."""
    from confluent_kafka import Consumer

    b = broker_factory(name="reqmem", extra_args=["--queued-max-request-bytes", "1MiB"])
    topic = unique("reqmem")
    create_topic(b.bootstrap, topic, partitions=4)
    value = b"v" * 9000
    per_producer = 600  # ~5.4 MB each, in about six ~900 KiB requests
    errors: list[str] = []
    delivered = [0]

    def cb(err, _msg):
        if err is not None:
            errors.append(str(err))
        else:
            delivered[0] += 1

    producers = [
        producer(b.bootstrap, linger_ms=200, batch_size=900_000, enable_idempotence=True,
                 message_max_bytes=1_000_000)
        for _ in range(4)
    ]
    for i in range(per_producer):
        for n, p in enumerate(producers):
            p.produce(topic, value, key=f"{n}-{i}".encode(), partition=(n + i) % 4, on_delivery=cb)
            p.poll(0)
    for p in producers:
        assert p.flush(60) == 0, "every record delivered within 60 s"
    assert errors == []
    assert delivered[0] == 4 * per_producer
    assert metric(b, "oxbow_requests_waited_for_memory_total") > 0, "the budget was reached"
    deadline = time.monotonic() + 10
    while metric(b, "oxbow_request_queued_bytes") > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert metric(b, "oxbow_request_queued_bytes") == 0, "every request's memory given back"
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique("g"),
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        keys: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(keys) < 4 * per_producer and time.monotonic() < deadline:
            for m in c.consume(500, timeout=1):
                if m.error() is None:
                    keys.add(m.key())
        assert len(keys) == 4 * per_producer
    finally:
        c.close()
