"""Bad input over raw sockets. Each case must be refused the way Kafka refuses it, must not
crash the broker nor disturb other connections, and must not lose anything acknowledged:
after every case a normal client still produces and consumes, and every record acknowledged
so far in this module is still there at its offset."""

from __future__ import annotations

import struct

import pytest

import kafka_wire as w
from helpers import consume_partitions, create_topic, produce_all, producer, topic_names, unique

MAX_REQUEST_BYTES = 1_048_576


@pytest.fixture(scope="module")
def strict_broker(module_broker_factory):
    """Auto-create off and a 1 MiB request limit, so the limits are quick to hit."""
    return module_broker_factory(name="strict", auto_create_topics=False, max_request_bytes=MAX_REQUEST_BYTES)


class Canary:
    """A topic whose acknowledged records must survive everything the tests throw at the broker."""

    def __init__(self, broker):
        self.broker = broker
        self.topic = create_topic(broker.bootstrap, unique("canary"), 1)
        self.acked: list[bytes] = []

    def check(self):
        # The broker process itself is still up.
        assert self.broker.alive, f"broker died\n{self.broker.log_tail()}"
        n = len(self.acked)
        new = [f"canary-{n + i}".encode() for i in range(10)]
        reports = produce_all(producer(self.broker.bootstrap), self.topic, ({"value": v} for v in new), timeout=30)
        assert [r.offset for r in reports] == list(range(n, n + 10))
        self.acked += new
        got = consume_partitions(self.broker.bootstrap, self.topic, [0], timeout=30)[0]
        assert [r.value for r in got] == self.acked
        assert [r.offset for r in got] == list(range(len(self.acked)))


@pytest.fixture(scope="module")
def canary(strict_broker):
    c = Canary(strict_broker)
    c.check()
    return c


@pytest.fixture
def healthy_after(canary):
    """Run the canary check after the test body, as part of the test."""
    yield canary
    canary.check()


def assert_serves(broker):
    with w.KafkaConn(broker.bootstrap) as conn:
        keys = conn.api_versions()
    assert w.API_PRODUCE in keys and w.API_METADATA in keys


# -- framing ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"\x00\x00",  # half a length prefix
        struct.pack(">i", 100) + b"\x00\x12\x00\x00",  # header cut short
        w.frame(w.request_header(w.API_METADATA, 1, 7, "x", False) + b"\x00\x00")[:-1],  # body one byte short
    ],
    ids=["length-prefix", "header", "body"],
)
def test_truncated_frame_then_close(strict_broker, healthy_after, data):
    with w.KafkaConn(strict_broker.bootstrap) as other:
        other.api_versions()
        with w.KafkaConn(strict_broker.bootstrap) as bad:
            bad.send_raw(data)
        assert_serves(strict_broker)
        other.api_versions()  # an unrelated open connection is unaffected


def test_frame_larger_than_max_request_bytes_closes_that_connection(strict_broker, healthy_after):
    with w.KafkaConn(strict_broker.bootstrap) as other:
        other.api_versions()
        with w.KafkaConn(strict_broker.bootstrap) as bad:
            bad.send_raw(struct.pack(">i", 2 * MAX_REQUEST_BYTES) + w.request_header(w.API_PRODUCE, 7, 1, "x", False))
            assert bad.wait_closed(10), "broker kept a connection whose frame exceeds --max-request-bytes"
        other.api_versions()
    assert_serves(strict_broker)


def test_negative_frame_length_closes_that_connection(strict_broker, healthy_after):
    with w.KafkaConn(strict_broker.bootstrap) as bad:
        bad.send_raw(struct.pack(">i", -5) + b"\x00" * 16)
        assert bad.wait_closed(10)
    assert_serves(strict_broker)


def test_unknown_api_key_closes_connection(strict_broker, healthy_after):
    with w.KafkaConn(strict_broker.bootstrap) as other:
        other.api_versions()
        with w.KafkaConn(strict_broker.bootstrap) as bad:
            bad.send(30_000, 0, b"\x00" * 8)
            assert bad.wait_closed(10), "broker kept a connection after an unknown API key"
        other.api_versions()


def test_unsupported_version_of_other_api_closes_connection(strict_broker, healthy_after):
    with w.KafkaConn(strict_broker.bootstrap) as bad:
        bad.send(w.API_METADATA, 999, b"\x00" * 8)
        assert bad.wait_closed(10), "broker kept a connection after Metadata v999"
    assert_serves(strict_broker)


def test_garbage_body_does_not_hurt_broker(strict_broker, healthy_after):
    # A well-framed Produce whose body is noise: an error response or a closed connection are
    # both acceptable; a crash or a stuck broker is not.
    with w.KafkaConn(strict_broker.bootstrap) as bad:
        bad.send(w.API_PRODUCE, 7, bytes((i * 37 + 11) % 256 for i in range(300)))
        try:
            bad.recv(timeout=10)
        except (w.Closed, TimeoutError, OSError):
            pass
    assert_serves(strict_broker)


