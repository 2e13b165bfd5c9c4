"""Issue 16's admin APIs, through the clients and tools that call them: DescribeLogDirs
(kafka-log-dirs.sh, kafka-python's describe_log_dirs), ElectLeaders (kafka-leader-election.sh,
confluent-kafka's elect_leaders), CreateTopics / CreatePartitions with a manual replica
assignment, and the broker configs admin tools read. Each assertion holds against Apache
Kafka too (OXBOW_E2E_TARGET=kafka): a single broker whose partitions have one replica."""

from __future__ import annotations

import json
import re

import pytest
from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import (
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from helpers import admin, create_topic, producer, unique, wait_for_topic, wait_until

LOG_DIRS_COMMAND = "org.apache.kafka.tools.LogDirsCommand"
LEADER_ELECTION_COMMAND = "org.apache.kafka.tools.LeaderElectionCommand"
TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"

# librdkafka's codes for the answers checked below.
ELECTION_NOT_NEEDED = 84
INVALID_REPLICA_ASSIGNMENT = 39
UNKNOWN_TOPIC_OR_PARTITION = 3


def code_of(err) -> int:
    """The Kafka error code of a KafkaError or KafkaException."""
    return err.code() if hasattr(err, "code") else err.args[0].code()


def node_id(bootstrap: str) -> int:
    brokers = admin(bootstrap).list_topics(timeout=10).brokers
    assert len(brokers) == 1, brokers
    return next(iter(brokers))


def produce_to(bootstrap: str, topic: str, partitions: int, per_partition: int = 50) -> int:
    """Produces `per_partition` 1 KiB records to each partition; returns the payload bytes."""
    p = producer(bootstrap)
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, value=b"x" * 1024, key=f"{part}-{i}".encode(), partition=part)
    assert p.flush(30) == 0
    return partitions * per_partition * 1024


def log_dir_sizes(described: dict, topic: str) -> dict[int, int]:
    """partition → bytes summed over the log dirs of kafka-log-dirs.sh's JSON."""
    sizes: dict[int, int] = {}
    for b in described["brokers"]:
        for d in b["logDirs"]:
            for p in d["partitions"]:
                name, _, index = p["partition"].rpartition("-")
                if name == topic:
                    sizes[int(index)] = sizes.get(int(index), 0) + p["size"]
    return sizes


def test_log_dirs_command_reports_every_partition_and_its_bytes(shared_broker, java):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("logdirs"), 2)
    payload = produce_to(b, topic, 2)

    def described() -> dict:
        out = java(LOG_DIRS_COMMAND, "--bootstrap-server", b, "--describe", "--topic-list", topic).stdout
        line = next(l for l in out.splitlines() if l.startswith("{"))
        return json.loads(line)

    # Kafka's sizes are the files on disk (its segments roll and index lazily); Oxbow's the
    # unsealed tail plus what is catalogued: wait until both partitions are counted whole.
    seen: dict = {}

    def counted() -> bool:
        seen["d"] = described()
        sizes = log_dir_sizes(seen["d"], topic)
        return set(sizes) == {0, 1} and sum(sizes.values()) >= payload

    wait_until(counted, timeout=30, what=f"kafka-log-dirs.sh counting {payload} bytes: {seen}")
    d = seen["d"]
    assert [x["broker"] for x in d["brokers"]] == [node_id(b)], d
    dirs = d["brokers"][0]["logDirs"]
    assert dirs and all(x["error"] is None for x in dirs), dirs
    for x in dirs:
        for p in x["partitions"]:
            assert p["offsetLag"] == 0 and p["isFuture"] is False, p


def test_kafka_python_describe_log_dirs(shared_broker):
    from kafka import KafkaAdminClient

    b = shared_broker.bootstrap
    topic = create_topic(b, unique("kplogdirs"), 1)
    produce_to(b, topic, 1, per_partition=10)
    client = KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=10000)
    try:
        result = client.describe_log_dirs()
    finally:
        client.close()
    text = repr(result)
    assert topic in text, text
    # One broker, at least one log dir, no error.
    assert "error_code=0" in text or "'error_code': 0" in text, text


def test_elect_leaders_is_never_needed_while_the_leader_is_live(shared_broker):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("elect"), 2)
    a = admin(b)
    result = a.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0), TopicPartition(topic, 1)]).result(30)
    assert len(result) == 2, result
    for tp, err in result.items():
        assert err is not None, (tp, "an election happened where the preferred replica leads")
        assert code_of(err) == ELECTION_NOT_NEEDED, (tp, err)

    unknown = a.elect_leaders(ElectionType.PREFERRED, [TopicPartition(unique("nosuch"), 0)]).result(30)
    assert [code_of(e) for e in unknown.values()] == [UNKNOWN_TOPIC_OR_PARTITION], unknown

    # Every partition: those needing no election are left out (Kafka).
    everything = a.elect_leaders(ElectionType.PREFERRED, None).result(30)
    assert TopicPartition(topic, 0) not in everything, everything


