"""Issue 15's parts together, as an operator sets them up on day one: a private PLAINTEXT
listener for administration and a SASL_SSL listener for clients, SCRAM users, ACLs that
name those users, and a quota on one of them.

The admin listener's anonymous principal is a super user (`--super-users User:ANONYMOUS`),
the pattern of a private inter-broker/admin listener; every client on the SASL_SSL
listener is `User:{name}`."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from brokers import free_ports
from helpers import consume_partitions, create_topic, produce_all, producer, topic_names, unique
from test_quotas import configs
from test_sasl import oxbow_users
from test_tls import Certs

pytestmark = pytest.mark.oxbow_only

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secured(module_broker_factory, certs):
    (client_port,) = free_ports(1)
    b = module_broker_factory(start=False)
    b.client = f"127.0.0.1:{client_port}"
    b.options["extra_args"] = [
        "--listeners", f"ADMIN://{b.bootstrap},CLIENT://{b.client}",
        "--listener-security-protocol-map", "ADMIN:PLAINTEXT,CLIENT:SASL_SSL",
        "--inter-broker-listener-name", "ADMIN",
        "--ssl-certificate-file", str(certs.server),
        "--ssl-key-file", str(certs.server_key),
        "--sasl-enabled-mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
        "--authorizer", "acl",
        "--super-users", "User:ANONYMOUS",
    ]
    b.start()
    for user, password in PASSWORDS.items():
        oxbow_users(b.bootstrap, "create", user, "--mechanism", "SCRAM-SHA-512", input=f"{password}\n")
    return b


def client_conf(b, certs: Certs, user: str, password: str | None = None, mechanism: str = "SCRAM-SHA-512") -> dict:
    return {
        "bootstrap.servers": b.client,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs.ca),
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password if password is not None else PASSWORDS[user],
    }


def acls(java, b, *args: str):
    return java(
        "org.apache.kafka.tools.AclCommand", "--bootstrap-server", b.bootstrap, *args
    )


def delivery_errors(conf: dict, topic: str, n: int = 3, timeout: float = 20) -> list:
    """Produces `n` records; returns each delivery's error (None when delivered)."""
    errors: list = []
    p = Producer({**conf, "log_level": 0, "message.timeout.ms": int(timeout * 1000)})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), on_delivery=lambda err, msg: errors.append(err))
    p.flush(timeout + 5)
    return errors


def test_scram_and_plain_over_sasl_ssl_and_a_wrong_password_is_refused(secured, certs):
    topic = unique("sasl-ssl")
    create_topic(secured.bootstrap, topic)
    # alice may use the topic (ACLs below are per test: grant here).
    for mechanism in ("SCRAM-SHA-512", "PLAIN"):
        conf = client_conf(secured, certs, "alice", mechanism=mechanism)
        errors = delivery_errors(conf, topic)
        # No ACL names the topic yet and allow-everyone is off: refused, but authenticated.
        assert errors and all(e is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors), errors
    bad = client_conf(secured, certs, "alice", password="wrong")
    errors = delivery_errors(bad, topic, n=1, timeout=8)
    assert errors and errors[0] is not None, errors
    # The broker serves on: the admin listener answers.
    assert topic in topic_names(secured.bootstrap)


def test_acls_name_sasl_users_deny_beats_allow_and_metadata_hides(secured, certs, java, tmp_path):
    prefix = unique("orders")
    topic = f"{prefix}-eu"
    create_topic(secured.bootstrap, topic)
    # alice: produce and consume everything under the prefix; bob: nothing, and an
    # explicit deny for him wins even over a wildcard allow.
    acls(java, secured, "--add", "--allow-principal", "User:alice", "--producer", "--consumer",
         "--group", "alice-", "--topic", prefix, "--resource-pattern-type", "prefixed")
    acls(java, secured, "--add", "--allow-principal", "User:*", "--operation", "Describe",
         "--topic", topic)
    acls(java, secured, "--add", "--deny-principal", "User:bob", "--operation", "All", "--topic", topic)

    alice = client_conf(secured, certs, "alice")
    got = produce_all(producer(secured.client, **alice), topic, [{"value": f"a{i}".encode()} for i in range(5)])
    assert [r.offset for r in got] == list(range(5))
    records = consume_partitions(secured.client, topic, [0], **alice, **{"group.id": "alice-reader"})
    assert [r.value for r in records[0]] == [f"a{i}".encode() for i in range(5)]

    bob = client_conf(secured, certs, "bob")
    errors = delivery_errors(bob, topic)
    assert errors and all(e is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors), errors
    # bob may not even see it: Describe for User:* is beaten by his deny.
    md = AdminClient({**bob, "log_level": 0}).list_topics(timeout=10)
    assert topic not in md.topics or md.topics[topic].error is not None, md.topics.get(topic)
    # alice sees it.
    md = AdminClient(alice).list_topics(timeout=10)
    assert topic in md.topics and md.topics[topic].error is None

    # alice may not read the users' credentials (DESCRIBE on the cluster), with Kafka's own
    # kafka-configs.sh over SASL_SSL. (confluent-kafka 2.16 aborts the process on this
    # error response, so its admin client is not used here.)
    props = tmp_path / "alice.properties"
    props.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{PASSWORDS["alice"]}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={certs.ca}\n"
    )
    r = java("kafka.admin.ConfigCommand", "--bootstrap-server", secured.client, "--command-config", str(props),
             "--describe", "--entity-type", "users", "--entity-name", "bob", check=False)
    assert r.returncode != 0 and "ClusterAuthorization" in r.stdout + r.stderr, (r.stdout, r.stderr)


def test_a_quota_on_one_user_holds_only_that_user(secured, certs, java):
    prefix = unique("quota-user")
    topic = f"{prefix}-t"
    create_topic(secured.bootstrap, topic)
    for user in PASSWORDS:
        acls(java, secured, "--add", "--allow-principal", f"User:{user}", "--producer", "--topic", topic)
    configs(java, secured, "--alter", "--add-config", "producer_byte_rate=65536", "--entity-type", "users", "--entity-name", "alice")
    throttled: dict[str, list] = {}
    for user in PASSWORDS:
        events: list = []
        p = Producer({**client_conf(secured, certs, user), "linger.ms": 5, "log_level": 0,
                      "throttle_cb": lambda ev, events=events: events.append(ev.throttle_time)})
        value = b"u" * 4096
        start = time.monotonic()
        while time.monotonic() - start < 6:
            try:
                p.produce(topic, value)
            except BufferError:
                p.poll(0.01)
            p.poll(0)
        p.purge()
        p.flush(15)
        throttled[user] = events
    assert any(t > 0 for t in throttled["alice"]), "alice, over her quota, was never throttled"
    assert not any(t > 0 for t in throttled["bob"]), f"bob has no quota but was throttled: {throttled['bob'][:5]}"
