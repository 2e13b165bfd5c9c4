"""Client quotas (issue 15): set, read and removed with Kafka's own `kafka-configs.sh`
(ConfigCommand → AlterClientQuotas / DescribeClientQuotas), validated as Kafka validates
them. Runs against Apache Kafka too (`OXBOW_E2E_TARGET=kafka`)."""

from __future__ import annotations

import threading
import time
import urllib.request

from confluent_kafka import Producer, TopicPartition

from brokers import TARGET
from helpers import consumer, create_topic, produce_all, producer, unique

CONFIG_COMMAND = "kafka.admin.ConfigCommand"


def configs(java, broker, *args, check=True):
    return java(CONFIG_COMMAND, "--bootstrap-server", broker.bootstrap, *args, check=check)


def test_kafka_configs_sets_describes_and_removes_client_quotas(shared_broker, java):
    client = unique("qclient")
    out = configs(
        java,
        shared_broker,
        "--alter",
        "--add-config",
        "producer_byte_rate=1048576,consumer_byte_rate=2097152",
        "--entity-type",
        "clients",
        "--entity-name",
        client,
    ).stdout
    assert f"Completed updating config for client {client}." in out, out

    desc = configs(java, shared_broker, "--describe", "--entity-type", "clients", "--entity-name", client).stdout
    assert "producer_byte_rate=1048576.0" in desc and "consumer_byte_rate=2097152.0" in desc, desc

    # The default entity is its own entity, shown as such.
    configs(java, shared_broker, "--alter", "--add-config", "request_percentage=50", "--entity-type", "clients", "--entity-default")
    desc = configs(java, shared_broker, "--describe", "--entity-type", "clients").stdout
    assert "default client-id" in desc and "request_percentage=50.0" in desc, desc
    assert client in desc, desc

    configs(java, shared_broker, "--alter", "--delete-config", "consumer_byte_rate", "--entity-type", "clients", "--entity-name", client)
    desc = configs(java, shared_broker, "--describe", "--entity-type", "clients", "--entity-name", client).stdout
    assert "producer_byte_rate=1048576.0" in desc and "consumer_byte_rate" not in desc, desc

    # Removing the last key removes the entity.
    configs(java, shared_broker, "--alter", "--delete-config", "producer_byte_rate", "--entity-type", "clients", "--entity-name", client)
    configs(java, shared_broker, "--alter", "--delete-config", "request_percentage", "--entity-type", "clients", "--entity-default")
    desc = configs(java, shared_broker, "--describe", "--entity-type", "clients").stdout
    assert client not in desc and "default client-id" not in desc, desc


def test_bad_quota_values_are_refused_with_kafkas_error(shared_broker, java):
    client = unique("qbad")
    for config, message in [
        ("producer_byte_rate=1.5", "InvalidRequestException"),
        ("producer_byte_rate=0", "InvalidRequestException"),
        ("consumer_byte_rate=-10", "InvalidRequestException"),
    ]:
        r = configs(
            java,
            shared_broker,
            "--alter",
            "--add-config",
            config,
            "--entity-type",
            "clients",
            "--entity-name",
            client,
            check=False,
        )
        assert r.returncode != 0, (config, r.stdout)
        assert message in r.stdout + r.stderr, (config, r.stdout, r.stderr)
    desc = configs(java, shared_broker, "--describe", "--entity-type", "clients", "--entity-name", client).stdout
    assert "byte_rate" not in desc, desc


def late_rate(acks: list[tuple[float, int]], start: float, end: float) -> float:
    """Bytes per second acknowledged between `start` and `end`: the steady state, after
    the burst a fresh quota lets through (Kafka's rate spreads the first bytes over the
    10 s it pads a young history to)."""
    return sum(n for t, n in acks if start <= t < end) / (end - start)


