#!/usr/bin/env bash
# How often does nsys hang after the application exits (docs/internals.md, "The nsys conversion hang")?
#
# Profiles the regions workload N times back to back with a short conversion
# deadline and prints, per capture, the wall time and the nsys stage's
# diagnoses: `nsys_postprocess_hang` marks a hang that llmperf killed and
# retried, `nsys_failed_without_capture` an attempt nsys lost by failing on
# its own (an exit status and no report), also retried. With hang_retries=0
# a hang shows as rc=5 instead.
# Further arguments are overrides for every capture. With a capture range
# ("The nsys capture-range hang"), a capture that timed out in its range counts:
#
#   bench/nsys_hang_probe.sh [N] [HANG_RETRIES] [OVERRIDE...]     defaults: 10 1
#   bench/nsys_hang_probe.sh 40 0 pipeline.nsys.capture_range=nvtx pipeline.nsys.nvtx_capture=B \
#       infer.iters=3 pipeline.nsys.timeout_s=60
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10}
RETRIES=${2:-1}
BIN=${LLMPERF:-target/release/llmperf}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
hangs=0
failures=0
for i in $(seq "$N"); do
    start=$(date +%s.%N)
    rc=0
    dir=$("$BIN" -q profile --model nvtx_regions pipeline.nsys.trace=nvtx,osrt pipeline.nsys.postprocess_timeout_s=20 \
        "pipeline.nsys.hang_retries=$RETRIES" pipeline.ncu.enable=false "${@:3}" -o "$OUT" 2>/dev/null | tail -1) || rc=$?
    end=$(date +%s.%N)
    codes=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); s=[x for x in m["stages"] if x["name"]=="nsys"][0]; print(s["status"], ",".join(d["code"] for d in s["diagnoses"]) or "-", "range-hang" if "; its capture range " in (s.get("reason") or "") else "")' "$dir/manifest.json")
    case "$codes" in *nsys_postprocess_hang*) hangs=$((hangs + 1));; esac
    case "$codes" in *nsys_failed_without_capture*) failures=$((failures + 1));; esac
    case "$codes" in *range-hang*) hangs=$((hangs + 1));; *) [ "$rc" -eq 5 ] && [ "$RETRIES" -eq 0 ] && hangs=$((hangs + 1));; esac
    printf 'capture %2d rc=%d %5.1f s nsys %s\n' "$i" "$rc" "$(echo "$end - $start" | bc)" "$codes"
done
echo "captures with an nsys hang: $hangs of $N"
echo "captures with an attempt nsys lost by failing on its own: $failures of $N"
