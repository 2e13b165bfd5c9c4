"""Kafka's topic configs and runtime config changes: every topic config Kafka defines is
accepted, validated and described; IncrementalAlterConfigs (44) and AlterConfigs (33)
change a live topic, through confluent-kafka, kafka-python, Kafka's own `kafka-configs`
(`kafka.admin.ConfigCommand`) and raw requests for what clients refuse to send; ListOffsets
MAX_TIMESTAMP. The same assertions hold against Apache Kafka (`OXBOW_E2E_TARGET=kafka`),
except the tests marked `oxbow_only` (CLI, HTTP, a two-broker cluster on etcd and moto
whose second broker learns a change through its topic watch)."""

from __future__ import annotations

import json
import shutil
import struct
import time

import pytest
import requests
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    OffsetSpec,
    ResourceType,
)

import kafka_wire as w
from cluster import cluster, etcd_server, moto_server  # noqa: F401
from brokers import KAFKA_LIBS, TARGET, oxbow_bin
from helpers import admin, create_topic, produce_all, producer, run, unique, wait_until

CONFIG_COMMAND = "kafka.admin.ConfigCommand"
GET_OFFSET_SHELL = "org.apache.kafka.tools.GetOffsetShell"
API_INCREMENTAL_ALTER_CONFIGS = 44
API_ALTER_CONFIGS = 33
ERR_INVALID_REQUEST = 42
ERR_INVALID_CONFIG = 40
ERR_UNKNOWN_SERVER_ERROR = -1
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def describe(bootstrap: str, topic: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    client = admin(bootstrap)  # kept until the future resolves: a destroyed client fails it
    return client.describe_configs([res], request_timeout=15)[res].result(timeout=15)


def incremental(bootstrap: str, topic: str, entries: list[ConfigEntry], validate_only: bool = False):
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    client = admin(bootstrap)
    return client.incremental_alter_configs([res], validate_only=validate_only, request_timeout=15)[res].result(
        timeout=15
    )


def op(name: str, value: str | None, kind: AlterConfigOpType) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=kind)


def error_of(call) -> KafkaError:
    with pytest.raises(KafkaException) as e:
        call()
    return e.value.args[0]


def overrides(bootstrap: str, topic: str) -> dict[str, str]:
    return {
        k: c.value
        for k, c in describe(bootstrap, topic).items()
        if c.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }


