#!/usr/bin/env bash
# What `--annotate modules` costs a PyTorch program (docs/cli.md): the
# forward loop of scripts/module_demo.py (2 blocks; 14 module calls per
# forward), timed by the script itself, with and without the bootstrap, alone
# (hooks and NVTX calls with no tool attached) and under nsys through
# `llmperf profile --no-ncu` (ranges recorded). Prints the median seconds of
# RUNS runs of each and the ratio annotated / plain.
#
#   bench/annotate_overhead.sh [STEPS] [WIDTH] [RUNS]     defaults: 2000 16 3
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-2000}
WIDTH=${2:-16}
RUNS=${3:-3}
BIN=${LLMPERF:-target/release/llmperf}
PY=${PYTHON:-.venv/bin/python}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cp src/plan/annotate_sitecustomize.py "$OUT/sitecustomize.py"
cp src/plan/nvtx_ctypes.py "$OUT/_llmperf_nvtx.py"
seconds() { sed -n 's/^module_demo: .* in \([0-9.]*\) s$/\1/p' "$1" | tail -1; }
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
alone() { # $1: annotate or plain
    if [ "$1" = annotate ]; then
        env PYTHONPATH="$OUT" LLMPERF_BOOTSTRAP=modules LLMPERF_BOOTSTRAP_DEPTH=4 "$PY" scripts/module_demo.py "$STEPS" "$WIDTH" 2>/dev/null
    else
        "$PY" scripts/module_demo.py "$STEPS" "$WIDTH" 2>/dev/null
    fi | sed -n 's/^module_demo: .* in \([0-9.]*\) s$/\1/p'
}
under_nsys() { # $1: annotate or plain
    local flag=()
    [ "$1" = annotate ] && flag=(--annotate modules)
    local dir
    dir=$("$BIN" -q profile --no-ncu "${flag[@]}" -o "$OUT/runs" -- "$PY" scripts/module_demo.py "$STEPS" "$WIDTH" | tail -1)
    seconds "$dir/nsys/stdout.log"
}
for how in alone under_nsys; do
    for mode in plain annotate; do
        for _ in $(seq "$RUNS"); do "$how" "$mode"; done | median > "$OUT/$how.$mode"
    done
    p=$(cat "$OUT/$how.plain"); a=$(cat "$OUT/$how.annotate")
    printf '%-10s plain %8.4f s  annotated %8.4f s  ratio %.3f  (%d forwards, width %d, median of %d)\n' \
        "$how" "$p" "$a" "$(echo "$a / $p" | bc -l)" "$STEPS" "$WIDTH" "$RUNS"
done
