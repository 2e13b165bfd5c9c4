"""TLS listeners (`SSL` in --listener-security-protocol-map, `--ssl-*` flags): real clients
(librdkafka, kafka-python, the Java tools) produce and consume over TLS, mTLS refuses
clients without a trusted certificate, plaintext and TLS sent to the wrong port are closed
without harm, and a rotated certificate is served to new connections without a restart.

Against Apache Kafka (`OXBOW_E2E_TARGET=kafka`) the same listeners are configured with its
PEM keystore (`ssl.keystore.type=PEM`); the principal, reload and flag tests are
Oxbow-only (Kafka does not re-read keystore files by itself)."""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path

import pytest
import requests
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from brokers import KAFKA_LIBS, free_ports, oxbow_bin
from helpers import consume_partitions, create_topic, produce_all, producer, run, unique, wait_until

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

ALICE_DN = "CN=alice,OU=eng,O=acme,C=US"


# --- certificates -------------------------------------------------------------------------


def _name(**attrs) -> x509.Name:
    # Given outermost first, as RFC 2253 prints them last.
    oids = {"C": NameOID.COUNTRY_NAME, "O": NameOID.ORGANIZATION_NAME,
            "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "CN": NameOID.COMMON_NAME}
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in attrs.items()])


def _issue(subject: x509.Name, issuer: tuple | None, ca: bool = False, san: bool = False):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    signer_name, signer_key = (issuer[0].subject, issuer[1]) if issuer else (subject, key)
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(signer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        b = b.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return b.sign(signer_key, hashes.SHA256()), key


def _write(dir: Path, stem: str, cert, key) -> tuple[Path, Path]:
    c, k = dir / f"{stem}.pem", dir / f"{stem}.key"
    c.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return c, k


class Certs:
    """A CA, two server certificates from it (the second for rotation), a client certificate
    from it, and a client certificate from another CA."""

    def __init__(self, dir: Path):
        self.dir = dir
        ca = _issue(_name(CN="oxbow e2e CA"), None, ca=True)
        other_ca = _issue(_name(CN="someone else's CA"), None, ca=True)
        self.ca, _ = _write(dir, "ca", *ca)
        self.other_ca, _ = _write(dir, "other-ca", *other_ca)
        self.server, self.server_key = _write(dir, "server", *_issue(_name(CN="localhost"), ca, san=True))
        self.rotated, self.rotated_key = _write(dir, "rotated", *_issue(_name(CN="rotated"), ca, san=True))
        self.alice, self.alice_key = _write(dir, "alice", *_issue(_name(C="US", O="acme", OU="eng", CN="alice"), ca))
        self.mallory, self.mallory_key = _write(dir, "mallory", *_issue(_name(CN="mallory"), other_ca))
        # Kafka's PEM keystore file: the key, then the chain.
        self.keystore = dir / "keystore.pem"
        self.keystore.write_bytes(self.server_key.read_bytes() + self.server.read_bytes())


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


# --- brokers ------------------------------------------------------------------------------


def start_tls_broker(factory, certs: Certs, client_auth: str = "none", extra: list[str] | None = None,
                     cert: Path | None = None, key: Path | None = None):
    """A broker with a PLAINTEXT listener (its `bootstrap`) and an SSL one (`b.ssl`)."""
    (ssl_port,) = free_ports(1)
    b = factory(start=False)
    b.ssl = f"127.0.0.1:{ssl_port}"
    b.options["extra_args"] = [
        "--listeners", f"PLAINTEXT://{b.bootstrap},SSL://{b.ssl}",
        "--ssl-certificate-file", str(cert or certs.server),
        "--ssl-key-file", str(key or certs.server_key),
        "--ssl-truststore-file", str(certs.ca),
        "--ssl-client-auth", client_auth,
        *(extra or []),
    ]
    b.options["env"] = {"OXBOW_LOG": "info,oxbow_gateway::kafka=debug"}
    b.options["kafka_props"] = {
        "listeners": f"PLAINTEXT://{b.bootstrap},SSL://{b.ssl},CONTROLLER://127.0.0.1:{b.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{b.bootstrap},SSL://{b.ssl}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        "ssl.client.auth": client_auth,
    }
    return b.start()


@pytest.fixture(scope="module")
def tls_broker(module_broker_factory, certs):
    return start_tls_broker(module_broker_factory, certs)


@pytest.fixture(scope="module")
def mtls_broker(module_broker_factory, certs):
    return start_tls_broker(module_broker_factory, certs, client_auth="required")


def ssl_conf(certs: Certs, cert: Path | None = None, key: Path | None = None, ca: Path | None = None) -> dict:
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(ca or certs.ca)}
    if cert:
        conf |= {"ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    return conf


def can_list_topics(bootstrap: str, conf: dict, timeout: float = 8) -> bool:
    try:
        md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **conf}).list_topics(timeout=timeout)
        return bool(md.brokers)
    except KafkaException:
        return False


