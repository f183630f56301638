#!/usr/bin/env bash
# Manual test: the three-region range run with a kernel regex
# (report.kernels.include). A kernel pattern selects kernels: range results
# (each covering every kernel of its range) are kept, and the report says the
# pattern was not applied to them; the totals are those of the run without it.
#
#   scripts/manual/range-kernel-regex.sh [ITERS]
set -uo pipefail
source "$(dirname "$0")/lib.sh"
ITERS=${1:-3}
ARGS=(--model nvtx_regions "infer.iters=$ITERS" infer.cuda_probe=true --replay-mode range --no-nsys
  --nvtx-include A --nvtx-include B --nvtx-include A::A1)
PLAIN=$(profile "${ARGS[@]}")
RUN=$(profile "${ARGS[@]}" 'report.kernels.include=["regex:gemm|matmul"]')
echo "run directories: $PLAIN $RUN"
check "exit status and manifest" test "$(json "$RUN" manifest.json 'd["status"]')" = ok
if [ "$GPU" = 1 ]; then
  # Without a GPU both reports are empty, and equal whatever the pattern did.
  check "same totals with and without the pattern" test \
    "$(json "$RUN" ncu/regions/report.json 'd["scopes"][0]["totals"]')" = \
    "$(json "$PLAIN" ncu/regions/report.json 'd["scopes"][0]["totals"]')"
  check "range results kept and counted as not selected" test "$(json "$RUN" ncu/regions/report.json 'd["source"].get("ranges_not_selected", 0) > 0')" = True
  check "the report says so" grep -q "not applied to the" "$RUN/ncu/regions/report.md"
else
  check "p0 matched $((2 * ITERS)) ranges" test "$(matched "$RUN" p0)" = $((2 * ITERS))
  check "p1 matched $ITERS ranges" test "$(matched "$RUN" p1)" = "$ITERS"
fi
finish
