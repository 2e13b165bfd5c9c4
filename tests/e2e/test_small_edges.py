"""Small edges of issue 11, defect 10: too many HTTP headers get the error JSON; deeply
nested JSON is refused instead of stored; internal topic names cannot be created, auto-
created or produced to; CreateTopics answers a null error_message on success;
`compression.type` takes Kafka's values."""

from __future__ import annotations

import json

import pytest
import requests
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource, NewTopic

import kafka_wire as w
from brokers import TARGET
from helpers import admin, consume_partitions, create_topic, produce_all, producer, topic_names, unique

V2_JSON = "application/vnd.kafka.json.v2+json"


# -- HTTP ------------------------------------------------------------------------


@pytest.mark.oxbow_only
def test_too_many_headers_get_431_with_the_error_json(shared_broker):
    many = {f"X-H-{i}": "v" for i in range(150)}
    r = requests.get(f"{shared_broker.http}/healthz", headers=many, timeout=10)
    assert r.status_code == 431
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["error_code"] == 43101 and "header" in body["message"]
    # Under the limit is fine.
    few = {f"X-H-{i}": "v" for i in range(50)}
    assert requests.get(f"{shared_broker.http}/healthz", headers=few, timeout=10).status_code == 200


def deep(n: int):
    return "[" * n + "]" * n


