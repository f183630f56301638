#!/usr/bin/env bash
# Ingest an nsys SQLite export with llmperf vs nsys's own reports, side by side.
#
# Input: the shared generator's export with the real nsys schema, written by its streaming
# twin bench/gen_nsys_stream.py in bounded memory (default 1,000,000
# NVTX ranges and 1,000,000 kernels; kept in $WORK between runs). llmperf's result is
# checked against the generator's ground truth before its time counts.
#
#   bench/nsys_ingest.sh [RANGES] [KERNELS]
#   RUNS=3  SHARED_BENCH=../shared/bench  WORK=${TMPDIR:-/tmp}/llmperf-bench  LLMPERF=target/release/llmperf
set -euo pipefail
# A failed check inside $(…) (llmperf's output against the ground truth) stops the script.
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
RANGES=${1:-1000000}
KERNELS=${2:-1000000}
RUNS=${RUNS:-3}
SHARED_BENCH=${SHARED_BENCH:-../shared/bench}
WORK=${WORK:-${TMPDIR:-/tmp}/llmperf-bench}
[ -n "${LLMPERF:-}" ] || cargo build --release --locked -p llmperf >&2
BIN=$(realpath "${LLMPERF:-target/release/llmperf}")
source bench/lib.sh
nsys_db "$RANGES" "$KERNELS"

# ingest OUT BIN: run llmperf import nsys, check its output against the ground truth,
# print "seconds peak_kib".
ingest() {
    local out=$1 bin=$2
    rm -rf "$out"
    local t
    t=$(timed "$bin" -q import nsys "$DB" pipeline.nsys.executable=/nonexistent/nsys runner.run.top_n_kernels=0 -o "$out")
    python3 - "$out/nsys/regions.json" "$out/nsys/top_kernels.json" "${DB%.sqlite}.json" >&2 <<'PY'
import json, sys, collections
regions, top, expect = (json.load(open(p)) for p in sys.argv[1:4])
by_name = collections.defaultdict(lambda: [0, 0, 0, 0])
for r in regions["regions"]:
    e = by_name[f'{r["domain"]}:{r["name"]}']
    e[0] += r["instances"]; e[1] += r["inclusive_ns"]
for key, want in expect["ranges"].items():
    got = by_name[key]
    assert (got[0], got[1]) == (want["instances"], want["total_ns"]), (key, got, want)
kernels = {k["name"]: (k["calls"], k["total_ns"]) for k in top}
for name, want in expect["kernels"].items():
    assert kernels[name] == (want["calls"], want["total_ns"]), (name, kernels[name], want)
out = expect["kernels_outside_ranges"]
assert (regions["unattributed"]["kernel_count"], regions["unattributed"]["gpu_time_ns"]) == (out["calls"], out["total_ns"])
print(f"llmperf output matches the ground truth: {len(expect['ranges'])} range names, {len(expect['kernels'])} kernel names, {out['calls']} unattributed kernels")
PY
    echo "$t"
}
# The scan floor: one plain aggregate scan of each table llmperf reads (ranges, kernels,
# runtime calls) in the sqlite3 shell, no join and no tree: what any reader of the export pays.
SCANS="SELECT count(*), sum(end - start) FROM NVTX_EVENTS; \
SELECT count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL; \
SELECT count(*), max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME;"
stats() { timed nsys stats --report "$1" --format csv --output "$WORK/nsys_stats" --force-overwrite true "$DB"; }
# RUNS rounds, each running llmperf, both nsys reports and the scans back to back, so that a
# slow spell of this machine falls on all four alike: the ratios are taken per round.
: >"$WORK/rounds.txt"
for _ in $(seq "$RUNS"); do
    ll=$(ingest "$WORK/llmperf-out" "$BIN")
    nv=$(stats nvtxsum)
    gk=$(stats gpukernsum)
    sc=$(timed sqlite3 "$DB" "$SCANS")
    printf 'llmperf %s\nnvtxsum %s\ngpukernsum %s\nscan %s\n' "$ll" "$nv" "$gk" "$sc" >>"$WORK/rounds.txt"
done
# nvtxkernsum is nsys's per-range kernel attribution: what regions.json's kernel columns hold.
# It needs about 2 GB and 30 s per million ranges here: skipped above 2 million
# (NVTXKERNSUM=1 forces it, NVTXKERNSUM=0 skips it).
t_nk=nan m_nk=nan
if [ "${NVTXKERNSUM:-$([ "$RANGES" -le 2000000 ] && echo 1 || echo 0)}" = 1 ]; then
    read -r t_nk m_nk < <(timed nsys stats --report nvtxkernsum --format csv --output "$WORK/nsys_stats" --force-overwrite true "$DB")
fi
RUNS=$RUNS python3 - "$RANGES" "$KERNELS" "$t_nk" "$m_nk" "$WORK/rounds.txt" <<'PY'
import collections, os, statistics, sys
runs = os.environ["RUNS"]
r, k = sys.argv[1:3]
t_nk, m_nk = map(float, sys.argv[3:5])
rounds = collections.defaultdict(list)
for line in open(sys.argv[5]):
    tool, seconds, peak = line.split()
    rounds[tool].append((float(seconds), int(float(peak))))
t = {tool: statistics.median(s for s, _ in rows) for tool, rows in rounds.items()}
m = {tool: max(p for _, p in rows) for tool, rows in rounds.items()}
per_round = lambda f: statistics.median(f(*row) for row in zip(*(
    [s for s, _ in rounds[tool]] for tool in ("llmperf", "nvtxsum", "gpukernsum", "scan"))))
speedup = per_round(lambda ll, nv, gk, sc: (nv + gk) / ll)
floor = per_round(lambda ll, nv, gk, sc: ll / sc)
print(f"input: {int(r):,} NVTX ranges, {int(k):,} kernels; {runs} rounds, each tool once a round;"
      " seconds are medians, peaks the largest, ratios the median of the rounds' ratios")
print(f"{'tool':44} {'seconds':>8} {'peak MiB':>9}")
print(f"{'llmperf import nsys (regions + top kernels)':44} {t['llmperf']:8.2f} {m['llmperf']/1024:9.0f}")
print(f"{'nsys stats --report nvtxsum':44} {t['nvtxsum']:8.2f} {m['nvtxsum']/1024:9.0f}")
print(f"{'nsys stats --report gpukernsum':44} {t['gpukernsum']:8.2f} {m['gpukernsum']/1024:9.0f}")
if t_nk == t_nk:
    print(f"{'nsys stats --report nvtxkernsum':44} {t_nk:8.2f} {m_nk/1024:9.0f}")
print(f"{'sqlite3: one aggregate scan of each table':44} {t['scan']:8.2f} {m['scan']/1024:9.0f}")
print(f"speed-up vs nvtxsum + gpukernsum: {speedup:.1f}x (target: 10x)")
print(f"llmperf / the scan floor: {floor:.2f}x (target: at most 2.5x)")
print(f"llmperf peak memory: {m['llmperf']/1024:.0f} MiB (target: at most 64 MiB at any size); nvtxsum / llmperf: {m['nvtxsum'] / m['llmperf']:.1f}x")
if t_nk == t_nk:
    print(f"speed-up vs nvtxsum + gpukernsum + nvtxkernsum (the same information): {(t['nvtxsum'] + t['gpukernsum'] + t_nk) / t['llmperf']:.1f}x")
PY
