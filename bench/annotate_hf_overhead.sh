#!/usr/bin/env bash
# What `--annotate modules` costs a Hugging Face model (docs/workloads.md):
# `llmperf workload --model hf` of each small preset, run plainly and with the
# bootstrap's hooks (the environment `profile --annotate` gives the command),
# alone (NVTX calls with no tool attached) and under nsys (`profile --no-ncu`,
# ranges recorded). The workload times itself: prints the median over RUNS
# runs of the median decode step and prefill, and annotated / plain.
#
#   bench/annotate_hf_overhead.sh [ITERS] [RUNS] [ARCH...]   defaults: 20 3, every preset
#   DEPTH=2 (annotate.depth, default 4); EXTRA='+model.config.hidden_size=1024 …' (more overrides)
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${1:-20}
RUNS=${2:-3}
shift $(( $# > 2 ? 2 : $# ))
ARCHS=("${@:-llama}")
[ $# -gt 0 ] || ARCHS=(llama qwen2 mistral mixtral gpt2)
BIN=${LLMPERF:-target/release/llmperf}
PY=${PYTHON:-$PWD/.venv/bin/python}
DEPTH=${DEPTH:-4}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cp src/plan/annotate_sitecustomize.py "$OUT/sitecustomize.py"
cp src/plan/nvtx_ctypes.py "$OUT/_llmperf_nvtx.py"
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# stage medians (ms) of a run directory: "decode_step prefill"
medians() {
    "$PY" -c 'import json,sys; t=json.load(open(sys.argv[1])); s=t["stages"]; print(s["decode_all::decode_step"]["median_ms"], s["prefill"]["median_ms"])' "$1/workload/timings.json"
}
# One run's medians, or nothing (said on stderr) when it failed: nsys 2022.4
# sometimes hangs after the application ends (docs/internals.md), and llmperf
# then stops it and fails the run.
run() { # $1: alone|under_nsys  $2: plain|annotate  $3: arch
    local args=(--model hf "model.arch=$3" "model.python=$PY" "infer.iters=$ITERS" -o "$OUT/runs")
    # shellcheck disable=SC2206 # EXTRA is a list of overrides, split on spaces
    args+=(${EXTRA:-})
    local dir
    if [ "$1" = alone ]; then
        if [ "$2" = annotate ]; then
            dir=$(env PYTHONPATH="$OUT" LLMPERF_BOOTSTRAP=modules LLMPERF_BOOTSTRAP_DOMAIN=llmperf.modules \
                LLMPERF_BOOTSTRAP_DEPTH="$DEPTH" "$BIN" -q workload "${args[@]}" 2>/dev/null | tail -1)
        else
            dir=$("$BIN" -q workload "${args[@]}" 2>/dev/null | tail -1)
        fi
    else
        local flag=()
        [ "$2" = annotate ] && flag=(--annotate modules "annotate.depth=$DEPTH")
        dir=$("$BIN" -q profile --no-ncu "${flag[@]}" "${args[@]}" | tail -1) || true
    fi
    if [ -f "$dir/workload/timings.json" ]; then
        medians "$dir"
    else
        echo "bench: a $1 $2 run of $3 failed; left out" >&2
    fi
}
printf '%-8s %-10s %14s %14s %8s %14s %14s %8s\n' arch how "step plain ms" "step annot ms" ratio "prefill plain" "prefill annot" ratio
for arch in "${ARCHS[@]}"; do
    for how in alone under_nsys; do
        for mode in plain annotate; do
            for _ in $(seq "$RUNS"); do run "$how" "$mode" "$arch"; done > "$OUT/$mode"
        done
        ps=$(cut -d' ' -f1 "$OUT/plain" | median); as=$(cut -d' ' -f1 "$OUT/annotate" | median)
        pp=$(cut -d' ' -f2 "$OUT/plain" | median); ap=$(cut -d' ' -f2 "$OUT/annotate" | median)
        printf '%-8s %-10s %14.4f %14.4f %8.3f %14.4f %14.4f %8.3f\n' "$arch" "$how" "$ps" "$as" \
            "$(echo "$as / $ps" | bc -l)" "$pp" "$ap" "$(echo "$ap / $pp" | bc -l)"
    done
done
echo "(depth $DEPTH, ${EXTRA:+$EXTRA, }$ITERS iterations of a 32-token prompt and 8 new tokens, median of $RUNS runs; $(nproc) CPUs)"
