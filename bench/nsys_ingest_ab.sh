#!/usr/bin/env bash
# Two llmperf builds side by side on the same nsys export: `import nsys` of each,
# alternated (A B A B …, so the machine's drift falls on both), RUNS times each;
# prints each build's median seconds, median CPU seconds (user + sys) and peak MiB, and the
# ratios A/B of the medians.
# Run it in both orders (A/B and B/A) to see the order's own bias; the same
# binary against itself shows the noise floor.
#
#   bench/nsys_ingest_ab.sh LLMPERF_A LLMPERF_B [RANGES] [KERNELS]
#   RUNS=5  WORK=${TMPDIR:-/tmp}/llmperf-bench   (the export bench/nsys_ingest.sh made)
set -euo pipefail
A=$(realpath "${1:?usage: bench/nsys_ingest_ab.sh LLMPERF_A LLMPERF_B [RANGES] [KERNELS]}")
B=$(realpath "${2:?usage: bench/nsys_ingest_ab.sh LLMPERF_A LLMPERF_B [RANGES] [KERNELS]}")
RANGES=${3:-1000000}
KERNELS=${4:-1000000}
RUNS=${RUNS:-5}
WORK=${WORK:-${TMPDIR:-/tmp}/llmperf-bench}
DB="$WORK/nsys_${RANGES}_${KERNELS}.sqlite"
[ -f "$DB" ] || { echo "no $DB: make it with bench/nsys_ingest.sh $RANGES $KERNELS" >&2; exit 1; }
one() { # BIN LABEL: one import, "LABEL seconds peak_kib user_s sys_s"
    rm -rf "$WORK/ab-out"
    /usr/bin/time -f "$2 %e %M %U %S" -o "$WORK/ab-time.txt" "$1" -q import nsys "$DB" \
        pipeline.nsys.executable=/nonexistent/nsys runner.run.top_n_kernels=0 -o "$WORK/ab-out" >/dev/null 2>&1
    cat "$WORK/ab-time.txt"
}
one "$A" warmup >/dev/null
one "$B" warmup >/dev/null
for _ in $(seq "$RUNS"); do one "$A" A; one "$B" B; done | python3 -c '
import statistics, sys
rows = [l.split() for l in sys.stdin]
t = {k: statistics.median(float(r[1]) for r in rows if r[0] == k) for k in "AB"}
m = {k: max(int(r[2]) for r in rows if r[0] == k) / 1024 for k in "AB"}
cpu = {k: statistics.median(float(r[3]) + float(r[4]) for r in rows if r[0] == k) for k in "AB"}
for k in "AB":
    print(f"{k}: median {t[k]:.3f} s, CPU {cpu[k]:.3f} s (user + sys), peak {m[k]:.0f} MiB")
ratio, cpu_ratio = t["A"] / t["B"], cpu["A"] / cpu["B"]
print(f"A/B of medians: {ratio:.3f}; of CPU: {cpu_ratio:.3f}")'
