"""Mirror topics and cluster links (issue 20): a destination Oxbow follows topics of a source
cluster — another Oxbow, or a real Apache Kafka broker — with the same offsets, keys,
values, headers and timestamps; producers to a mirror topic are refused until it is
promoted; committed offsets of the selected groups follow, so a group resumes on the
destination exactly where it committed; a cut network resumes without gap or duplicate;
bad links say why.

Real components only: `oxbow serve` binaries, Apache Kafka from the suite's jars, the
`oxbow links` CLI over HTTP, confluent-kafka clients, and a small TCP proxy in this file
that can cut the network to the source.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
import requests
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import brokers
from brokers import oxbow_bin
from cluster import cluster, etcd_server, moto_server  # noqa: F401 (fixtures)
from helpers import create_topic, high_watermark, producer, run, unique, wait_until

pytestmark = pytest.mark.oxbow_only

# Every wait is bounded; mirroring polls the source every 500 ms at most.
MIRROR_TIMEOUT = 60


def links(dst, *args: str, check: bool = True, timeout: float = 60):
    return run(
        [str(oxbow_bin()), "links", "--http-url", dst.http, *args],
        timeout=timeout,
        check=check,
    )


def read_all(bootstrap: str, topic: str, partitions, *, isolation: str = "read_uncommitted", timeout: float = 60):
    """Every record of the partitions from their beginning to the end seen at the start
    (partition EOF), as (partition, offset, key, value, headers, timestamp)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "mirror-e2e-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "log_level": 3,
        }
    )
    out = []
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        pending = set(partitions)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for m in c.consume(num_messages=5000, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(m.partition())
                        continue
                    raise KafkaException(err)
                out.append((m.partition(), m.offset(), m.key(), m.value(), m.headers(), m.timestamp()))
        assert not pending, f"timed out reading {topic}: {len(out)} records, partitions {pending} not at their end"
    finally:
        c.close()
    return sorted(out, key=lambda r: (r[0], r[1]))


def high_watermarks(bootstrap: str, topic: str, partitions) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "mirror-e2e-hw", "log_level": 3})
    try:
        return {p: high_watermark(c, topic, p) for p in partitions}
    finally:
        c.close()


def wait_mirrored(src: str, dst: str, topic: str, partitions, timeout: float = MIRROR_TIMEOUT) -> dict[int, int]:
    """Until the destination's high watermarks equal the source's (both read each time)."""

    def same():
        try:
            s = high_watermarks(src, topic, partitions)
            d = high_watermarks(dst, topic, partitions)
        except KafkaException:
            return None
        return s if s == d else None

    return wait_until(same, timeout=timeout, what=f"{topic} mirrored to the destination")