def test_every_kafka_topic_config_is_accepted_and_described(shared_broker):
    b = shared_broker.bootstrap
    set_at_create = {
        "segment.ms": "3600000",
        "delete.retention.ms": "1000",
        "min.compaction.lag.ms": "5",
        "preallocate": "true",
        "leader.replication.throttled.replicas": "*",
        "min.cleanable.dirty.ratio": "0.25",
        "compression.zstd.level": "7",
        "message.timestamp.type": "LogAppendTime",
    }
    topic = create_topic(b, unique("allcfg"), config=set_at_create)
    got = describe(b, topic)
    for k, v in set_at_create.items():
        assert got[k].value == v, (k, got[k])
        assert got[k].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, (k, got[k])
    # Kafka's defaults, reported as defaults.
    for k, v in {
        "segment.index.bytes": "10485760",
        "flush.messages": "9223372036854775807",
        "unclean.leader.election.enable": "false",
        "max.compaction.lag.ms": "9223372036854775807",
        "local.retention.ms": "-2",
        "compression.gzip.level": "-1",
    }.items():
        assert got[k].value == v, (k, got[k])
        assert got[k].source == ConfigSource.DEFAULT_CONFIG.value, (k, got[k])
    assert not got["segment.ms"].is_default and got["segment.index.bytes"].is_default
    # Synonyms as Kafka lists them: the broker-level default, none where Kafka has none.
    syn = {k: [(s.name, s.value, s.source) for s in c.synonyms.values()] for k, c in got.items()}
    default = ConfigSource.DEFAULT_CONFIG.value
    assert syn["segment.index.bytes"] == [("log.index.size.max.bytes", "10485760", default)], syn
    assert syn["max.message.bytes"] == [("message.max.bytes", "1048588", default)], syn
    assert syn["retention.ms"] == [] and syn["follower.replication.throttled.replicas"] == [], syn
    assert syn["segment.ms"] == [("segment.ms", "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)], syn


def test_a_broker_retention_default_is_described_as_a_static_broker_config(broker_factory):
    b = broker_factory(extra_args=["--log-retention-ms", "3600000"], kafka_props={"log.retention.ms": 3600000})
    topic = create_topic(b.bootstrap, unique("brokerdefault"), config={"retention.bytes": "1000000"})
    got = describe(b.bootstrap, topic)
    static = ConfigSource.STATIC_BROKER_CONFIG.value
    assert (got["retention.ms"].value, got["retention.ms"].source) == ("3600000", static), got["retention.ms"]
    first = next(iter(got["retention.ms"].synonyms.values()))
    assert (first.name, first.value, first.source) == ("log.retention.ms", "3600000", static)
    assert got["retention.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value


@pytest.mark.parametrize(
    "key,value",
    [
        ("segment.bytes", "14"),  # Kafka 4.x: at least 1 MiB
        ("retention.ms", "-2"),
        ("cleanup.policy", "shred"),
        ("compression.gzip.level", "10"),
        ("min.insync.replicas", "0"),
        ("preallocate", "maybe"),
        ("leader.replication.throttled.replicas", "0-1"),
        ("no.such.config", "1"),
    ],
)
def test_create_refuses_what_kafka_refuses(shared_broker, key, value):
    from confluent_kafka.admin import NewTopic

    name = unique("badcfg")
    client = admin(shared_broker.bootstrap)
    f = client.create_topics([NewTopic(name, 1, 1, config={key: value})], request_timeout=15)
    err = error_of(lambda: f[name].result(timeout=15))
    assert err.code() == KafkaError.INVALID_CONFIG, err
    assert key in err.str(), err


def test_incremental_alter_configs_set_delete_append_subtract(shared_broker):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("incr"), config={"retention.ms": "600000", "segment.ms": "3600000"})
    incremental(
        b,
        topic,
        [
            op("retention.ms", "120000", AlterConfigOpType.SET),
            op("segment.ms", None, AlterConfigOpType.DELETE),
            op("cleanup.policy", "compact", AlterConfigOpType.APPEND),
            op("delete.retention.ms", "5000", AlterConfigOpType.SET),
        ],
    )
    assert overrides(b, topic) == {
        "retention.ms": "120000",
        "cleanup.policy": "delete,compact",
        "delete.retention.ms": "5000",
    }
    got = describe(b, topic)
    assert got["segment.ms"].value == "604800000" and got["segment.ms"].is_default
    incremental(b, topic, [op("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)])
    assert overrides(b, topic)["cleanup.policy"] == "compact"
    # Appending what is there changes nothing.
    incremental(b, topic, [op("cleanup.policy", "compact", AlterConfigOpType.APPEND)])
    assert overrides(b, topic)["cleanup.policy"] == "compact"

    # validate_only: checked, not stored.
    incremental(b, topic, [op("retention.ms", "1", AlterConfigOpType.SET)], validate_only=True)
    assert overrides(b, topic)["retention.ms"] == "120000"
    err = error_of(lambda: incremental(b, topic, [op("retention.ms", "-9", AlterConfigOpType.SET)], True))
    assert err.code() == KafkaError.INVALID_CONFIG, err


def test_bad_incremental_alterations(shared_broker):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("incrbad"), config={"retention.ms": "600000"})
    cases = [
        ("missing-" + topic, [op("retention.ms", "1", AlterConfigOpType.SET)], KafkaError.UNKNOWN_TOPIC_OR_PART),
        (topic, [op("no.such.config", "1", AlterConfigOpType.SET)], KafkaError.INVALID_CONFIG),
        (topic, [op("retention.ms", "soon", AlterConfigOpType.SET)], KafkaError.INVALID_CONFIG),
        (topic, [op("retention.ms", "1", AlterConfigOpType.SUBTRACT)], KafkaError.INVALID_CONFIG),
        (topic, [op("segment.bytes", "1024", AlterConfigOpType.SET)], KafkaError.INVALID_CONFIG),
        (topic, [op("cleanup.policy", "shred", AlterConfigOpType.APPEND)], KafkaError.INVALID_CONFIG),
    ]
    for name, entries, code in cases:
        err = error_of(lambda: incremental(b, name, entries))
        assert err.code() == code, (entries, err)
        if code == KafkaError.INVALID_CONFIG:
            assert entries[0].name in err.str(), err
    # A refused request changed nothing, not even its valid entries.
    err = error_of(
        lambda: incremental(
            b, topic, [op("segment.ms", "1000", AlterConfigOpType.SET), op("retention.ms", "x", AlterConfigOpType.SET)]
        )
    )
    assert err.code() == KafkaError.INVALID_CONFIG
    assert overrides(b, topic) == {"retention.ms": "600000"}


def test_alter_configs_replaces_the_overrides(shared_broker):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("replace"), config={"retention.ms": "600000", "segment.ms": "3600000"})
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"cleanup.policy": "compact", "flush.ms": "1000"})
    client = admin(b)
    client.alter_configs([res], request_timeout=15)[res].result(timeout=15)
    assert overrides(b, topic) == {"cleanup.policy": "compact", "flush.ms": "1000"}
    bad = ConfigResource(ResourceType.TOPIC, topic, set_config={"flush.ms": "-1"})
    err = error_of(lambda: client.alter_configs([bad], request_timeout=15)[bad].result(timeout=15))
    assert err.code() == KafkaError.INVALID_CONFIG and "flush.ms" in err.str(), err
    assert overrides(b, topic) == {"cleanup.policy": "compact", "flush.ms": "1000"}


def test_a_change_takes_effect_on_the_live_topic(shared_broker):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("live"))
    p = producer(b, **{"batch.size": 1, "linger.ms": 0, "enable.idempotence": False, "retries": 0})
    produce_all(p, topic, [{"value": b"x" * 4000}])
    incremental(b, topic, [op("max.message.bytes", "1000", AlterConfigOpType.SET)])

    def refused() -> bool:
        errors = []
        p.produce(topic, b"y" * 4000, on_delivery=lambda e, m: errors.append(e))
        p.flush(15)
        return bool(errors) and errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE

    wait_until(refused, timeout=15, what="a 4 KB record refused by max.message.bytes=1000")


