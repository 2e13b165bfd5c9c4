"""Kafka ACL authorization (`--authorizer acl`; Kafka's `StandardAuthorizer`), seen by real
clients: confluent-kafka (librdkafka), kafka-python and Kafka's own `kafka-acls.sh`
(`org.apache.kafka.tools.AclCommand`).

Every client here is `User:ANONYMOUS` (PLAINTEXT). The shared broker runs with
`--allow-everyone-if-no-acl-found`, so a resource no ACL names stays open, and a test closes
one by writing an ACL for another principal (`User:owner`) on it: then ANONYMOUS is refused
until an ACL allows it — the rule "an ACL on a resource closes it to everyone it does not
allow". `test_closed_by_default_then_super_user` restarts a broker without that flag.

With OXBOW_E2E_TARGET=kafka the same tests (all but the Oxbow-only ones) run against Apache
Kafka configured alike (StandardAuthorizer, allow.everyone.if.no.acl.found=true)."""

from __future__ import annotations

import gc

import shutil
import time

import pytest
import requests
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    NewTopic,
    ResourceType,
)

from brokers import KAFKA_LIBS, TARGET, oxbow_bin
from helpers import admin, consumer, create_topic, produce_all, producer, run, unique, wait_until

ANON = "User:ANONYMOUS"
OWNER = "User:owner"
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
LITERAL = ResourcePatternType.LITERAL
PREFIXED = ResourcePatternType.PREFIXED

KAFKA_AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}


@pytest.fixture(scope="module")
def acl_broker(module_broker_factory):
    return module_broker_factory(
        extra_args=["--authorizer", "acl", "--allow-everyone-if-no-acl-found"],
        kafka_props=KAFKA_AUTHORIZER,
    )


def binding(rt, name, principal, op, perm=ALLOW, pattern=LITERAL, host="*") -> AclBinding:
    return AclBinding(rt, name, pattern, principal, host, op, perm)


def add_acls(bootstrap: str, *bindings: AclBinding) -> None:
    """Creates the bindings and waits until DescribeAcls shows them (Kafka's authorizer
    learns them from its metadata log a moment later; Oxbow's at once)."""
    client = admin(bootstrap)
    for f in client.create_acls(list(bindings), request_timeout=30).values():
        f.result(timeout=30)

    def shown():
        everything = AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
        )
        have = set(client.describe_acls(everything, request_timeout=10).result(timeout=15))
        return all(b in have for b in bindings)

    wait_until(shown, timeout=30, what="the new ACLs to be described")
    # Kafka: describe and enforcement read the same cache, but give the broker's own
    # listener a beat; Oxbow needs none.
    if TARGET == "kafka":
        time.sleep(0.5)


def close_topic(bootstrap: str, topic: str) -> None:
    """An ACL for someone else closes the topic to ANONYMOUS."""
    add_acls(bootstrap, binding(ResourceType.TOPIC, topic, OWNER, AclOperation.ALL))


def close_cluster_delete(bootstrap: str) -> None:
    """Grants ANONYMOUS every cluster operation a broker and these tests use but DELETE,
    so the cluster is no longer ACL-less and DELETE on it (which may delete any topic) is
    refused."""
    ops = [
        AclOperation.ALTER,  # the ACL APIs
        AclOperation.DESCRIBE,
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,  # Kafka's own broker is ANONYMOUS too
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.DESCRIBE_CONFIGS,
    ]
    add_acls(bootstrap, *[binding(ResourceType.BROKER, "kafka-cluster", ANON, op) for op in ops])


def produce_error(bootstrap: str, topic: str):
    """The delivery error of one record (None: delivered)."""
    p = Producer(
        {"bootstrap.servers": bootstrap, "message.timeout.ms": 15000, "enable.idempotence": False, "log_level": 0}
    )
    result = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: result.append(err))
    assert p.flush(30) == 0, "no delivery report within 30 s"
    return result[0]


