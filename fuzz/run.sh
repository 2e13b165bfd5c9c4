#!/usr/bin/env bash
# A coverage-guided run of one protocol fuzz target, seeded with the same corpus as the
# bounded run in `cargo test`: ./fuzz/run.sh request|batch [seconds, default 300]
# Needs nightly and cargo-fuzz (`cargo install cargo-fuzz`). A crash is written to
# fuzz/artifacts/<target>/; copy it into gateway/tests/corpus/regressions/ once fixed.
set -euo pipefail
target="${1:?usage: fuzz/run.sh request|batch [seconds]}"
secs="${2:-300}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# Export the seeds (captured frames, generated per-API frames, regressions, batches).
OXBOW_FUZZ_SECS=0 OXBOW_FUZZ_EXPORT="$root/fuzz/corpus" \
  cargo test -q -p oxbow-gateway --test fuzz_decode fuzz_ >/dev/null
cd fuzz
# -malloc_limit_mb: the same single-allocation bound as the test's allocator guard.
exec cargo +nightly fuzz run "$target" "corpus/$target" -- \
  -max_total_time="$secs" -malloc_limit_mb=256 -rss_limit_mb=2048 -print_final_stats=1
