"""SASL on a SASL_PLAINTEXT listener: SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN with real
clients (librdkafka via confluent-kafka, kafka-python, the Java producer, kcat), users made
with `oxbow users` and with Kafka's own ConfigCommand (AlterUserScramCredentials), failed
logins, requests before authentication, and KIP-368 re-authentication.

`OXBOW_E2E_TARGET=kafka` runs the same tests against Apache Kafka with a SASL_PLAINTEXT
listener configured through `kafka_props` (SCRAM users created at runtime, as here; PLAIN
users in the listener's JAAS config, since Kafka's PLAIN does not read SCRAM credentials).
What only Oxbow does (refusing SaslHandshake v0, its log lines) is skipped there.
"""

from __future__ import annotations

import shutil
import struct
import time

import pytest
from confluent_kafka import KafkaError, Producer

from brokers import KAFKA_LIBS, TARGET, free_ports, oxbow_bin
from helpers import consume_partitions, create_topic, produce_all, run, unique, wait_until
import kafka_wire as kw

API_SASL_HANDSHAKE = 17
API_SASL_AUTHENTICATE = 36
ERR_UNSUPPORTED_SASL_MECHANISM = 33
ERR_ILLEGAL_SASL_STATE = 34
ERR_SASL_AUTHENTICATION_FAILED = 58

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}


class SaslBroker:
    def __init__(self, broker, plain_port: int, sasl_port: int):
        self.broker = broker
        self.plain = f"127.0.0.1:{plain_port}"
        self.sasl = f"127.0.0.1:{sasl_port}"


def start_sasl_broker(factory, *extra: str, reauth_ms: int = 0) -> SaslBroker:
    plain, sasl = free_ports(2)
    if TARGET == "kafka":
        b = factory(start=False)
        jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        users = " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
        b.options["kafka_props"] = {
            "listeners": f"PLAINTEXT://{b.bootstrap},SASL_PLAINTEXT://127.0.0.1:{sasl},CONTROLLER://127.0.0.1:{b.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{b.bootstrap},SASL_PLAINTEXT://127.0.0.1:{sasl}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": jaas,
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": jaas,
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
            "connections.max.reauth.ms": reauth_ms,
        }
        b.start(timeout=90)
        return SaslBroker(b, b.kafka_port, sasl)
    if reauth_ms:
        extra = (*extra, "--connections-max-reauth", f"{reauth_ms}ms")
    b = factory(
        auto_create_topics=True,
        extra_args=[
            "--listeners", f"PLAINTEXT://127.0.0.1:{plain},SASL://127.0.0.1:{sasl}",
            "--listener-security-protocol-map", "PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT",
            "--inter-broker-listener-name", "PLAINTEXT",
            "--sasl-enabled-mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
            *extra,
        ],
    )
    return SaslBroker(b, plain, sasl)


def oxbow_users(bootstrap: str, *args: str, input: str | None = None, check: bool = True):
    return run([str(oxbow_bin()), "users", "-b", bootstrap, *args], input=input, timeout=60, check=check)


