#!/usr/bin/env bash
# Manual test: range replay of three regions of the regions demonstration,
# A, B and A::A1 (nested), with nsys first (which the preflight checks them
# against). With a GPU: each region has ncu/regions/<region>/ and a row in
# ncu/regions/report.{md,json}. Without one: each pass matched exactly its
# ranges (ncu logs one line per matched range), and the report says nothing
# was profiled.
#
#   scripts/manual/range-three-regions.sh [ITERS]
set -uo pipefail
source "$(dirname "$0")/lib.sh"
ITERS=${1:-3}
RUN=$(profile --model nvtx_regions "infer.iters=$ITERS" infer.cuda_probe=true --replay-mode range \
  --nvtx-include A --nvtx-include B --nvtx-include A::A1)
echo "run directory: $RUN"
check "exit status and manifest" test "$(json "$RUN" manifest.json 'd["status"]')" = ok
check "preflight found all three" test "$(json "$RUN" ncu/preflight.json 'sum(r["found"] for r in d["regions"])')" = 3
check "p0 is A/ and B/" test "$(json "$RUN" ncu/plan.json '" ".join(d["passes"][0]["expressions"])')" = "A/ B/"
check "p1 is A1/ (ncu matches a nested region by its last name)" test "$(json "$RUN" ncu/plan.json '" ".join(d["passes"][1]["expressions"])')" = "A1/"
check "report.md and report.json" test -s "$RUN/ncu/regions/report.md" -a -s "$RUN/ncu/regions/report.json"
if [ "$GPU" = 1 ]; then
  for dir in A B A__A1; do
    check "ncu/regions/$dir/ has region.json and sections.txt" test -s "$RUN/ncu/regions/$dir/region.json" -a -s "$RUN/ncu/regions/$dir/sections.txt"
  done
  check "every region profiled $ITERS times" test "$(json "$RUN" ncu/regions/report.json '" ".join(str(r["inclusive"]["calls"]) for r in d["scopes"][0]["regions"] if not r.get("unattributed"))')" = "$ITERS $ITERS $ITERS"
else
  check "p0 matched $((2 * ITERS)) ranges (A and B)" test "$(matched "$RUN" p0)" = $((2 * ITERS))
  check "p1 matched $ITERS ranges (A::A1)" test "$(matched "$RUN" p1)" = "$ITERS"
  check "no GPU: the report says nothing was profiled" grep -q "no region-specific profiling was performed" "$RUN/ncu/regions/report.md"
fi
finish