def offsets_on(bootstrap: str, group: str, topic: str, partitions) -> dict[int, int]:
    """The group's committed offsets there (without joining it)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    try:
        got = c.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
    finally:
        c.close()
    return {t.partition: t.offset for t in got}


def produce_varied(bootstrap: str, topic: str, partitions: int, n: int, **conf) -> None:
    """n records with keys, headers and explicit (old) timestamps, round-robin over the partitions."""
    p = producer(bootstrap, **conf)
    errors = []

    def cb(err, msg):
        if err is not None:
            errors.append(err)

    base_ts = int(time.time() * 1000) - 3_600_000  # an hour old: kept as is, not restamped
    for i in range(n):
        p.produce(
            topic,
            key=f"k{i % 17}".encode(),
            value=f"v{i}".encode() * (1 + i % 5),
            headers=[("h", f"{i}".encode()), ("empty", b"")],
            timestamp=base_ts + i,
            partition=i % partitions,
            on_delivery=cb,
        )
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert not errors, errors[:3]


class CuttableProxy:
    """A TCP proxy to one address whose connections can all be cut and new ones refused
    for a while (a network partition between the destination and the source)."""

    def __init__(self, target_port: int):
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.cut = threading.Event()
        self.closed = threading.Event()
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.cut.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a, b):
        try:
            while not self.cut.is_set():
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def partition(self):
        self.cut.set()
        with self.lock:
            for s in self.conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.conns.clear()

    def heal(self):
        self.cut.clear()

    def close(self):
        self.closed.set()
        self.partition()
        self.listener.close()


def assert_identical(src_records, dst_records):
    assert len(src_records) == len(dst_records), (len(src_records), len(dst_records))
    for s, d in zip(src_records, dst_records):
        assert s == d, f"source {s} != mirror {d}"


def test_oxbow_to_oxbow_offsets_groups_promotion(broker_factory):
    src = broker_factory("mirror-src")
    dst = broker_factory("mirror-dst")
    topic = unique("orders")
    create_topic(src.bootstrap, topic, partitions=3)
    produce_varied(src.bootstrap, topic, 3, 3000, compression_type="lz4")
    # A group on the source consumes part of the topic and commits.
    group = unique("g")
    committed = {0: 400, 1: 250, 2: 0}
    c = Consumer({"bootstrap.servers": src.bootstrap, "group.id": group, "log_level": 3})
    c.commit(offsets=[TopicPartition(topic, p, o) for p, o in committed.items()], asynchronous=False)
    c.close()

    links(dst, "create", "east", "--bootstrap", src.bootstrap, "--topics", f"re:{topic}.*", "--groups", group)
    out = links(dst, "list").stdout
    assert "east" in out and "active" in out, out

    wait_mirrored(src.bootstrap, dst.bootstrap, topic, range(3))
    assert_identical(read_all(src.bootstrap, topic, range(3)), read_all(dst.bootstrap, topic, range(3)))

    # The source's log start (DeleteRecords, retention) becomes the mirror's.
    admin = AdminClient({"bootstrap.servers": src.bootstrap})  # outlives its futures
    for f in admin.delete_records([TopicPartition(topic, 0, 100)], request_timeout=30).values():
        assert f.result(60).low_watermark == 100

    def low_watermark():
        c = Consumer({"bootstrap.servers": dst.bootstrap, "group.id": "mirror-e2e-lw", "log_level": 3})
        try:
            return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[0] == 100 or None
        finally:
            c.close()

    wait_until(low_watermark, timeout=MIRROR_TIMEOUT, what="the mirror's log start following the source's")
    assert_identical(read_all(src.bootstrap, topic, range(3)), read_all(dst.bootstrap, topic, range(3)))

    # Read-only: a producer to the mirror topic is refused with INVALID_REQUEST, at once.
    p = Producer({"bootstrap.servers": dst.bootstrap, "enable.idempotence": False, "retries": 0, "log_level": 3})
    errs = []
    p.produce(topic, value=b"nope", partition=0, on_delivery=lambda err, msg: errs.append(err))
    assert p.flush(20) == 0
    assert errs and errs[0] is not None and errs[0].code() == KafkaError.INVALID_REQUEST, errs
    # (librdkafka shows only the code; the broker's error_message names the link.)

    # The group's offsets arrive unchanged; a consumer of it resumes there on the destination.
    def offsets_copied():
        return offsets_on(dst.bootstrap, group, topic, committed) == committed or None

    wait_until(offsets_copied, timeout=MIRROR_TIMEOUT, what="group offsets mirrored")
    c = Consumer(
        {
            "bootstrap.servers": dst.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    c.subscribe([topic])
    first: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while len(first) < 3 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            first.setdefault(m.partition(), m.offset())
    assert first == committed, f"resumed at {first}, committed {committed}: nothing skipped, nothing re-read"
    # While the group has members here, the source's newer commits do not move it.
    s = Consumer({"bootstrap.servers": src.bootstrap, "group.id": group, "log_level": 3})
    s.commit(offsets=[TopicPartition(topic, 0, 900)], asynchronous=False)
    s.close()
    until = time.monotonic() + 7  # more than a reconcile round (5 s)
    while time.monotonic() < until:
        c.poll(0.2)  # stays a member
    assert offsets_on(dst.bootstrap, group, topic, [0]) == {0: 400}, "an active group was moved"
    c.close()
    wait_until(
        lambda: offsets_on(dst.bootstrap, group, topic, [0]) == {0: 900} or None,
        timeout=MIRROR_TIMEOUT, what="the source's commit once the group is empty here",
    )

    # Promote during load: the source keeps taking writes while the mirror is promoted.
    stop = threading.Event()
    loaded = []

    def load():
        lp = producer(src.bootstrap)
        i = 0
        while not stop.is_set():
            lp.produce(topic, value=f"late{i}".encode(), partition=i % 3)
            lp.poll(0)
            i += 1
            time.sleep(0.002)
        lp.flush(30)
        loaded.append(i)

    t = threading.Thread(target=load)
    t.start()
    try:
        time.sleep(2)
        started = time.monotonic()
        out = links(dst, "promote", "east", "--topics", topic).stdout
        promote_s = time.monotonic() - started
        assert "promoted" in out, out
        # Writable now (a partition whose task is still stopping answers a retriable error).
        ends_at_promotion = high_watermarks(dst.bootstrap, topic, range(3))
        p = producer(dst.bootstrap)
        delivered = []
        for part in range(3):
            p.produce(topic, value=b"after-promotion", partition=part, on_delivery=lambda e, m: delivered.append((e, m)))
        assert p.flush(30) == 0
        for err, m in delivered:
            assert err is None, err
            # The next offset: nothing from the source slipped in between.
            assert m.offset() >= ends_at_promotion[m.partition()], (m.offset(), ends_at_promotion)
        time.sleep(2)
    finally:
        stop.set()
        t.join(60)
    assert loaded and loaded[0] > 0
    # The source went on, the promoted topic did not follow it: it holds its own writes only.
    final = high_watermarks(dst.bootstrap, topic, range(3))
    for err, m in delivered:
        assert final[m.partition()] == m.offset() + 1, (final, m.offset())
    src_final = high_watermarks(src.bootstrap, topic, range(3))
    assert sum(src_final.values()) > sum(final.values()), (src_final, final)
    print(f"FIGURE promotion under load: {promote_s * 1000:.0f} ms (CLI round trip)")


def test_apache_kafka_to_oxbow_with_transactions_and_source_pause(tmp_path_factory, broker_factory):
    kafka = brokers.KafkaBroker(tmp_path_factory.mktemp("kafka-src"), name="kafka-src")
    try:
        kafka.start(timeout=90)
        dst = broker_factory("mirror-dst-k")
        topic = unique("legacy")
        create_topic(kafka.bootstrap, topic, partitions=2)
        produce_varied(kafka.bootstrap, topic, 2, 2000, compression_type="zstd")
        # A committed and an aborted transaction: markers and aborted data are mirrored too.
        tp = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": unique("tx"), "log_level": 3})
        tp.init_transactions(30)
        for commit in (True, False):
            tp.begin_transaction()
            for i in range(10):
                tp.produce(topic, value=f"tx-{commit}-{i}".encode(), partition=i % 2)
            tp.commit_transaction(30) if commit else tp.abort_transaction(30)

        links(dst, "create", "legacy", "--bootstrap", kafka.bootstrap, "--topics", topic)
        wait_mirrored(kafka.bootstrap, dst.bootstrap, topic, range(2))
        for iso in ("read_uncommitted", "read_committed"):
            assert_identical(
                read_all(kafka.bootstrap, topic, range(2), isolation=iso),
                read_all(dst.bootstrap, topic, range(2), isolation=iso),
            )
        # The source stops answering for a while mid-stream (SIGSTOP: connections stay
        # open, nothing answers), then comes back: the mirror resumes where it stopped.
        produce_varied(kafka.bootstrap, topic, 2, 500)
        kafka.proc.send_signal(19)  # SIGSTOP
        time.sleep(6)
        kafka.proc.send_signal(18)  # SIGCONT
        produce_varied(kafka.bootstrap, topic, 2, 500)
        wait_mirrored(kafka.bootstrap, dst.bootstrap, topic, range(2), timeout=90)
        assert_identical(read_all(kafka.bootstrap, topic, range(2)), read_all(dst.bootstrap, topic, range(2)))
    finally:
        kafka.close()


def test_network_cut_and_source_killed_mid_mirror_resume_without_gap_or_duplicate(broker_factory):
    # The source advertises a LINK listener at the proxy's port: the link's connections all
    # go through the proxy, the test's producers use the PLAINTEXT listener directly.
    src = broker_factory("mirror-src-n", start=False)
    link_port = brokers.free_ports(1)[0]
    proxy = CuttableProxy(link_port)
    try:
        src.options["extra_args"] = [
            "--listeners", f"PLAINTEXT://{src.bootstrap},LINK://127.0.0.1:{link_port}",
            "--advertised-listeners", f"LINK://127.0.0.1:{proxy.port}",
            "--listener-security-protocol-map", "LINK:PLAINTEXT",
        ]
        src.start()
        dst = broker_factory("mirror-dst-n")
        topic = unique("cut")
        create_topic(src.bootstrap, topic, partitions=2)
        produce_varied(src.bootstrap, topic, 2, 4000)
        links(dst, "create", "viaproxy", "--bootstrap", f"127.0.0.1:{proxy.port}", "--topics", topic)
        # Cut as soon as the mirror has started, while the source keeps taking writes.
        def started():
            try:
                return sum(high_watermarks(dst.bootstrap, topic, range(2)).values()) > 0 or None
            except KafkaException:  # the mirror topic is not created yet
                return None

        wait_until(started, timeout=MIRROR_TIMEOUT, interval=0.05, what="mirroring started")
        proxy.partition()
        produce_varied(src.bootstrap, topic, 2, 2000)
        time.sleep(5)
        during = high_watermarks(dst.bootstrap, topic, range(2))
        assert sum(during.values()) < 6000, during
        out = links(dst, "describe", "viaproxy").stdout
        assert "Last error" in out, out
        proxy.heal()
        wait_mirrored(src.bootstrap, dst.bootstrap, topic, range(2), timeout=90)
        assert_identical(read_all(src.bootstrap, topic, range(2)), read_all(dst.bootstrap, topic, range(2)))
        metrics = requests.get(f"{dst.http}/metrics", timeout=10).text
        assert "oxbow_mirror_lag_records" in metrics and 'oxbow_mirror_bytes_total{link="viaproxy"}' in metrics
        # The source killed -9 mid-stream and restarted on its data: the mirror goes on.
        produce_varied(src.bootstrap, topic, 2, 2000)
        src.kill9()
        time.sleep(2)
        src.start()
        produce_varied(src.bootstrap, topic, 2, 1000)
        wait_mirrored(src.bootstrap, dst.bootstrap, topic, range(2), timeout=90)
        assert_identical(read_all(src.bootstrap, topic, range(2)), read_all(dst.bootstrap, topic, range(2)))
    finally:
        proxy.close()


def test_destination_leader_killed_mid_mirror_resumes_exactly(cluster, broker_factory):
    """A 3-broker destination on etcd + S3: the broker leading a mirror partition is killed
    -9 mid-mirror; the partition's new leader resumes from its log end (what the dead one
    acknowledged is in the WAL replicas or S3), so the mirror ends identical to the source."""
    src = broker_factory("mirror-src-c")
    topic = unique("fail")
    create_topic(src.bootstrap, topic, partitions=3)
    produce_varied(src.bootstrap, topic, 3, 6000)
    c = cluster(3, flush_interval="250ms")
    links(c.broker(1), "create", "east", "--bootstrap", src.bootstrap, "--topics", topic)

    def started():
        try:
            hw = high_watermarks(c.bootstrap, topic, range(3))
        except KafkaException:
            return None
        return all(v > 0 for v in hw.values()) or None

    wait_until(started, timeout=MIRROR_TIMEOUT, interval=0.05, what="mirroring started")
    victim = c.leaders(topic)[0]
    c.kill9(victim)
    produce_varied(src.bootstrap, topic, 3, 3000)
    wait_mirrored(src.bootstrap, c.live_bootstrap(), topic, range(3), timeout=120)
    assert_identical(read_all(src.bootstrap, topic, range(3)), read_all(c.live_bootstrap(), topic, range(3)))
    assert c.leaders(topic)[0] != victim


def test_sasl_source_right_and_wrong_credentials(broker_factory, tmp_path):
    """A source with a SASL_PLAINTEXT listener: a link with the right SCRAM credentials
    mirrors through it; a wrong password is refused at create naming the failure, and a
    link created anyway (--skip-validation) reports it as its last error, mirroring nothing."""
    plain, sasl = brokers.free_ports(2)
    src = broker_factory(
        "mirror-src-s",
        extra_args=[
            "--listeners", f"PLAINTEXT://127.0.0.1:{plain},SASL://127.0.0.1:{sasl}",
            "--listener-security-protocol-map", "PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT",
            "--inter-broker-listener-name", "PLAINTEXT",
            "--sasl-enabled-mechanisms", "SCRAM-SHA-256",
        ],
    )
    plain_bs = f"127.0.0.1:{plain}"
    run([str(oxbow_bin()), "users", "-b", plain_bs, "create", "mirror", "--mechanism", "SCRAM-SHA-256"],
        input="right-secret\n", timeout=60)
    dst = broker_factory("mirror-dst-s")
    topic = unique("secure")
    create_topic(plain_bs, topic, partitions=2)
    produce_varied(plain_bs, topic, 2, 500)
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text("right-secret\n")
    bad.write_text("wrong-secret\n")
    auth = ["--sasl-mechanism", "SCRAM-SHA-256", "--sasl-username", "mirror"]
    r = links(dst, "create", "wrong", "--bootstrap", f"127.0.0.1:{sasl}", "--topics", topic,
              *auth, "--sasl-password-file", str(bad), check=False)
    assert r.returncode != 0 and "authentication" in r.stderr.lower(), r.stderr
    links(dst, "create", "wrong", "--bootstrap", f"127.0.0.1:{sasl}", "--topics", topic,
          *auth, "--sasl-password-file", str(bad), "--skip-validation")

    def reported():
        out = links(dst, "list").stdout
        return "authentication" in out.lower() and out

    wait_until(reported, timeout=MIRROR_TIMEOUT, what="the wrong password reported by the link")
    assert topic not in topic_names_of(dst.bootstrap), "nothing mirrored with a wrong password"
    links(dst, "delete", "wrong", "--force")
    links(dst, "create", "right", "--bootstrap", f"127.0.0.1:{sasl}", "--topics", topic,
          *auth, "--sasl-password-file", str(good))
    wait_mirrored(plain_bs, dst.bootstrap, topic, range(2))
    assert_identical(read_all(plain_bs, topic, range(2)), read_all(dst.bootstrap, topic, range(2)))
    # The password is never returned by the API.
    cid = requests.get(f"{dst.http}/v3/clusters", timeout=5).json()["data"][0]["cluster_id"]
    assert "right-secret" not in requests.get(f"{dst.http}/v3/clusters/{cid}/links", timeout=10).text


def topic_names_of(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def test_tls_source_pause_resume_and_promotion_at_lag_zero(broker_factory, tmp_path):
    """A source with an SSL listener: a link trusting its CA mirrors over TLS; one trusting
    another CA is refused at create, naming the TLS failure. Pause holds the mirror where
    it is, resume catches up, promotion waiting for lag zero gives up nothing."""
    from test_tls import Certs

    certs = Certs(tmp_path)
    (ssl_port,) = brokers.free_ports(1)
    src = broker_factory("mirror-src-t", start=False)
    ssl_addr = f"127.0.0.1:{ssl_port}"
    src.options["extra_args"] = [
        "--listeners", f"PLAINTEXT://{src.bootstrap},SSL://{ssl_addr}",
        "--ssl-certificate-file", str(certs.server),
        "--ssl-key-file", str(certs.server_key),
    ]
    src.start()
    dst = broker_factory("mirror-dst-t")
    topic = unique("tls")
    create_topic(src.bootstrap, topic, partitions=2)
    produce_varied(src.bootstrap, topic, 2, 500)
    r = links(dst, "create", "untrusted", "--bootstrap", ssl_addr, "--topics", topic,
              "--ssl-ca-file", str(certs.other_ca), check=False)
    assert r.returncode != 0 and "tls" in r.stderr.lower(), r.stderr
    links(dst, "create", "tls", "--bootstrap", ssl_addr, "--topics", topic, "--ssl-ca-file", str(certs.ca))
    wait_mirrored(src.bootstrap, dst.bootstrap, topic, range(2))
    assert_identical(read_all(src.bootstrap, topic, range(2)), read_all(dst.bootstrap, topic, range(2)))
    # Paused: nothing more arrives, the topic stays read-only; resumed: it catches up.
    links(dst, "pause", "tls")
    assert "paused" in links(dst, "list").stdout
    held = high_watermarks(dst.bootstrap, topic, range(2))
    produce_varied(src.bootstrap, topic, 2, 300)
    time.sleep(3)
    assert high_watermarks(dst.bootstrap, topic, range(2)) == held
    links(dst, "resume", "tls")
    # Promotion that first waits for lag zero: nothing given up.
    out = links(dst, "promote", "tls", "--wait-for-lag-zero", "30s").stdout
    assert f"{topic}: promoted (lag at promotion 0 records" in out, out
    assert_identical(read_all(src.bootstrap, topic, range(2)), read_all(dst.bootstrap, topic, range(2)))


def test_links_are_guarded_by_cluster_acls(broker_factory):
    """With --authorizer acl, reading links needs DESCRIBE on the cluster and changing them
    ALTER on the cluster (a link carries credentials to another cluster and rewrites topics)."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    dst = broker_factory(
        "mirror-dst-acl",
        extra_args=["--http-authentication", "basic", "--authorizer", "acl", "--allow-everyone-if-no-acl-found"],
    )
    run([str(oxbow_bin()), "users", "-b", dst.bootstrap, "create", "alice", "--mechanism", "SCRAM-SHA-256"],
        input="alice-secret\n", timeout=60)

    def cluster_acl(principal, op):
        return AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, principal, "*", op,
                          AclPermissionType.ALLOW)

    client = AdminClient({"bootstrap.servers": dst.bootstrap})
    acls = [cluster_acl("User:owner", AclOperation.ALTER), cluster_acl("User:alice", AclOperation.DESCRIBE)]
    for f in client.create_acls(acls, request_timeout=30).values():
        f.result(timeout=30)
    alice = ("alice", "alice-secret")
    cid = requests.get(f"{dst.http}/v3/clusters", auth=alice, timeout=10).json()["data"][0]["cluster_id"]
    base = f"{dst.http}/v3/clusters/{cid}/links"
    wait_until(lambda: requests.get(base, auth=alice, timeout=10).status_code == 200, timeout=15,
               what="alice may describe links")
    body = {"link_name": "l", "bootstrap_servers": "127.0.0.1:1", "topics": ["t"], "skip_validation": True}
    r = requests.post(base, json=body, auth=alice, timeout=10)
    assert r.status_code == 403 and r.json()["error_code"] == 40301, r.text
    assert "User:alice" in r.json()["message"] and "ALTER" in r.json()["message"].upper(), r.text


