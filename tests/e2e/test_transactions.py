"""Issue 16: transactions with real clients on one broker — commit and abort seen through
read_committed and read_uncommitted consumers, the last stable offset, a zombie fenced by
a restarted producer, an open transaction aborted at its timeout, consumer offsets
committed in a transaction (read-process-write), and Kafka's own tools (ProducerPerformance
with a transactional id, kafka-transactions.sh list/describe). Each test passes against
Apache Kafka too (OXBOW_E2E_TARGET=kafka)."""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

import kafka_wire
from helpers import create_topic, unique, wait_until

TXN_TIMEOUT_MS = 4000


@pytest.fixture(scope="module")
def txn_broker(module_broker_factory):
    # Timed-out transactions are looked for every second (Kafka's default is 10 s).
    return module_broker_factory(
        name="txn",
        extra_args=["--transaction-abort-check-interval", "1s"],
        kafka_props={"transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000},
    )


def txn_producer(bootstrap: str, txn_id: str, **conf) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **conf})
    p.init_transactions(30)
    return p


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int | None = None, timeout: float = 30):
    """Every record's (partition, offset, value) readable under `isolation`, reading until
    `expect` records arrived (or, without `expect`, until the end is reached)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("g"),
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, eof = [], set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                    if expect is None and len(eof) == partitions:
                        break
                    continue
                raise KafkaException(m.error())
            eof.discard(m.partition())
            out.append((m.partition(), m.offset(), m.value().decode()))
            if expect is not None and len(out) >= expect:
                break
    finally:
        c.close()
    return out


def test_committed_records_are_read_and_aborted_ones_are_not(txn_broker):
    topic = create_topic(txn_broker.bootstrap, unique("txn-basic"), 2)
    p = txn_producer(txn_broker.bootstrap, unique("tid"))
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=f"c1-{i}", partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=f"a-{i}", partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, value=f"c2-{i}", partition=i % 2)
    p.commit_transaction(30)

    committed = read_all(txn_broker.bootstrap, topic, 2, "read_committed")
    values = [v for _, _, v in committed]
    assert sorted(values) == sorted([f"c1-{i}" for i in range(10)] + [f"c2-{i}" for i in range(6)]), values
    for part in (0, 1):
        in_order = [v for pp, _, v in committed if pp == part]
        assert in_order == sorted(in_order, key=lambda v: (v.split("-")[0], int(v.split("-")[1]))), in_order
    everything = read_all(txn_broker.bootstrap, topic, 2, "read_uncommitted")
    assert len(everything) == 26, everything
    assert {v for _, _, v in everything} >= {f"a-{i}" for i in range(10)}
    # Markers take offsets: three transactions, one marker per partition each.
    c = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": unique("g")})
    try:
        highs = [c.get_watermark_offsets(TopicPartition(topic, part), timeout=10)[1] for part in (0, 1)]
    finally:
        c.close()
    assert sum(highs) == 26 + 6, highs


def test_read_committed_stops_at_an_open_transaction(txn_broker):
    topic = create_topic(txn_broker.bootstrap, unique("txn-lso"), 1)
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    plain.produce(topic, value="before")
    plain.flush(10)
    p = txn_producer(txn_broker.bootstrap, unique("tid"))
    p.begin_transaction()
    p.produce(topic, value="open")
    p.flush(10)
    # A non-transactional record after the open transaction's first one.
    plain.produce(topic, value="after")
    plain.flush(10)

    def high(isolation):
        c = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": unique("g"), "isolation.level": isolation})
        try:
            return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
        finally:
            c.close()

    assert high("read_uncommitted") == 3
    assert high("read_committed") == 1, "the last stable offset is the open transaction's first offset"
    seen = read_all(txn_broker.bootstrap, topic, 1, "read_committed")
    assert [v for _, _, v in seen] == ["before"], seen
    p.commit_transaction(30)
    wait_until(lambda: high("read_committed") == 4, timeout=10, what="the LSO to pass the commit marker")
    seen = read_all(txn_broker.bootstrap, topic, 1, "read_committed")
    assert [v for _, _, v in seen] == ["before", "open", "after"], seen


def test_a_restarted_producer_fences_the_zombie_and_aborts_its_transaction(txn_broker):
    topic = create_topic(txn_broker.bootstrap, unique("txn-zombie"), 1)
    tid = unique("tid")
    zombie = txn_producer(txn_broker.bootstrap, tid)
    zombie.begin_transaction()
    zombie.produce(topic, value="zombie")
    zombie.flush(10)
    fresh = txn_producer(txn_broker.bootstrap, tid)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    err = raised.value.args[0]
    assert err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH), err
    fresh.begin_transaction()
    fresh.produce(topic, value="fresh")
    fresh.commit_transaction(30)
    seen = read_all(txn_broker.bootstrap, topic, 1, "read_committed")
    assert [v for _, _, v in seen] == ["fresh"], seen


def test_an_open_transaction_is_aborted_at_its_timeout_and_the_lso_moves_on(txn_broker):
    topic = create_topic(txn_broker.bootstrap, unique("txn-timeout"), 1)
    stuck = txn_producer(txn_broker.bootstrap, unique("tid"), **{"transaction.timeout.ms": TXN_TIMEOUT_MS})
    stuck.begin_transaction()
    stuck.produce(topic, value="stuck")
    stuck.flush(10)
    started = time.monotonic()
    later = txn_producer(txn_broker.bootstrap, unique("tid"))
    later.begin_transaction()
    later.produce(topic, value="later")
    later.commit_transaction(30)
    # The stuck producer never ends its transaction: the coordinator aborts it.
    seen = read_all(txn_broker.bootstrap, topic, 1, "read_committed", expect=1, timeout=30)
    took = time.monotonic() - started
    assert [v for _, _, v in seen] == ["later"], seen
    print(f"read_committed reached the later commit {took:.1f} s after the stuck transaction began")
    assert took >= TXN_TIMEOUT_MS / 1000 - 1, "nothing may pass the open transaction before its timeout"


def test_offsets_committed_in_a_transaction_become_visible_only_with_it(txn_broker):
    src = create_topic(txn_broker.bootstrap, unique("txn-in"), 1)
    dst = create_topic(txn_broker.bootstrap, unique("txn-out"), 1)
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    for i in range(20):
        plain.produce(src, value=str(i))
    plain.flush(10)
    group = unique("rpw")
    consumer = Consumer(
        {
            "bootstrap.servers": txn_broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([src])
    p = txn_producer(txn_broker.bootstrap, unique("tid"))

    def committed():
        c = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group})
        try:
            return c.committed([TopicPartition(src, 0)], timeout=10)[0].offset
        finally:
            c.close()

    def process(n, commit):
        got = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(m)
        assert len(got) == n
        p.begin_transaction()
        for m in got:
            p.produce(dst, value=f"out-{m.value().decode()}")
        p.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
        return got

    process(10, commit=True)
    assert committed() == 10
    process(5, commit=False)
    assert committed() == 10, "an aborted transaction's offsets are dropped"
    consumer.close()
    out = read_all(txn_broker.bootstrap, dst, 1, "read_committed")
    assert [v for _, _, v in out] == [f"out-{i}" for i in range(10)], out


def test_kafka_python_transactions(txn_broker):
    from kafka import KafkaProducer

    topic = create_topic(txn_broker.bootstrap, unique("txn-kp"), 1)
    p = KafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id=unique("tid-kp"))
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"kp-commit").get(timeout=30)
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, b"kp-abort").get(timeout=30)
        p.abort_transaction()
    finally:
        p.close(timeout=10)
    seen = read_all(txn_broker.bootstrap, topic, 1, "read_committed")
    assert [v for _, _, v in seen] == ["kp-commit"], seen


def test_java_transactional_producer_and_transaction_tools(txn_broker, java):
    topic = create_topic(txn_broker.bootstrap, unique("txn-java"), 3)
    tid = unique("tid-java")
    proc = java(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic", topic,
        "--num-records", "3000",
        "--record-size", "100",
        "--throughput", "-1",
        "--transactional-id", tid,
        "--transaction-duration-ms", "200",
        "--producer-props", f"bootstrap.servers={txn_broker.bootstrap}",
        timeout=120,
    )  # fmt: skip
    assert "3000 records sent" in proc.stdout, proc.stdout + proc.stderr
    seen = read_all(txn_broker.bootstrap, topic, 3, "read_committed", expect=3000, timeout=60)
    assert len(seen) == 3000
    listed = java("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", txn_broker.bootstrap, "list", timeout=60)
    assert tid in listed.stdout, listed.stdout
    described = java(
        "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", txn_broker.bootstrap,
        "describe", "--transactional-id", tid, timeout=60,
    )  # fmt: skip
    assert "CompleteCommit" in described.stdout or "Empty" in described.stdout, described.stdout


def test_describe_shows_an_open_transaction_and_its_partitions(txn_broker, java):
    topic = create_topic(txn_broker.bootstrap, unique("txn-desc"), 2)
    tid = unique("tid-desc")
    p = txn_producer(txn_broker.bootstrap, tid)
    p.begin_transaction()
    p.produce(topic, value="x", partition=1)
    p.flush(10)
    try:
        described = java(
            "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", txn_broker.bootstrap,
            "describe", "--transactional-id", tid, timeout=60,
        )  # fmt: skip
        assert "Ongoing" in described.stdout, described.stdout
        assert f"{topic}-1" in described.stdout, described.stdout
        listed = java(
            "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", txn_broker.bootstrap,
            "list", "--transactional-id-pattern", "tid-desc.*", timeout=60,
        )  # fmt: skip
        line = next((l for l in listed.stdout.splitlines() if tid in l), "")
        assert "Ongoing" in line, listed.stdout
        assert all(l.split()[0].startswith("tid-desc") for l in listed.stdout.splitlines()[1:] if l.strip()), listed.stdout
    finally:
        p.abort_transaction(30)


def test_franz_go_transactions(txn_broker, tmp_path):
    import shutil
    from pathlib import Path

    from helpers import run

    if shutil.which("go") is None:
        pytest.skip("go not installed")
    src = Path(__file__).parent / "franz_txn"
    binary = tmp_path / "franztxn"
    run(["go", "build", "-C", str(src), "-o", str(binary), "."], timeout=300)
    topic = create_topic(txn_broker.bootstrap, unique("txn-franz"), 1)
    proc = run([str(binary), txn_broker.bootstrap, unique("tid-franz"), topic], timeout=90, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stdout + proc.stderr
    seen = read_all(txn_broker.bootstrap, topic, 1, "read_committed")
    assert [v for _, _, v in seen] == [f"franz-commit-{i}" for i in range(5)], seen


def test_an_operator_aborts_an_open_transaction_with_kafka_transactions_abort(txn_broker, java):
    """`kafka-transactions.sh abort --start-offset`: DescribeProducers finds the producer
    whose transaction starts there, WriteTxnMarkers to the partition's leader aborts it, and
    read_committed readers move past it (what an operator does about a hanging
    transaction)."""
    topic = create_topic(txn_broker.bootstrap, unique("txn-abort"), 1)
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    plain.produce(topic, value="before")
    plain.flush(10)
    p = txn_producer(txn_broker.bootstrap, unique("tid-abort"))
    p.begin_transaction()
    p.produce(topic, value="hanging")
    p.flush(10)
    plain.produce(topic, value="after")
    plain.flush(10)
    described = java(
        "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", txn_broker.bootstrap,
        "describe-producers", "--topic", topic, "--partition", "0", timeout=60,
    )  # fmt: skip
    assert any(l.split()[-1] == "1" for l in described.stdout.splitlines()[1:] if l.strip()), described.stdout
    java(
        "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", txn_broker.bootstrap,
        "abort", "--topic", topic, "--partition", "0", "--start-offset", "1", timeout=60,
    )  # fmt: skip
    seen = read_all(txn_broker.bootstrap, topic, 1, "read_committed")
    assert [v for _, _, v in seen] == ["before", "after"], seen


def test_a_timeout_above_the_brokers_maximum_is_refused(txn_broker):
    # transaction.max.timeout.ms is 15 minutes by default, in Kafka and Oxbow alike.
    p = Producer({"bootstrap.servers": txn_broker.bootstrap, "transactional.id": unique("tid"), "transaction.timeout.ms": 1_000_000})
    with pytest.raises(KafkaException) as raised:
        p.init_transactions(30)
    assert raised.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT, raised.value


def wire_init_transactions(conn, txn_id: str, group: str | None = None) -> tuple[int, int]:
    """FindCoordinator v1 for the transactional id (Kafka creates its transaction log on the
    first) and `group`, then InitProducerId v0, each retried while it answers a retriable
    error (the log loading): the producer id and epoch."""
    deadline = time.monotonic() + 30

    def retried(call, what: str):
        while True:
            r = kafka_wire.Reader(call())
            r.int32()
            err = r.int16()
            if err == 0 or time.monotonic() > deadline:
                assert err == 0, f"{what} error {err}"
                return r
            time.sleep(0.5)

    for key, key_type in [(txn_id, 1)] + ([(group, 0)] if group else []):
        retried(lambda: conn.call(10, 1, kafka_wire.string(key) + bytes([key_type])), f"FindCoordinator({key})")
    r = retried(lambda: conn.call(22, 0, kafka_wire.string(txn_id) + struct.pack(">i", 60_000)), "InitProducerId")
    return r.int64(), r.int16()


def test_a_transactional_batch_the_coordinator_never_added_is_refused(txn_broker):
    """KIP-890 part 1: a transactional producer that writes to a partition it never added
    to its transaction (AddPartitionsToTxn) is refused with INVALID_TXN_STATE, so no
    transaction that no marker ends can hold read_committed readers; once added, the same
    batch is taken and commits. Raw wire requests: no client lets a test skip the add."""
    topic = unique("verified")
    create_topic(txn_broker.bootstrap, topic, 1)
    txn_id = unique("tx")
    with kafka_wire.KafkaConn(txn_broker.bootstrap) as conn:
        pid, epoch = wire_init_transactions(conn, txn_id)

        def produce(value: bytes, seq: int) -> tuple[int, int]:
            batch = kafka_wire.txn_record_batch([value], pid, epoch, seq)
            body = kafka_wire.produce_body_v3_to_v8(topic, 0, batch, transactional_id=txn_id)
            return kafka_wire.parse_produce_response_v3_to_v8(conn.call(0, 3, body))

        err, _ = produce(b"never-added", 0)
        assert err == 48, f"a batch outside the transaction: error {err}, want INVALID_TXN_STATE (48)"
        # AddPartitionsToTxn v0, then the same batch is taken.
        body = (
            kafka_wire.string(txn_id)
            + struct.pack(">qhi", pid, epoch, 1)
            + kafka_wire.string(topic)
            + struct.pack(">ii", 1, 0)
        )
        r = kafka_wire.Reader(conn.call(24, 0, body))
        r.int32()
        assert r.int32() == 1 and r.string() == topic and r.int32() == 1
        r.int32()
        assert r.int16() == 0, "AddPartitionsToTxn"
        assert produce(b"verified", 0) == (0, 0)
        assert produce(b"after", 1) == (0, 1)
        # EndTxn v0: commit; the coordinator may answer CONCURRENT_TRANSACTIONS briefly.
        r = kafka_wire.Reader(conn.call(26, 0, kafka_wire.string(txn_id) + struct.pack(">qhb", pid, epoch, 1)))
        r.int32()
        assert r.int16() == 0, "EndTxn"
    got = read_all(txn_broker.bootstrap, topic, 1, "read_committed", expect=2)
    assert [v for _, _, v in got] == ["verified", "after"]


def test_offsets_of_a_group_the_transaction_never_added_are_refused(txn_broker):
    """KIP-890 part 1 for offsets: a TxnOffsetCommit for a group the transaction never added
    (AddOffsetsToTxn) is refused, so no pending offsets wait for a marker that never comes;
    once added, the same commit is taken. Raw wire requests."""
    topic = unique("offsets-verified")
    create_topic(txn_broker.bootstrap, topic, 1)
    txn_id, group = unique("tx"), unique("g")
    with kafka_wire.KafkaConn(txn_broker.bootstrap) as conn:
        pid, epoch = wire_init_transactions(conn, txn_id, group)

        def commit_offset(offset: int) -> int:
            body = (
                kafka_wire.string(txn_id)
                + kafka_wire.string(group)
                + struct.pack(">qhi", pid, epoch, 1)
                + kafka_wire.string(topic)
                + struct.pack(">iiq", 1, 0, offset)
                + kafka_wire.string("")
            )
            r = kafka_wire.Reader(conn.call(28, 0, body))
            r.int32()
            assert r.int32() == 1 and r.string() == topic and r.int32() == 1
            r.int32()
            return r.int16()

        # Nothing begun for this id yet (no partition, no group): refused.
        refused = commit_offset(5)
        assert refused != 0, "a TxnOffsetCommit outside the transaction was taken"
        # AddOffsetsToTxn v0, then the same commit is taken and commits with the transaction.
        r = kafka_wire.Reader(conn.call(25, 0, kafka_wire.string(txn_id) + struct.pack(">qh", pid, epoch) + kafka_wire.string(group)))
        r.int32()
        assert r.int16() == 0, "AddOffsetsToTxn"
        assert commit_offset(5) == 0
        r = kafka_wire.Reader(conn.call(26, 0, kafka_wire.string(txn_id) + struct.pack(">qhb", pid, epoch, 1)))
        r.int32()
        assert r.int16() == 0, "EndTxn"
    c = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group, "isolation.level": "read_committed"})
    try:
        wait_until(
            lambda: c.committed([TopicPartition(topic, 0)], timeout=5)[0].offset == 5,
            timeout=30,
            what="the transaction's offset committed",
        )
    finally:
        c.close()
    # Kafka answers INVALID_TXN_STATE (48) too; see the assertion message if it differs.
    assert refused == 48, f"refused with {refused}"
