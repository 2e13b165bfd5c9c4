"""Issue 16: idempotent producers that sat idle while others wrote far more than the
rebuild window (4096 records) are still known to a partition's next leader after a kill -9:
a retry of the batch they stored long ago is answered with its original offset and stored
once. More idle producers than a sealed chunk carries rows for (256), and complete chunks too far
apart for the rebuild window, so the new leader follows the checkpoint row back to the last
complete chunk; on real etcd + S3 (moto).
"""

from __future__ import annotations

import struct
import time

import pytest

from cluster import cluster, etcd_server, moto_server  # noqa: F401 (fixtures)
from helpers import consume_partitions, create_topic, produce_all, producer, unique, wait_until
from kafka_wire import KafkaConn, crc32c, parse_produce_response_v3_to_v8, produce_body_v3_to_v8, varint

pytestmark = pytest.mark.oxbow_only

# 2,500 idle producers carry 2,500 rows: complete chunks at least 10,000 records apart, so
# the last one (while they were storing their batches) lies before the new leader's window
# (the last 4,096 records of 8,500) and only the checkpoint row of the chunks after it
# leads there.
IDLE = 2500
BUSY_RECORDS = 6000
FIRST_PID = 7_000_000


def idempotent_batch(value: bytes, producer_id: int, base_sequence: int) -> bytes:
    """An uncompressed, non-transactional RecordBatch v2 of one record from an idempotent
    producer at epoch 0, base offset 0."""
    ts = int(time.time() * 1000)
    rec = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(len(value)) + value + varint(0)
    after_crc = struct.pack(">hiqqqhii", 0, 0, ts, ts, producer_id, 0, base_sequence, 1) + varint(len(rec)) + rec
    after_length = struct.pack(">ibI", -1, 2, crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(after_length)) + after_length


def produce_raw(conn: KafkaConn, topic: str, batch: bytes) -> tuple[int, int]:
    body = conn.call(0, 7, produce_body_v3_to_v8(topic, 0, batch, acks=-1), timeout=20)
    return parse_produce_response_v3_to_v8(body)


def test_idle_producers_retries_are_recognised_after_a_failover_far_behind(cluster):
    # No compaction: the catalogue ends in sealed chunks, not in a segment (which names
    # every producer anyway).
    c = cluster(3, flush_interval="250ms", extra_args=["--compaction-interval", "0s"])
    topic = create_topic(c.bootstrap, unique("idlepids"), 1, config={"min.insync.replicas": "2"})
    leader = c.leaders(topic)[0]
    batches = {pid: idempotent_batch(f"idle-{pid}".encode(), pid, 0) for pid in range(FIRST_PID, FIRST_PID + IDLE)}
    first_offsets: dict[int, int] = {}
    with KafkaConn(c.broker(leader).bootstrap, timeout=20) as conn:
        for pid, batch in batches.items():
            # NOT_ENOUGH_REPLICAS (19) until the WAL replicas are in sync after the start.
            answer = wait_until(lambda: (a := produce_raw(conn, topic, batch))[0] != 19 and a,
                                timeout=20, interval=0.2, what="WAL replicas in sync")
            assert answer[0] == 0, (pid, answer)
            first_offsets[pid] = answer[1]
    # Far more than the rebuild window from one busy producer, sealed in many chunks.
    busy = producer(c.bootstrap, linger_ms=20)
    produce_all(busy, topic, [{"value": f"busy-{i}".encode(), "partition": 0} for i in range(BUSY_RECORDS)])
    time.sleep(1.5)  # several seals: the data is in the object store, not only in WALs

    c.kill9(leader)
    c.event(f"killed the leader, broker {leader}")
    new_leader = c.wait_leader_change(topic, 0, leader, timeout=30)

    def retry(conn: KafkaConn, pid: int) -> tuple[int, int]:
        return produce_raw(conn, topic, batches[pid])

    # Until the new leader has opened the partition (retriable codes before that); a retry
    # stored again would be answered 0 at a new offset, which the check below catches.
    def served() -> bool:
        with KafkaConn(c.broker(new_leader).bootstrap, timeout=20) as conn:
            return retry(conn, FIRST_PID)[0] == 0

    wait_until(served, timeout=30, interval=0.5, what="the new leader to answer")
    wrong = []
    with KafkaConn(c.broker(new_leader).bootstrap, timeout=20) as conn:
        for pid in batches:
            code, offset = retry(conn, pid)
            if code != 0 or offset != first_offsets[pid]:
                wrong.append((pid, code, offset, first_offsets[pid]))
    assert not wrong, f"{len(wrong)} idle producers' retries not recognised, e.g. {wrong[:5]}\n{c.history()}"
    got = consume_partitions(c.live_bootstrap(), topic, [0], timeout=60)[0]
    idle_values = [r.value for r in got if r.value.startswith(b"idle-")]
    assert len(idle_values) == IDLE == len(set(idle_values)), f"{len(idle_values)} idle records read"
    assert sum(1 for r in got if r.value.startswith(b"busy-")) == BUSY_RECORDS
