"""The release artefacts, checked without a container engine or systemd running here:

- Dockerfile: structure (multi-stage, pinned bases, non-root user, volume, health check on
  /readyz, `oxbow serve` entrypoint, builds the binary the gateway crate names); its final
  stage's environment and HEALTHCHECK command run against the real binary; hadolint when
  installed (it is not in Debian);
- systemd unit: `systemd-analyze verify` and its offline security score; its syscall
  filter covers every system call the broker makes under a produce/consume (strace);
- the broker instances' scripts (terraform/modules/brokers/files/): oxbow-env turns
  instance metadata into settings a broker starts with; oxbow-metrics publishes the rate
  of oxbow_appended_bytes_total.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from aws_fakes import FakeImds, arg, fake_aws_cli, path_with, read_calls
from brokers import REPO_ROOT, free_ports, oxbow_bin
from helpers import create_topic, consume_partitions, produce_all, producer, unique, wait_until

pytestmark = pytest.mark.oxbow_only

DOCKERFILE = REPO_ROOT / "Dockerfile"
UNIT = REPO_ROOT / "packaging/systemd/oxbow.service"
FILES = REPO_ROOT / "terraform/modules/brokers/files"


def run(cmd, timeout=60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw)


# -- Dockerfile ---------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined, out = "", []
    for line in DOCKERFILE.read_text().splitlines():
        if line.lstrip().startswith("#") and not joined:
            continue
        if line.rstrip().endswith("\\"):
            joined += line.rstrip()[:-1] + " "
            continue
        full = (joined + line).strip()
        joined = ""
        if full and not full.startswith("#"):
            word, _, rest = full.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for ins in dockerfile_instructions():
        if ins[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def final_env() -> dict[str, str]:
    env = {}
    for word, rest in stages()[-1]:
        if word == "ENV":
            for item in shlex.split(rest):
                k, _, v = item.partition("=")
                env[k] = v
    return env


def test_dockerfile_structure():
    ins = dockerfile_instructions()
    args = {a.split("=")[0]: a.split("=", 1)[1] for w, a in ins if w == "ARG" and "=" in a}
    st = stages()
    assert len(st) >= 2, "multi-stage: a build stage and a runtime stage"
    for stage in st:
        image = stage[0][1].split()[0]
        image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), image)
        assert ":" in image and not image.endswith(":latest"), f"unpinned base image {image}"
    build, runtime = st[0], st[-1]
    build_cmds = " ".join(a for w, a in build if w == "RUN")
    bin_name = re.search(r'\[\[bin\]\]\s*name\s*=\s*"([^"]+)"', (REPO_ROOT / "gateway/Cargo.toml").read_text()).group(1)
    package = re.search(r'^name\s*=\s*"([^"]+)"', (REPO_ROOT / "gateway/Cargo.toml").read_text(), re.M).group(1)
    assert f"-p {package}" in build_cmds and f"--bin {bin_name}" in build_cmds and "--locked" in build_cmds, build_cmds
    runtime_words = [w for w, _ in runtime]
    user = [a for w, a in runtime if w == "USER"]
    assert user and user[-1].split(":")[0] not in ("root", "0"), f"runtime must not run as root: {user}"
    assert runtime_words.index("USER") > max(i for i, w in enumerate(runtime_words) if w == "RUN"), "USER after the last RUN"
    assert any(w == "VOLUME" and final_env()["OXBOW_DATA_DIR"] in a for w, a in runtime), "the data dir is a volume"
    health = [a for w, a in runtime if w == "HEALTHCHECK"]
    assert health and "/readyz" in health[0]
    entry = [a for w, a in runtime if w == "ENTRYPOINT"][-1]
    cmd = [a for w, a in runtime if w == "CMD"][-1]
    assert entry.endswith(f'/{bin_name}"]') and cmd == '["serve"]', (entry, cmd)
    assert any(w == "STOPSIGNAL" and "SIGTERM" in a for w, a in runtime)
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    for must in (".git", "target", ".venv", ".tools"):
        assert must in ignored, f".dockerignore should leave out {must}"
    # What the build needs must not be ignored.
    for needed in ("gateway", "segment-writer", "metadata", "cache", "loadtest", "vendor", "scripts", "fuzz"):
        assert needed not in ignored, f".dockerignore leaves out {needed}, which the build needs"


def test_hadolint_when_installed():
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (not packaged in Debian); test_dockerfile_structure stands in")
    r = run([hadolint, str(DOCKERFILE)])
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_images_environment_and_health_check_serve(tmp_path):
    """The runtime stage's ENV (ports moved to free ones) and CMD start a broker, and its
    HEALTHCHECK command (run by sh, as Docker does) passes once it is ready."""
    kafka, http = free_ports(2)
    env = final_env()
    env.update({
        "OXBOW_DATA_DIR": str(tmp_path / "data"),
        "OXBOW_KAFKA_ADDR": f"0.0.0.0:{kafka}",
        "OXBOW_ADVERTISED_KAFKA_ADDR": f"localhost:{kafka}",
        "OXBOW_HTTP_ADDR": f"0.0.0.0:{http}",
    })  # fmt: skip
    (tmp_path / "data").mkdir()
    health = next(a for w, a in stages()[-1] if w == "HEALTHCHECK")
    probe = health.split(" CMD ", 1)[1]
    base = {k: v for k, v in os.environ.items() if not k.startswith("OXBOW_")}
    with open(tmp_path / "broker.log", "wb") as log:
        proc = subprocess.Popen([str(oxbow_bin()), "serve"], env={**base, **env}, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: run(["sh", "-c", probe], env={**base, **env}).returncode == 0, timeout=30, what="HEALTHCHECK passing")
        p = producer(f"localhost:{kafka}")
        topic = unique("image")
        produce_all(p, topic, [{"value": b"v"}])
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0, (tmp_path / "broker.log").read_text()[-2000:]


# -- systemd unit -------------------------------------------------------------------------


def unit_for_here(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at the binary under test (verify checks it exists)."""
    unit = tmp_path / "oxbow.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/oxbow", str(oxbow_bin())))
    return unit


def systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.skip("systemd-analyze is not installed")
    return path


def test_systemd_unit_verifies_and_is_hardened(tmp_path):
    sa = systemd_analyze()
    unit = unit_for_here(tmp_path)
    r = run([sa, "verify", str(unit)])
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr
    text = UNIT.read_text()
    for directive in ("NoNewPrivileges=yes", "ProtectSystem=strict", "ReadWritePaths=/var/lib/oxbow", "Restart=on-failure",
                      "KillSignal=SIGTERM", "User=oxbow"):  # fmt: skip
        assert directive in text, directive
    assert int(re.search(r"^LimitNOFILE=(\d+)", text, re.M).group(1)) >= 65536
    # Longer than a handoff (moves not done in 10 s are withdrawn) plus a WAL upload, and
    # shorter than the lifecycle hook's default heartbeat timeout (300 s).
    assert 60 <= int(re.search(r"^TimeoutStopSec=(\d+)", text, re.M).group(1)) < 300
    r = run([sa, "security", "--offline=yes", str(unit)])
    score = float(re.search(r"Overall exposure level for \S+: ([\d.]+)", r.stdout).group(1))
    print(f"\nsystemd-analyze security: exposure {score} (0 best, 10 worst)")
    assert score <= 2.0, r.stdout


def syscall_groups(sa: str) -> dict[str, set[str]]:
    groups: dict[str, set[str]] = {}
    current = None
    for line in run([sa, "syscall-filter"]).stdout.splitlines():
        if line.startswith("@"):
            current = line.strip()
            groups[current] = set()
        elif current and line.startswith("    ") and not line.strip().startswith("#"):
            groups[current].add(line.strip())
    return groups


def expand(groups: dict[str, set[str]], name: str) -> set[str]:
    out = set()
    for item in groups.get(name, set()):
        out |= expand(groups, item) if item.startswith("@") else {item}
    return out