def _delivery_error(p, topic: str, key: bytes | None, value: bytes):
    errors = []
    p.produce(topic, value, key=key, on_delivery=lambda e, m: errors.append(e))
    p.flush(15)
    assert errors, "no delivery report within 15 s"
    return errors[0]


@pytest.mark.skipif(
    TARGET == "kafka",
    reason="Kafka caps min.insync.replicas at the topic's replication factor (1 on one broker); "
    "Oxbow counts WAL copies and refuses until a second broker holds one",
)
def test_min_insync_replicas_applies_to_the_next_batch(shared_broker):
    """A single broker has one in-sync WAL copy: raising min.insync.replicas to 2 refuses
    acks=all at once (no leader change needed), and lowering it lets the same producer in."""
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("minisr"))
    p = producer(b, **{"acks": "all", "linger.ms": 0, "enable.idempotence": False, "retries": 0})
    assert _delivery_error(p, topic, None, b"before") is None
    incremental(b, topic, [op("min.insync.replicas", "2", AlterConfigOpType.SET)])
    wait_until(
        lambda: (e := _delivery_error(p, topic, None, b"refused")) is not None
        and e.code() == KafkaError.NOT_ENOUGH_REPLICAS,
        timeout=15,
        what="acks=all refused with NOT_ENOUGH_REPLICAS",
    )
    incremental(b, topic, [op("min.insync.replicas", None, AlterConfigOpType.DELETE)])
    wait_until(lambda: _delivery_error(p, topic, None, b"after") is None, timeout=15, what="acks=all accepted again")


