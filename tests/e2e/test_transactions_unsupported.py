"""Issue 11, defect 8: until Oxbow has transactions, a transactional producer must stop at
once with a message naming transactions, not retry: FindCoordinator for a transactional id
answered the retriable COORDINATOR_NOT_AVAILABLE, so init_transactions waited 60 s (Java,
kafka-python), until the caller's timeout (librdkafka) or forever (franz-go, whose
program is franz_txn/; needs `go`, modules come from the Go proxy). The broker now answers the fatal
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (with an error_message where the API has one).

Oxbow-only: a real Kafka serves transactions."""

from __future__ import annotations

import time

import pytest

from helpers import create_topic, run, unique

FAIL_WITHIN_S = 10


@pytest.fixture(scope="module")
def oxbow(module_broker_factory):
    b = module_broker_factory(name="txn")
    if b.kind != "oxbow":
        pytest.skip("a real Kafka serves transactions")
    return b


def test_confluent_kafka_init_transactions_fails_fatally_at_once(oxbow):
    from confluent_kafka import KafkaException, Producer

    p = Producer({"bootstrap.servers": oxbow.bootstrap, "transactional.id": unique("txn-ck")})
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        p.init_transactions(60)
    elapsed = time.monotonic() - started
    err = raised.value.args[0]
    assert elapsed < FAIL_WITHIN_S, f"init_transactions took {elapsed:.1f} s"
    print(f"confluent-kafka: {elapsed:.2f} s: {err.str()}")
    assert err.fatal(), f"not fatal: {err}"
    assert "transactions are not supported by this broker" in err.str(), err.str()


def test_kafka_python_init_transactions_fails_at_once(oxbow):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    p = KafkaProducer(bootstrap_servers=oxbow.bootstrap, transactional_id=unique("txn-kp"))
    started = time.monotonic()
    try:
        with pytest.raises(KafkaError) as raised:
            p.init_transactions()
        elapsed = time.monotonic() - started
    finally:
        p.close(timeout=5)
    assert elapsed < FAIL_WITHIN_S, f"init_transactions took {elapsed:.1f} s"
    print(f"kafka-python: {elapsed:.2f} s: {raised.value!r}")
    assert "TransactionalIdAuthorization" in repr(raised.value), repr(raised.value)


def test_java_transactional_producer_fails_at_once(oxbow, tmp_path):
    from brokers import KAFKA_LIBS

    topic = create_topic(oxbow.bootstrap, unique("txn-java"), 1)
    started = time.monotonic()
    proc = run(
        [
            "java",
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{KAFKA_LIBS}/*",
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic",
            topic,
            "--num-records",
            "10",
            "--record-size",
            "10",
            "--throughput",
            "-1",
            "--transactional-id",
            unique("txn-java"),
            "--producer-props",
            f"bootstrap.servers={oxbow.bootstrap}",
        ],
        timeout=120,
        check=False,
    )
    elapsed = time.monotonic() - started
    out = proc.stdout + proc.stderr
    print(f"java: {elapsed:.2f} s: " + next((l for l in out.splitlines() if "Exception" in l), out[-300:]))
    assert proc.returncode != 0, out
    # The JVM takes a few seconds to start; the old answer made this take 60 s.
    assert elapsed < 3 * FAIL_WITHIN_S, f"took {elapsed:.1f} s\n{out}"
    assert "TransactionalIdAuthorizationException" in out, out


def test_franz_go_transactional_producer_fails_at_once(oxbow, tmp_path):
    """franz-go retried COORDINATOR_NOT_AVAILABLE forever."""
    import shutil
    from pathlib import Path

    if shutil.which("go") is None:
        pytest.skip("go not installed")
    src = Path(__file__).parent / "franz_txn"
    binary = tmp_path / "franztxn"
    run(["go", "build", "-C", str(src), "-o", str(binary), "."], timeout=300)
    topic = create_topic(oxbow.bootstrap, unique("txn-franz"), 1)
    proc = run([str(binary), oxbow.bootstrap, unique("txn-franz"), topic], timeout=90, check=False)
    print(f"franz-go: {proc.stdout.strip()}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    elapsed = float(proc.stdout.split("elapsed=")[1].split()[0])
    assert elapsed < FAIL_WITHIN_S, proc.stdout
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in proc.stdout, proc.stdout