def test_unit_syscall_filter_covers_the_broker(tmp_path):
    """Every system call the broker makes while serving a produce and a fetch and shutting
    down is in the unit's SystemCallFilter (else it would get EPERM under systemd)."""
    sa = systemd_analyze()
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed")
    filters = re.findall(r"^SystemCallFilter=(.+)$", UNIT.read_text(), re.M)
    allowed: set[str] = set()
    groups = syscall_groups(sa)
    for entry in " ".join(filters).split():
        allowed |= expand(groups, entry) if entry.startswith("@") else {entry}
    kafka, http = free_ports(2)
    trace = tmp_path / "strace.txt"
    cmd = [strace, "-f", "-qq", "-c", "-o", str(trace), str(oxbow_bin()), "serve", "--data-dir", str(tmp_path / "data"),
           "--kafka-addr", f"127.0.0.1:{kafka}", "--http-addr", f"127.0.0.1:{http}"]  # fmt: skip
    with open(tmp_path / "broker.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _ready(http), timeout=60, what="broker under strace ready")
        topic = create_topic(f"127.0.0.1:{kafka}", unique("strace"), 2)
        produce_all(producer(f"127.0.0.1:{kafka}"), topic, [{"value": b"x" * 100, "partition": i % 2} for i in range(50)])
        assert sum(len(r) for r in consume_partitions(f"127.0.0.1:{kafka}", topic, range(2), timeout=30).values()) == 50
        requests.get(f"http://127.0.0.1:{http}/metrics", timeout=5)
    finally:
        # SIGTERM to the broker (strace's child), so its shutdown is traced too.
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        broker_pid = int(children.read_text().split()[0]) if children.exists() and children.read_text().split() else None
        if broker_pid:
            os.kill(broker_pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            raise
    used = set()
    for line in trace.read_text().splitlines():
        cols = line.split()
        if cols and re.fullmatch(r"[a-z_0-9]+", cols[-1]) and cols[-1] != "total" and re.match(r"^\s*[\d.]+", line):
            used.add(cols[-1])
    assert len(used) > 20, trace.read_text()
    outside = sorted(used - allowed)
    print(f"\nbroker system calls: {len(used)}, outside the unit's filter: {outside}")
    assert not outside, f"system calls the unit's SystemCallFilter refuses: {outside}"


def _ready(http: int) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{http}/readyz", timeout=1).status_code == 200
    except requests.RequestException:
        return False


# -- the broker instances' scripts ---------------------------------------------------------


def imds_for(ip: str) -> FakeImds:
    return FakeImds({
        "instance-id": "i-0000000000000001",
        "local-ipv4": ip,
        "placement/availability-zone-id": "zid-az2",
        "placement/region": "test-region-1",
    })  # fmt: skip


def write_deploy_env(path: Path, **values) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def run_env_script(tmp_path: Path, imds: FakeImds, deploy: Path) -> subprocess.CompletedProcess:
    return run(["bash", str(FILES / "oxbow-env.sh")], env={
        **os.environ,
        "OXBOW_DEPLOY_ENV": str(deploy),
        "OXBOW_ENV_FILE": str(tmp_path / "oxbow.env"),
        "IMDS_ENDPOINT": imds.url,
    })  # fmt: skip


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))


def test_broker_id_is_the_address_offset_in_the_vpc(tmp_path):
    imds = imds_for("10.40.1.25")
    try:
        deploy = write_deploy_env(tmp_path / "deploy.env", VPC_CIDR="10.40.0.0/16", METADATA="etcd://10.40.0.10:2379/prod",
                                  OBJECT_STORE="s3://b/oxbow", KAFKA_PORT=9092, HTTP_PORT=8080, INTERNAL_PORT=7070)  # fmt: skip
        r = run_env_script(tmp_path, imds, deploy)
        assert r.returncode == 0, r.stderr
        env = read_env(tmp_path / "oxbow.env")
        assert env["OXBOW_BROKER_ID"] == str(256 + 25)
        assert env["OXBOW_AZ"] == "zid-az2"
        assert env["OXBOW_ADVERTISED_KAFKA_ADDR"] == "10.40.1.25:9092"
        assert env["OXBOW_INTERNAL_ADDR"] == "10.40.1.25:7070"
        assert env["AWS_REGION"] == "test-region-1"
        assert imds.refused == 0, "the script made an IMDSv1 (token-less) request"
        # An address outside the VPC's range is refused, not turned into a wrong id.
        imds.items["local-ipv4"] = "10.41.0.5"
        assert run_env_script(tmp_path, imds, deploy).returncode != 0
    finally:
        imds.close()