def test_cleanup_policy_compact_refuses_keyless_records_on_the_live_topic(shared_broker):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("tocompact"))
    p = producer(b, **{"linger.ms": 0, "enable.idempotence": False, "retries": 0})
    assert _delivery_error(p, topic, None, b"keyless while delete") is None
    incremental(b, topic, [op("cleanup.policy", "compact", AlterConfigOpType.SET)])
    wait_until(
        lambda: (e := _delivery_error(p, topic, None, b"keyless")) is not None
        and e.code() == KafkaError.INVALID_RECORD,
        timeout=15,
        what="a keyless record refused with INVALID_RECORD",
    )
    assert _delivery_error(p, topic, b"k", b"keyed") is None


# -- raw requests: what clients refuse to send --------------------------------------------


def _incremental_body(resources, validate_only=False, resource_type=RESOURCE_TOPIC) -> bytes:
    """IncrementalAlterConfigs v0: resources of (name, [(key, op, value)])."""
    out = struct.pack(">i", len(resources))
    for name, configs in resources:
        out += struct.pack(">b", resource_type) + w.string(name) + struct.pack(">i", len(configs))
        for key, kind, value in configs:
            out += w.string(key) + struct.pack(">b", kind) + w.string(value)
    return out + struct.pack(">?", validate_only)


def _alter_body(name: str, configs: list[tuple[str, str]]) -> bytes:
    out = struct.pack(">i", 1) + struct.pack(">b", RESOURCE_TOPIC) + w.string(name) + struct.pack(">i", len(configs))
    for key, value in configs:
        out += w.string(key) + w.string(value)
    return out + struct.pack(">?", False)


def _responses(body: bytes) -> list[tuple[int, str | None, str]]:
    r = w.Reader(body)
    r.int32()  # throttle
    out = []
    for _ in range(r.int32()):
        code, message = r.int16(), r.string()
        r.int8()
        out.append((code, message, r.string()))
    return out


def test_duplicate_keys_and_bad_ops_are_invalid_requests(shared_broker):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("raw"), config={"retention.ms": "600000"})
    with w.KafkaConn(b) as conn:
        dup = [(topic, [("retention.ms", OP_SET, "1000"), ("retention.ms", OP_DELETE, None)])]
        [(code, _, name)] = _responses(conn.call(API_INCREMENTAL_ALTER_CONFIGS, 0, _incremental_body(dup)))
        assert (code, name) == (ERR_INVALID_REQUEST, topic)
        [(code, _, _)] = _responses(conn.call(API_ALTER_CONFIGS, 0, _alter_body(topic, [("flush.ms", "1"), ("flush.ms", "2")])))
        assert code == ERR_INVALID_REQUEST
        # An op id Kafka does not define: Kafka 4.1 fails on it (UNKNOWN_SERVER_ERROR, its
        # null op type); Oxbow answers INVALID_REQUEST.
        bad_op = [(topic, [("retention.ms", 9, "1000")])]
        [(code, _, _)] = _responses(conn.call(API_INCREMENTAL_ALTER_CONFIGS, 0, _incremental_body(bad_op)))
        assert code == (ERR_UNKNOWN_SERVER_ERROR if TARGET == "kafka" else ERR_INVALID_REQUEST)
        # Broker configs: one Kafka cannot change at run time is INVALID_REQUEST on both; Kafka
        # stores an unknown broker key, Oxbow (whose broker settings are its flags) refuses
        # every broker key the same way.
        for key, kafka_code in (("broker.id", ERR_INVALID_REQUEST), ("no.such.broker.config", 0)):
            body = _incremental_body([("1", [(key, OP_SET, "2")])], resource_type=RESOURCE_BROKER)
            [(code, message, _)] = _responses(conn.call(API_INCREMENTAL_ALTER_CONFIGS, 0, body))
            assert code == (kafka_code if TARGET == "kafka" else ERR_INVALID_REQUEST), (key, code, message)
            if code:
                assert "Cannot update these configs dynamically" in message and key in message, message
        # Per resource: the good one lands, the bad one is refused alone.
        both = [(topic, [("retention.ms", OP_SET, "7000")]), ("missing-" + topic, [("retention.ms", OP_SET, "1")])]
        got = _responses(conn.call(API_INCREMENTAL_ALTER_CONFIGS, 0, _incremental_body(both)))
        assert [c for c, _, _ in got] == [0, w.ERR_UNKNOWN_TOPIC_OR_PARTITION], got
    assert overrides(b, topic) == {"retention.ms": "7000"}