def test_leader_election_command(shared_broker, java):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("jelect"), 1)
    out = java(
        LEADER_ELECTION_COMMAND,
        "--bootstrap-server", b,
        "--election-type", "preferred",
        "--topic", topic,
        "--partition", "0",
    ).stdout  # fmt: skip
    assert re.search(rf"Valid replica already elected for partitions.*{re.escape(topic)}-0", out), out


def test_create_partitions_with_a_manual_assignment(shared_broker):
    b = shared_broker.bootstrap
    me = node_id(b)
    topic = create_topic(b, unique("assign"), 1)
    a = admin(b)
    a.create_partitions([NewPartitions(topic, 3, replica_assignment=[[me], [me]])])[topic].result(30)
    wait_for_topic(b, topic, 3)
    leaders = {p.id: p.leader for p in a.list_topics(topic, timeout=10).topics[topic].partitions.values()}
    assert leaders == {0: me, 1: me, 2: me}, leaders

    # Refused with Kafka's code: fewer assignments than new partitions, an unknown broker.
    for bad in ([[me]], [[me], [me + 1000]]):
        with pytest.raises(KafkaException) as raised:
            a.create_partitions([NewPartitions(topic, 5, replica_assignment=bad)])[topic].result(30)
        assert raised.value.args[0].code() == INVALID_REPLICA_ASSIGNMENT, (bad, raised.value)
    assert len(a.list_topics(topic, timeout=10).topics[topic].partitions) == 3


def test_create_topic_with_a_manual_assignment(shared_broker, java):
    b = shared_broker.bootstrap
    me = node_id(b)
    a = admin(b)
    name = unique("assigned")
    a.create_topics([NewTopic(name, num_partitions=2, replica_assignment=[[me], [me]])])[name].result(30)
    wait_for_topic(b, name, 2)
    bad = unique("badassign")
    with pytest.raises(KafkaException) as raised:
        a.create_topics([NewTopic(bad, num_partitions=1, replica_assignment=[[me + 1000]])])[bad].result(30)
    assert raised.value.args[0].code() == INVALID_REPLICA_ASSIGNMENT, raised.value

    # kafka-topics.sh --alter with --replica-assignment: the new partition's leader.
    java(TOPIC_COMMAND, "--bootstrap-server", b, "--alter", "--topic", name, "--partitions", "3",
         "--replica-assignment", f"{me},{me},{me}")  # fmt: skip
    wait_for_topic(b, name, 3)


def test_broker_configs_admin_tools_read(shared_broker):
    b = shared_broker.bootstrap
    me = node_id(b)
    res = ConfigResource(ResourceType.BROKER, str(me))
    a = admin(b)
    configs = a.describe_configs([res])[res].result(30)
    for key in ("advertised.listeners", "log.dirs", "log.retention.ms", "num.partitions", "broker.id"):
        assert key in configs, (key, sorted(configs))
    assert configs["broker.id"].value == str(me)
    host, port = b.rsplit(":", 1)
    assert f":{port}" in (configs["advertised.listeners"].value or ""), configs["advertised.listeners"]
    assert configs["log.dirs"].value, configs["log.dirs"]


TRANSACTIONS_COMMAND = "org.apache.kafka.tools.TransactionsCommand"


def test_an_idle_producer_id_expires(broker_factory, java):
    """`producer.id.expiration.ms` (`--producer-id-expiration`): a partition forgets an
    idempotent producer idle that long, so DescribeProducers stops listing it and memory
    per partition does not grow with every producer that ever wrote."""
    b = broker_factory(
        name="pidexp",
        extra_args=["--producer-id-expiration", "3s"],
        kafka_props={"producer.id.expiration.ms": 3000, "producer.id.expiration.check.interval.ms": 1000},
    ).bootstrap
    topic = create_topic(b, unique("expiring"), 1)
    p = producer(b, **{"enable.idempotence": True})
    p.produce(topic, value=b"v", partition=0)
    assert p.flush(30) == 0

    def listed() -> int:
        out = java(TRANSACTIONS_COMMAND, "--bootstrap-server", b, "describe-producers", "--topic", topic, "--partition", "0").stdout
        return len([line for line in out.splitlines() if line.strip() and not line.startswith("ProducerId")])

    assert listed() == 1
    wait_until(lambda: listed() == 0, timeout=30, what="the idle producer id expired")


def test_describe_producers_lists_the_idempotent_producer(shared_broker, java):
    b = shared_broker.bootstrap
    topic = create_topic(b, unique("producers"), 1)
    p = producer(b, **{"enable.idempotence": True})
    for i in range(25):
        p.produce(topic, value=f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0
    out = java(TRANSACTIONS_COMMAND, "--bootstrap-server", b, "describe-producers", "--topic", topic, "--partition", "0").stdout
    rows = [line.split() for line in out.splitlines() if line.strip() and not line.startswith("ProducerId")]
    assert len(rows) == 1, out
    producer_id, epoch, coordinator_epoch, last_sequence, last_timestamp, txn_start = rows[0]
    assert int(producer_id) >= 0 and int(epoch) >= 0, out
    assert int(last_sequence) == 24, out
    assert int(last_timestamp) > 0, out
    assert coordinator_epoch == "-1" and txn_start == "None", out

