#!/usr/bin/env bash
# Run the whole Oxbow test suite, installing what it needs when it is missing.
#
#   scripts/test.sh                 everything: setup, fmt, clippy, unit, build, e2e
#   scripts/test.sh setup           only install the tools (kcat, .venv, Kafka jars)
#   scripts/test.sh e2e [-- ARGS]   setup + end-to-end suite only (pytest ARGS, e.g. -k http)
#   scripts/test.sh build e2e       rebuild the binaries, then the end-to-end suite
#   scripts/test.sh fmt clippy ...  any subset of stages, in the order given
#   scripts/test.sh sim --seeds N   the deterministic simulation over N seeds (default 200;
#                                   the unit stage runs 24)
#   scripts/test.sh fuzz            the protocol fuzzer for longer (not in the default set):
#                                   OXBOW_FUZZ_SECS (default 300) of the seeded run, then as
#                                   long per libFuzzer target if nightly + cargo-fuzz exist
#
# Works from any directory. CI runs it through .ci/run (as root, CI=true, no stdin).
# A failing stage does not stop the later ones (except setup; a failed build skips e2e);
# the exit code is non-zero if any stage failed, with a summary at the end.
# Environment knobs:
#   OXBOW_KAFKA_VERSION   Apache Kafka jars to fetch into .tools/kafka/libs (default below)
#   OXBOW_E2E_TARGET      oxbow (default) or kafka: run the e2e suite against a real Apache
#                         Kafka broker built from the same jars (validates the tests themselves)
#   E2E_SUITE_TIMEOUT_S   hard bound on the whole pytest run (default 2400 s)
#   E2E_TEST_TIMEOUT_S    per-test bound handed to pytest-timeout (default 300 s)
#   CARGO_STAGE_TIMEOUT_S bound on each cargo stage (default 2400 s; a cold debug build is ~4 min)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

KAFKA_VERSION="${OXBOW_KAFKA_VERSION:-4.1.1}"
KAFKA_LIBS="$ROOT/.tools/kafka/libs"
VENV="$ROOT/.venv"
REQUIREMENTS="$ROOT/tests/e2e/requirements.txt"
E2E_SUITE_TIMEOUT_S="${E2E_SUITE_TIMEOUT_S:-2400}"
E2E_TEST_TIMEOUT_S="${E2E_TEST_TIMEOUT_S:-300}"
CARGO_STAGE_TIMEOUT_S="${CARGO_STAGE_TIMEOUT_S:-2400}"
export DEBIAN_FRONTEND=noninteractive
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# A one-shot CI build gains nothing from incremental state, which is the largest thing in a
# debug target dir; developers keep it unless they say otherwise.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"; fi

START_S=$SECONDS
section() { printf '\n======== %s  (t+%ds) ========\n' "$*" "$((SECONDS - START_S))"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- setup ----

APT_UPDATED=0
apt_install() {
    # apt-get update at most once per run, and only when something must be installed.
    command -v apt-get >/dev/null || die "need to install $* but apt-get is missing"
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo -n)
    if [ "$APT_UPDATED" -eq 0 ]; then
        "${sudo[@]}" apt-get update -qq
        APT_UPDATED=1
    fi
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@"
}

setup_system_packages() {
    local missing=()
    command -v kcat >/dev/null || missing+=(kcat)
    command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
    command -v mvn >/dev/null || missing+=(maven)
    command -v python3 >/dev/null || missing+=(python3 python3-venv)
    # etcd for the metadata tests. No protoc: the build runs the one vendored in a crate
    # (scripts/protoc, .cargo/config.toml), and stage_build checks that it still does.
    command -v etcd >/dev/null || missing+=(etcd-server etcd-client)
    # promtool and a real Prometheus for the shipped alerting rules (test_monitoring.py).
    command -v prometheus >/dev/null || missing+=(prometheus)
    # Headless Chromium for the console's browser test (tests/e2e/test_console.py).
    command -v chromium >/dev/null || missing+=(chromium)
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "installing with apt: ${missing[*]}"
        apt_install "${missing[@]}"
    else
        echo "kcat, java, mvn, python3, etcd, prometheus, chromium: present"
    fi
}

