"""The HTTP API (Confluent REST Proxy v2 compatible, plus v3 topic admin and ops endpoints),
checked against Kafka clients in both directions."""

from __future__ import annotations

import base64
import json
import os

import pytest
import requests

from helpers import (
    consume_partitions,
    create_topic,
    java_partition,
    produce_all,
    producer,
    topic_names,
    unique,
    wait_until,
)

pytestmark = pytest.mark.oxbow_only

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
T = 30  # seconds, for every HTTP call


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def post_records(broker, path: str, records: list[dict], fmt: str = JSON_V2) -> requests.Response:
    return requests.post(
        f"{broker.http}{path}",
        data=json.dumps({"records": records}),
        headers={"Content-Type": fmt, "Accept": "application/vnd.kafka.v2+json, application/json"},
        timeout=T,
    )


def ok_offsets(resp: requests.Response) -> list[dict]:
    assert resp.status_code == 200, f"{resp.status_code} {resp.text}"
    body = resp.json()
    assert body.get("key_schema_id") is None and body.get("value_schema_id") is None
    for o in body["offsets"]:
        assert o.get("error_code") is None and o.get("error") is None, o
    return body["offsets"]


def read_records(broker, topic: str, partition: int, offset: int, fmt: str = BINARY_V2, max_bytes: int = 10_000_000):
    resp = requests.get(
        f"{broker.http}/topics/{topic}/partitions/{partition}/records",
        params={"offset": offset, "max_bytes": max_bytes, "timeout": 1000},
        headers={"Accept": fmt},
        timeout=T,
    )
    assert resp.status_code == 200, f"{resp.status_code} {resp.text}"
    return resp.json()


def assert_rest_error(resp: requests.Response, statuses: tuple[int, ...], codes: tuple[int, ...] | None):
    """A REST Proxy error: the status, and JSON with error_code and message. codes=None accepts
    the REST Proxy convention: the status itself or a five-digit code starting with it (42201)."""
    assert resp.status_code in statuses, f"HTTP {resp.status_code}, expected {statuses}: {resp.text}"
    try:
        body = resp.json()
    except ValueError:
        raise AssertionError(f"error body is not JSON: {resp.text[:500]!r}") from None
    code = body.get("error_code")
    if codes is None:
        assert isinstance(code, int) and resp.status_code in (code, code // 100), body
    else:
        assert code in codes, body
    assert isinstance(body.get("message"), str) and body["message"], body


# -- ops endpoints ----------------------------------------------------------------


def test_health_and_readiness(shared_broker):
    assert requests.get(f"{shared_broker.http}/healthz", timeout=T).status_code == 200
    assert requests.get(f"{shared_broker.http}/readyz", timeout=T).status_code == 200


def test_metrics_are_prometheus_text(shared_broker):
    # Some traffic first, so request counters have something to say.
    topic = create_topic(shared_broker.bootstrap, unique("metrics"), 1)
    produce_all(producer(shared_broker.bootstrap), topic, [{"value": b"x"}])
    resp = requests.get(f"{shared_broker.http}/metrics", timeout=T)
    assert resp.status_code == 200
    assert resp.headers.get("content-type", "").startswith("text/plain"), resp.headers
    samples = [line for line in resp.text.splitlines() if line and not line.startswith("#")]
    oxbow = [s for s in samples if s.startswith("oxbow_")]
    assert oxbow, f"no oxbow_ metrics in:\n{resp.text[:2000]}"
    for s in samples:
        name_and_labels, _, value = s.rpartition(" ")
        assert name_and_labels, f"malformed sample line: {s!r}"
        float(value)  # every sample value parses as a number


def test_produce_latency_is_split_by_stage(shared_broker):
    """Every acks=all Produce lands in oxbow_request_stage_seconds, and its stages add up
    to its total; the WAL's own histograms move with it. Parsed as Prometheus does."""
    from prometheus_client.parser import text_string_to_metric_families

    def histograms():
        text = requests.get(f"{shared_broker.http}/metrics", timeout=T).text
        out = {}
        for family in text_string_to_metric_families(text):
            if family.type != "histogram":
                continue
            for s in family.samples:
                key = (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "le")))
                if s.name.endswith("_bucket"):
                    out.setdefault(key, []).append((float(s.labels["le"]), s.value))
                else:
                    out[key] = s.value
        return out

    def produce_stage(h, suffix, stage):
        return h[(f"oxbow_request_stage_seconds_{suffix}", (("request", "Produce"), ("stage", stage)))]

    stages = ["request_queue", "local", "remote", "response_queue", "response_send"]

    def settled():
        # A request's stages are recorded once its response is written, which may be
        # after its client has read it: scrape until no request is between its stages.
        h = histograms()
        return h if len({produce_stage(h, "count", s) for s in stages + ["total"]}) == 1 else None

    topic = create_topic(shared_broker.bootstrap, unique("stages"), 1)
    before = wait_until(settled, timeout=10, what="every Produce's stages recorded")
    p = producer(shared_broker.bootstrap, acks="all", linger_ms=0)
    produce_all(p, topic, [{"value": b"x" * 100} for _ in range(20)])
    after = wait_until(settled, timeout=10, what="every Produce's stages recorded")
    moved = produce_stage(after, "count", "total") - produce_stage(before, "count", "total")
    # Other tests share the broker, so at least ours.
    assert moved >= 1, moved
    for h in (before, after):
        total = produce_stage(h, "sum", "total")
        parts = sum(produce_stage(h, "sum", s) for s in stages)
        assert abs(total - parts) < 1e-6 * max(1.0, produce_stage(h, "count", "total")), (total, parts)
        counts = {produce_stage(h, "count", s) for s in stages + ["total"]}
        assert len(counts) == 1, counts
        buckets = sorted(produce_stage(h, "bucket", "total"))
        assert [c for _, c in buckets] == sorted(c for _, c in buckets), buckets
        assert buckets[-1] == (float("inf"), produce_stage(h, "count", "total"))
    fsyncs = lambda h: h[("oxbow_wal_fsync_seconds_count", ())]
    assert fsyncs(after) > fsyncs(before)


