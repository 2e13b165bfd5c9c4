"""Offline checks of terraform/ (no terraform provider or cloud is reachable from CI):

- format: `hclfmt -check -require-no-change` on every .tf file (hclfmt is built from the Go
  module proxy into .tools/bin by `scripts/test.sh setup`, or here if missing), plus
  `terraform fmt -check` / `tofu fmt -check` when such a binary is on PATH;
- structure, with a real HCL parser (python-hcl2): every module has main, variables,
  outputs and versions files; every variable is typed and described and used; every
  output is described; the example calls every module, passes only variables the module
  declares and every one it requires; every templatefile() gets exactly the variables its
  template uses; no region or credentials are written anywhere;
- security: checkov over modules and example, every finding fixed or skipped in the HCL
  with a reason (`#checkov:skip=CKV_...:reason`).

`terraform validate` is not run: it needs the AWS provider's schema, and no provider
registry is reachable here (see README "Deploy").
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import hcl2
import pytest

from brokers import REPO_ROOT

TF = REPO_ROOT / "terraform"
MODULES = sorted(p for p in (TF / "modules").iterdir() if p.is_dir())
EXAMPLES = sorted(p for p in (TF / "examples").iterdir() if p.is_dir())
TOOLS = REPO_ROOT / ".tools"
CHECKOV_VENV = TOOLS / "checkov-venv"
CHECKOV_REQUIREMENTS = Path(__file__).parent / "requirements-checkov.txt"


def tf_files(root: Path = TF) -> list[Path]:
    return sorted(root.rglob("*.tf"))


def unq(s):
    """python-hcl2 keeps the quotes of string literals and block labels."""
    return s[1:-1] if isinstance(s, str) and len(s) >= 2 and s[0] == s[-1] == '"' else s


def load(path: Path) -> dict:
    with open(path) as f:
        return hcl2.load(f)


def blocks(directory: Path, kind: str) -> dict[str, dict]:
    """label -> body of every `kind` block (variable, output, module) in a directory."""
    out: dict[str, dict] = {}
    for f in sorted(directory.glob("*.tf")):
        for block in load(f).get(kind, []):
            for label, body in block.items():
                out[unq(label)] = body
    return out


def module_text(directory: Path) -> str:
    return "\n".join(f.read_text() for f in sorted(directory.glob("*.tf")))


def run(cmd, timeout=120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw)


# -- format -----------------------------------------------------------------------------


def hclfmt_bin() -> str:
    for candidate in (TOOLS / "bin" / "hclfmt", shutil.which("hclfmt")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    go = shutil.which("go")
    if go is None:
        pytest.skip("hclfmt is not installed and there is no Go toolchain to build it")
    r = run(
        [go, "install", "github.com/hashicorp/hcl/v2/cmd/hclfmt@latest"],
        timeout=300,
        env={**os.environ, "GOBIN": str(TOOLS / "bin"), "GOFLAGS": "-mod=mod"},
    )
    if r.returncode != 0:
        pytest.skip(f"hclfmt could not be built from the Go module proxy: {r.stderr[-500:]}")
    return str(TOOLS / "bin" / "hclfmt")


def test_hcl_is_formatted():
    hclfmt = hclfmt_bin()
    bad = []
    for f in tf_files() + sorted(TF.rglob("*.tfvars*")):
        r = run([hclfmt, "-check", "-require-no-change", str(f)])
        if r.returncode != 0:
            bad.append(f"{f.relative_to(REPO_ROOT)}: {r.stderr.strip()[:300]}")
    assert not bad, "not hclfmt-formatted (run `.tools/bin/hclfmt -w FILE`):\n" + "\n".join(bad)


@pytest.mark.parametrize("tool", ["terraform", "tofu"])
def test_terraform_fmt_when_installed(tool):
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"no {tool} binary on PATH")
    r = run([path, "fmt", "-check", "-recursive", "-diff", str(TF)], env={**os.environ, "CHECKPOINT_DISABLE": "1"})
    assert r.returncode == 0, r.stdout + r.stderr


# -- structure ---------------------------------------------------------------------------


def test_every_file_parses():
    for f in tf_files():
        load(f)


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.name)
def test_module_layout(module):
    for name in ("main.tf", "variables.tf", "outputs.tf", "versions.tf"):
        assert (module / name).is_file(), f"{module.name} lacks {name}"
    versions = load(module / "versions.tf")["terraform"][0]
    assert "required_version" in versions
    providers = versions["required_providers"][0]
    assert "aws" in providers and "version" in providers["aws"], providers


@pytest.mark.parametrize("directory", MODULES + EXAMPLES, ids=lambda p: p.name)
def test_variables_typed_described_and_used(directory):
    text = module_text(directory)
    for name, body in blocks(directory, "variable").items():
        assert body.get("type"), f"{directory.name}: variable {name} has no type"
        assert len(unq(body.get("description", "")).strip()) > 10, f"{directory.name}: variable {name} has no description"
        assert re.search(rf"\bvar\.{name}\b", text), f"{directory.name}: variable {name} is never used"


@pytest.mark.parametrize("directory", MODULES + EXAMPLES, ids=lambda p: p.name)
def test_outputs_described(directory):
    outputs = blocks(directory, "output")
    assert outputs, f"{directory.name} has no outputs"
    for name, body in outputs.items():
        assert len(unq(body.get("description", "")).strip()) > 5, f"{directory.name}: output {name} has no description"


def test_every_module_is_used_by_an_example():
    used = set()
    for example in EXAMPLES:
        for name, body in blocks(example, "module").items():
            source = unq(body["source"])
            used.add((example / source).resolve())
    missing = [m.name for m in MODULES if m.resolve() not in used]
    assert not missing, f"modules no example uses: {missing}"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_module_calls_match_the_modules(example):
    """What `terraform validate` would say about the calls: unknown arguments, missing
    required variables, references to outputs a module does not have."""
    text = module_text(example)
    calls = blocks(example, "module")
    for call, body in calls.items():
        module_dir = (example / unq(body["source"])).resolve()
        declared = blocks(module_dir, "variable")
        args = {k for k in body if k not in ("source", "version", "providers", "depends_on", "count", "for_each", "__is_block__")}
        unknown = args - set(declared)
        assert not unknown, f"module {call}: arguments the module does not declare: {sorted(unknown)}"
        required = {n for n, v in declared.items() if "default" not in v}
        assert required <= args, f"module {call}: required variables not passed: {sorted(required - args)}"
    for call, output in re.findall(r"\bmodule\.(\w+)\.(\w+)", text):
        assert call in calls, f"reference to undeclared module {call}"
        module_dir = (example / unq(calls[call]["source"])).resolve()
        assert output in blocks(module_dir, "output"), f"module.{call}.{output}: no such output"


def test_templates_get_exactly_their_variables():
    """Every templatefile(path, {...}) call passes every ${name} its template uses and no
    unused one (a typo would otherwise surface only at apply time)."""
    found = 0
    for f in tf_files():
        text = f.read_text()
        for m in re.finditer(r'templatefile\("\$\{path\.module\}/([^"]+)",\s*\{(.*?)\n\s*\}\)', text, re.S):
            found += 1
            template = (f.parent / m.group(1)).read_text()
            passed = set(re.findall(r"^\s*(\w+)\s*=", m.group(2), re.M))
            # ${name} not preceded by $ (an escaped $${...} is literal shell).
            used = set(re.findall(r"(?<!\$)\$\{(\w+)\}", template))
            assert used <= passed, f"{f.name}: {m.group(1)} uses {sorted(used - passed)} which are not passed"
            assert passed <= used, f"{f.name}: {m.group(1)} is passed {sorted(passed - used)} which it never uses"
            assert "%{" not in template, f"{m.group(1)}: template directive syntax in a shell script"
    assert found >= 2


REGION = re.compile(r"\b(us|eu|ap|sa|ca|me|af|il|mx|cn|us-gov)-(north|south|east|west|central|northeast|southeast|northwest|southwest)-\d\b")
CREDENTIALS = re.compile(r"(AKIA|ASIA)[0-9A-Z]{16}|aws_secret_access_key|aws_access_key_id|secret_key\s*=|access_key\s*=", re.I)


def test_no_hard_coded_region_or_credentials():
    files = [f for f in TF.rglob("*") if f.is_file() and f.suffix in (".tf", ".tftpl", ".sh", ".example", ".service", ".md")]
    for f in files:
        text = f.read_text()
        assert not REGION.search(text), f"{f.relative_to(REPO_ROOT)} names a region: {REGION.search(text).group(0)}"
        assert not CREDENTIALS.search(text), f"{f.relative_to(REPO_ROOT)} holds credentials: {CREDENTIALS.search(text).group(0)}"
    for f in tf_files():
        for provider in load(f).get("provider", []):
            for name, body in provider.items():
                assert not {"region", "access_key", "secret_key", "profile"} & set(body), f"{f}: provider {name} sets {body}"


def test_brokers_run_the_shipped_systemd_unit():
    """The brokers module installs packaging/systemd/oxbow.service itself, not a copy."""
    main = (TF / "modules/brokers/main.tf").read_text()
    assert 'file("${path.module}/../../../packaging/systemd/oxbow.service")' in main
    assert (TF / "modules/brokers/../../../packaging/systemd/oxbow.service").resolve().is_file()


# -- security scan -----------------------------------------------------------------------


def checkov_bin() -> str:
    checkov = CHECKOV_VENV / "bin" / "checkov"
    if checkov.is_file():
        return str(checkov)
    # Not set up by scripts/test.sh: install it now, in a venv of its own, bounded.
    python = shutil.which("python3")
    r = run([python, "-m", "venv", str(CHECKOV_VENV)], timeout=120)
    if r.returncode == 0:
        r = run([str(CHECKOV_VENV / "bin/pip"), "install", "-q", "--disable-pip-version-check", "-r", str(CHECKOV_REQUIREMENTS)], timeout=600)
    if r.returncode != 0 or not checkov.is_file():
        shutil.rmtree(CHECKOV_VENV, ignore_errors=True)
        pytest.skip(f"checkov could not be installed from PyPI: {r.stderr[-500:]}")
    return str(checkov)


def test_checkov_finds_nothing_unexplained():
    r = run(
        [checkov_bin(), "-d", str(TF), "--framework", "terraform", "--quiet", "--compact", "--skip-download", "-o", "json"],
        timeout=300,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )
    assert r.returncode in (0, 1), r.stderr[-2000:]
    report = json.loads(r.stdout)
    reports = report if isinstance(report, list) else [report]
    failed = [c for rep in reports for c in rep.get("results", {}).get("failed_checks", [])]
    summary = [rep.get("summary") for rep in reports]
    print(f"\ncheckov: {summary}")
    assert all(s and s.get("parsing_errors", 0) == 0 for s in summary), summary
    assert not failed, "\n".join(f"{c['check_id']} {c['check_name']} at {c['file_path']}:{c['file_line_range']}" for c in failed)
    skipped = [c for rep in reports for c in rep.get("results", {}).get("skipped_checks", [])]
    for c in skipped:
        assert len((c.get("check_result", {}).get("suppress_comment") or "").strip()) > 20, f"{c['check_id']} skipped without a reason"
