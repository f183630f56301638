#!/usr/bin/env bash
# The false-alarm rate of `llmperf check`: PAIRS pairs of runs of the same
# configuration (the built-in regions demo, no profiler), each pair checked
# with the default budgets, and every verdict counted. A pair with a
# regression is a false alarm: nothing changed between its two runs.
#
#   bench/check_false_alarms.sh [PAIRS] [OVERRIDES...]
#   bench/check_false_alarms.sh 10 infer.iters=30 runner.run.repeat=3
#   BUDGETS=tests/fixtures/compare/budgets-shared-cpu.yaml bench/check_false_alarms.sh 10
#
# Prints one line per pair and the totals. Needs target/release/llmperf.
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-10}
shift || true
overrides=("$@")
[ ${#overrides[@]} -eq 0 ] && overrides=(infer.iters=30 runner.run.repeat=3)
bin=target/release/llmperf
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
alarms=0
declare -A total
for i in $(seq 1 "$pairs"); do
  a=$("$bin" workload --model nvtx_regions "${overrides[@]}" -o "$out" 2>/dev/null)
  b=$("$bin" workload --model nvtx_regions "${overrides[@]}" -o "$out" 2>/dev/null)
  rc=0
  "$bin" check "$b" --baseline "$a" ${BUDGETS:+--budgets "$BUDGETS"} >/dev/null 2>&1 || rc=$?
  line=$(python3 - "$b" <<'PY'
import json, sys
c = json.load(open(sys.argv[1] + "/check/check.json"))
cells = []
for x in c["checks"]:
    ch = x["row"]["change"]
    cells.append("%s=%s(%s)" % (x["row"]["name"], x["outcome"], "%+.1f%%" % ch["change_pct"] if ch else "-"))
print(" ".join(cells))
PY
)
  for v in $(grep -o '=[a-z]*' <<<"$line" | tr -d =); do total[$v]=$(( ${total[$v]:-0} + 1 )); done
  [ "$rc" -ne 0 ] && alarms=$((alarms + 1))
  echo "pair $i: exit $rc  $line"
done
echo "overrides: ${overrides[*]}; budgets: ${BUDGETS:-defaults}"
echo -n "rows:"; for k in "${!total[@]}"; do echo -n " $k=${total[$k]}"; done; echo
echo "false alarms: $alarms of $pairs pairs"