# -- produce over HTTP, read with Kafka ---------------------------------------------


def test_http_json_produce_is_readable_by_kafka_consumer(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("http-json"), 1)
    records = [{"key": {"id": i}, "value": {"n": i, "text": f"héllo {i}", "list": [1, 2, i]}} for i in range(20)]
    records.append({"value": "just a string"})  # no key
    offsets = ok_offsets(post_records(shared_broker, f"/topics/{topic}", records))
    assert [(o["partition"], o["offset"]) for o in offsets] == [(0, i) for i in range(21)]

    got = consume_partitions(shared_broker.bootstrap, topic, [0])[0]
    assert len(got) == 21
    for rec, sent in zip(got, records, strict=True):
        assert json.loads(rec.value) == sent["value"]
        if "key" in sent:
            assert json.loads(rec.key) == sent["key"]
        else:
            assert rec.key is None


def test_http_binary_produce_is_readable_by_kafka_consumer(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("http-bin"), 1)
    payloads = [bytes(range(256)), b"\x00", b"", b"\xff" * 1000, "ünïcødé".encode()]
    records = [{"key": b64(b"k%d" % i), "value": b64(v)} for i, v in enumerate(payloads)]
    records.append({"value": None})  # tombstone-like null value
    offsets = ok_offsets(post_records(shared_broker, f"/topics/{topic}", records, BINARY_V2))
    assert [o["offset"] for o in offsets] == list(range(len(records)))

    got = consume_partitions(shared_broker.bootstrap, topic, [0])[0]
    assert [(r.key, r.value) for r in got[:-1]] == [(b"k%d" % i, v) for i, v in enumerate(payloads)]
    assert (got[-1].key, got[-1].value) == (None, None)


def test_http_produce_to_explicit_partition(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("http-part"), 3)
    via_path = ok_offsets(post_records(shared_broker, f"/topics/{topic}/partitions/2", [{"value": {"a": 1}}] * 3))
    assert [(o["partition"], o["offset"]) for o in via_path] == [(2, 0), (2, 1), (2, 2)]
    via_field = ok_offsets(post_records(shared_broker, f"/topics/{topic}", [{"value": {"b": 2}, "partition": 1}]))
    assert [(o["partition"], o["offset"]) for o in via_field] == [(1, 0)]
    got = consume_partitions(shared_broker.bootstrap, topic, [0, 1, 2])
    assert [len(got[p]) for p in (0, 1, 2)] == [0, 1, 3]


