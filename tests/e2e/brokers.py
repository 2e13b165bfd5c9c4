"""Start, stop, kill and restart a broker process for end-to-end tests.

`OxbowBroker` runs `target/debug/oxbow serve` (or `$OXBOW_BIN`). `KafkaBroker` runs a real
Apache Kafka 4.x broker in KRaft mode from `.tools/kafka/libs`; it exists only to validate
the tests themselves (`OXBOW_E2E_TARGET=kafka`), never to test Oxbow.

Every broker listens on free loopback ports picked at start, keeps its data in a directory
of its own and writes its output to `broker.log` next to it. Restarts reuse the same ports
and data directory. Every broker ever started is tracked in `LIVE`, so a teardown, a SIGTERM
to pytest or interpreter exit can kill whatever is still running.
"""

from __future__ import annotations

import base64
import os
import random
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
TARGET = os.environ.get("OXBOW_E2E_TARGET", "oxbow")
KAFKA_LIBS = Path(os.environ.get("OXBOW_KAFKA_LIBS", REPO_ROOT / ".tools" / "kafka" / "libs"))

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0

# Every broker that may still have a process; see kill_all().
LIVE: list["Broker"] = []


# Ports handed out by free_ports in this process: never handed out twice, so two servers
# picked a moment apart cannot be given the same one before either has bound it.
_HANDED_OUT: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_ports(n: int) -> list[int]:
    """n distinct loopback ports that were free a moment ago and were never handed out before
    in this process.

    Picked below the kernel's ephemeral range when there is room there: outgoing connections
    (clients, brokers' peers) take their local ports from that range, so a port picked
    outside it cannot be taken by one between the pick and the server's bind."""
    low, _ = _ephemeral_range()
    pool_low = 10000
    ports: list[int] = []
    socks = []
    try:
        attempts = 0
        while len(ports) < n:
            attempts += 1
            if attempts > 1000:
                raise RuntimeError(f"no free loopback port found after {attempts} attempts")
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            port = random.randrange(pool_low, low) if low - pool_low > 2000 else 0
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
            got = s.getsockname()[1]
            if got in _HANDED_OUT:
                continue
            _HANDED_OUT.add(got)
            ports.append(got)
        return ports
    finally:
        for s in socks:
            s.close()


def oxbow_bin() -> Path:
    path = Path(os.environ.get("OXBOW_BIN", REPO_ROOT / "target" / "debug" / "oxbow"))
    if not path.is_file():
        raise FileNotFoundError(f"oxbow binary not found at {path}: run `scripts/test.sh build` (or set OXBOW_BIN)")
    return path


def kill_all() -> None:
    """SIGKILL every tracked broker process (emergency cleanup only)."""
    for b in list(LIVE):
        b.kill9(missing_ok=True)


class BrokerError(AssertionError):
    pass


class Broker:
    """One broker process. Subclasses say how to launch it and how to tell it is ready."""

    kind = "?"
    # Exit codes that count as a clean, graceful stop on SIGTERM.
    clean_exit_codes: tuple[int, ...] = (0,)
    has_http = False

    def __init__(self, workdir: Path, name: str = "broker", broker_id: int = 1, **options):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.broker_id = broker_id
        self.options = options
        self.data_dir = self.workdir / "data"
        self.log_path = self.workdir / "broker.log"
        self.kafka_port, self.http_port, self.controller_port = free_ports(3)
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        LIVE.append(self)

    # -- addresses ------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def http(self) -> str:
        if not self.has_http:
            raise BrokerError(f"{self.kind} has no HTTP API")
        return f"http://127.0.0.1:{self.http_port}"

    # -- lifecycle ------------------------------------------------------------

    def command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def probe_ready(self) -> bool:
        raise NotImplementedError

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, timeout: float = READY_TIMEOUT_S, wait: bool = True) -> "Broker":
        """Launches the broker and (unless wait=False) waits until it reports ready."""
        if self.alive:
            raise BrokerError(f"{self.name} is already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd, env = self.command()
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
                cwd=self.workdir,
            )
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerError(
                    f"{self.name} exited with code {self.proc.returncode} before it was ready\n{self.log_tail()}"
                )
            if self.probe_ready():
                return
            time.sleep(0.1)
        self.kill9(missing_ok=True)
        raise BrokerError(f"{self.name} not ready within {timeout:.0f}s\n{self.log_tail()}")

    def signal_stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int:
        """Send sig and wait for the exit code; SIGKILL and fail if it takes longer than timeout."""
        if self.proc is None:
            raise BrokerError(f"{self.name} was never started")
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
                raise BrokerError(
                    f"{self.name} did not exit within {timeout:.0f}s of {signal.Signals(sig).name}\n{self.log_tail()}"
                ) from None
        return self.proc.returncode

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int:
        """Graceful stop: assert a clean exit code within timeout."""
        code = self.signal_stop(sig, timeout)
        if code not in self.clean_exit_codes:
            raise BrokerError(
                f"{self.name} exited with code {code} after {signal.Signals(sig).name}, "
                f"expected one of {self.clean_exit_codes}\n{self.log_tail()}"
            )
        return code

    def kill9(self, missing_ok: bool = False) -> None:
        if self.proc is None:
            if missing_ok:
                return
            raise BrokerError(f"{self.name} was never started")
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self, graceful: bool = True, timeout: float = READY_TIMEOUT_S) -> "Broker":
        """Stop (SIGTERM, or SIGKILL when not graceful) and start again on the same ports and data."""
        if self.alive:
            self.stop() if graceful else self.kill9()
        return self.start(timeout)

    def close(self) -> None:
        """Teardown: stop gracefully if running (asserting a clean exit), kill on any trouble."""
        try:
            if self.alive:
                self.stop()
        finally:
            self.kill9(missing_ok=True)
            if self in LIVE:
                LIVE.remove(self)
            self.discard_data()

    def discard_data(self) -> None:
        """Deletes the data directory of a stopped broker, keeping its log: a suite run
        starts hundreds of brokers (each with WAL files and objects) and pytest keeps its
        last three runs' directories, which filled the CI machine's disk."""
        if self.proc is None or self.proc.poll() is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return f"--- {self.name}: no log at {self.log_path}"
        tail = "\n".join(text.splitlines()[-lines:])
        return f"--- last {lines} lines of {self.log_path}:\n{tail}"

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name} kafka={self.bootstrap} pid={self.pid}>"


