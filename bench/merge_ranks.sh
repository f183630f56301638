#!/usr/bin/env bash
# `llmperf merge` of a job of many ranks: seconds and peak memory, output checked against
# the generator's ground truth (every region's time on every rank).
#
# Input: bench/gen_ranks.py's job directory (RANKS ranks, each with the regions.json of a
# decoder with LAYERS layers: 435 regions at 24 layers, 331 MB for 1,000 ranks; kept in $WORK).
#
#   bench/merge_ranks.sh [RANKS] [LAYERS]
#   RUNS=5  WORK=${TMPDIR:-/tmp}/llmperf-bench  LLMPERF=target/release/llmperf
set -euo pipefail
cd "$(dirname "$0")/.."
RANKS=${1:-1000}
LAYERS=${2:-24}
RUNS=${RUNS:-5}
WORK=${WORK:-${TMPDIR:-/tmp}/llmperf-bench}
[ -n "${LLMPERF:-}" ] || cargo build --release --locked -p llmperf >&2
BIN=$(realpath "${LLMPERF:-target/release/llmperf}")
JOB="$WORK/ranks_${RANKS}_${LAYERS}"
mkdir -p "$WORK"
[ -f "$JOB/ground_truth.json" ] || python3 bench/gen_ranks.py "$JOB" --ranks "$RANKS" --layers "$LAYERS"
for _ in $(seq "$RUNS"); do
    /usr/bin/time -f '%e %M' -o "$WORK/time.txt" "$BIN" -q merge "$JOB" >/dev/null
    cat "$WORK/time.txt"
done | python3 -c '
import statistics, sys
runs = [l.split() for l in sys.stdin]
print("merge of '"$RANKS"' ranks: median %.2f s of %d runs, peak %.0f MiB" % (
    statistics.median(float(t) for t, _ in runs), len(runs), max(int(m) for _, m in runs) / 1024))'
python3 - "$JOB" <<'PY'
import json, os, sys
job = sys.argv[1]
truth = json.load(open(os.path.join(job, "ground_truth.json")))
report = json.load(open(os.path.join(job, "ranks.json")))
got = {r["path"]: r["per_rank"] for r in report["regions"]}
assert len(got) == truth["regions"], (len(got), truth["regions"])
for path, per_rank in truth["per_rank"].items():
    assert got[path] == per_rank, path
assert len(report["ranks"]) == truth["ranks"] and not report["missing"]
slow = sum(1 for r in report["regions"] if r["straggler_rank"] == 7)
size = sum(os.path.getsize(os.path.join(job, "ranks", d, "nsys", "regions.json")) for d in os.listdir(os.path.join(job, "ranks")))
print(f"output matches the ground truth: {truth['ranks']} ranks x {truth['regions']} regions "
      f"({size / 1e6:.0f} MB of regions.json read); rank 7 is the straggler of {slow} of them")
PY
