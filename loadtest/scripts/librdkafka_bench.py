#!/usr/bin/env python3
"""Produce and consume throughput/latency through librdkafka (confluent-kafka).

Measures what a real client sees against any Kafka-compatible broker:
  - produce: records/s, MB/s, and per-record produce latency (librdkafka's own
    Message.latency(): from produce() to the delivery report), p50/p99/max;
  - consume: MB/s reading the same topic from the beginning with assign().
With --rate R the producer is paced at R records/s (open loop), so latency is measured at
a known load instead of at saturation, where it only shows the client's own queue.

Usage (venv from scripts/test.sh setup):
  .venv/bin/python loadtest/scripts/librdkafka_bench.py --bootstrap 127.0.0.1:9092 \
      --records 200000 --record-size 1024 --acks all
Prints one JSON object per run. Bounded: every wait has a timeout.
"""

import argparse
import json
import sys
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, int(round(p / 100.0 * (len(sorted_values) - 1))))
    return sorted_values[k]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--acks", choices=["all", "1"], default="all")
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--batch-bytes", type=int, default=65536)
    ap.add_argument("--timeout-s", type=float, default=300)
    ap.add_argument("--rate", type=float, default=0, help="records/s to pace at (0 = as fast as possible)")
    ap.add_argument("--label", default="")
    args = ap.parse_args()

    topic = f"bench-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=args.partitions, replication_factor=1)])[topic].result(30)

    latencies = []
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            latencies.append(msg.latency())

    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        "acks": args.acks,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_bytes,
        "enable.idempotence": args.acks == "all",
        "queue.buffering.max.kbytes": 1048576,
    })
    value = b"x" * args.record_size
    # Warm-up outside the timed run: metadata, connections, the idempotent producer id. Without
    # it the first few hundred ms of records carry start-up latency that is not the broker's.
    for p in range(args.partitions):
        producer.produce(topic, value=value, partition=p)
    if producer.flush(30) != 0:
        sys.exit("warm-up produce did not complete")
    latencies.clear()
    deadline = time.monotonic() + args.timeout_s
    start = time.monotonic()
    for i in range(args.records):
        if args.rate > 0:
            due = start + i / args.rate
            while time.monotonic() < due:
                producer.poll(min(0.001, max(0.0, due - time.monotonic())))
        while True:
            try:
                producer.produce(topic, value=value, key=str(i % 1000).encode(), on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
        if time.monotonic() > deadline:
            sys.exit("produce timed out")
    remaining = producer.flush(max(1.0, deadline - time.monotonic()))
    produce_s = time.monotonic() - start
    if remaining or errors:
        sys.exit(f"produce incomplete: {remaining} undelivered, errors {errors[:3]}")

    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": f"bench-{topic}",
        "enable.auto.commit": False,
        "fetch.max.bytes": 52428800,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(args.partitions)])
    consumed = 0
    consumed_bytes = 0
    start = time.monotonic()
    total = args.records + args.partitions  # with the warm-up records
    while consumed < total and time.monotonic() < deadline:
        for m in consumer.consume(10000, 1.0):
            if m.error():
                continue
            consumed += 1
            consumed_bytes += len(m.value() or b"")
    consume_s = time.monotonic() - start
    consumer.close()
    admin.delete_topics([topic])

    latencies.sort()
    mb = args.records * args.record_size / 1e6
    print(json.dumps({
        "label": args.label,
        "bootstrap": args.bootstrap,
        "acks": args.acks,
        "rate": args.rate or None,
        "records": args.records,
        "record_bytes": args.record_size,
        "partitions": args.partitions,
        "produce_records_per_s": round(args.records / produce_s),
        "produce_mb_per_s": round(mb / produce_s, 1),
        "produce_latency_ms_p50": round(percentile(latencies, 50) * 1000, 2),
        "produce_latency_ms_p99": round(percentile(latencies, 99) * 1000, 2),
        "produce_latency_ms_max": round(latencies[-1] * 1000, 2) if latencies else None,
        "consumed": consumed,
        "consume_mb_per_s": round(consumed_bytes / 1e6 / consume_s, 1),
    }))
    if consumed != total:
        sys.exit(f"consumed {consumed} of {total}")


if __name__ == "__main__":
    main()