# -- kafka-python and Kafka's kafka-configs ---------------------------------------------------


def test_kafka_python_alters_and_describes(shared_broker):
    from kafka.admin import ConfigResource as KpResource, ConfigResourceType, KafkaAdminClient

    b = shared_broker.bootstrap
    topic = create_topic(b, unique("kpcfg"))
    client = KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=15000)
    try:
        client.alter_configs([KpResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "3600000"})])
        every = client.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        values = {k: c.get("value") for k, c in every["topic"][topic].items()}
        assert values["retention.ms"] == "3600000", values
        assert values["segment.ms"] == "604800000", values
        modified = client.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)])
        assert set(modified["topic"][topic]) == {"retention.ms"}, modified
    finally:
        client.close()


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    if shutil.which("java") is None or not any(KAFKA_LIBS.glob("kafka_2.13-*.jar")):
        pytest.fail(f"java or the Kafka jars in {KAFKA_LIBS} are missing: run `scripts/test.sh setup`")
    log4j = tmp_path_factory.mktemp("java") / "tools-log4j2.properties"
    log4j.write_text(
        "status = error\nappender.err.type = Console\nappender.err.name = STDERR\n"
        "appender.err.target = SYSTEM_ERR\nappender.err.layout.type = PatternLayout\n"
        "appender.err.layout.pattern = %p %m%n\nrootLogger.level = WARN\nrootLogger.appenderRef.err.ref = STDERR\n"
    )

    def run_java(*args: str, check: bool = True, main: str = CONFIG_COMMAND):
        cmd = ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={log4j}"]
        return run([*cmd, "-cp", f"{KAFKA_LIBS}/*", main, *args], timeout=120, check=check)

    return run_java