@pytest.mark.oxbow_only
def test_deeply_nested_json_is_refused_not_stored(shared_broker):
    topic = unique("deep")
    url = f"{shared_broker.http}/topics/{topic}"
    headers = {"Content-Type": V2_JSON}
    for n in (10_000, 65):
        body = '{"records":[{"key":%s,"value":1}]}' % deep(n)
        r = requests.post(url, data=body, headers=headers, timeout=30)
        assert r.status_code == 422, r.text
        assert r.json()["error_code"] == 42210
    # 64 levels in all (3 of them the body's own) is accepted, and nothing of the refused
    # requests was stored.
    r = requests.post(url, data='{"records":[{"key":%s,"value":1}]}' % deep(61), headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["offsets"][0]["offset"] == 0
    # Other JSON bodies are bounded too (v3 topic creation).
    cluster = requests.get(f"{shared_broker.http}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
    r = requests.post(
        f"{shared_broker.http}/v3/clusters/{cluster}/topics",
        data='{"topic_name":"%s","configs":%s}' % (unique("deep-v3"), deep(1000)),
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 422 and r.json()["error_code"] == 42210, r.text


@pytest.mark.oxbow_only
def test_internal_topics_cannot_be_created_or_produced_over_http(shared_broker):
    cluster = requests.get(f"{shared_broker.http}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
    for name in ("__consumer_offsets", "__oxbow_internal"):
        r = requests.post(
            f"{shared_broker.http}/v3/clusters/{cluster}/topics",
            json={"topic_name": name, "partitions_count": 1},
            timeout=10,
        )
        if name == "__consumer_offsets":
            # Listed (internal) in Metadata, as in Kafka: it exists.
            assert r.status_code == 409 and r.json()["error_code"] == 40902, r.text
        else:
            assert r.status_code == 400 and "internal" in r.json()["message"], r.text
        r = requests.post(
            f"{shared_broker.http}/topics/{name}",
            data='{"records":[{"value":1}]}',
            headers={"Content-Type": V2_JSON},
            timeout=10,
        )
        assert r.status_code == 422 and r.json()["error_code"] == 42202, r.text
    names = topic_names(shared_broker.bootstrap)
    assert "__oxbow_internal" not in names and "__consumer_offsets" in names, names


# -- Kafka -----------------------------------------------------------------------


def test_internal_topics_cannot_be_created_or_produced_over_kafka(shared_broker):
    bootstrap = shared_broker.bootstrap
    # Make Kafka create its offsets topic (Oxbow has none: offsets are in its metadata).
    t = create_topic(bootstrap, unique("seed"), 1)
    produce_all(producer(bootstrap), t, [{"value": b"x"}])
    consume_partitions(bootstrap, t, [0], timeout=30)

    client = admin(bootstrap)
    futures = client.create_topics([NewTopic("__consumer_offsets", 1, 1)], request_timeout=15)
    with pytest.raises(KafkaException) as e:
        futures["__consumer_offsets"].result(timeout=30)
    # It exists already (on Oxbow listed without records: offsets live in its metadata).
    assert e.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, e.value

    p = producer(bootstrap, **{"message.timeout.ms": 15000})
    errors = []
    p.produce("__consumer_offsets", b"not a group offset", on_delivery=lambda err, msg: errors.append(err))
    p.flush(30)
    assert len(errors) == 1 and errors[0] is not None, errors
    assert errors[0].code() == KafkaError.TOPIC_EXCEPTION, errors[0]


@pytest.mark.oxbow_only
def test_internal_topics_are_not_auto_created(shared_broker):
    bootstrap = shared_broker.bootstrap
    md = admin(bootstrap).list_topics("__transaction_state", timeout=10)
    t = md.topics.get("__transaction_state")
    assert t is not None and t.error is not None and t.error.code() == KafkaError.TOPIC_EXCEPTION
    assert "__transaction_state" not in topic_names(bootstrap)
    client = admin(bootstrap)  # keep a reference: a destroyed client fails its futures
    futures = client.create_topics([NewTopic("__oxbow_meta", 1, 1)], request_timeout=15)
    with pytest.raises(KafkaException) as e:
        futures["__oxbow_meta"].result(timeout=30)
    assert e.value.args[0].code() == KafkaError.INVALID_REQUEST


def test_create_topics_answers_a_null_error_message_on_success(shared_broker):
    name = unique("nullmsg")
    with w.KafkaConn(shared_broker.bootstrap) as conn:
        body = conn.call(w.API_CREATE_TOPICS, 5, w.create_topics_body(name, 1, 5), flexible=True)
    r = w.Reader(body)
    r.int32()  # throttle
    assert r.uvarint() - 1 == 1
    assert r.compact_string() == name
    assert r.int16() == w.ERR_NONE
    assert r.compact_string() is None, "error_message must be null on success"


KAFKA_COMPRESSION_TYPES = ["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]


def test_compression_type_takes_kafkas_values(shared_broker):
    bootstrap = shared_broker.bootstrap
    client = admin(bootstrap)
    names = {v: unique(f"comp-{v}") for v in KAFKA_COMPRESSION_TYPES}
    futures = client.create_topics(
        [NewTopic(n, 1, 1, config={"compression.type": v}) for v, n in names.items()], request_timeout=30
    )
    for f in futures.values():
        f.result(timeout=30)
    described = client.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, n) for n in names.values()])
    for res, f in described.items():
        configs = f.result(timeout=30)
        wanted = next(v for v, n in names.items() if n == res.name)
        assert configs["compression.type"].value == wanted
    # Data round-trips whatever the topic says (Kafka recompresses; Oxbow stores as sent).
    t = names["zstd"]
    produce_all(producer(bootstrap, **{"compression.type": "lz4"}), t, [{"value": b"v%d" % i} for i in range(20)])
    got = consume_partitions(bootstrap, t, [0], timeout=30)[0]
    assert [r.value for r in got] == [b"v%d" % i for i in range(20)]
    # Anything else is INVALID_CONFIG.
    bad = unique("comp-bad")
    futures = client.create_topics([NewTopic(bad, 1, 1, config={"compression.type": "none"})], request_timeout=30)
    with pytest.raises(KafkaException) as e:
        futures[bad].result(timeout=30)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_the_offsets_topic_is_listed_as_internal(shared_broker):
    """`__consumer_offsets` is in Metadata as an internal topic with Kafka's 50 partitions,
    as clients and their suites expect of a Kafka cluster (regex subscriptions skip it)."""
    from kafka import KafkaAdminClient

    bootstrap = shared_broker.bootstrap
    # Kafka creates it on a group's first use.
    t = create_topic(bootstrap, unique("seed"), 1)
    produce_all(producer(bootstrap), t, [{"value": b"x"}])
    consume_partitions(bootstrap, t, [0], timeout=30)
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        (described,) = client.describe_topics(["__consumer_offsets"])
    finally:
        client.close()
    assert described["error_code"] == 0, described
    assert described["is_internal"] is True, described
    # Kafka's default is 50; the suite's Kafka brokers are set to fewer (brokers.py).
    assert len(described["partitions"]) == (50 if TARGET == "oxbow" else 1), len(
        described["partitions"]
    )
    leader = lambda p: p.get("leader", p.get("leader_id"))  # noqa: E731 (kafka-python versions differ)
    assert all(leader(p) >= 0 for p in described["partitions"]), described["partitions"][:3]
