"""Records the request frames real Kafka clients send, as seeds for the protocol fuzzer.

Starts `target/debug/oxbow` advertising a recording proxy's address (so every connection a
client opens, bootstrap and per-broker alike, goes through the proxy), then runs
confluent-kafka (librdkafka), kafka-python, Apache Kafka's Java tools and kcat against it.
Each client-to-broker frame (length prefix included, exactly as sent) is written to
`requests/<client>-<api key>-v<version>-<sha1 prefix>.bin`, at most PER_KIND frames per
(client, API, version) (PER_KIND_PRODUCE for Produce) and none over FRAME_BYTES_MAX, so the corpus stays small.

    .venv/bin/python gateway/tests/corpus/capture.py   # from the repository root
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from brokers import KAFKA_LIBS, OxbowBroker, free_ports  # noqa: E402

OUT = Path(__file__).resolve().parent / "requests"
PER_KIND = 2
PER_KIND_PRODUCE = 8
FRAME_BYTES_MAX = 64 * 1024
TIMEOUT_S = 120

client_tag = "none"
saved: dict[tuple[str, int, int], int] = {}
lock = threading.Lock()


def record(frame: bytes) -> None:
    if len(frame) > FRAME_BYTES_MAX or len(frame) < 12:
        return
    key = int.from_bytes(frame[4:6], "big", signed=True)
    version = int.from_bytes(frame[6:8], "big", signed=True)
    kind = (client_tag, key, version)
    with lock:
        # Produce carries the record batches (one per codec the clients use): keep more.
        if saved.get(kind, 0) >= (PER_KIND_PRODUCE if key == 0 else PER_KIND):
            return
        saved[kind] = saved.get(kind, 0) + 1
    digest = hashlib.sha1(frame).hexdigest()[:10]
    (OUT / f"{client_tag}-{key:02}-v{version}-{digest}.bin").write_bytes(frame)


def pump(src: socket.socket, dst: socket.socket, parse: bool) -> None:
    buf = b""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
            if parse:
                buf += data
                while len(buf) >= 4:
                    n = int.from_bytes(buf[:4], "big")
                    if len(buf) < 4 + n:
                        break
                    record(buf[: 4 + n])
                    buf = buf[4 + n :]
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def proxy(listener: socket.socket, upstream: str) -> None:
    host, port = upstream.rsplit(":", 1)
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        server = socket.create_connection((host, int(port)), timeout=10)
        server.settimeout(None)
        threading.Thread(target=pump, args=(client, server, True), daemon=True).start()
        threading.Thread(target=pump, args=(server, client, False), daemon=True).start()


def run(cmd: list[str], **kw) -> None:
    subprocess.run(cmd, timeout=TIMEOUT_S, check=True, capture_output=True, **kw)


def confluent(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("corpus-ck", 2, 1)]).values():
        f.result(30)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": codec})
        for i in range(20):
            p.produce("corpus-ck", key=f"k{i}".encode(), value=f"value {i} {codec}".encode() * 3,
                      headers=[("h", b"v")])
        assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "corpus-ck-group",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["corpus-ck"])
    got, deadline = 0, time.monotonic() + 60
    while got < 100 and time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            got += 1
    c.commit(asynchronous=False)
    c.close()
    admin.list_topics(timeout=10)


def kafka_python(bootstrap: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("corpus-kp", 2, 1)])
    admin.list_topics()
    admin.describe_topics(["corpus-kp"])
    admin.list_groups() if hasattr(admin, "list_groups") else None
    admin.close()
    for codec in (None, "gzip"):
        p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, acks="all")
        for i in range(20):
            p.send("corpus-kp", key=b"k", value=b"kafka-python %d" % i, headers=[("h", b"v")])
        p.flush(30)
        p.close()
    c = KafkaConsumer("corpus-kp", bootstrap_servers=bootstrap, group_id="corpus-kp-group",
                      auto_offset_reset="earliest", consumer_timeout_ms=8000)
    for n, _ in enumerate(c):
        if n >= 30:
            break
    c.commit()
    c.close()


def java(bootstrap: str) -> None:
    base = ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{KAFKA_LIBS}/*"]
    run(base + ["org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap,
                "--create", "--topic", "corpus-java", "--partitions", "2"])
    run(base + ["org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap,
                "--describe", "--topic", "corpus-java"])
    run(base + ["org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", bootstrap,
                "--topic", "corpus-java", "--property", "parse.key=true"],
        input=b"".join(b"k%d\tjava %d\n" % (i, i) for i in range(30)))
    run(base + ["org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bootstrap,
                "--topic", "corpus-java", "--group", "corpus-java-group", "--from-beginning",
                "--max-messages", "30", "--timeout-ms", "20000"])
    run(base + ["org.apache.kafka.tools.ProducerPerformance", "--topic", "corpus-java",
                "--num-records", "200", "--record-size", "100", "--throughput", "-1",
                "--producer-props", f"bootstrap.servers={bootstrap}", "compression.type=lz4"])


def kcat(bootstrap: str) -> None:
    run(["kcat", "-b", bootstrap, "-L"])
    run(["kcat", "-b", bootstrap, "-P", "-t", "corpus-kcat", "-K:"], input=b"a:1\nb:2\nc:3\n")
    run(["kcat", "-b", bootstrap, "-C", "-t", "corpus-kcat", "-o", "beginning", "-e", "-q"])
    run(["kcat", "-b", bootstrap, "-G", "corpus-kcat-group", "corpus-kcat", "-o", "beginning", "-e", "-q"])


def main() -> None:
    global client_tag
    OUT.mkdir(parents=True, exist_ok=True)
    proxy_port, = free_ports(1)
    with tempfile.TemporaryDirectory() as work:
        broker = OxbowBroker(Path(work), auto_create_topics=True,
                             extra_args=["--advertised-kafka-addr", f"127.0.0.1:{proxy_port}"])
        listener = socket.create_server(("127.0.0.1", proxy_port))
        threading.Thread(target=proxy, args=(listener, broker.bootstrap), daemon=True).start()
        broker.start()
        bootstrap = f"127.0.0.1:{proxy_port}"
        try:
            for tag, fn in (("librdkafka", confluent), ("kafka-python", kafka_python),
                            ("java", java), ("kcat", kcat)):
                if tag == "kcat" and shutil.which("kcat") is None:
                    continue
                client_tag = tag
                fn(bootstrap)
                client_tag = "none"
        finally:
            broker.close()
            listener.close()
    kinds = sorted({(k[1], k[2]) for k in saved})
    print(f"{sum(saved.values())} frames, {len(kinds)} (API, version) pairs: {kinds}")


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