def test_kafka_configs_tool_alters_a_live_topic(shared_broker, java):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("jcfg"), config={"segment.ms": "3600000"})
    entity = ["--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic]
    out = java(*entity, "--alter", "--add-config", "retention.ms=120000,cleanup.policy=[compact,delete]").stdout
    assert f"Completed updating config for topic {topic}." in out, out
    java(*entity, "--alter", "--delete-config", "segment.ms")
    assert overrides(b, topic) == {"retention.ms": "120000", "cleanup.policy": "compact,delete"}

    desc = java(*entity, "--describe").stdout
    assert "retention.ms=120000" in desc and "cleanup.policy=compact,delete" in desc, desc
    assert "segment.ms" not in desc, desc
    # With synonyms: the override, then the broker-level default where Kafka has one.
    assert "synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=120000}" in desc, desc
    assert (
        "synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}"
        in desc
    ), desc
    every = java(*entity, "--describe", "--all").stdout
    assert "segment.ms=604800000" in every and "delete.retention.ms=86400000" in every, every

    bad = java(*entity, "--alter", "--add-config", "retention.ms=never", check=False)
    assert bad.returncode != 0 and "retention.ms" in (bad.stdout + bad.stderr), bad.stdout + bad.stderr
    gone = java(*entity[:-1], "missing-" + topic, "--alter", "--add-config", "retention.ms=1", check=False)
    assert gone.returncode != 0


# -- ListOffsets ----------------------------------------------------------------------------


def test_list_offsets_max_timestamp(shared_broker):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("maxts"))
    tp = TopicPartition(topic, 0)
    client = admin(b)

    def listed(spec):
        return client.list_offsets({tp: spec}, request_timeout=15)[tp].result(timeout=15)

    empty = listed(OffsetSpec.max_timestamp())
    assert empty.offset == -1, empty
    now = int(time.time() * 1000)
    p = producer(b)
    # The largest timestamp first lands in what is sealed by now (flush interval 250 ms)...
    produce_all(p, topic, [{"value": b"a", "timestamp": now - 50_000}, {"value": b"b", "timestamp": now - 10_000}])
    produce_all(p, topic, [{"value": b"c", "timestamp": now - 30_000}])
    time.sleep(1.0)
    got = listed(OffsetSpec.max_timestamp())
    assert (got.offset, got.timestamp) == (1, now - 10_000), got
    # ... then in the tail, twice: the first record carrying it is the answer.
    produce_all(p, topic, [{"value": b"d", "timestamp": now - 5_000}, {"value": b"e", "timestamp": now - 5_000}])
    got = listed(OffsetSpec.max_timestamp())
    assert (got.offset, got.timestamp) == (3, now - 5_000), got
    assert listed(OffsetSpec.latest()).offset == 5
    assert listed(OffsetSpec.earliest()).offset == 0


def test_get_offset_shell_every_sentinel(shared_broker, java):
    """kafka-get-offsets.sh (the Java client, ListOffsets v10): -1 latest, -2 earliest, -3
    max timestamp, -4 earliest-local (the log start here), -5 latest-tiered (no tiered
    storage: offset -1, which the tool leaves out)."""
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("gos"))
    now = int(time.time() * 1000)
    records = [{"value": b"a", "timestamp": now - 5000}, {"value": b"b", "timestamp": now - 1000},
               {"value": b"c", "timestamp": now - 3000}]  # fmt: skip
    produce_all(producer(b), topic, records)
    want = {"-1": f"{topic}:0:3", "-2": f"{topic}:0:0", "-3": f"{topic}:0:1", "-4": f"{topic}:0:0", "-5": ""}
    for time_arg, line in want.items():
        out = java("--bootstrap-server", b, "--topic", topic, "--time", time_arg, main=GET_OFFSET_SHELL).stdout
        assert out.strip() == line, (time_arg, out)


# -- Oxbow's own surfaces -----------------------------------------------------------------------


@pytest.mark.oxbow_only
def test_cli_alter_config(shared_broker):
    b = ["--bootstrap", shared_broker.bootstrap]
    topic = create_topic(shared_broker.bootstrap, unique("clicfg"), config={"segment.ms": "3600000"})

    def oxbow(*args, check=True):
        return run([str(oxbow_bin()), *args], timeout=60, check=check)

    out = oxbow("topics", "alter-config", topic, "--set", "retention.ms=60000", "--delete", "segment.ms", *b)
    assert f"Completed updating config for topic {topic}." in out.stdout, out.stdout
    assert overrides(shared_broker.bootstrap, topic) == {"retention.ms": "60000"}
    assert "retention.ms=60000" in oxbow("topics", "describe", topic, *b).stdout

    bad = oxbow("topics", "alter-config", topic, "--set", "retention.ms=-7", *b, check=False)
    assert bad.returncode != 0 and "retention.ms" in bad.stderr, bad.stderr
    flag = oxbow("topics", "alter-config", topic, "--set", "nonsense", *b, check=False)
    assert flag.returncode != 0 and "--set" in flag.stderr, flag.stderr
    gone = oxbow("topics", "alter-config", "missing-" + topic, "--set", "retention.ms=1", *b, check=False)
    assert gone.returncode != 0 and "missing-" + topic in gone.stderr, gone.stderr


