#!/usr/bin/env bash
# Ingest a big ncu details CSV with llmperf vs Python's csv module and pandas,
# side by side, with `wc -l` as the floor.
#
# Input: the shared generator's details CSV built from real rows (default 500 MB,
# kept in $WORK between runs). llmperf's report is checked against the
# generator's ground truth before its time counts; so are the peers' answers.
#
# Two llmperf rows: `import ncu` (a new run directory: the input is copied into
# it while it is parsed) and `report` (the same run directory read again: the
# ingestion alone, what the peers do). The targets are on the ingestion.
#
#   bench/ncu_ingest.sh [MB ...]        default: 100 500 (memory must stay flat)
#   SHARED_BENCH=../shared/bench  WORK=${TMPDIR:-/tmp}/llmperf-bench  RUNS=3
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=("${@:-100 500}")
read -r -a SIZES <<<"${SIZES[*]}"
SHARED_BENCH=${SHARED_BENCH:-../shared/bench}
WORK=${WORK:-${TMPDIR:-/tmp}/llmperf-bench}
RUNS=${RUNS:-3}
PY=.venv/bin/python
mkdir -p "$WORK"
cargo build --release --locked -p llmperf >&2
BIN=$(realpath target/release/llmperf)
$PY -c 'import pandas' 2>/dev/null || .venv/bin/pip install -q pandas >&2

# "seconds peak_rss_kib" of a command: wall time from bash's clock (GNU time
# rounds to 10 ms, too coarse for wc), peak RSS from GNU time; stdout to $1.
timed() {
    local out=$1; shift
    local start=$EPOCHREALTIME
    /usr/bin/time -f '%M' -o "$WORK/time.txt" "$@" >"$out" 2>/dev/null
    local end=$EPOCHREALTIME
    echo "$(echo "$end - $start" | bc -l) $(cat "$WORK/time.txt")"
}
# Median of "seconds rss" lines: the seconds' median, the rss' max.
median() { sort -n | awk '{t[NR]=$1; if ($2>m) m=$2} END {print t[int((NR+1)/2)], m}'; }

check() { # report.json or peer json, expect json
    python3 - "$1" "$2" "$3" <<'PY'
import json, sys
kind, got, expect = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
if kind == "llmperf":
    region = got["scopes"][0]["regions"][0]
    got = {k["kernel_name"]: [k["calls"], k["total_ms"] * 1e6] for k in region["kernels"]}
for name, want in expect["kernels"].items():
    calls, ns = got[name]
    assert calls == want["launches"] and abs(ns - want["duration_ns"]) <= 1e-6 * want["duration_ns"], (kind, name, got[name], want)
assert len(got) == len(expect["kernels"]), (kind, len(got))
PY
}

printf '%-8s %-34s %9s %9s %10s\n' size tool seconds "peak MiB" "MB/s"
for MB in "${SIZES[@]}"; do
    CSV="$WORK/ncu_${MB}mb.csv"
    EXPECT="$WORK/ncu_${MB}mb.json"
    if [ ! -f "$CSV" ]; then
        [ -f "$SHARED_BENCH/gen_ncu_details.py" ] || { echo "need $SHARED_BENCH/gen_ncu_details.py (set SHARED_BENCH)" >&2; exit 1; }
        python3 "$SHARED_BENCH/gen_ncu_details.py" --mb "$MB" --out "$CSV" --expect "$EXPECT" >&2
    fi
    bytes=$(stat -c %s "$CSV")
    cat "$CSV" >/dev/null # warm the page cache for every contender alike
    row() { printf '%-8s %-34s %9.3f %9.0f %10.0f\n' "${MB}MB" "$1" "$2" "$(echo "$3/1024" | bc -l)" "$(echo "$bytes/1000000/$2" | bc -l)"; }
    im=$(for _ in $(seq "$RUNS"); do rm -rf "$WORK/out"; timed /dev/null "$BIN" -q import ncu "$CSV" -o "$WORK/out" 'pipeline.ncu.ncu_cli.sections=[]'; done | median)
    check llmperf "$WORK/out/ncu/regions/report.json" "$EXPECT"
    cmp -s "$CSV" "$WORK/out/ncu/import.csv" || { echo "the run directory's copy differs from $CSV" >&2; exit 1; }
    ll=$(for _ in $(seq "$RUNS"); do rm -f "$WORK/out/ncu/regions/report.json"; timed /dev/null "$BIN" -q report "$WORK/out"; done | median)
    check llmperf "$WORK/out/ncu/regions/report.json" "$EXPECT"
    wc=$(for _ in $(seq 5); do timed /dev/null wc -l "$CSV"; done | median)
    pc=$(timed "$WORK/peer.json" $PY bench/ncu_peers.py csv "$CSV"); check peer "$WORK/peer.json" "$EXPECT"
    pd=$(timed "$WORK/peer.json" $PY bench/ncu_peers.py pandas "$CSV"); check peer "$WORK/peer.json" "$EXPECT"
    read -r t_im m_im <<<"$im"; read -r t_ll m_ll <<<"$ll"; read -r t_wc m_wc <<<"$wc"; read -r t_pc m_pc <<<"$pc"; read -r t_pd m_pd <<<"$pd"
    row "llmperf import ncu, copy (median)" "$t_im" "$m_im"
    row "llmperf report: ingestion (median)" "$t_ll" "$m_ll"
    row "python csv module" "$t_pc" "$m_pc"
    row "pandas read_csv + groupby" "$t_pd" "$m_pd"
    row "wc -l (median of 5)" "$t_wc" "$m_wc"
    python3 -c "import sys; l,c,p,w,i=map(float,sys.argv[1:6]); print(f'{sys.argv[6]}: llmperf ingestion is {c/l:.1f}x the csv module, {p/l:.1f}x pandas, {100*w/l:.0f}% of wc -l throughput (targets: 10x pandas, 25% of wc -l); import with its copy: {p/i:.1f}x pandas, {100*w/i:.0f}% of wc -l')" "$t_ll" "$t_pc" "$t_pd" "$t_wc" "$t_im" "${MB}MB"
done
echo "all answers matched the generator's ground truth (launches and GPU time per kernel)"