def round_trip(bootstrap: str, conf: dict, n: int = 20) -> None:
    """Creates a topic, produces `n` records and reads them back, all over `bootstrap`."""
    topic = unique("tls")
    admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    got = produce_all(producer(bootstrap, **conf), topic, [{"value": f"v{i}".encode()} for i in range(n)])
    assert [r.offset for r in got] == list(range(n))
    records = consume_partitions(bootstrap, topic, [0], **conf)
    assert [r.value for r in records[0]] == [f"v{i}".encode() for i in range(n)]


def peer_cert_cn(addr: str, ca: Path) -> str:
    host, port = addr.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            subject = dict(x[0] for x in s.getpeercert()["subject"])
            return subject["commonName"]


def refuses_client_cert(addr: str, certs: Certs, cert: Path, key: Path) -> bool:
    """Whether the broker refuses a handshake presenting `cert` (OpenSSL sends it whatever
    CAs the server names)."""
    host, port = addr.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    ctx.load_cert_chain(str(cert), str(key))
    try:
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                # TLS 1.3 reports the server's verdict on the client's certificate after
                # the handshake: an ApiVersions answer means it was accepted.
                s.sendall(api_versions_frame())
                return len(s.recv(4)) < 4
    except (ssl.SSLError, ConnectionResetError):
        return True


def closes_within(sock: socket.socket, seconds: float) -> bytes:
    """Reads until the peer closes; fails if it is still open after `seconds`."""
    sock.settimeout(seconds)
    got = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(4096)
        except (ConnectionResetError, BrokenPipeError):
            return got
        if not chunk:
            return got
        got += chunk
    raise AssertionError(f"still open after {seconds}s (read {got[:40]!r})")


def api_versions_frame() -> bytes:
    client_id = b"raw"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


# --- tests --------------------------------------------------------------------------------


def test_confluent_kafka_produces_and_consumes_over_ssl(tls_broker, certs):
    # Metadata over the SSL listener names the SSL listener's address.
    md = AdminClient({"bootstrap.servers": tls_broker.ssl, **ssl_conf(certs)}).list_topics(timeout=15)
    assert {f"{b.host}:{b.port}" for b in md.brokers.values()} == {tls_broker.ssl}
    round_trip(tls_broker.ssl, ssl_conf(certs))


def test_kafka_python_over_ssl(tls_broker, certs):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = unique("tls-kp")
    create_topic(tls_broker.bootstrap, topic)
    common = {"bootstrap_servers": tls_broker.ssl, "security_protocol": "SSL", "ssl_cafile": str(certs.ca)}
    p = KafkaProducer(acks="all", **common)
    try:
        for i in range(10):
            p.send(topic, f"kp{i}".encode()).get(timeout=30)
    finally:
        p.close(timeout=10)
    c = KafkaConsumer(auto_offset_reset="earliest", consumer_timeout_ms=10_000, enable_auto_commit=False, **common)
    try:
        c.assign([TopicPartition(topic, 0)])
        got = []
        for m in c:
            got.append(m.value)
            if len(got) == 10:
                break
    finally:
        c.close()
    assert got == [f"kp{i}".encode() for i in range(10)]


