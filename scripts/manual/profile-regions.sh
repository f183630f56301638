#!/usr/bin/env bash
# Manual test: profile the regions demonstration under nsys and show what nsys
# itself saw. Expect A, A1 and B with ITERS instances each (A1 nested in A).
#
#   scripts/manual/profile-regions.sh [ITERS] [EXTRA OVERRIDES...]
set -euo pipefail
cd "$(dirname "$0")/../.."
ITERS=${1:-5}
shift || true
BIN=${LLMPERF:-target/release/llmperf}
[ -x "$BIN" ] || { echo "build first: make build" >&2; exit 1; }
RUN=$("$BIN" profile --model nvtx_regions "infer.iters=$ITERS" "$@" | tail -1)
echo "run directory: $RUN"
echo "--- manifest stages"
python3 -c 'import json,sys; [print("%-6s %-8s %s" % (s["name"], s["status"], s.get("reason", ""))) for s in json.load(open(sys.argv[1]))["stages"]]' "$RUN/manifest.json"
echo "--- nsys stats nvtxsum (nsys's own view of the ranges)"
timeout 300 nsys stats --report nvtxsum --format csv "$RUN/nsys/report.nsys-rep" 2>/dev/null | grep -E 'Range|PushPop|StartEnd'
echo "--- workload timings (ms)"
python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); [print("%-8s count %4d  mean %.3f" % (k, v["count"], v["mean_ms"])) for k, v in t["stages"].items()]' "$RUN/workload/timings.json"
