#!/usr/bin/env bash
# How `llmperf check` judges serving runs on this machine: RUNS runs of
# `llmperf serve` of the same tiny model under the same load, and SLOW runs of
# the same model with more layers. Every ordered pair of same-model runs is
# checked, each as run and as baseline (a regression there is a false alarm:
# nothing changed), and every slowed run against every same-model run (a pass
# there is a miss). Each pair is checked with the default budgets and with
# BUDGETS; the changes of the decode, ITL and TTFT rows are printed.
#
#   bench/serve_gate.sh [RUNS] [SLOW]          (defaults 4 and 2)
#   LAYERS=2  SLOW_LAYERS=24  BUDGETS=tests/fixtures/serve/budgets-shared-cpu.yaml
#   WORK=${TMPDIR:-/tmp}/llmperf-serve-gate  LLMPERF=target/release/llmperf
#   JUDGE_ONLY=1: check the runs already in WORK again (other budgets) without serving
#
# Needs .venv-vllm (scripts/setup.sh vllm). About 70 s per run on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-4}
SLOW=${2:-2}
LAYERS=${LAYERS:-2}
SLOW_LAYERS=${SLOW_LAYERS:-24}
BUDGETS=${BUDGETS:-tests/fixtures/serve/budgets-shared-cpu.yaml}
WORK=${WORK:-${TMPDIR:-/tmp}/llmperf-serve-gate}
PY=.venv-vllm/bin/python
[ -n "${LLMPERF:-}" ] || cargo build --release --locked -p llmperf >&2
BIN=$(realpath "${LLMPERF:-target/release/llmperf}")
[ -x "$PY" ] || { echo "need $PY (scripts/setup.sh vllm)" >&2; exit 1; }
if [ -z "${JUDGE_ONLY:-}" ]; then
    rm -rf "$WORK" && mkdir -p "$WORK"
    "$PY" scripts/serve/tiny_llama.py "$WORK/model" --layers "$LAYERS" >/dev/null 2>&1
    "$PY" scripts/serve/tiny_llama.py "$WORK/slow" --layers "$SLOW_LAYERS" >/dev/null 2>&1
fi

serve() { # OUT MODEL
    VLLM_CPU_KVCACHE_SPACE=1 timeout 600 "$BIN" -q serve -o "$1" --requests 16 --concurrency 4 \
        --input-len 16 --output-len 16 --ignore-eos -- \
        "$PY" scripts/serve/vllm_cpu.py serve "$2" --enforce-eager --max-model-len 512 >/dev/null
}
if [ -z "${JUDGE_ONLY:-}" ]; then
    for i in $(seq 1 "$RUNS"); do serve "$WORK/same-$i" "$WORK/model"; done
    for i in $(seq 1 "$SLOW"); do serve "$WORK/slow-$i" "$WORK/slow"; done
fi

judge() { # RUN BASELINE → "exit-default exit-budgets decode-change"
    local d=0 b=0
    "$BIN" -q check "$1" --baseline "$2" >/dev/null 2>&1 || d=$?
    "$BIN" -q check "$1" --baseline "$2" --budgets "$BUDGETS" >/dev/null 2>&1 || b=$?
    python3 - "$1" "$d" "$b" <<'PY'
import json, sys
c = json.load(open(sys.argv[1] + "/check/check.json"))
change = {x["row"]["source"] + ":" + x["row"]["name"]: x["row"]["change"] for x in c["checks"]}
cell = lambda k: "%+.0f%%" % change[k]["change_pct"] if change.get(k) else "-"
print(sys.argv[2], sys.argv[3], "decode", cell("step:decode"), "itl", cell("request:itl"), "ttft", cell("request:ttft"))
PY
}
alarms=(0 0) pairs=0 misses=(0 0) trials=0
for i in $(seq 1 "$RUNS"); do
    for j in $(seq 1 "$RUNS"); do
        [ "$i" = "$j" ] && continue
        read -r d b rest < <(judge "$WORK/same-$j" "$WORK/same-$i")
        echo "same-$j vs same-$i: default exit $d, budgets exit $b; $rest"
        pairs=$((pairs + 1)); [ "$d" = 8 ] && alarms[0]=$((alarms[0] + 1)); [ "$b" = 8 ] && alarms[1]=$((alarms[1] + 1))
    done
done
for i in $(seq 1 "$RUNS"); do
    for j in $(seq 1 "$SLOW"); do
        read -r d b rest < <(judge "$WORK/slow-$j" "$WORK/same-$i")
        echo "slow-$j vs same-$i: default exit $d, budgets exit $b; $rest"
        trials=$((trials + 1)); [ "$d" != 8 ] && misses[0]=$((misses[0] + 1)); [ "$b" != 8 ] && misses[1]=$((misses[1] + 1))
    done
done
echo "$LAYERS vs $SLOW_LAYERS layers; budgets $BUDGETS"
echo "false alarms: default ${alarms[0]} of $pairs pairs, budgets ${alarms[1]} of $pairs"
echo "misses:       default ${misses[0]} of $trials pairs, budgets ${misses[1]} of $trials"