def java(*args: str, timeout: float = 120, check: bool = True):
    if shutil.which("java") is None:
        pytest.fail("java not found (scripts/test.sh installs it)")
    cmd = ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{KAFKA_LIBS}/*", *args]
    return run(cmd, timeout=timeout, check=check)


@pytest.fixture(scope="module")
def sasl(module_broker_factory):
    sb = start_sasl_broker(module_broker_factory)
    # alice: both SCRAM mechanisms, with `oxbow users` (password on stdin).
    oxbow_users(sb.plain, "create", "alice", "--mechanism", "SCRAM-SHA-256", "--iterations", "4096", input="alice-secret\n")
    oxbow_users(sb.plain, "create", "alice", "--mechanism", "SCRAM-SHA-512", input="alice-secret\n")
    # bob: SCRAM-SHA-512 with Kafka's own kafka-configs.sh (ConfigCommand).
    java(
        "kafka.admin.ConfigCommand", "--bootstrap-server", sb.plain, "--alter",
        "--add-config", "SCRAM-SHA-512=[iterations=8192,password=bob-secret]",
        "--entity-type", "users", "--entity-name", "bob",
    )
    return sb


def sasl_conf(sb: SaslBroker, mechanism: str, user: str, password: str) -> dict:
    return {
        "bootstrap.servers": sb.sasl,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def test_users_made_by_both_tools_are_listed_with_their_mechanisms(sasl):
    out = oxbow_users(sasl.plain, "list").stdout.splitlines()
    users = {line.split("\t")[0]: set(line.split("\t")[1].split(",")) for line in out}
    # (Kafka lists a user's mechanisms in no fixed order.)
    assert users["alice"] == {"SCRAM-SHA-256=iterations=4096", "SCRAM-SHA-512=iterations=8192"}, out
    assert users["bob"] == {"SCRAM-SHA-512=iterations=8192"}, out
    # The password is never printed, nor anything derived from it.
    assert not any("secret" in line for line in out)
    missing = oxbow_users(sasl.plain, "list", "nobody", check=False)
    assert missing.returncode != 0 and "RESOURCE_NOT_FOUND" in missing.stderr, missing.stderr


def test_users_delete_one_mechanism_then_all(sasl):
    oxbow_users(sasl.plain, "create", "carol", "--mechanism", "SCRAM-SHA-256", input="c1\n")
    oxbow_users(sasl.plain, "create", "carol", "--mechanism", "SCRAM-SHA-512", input="c2\n")
    oxbow_users(sasl.plain, "delete", "carol", "--mechanism", "SCRAM-SHA-256")
    assert oxbow_users(sasl.plain, "list", "carol").stdout.strip() == "carol\tSCRAM-SHA-512=iterations=8192"
    again = oxbow_users(sasl.plain, "delete", "carol", "--mechanism", "SCRAM-SHA-256", check=False)
    assert again.returncode != 0 and "RESOURCE_NOT_FOUND" in again.stderr, again.stderr
    oxbow_users(sasl.plain, "delete", "carol")
    assert oxbow_users(sasl.plain, "list", "carol", check=False).returncode != 0
    bad = oxbow_users(sasl.plain, "create", "dave", "--iterations", "100", input="x\n", check=False)
    assert bad.returncode != 0 and "--iterations" in bad.stderr


@pytest.mark.parametrize(
    "mechanism, user",
    [("SCRAM-SHA-256", "alice"), ("SCRAM-SHA-512", "alice"), ("SCRAM-SHA-512", "bob"), ("PLAIN", "alice"), ("PLAIN", "bob")],
)
def test_confluent_kafka_produces_and_consumes_over_sasl(sasl, mechanism, user):
    topic = unique("sasl")
    create_topic(sasl.plain, topic)
    conf = sasl_conf(sasl, mechanism, user, PASSWORDS[user])
    p = Producer({**conf, "acks": "all", "linger.ms": 5, "log_level": 3})
    produce_all(p, topic, [{"value": f"{mechanism}-{i}".encode()} for i in range(20)])
    got = consume_partitions(sasl.sasl, topic, [0], **{k: v for k, v in conf.items() if k != "bootstrap.servers"})
    assert [r.value for r in got[0]] == [f"{mechanism}-{i}".encode() for i in range(20)]


def auth_errors(conf: dict, seconds: float = 10) -> list[KafkaError]:
    """Errors a producer reports while trying to connect with `conf`."""
    errors: list[KafkaError] = []
    p = Producer({**conf, "error_cb": errors.append, "log_level": 0, "reconnect.backoff.ms": 1000})
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        p.poll(0.2)
    return errors


@pytest.mark.parametrize(
    "mechanism, user, password",
    [
        ("SCRAM-SHA-256", "alice", "wrong"),
        ("SCRAM-SHA-512", "mallory", "alice-secret"),
        ("PLAIN", "alice", "wrong"),
        ("SCRAM-SHA-256", "bob", "bob-secret"),  # bob has no SCRAM-SHA-256 credential
    ],
)
def test_wrong_credentials_fail_authentication_and_others_keep_working(sasl, mechanism, user, password):
    errors = auth_errors(sasl_conf(sasl, mechanism, user, password))
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, f"no authentication error, got {errors}"
    text = auth[0].str()
    if mechanism == "PLAIN":
        assert "Invalid username or password" in text, text
    else:
        assert f"invalid credentials with SASL mechanism {mechanism}" in text, text
    # The broker keeps serving everyone else.
    topic = unique("sasl-after-fail")
    create_topic(sasl.plain, topic)
    p = Producer({**sasl_conf(sasl, "SCRAM-SHA-512", "bob", "bob-secret"), "log_level": 3})
    assert produce_all(p, topic, [{"value": b"still"}])[0].offset == 0
    assert sasl.broker.alive


def test_a_disabled_mechanism_is_refused(module_broker_factory):
    sb = start_sasl_broker(module_broker_factory)
    with kw.KafkaConn(sb.sasl) as c:
        body = c.call(API_SASL_HANDSHAKE, 1, kw.string("GSSAPI"))
        r = kw.Reader(body)
        assert r.int16() == ERR_UNSUPPORTED_SASL_MECHANISM
        assert {r.string() for _ in range(r.int32())} == {"SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"}
        assert c.wait_closed(5)


def metadata_v1_all() -> bytes:
    return struct.pack(">i", -1)  # null topics: all


def test_requests_before_authentication_close_the_connection(sasl):
    # Metadata straight away: closed, never answered.
    with kw.KafkaConn(sasl.sasl) as c:
        c.send(kw.API_METADATA, 1, metadata_v1_all())
        assert c.wait_closed(5)
    # ApiVersions is served before authentication; then Produce is refused just the same.
    with kw.KafkaConn(sasl.sasl) as c:
        keys = c.api_versions()
        assert keys[API_SASL_HANDSHAKE] == (0, 1) and keys[API_SASL_AUTHENTICATE] == (0, 2)
        c.send(kw.API_METADATA, 1, metadata_v1_all())
        assert c.wait_closed(5)
    # After the handshake only SaslAuthenticate.
    with kw.KafkaConn(sasl.sasl) as c:
        r = kw.Reader(c.call(API_SASL_HANDSHAKE, 1, kw.string("PLAIN")))
        assert r.int16() == 0
        c.send(kw.API_METADATA, 1, metadata_v1_all())
        assert c.wait_closed(5)
    # SaslHandshake v0 (raw tokens follow) is advertised, as Kafka 4 does, but refused.
    if TARGET == "oxbow":  # Kafka serves v0
        with kw.KafkaConn(sasl.sasl) as c:
            r = kw.Reader(c.call(API_SASL_HANDSHAKE, 0, kw.string("PLAIN")))
            assert r.int16() == kw.ERR_UNSUPPORTED_VERSION
            assert c.wait_closed(5)
    # A frame bigger than the unauthenticated bound (512 KiB) is not buffered.
    with kw.KafkaConn(sasl.sasl) as c:
        c.send_raw(struct.pack(">i", 1 << 20))
        assert c.wait_closed(5)
    # The PLAINTEXT listener answers SaslHandshake ILLEGAL_SASL_STATE, as Kafka does.
    with kw.KafkaConn(sasl.plain) as c:
        r = kw.Reader(c.call(API_SASL_HANDSHAKE, 1, kw.string("PLAIN")))
        assert r.int16() == ERR_ILLEGAL_SASL_STATE


def plain_login(c: kw.KafkaConn, user: str, password: str, version: int = 1) -> tuple[int, str | None, int]:
    """(error code, message, session_lifetime_ms) of a PLAIN login."""
    r = kw.Reader(c.call(API_SASL_HANDSHAKE, 1, kw.string("PLAIN")))
    assert r.int16() == 0
    token = b"\0" + user.encode() + b"\0" + password.encode()
    r = kw.Reader(c.call(API_SASL_AUTHENTICATE, version, kw.bytes_field(token)))
    err, message = r.int16(), r.string()
    r.take(r.int32())
    lifetime = r.int64() if version >= 1 else 0
    return err, message, lifetime


def test_a_failed_login_is_answered_after_the_delay_then_closed(module_broker_factory, sasl):
    with kw.KafkaConn(sasl.sasl) as c:
        started = time.monotonic()
        err, message, _ = plain_login(c, "alice", "wrong")
        took = time.monotonic() - started
        assert err == ERR_SASL_AUTHENTICATION_FAILED
        assert message == "Authentication failed: Invalid username or password"
        assert took >= 0.09, f"answered after {took:.3f}s, before --connection-failed-authentication-delay"
        assert c.wait_closed(5)


def test_sessions_expire_and_clients_re_authenticate(module_broker_factory, tmp_path):
    sb = start_sasl_broker(module_broker_factory, reauth_ms=3000)
    oxbow_users(sb.plain, "create", "alice", "--mechanism", "SCRAM-SHA-256", input="alice-secret\n")
    # The lifetime is told (v1+), and a client that does not re-authenticate is cut off.
    with kw.KafkaConn(sb.sasl) as c:
        err, _, lifetime = plain_login(c, "alice", "alice-secret")
        assert (err, lifetime) == (0, 3000)
        c.call(kw.API_METADATA, 1, metadata_v1_all())
        time.sleep(3.5)
        c.send(kw.API_METADATA, 1, metadata_v1_all())
        assert c.wait_closed(5)
    # librdkafka re-authenticates on its own: a producer keeps producing on one
    # connection across several lifetimes.
    topic = unique("reauth")
    create_topic(sb.plain, topic)
    errors: list[KafkaError] = []
    p = Producer({**sasl_conf(sb, "SCRAM-SHA-256", "alice", "alice-secret"), "error_cb": errors.append, "log_level": 3, "linger.ms": 0})
    deadline = time.monotonic() + 10
    sent = 0
    while time.monotonic() < deadline:
        produce_all(p, topic, [{"value": f"r{sent}".encode()}], timeout=10)
        sent += 1
        time.sleep(0.25)
    assert not [e for e in errors if e.code() == KafkaError._AUTHENTICATION], errors
    got = consume_partitions(sb.sasl, topic, [0], **{k: v for k, v in sasl_conf(sb, "SCRAM-SHA-256", "alice", "alice-secret").items() if k != "bootstrap.servers"})
    assert [r.value for r in got[0]] == [f"r{i}".encode() for i in range(sent)]
    # The Java producer too: 30 records at 3/s, over three lifetimes.
    props = tmp_path / "reauth.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="alice-secret";\n'
    )
    java_topic = unique("reauth-java")
    create_topic(sb.plain, java_topic)
    out = java("org.apache.kafka.tools.ProducerPerformance", "--topic", java_topic, "--num-records", "30",
               "--record-size", "10", "--throughput", "3", "--producer-props", f"bootstrap.servers={sb.sasl}",
               "--producer.config", str(props)).stdout
    assert "30 records sent" in out, out
    # Only the raw connection above was cut off for not re-authenticating.
    if TARGET == "oxbow":
        assert sb.broker.log_path.read_text().count("SASL session expired") == 1


def test_kafka_python_scram(sasl):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = unique("sasl-kpy")
    create_topic(sasl.plain, topic)
    conf = dict(
        bootstrap_servers=sasl.sasl,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="bob",
        sasl_plain_password="bob-secret",
    )
    p = KafkaProducer(acks="all", **conf)
    for i in range(10):
        p.send(topic, f"k{i}".encode()).get(timeout=30)
    p.close()
    c = KafkaConsumer(consumer_timeout_ms=5000, auto_offset_reset="earliest", enable_auto_commit=False, **conf)
    c.assign([TopicPartition(topic, 0)])
    got = [m.value for m in c]
    c.close()
    assert got == [f"k{i}".encode() for i in range(10)]


def test_java_console_producer_scram(sasl, tmp_path):
    topic = unique("sasl-java")
    create_topic(sasl.plain, topic)
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="alice-secret";\n'
    )
    lines = "".join(f"j{i}\n" for i in range(25))
    run(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{KAFKA_LIBS}/*", "org.apache.kafka.tools.ConsoleProducer",
         "--bootstrap-server", sasl.sasl, "--topic", topic, "--producer.config", str(props)],
        input=lines, timeout=120,
    )
    got = consume_partitions(sasl.plain, topic, [0])
    assert [r.value for r in got[0]] == [f"j{i}".encode() for i in range(25)]


def test_kcat_plain(sasl):
    """PLAIN: the kcat here (1.7.1) bundles librdkafka 2.0.2, whose SCRAM client-final
    repeats its own nonce in front of the server's; Kafka refuses that, and so does Oxbow."""
    if shutil.which("kcat") is None:
        pytest.skip("kcat not installed")
    topic = unique("sasl-kcat")
    create_topic(sasl.plain, topic)
    auth = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN",
            "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"]
    run(["kcat", "-b", sasl.sasl, *auth, "-P", "-t", topic, "-p", "0"], input="a\nb\nc\n", timeout=60)
    out = run(["kcat", "-b", sasl.sasl, *auth, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q"], timeout=60).stdout
    assert out.split() == ["a", "b", "c"]


@pytest.mark.oxbow_only  # oxbow's own client
def test_oxbow_cli_authenticates_with_flags_or_a_command_config(sasl, tmp_path):
    topic = unique("sasl-cli")
    create_topic(sasl.plain, topic)
    pw = tmp_path / "alice.pw"
    pw.write_text("alice-secret\n")
    oxbow = str(oxbow_bin())
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"):
        out = run([oxbow, "topics", "list", "-b", sasl.sasl, "--sasl-mechanism", mechanism,
                   "--sasl-username", "alice", "--sasl-password-file", str(pw)], timeout=60).stdout
        assert topic in out.split(), out
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" password="bob-secret";\n'
    )
    run([oxbow, "produce", topic, "-b", sasl.sasl, "--command-config", str(props)], input="x\ny\n", timeout=60)
    got = consume_partitions(sasl.plain, topic, [0])
    assert [r.value for r in got[0]] == [b"x", b"y"]
    # Without credentials the SASL listener closes on Metadata; wrong ones fail by name.
    assert run([oxbow, "topics", "list", "-b", sasl.sasl, "--timeout", "3s"], timeout=60, check=False).returncode != 0
    pw.write_text("wrong\n")
    bad = run([oxbow, "topics", "list", "-b", sasl.sasl, "--sasl-mechanism", "SCRAM-SHA-256",
               "--sasl-username", "alice", "--sasl-password-file", str(pw)], timeout=60, check=False)
    assert bad.returncode != 0 and "SASL_AUTHENTICATION_FAILED" in bad.stderr, bad.stderr
    assert "wrong" not in bad.stderr


def test_alter_user_scram_credentials_errors_per_user(sasl):
    """Kafka's per-user answers (ScramControlManager): a user changed twice in one request is
    DUPLICATE_RESOURCE, iterations outside 4096..16384 UNACCEPTABLE_CREDENTIAL, deleting a
    credential that is not there RESOURCE_NOT_FOUND; the other users' changes still apply."""
    from confluent_kafka.admin import (
        AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": sasl.plain})
    user_a, user_b, user_c, user_d = (unique("u") for _ in range(4))
    sha256 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(user_a, sha256, b"pw-a"),
        UserScramCredentialUpsertion(user_a, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"pw-a"),
        UserScramCredentialUpsertion(user_b, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw-b"),
        UserScramCredentialDeletion(user_c, ScramMechanism.SCRAM_SHA_512),
        UserScramCredentialUpsertion(user_d, sha256, b"pw-d"),
    ])
    def error_of(user):
        try:
            futures[user].result(timeout=30)
            return None
        except Exception as e:  # KafkaException wrapping a KafkaError
            return e.args[0].code()
    assert error_of(user_a) == KafkaError.DUPLICATE_RESOURCE
    assert error_of(user_b) == KafkaError.UNACCEPTABLE_CREDENTIAL
    assert error_of(user_c) == KafkaError.RESOURCE_NOT_FOUND
    assert error_of(user_d) is None
    described = admin.describe_user_scram_credentials([user_d])[user_d].result(timeout=30)
    infos = described.scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_256, 4096)]
    # And the new user logs in.
    p = Producer({**sasl_conf(sasl, "SCRAM-SHA-256", user_d, "pw-d"), "log_level": 3})
    topic = unique("sasl-new-user")
    create_topic(sasl.plain, topic)
    assert produce_all(p, topic, [{"value": b"hi"}])[0].offset == 0


@pytest.mark.oxbow_only  # Kafka refuses an unknown user at the first message
def test_an_unknown_user_gets_a_server_first_shaped_like_a_real_one(sasl):
    import base64

    def server_first(user: str) -> dict[str, str]:
        with kw.KafkaConn(sasl.sasl) as c:
            assert kw.Reader(c.call(API_SASL_HANDSHAKE, 1, kw.string("SCRAM-SHA-512"))).int16() == 0
            r = kw.Reader(c.call(API_SASL_AUTHENTICATE, 1, kw.bytes_field(f"n,,n={user},r=abc".encode())))
            assert (r.int16(), r.string()) == (0, None)
            return dict(a.split("=", 1) for a in r.take(r.int32()).decode().split(","))

    real, fake, fake_again = server_first("alice"), server_first("mallory"), server_first("mallory")
    assert fake["i"] == real["i"] == "8192"
    assert len(base64.b64decode(fake["s"])) == len(base64.b64decode(real["s"]))
    assert fake["s"] == fake_again["s"], "a decoy salt must not change between attempts"
