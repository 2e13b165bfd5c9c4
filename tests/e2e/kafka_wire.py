"""A tiny hand-written Kafka wire codec, just enough to send well-formed and deliberately
broken requests over a raw socket and read the few response fields the tests check.

Independent of the broker's own codec on purpose: the bad-input tests must not share a bug
with the thing they test. Layouts follow Kafka's message specs (clients/src/main/resources/
common/message/*.json): request header v1 (non-flexible) / v2 (flexible), response header v0
(ApiVersions always uses v0, KIP-511) / v1, RecordBatch v2 with a CRC-32C.
"""

from __future__ import annotations

import itertools
import socket
import struct
import time

API_PRODUCE = 0
API_METADATA = 3
API_API_VERSIONS = 18
API_CREATE_TOPICS = 19

ERR_NONE = 0
ERR_CORRUPT_MESSAGE = 2
ERR_UNKNOWN_TOPIC_OR_PARTITION = 3
ERR_MESSAGE_TOO_LARGE = 10
ERR_INVALID_TOPIC_EXCEPTION = 17
ERR_UNSUPPORTED_VERSION = 35


# -- primitives -----------------------------------------------------------------


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC32C[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(n: int) -> bytes:
    return uvarint((n << 1) ^ (n >> 63))


def string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def compact_string(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


def bytes_field(b: bytes | None) -> bytes:
    if b is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(b)) + b


TAGS_NONE = uvarint(0)


class Reader:
    def __init__(self, buf: bytes):
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise ValueError(f"short response: need {n} bytes at {self.pos}, have {len(self.buf)}")
        b = self.buf[self.pos : self.pos + n]
        self.pos += n
        return b

    def int8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self.take(n).decode()

    def compact_string(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1).decode()

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


# -- record batches ---------------------------------------------------------------


def record_batch(records: list[tuple[bytes | None, bytes | None]], base_timestamp_ms: int | None = None) -> bytes:
    """An uncompressed RecordBatch v2 (magic 2) without producer id, base offset 0."""
    ts = base_timestamp_ms if base_timestamp_ms is not None else int(time.time() * 1000)
    body = bytearray()
    for i, (key, value) in enumerate(records):
        rec = bytearray()
        rec += b"\x00"  # attributes
        rec += varint(0)  # timestamp delta
        rec += varint(i)  # offset delta
        rec += varint(-1) if key is None else varint(len(key)) + key
        rec += varint(-1) if value is None else varint(len(value)) + value
        rec += varint(0)  # headers
        body += varint(len(rec)) + rec
    after_crc = (
        struct.pack(">hiqqqhii", 0, len(records) - 1, ts, ts, -1, -1, -1, len(records))  # attrs..record count
        + bytes(body)
    )
    crc = crc32c(after_crc)
    after_length = struct.pack(">ibI", -1, 2, crc) + after_crc  # leader epoch, magic, crc
    return struct.pack(">qi", 0, len(after_length)) + after_length


def txn_record_batch(values: list[bytes], producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    """An uncompressed transactional RecordBatch v2 of `values` (no keys) from a
    transactional producer, base offset 0."""
    ts = int(time.time() * 1000)
    body = bytearray()
    for i, value in enumerate(values):
        rec = b"\x00" + varint(0) + varint(i) + varint(-1) + varint(len(value)) + value + varint(0)
        body += varint(len(rec)) + rec
    attributes = 0x10  # transactional
    after_crc = (
        struct.pack(">hiqqqhii", attributes, len(values) - 1, ts, ts, producer_id, producer_epoch, base_sequence, len(values))
        + bytes(body)
    )
    after_length = struct.pack(">ibI", -1, 2, crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(after_length)) + after_length


# Byte offset of the CRC field inside a batch: base offset (8) + length (4) + epoch (4) + magic (1).
BATCH_CRC_OFFSET = 17


# -- requests ---------------------------------------------------------------------


def request_header(api_key: int, version: int, correlation_id: int, client_id: str | None, flexible: bool) -> bytes:
    h = struct.pack(">hhi", api_key, version, correlation_id) + string(client_id)
    return h + TAGS_NONE if flexible else h


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def produce_body_v3_to_v8(
    topic: str, partition: int, batch: bytes, acks: int = -1, timeout_ms: int = 10000, transactional_id: str | None = None
) -> bytes:
    return (
        string(transactional_id)
        + struct.pack(">hi", acks, timeout_ms)
        + struct.pack(">i", 1)
        + string(topic)
        + struct.pack(">i", 1)
        + struct.pack(">i", partition)
        + bytes_field(batch)
    )


def parse_produce_response_v3_to_v8(body: bytes) -> tuple[int, int]:
    """(error_code, base_offset) of the first partition of the first topic."""
    r = Reader(body)
    assert r.int32() >= 1, "produce response without topics"
    r.string()
    assert r.int32() >= 1, "produce response without partitions"
    r.int32()  # partition index
    return r.int16(), r.int64()


def create_topics_body(name: str, partitions: int, version: int) -> bytes:
    if version <= 4:
        topic = string(name) + struct.pack(">ihii", partitions, -1, 0, 0)  # rf -1, no assignments/configs
        return struct.pack(">i", 1) + topic + struct.pack(">ib", 10000, 0)
    topic = compact_string(name) + struct.pack(">ih", partitions, -1) + uvarint(1) + uvarint(1) + TAGS_NONE
    return uvarint(2) + topic + struct.pack(">ib", 10000, 0) + TAGS_NONE


def parse_create_topics_response(body: bytes, version: int) -> tuple[str | None, int]:
    """(topic name, error_code) of the first topic."""
    r = Reader(body)
    r.int32()  # throttle time (v2+)
    if version <= 4:
        assert r.int32() >= 1, "create topics response without topics"
        name = r.string()
    else:
        assert r.uvarint() - 1 >= 1, "create topics response without topics"
        name = r.compact_string()
        if version >= 7:
            r.take(16)  # topic id
    return name, r.int16()


def parse_api_versions_v0(body: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    r = Reader(body)
    err = r.int16()
    keys = {}
    for _ in range(r.int32()):
        k, lo, hi = r.int16(), r.int16(), r.int16()
        keys[k] = (lo, hi)
    return err, keys


def parse_api_versions_v3(body: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    r = Reader(body)
    err = r.int16()
    keys = {}
    for _ in range(r.uvarint() - 1):
        k, lo, hi = r.int16(), r.int16(), r.int16()
        r.skip_tags()
        keys[k] = (lo, hi)
    r.int32()  # throttle
    return err, keys


# -- connection -------------------------------------------------------------------


class Closed(Exception):
    """The broker closed the connection (EOF or reset)."""


class KafkaConn:
    def __init__(self, bootstrap: str, timeout: float = 10):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._ids = itertools.count(1)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, api_key: int, version: int, body: bytes, *, flexible: bool = False, client_id="oxbow-e2e") -> int:
        cid = next(self._ids)
        self.send_raw(frame(request_header(api_key, version, cid, client_id, flexible) + body))
        return cid

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except (ConnectionResetError, BrokenPipeError) as e:
                raise Closed(str(e)) from None
            if not chunk:
                raise Closed("EOF")
            buf += chunk
        return bytes(buf)

    def recv(self, timeout: float = 10, flexible_header: bool = False) -> tuple[int, bytes]:
        """(correlation id, response body) of the next response frame."""
        self.sock.settimeout(timeout)
        (size,) = struct.unpack(">i", self._recv_exact(4))
        payload = self._recv_exact(size)
        r = Reader(payload)
        cid = r.int32()
        if flexible_header:
            r.skip_tags()
        return cid, payload[r.pos :]

    def call(self, api_key: int, version: int, body: bytes, *, flexible: bool = False, timeout: float = 10) -> bytes:
        """Send one request and return its response body. ApiVersions responses keep header v0."""
        cid = self.send(api_key, version, body, flexible=flexible)
        got, resp = self.recv(timeout, flexible_header=flexible and api_key != API_API_VERSIONS)
        assert got == cid, f"correlation id {got}, expected {cid}"
        return resp

    def wait_closed(self, timeout: float = 10) -> bool:
        """True when the broker closes the connection within timeout (data it sends first is discarded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                if not self.sock.recv(65536):
                    return True
            except (ConnectionResetError, BrokenPipeError):
                return True
            except socket.timeout:
                return False
        return False

    # -- convenience ---------------------------------------------------------------

    def api_versions(self) -> dict[int, tuple[int, int]]:
        err, keys = parse_api_versions_v0(self.call(API_API_VERSIONS, 0, b""))
        assert err == ERR_NONE, f"ApiVersions v0 error {err}"
        return keys

    def pick_version(self, api_key: int, lo: int, hi: int) -> int:
        """The highest version in [lo, hi] the broker supports."""
        keys = self.api_versions()
        assert api_key in keys, f"broker does not advertise api key {api_key}"
        bmin, bmax = keys[api_key]
        v = min(hi, bmax)
        assert v >= max(lo, bmin), f"api key {api_key}: broker supports v{bmin}-{bmax}, test speaks v{lo}-{hi}"
        return v

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1) -> tuple[int, int]:
        v = self.pick_version(API_PRODUCE, 3, 8)
        body = self.call(API_PRODUCE, v, produce_body_v3_to_v8(topic, partition, batch, acks))
        return parse_produce_response_v3_to_v8(body)

    def create_topic(self, name: str, partitions: int = 1) -> tuple[str | None, int]:
        v = self.pick_version(API_CREATE_TOPICS, 2, 7)
        body = self.call(API_CREATE_TOPICS, v, create_topics_body(name, partitions, v), flexible=v >= 5)
        return parse_create_topics_response(body, v)
