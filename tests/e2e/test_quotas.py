"""Client quotas (issue 15): set, read and removed with Kafka's own `kafka-configs.sh`
(ConfigCommand → AlterClientQuotas / DescribeClientQuotas), validated as Kafka validates
them. Runs against Apache Kafka too (`OXBOW_E2E_TARGET=kafka`)."""

from __future__ import annotations

from helpers import unique

CONFIG_COMMAND = "kafka.admin.ConfigCommand"


def configs(java, broker, *args, check=True):
    return java(CONFIG_COMMAND, "--bootstrap-server", broker.bootstrap, *args, check=check)


def test_kafka_configs_sets_describes_and_removes_client_quotas(shared_broker, java):
    client = unique("qclient")
    out = configs(
        java,
        shared_broker,
        "--alter",
        "--add-config",
        "producer_byte_rate=1048576,consumer_byte_rate=2097152",
        "--entity-type",
        "clients",
        "--entity-name",
        client,
    ).stdout
    assert f"Completed updating config for client {client}." in out, out

    desc = configs(java, shared_broker, "--describe", "--entity-type", "clients", "--entity-name", client).stdout
    assert "producer_byte_rate=1048576.0" in desc and "consumer_byte_rate=2097152.0" in desc, desc

    # The default entity is its own entity, shown as such.
    configs(java, shared_broker, "--alter", "--add-config", "request_percentage=50", "--entity-type", "clients", "--entity-default")
    desc = configs(java, shared_broker, "--describe", "--entity-type", "clients").stdout
    assert "default client-id" in desc and "request_percentage=50.0" in desc, desc
    assert client in desc, desc

    configs(java, shared_broker, "--alter", "--delete-config", "consumer_byte_rate", "--entity-type", "clients", "--entity-name", client)
    desc = configs(java, shared_broker, "--describe", "--entity-type", "clients", "--entity-name", client).stdout
    assert "producer_byte_rate=1048576.0" in desc and "consumer_byte_rate" not in desc, desc

    # Removing the last key removes the entity.
    configs(java, shared_broker, "--alter", "--delete-config", "producer_byte_rate", "--entity-type", "clients", "--entity-name", client)
    configs(java, shared_broker, "--alter", "--delete-config", "request_percentage", "--entity-type", "clients", "--entity-default")
    desc = configs(java, shared_broker, "--describe", "--entity-type", "clients").stdout
    assert client not in desc and "default client-id" not in desc, desc


def test_bad_quota_values_are_refused_with_kafkas_error(shared_broker, java):
    client = unique("qbad")
    for config, message in [
        ("producer_byte_rate=1.5", "InvalidRequestException"),
        ("producer_byte_rate=0", "InvalidRequestException"),
        ("consumer_byte_rate=-10", "InvalidRequestException"),
    ]:
        r = configs(
            java,
            shared_broker,
            "--alter",
            "--add-config",
            config,
            "--entity-type",
            "clients",
            "--entity-name",
            client,
            check=False,
        )
        assert r.returncode != 0, (config, r.stdout)
        assert message in r.stdout + r.stderr, (config, r.stdout, r.stderr)
    desc = configs(java, shared_broker, "--describe", "--entity-type", "clients", "--entity-name", client).stdout
    assert "byte_rate" not in desc, desc