def test_java_tools_over_ssl_with_a_pem_truststore(tls_broker, certs, tmp_path):
    if shutil.which("java") is None or not any(KAFKA_LIBS.glob("kafka-tools-*.jar")):
        pytest.fail(f"java or the Kafka tool jars in {KAFKA_LIBS} are missing: run `scripts/test.sh setup`")
    config = tmp_path / "client.properties"
    config.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n")
    log4j = tmp_path / "log4j2.properties"
    log4j.write_text("status = error\nrootLogger.level = OFF\n")

    def java(main: str, *args: str, input: str | None = None):
        return run(["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={log4j}",
                    "-cp", f"{KAFKA_LIBS}/*", main, *args], input=input, timeout=120)

    topic = unique("tls-java")
    b = tls_broker.ssl
    java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", b, "--command-config", str(config),
         "--create", "--topic", topic, "--partitions", "1")
    java("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", b, "--topic", topic,
         "--producer.config", str(config), input="".join(f"j{i}\n" for i in range(5)))
    out = java("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", b, "--topic", topic,
               "--consumer.config", str(config), "--from-beginning", "--max-messages", "5",
               "--timeout-ms", "30000").stdout
    assert out.split() == [f"j{i}" for i in range(5)]


def test_a_client_trusting_another_ca_refuses_the_broker(tls_broker, certs):
    assert not can_list_topics(tls_broker.ssl, ssl_conf(certs, ca=certs.other_ca))
    with pytest.raises(ssl.SSLCertVerificationError):
        peer_cert_cn(tls_broker.ssl, certs.other_ca)
    assert can_list_topics(tls_broker.ssl, ssl_conf(certs))


def test_plaintext_to_the_tls_port_is_closed_and_the_broker_serves_on(tls_broker, certs):
    host, port = tls_broker.ssl.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(api_versions_frame())
        got = closes_within(s, 10)
    # No Kafka response: at most a TLS alert (content type 21) before the close.
    assert got == b"" or got[0] == 21, got[:20]
    assert can_list_topics(tls_broker.bootstrap, {})
    assert can_list_topics(tls_broker.ssl, ssl_conf(certs))


def test_tls_to_the_plaintext_port_is_closed_and_the_broker_serves_on(tls_broker, certs):
    host, port = tls_broker.bootstrap.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    start = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        # The ClientHello's first bytes read as a frame length far past the largest request.
        with pytest.raises((ssl.SSLError, ConnectionResetError, OSError)) as e:
            ctx.wrap_socket(raw, server_hostname="localhost")
        assert not isinstance(e.value, TimeoutError), e.value
    assert time.monotonic() - start < 10
    assert can_list_topics(tls_broker.bootstrap, {})
    assert can_list_topics(tls_broker.ssl, ssl_conf(certs))


def test_mtls_required_refuses_clients_without_a_trusted_certificate(mtls_broker, certs):
    # No certificate, and one from another CA: refused.
    assert not can_list_topics(mtls_broker.ssl, ssl_conf(certs))
    assert not can_list_topics(mtls_broker.ssl, ssl_conf(certs, cert=certs.mallory, key=certs.mallory_key))
    assert refuses_client_cert(mtls_broker.ssl, certs, certs.mallory, certs.mallory_key)
    # The right one works, for data too.
    alice = ssl_conf(certs, cert=certs.alice, key=certs.alice_key)
    assert can_list_topics(mtls_broker.ssl, alice)
    round_trip(mtls_broker.ssl, alice, n=5)
    # Plaintext clients are unaffected.
    assert can_list_topics(mtls_broker.bootstrap, {})


@pytest.mark.oxbow_only
def test_mtls_principal_is_the_subject_dn_as_kafka_prints_it(mtls_broker, certs):
    alice = ssl_conf(certs, cert=certs.alice, key=certs.alice_key)
    assert can_list_topics(mtls_broker.ssl, alice)
    wait_until(lambda: f"principal=User:{ALICE_DN}" in mtls_broker.log_tail(400), timeout=10,
               what="the principal in the broker's log")
    metrics = requests.get(f"{mtls_broker.http}/metrics", timeout=5).text
    failures = [line for line in metrics.splitlines() if line.startswith("oxbow_tls_handshake_failures_total")]
    assert failures and float(failures[0].split()[-1]) >= 0