def produce_flat_out(bootstrap: str, topic: str, client_id: str, seconds: float, throttles: list) -> list:
    """Produces 4 KiB records as fast as the broker takes them for `seconds`; returns
    (seconds since start, bytes) of each acknowledgement. Throttle events the client
    reports go into `throttles`."""
    acks: list[tuple[float, int]] = []
    start = time.monotonic()

    def on_delivery(err, msg):
        if err is None:
            acks.append((time.monotonic() - start, len(msg.value())))

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 65536,
            "log_level": 3,
            "throttle_cb": lambda ev: throttles.append(ev.throttle_time),
        }
    )
    value = b"q" * 4096
    while time.monotonic() - start < seconds:
        try:
            p.produce(topic, value, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    p.purge()
    p.flush(30)
    return acks


SECONDS = 14
STEADY_FROM = 7


def test_a_producer_over_its_quota_is_throttled_and_another_is_not(shared_broker, java):
    """Two tenants producing flat out, a quota on one: the throttled one is told
    (`throttle_time_ms`) and held near its rate; the other is never throttled."""
    topic = unique("quota-produce")
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    noisy, quiet = unique("noisy"), unique("quiet")
    rate = 128 * 1024
    configs(java, shared_broker, "--alter", "--add-config", f"producer_byte_rate={rate}", "--entity-type", "clients", "--entity-name", noisy)
    acks: dict[str, list] = {}
    throttled: dict[str, list] = {noisy: [], quiet: []}

    def run_tenant(client):
        acks[client] = produce_flat_out(shared_broker.bootstrap, topic, client, SECONDS, throttled[client])

    threads = [threading.Thread(target=run_tenant, args=(c,)) for c in (noisy, quiet)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    held = late_rate(acks[noisy], STEADY_FROM, SECONDS)
    free = late_rate(acks[quiet], STEADY_FROM, SECONDS)
    print(f"steady: noisy {held / 1024:.0f} KiB/s (quota {rate // 1024}), quiet {free / 1024:.0f} KiB/s")
    assert throttled[noisy], "the tenant over its quota was never told to back off"
    assert not any(throttled[quiet]), f"the tenant without a quota was throttled: {throttled[quiet][:5]}"
    assert rate * 0.4 < held < rate * 2, held
    assert free > rate * 4, free
    if TARGET == "oxbow":
        metrics = urllib.request.urlopen(f"{shared_broker.http}/metrics", timeout=10).read().decode()
        line = next(
            (l for l in metrics.splitlines() if l.startswith("oxbow_quota_throttled_requests_total") and noisy in l),
            None,
        )
        assert line is not None and float(line.split()[-1]) > 0, line
        assert not any(quiet in l for l in metrics.splitlines() if l.startswith("oxbow_quota_")), "unmetered tenant shown"


def test_a_consumer_over_its_quota_is_held_to_it(shared_broker, java):
    topic = unique("quota-fetch")
    create_topic(shared_broker.bootstrap, topic, partitions=1)
    rate = 128 * 1024
    total = 4 * 1024 * 1024  # more than the burst plus the steady rate can take in SECONDS
    # Small batches: a fetch returns whole batches, so 1 MB ones would move in 8 s steps.
    produce_all(producer(shared_broker.bootstrap, batch_size=16384), topic, [{"value": b"f" * 4096} for _ in range(total // 4096)])
    client = unique("reader")
    configs(java, shared_broker, "--alter", "--add-config", f"consumer_byte_rate={rate}", "--entity-type", "clients", "--entity-name", client)
    throttles: list = []
    # Small fetches (64 KiB, half a second of quota), so the rate is seen at a finer grain
    # than librdkafka's default 1 MiB per partition (8 s of this quota per response).
    c = consumer(
        shared_broker.bootstrap,
        **{
            "client.id": client,
            "throttle_cb": lambda ev: throttles.append(ev.throttle_time),
            "max.partition.fetch.bytes": 65536,
            "fetch.max.bytes": 65536,
            "message.max.bytes": 65536,
        },
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[float, int]] = []
    start = time.monotonic()
    while time.monotonic() - start < SECONDS:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append((time.monotonic() - start, len(m.value())))
    c.close()
    held = late_rate(got, STEADY_FROM, SECONDS)
    print(f"consumed {sum(n for _, n in got)} bytes, steady {held / 1024:.0f} KiB/s (quota {rate // 1024}), {len(throttles)} throttles")
    assert throttles, "the consumer over its quota was never told to back off"
    assert rate * 0.4 < held < rate * 2, held


def test_request_time_over_request_percentage_is_throttled(shared_broker, java):
    """`request_percentage`: a client whose requests take more of the broker's handler time
    than its share is throttled (for at most a second at a time, as Kafka caps it)."""
    topic = unique("quota-time")
    create_topic(shared_broker.bootstrap, topic, partitions=1)
    busy = unique("busy")
    # 0.01 % of one thread: 100 µs of handler time per second, far below what a producer
    # sending a request every few milliseconds takes.
    configs(java, shared_broker, "--alter", "--add-config", "request_percentage=0.01", "--entity-type", "clients", "--entity-name", busy)
    throttles: list = []
    acks = produce_flat_out(shared_broker.bootstrap, topic, busy, 6, throttles)
    assert acks, "nothing was acknowledged"
    assert any(t > 0 for t in throttles), "a client over its request_percentage was never throttled"
    assert max(throttles) <= 1100, f"a request-time throttle longer than one window: {max(throttles)} ms"
