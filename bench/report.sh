#!/usr/bin/env bash
# `llmperf report RUN_DIR` on a run directory with 24 NVTX regions (12 paths on
# 2 threads) and 10,000 kernels: the original spec allowed 10 s, the target is
# under 100 ms. The input is the shared generator's nsys SQLite export (real
# schema and kernel rows), imported once; `report` then re-ingests it and
# writes every report.
#
#   bench/report.sh      SHARED_BENCH=../shared/bench  WORK=${TMPDIR:-/tmp}/llmperf-bench  RUNS=5
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED_BENCH=${SHARED_BENCH:-../shared/bench}
WORK=${WORK:-${TMPDIR:-/tmp}/llmperf-bench}
RUNS=${RUNS:-5}
mkdir -p "$WORK"
DB="$WORK/nsys_report_bench.sqlite"
if [ ! -f "$DB" ]; then
    python3 "$SHARED_BENCH/gen_nsys_sqlite.py" --ranges 20000 --kernels 10000 --layers 4 --decode-steps 4 \
        --out "$DB" --expect "${DB%.sqlite}.json" >&2
fi
cargo build --release --locked -p llmperf >&2
BIN=$(realpath target/release/llmperf)
RUN="$WORK/report-run"
rm -rf "$RUN"
"$BIN" -q import nsys "$DB" -o "$RUN" pipeline.nsys.executable=/nonexistent >/dev/null 2>&1
python3 - "$RUN" <<'PY'
import json, sys
r = json.load(open(f"{sys.argv[1]}/nsys/regions.json"))
k = sum(x["kernel_count"] for x in r["regions"] if x["depth"] == 0) + r["unattributed"]["kernel_count"]
print(f"input: {len(r['regions'])} regions, {k} kernels", file=sys.stderr)
PY
time_ms() { # median wall ms of RUNS runs of a command
    for _ in $(seq "$RUNS"); do
        local s=$EPOCHREALTIME
        "$@" >/dev/null 2>&1
        echo "($EPOCHREALTIME - $s) * 1000" | bc -l
    done | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
t=$(time_ms "$BIN" -q report "$RUN")
printf 'llmperf report: %.1f ms (median of %s; target under 100 ms)\n' "$t" "$RUNS"