@pytest.mark.oxbow_only
def test_mtls_requested_lets_clients_without_a_certificate_in_as_anonymous(broker_factory, certs):
    b = start_tls_broker(broker_factory, certs, client_auth="requested",
                         extra=["--ssl-principal-mapping-rules", "RULE:^CN=([^,]*),.*$/$1/U,DEFAULT"])
    assert can_list_topics(b.ssl, ssl_conf(certs))
    assert can_list_topics(b.ssl, ssl_conf(certs, cert=certs.alice, key=certs.alice_key))
    # A certificate the truststore does not vouch for is refused when presented (librdkafka
    # does not present one the server's CA list does not name: it is then anonymous).
    assert refuses_client_cert(b.ssl, certs, certs.mallory, certs.mallory_key)
    assert not refuses_client_cert(b.ssl, certs, certs.alice, certs.alice_key)
    can_list_topics(b.ssl, ssl_conf(certs, cert=certs.mallory, key=certs.mallory_key))
    wait_until(lambda: "principal=User:ANONYMOUS" in b.log_tail(400) and "principal=User:ALICE" in b.log_tail(400),
               timeout=10, what="both principals in the broker's log")
    assert "principal=User:MALLORY" not in b.log_tail(400)


@pytest.mark.oxbow_only
def test_a_stalled_handshake_is_cut_off(broker_factory, certs):
    b = start_tls_broker(broker_factory, certs, extra=["--request-read-timeout", "2s"])
    host, port = b.ssl.rsplit(":", 1)
    start = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=10) as s:
        closes_within(s, 8)
    assert 1.5 < time.monotonic() - start < 8
    wait_until(lambda: "oxbow_tls_handshake_failures_total 1" in requests.get(f"{b.http}/metrics", timeout=5).text,
               timeout=5, what="the handshake failure counted")
    assert can_list_topics(b.ssl, ssl_conf(certs))