def test_settings_from_instance_metadata_start_a_broker(tmp_path):
    """oxbow-env's output is what oxbow.service reads: every variable in it is one `oxbow
    serve` knows, and a broker started with it alone serves."""
    kafka, http, internal = free_ports(3)
    imds = imds_for("127.0.0.1")
    (tmp_path / "extra.env").write_text("OXBOW_FLUSH_INTERVAL=100ms\n")
    deploy = write_deploy_env(tmp_path / "deploy.env", VPC_CIDR="127.0.0.0/8", METADATA="embedded", OBJECT_STORE="local",
                              KAFKA_PORT=kafka, HTTP_PORT=http, INTERNAL_PORT=internal, CACHE_DIR=tmp_path / "cache",
                              EXTRA_ENV_FILE=tmp_path / "extra.env")  # fmt: skip
    try:
        r = run_env_script(tmp_path, imds, deploy)
        assert r.returncode == 0, r.stderr
    finally:
        imds.close()
    env = read_env(tmp_path / "oxbow.env")
    assert env["OXBOW_BROKER_ID"] == "1" and env["OXBOW_FLUSH_INTERVAL"] == "100ms"
    help_text = run([str(oxbow_bin()), "serve", "--help"]).stdout
    unknown = [k for k in env if k.startswith("OXBOW_") and f"env: {k}=" not in help_text]
    assert not unknown, f"settings `oxbow serve` does not read: {unknown}"
    base = {k: v for k, v in os.environ.items() if not k.startswith("OXBOW_")}
    (tmp_path / "data").mkdir()
    with open(tmp_path / "broker.log", "wb") as log:
        proc = subprocess.Popen([str(oxbow_bin()), "serve"], env={**base, **env, "OXBOW_DATA_DIR": str(tmp_path / "data")},
                                stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        wait_until(lambda: _ready(http), timeout=30, what="broker from oxbow.env ready")
        md = producer(f"127.0.0.1:{kafka}").list_topics(timeout=10)
        assert set(md.brokers) == {1} and md.brokers[1].port == kafka
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0, (tmp_path / "broker.log").read_text()[-2000:]


def test_metrics_script_publishes_the_ingest_rate(tmp_path, broker):
    calls = fake_aws_cli(tmp_path)
    deploy = write_deploy_env(tmp_path / "deploy.env", HTTP_PORT=broker.http_port, ASG_NAME="oxbow-test-brokers",
                              METRICS_NAMESPACE="OxbowTest")  # fmt: skip
    topic = create_topic(broker.bootstrap, unique("metrics"), 1)
    stop = threading.Event()

    def load():
        p = producer(broker.bootstrap)
        while not stop.is_set():
            produce_all(p, topic, [{"value": b"y" * 1000} for _ in range(100)])

    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        r = run(["bash", str(FILES / "oxbow-metrics.sh")], timeout=60, env={
            **os.environ,
            "PATH": path_with(tmp_path / "bin"),
            "OXBOW_DEPLOY_ENV": str(deploy),
            "AWS_REGION": "test-region-1",
            "OXBOW_METRICS_INTERVAL_SECONDS": "1",
            "OXBOW_METRICS_ROUNDS": "2",
        })  # fmt: skip
    finally:
        stop.set()
        t.join(30)
    assert r.returncode == 0, r.stderr
    published = read_calls(calls)
    assert len(published) == 2, published
    for call in published:
        assert call["args"][:2] == ["cloudwatch", "put-metric-data"]
        assert arg(call, "--namespace") == "OxbowTest"
        assert arg(call, "--metric-name") == "AppendedBytesPerSecond"
        assert arg(call, "--dimensions") == "AutoScalingGroupName=oxbow-test-brokers"
        assert arg(call, "--unit") == "Bytes/Second"
    rates = [float(arg(c, "--value")) for c in published]
    print(f"\npublished ingest rates: {rates} bytes/s")
    assert all(r > 10_000 for r in rates), rates