setup_venv() {
    local stamp="$VENV/.requirements.sha256" want
    want="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"
    if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        echo ".venv: up to date"
        return
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        echo "creating .venv"
        python3 -m venv "$VENV" || {
            apt_install python3-venv
            python3 -m venv "$VENV"
        }
    fi
    echo "installing $REQUIREMENTS into .venv"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQUIREMENTS"
    echo "$want" >"$stamp"
}

kafka_libs_present() {
    compgen -G "$KAFKA_LIBS/kafka_2.13-*.jar" >/dev/null &&
        compgen -G "$KAFKA_LIBS/kafka-tools-[0-9]*.jar" >/dev/null &&
        compgen -G "$KAFKA_LIBS/kafka-clients-*.jar" >/dev/null &&
        compgen -G "$KAFKA_LIBS/kafka-streams-[0-9]*.jar" >/dev/null
}

setup_kafka_jars() {
    local marker="$KAFKA_LIBS/.oxbow-kafka-version"
    # The presence check too: a marker from before kafka-streams was in the list must refetch.
    if [ "$(cat "$marker" 2>/dev/null)" = "$KAFKA_VERSION" ] && kafka_libs_present; then
        echo ".tools/kafka/libs: Apache Kafka $KAFKA_VERSION present"
        return
    fi
    if [ ! -f "$marker" ] && kafka_libs_present; then
        # Populated by hand (or by an older run): reuse whatever version is there.
        echo ".tools/kafka/libs: reusing jars already there ($(basename "$(compgen -G "$KAFKA_LIBS/kafka-clients-*.jar" | head -1)"))"
        return
    fi
    echo "fetching Apache Kafka $KAFKA_VERSION jars from Maven Central into .tools/kafka/libs"
    local pomdir
    pomdir="$(mktemp -d)"
    cat >"$pomdir/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.oxbow.tools</groupId>
  <artifactId>kafka-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-streams</artifactId><version>$KAFKA_VERSION</version></dependency>
  </dependencies>
</project>
EOF
    mkdir -p "$KAFKA_LIBS"
    rm -f "$KAFKA_LIBS"/*.jar
    (cd "$pomdir" && mvn -q -B -ntp -Dstyle.color=never \
        org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$KAFKA_LIBS")
    rm -rf "$pomdir"
    kafka_libs_present || die "Kafka jars missing after mvn copy-dependencies"
    echo "$KAFKA_VERSION" >"$marker"
    echo "fetched $(find "$KAFKA_LIBS" -name '*.jar' | wc -l) jars"
}

# Offline Terraform checks (tests/e2e/test_terraform.py): hclfmt from the Go module proxy,
# checkov in a venv of its own (~290 MB of pinned packages the e2e venv must not share).
# Best effort: the tests build or install what is still missing, and skip only when that
# cannot be done.
setup_terraform_tools() {
    if [ -x "$ROOT/.tools/bin/hclfmt" ]; then
        echo ".tools/bin/hclfmt: present"
    elif command -v go >/dev/null; then
        echo "building hclfmt from the Go module proxy into .tools/bin"
        GOBIN="$ROOT/.tools/bin" GOFLAGS=-mod=mod timeout 300 \
            go install github.com/hashicorp/hcl/v2/cmd/hclfmt@latest || echo "warning: hclfmt build failed"
    else
        echo "warning: no Go toolchain; test_terraform.py will skip the hclfmt check"
    fi
    local venv="$ROOT/.tools/checkov-venv" req="$ROOT/tests/e2e/requirements-checkov.txt" want
    want="$(sha256sum "$req" | cut -d' ' -f1)"
    if [ -x "$venv/bin/checkov" ] && [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" = "$want" ]; then
        echo ".tools/checkov-venv: up to date"
        return
    fi
    echo "installing checkov into .tools/checkov-venv"
    if python3 -m venv "$venv" && timeout 600 "$venv/bin/python" -m pip install -q \
        --disable-pip-version-check -r "$req"; then
        echo "$want" >"$venv/.requirements.sha256"
    else
        echo "warning: checkov install failed; test_terraform.py will try again"
    fi
}

stage_setup() {
    section "setup: system packages"
    setup_system_packages
    section "setup: python venv"
    setup_venv
    section "setup: Apache Kafka jars"
    setup_kafka_jars
    section "setup: Terraform check tools"
    setup_terraform_tools
}

# ----------------------------------------------------------------- rust ----
# Stages below return non-zero on failure (they never exit), so one failing stage does not
# hide the results of the others; the summary at the end decides the exit code.

fail() { printf 'error: %s\n' "$*" >&2; return 1; }

# Nothing may hang CI: each cargo stage gets a (generous) bound of its own.
bounded() {
    local rc=0
    timeout --kill-after=30 "$CARGO_STAGE_TIMEOUT_S" "$@" || rc=$?
    case "$rc" in
        0) ;;
        124 | 137) fail "'$*' exceeded ${CARGO_STAGE_TIMEOUT_S}s" ;;
        *) fail "'$*' failed (exit $rc)" ;;
    esac
}

stage_fmt() {
    section "cargo fmt --check"
    bounded cargo fmt --all --check -- --color=never
}

stage_clippy() {
    section "cargo clippy"
    bounded cargo clippy --workspace --all-targets -- -D warnings
}

stage_unit() {
    section "cargo test"
    bounded cargo test --workspace
}

# A fresh machine has only the Rust toolchain: etcd-client's build (the one step that runs
# protoc) must not need a protoc on PATH. A PATH whose protoc always fails catches a
# regression; its own target dir makes the build script run for real every time (~30 s).
check_no_system_protoc() {
    local stub
    stub="$(mktemp -d)"
    printf '#!/bin/sh\necho "a protoc on PATH was used; the build must run the vendored one" >&2\nexit 1\n' >"$stub/protoc"
    chmod +x "$stub/protoc"
    rm -rf target/protoc-check
    local rc=0
    env -u PROTOC PATH="$stub:$PATH" timeout --kill-after=30 "$CARGO_STAGE_TIMEOUT_S" \
        cargo check -q -p etcd-client --target-dir target/protoc-check || rc=$?
    rm -rf "$stub" target/protoc-check
    [ "$rc" -eq 0 ] || fail "etcd-client did not build without a system protoc (exit $rc)"
}

stage_build() {
    section "cargo build"
    check_no_system_protoc || return 1
    bounded cargo build --workspace || return 1
    local bin
    for bin in oxbow oxbow-loadtest; do
        [ -x "target/debug/$bin" ] || fail "target/debug/$bin was not built" || return 1
    done
}

# The bounded run (12 s) is part of `cargo test --workspace`; this is the longer one.
stage_fuzz() {
    section "protocol fuzzer (${OXBOW_FUZZ_SECS:-300} s per target)"
    OXBOW_FUZZ_SECS="${OXBOW_FUZZ_SECS:-300}" bounded cargo test -p oxbow-gateway \
        --test fuzz_decode fuzz_ -- --nocapture || return 1
    if cargo +nightly fuzz --version >/dev/null 2>&1; then
        local target
        for target in request batch; do
            bounded fuzz/run.sh "$target" "${OXBOW_FUZZ_SECS:-300}" || return 1
        done
    else
        echo "(nightly or cargo-fuzz missing: coverage-guided run skipped)"
    fi
}

# The fixed seeds (OXBOW_SIM_SEEDS, 24 by default; OXBOW_SIM_LIFECYCLE_SEEDS, 12, with the
# compactor running; OXBOW_SIM_COMPACTION_SEEDS, 12, on a key-compacted topic) run in
# `cargo test --workspace`; this runs more of each: `scripts/test.sh sim --seeds 500`
# (seeds from OXBOW_SIM_FIRST_SEED, default 1).
stage_sim() {
    section "deterministic simulation (${SIM_SEEDS:-200} seeds, then as many with the storage lifecycle and with key compaction)"
    OXBOW_SIM_SEEDS="${SIM_SEEDS:-200}" OXBOW_SIM_LIFECYCLE_SEEDS="${SIM_SEEDS:-200}" \
        OXBOW_SIM_COMPACTION_SEEDS="${SIM_SEEDS:-200}" \
        bounded cargo test -p oxbow-segment-writer --test sim -- --nocapture \
        fixed_seeds lifecycle_seeds compaction_seeds || return 1
}

# ------------------------------------------------------------------ e2e ----

stage_e2e() {
    section "end-to-end tests (pytest tests/e2e, target: ${OXBOW_E2E_TARGET:-oxbow})"
    if [ "${OXBOW_E2E_TARGET:-oxbow}" = "oxbow" ] && [ -z "${OXBOW_BIN:-}" ] && [ ! -x target/debug/oxbow ]; then
        fail "target/debug/oxbow is missing: run 'scripts/test.sh build e2e'"
        return 1
    fi
    export OXBOW_KAFKA_LIBS="$KAFKA_LIBS"
    local rc=0
    # Hard bound on the whole suite on top of pytest-timeout's per-test bound: SIGTERM lets
    # conftest stop its brokers; SIGKILL follows 30 s later if that did not end it.
    timeout --kill-after=30 "$E2E_SUITE_TIMEOUT_S" \
        "$VENV/bin/python" -m pytest tests/e2e -p no:cacheprovider \
        --timeout="$E2E_TEST_TIMEOUT_S" "${PYTEST_ARGS[@]}" </dev/null || rc=$?
    case "$rc" in
        0) ;;
        5) fail "pytest collected no tests (exit 5)" ;;
        124 | 137) fail "end-to-end suite exceeded ${E2E_SUITE_TIMEOUT_S}s" ;;
        *) fail "end-to-end tests failed (pytest exit $rc)" ;;
    esac
}

# ---------------------------------------------------------------- main -----

STAGES=()
PYTEST_ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --) shift; PYTEST_ARGS=("$@"); break ;;
        setup | fmt | clippy | unit | build | e2e | fuzz | sim) STAGES+=("$1") ;;
        --seeds) shift; SIM_SEEDS="${1:?--seeds needs a number}" ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) die "unknown stage '$1' (setup fmt clippy unit build e2e fuzz sim)" ;;
    esac
    shift
done
[ "${#STAGES[@]}" -gt 0 ] || STAGES=(setup fmt clippy unit build e2e)

# The end-to-end tests need the installed tools: set up first whenever they run.
case " ${STAGES[*]} " in
    *" setup "*) ;;
    *" e2e "*) STAGES=(setup "${STAGES[@]}") ;;
esac

FAILED=()
for stage in "${STAGES[@]}"; do
    case "$stage" in
        setup) stage_setup ;; # errexit applies: nothing after it can run without the tools
        e2e)
            if [[ " ${FAILED[*]} " == *" build "* ]]; then
                section "end-to-end tests: skipped, the build failed"
                FAILED+=(e2e)
            else
                stage_e2e || FAILED+=(e2e)
            fi
            ;;
        *) "stage_$stage" || FAILED+=("$stage") ;;
    esac
done

if [ "${#FAILED[@]}" -gt 0 ]; then
    section "FAILED: ${FAILED[*]}  (passed: $(printf '%s\n' "${STAGES[@]}" | grep -vxF -f <(printf '%s\n' "${FAILED[@]}") | tr '\n' ' '))"
    exit 1
fi
section "all requested stages passed: ${STAGES[*]}"