@pytest.mark.oxbow_only
def test_a_rotated_certificate_is_served_to_new_connections_without_a_restart(broker_factory, certs, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    shutil.copy(certs.server, cert)
    shutil.copy(certs.server_key, key)
    b = start_tls_broker(broker_factory, certs, cert=cert, key=key, extra=["--ssl-reload-interval", "500ms"])
    assert peer_cert_cn(b.ssl, certs.ca) == "localhost"
    topic = unique("tls-rotate")
    create_topic(b.bootstrap, topic)
    live = producer(b.ssl, **ssl_conf(certs))
    produce_all(live, topic, [{"value": b"before"}])
    pid = b.pid

    # Replaced as rotations do: write beside, rename over (key first, then the certificate).
    for src, dst in ((certs.rotated_key, key), (certs.rotated, cert)):
        tmp = dst.with_suffix(".new")
        shutil.copy(src, tmp)
        tmp.rename(dst)
    wait_until(lambda: peer_cert_cn(b.ssl, certs.ca) == "rotated", timeout=15, what="the rotated certificate served")
    # The connection made before keeps working, and the broker was not restarted.
    produce_all(live, topic, [{"value": b"after"}])
    assert b.pid == pid and b.alive

    # A broken file keeps the rotated certificate, and is counted.
    cert.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    wait_until(lambda: 'oxbow_tls_reloads_total{result="error"} 1' in requests.get(f"{b.http}/metrics", timeout=5).text,
               timeout=15, what="the failed reload counted")
    assert peer_cert_cn(b.ssl, certs.ca) == "rotated"
    metrics = requests.get(f"{b.http}/metrics", timeout=5).text
    assert 'oxbow_tls_reloads_total{result="ok"} 1' in metrics or 'oxbow_tls_reloads_total{result="ok"} 2' in metrics
    records = consume_partitions(b.ssl, topic, [0], **ssl_conf(certs))
    assert [r.value for r in records[0]] == [b"before", b"after"]


@pytest.mark.oxbow_only
@pytest.mark.parametrize(
    "args, flag",
    [
        ([], "--ssl-certificate-file"),
        (["--ssl-certificate-file", "{server}"], "--ssl-key-file"),
        (["--ssl-certificate-file", "{dir}/missing.pem", "--ssl-key-file", "{server_key}"], "--ssl-certificate-file"),
        (["--ssl-certificate-file", "{server}", "--ssl-key-file", "{alice_key}"], "--ssl-key-file"),
        (["--ssl-certificate-file", "{server}", "--ssl-key-file", "{server_key}", "--ssl-client-auth", "required"],
         "--ssl-truststore-file"),
        (["--ssl-certificate-file", "{server}", "--ssl-key-file", "{server_key}", "--ssl-enabled-protocols", "TLSv1"],
         "--ssl-enabled-protocols"),
    ],
)
def test_bad_tls_flags_name_the_flag(tmp_path, certs, args, flag):
    http, internal, kafka = free_ports(3)
    paths = {"server": certs.server, "server_key": certs.server_key, "alice_key": certs.alice_key, "dir": certs.dir}
    out = subprocess.run(
        [str(oxbow_bin()), "serve", "--data-dir", str(tmp_path), "--http-addr", f"127.0.0.1:{http}",
         "--internal-addr", f"127.0.0.1:{internal}", "--listeners", f"SSL://127.0.0.1:{kafka}",
         *(a.format(**paths) for a in args)],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode != 0
    assert flag in out.stderr, out.stderr


@pytest.mark.oxbow_only
def test_http_tls_serves_the_rest_api_over_https(broker_factory, certs):
    b = broker_factory(start=False, extra_args=[
        "--http-tls", "--ssl-certificate-file", str(certs.server), "--ssl-key-file", str(certs.server_key)])
    b.start(wait=False)
    https = f"https://localhost:{b.http_port}"

    def ready() -> bool:
        try:
            return requests.get(f"{https}/readyz", verify=str(certs.ca), timeout=2).status_code == 200
        except requests.RequestException:
            return False

    wait_until(ready, timeout=60, what="HTTPS /readyz")
    topic = unique("https")
    create_topic(b.bootstrap, topic)
    r = requests.post(f"{https}/topics/{topic}", verify=str(certs.ca), timeout=10,
                      headers={"Content-Type": "application/vnd.kafka.json.v2+json"},
                      json={"records": [{"value": {"n": 1}}]})
    assert r.status_code == 200, r.text
    assert r.json()["offsets"][0]["offset"] == 0
    # Plain HTTP to the HTTPS port gets no answer, and is counted as a failed handshake.
    with pytest.raises(requests.RequestException):
        requests.get(f"http://127.0.0.1:{b.http_port}/readyz", timeout=5)
    metrics = requests.get(f"{https}/metrics", verify=str(certs.ca), timeout=5).text
    assert "oxbow_tls_handshake_failures_total 1" in metrics, metrics[:400]


def test_https_client_certificate_is_the_principal_without_an_authorization_header(broker_factory, certs):
    """--http-authentication basic over HTTPS with --ssl-client-auth requested: a request
    with a certificate and no Authorization header is the certificate's principal (seen in
    the ACL refusal), one with neither is 401, and a header, when sent, wins."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    b = broker_factory(start=False, extra_args=[
        "--http-tls", "--ssl-certificate-file", str(certs.server), "--ssl-key-file", str(certs.server_key),
        "--ssl-truststore-file", str(certs.ca), "--ssl-client-auth", "requested",
        "--http-authentication", "basic",
        "--authorizer", "acl", "--allow-everyone-if-no-acl-found"])
    b.start(wait=False)
    https = f"https://localhost:{b.http_port}"
    cert = (str(certs.alice), str(certs.alice_key))

    def ready() -> bool:
        try:
            return requests.get(f"{https}/readyz", verify=str(certs.ca), timeout=2).status_code == 200
        except requests.RequestException:
            return False

    wait_until(ready, timeout=60, what="HTTPS /readyz")
    topic = unique("mtls-http")
    create_topic(b.bootstrap, topic)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    owner = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:owner", "*",
                       AclOperation.ALL, AclPermissionType.ALLOW)
    for f in admin.create_acls([owner], request_timeout=30).values():
        f.result(timeout=30)
    r = requests.get(f"{https}/topics/{topic}", verify=str(certs.ca), cert=cert, timeout=10)
    assert r.status_code == 403 and f"User:{ALICE_DN}" in r.json()["message"], r.text
    assert requests.get(f"{https}/topics", verify=str(certs.ca), cert=cert, timeout=10).status_code == 200
    r = requests.get(f"{https}/topics", verify=str(certs.ca), timeout=10)
    assert r.status_code == 401 and r.json()["error_code"] == 40101, r.text
    r = requests.get(f"{https}/topics", verify=str(certs.ca), cert=cert, auth=("alice", "wrong"), timeout=10)
    assert r.status_code == 401, r.text
