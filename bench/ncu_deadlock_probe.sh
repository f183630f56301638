#!/usr/bin/env bash
# How often does ncu 2022.3 deadlock in range replay on a host without a GPU
# (docs/internals.md, "The ncu range-replay deadlock")?
#
# Makes one run directory of the built-in LLM (nsys off, `infer.cuda_probe=true`),
# then runs ncu's range replay of that workload N times with the given NVTX
# filter, each with a 30 s deadline, LOAD shells spinning on the CPU meanwhile.
# Prints per run the exit status (137: killed at the deadline, a hang) and the
# ranges ncu logged, then the count of hangs.
#
#   bench/ncu_deadlock_probe.sh [N] [LOAD] [NVTX_INCLUDE...]
#   defaults: 8 2 LLM@attn/ LLM@mlp/     (64 ranges; LLM@prefill/ alone is 2)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-8}
LOAD=${2:-2}
shift $(($# < 2 ? $# : 2))
[ $# -gt 0 ] || set -- LLM@attn/ LLM@mlp/
BIN=$(realpath "${LLMPERF:-target/release/llmperf}")
OUT=$(mktemp -d)
spinners=()
cleanup() {
    [ ${#spinners[@]} -eq 0 ] || kill "${spinners[@]}" 2>/dev/null || true
    pkill -9 -f "^$BIN workload --run-dir $OUT" 2>/dev/null || true
    rm -rf "$OUT"
}
trap cleanup EXIT
run=$("$BIN" -q profile --model llm_tiny infer.iters=2 infer.cuda_probe=true pipeline.nsys.enable=false -o "$OUT")
include=()
for r in "$@"; do include+=(--nvtx-include "$r"); done
for _ in $(seq "$LOAD"); do
    sh -c 'while :; do :; done' &
    spinners+=($!)
done
hangs=0
for i in $(seq "$N"); do
    rc=0
    # In a subshell, so that bash does not announce the killed ncu.
    (LC_ALL=C exec timeout -s KILL 30 ncu --target-processes all --replay-mode range --nvtx "${include[@]}" \
        --section SpeedOfLight --force-overwrite --log-file "$OUT/p$i.log" --export "$OUT/p$i" \
        "$BIN" workload --run-dir "$run" --resolved-config "$run/config.yaml" \
        --timings-file workload/timings.ncu.json >/dev/null 2>&1) || rc=$?
    # A killed ncu leaves its target waiting in the injection.
    pkill -9 -f "^$BIN workload --run-dir $run" 2>/dev/null || true
    [ "$rc" -eq 137 ] && hangs=$((hangs + 1))
    echo "run $i: exit $rc, ranges logged $(grep -c 'Skipping invalid capture range' "$OUT/p$i.log" || true)"
done
echo "ncu hung in $hangs of $N runs (filter: $*, $LOAD spinning shells)"