def fetch_outcome(bootstrap: str, topic: str, timeout: float = 20):
    """('records', n) once the assigned partition 0 yields records, or ('error', code)."""
    c = consumer(bootstrap, **{"group.id": unique("assign"), "enable.partition.eof": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in c.consume(num_messages=100, timeout=0.5):
                if m.error() is not None:
                    return ("error", m.error().code())
                return ("records", 1)
        return ("nothing", None)
    finally:
        c.close()


def test_kafka_acls_tool_adds_lists_and_removes(acl_broker, tmp_path):
    if shutil.which("java") is None or not any(KAFKA_LIBS.glob("kafka-tools-*.jar")):
        pytest.fail("java or the Kafka tool jars are missing (scripts/test.sh setup)")
    log4j = tmp_path / "log4j2.properties"
    log4j.write_text("status = error\nrootLogger.level = ERROR\n")

    def acls(*args: str) -> str:
        cmd = ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={log4j}"]
        cmd += ["-cp", f"{KAFKA_LIBS}/*", "org.apache.kafka.tools.AclCommand"]
        cmd += ["--bootstrap-server", acl_broker.bootstrap, *args]
        return run(cmd, timeout=120).stdout

    topic, prefix, group = unique("tool"), unique("toolp"), unique("toolg")
    acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic)
    acls(
        "--add", "--deny-principal", "User:bob", "--operation", "Write",
        "--topic", prefix, "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    acls("--add", "--allow-principal", "User:carol", "--producer", "--topic", topic)
    acls("--add", "--allow-principal", "User:dave", "--consumer", "--topic", topic, "--group", group)
    out = acls("--list", "--topic", topic)
    assert f"name={topic}, patternType=LITERAL" in out, out
    for line in [
        "principal=User:alice, host=*, operation=READ, permissionType=ALLOW",
        "principal=User:carol, host=*, operation=WRITE, permissionType=ALLOW",
        "principal=User:carol, host=*, operation=CREATE, permissionType=ALLOW",
        "principal=User:carol, host=*, operation=DESCRIBE, permissionType=ALLOW",
        "principal=User:dave, host=*, operation=READ, permissionType=ALLOW",
    ]:
        assert line in out, f"{line} missing from:\n{out}"
    out = acls("--list", "--topic", prefix, "--resource-pattern-type", "prefixed")
    assert "principal=User:bob, host=*, operation=WRITE, permissionType=DENY" in out, out
    # MATCH: every pattern that applies to a topic under the prefix.
    out = acls("--list", "--topic", prefix + "-x", "--resource-pattern-type", "match")
    assert f"name={prefix}, patternType=PREFIXED" in out, out
    out = acls("--list", "--group", group)
    assert "principal=User:dave, host=*, operation=READ, permissionType=ALLOW" in out, out

    acls("--remove", "--force", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic)
    out = acls("--list", "--topic", topic)
    assert "User:alice" not in out and "User:carol" in out, out
    acls("--remove", "--force", "--topic", topic)
    acls("--remove", "--force", "--group", group)
    acls("--remove", "--force", "--topic", prefix, "--resource-pattern-type", "prefixed")
    for args in (["--topic", topic], ["--group", group], ["--topic", prefix, "--resource-pattern-type", "prefixed"]):
        assert "principal=" not in acls("--list", *args)


def test_produce_needs_write_and_fetch_needs_read(acl_broker):
    b = acl_broker.bootstrap
    topic = create_topic(b, unique("pf"))
    assert produce_error(b, topic) is None, "an ACL-less topic is open (allow-everyone)"
    close_topic(b, topic)
    err = produce_error(b, topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err

    add_acls(b, binding(ResourceType.TOPIC, topic, ANON, AclOperation.WRITE))
    assert produce_error(b, topic) is None
    # WRITE implies DESCRIBE (metadata, offsets) but not READ.
    assert fetch_outcome(b, topic) == ("error", KafkaError.TOPIC_AUTHORIZATION_FAILED)
    add_acls(b, binding(ResourceType.TOPIC, topic, ANON, AclOperation.READ))
    assert fetch_outcome(b, topic) == ("records", 1)


def test_deny_beats_allow_and_prefixes_apply(acl_broker):
    b = acl_broker.bootstrap
    prefix = unique("deny")
    topic = create_topic(b, prefix + "-orders")
    add_acls(
        b,
        binding(ResourceType.TOPIC, topic, ANON, AclOperation.ALL),
        binding(ResourceType.TOPIC, prefix, ANON, AclOperation.WRITE, perm=DENY, pattern=PREFIXED),
    )
    err = produce_error(b, topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    # The DENY is of WRITE only: READ (and the DESCRIBE it implies) stay allowed.
    md = admin(b).list_topics(topic, timeout=10).topics[topic]
    assert md.error is None, md.error
    assert fetch_outcome(b, topic, timeout=5) == ("nothing", None)


def test_metadata_hides_topics_the_client_may_not_describe(acl_broker):
    b = acl_broker.bootstrap
    visible, hidden = create_topic(b, unique("seen")), create_topic(b, unique("hidden"))
    close_topic(b, hidden)
    names = set(admin(b).list_topics(timeout=10).topics)
    assert visible in names and hidden not in names, names
    t = admin(b).list_topics(hidden, timeout=10).topics[hidden]
    assert t.error is not None and t.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, t.error
    # A topic that does not exist is refused alike when the client may not describe it.
    prefix = unique("ghost")
    add_acls(b, binding(ResourceType.TOPIC, prefix, OWNER, AclOperation.ALL, pattern=PREFIXED))
    ghost = prefix + "-nope"
    t = admin(b).list_topics(ghost, timeout=10).topics[ghost]
    assert t.error is not None and t.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, t.error


def test_delete_topic_needs_describe_and_delete(broker_factory):
    """DELETE on the cluster may delete every topic (Kafka's ControllerApis.deleteTopics),
    so this broker's cluster is closed to all but the operations a broker and this test
    need; then a topic's DESCRIBE and DELETE decide."""
    b = broker_factory(
        extra_args=["--authorizer", "acl", "--allow-everyone-if-no-acl-found"], kafka_props=KAFKA_AUTHORIZER
    ).bootstrap
    close_cluster_delete(b)
    topic = create_topic(b, unique("del"))
    close_topic(b, topic)

    def delete_error():
        client = admin(b)
        try:
            client.delete_topics([topic], operation_timeout=30)[topic].result(timeout=30)
            return None
        except KafkaException as e:
            return e.args[0].code()

    assert delete_error() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    add_acls(b, binding(ResourceType.TOPIC, topic, ANON, AclOperation.DESCRIBE))
    assert delete_error() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert topic in admin(b).list_topics(timeout=10).topics, "the refused delete left it"
    add_acls(b, binding(ResourceType.TOPIC, topic, ANON, AclOperation.DELETE))
    assert delete_error() is None
    wait_until(lambda: topic not in admin(b).list_topics(timeout=10).topics, timeout=30, what="topic gone")


def test_groups_need_read_confluent_and_kafka_python(acl_broker):
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    b = acl_broker.bootstrap
    topic = create_topic(b, unique("grp"))
    assert produce_error(b, topic) is None
    group = unique("g")
    add_acls(b, binding(ResourceType.GROUP, group, OWNER, AclOperation.ALL))

    c = consumer(b, **{"group.id": group, "enable.partition.eof": False})
    try:
        c.subscribe([topic])
        seen = None
        deadline = time.monotonic() + 20
        while seen is None and time.monotonic() < deadline:
            for m in c.consume(num_messages=10, timeout=0.5):
                seen = m.error().code() if m.error() else "record"
                break
        assert seen == KafkaError.GROUP_AUTHORIZATION_FAILED, seen
    finally:
        c.close()

    kp = KafkaConsumer(
        topic, bootstrap_servers=b, group_id=group, auto_offset_reset="earliest", consumer_timeout_ms=10000
    )
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                kp.poll(timeout_ms=500)
    finally:
        kp.close()

    add_acls(b, binding(ResourceType.GROUP, group, ANON, AclOperation.READ))
    c = consumer(b, **{"group.id": group, "enable.partition.eof": False, "enable.auto.commit": True})
    try:
        c.subscribe([topic])
        got = None
        deadline = time.monotonic() + 30
        while got is None and time.monotonic() < deadline:
            for m in c.consume(num_messages=10, timeout=0.5):
                got = m.error().code() if m.error() else m.value()
                if m.error() is None:
                    c.commit(message=m, asynchronous=False)
                    break
        assert got == b"v", got
        # OffsetFetch of the group: the committed offset, now that READ is granted.
        committed = c.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed[0].offset == 1, committed
    finally:
        c.close()


def test_admin_apis_are_refused_then_allowed(acl_broker):
    """DescribeConfigs, IncrementalAlterConfigs, CreatePartitions, DeleteRecords,
    ListOffsets, DescribeGroups and DeleteGroups on a topic and a group ANONYMOUS may not
    touch, then may."""
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        OffsetSpec,
    )

    b = acl_broker.bootstrap
    topic, group = create_topic(b, unique("adm")), unique("admg")
    assert produce_error(b, topic) is None
    close_topic(b, topic)
    add_acls(b, binding(ResourceType.GROUP, group, OWNER, AclOperation.ALL))
    client = admin(b)

    def code(future):
        try:
            future.result(timeout=30)
            return None
        except KafkaException as e:
            return e.args[0].code()

    def first(futures):
        return code(next(iter(futures.values())))

    resource = ConfigResource("topic", topic)
    alter = ConfigResource(
        "topic",
        topic,
        incremental_configs=[ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)],
    )
    calls = {
        "describe_configs": lambda: first(client.describe_configs([resource], request_timeout=20)),
        "incremental_alter_configs": lambda: first(client.incremental_alter_configs([alter], request_timeout=20)),
        "create_partitions": lambda: first(client.create_partitions([NewPartitions(topic, 2)], request_timeout=20)),
    }
    for name, call in calls.items():
        assert call() == KafkaError.TOPIC_AUTHORIZATION_FAILED, name
    # librdkafka looks up the leader (Metadata, DESCRIBE) before DeleteRecords and
    # ListOffsets: with DESCRIBE, DeleteRecords still needs DELETE.
    add_acls(b, binding(ResourceType.TOPIC, topic, ANON, AclOperation.DESCRIBE))
    records = [TopicPartition(topic, 0, 1)]
    assert first(client.delete_records(records, request_timeout=20)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    latest = {TopicPartition(topic, 0): OffsetSpec.latest()}
    assert first(client.list_offsets(latest, request_timeout=20)) is None, "DESCRIBE is enough"
    calls["delete_records"] = lambda: first(client.delete_records(records, request_timeout=20))
    assert first(client.describe_consumer_groups([group], request_timeout=20)) == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert first(client.delete_consumer_groups([group], request_timeout=20)) == KafkaError.GROUP_AUTHORIZATION_FAILED

    add_acls(
        b,
        binding(ResourceType.TOPIC, topic, ANON, AclOperation.ALL),
        binding(ResourceType.GROUP, group, ANON, AclOperation.ALL),
    )
    for name, call in calls.items():
        assert call() is None, name
    assert first(client.describe_consumer_groups([group], request_timeout=20)) is None
    assert first(client.delete_consumer_groups([group], request_timeout=20)) != KafkaError.GROUP_AUTHORIZATION_FAILED


def test_acl_apis_answer_security_disabled_without_an_authorizer(shared_broker):
    # kafka-python raises the error; librdkafka 2.x answers an empty list instead.
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KResourceType
    from kafka.errors import SecurityDisabledError

    client = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap, request_timeout_ms=15000)
    try:
        everything = ACLFilter(
            principal=None,
            host="*",
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        with pytest.raises(SecurityDisabledError):
            client.describe_acls(everything)
    finally:
        client.close()


def test_acl_creation_is_validated(acl_broker):
    client = admin(acl_broker.bootstrap)
    bad = binding(ResourceType.BROKER, "not-kafka-cluster", ANON, AclOperation.ALTER)
    with pytest.raises(KafkaException) as e:
        client.create_acls([bad], request_timeout=10)[bad].result(timeout=15)
    assert e.value.args[0].code() == KafkaError.INVALID_REQUEST, e.value


@pytest.mark.oxbow_only
def test_http_routes_are_authorized(broker_factory):
    broker = broker_factory(extra_args=["--authorizer", "acl", "--allow-everyone-if-no-acl-found"])
    b, http = broker.bootstrap, broker.http
    close_cluster_delete(b)
    topic = create_topic(b, unique("http"))
    close_topic(b, topic)
    cluster = requests.get(f"{http}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
    r = requests.delete(f"{http}/v3/clusters/{cluster}/topics/{topic}", timeout=10)
    assert r.status_code == 403 and r.json()["error_code"] == 40301, r.text
    add_acls(b, binding(ResourceType.TOPIC, topic, ANON, AclOperation.DESCRIBE))
    assert topic in admin(b).list_topics(timeout=10).topics, "the refused HTTP DELETE left it"
    r = requests.post(
        f"{http}/topics/{topic}",
        json={"records": [{"value": "x"}]},
        headers={"Content-Type": "application/vnd.kafka.json.v2+json"},
        timeout=10,
    )
    assert r.status_code == 403 and r.json()["error_code"] == 40301, r.text
    hidden = create_topic(b, unique("httphidden"))
    close_topic(b, hidden)
    listed = requests.get(f"{http}/topics", timeout=10).json()
    assert topic in listed and hidden not in listed, listed
    assert requests.get(f"{http}/topics/{hidden}", timeout=10).status_code == 403
    # REST Proxy consumers: READ on the group to create an instance, on a topic to read it.
    v2 = {"Content-Type": "application/vnd.kafka.v2+json"}
    group = unique("httpg")
    r = requests.post(f"{http}/consumers/{group}", json={"name": "c1", "format": "json"}, headers=v2, timeout=10)
    assert r.status_code == 200, r.text
    sub = f"{http}/consumers/{group}/instances/c1/subscription"
    r = requests.post(sub, json={"topics": [hidden]}, headers=v2, timeout=10)
    assert r.status_code == 403 and r.json()["error_code"] == 40301, r.text
    closed_group = unique("httpclosed")
    add_acls(b, binding(ResourceType.GROUP, closed_group, OWNER, AclOperation.ALL))
    r = requests.post(f"{http}/consumers/{closed_group}", json={"name": "c1"}, headers=v2, timeout=10)
    assert r.status_code == 403 and r.json()["error_code"] == 40301, r.text
    requests.delete(f"{http}/consumers/{group}/instances/c1", headers=v2, timeout=10)
    for open_route in ("/healthz", "/readyz", "/metrics"):
        assert requests.get(f"{http}{open_route}", timeout=10).status_code == 200, open_route


@pytest.mark.oxbow_only
def test_closed_by_default_then_super_user(broker_factory):
    """Without --allow-everyone-if-no-acl-found what no ACL names is closed; ACLs written
    earlier (here while it was open) survive a restart; a super user may do anything."""
    b = broker_factory(extra_args=["--authorizer", "acl", "--allow-everyone-if-no-acl-found"])
    mine = unique("mine")
    add_acls(
        b.bootstrap,
        binding(ResourceType.TOPIC, mine, ANON, AclOperation.ALL, pattern=PREFIXED),
        binding(ResourceType.TOPIC, "auto-", ANON, AclOperation.DESCRIBE, pattern=PREFIXED),
        # fetch_outcome's consumers have a group id (librdkafka asks for its coordinator).
        binding(ResourceType.GROUP, "assign-", ANON, AclOperation.READ, pattern=PREFIXED),
    )
    b.options["extra_args"] = ["--authorizer", "acl"]
    b.restart()
    boot = b.bootstrap
    topic = create_topic(boot, mine + "-1")  # CREATE from ALL on the prefix
    assert produce_error(boot, topic) is None
    # An idempotent producer: no IDEMPOTENT_WRITE on the (closed) cluster, but WRITE on a
    # topic is enough for InitProducerId (KIP-679).
    produce_all(producer(boot), topic, [{"value": b"idempotent"}])
    assert fetch_outcome(boot, topic) == ("records", 1)
    client = admin(boot)
    other = unique("other")
    with pytest.raises(KafkaException) as e:
        client.create_topics([NewTopic(other, 1, 1)])[other].result(30)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert set(client.list_topics(timeout=10).topics) == {topic}
    # DESCRIBE without CREATE: no auto-creation by Metadata.
    ghost = "auto-" + unique("x")
    t = client.list_topics(ghost, timeout=10).topics[ghost]
    assert t.error is not None and t.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, t.error
    # The ACL APIs need ALTER on the cluster, which nobody granted.
    more = binding(ResourceType.TOPIC, "x", ANON, AclOperation.READ)
    with pytest.raises(KafkaException) as e:
        client.create_acls([more], request_timeout=10)[more].result(timeout=15)
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # So do ElectLeaders (ALTER) and DescribeLogDirs (DESCRIBE), which nobody granted either.
    from confluent_kafka import ElectionType
    from kafka import KafkaAdminClient

    try:
        elected = client.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
        codes = {(x.code() if hasattr(x, "code") else x.args[0].code()) for x in elected.values()}
    except KafkaException as refused:
        codes = {refused.args[0].code()}
    assert codes == {KafkaError.CLUSTER_AUTHORIZATION_FAILED}, codes
    kp = KafkaAdminClient(bootstrap_servers=boot, request_timeout_ms=10000)
    try:
        described = repr(kp.describe_log_dirs())
    except Exception as refused:  # noqa: BLE001 - whichever way the client reports it
        described = repr(refused)
    finally:
        kp.close()
    assert topic not in described, described
    # (kafka-python reports the refusal as a broker with no log dirs.)
    assert "'log_dirs': []" in described or "ClusterAuthorization" in described, described

    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    # Gone before the restart: librdkafka refreshes the topics it was asked about, and after
    # the restart the same anonymous client is a super user, whose refresh of `ghost`
    # would auto-create it (as it would on Kafka).
    del client
    gc.collect()
    b.options["extra_args"] = ["--authorizer", "acl", "--super-users", "User:admin;User:ANONYMOUS"]
    b.restart()
    root = admin(b.bootstrap)  # keep a reference: a destroyed client fails its futures
    got = root.describe_acls(everything, request_timeout=10).result(timeout=15)
    assert len(got) == 3, got
    assert ghost not in root.list_topics(timeout=10).topics
    root.create_acls([more], request_timeout=10)[more].result(timeout=15)


@pytest.mark.oxbow_only
@pytest.mark.parametrize(
    "args, flag",
    [
        (["--authorizer", "ranger"], "--authorizer"),
        (["--authorizer", "acl", "--super-users", "admin"], "--super-users"),
        (["--super-users", "User:admin"], "--super-users"),
        (["--authorizer", "acl", "--allow-everyone-if-no-acl-found", "maybe"], "--allow-everyone-if-no-acl-found"),
    ],
)
def test_bad_authorization_flags_stop_the_broker(tmp_path, args, flag):
    cmd = [str(oxbow_bin()), "serve", "--data-dir", str(tmp_path), "--kafka-addr", "127.0.0.1:0"]
    cmd += ["--http-addr", "127.0.0.1:0", *args]
    proc = run(cmd, timeout=30, check=False)
    assert proc.returncode != 0
    assert flag in proc.stderr, proc.stderr


@pytest.mark.oxbow_only
def test_oxbow_acls_cli_adds_lists_and_removes(broker_factory):
    b = broker_factory(extra_args=["--authorizer", "acl", "--super-users", "User:ANONYMOUS"])

    def acls(*args: str, check: bool = True):
        return run([str(oxbow_bin()), "acls", "-b", b.bootstrap, *args], timeout=30, check=check)

    topic = unique("cli")
    out = acls("add", "--allow-principal", "User:alice", "--consumer", "--topic", topic, "--group", "g1").stdout
    assert len(out.strip().splitlines()) == 4, out  # header + READ, DESCRIBE topic + READ group
    acls("add", "--deny-principal", "User:bob", "--operation", "write", "--topic", "pay", "--resource-pattern-type", "prefixed")
    rows = [line.split() for line in acls("list").stdout.strip().splitlines()[1:]]
    assert ["TOPIC", "LITERAL", topic, "User:alice", "*", "READ", "ALLOW"] in rows, rows
    assert ["TOPIC", "PREFIXED", "pay", "User:bob", "*", "WRITE", "DENY"] in rows, rows
    assert ["GROUP", "LITERAL", "g1", "User:alice", "*", "READ", "ALLOW"] in rows, rows
    # The same bindings, seen by a Kafka client.
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    client = admin(b.bootstrap)
    assert len(client.describe_acls(everything, request_timeout=10).result(timeout=15)) == 4
    rows = [line.split() for line in acls("list", "--topic", "payments", "--resource-pattern-type", "match").stdout.strip().splitlines()[1:]]
    assert rows == [["TOPIC", "PREFIXED", "pay", "User:bob", "*", "WRITE", "DENY"]], rows
    removed = acls("remove", "--topic", topic).stdout.strip().splitlines()[1:]
    assert len(removed) == 2, removed
    assert len(client.describe_acls(everything, request_timeout=10).result(timeout=15)) == 2
    bad = acls("add", "--allow-principal", "alice", "--operation", "read", "--topic", "t", check=False)
    assert bad.returncode != 0 and "principal" in bad.stderr, bad.stderr
