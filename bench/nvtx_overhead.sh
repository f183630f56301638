#!/usr/bin/env bash
# NVTX instrumentation overhead of the built-in workloads with no profiler attached.
#
# Runs `llmperf workload` with NVTX on and with --no-nvtx, interleaved (on, off,
# on, off, ...) so drift hits both sides, and compares the median of the
# measured-loop wall time. libtorch runs on one thread (OMP_NUM_THREADS=1): with
# two threads on two cores the run-to-run spread was ±15%, far above the effect.
# Compared:
# measured-loop wall time (timings.json `measured_ms`, warm-up excluded).
#
#   bench/nvtx_overhead.sh [MODEL] [ITERS] [REPS]     defaults: llm_tiny 300 7
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-llm_tiny}
ITERS=${2:-300}
REPS=${3:-7}
BIN=${LLMPERF:-target/release/llmperf}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

measure() { # $1 = extra flag; prints measured_ms
    local dir
    dir=$(OMP_NUM_THREADS=1 "$BIN" -q workload --model "$MODEL" -o "$OUT" "infer.iters=$ITERS" infer.warmup_iters=5 device=cpu $1 2>/dev/null | tail -1)
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["measured_ms"])' "$dir/workload/timings.json"
}

on=(); off=()
for _ in $(seq "$REPS"); do
    on+=("$(measure "")")
    off+=("$(measure --no-nvtx)")
done
python3 - "$MODEL" "$ITERS" "${on[*]}" "${off[*]}" <<'PY'
import statistics, sys
model, iters, on, off = sys.argv[1], int(sys.argv[2]), list(map(float, sys.argv[3].split())), list(map(float, sys.argv[4].split()))
m_on, m_off = statistics.median(on), statistics.median(off)
print(f"model={model} iters={iters} reps={len(on)}")
print(f"nvtx on : median {m_on:9.2f} ms  (min {min(on):.2f}, max {max(on):.2f})")
print(f"nvtx off: median {m_off:9.2f} ms  (min {min(off):.2f}, max {max(off):.2f})")
print(f"ratio on/off = {m_on / m_off:.4f}  overhead = {(m_on / m_off - 1) * 100:+.2f}%  (target: under 1%)")
PY
