#!/usr/bin/env bash
# What N command-line overrides cost (docs/internals.md, "Configuration
# layering"): `llmperf config show` with N `key=value` overrides, each checked
# against the merge of the layers below it. Give several binaries to compare
# (a build before the kept merge, 42ecac6^, took N² time).
#
#   bench/overrides.sh [N] [BIN...]     defaults: 4000 target/release/llmperf
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-4000}
shift || true
BINS=("${@:-target/release/llmperf}")
args=()
for i in $(seq "$N"); do
    args+=("runner.run.top_n_kernels=$i")
done
for bin in "${BINS[@]}"; do
    start=$(date +%s.%N)
    "$bin" config show "${args[@]}" >/dev/null
    end=$(date +%s.%N)
    printf '%s: %d overrides in %.2f s\n' "$bin" "$N" "$(echo "$end - $start" | bc)"
done