def test_http_keyed_produce_matches_java_and_librdkafka_partitioner(shared_broker):
    partitions = 6
    topic = create_topic(shared_broker.bootstrap, unique("http-keys"), partitions)
    keys = [f"user-{i}".encode() for i in range(200)] + [b"", b"\x00\xff", "ключ".encode()]
    offsets = ok_offsets(
        post_records(shared_broker, f"/topics/{topic}", [{"key": b64(k), "value": b64(b"v")} for k in keys], BINARY_V2)
    )
    http_parts = [o["partition"] for o in offsets]

    reports = produce_all(
        producer(shared_broker.bootstrap, partitioner="murmur2_random"),
        topic,
        ({"key": k, "value": b"v"} for k in keys),
    )
    librdkafka_parts = [r.partition for r in reports]
    java_parts = [java_partition(k, partitions) for k in keys]
    assert librdkafka_parts == java_parts  # the reference itself is right
    mismatched = [(k, h, j) for k, h, j in zip(keys, http_parts, java_parts, strict=True) if h != j]
    assert not mismatched, f"{len(mismatched)} keys on the wrong partition (key, http, java): {mismatched[:5]}"
    assert len(set(http_parts)) == partitions  # 200 keys spread over every partition


# -- produce with Kafka, read over HTTP ---------------------------------------------


def test_kafka_produced_records_are_readable_over_http(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("http-read"), 2)
    produce_all(
        producer(shared_broker.bootstrap),
        topic,
        # Keys and values are JSON text, so the json embedded format can decode both.
        (
            {"key": json.dumps(f"k{i}").encode(), "value": json.dumps({"i": i}).encode(), "partition": 1}
            for i in range(30)
        ),
    )

    binary = read_records(shared_broker, topic, 1, 0, BINARY_V2)
    assert [r["offset"] for r in binary] == list(range(30))
    for i, r in enumerate(binary):
        assert (r["topic"], r["partition"]) == (topic, 1)
        assert base64.b64decode(r["key"]) == json.dumps(f"k{i}").encode()
        assert json.loads(base64.b64decode(r["value"])) == {"i": i}

    as_json = read_records(shared_broker, topic, 1, 10, JSON_V2)
    assert [r["offset"] for r in as_json] == list(range(10, 30))
    assert [(r["key"], r["value"]) for r in as_json] == [(f"k{i}", {"i": i}) for i in range(10, 30)]

    assert read_records(shared_broker, topic, 0, 0, BINARY_V2) == []  # empty partition, short timeout

    # REST Proxy semantics: max_bytes bounds the unencoded key+value bytes of the records
    # returned (at least one record), not the size of the Kafka batches read.
    unencoded = sum(len(base64.b64decode(r["key"])) + len(base64.b64decode(r["value"])) for r in binary)
    assert unencoded > 300, unencoded  # so max_bytes=200 must cut the response short
    small = read_records(shared_broker, topic, 1, 0, BINARY_V2, max_bytes=200)
    assert 1 <= len(small) < 30, f"max_bytes=200 returned all {len(small)} records ({unencoded} unencoded bytes)"
    assert [r["offset"] for r in small] == list(range(len(small)))


def test_max_bytes_is_filled_across_stored_batches(shared_broker):
    """max_bytes counts unencoded key and value bytes, so a read fills it from as many stored
    batches as it takes: a 1-record batch followed by a compressed one larger than what is
    left of the budget still yields the budget's worth of records (a single storage read,
    budgeted in stored bytes, would stop after the first batch)."""
    topic = create_topic(shared_broker.bootstrap, unique("http-fill"), 1)
    p = producer(shared_broker.bootstrap, **{"compression.type": "zstd", "linger.ms": 50})
    p.produce(topic, value=os.urandom(1000), partition=0)
    p.flush(30)
    for _ in range(50):  # random bytes: the compressed batch stays ~50 KB
        p.produce(topic, value=os.urandom(1000), partition=0)
    p.flush(30)
    got = read_records(shared_broker, topic, 0, 0, BINARY_V2, max_bytes=5000)
    assert [r["offset"] for r in got] == list(range(5))
    # A budget smaller than one record still returns one; a large one returns everything.
    assert [r["offset"] for r in read_records(shared_broker, topic, 0, 3, BINARY_V2, max_bytes=1)] == [3]
    assert len(read_records(shared_broker, topic, 0, 0, BINARY_V2, max_bytes=1 << 20)) == 51


def test_http_produced_records_are_readable_over_http(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("http-both"), 1)
    ok_offsets(post_records(shared_broker, f"/topics/{topic}/partitions/0", [{"key": "a", "value": [1, "two", None]}]))
    (r,) = read_records(shared_broker, topic, 0, 0, JSON_V2)
    assert (r["key"], r["value"], r["offset"], r["partition"]) == ("a", [1, "two", None], 0, 0)


# -- topic listing and v3 admin -------------------------------------------------------


