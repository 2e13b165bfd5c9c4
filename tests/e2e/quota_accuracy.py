"""Quota accuracy: achieved ÷ configured byte rate for a producer and a consumer held by a
client-id quota, in the steady state (after the burst a fresh quota lets through).

    python quota_accuracy.py BOOTSTRAP [SECONDS] [RATE_BYTES]

Sets `producer_byte_rate` / `consumer_byte_rate` on two fresh client ids with Kafka's
ConfigCommand (from .tools/kafka/libs), produces flat out for SECONDS (default 40) and
consumes a pre-filled topic for as long, and prints the rates measured over the last
half of each run. Works against Oxbow or Apache Kafka alike.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

from confluent_kafka import TopicPartition

from brokers import KAFKA_LIBS
from helpers import consumer, create_topic, produce_all, producer
from test_quotas import late_rate, produce_flat_out


def set_quota(bootstrap: str, client: str, key: str, rate: int) -> None:
    subprocess.run(
        ["java", "-cp", f"{KAFKA_LIBS}/*", "kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap,
         "--alter", "--add-config", f"{key}={rate}", "--entity-type", "clients", "--entity-name", client],
        check=True, capture_output=True, timeout=120,
    )


def main() -> None:
    bootstrap = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 40
    rate = int(sys.argv[3]) if len(sys.argv) > 3 else 256 * 1024
    tag = uuid.uuid4().hex[:8]

    topic = f"quota-accuracy-p-{tag}"
    create_topic(bootstrap, topic, partitions=2)
    client = f"acc-producer-{tag}"
    set_quota(bootstrap, client, "producer_byte_rate", rate)
    throttles: list = []
    acks = produce_flat_out(bootstrap, topic, client, seconds, throttles)
    produced = late_rate(acks, seconds / 2, seconds)
    print(f"produce: {produced / rate:.3f} of the quota ({produced / 1024:.0f} of {rate / 1024:.0f} KiB/s), {len(throttles)} throttles")

    topic = f"quota-accuracy-f-{tag}"
    create_topic(bootstrap, topic, partitions=1)
    total = int(rate * seconds * 1.5) + 4 * 1024 * 1024
    produce_all(producer(bootstrap, batch_size=16384), topic, [{"value": b"f" * 4096} for _ in range(total // 4096)])
    client = f"acc-consumer-{tag}"
    set_quota(bootstrap, client, "consumer_byte_rate", rate)
    c = consumer(bootstrap, **{"client.id": client, "max.partition.fetch.bytes": 65536, "fetch.max.bytes": 65536, "message.max.bytes": 65536})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list = []
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append((time.monotonic() - start, len(m.value())))
    c.close()
    fetched = late_rate(got, seconds / 2, seconds)
    print(f"fetch: {fetched / rate:.3f} of the quota ({fetched / 1024:.0f} of {rate / 1024:.0f} KiB/s)")


if __name__ == "__main__":
    main()
