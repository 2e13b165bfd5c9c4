"""Kafka listeners (`--listeners`, `--advertised-listeners`,
`--listener-security-protocol-map`): each listener tells its clients the addresses on the
same listener, as Kafka does; bad listener flags stop the broker with a message naming the
flag."""

import subprocess

import pytest
from confluent_kafka.admin import AdminClient

from brokers import free_ports, oxbow_bin

pytestmark = pytest.mark.oxbow_only


def brokers_seen(bootstrap: str) -> dict[int, str]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}


def test_each_listener_advertises_its_own_address(broker_factory):
    internal, client = free_ports(2)
    b = broker_factory(
        extra_args=[
            "--listeners",
            f"INTERNAL://127.0.0.1:{internal},CLIENT://127.0.0.1:{client}",
            "--listener-security-protocol-map",
            "INTERNAL:PLAINTEXT,CLIENT:PLAINTEXT",
            # localhost resolves to this machine, so a client told it can still connect.
            "--advertised-listeners",
            f"CLIENT://localhost:{client}",
        ]
    )
    assert brokers_seen(f"127.0.0.1:{internal}") == {1: f"127.0.0.1:{internal}"}
    assert brokers_seen(f"127.0.0.1:{client}") == {1: f"localhost:{client}"}
    # Both listeners serve data.
    from helpers import create_topic, produce_all, producer, unique

    topic = unique("listeners")
    create_topic(f"127.0.0.1:{client}", topic)
    got = produce_all(producer(f"127.0.0.1:{internal}"), topic, [{"value": b"v"}])
    assert got[0].offset == 0
    assert b.alive


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--listeners", "CLIENT://127.0.0.1:0"], "--listener-security-protocol-map"),
        (["--listeners", "PLAINTEXT://127.0.0.1"], "--listeners"),
        (["--listeners", "PLAINTEXT://127.0.0.1:0", "--advertised-listeners", "SSL://h:1"], "--advertised-listeners"),
        (["--listeners", "PLAINTEXT://127.0.0.1:0", "--inter-broker-listener-name", "NOPE"], "--inter-broker-listener-name"),
    ],
)
def test_bad_listener_flags_name_the_flag(tmp_path, args, flag):
    http, internal = free_ports(2)
    out = subprocess.run(
        [str(oxbow_bin()), "serve", "--data-dir", str(tmp_path), "--http-addr", f"127.0.0.1:{http}",
         "--internal-addr", f"127.0.0.1:{internal}", *args],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode != 0
    assert flag in out.stderr, out.stderr
