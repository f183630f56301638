#!/usr/bin/env bash
# `llmperf import torch` against Holistic Trace Analysis loading the same trace
# (TraceAnalysis(trace_dir=...), what every HTA analysis starts with), side by
# side: median seconds and peak memory of each, and the ratio.
#
# Input: bench/gen_kineto.py's trace, COPIES copies of a corpus trace (default
# the HTA ns-resolution ResNet DDP trace, 13.6 MB of JSON per copy), kept in
# $WORK between runs. llmperf's kernel count and summed kernel time are
# checked against the generator's ground truth before its time counts. The two
# tools alternate, llmperf first in odd runs and HTA first in even ones.
#
#   bench/torch_import.sh [COPIES]
#   RUNS=3  CORPUS=../shared/fixtures  WORK=${TMPDIR:-/tmp}/llmperf-bench  LLMPERF=target/release/llmperf
set -euo pipefail
cd "$(dirname "$0")/.."
COPIES=${1:-8}
RUNS=${RUNS:-3}
CORPUS=${CORPUS:-${LLMPERF_CORPUS:-../shared/fixtures}}
WORK=${WORK:-${TMPDIR:-/tmp}/llmperf-bench}
SRC=${SRC:-$CORPUS/real/kineto/hta-ns-resolution/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz}
HTA_PY=${HTA_PY:-.venv-hta/bin/python}
[ -n "${LLMPERF:-}" ] || cargo build --release --locked -p llmperf >&2
BIN=$(realpath "${LLMPERF:-target/release/llmperf}")
[ -x "$HTA_PY" ] || { echo "need $HTA_PY (scripts/setup.sh all)" >&2; exit 1; }
mkdir -p "$WORK/kineto_$COPIES"
TRACE="$WORK/kineto_$COPIES/trace.json"
TRUTH="$WORK/kineto_$COPIES.truth.json"
if [ ! -f "$TRACE" ] || [ ! -f "$TRUTH" ]; then
    python3 bench/gen_kineto.py "$SRC" "$TRACE" "$COPIES" >"$TRUTH"
fi
echo "trace: $TRACE ($(du -m "$TRACE" | cut -f1) MB), truth $(cat "$TRUTH")" >&2

source bench/lib.sh

llmperf_once() {
    rm -rf "$WORK/torch-out"
    local t
    t=$(timed "$BIN" -q import torch "$TRACE" -o "$WORK/torch-out")
    python3 - "$WORK/torch-out/torch/capture.json" "$TRUTH" <<'PY' >&2
import decimal, json, sys
c, truth = (json.load(open(p)) for p in sys.argv[1:3])
n = sum(s["kernels"]["count"] for s in c["streams"])
ns = sum(s["kernels"]["time_ns"] for s in c["streams"])
want = int(decimal.Decimal(truth["kernel_dur_us"]) * 1000)
assert (n, ns) == (truth["kernels"], want), ((n, ns), truth)
PY
    echo "$t"
}

hta_once() {
    timed env HTA_DISABLE_NS_ROUNDING=1 "$HTA_PY" -c '
import logging, sys
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
TraceAnalysis(trace_dir=sys.argv[1])' "$(dirname "$TRACE")"
}

: >"$WORK/llmperf.runs"
: >"$WORK/hta.runs"
for i in $(seq "$RUNS"); do
    if [ $((i % 2)) -eq 1 ]; then
        llmperf_once >>"$WORK/llmperf.runs"
        hta_once >>"$WORK/hta.runs"
    else
        hta_once >>"$WORK/hta.runs"
        llmperf_once >>"$WORK/llmperf.runs"
    fi
done
python3 - "$WORK/llmperf.runs" "$WORK/hta.runs" <<'PY'
import statistics, sys
def read(p):
    rows = [l.split() for l in open(p) if l.strip()]
    return statistics.median(float(t) for t, _ in rows), max(int(m) for _, m in rows) / 1024
(l, lm), (h, hm) = read(sys.argv[1]), read(sys.argv[2])
print(f"llmperf import torch: {l:.2f} s, {lm:.0f} MiB peak")
print(f"HTA TraceAnalysis load: {h:.2f} s, {hm:.0f} MiB peak")
print(f"HTA / llmperf: {h / l:.1f}x the time")
PY