@pytest.mark.oxbow_only
def test_http_v3_topic_configs(shared_broker):
    base = shared_broker.http
    cluster_id = requests.get(f"{base}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
    topic = create_topic(shared_broker.bootstrap, unique("httpcfg"))
    configs = f"{base}/v3/clusters/{cluster_id}/topics/{topic}/configs"
    hdr = {"Content-Type": "application/json"}

    listed = requests.get(configs, timeout=10).json()
    names = {c["name"]: c for c in listed["data"]}
    assert names["segment.ms"]["value"] == "604800000" and names["segment.ms"]["is_default"]
    r = requests.put(f"{configs}/retention.ms", data=json.dumps({"value": "60000"}), headers=hdr, timeout=10)
    assert r.status_code == 204, r.text
    one = requests.get(f"{configs}/retention.ms", timeout=10).json()
    assert (one["value"], one["source"], one["is_default"]) == ("60000", "DYNAMIC_TOPIC_CONFIG", False), one
    body = {"data": [{"name": "segment.ms", "value": "1000"}, {"name": "retention.ms", "operation": "DELETE"}]}
    r = requests.post(f"{configs}:alter", data=json.dumps(body), headers=hdr, timeout=10)
    assert r.status_code == 204, r.text
    assert overrides(shared_broker.bootstrap, topic) == {"segment.ms": "1000"}
    r = requests.delete(f"{configs}/segment.ms", timeout=10)
    assert r.status_code == 204, r.text
    assert overrides(shared_broker.bootstrap, topic) == {}

    bad = requests.put(f"{configs}/retention.ms", data=json.dumps({"value": "-9"}), headers=hdr, timeout=10)
    assert bad.status_code == 422 and "retention.ms" in bad.json()["message"], bad.text
    unknown = requests.get(f"{configs}/no.such.config", timeout=10)
    assert unknown.status_code == 404 and unknown.json()["error_code"] == 40405, unknown.text
    missing = requests.put(
        f"{base}/v3/clusters/{cluster_id}/topics/missing-{topic}/configs/retention.ms",
        data=json.dumps({"value": "1"}),
        headers=hdr,
        timeout=10,
    )
    assert missing.status_code == 404, missing.text
    shape = requests.post(f"{configs}:alter", data=json.dumps({"data": [{"name": "x", "operation": "APPEND"}]}),
                          headers=hdr, timeout=10)
    assert 400 <= shape.status_code < 500 and "APPEND" in shape.json()["message"], shape.text


@pytest.mark.oxbow_only
def test_a_change_reaches_every_broker_through_the_topic_watch(cluster):
    c = cluster(2, flush_interval="100ms")
    topic = create_topic(c.bootstrap, unique("watched"), 4)
    leaders = c.leaders(topic)
    assert set(leaders.values()) == {1, 2}, leaders
    one, two = c.broker(1).bootstrap, c.broker(2).bootstrap
    # Sent to broker 1 alone (an admin client may pick any broker): broker 2 learns of it
    # from the metadata service.
    with w.KafkaConn(one) as conn:
        body = _incremental_body([(topic, [("max.message.bytes", OP_SET, "1000")])])
        assert _responses(conn.call(API_INCREMENTAL_ALTER_CONFIGS, 0, body)) == [(0, None, topic)]
    wait_until(
        lambda: describe(two, topic)["max.message.bytes"].value == "1000",
        timeout=15,
        what="broker 2 describing the new max.message.bytes",
    )
    part = min(p for p, b in leaders.items() if b == 2)
    p = producer(two, **{"enable.idempotence": False, "retries": 0, "linger.ms": 0})

    def refused() -> bool:
        errors = []
        p.produce(topic, b"z" * 4000, partition=part, on_delivery=lambda e, m: errors.append(e))
        p.flush(15)
        return bool(errors) and errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE

    wait_until(refused, timeout=15, what="broker 2 refusing a 4 KB record")
