#!/usr/bin/env bash
# NVTX overhead in instructions, which valgrind counts the same on every run
# (wall time on a shared 2-core VM varies ±15% run to run, far above the effect).
#
#   overhead = (Ir(nvtx on, N) - Ir(nvtx off, N)) / (Ir(nvtx off, N) - Ir(nvtx off, 0))
#
# i.e. the extra instructions of the NVTX calls relative to the instructions of
# the measured loop itself (start-up, libtorch loading and warm-up cancel out).
#
#   bench/nvtx_overhead_callgrind.sh [MODEL] [ITERS]     defaults: llm_tiny 50
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-llm_tiny}
ITERS=${2:-50}
BIN=$(realpath "${LLMPERF:-target/release/llmperf}")
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

irefs() { # $1 = iterations, $2 = extra flag
    OMP_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.out" \
        "$BIN" -q workload --model "$MODEL" -o "$OUT" "infer.iters=$1" infer.warmup_iters=0 device=cpu $2 2>&1 \
        | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

base=$(irefs 0 --no-nvtx)
off=$(irefs "$ITERS" --no-nvtx)
on=$(irefs "$ITERS" "")
python3 - "$MODEL" "$ITERS" "$base" "$off" "$on" <<'PY'
import sys
model, iters, base, off, on = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:])
loop = off - base
print(f"model={model} iters={iters}")
print(f"instructions: start-up {base:,}; loop without NVTX {loop:,}; NVTX extra {on - off:,}")
print(f"NVTX overhead = {(on - off) / loop * 100:.3f}% of the measured loop (target: under 1%)")
PY
