"""Fixtures for the end-to-end suite: brokers that are always stopped, and their logs on failure.

Builds nothing: `scripts/test.sh` builds `target/debug/oxbow` first (or set OXBOW_BIN).
`OXBOW_E2E_TARGET=kafka` runs the suite against a real Apache Kafka broker instead, to
validate the tests; tests marked `oxbow_only` are skipped then.
"""

from __future__ import annotations

import atexit
import shutil
import signal

import pytest

import brokers
from brokers import KAFKA_LIBS, TARGET, make_broker
from helpers import run


def pytest_report_header(config):
    where = brokers.KAFKA_LIBS if TARGET == "kafka" else brokers.REPO_ROOT / "target/debug/oxbow"
    return f"e2e target: {TARGET} ({where})"


def pytest_configure(config):
    # A SIGTERM to pytest (the suite-wide `timeout` in scripts/test.sh) must not leave brokers
    # behind: kill them, then unwind like Ctrl-C so pytest still prints its summary.
    def on_sigterm(signum, frame):
        brokers.kill_all()
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, on_sigterm)
    atexit.register(brokers.kill_all)


def pytest_collection_modifyitems(config, items):
    if TARGET == "oxbow":
        return
    skip = pytest.mark.skip(reason=f"Oxbow-only interface; OXBOW_E2E_TARGET={TARGET}")
    for item in items:
        if "oxbow_only" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for b in list(brokers.LIVE):
            report.sections.append((f"broker log: {b.name} ({b.kind}, {b.bootstrap})", b.log_tail(80)))


class BrokerFactory:
    """Starts brokers on demand; teardown stops every one (SIGTERM, clean exit asserted)."""

    def __init__(self, tmp_path_factory, prefix: str):
        self._tmp = tmp_path_factory
        self._prefix = prefix
        self.started: list[brokers.Broker] = []

    def __call__(self, name: str | None = None, start: bool = True, **options) -> brokers.Broker:
        name = name or f"{self._prefix}{len(self.started)}"
        b = make_broker(self._tmp.mktemp(name), name=name, **options)
        self.started.append(b)
        if start:
            b.start()
        return b

    def close_all(self) -> None:
        errors = []
        for b in self.started:
            try:
                b.close()
            except Exception as e:  # keep stopping the others
                errors.append(e)
        if errors:
            raise errors[0]


@pytest.fixture
def broker_factory(tmp_path_factory):
    factory = BrokerFactory(tmp_path_factory, "fn-broker-")
    yield factory
    factory.close_all()


@pytest.fixture(scope="module")
def module_broker_factory(tmp_path_factory):
    factory = BrokerFactory(tmp_path_factory, "mod-broker-")
    yield factory
    factory.close_all()


@pytest.fixture
def broker(broker_factory):
    """A fresh broker with default settings for this test only."""
    return broker_factory()


@pytest.fixture(scope="module")
def shared_broker(module_broker_factory):
    """One broker with default settings shared by a test module (use unique topic names)."""
    return module_broker_factory()


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    """Runs a main class of Apache Kafka's jars (its CLI tools) with quiet logging."""
    if shutil.which("java") is None:
        pytest.fail("java not found (scripts/test.sh installs it)")
    if not any(KAFKA_LIBS.glob("kafka-tools-*.jar")):
        pytest.fail(f"no Kafka tool jars in {KAFKA_LIBS}: run `scripts/test.sh setup`")
    log4j = tmp_path_factory.mktemp("java") / "tools-log4j2.properties"
    log4j.write_text(
        "status = error\n"
        "appender.err.type = Console\n"
        "appender.err.name = STDERR\n"
        "appender.err.target = SYSTEM_ERR\n"
        "appender.err.layout.type = PatternLayout\n"
        "appender.err.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = WARN\n"
        "rootLogger.appenderRef.err.ref = STDERR\n"
    )

    def run_java(main: str, *args: str, input: str | None = None, timeout: float = 120, check: bool = True):
        cmd = [
            "java",
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",  # short-lived tools: start fast
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            f"{KAFKA_LIBS}/*",
            main,
            *args,
        ]
        return run(cmd, input=input, timeout=timeout, check=check)

    return run_java