class OxbowBroker(Broker):
    """`oxbow serve` on free loopback ports.

    Options (all optional): auto_create_topics (bool), default_partitions (int),
    max_request_bytes (int), flush_interval (str, e.g. "250ms"), log_format ("json"|"text"),
    use_env (bool: pass the settings through OXBOW_* variables instead of flags),
    extra_args (list[str]), env (dict[str, str]: extra environment, e.g. AWS_* for S3).
    """

    kind = "oxbow"
    clean_exit_codes = (0,)
    has_http = True

    def command(self) -> tuple[list[str], dict[str, str]]:
        settings = {
            "kafka-addr": self.bootstrap,
            "http-addr": f"127.0.0.1:{self.http_port}",
            "data-dir": str(self.data_dir),
            "broker-id": str(self.broker_id),
            "log-format": self.options.get("log_format", "text"),
            # A fixed port per broker object, so a restarted broker keeps its address.
            "internal-addr": f"127.0.0.1:{self.controller_port}",
        }
        for key in ("auto_create_topics", "default_partitions", "max_request_bytes", "flush_interval"):
            if key in self.options:
                value = self.options[key]
                settings[key.replace("_", "-")] = str(value).lower() if isinstance(value, bool) else str(value)
        env = {"RUST_BACKTRACE": "1", "NO_COLOR": "1"}
        cmd = [str(oxbow_bin()), "serve"]
        if self.options.get("use_env"):
            env.update({"OXBOW_" + k.upper().replace("-", "_"): v for k, v in settings.items()})
        else:
            for k, v in settings.items():
                cmd += [f"--{k}", v]
        cmd += list(self.options.get("extra_args", []))
        env.update(self.options.get("env", {}))
        return cmd, env

    def probe_ready(self) -> bool:
        try:
            return requests.get(f"{self.http}/readyz", timeout=1).status_code == 200
        except requests.RequestException:
            return False


class KafkaBroker(Broker):
    """A real Apache Kafka broker (combined broker+controller, KRaft) for validating the tests."""

    kind = "kafka"
    # The JVM exits with 128+15 after running its shutdown hooks on SIGTERM.
    clean_exit_codes = (0, 143)
    has_http = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Like Kafka's Uuid.randomUuid(): never starting with "-", which reads as an option.
        self.cluster_id = "-"
        while self.cluster_id.startswith("-"):
            self.cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.formatted = False

    def _properties(self) -> Path:
        opts = self.options
        props = {
            "process.roles": "broker,controller",
            "node.id": self.broker_id,
            "controller.quorum.voters": f"{self.broker_id}@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://{self.bootstrap},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": self.data_dir,
            "num.partitions": opts.get("default_partitions", 1),
            "auto.create.topics.enable": str(opts.get("auto_create_topics", True)).lower(),
            "socket.request.max.bytes": opts.get("max_request_bytes", 104857600),
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0,
            "num.network.threads": 2,
            "num.io.threads": 2,
            # Test-specific Kafka settings (e.g. connections.max.idle.ms), the counterpart
            # of an Oxbow broker's extra_args.
            **opts.get("kafka_props", {}),
        }
        path = self.workdir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(
            "status = error\n"
            "appender.console.type = Console\n"
            "appender.console.name = STDOUT\n"
            "appender.console.layout.type = PatternLayout\n"
            "appender.console.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = INFO\n"
            "rootLogger.appenderRef.stdout.ref = STDOUT\n"
        )
        return path

    def _java(self, main: str, *args: str) -> list[str]:
        if not any(KAFKA_LIBS.glob("kafka_2.13-*.jar")):
            raise FileNotFoundError(f"no Apache Kafka jars in {KAFKA_LIBS}: run `scripts/test.sh setup`")
        return [
            "java",
            "-Xms256m",
            "-Xmx768m",
            "-XX:+UseG1GC",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp",
            f"{KAFKA_LIBS}/*",
            main,
            *args,
        ]

    def command(self) -> tuple[list[str], dict[str, str]]:
        props = self._properties()
        if not self.formatted:
            fmt = self._java("kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(props))
            with open(self.log_path, "ab") as log:
                subprocess.run(
                    fmt, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, timeout=120, check=True
                )
            self.formatted = True
        return self._java("kafka.Kafka", str(props)), {}

    def probe_ready(self) -> bool:
        from confluent_kafka.admin import AdminClient

        try:
            md = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0}).list_topics(timeout=2)
            return bool(md.brokers)
        except Exception:
            return False


def make_broker(workdir: Path, name: str = "broker", **options) -> Broker:
    cls = KafkaBroker if TARGET == "kafka" else OxbowBroker
    return cls(workdir, name=name, **options)
