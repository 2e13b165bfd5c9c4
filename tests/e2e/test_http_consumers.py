"""REST Proxy v2 consumer instances against the real binary: subscribe, poll, commit,
offsets and delete over HTTP, and an HTTP instance sharing a group's partitions with a
librdkafka (confluent-kafka) consumer — whichever of the two the group elects leader
computes the range assignment the other decodes."""

from __future__ import annotations

import base64
import json
import time

import pytest
import requests
from confluent_kafka import Consumer

from helpers import create_topic, produce_all, producer, unique

pytestmark = pytest.mark.oxbow_only

V2 = "application/vnd.kafka.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
T = 30  # seconds, for every HTTP call
PATIENCE = 60  # seconds, for a group to settle or records to arrive


def call(method: str, url: str, body=None) -> requests.Response:
    headers = {"Content-Type": V2} if body is not None else {}
    data = json.dumps(body) if body is not None else None
    return requests.request(method, url, data=data, headers=headers, timeout=T)


def create_instance(broker, group: str, **config) -> str:
    resp = call("POST", f"{broker.http}/consumers/{group}", config)
    assert resp.status_code == 200, resp.text
    base = resp.json()["base_uri"]
    assert base.endswith(f"/consumers/{group}/instances/{resp.json()['instance_id']}")
    return base


def poll(base: str, accept: str, timeout_ms: int = 500) -> list[dict]:
    resp = requests.get(f"{base}/records", params={"timeout": timeout_ms}, headers={"Accept": accept}, timeout=T)
    assert resp.status_code == 200, resp.text
    assert resp.headers["Content-Type"] == accept
    return resp.json()


def assigned(base: str) -> set[int]:
    resp = call("GET", f"{base}/assignments")
    assert resp.status_code == 200, resp.text
    return {p["partition"] for p in resp.json()["partitions"]}


def test_subscribe_poll_commit_and_delete(shared_broker):
    topic = create_topic(shared_broker.bootstrap, unique("rest-consume"), 3)
    group = unique("rest-group")
    base = create_instance(
        shared_broker, group, format="json", **{"auto.offset.reset": "earliest", "auto.commit.enable": "false"}
    )
    assert call("POST", f"{base}/subscription", {"topics": [topic]}).status_code == 204
    assert call("GET", f"{base}/subscription").json() == {"topics": [topic]}
    values = [{"n": i} for i in range(9)]
    resp = requests.post(
        f"{shared_broker.http}/topics/{topic}",
        data=json.dumps({"records": [{"key": str(i), "value": v} for i, v in enumerate(values)]}),
        headers={"Content-Type": JSON_V2},
        timeout=T,
    )
    assert resp.status_code == 200, resp.text
    got: list[dict] = []
    deadline = time.monotonic() + PATIENCE
    while len(got) < len(values) and time.monotonic() < deadline:
        got.extend(poll(base, JSON_V2))
    assert sorted(r["value"]["n"] for r in got) == list(range(9))
    # The wrong embedded format is 406.
    wrong = requests.get(f"{base}/records", headers={"Accept": BINARY_V2}, timeout=T)
    assert wrong.status_code == 406 and wrong.json()["error_code"] == 40601

    assert call("POST", f"{base}/offsets").status_code == 200
    offsets = call("GET", f"{base}/offsets").json()["offsets"]
    ends: dict[int, int] = {}
    for r in got:
        ends[r["partition"]] = max(ends.get(r["partition"], 0), r["offset"] + 1)
    assert {o["partition"]: o["offset"] for o in offsets} == ends

    assert call("DELETE", base).status_code == 204
    gone = call("GET", f"{base}/assignments")
    assert gone.status_code == 404 and gone.json()["error_code"] == 40403


@pytest.mark.parametrize("first", ["http", "kafka"])
def test_http_instance_and_kafka_consumer_share_a_group(shared_broker, first):
    partitions = 4
    topic = create_topic(shared_broker.bootstrap, unique("rest-shared"), partitions)
    group = unique("rest-mixed")
    base = create_instance(shared_broker, group, format="binary", **{"auto.offset.reset": "earliest"})
    kafka = Consumer(
        {
            "bootstrap.servers": shared_broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
            "partition.assignment.strategy": "range",
            "log_level": 3,
        }
    )
    kafka_owned: set[int] = set()
    try:
        order = ["http", "kafka"] if first == "http" else ["kafka", "http"]
        started: set[str] = set()
        http_got: list[dict] = []
        kafka_got: list = []

        def step():
            for side in order:
                if side not in started:
                    started.add(side)
                    if side == "http":
                        assert call("POST", f"{base}/subscription", {"topics": [topic]}).status_code == 204
                    else:
                        kafka.subscribe(
                            [topic],
                            on_assign=lambda c, ps: kafka_owned.update(p.partition for p in ps),
                            on_revoke=lambda c, ps: kafka_owned.difference_update(p.partition for p in ps),
                        )
                    return
            http_got.extend(poll(base, BINARY_V2, 200))
            kafka_got.extend(m for m in kafka.consume(num_messages=500, timeout=0.2) if m.error() is None)

        # Both members settle on a split of the partitions, each partition owned once.
        deadline = time.monotonic() + PATIENCE
        while True:
            step()
            mine = assigned(base)
            if len(started) == 2 and mine and kafka_owned and mine | kafka_owned == set(range(partitions)) and not (mine & kafka_owned):
                break
            assert time.monotonic() < deadline, f"group never settled: http {mine}, kafka {kafka_owned}"
        assert not http_got and not kafka_got

        records = [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % partitions} for i in range(40)]
        produce_all(producer(shared_broker.bootstrap), topic, records)
        deadline = time.monotonic() + PATIENCE
        while len(http_got) + len(kafka_got) < len(records):
            assert time.monotonic() < deadline, f"http {len(http_got)}, kafka {len(kafka_got)}"
            step()
        http_parts = {r["partition"] for r in http_got}
        kafka_parts = {m.partition() for m in kafka_got}
        assert http_parts and kafka_parts and not (http_parts & kafka_parts), (http_parts, kafka_parts)
        values = sorted(
            [base64.b64decode(r["value"]).decode() for r in http_got] + [m.value().decode() for m in kafka_got]
        )
        assert values == sorted(f"v{i}" for i in range(40))
    finally:
        kafka.close()
        call("DELETE", base)