def test_bad_links_say_why_and_corrupt_nothing(broker_factory):
    src = broker_factory("mirror-src-b")
    dst = broker_factory("mirror-dst-b")
    # An unreachable source: refused at create, one line naming the address.
    r = links(dst, "create", "nowhere", "--bootstrap", "127.0.0.1:1", "--topics", "x", check=False)
    assert r.returncode != 0 and "127.0.0.1:1" in r.stderr, r.stderr
    # An unknown CLI flag value / bad pattern is refused with the reason.
    r = links(dst, "create", "badre", "--bootstrap", src.bootstrap, "--topics", "re:(", check=False)
    assert r.returncode != 0 and "pattern" in r.stderr, r.stderr

    # Partition count grows at the source: followed. The source topic deleted: failed, with why.
    topic = unique("grow")
    create_topic(src.bootstrap, topic, partitions=1)
    produce_varied(src.bootstrap, topic, 1, 100)
    links(dst, "create", "grow", "--bootstrap", src.bootstrap, "--topics", topic)
    wait_mirrored(src.bootstrap, dst.bootstrap, topic, [0])
    from confluent_kafka.admin import NewPartitions

    a = AdminClient({"bootstrap.servers": src.bootstrap})
    for f in a.create_partitions([NewPartitions(topic, 3)]).values():
        f.result(30)
    produce_varied(src.bootstrap, topic, 3, 300)
    wait_mirrored(src.bootstrap, dst.bootstrap, topic, range(3))
    assert_identical(read_all(src.bootstrap, topic, range(3)), read_all(dst.bootstrap, topic, range(3)))
    # A source config change is followed (the overrides Oxbow knows).
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

    res = ConfigResource(
        ResourceType.TOPIC, topic,
        incremental_configs=[ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)],
    )
    a.incremental_alter_configs([res], request_timeout=15)[res].result(timeout=15)

    def config_followed():
        d = AdminClient({"bootstrap.servers": dst.bootstrap})
        r = ConfigResource(ResourceType.TOPIC, topic)
        got = d.describe_configs([r], request_timeout=15)[r].result(timeout=15)
        e = got.get("retention.ms")
        return e is not None and e.value == "86400000" and e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    wait_until(config_followed, timeout=MIRROR_TIMEOUT, what="the source's retention.ms on the mirror")
    before = read_all(dst.bootstrap, topic, range(3))
    for f in a.delete_topics([topic]).values():
        f.result(30)

    def failed():
        v = requests.get(f"{dst.http}/v3/clusters", timeout=5).json()
        cid = v["data"][0]["cluster_id"]
        link = requests.get(f"{dst.http}/v3/clusters/{cid}/links/grow", timeout=30).json()
        m = [t for t in link["mirror_topics"] if t["topic_name"] == topic]
        return m and m[0]["state"] == "failed" and m[0]
    m = wait_until(failed, timeout=MIRROR_TIMEOUT, what="mirror topic failed after its source was deleted")
    assert "no longer exists" in m["error"], m
    out = links(dst, "describe", "grow").stdout
    assert "failed" in out and "no longer exists" in out, out
    # What was mirrored is intact and still read-only.
    assert read_all(dst.bootstrap, topic, range(3)) == before
    # Deleting the link needs its mirrors promoted (or --force).
    r = links(dst, "delete", "grow", check=False)
    assert r.returncode != 0 and "promote" in r.stderr, r.stderr
    links(dst, "promote", "grow")
    links(dst, "delete", "grow")
    assert "grow" not in links(dst, "list").stdout
    _ = json  # used by debugging prints when a test fails