def test_list_and_describe_topics(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("http-list"), 4)
    listed = requests.get(f"{shared_broker.http}/topics", timeout=T)
    assert listed.status_code == 200
    assert topic in listed.json()

    desc = requests.get(f"{shared_broker.http}/topics/{topic}", timeout=T)
    assert desc.status_code == 200, desc.text
    body = desc.json()
    assert body["name"] == topic
    assert sorted(p["partition"] for p in body["partitions"]) == [0, 1, 2, 3]


def test_v3_topic_create_and_delete(shared_broker):
    clusters = requests.get(f"{shared_broker.http}/v3/clusters", timeout=T)
    assert clusters.status_code == 200, clusters.text
    cluster_id = clusters.json()["data"][0]["cluster_id"]
    assert cluster_id

    name = unique("v3")
    created = requests.post(
        f"{shared_broker.http}/v3/clusters/{cluster_id}/topics",
        json={"topic_name": name, "partitions_count": 3},
        timeout=T,
    )
    assert created.status_code in (200, 201), created.text
    assert created.json().get("topic_name") == name
    md = wait_until(lambda: name in topic_names(shared_broker.bootstrap), timeout=30, what="topic in Kafka metadata")
    assert md
    desc = requests.get(f"{shared_broker.http}/topics/{name}", timeout=T).json()
    assert len(desc["partitions"]) == 3

    dup = requests.post(
        f"{shared_broker.http}/v3/clusters/{cluster_id}/topics",
        json={"topic_name": name, "partitions_count": 3},
        timeout=T,
    )
    assert 400 <= dup.status_code < 500, f"duplicate topic create: {dup.status_code} {dup.text}"

    deleted = requests.delete(f"{shared_broker.http}/v3/clusters/{cluster_id}/topics/{name}", timeout=T)
    assert deleted.status_code in (200, 204), deleted.text
    wait_until(lambda: name not in topic_names(shared_broker.bootstrap), timeout=30, what="topic gone from metadata")
    assert_rest_error(requests.get(f"{shared_broker.http}/topics/{name}", timeout=T), (404,), (40401,))


# -- errors ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def err_topic(shared_broker):
    return create_topic(shared_broker.bootstrap, unique("http-err"), 2)


def test_unknown_topic_is_404_40401(shared_broker):
    assert_rest_error(requests.get(f"{shared_broker.http}/topics/no-such-topic-x", timeout=T), (404,), (40401,))
    resp = requests.get(
        f"{shared_broker.http}/topics/no-such-topic-x/partitions/0/records",
        params={"offset": 0},
        headers={"Accept": BINARY_V2},
        timeout=T,
    )
    assert_rest_error(resp, (404,), (40401,))


def test_unknown_partition_is_404_40402(shared_broker, err_topic):
    assert_rest_error(
        post_records(shared_broker, f"/topics/{err_topic}/partitions/7", [{"value": 1}]), (404,), (40402,)
    )
    resp = requests.get(
        f"{shared_broker.http}/topics/{err_topic}/partitions/7/records",
        params={"offset": 0},
        headers={"Accept": BINARY_V2},
        timeout=T,
    )
    assert_rest_error(resp, (404,), (40402,))


@pytest.mark.parametrize(
    "body",
    [
        b'{"records": [{"value": 1}',  # truncated JSON
        b"not json at all",
        b'{"records": "not a list"}',
        b'{"no_records": []}',
        b'{"records": [{"value": "@@not base64@@"}]}',  # binary format with a bad payload
    ],
    ids=["truncated", "garbage", "records-not-list", "missing-records", "bad-base64"],
)
def test_malformed_produce_body_is_a_json_error(shared_broker, err_topic, body):
    fmt = BINARY_V2 if b"base64" in body else JSON_V2
    resp = requests.post(
        f"{shared_broker.http}/topics/{err_topic}", data=body, headers={"Content-Type": fmt}, timeout=T
    )
    assert_rest_error(resp, (400, 422), None)
    # Nothing was appended by a rejected request.
    got = consume_partitions(shared_broker.bootstrap, err_topic, [0, 1], timeout=10)
    assert sum(len(v) for v in got.values()) == 0


def test_http_errors_do_not_disturb_kafka_clients(shared_broker, err_topic):
    for _ in range(20):
        requests.post(
            f"{shared_broker.http}/topics/{err_topic}", data=b"{{{", headers={"Content-Type": JSON_V2}, timeout=T
        )
    topic = create_topic(shared_broker.bootstrap, unique("http-after-err"), 1)
    produce_all(producer(shared_broker.bootstrap), topic, [{"value": b"still fine"}])
    assert [r.value for r in consume_partitions(shared_broker.bootstrap, topic, [0])[0]] == [b"still fine"]