def test_unsupported_api_versions_version_gets_v0_error_with_key_list(strict_broker, healthy_after):
    """KIP-511: an ApiVersions request the broker can't parse gets a v0-layout response with
    UNSUPPORTED_VERSION and a key list holding at least ApiVersions' own range (Apache Kafka
    sends only that entry), so the client can retry with a version both sides have."""
    with w.KafkaConn(strict_broker.bootstrap) as conn:
        body = w.compact_string("oxbow-e2e") + w.compact_string("1.0") + w.TAGS_NONE
        cid = conn.send(w.API_API_VERSIONS, 99, body, flexible=True)
        got, resp = conn.recv()  # response header v0, always, for ApiVersions
        assert got == cid
        err, keys = w.parse_api_versions_v0(resp)
        assert err == w.ERR_UNSUPPORTED_VERSION
        assert keys, "empty api key list"
        assert w.API_API_VERSIONS in keys and keys[w.API_API_VERSIONS][0] == 0
        # The client's retry with a supported version on the same connection works.
        v = min(3, keys[w.API_API_VERSIONS][1])
        flexible = v >= 3
        body = w.compact_string("oxbow-e2e") + w.compact_string("1.0") + w.TAGS_NONE if flexible else b""
        resp = conn.call(w.API_API_VERSIONS, v, body, flexible=flexible)
        err, keys2 = (w.parse_api_versions_v3 if flexible else w.parse_api_versions_v0)(resp)
        assert err == 0
        # Kafka itself lists only ApiVersions in the error response; a full list is fine too.
        assert all(keys2.get(k) == r for k, r in keys.items()), (keys, keys2)
        assert w.API_PRODUCE in keys2 and w.API_METADATA in keys2


def test_pipelined_requests_answered_in_order(strict_broker, healthy_after):
    with w.KafkaConn(strict_broker.bootstrap) as conn:
        v = conn.pick_version(w.API_METADATA, 1, 8)
        body = struct.pack(">i", 0) + (b"\x00" if v >= 4 else b"")  # no topics; allow_auto_topic_creation false
        if v >= 8:
            body += b"\x00\x00"  # include cluster / topic authorized operations: false
        ids = []
        for i in range(20):
            ids.append(
                conn.send(w.API_METADATA if i % 2 else w.API_API_VERSIONS, v if i % 2 else 0, body if i % 2 else b"")
            )
        got = [conn.recv()[0] for _ in ids]
        assert got == ids


# -- produce validation -------------------------------------------------------------


def test_wrong_crc_is_corrupt_message(strict_broker, canary, healthy_after):
    batch = bytearray(w.record_batch([(b"k", b"value that will not land")]))
    batch[-3] ^= 0xFF  # flip a byte of the record after the CRC was computed
    with w.KafkaConn(strict_broker.bootstrap) as conn:
        err, _ = conn.produce(canary.topic, 0, bytes(batch))
        assert err == w.ERR_CORRUPT_MESSAGE
        # The same batch with its CRC intact is accepted: the broker checks, not guesses.
        err, base = conn.produce(canary.topic, 0, w.record_batch([(b"k", b"good raw record")]))
        assert err == w.ERR_NONE
    canary.acked.append(b"good raw record")
    assert base == len(canary.acked) - 1


def test_batch_larger_than_max_message_bytes_is_message_too_large(strict_broker, healthy_after):
    topic = create_topic(strict_broker.bootstrap, unique("small-msgs"), 1, config={"max.message.bytes": "10000"})
    with w.KafkaConn(strict_broker.bootstrap) as conn:
        err, _ = conn.produce(topic, 0, w.record_batch([(None, b"x" * 20_000)]))
        assert err == w.ERR_MESSAGE_TOO_LARGE
        err, base = conn.produce(topic, 0, w.record_batch([(None, b"y" * 5_000)]))
        assert (err, base) == (w.ERR_NONE, 0)
    got = consume_partitions(strict_broker.bootstrap, topic, [0])[0]
    assert [r.value for r in got] == [b"y" * 5_000]


def test_produce_to_unknown_topic_with_auto_create_off(strict_broker, healthy_after):
    name = unique("never-created")
    with w.KafkaConn(strict_broker.bootstrap) as conn:
        err, _ = conn.produce(name, 0, w.record_batch([(None, b"lost")]))
    assert err == w.ERR_UNKNOWN_TOPIC_OR_PARTITION
    assert name not in topic_names(strict_broker.bootstrap)


def test_produce_to_unknown_partition(strict_broker, canary, healthy_after):
    with w.KafkaConn(strict_broker.bootstrap) as conn:
        err, _ = conn.produce(canary.topic, 5, w.record_batch([(None, b"nowhere")]))
    assert err == w.ERR_UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize(
    "name", ["bad/name", "x" * 250, "..", "spaces are bad", ""], ids=["slash", "250-chars", "dotdot", "space", "empty"]
)
def test_create_topic_with_invalid_name(strict_broker, healthy_after, name):
    with w.KafkaConn(strict_broker.bootstrap) as conn:
        got_name, err = conn.create_topic(name, 1)
    assert err == w.ERR_INVALID_TOPIC_EXCEPTION, f"CreateTopics({name!r}) gave error {err}"
    assert got_name == name
    assert name not in topic_names(strict_broker.bootstrap)


def test_create_topic_with_invalid_name_via_admin_client(strict_broker, healthy_after):
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as e:
        create_topic(strict_broker.bootstrap, "bad/name", 1)
    assert e.value.args[0].code() == w.ERR_INVALID_TOPIC_EXCEPTION
