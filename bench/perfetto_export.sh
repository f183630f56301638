#!/usr/bin/env bash
# `llmperf export perfetto` of a large nsys export, beside `llmperf import nsys` of the same
# file: time and peak memory, and the export's kernel count and GPU time checked against
# the generator's ground truth before its time counts.
#
# Input: the shared generator's export (bench/gen_nsys_stream.py, bounded memory; default
# 1,000,000 NVTX ranges and 1,000,000 kernels; kept in $WORK between runs, shared with
# bench/nsys_ingest.sh).
#
#   bench/perfetto_export.sh [RANGES] [KERNELS]
#   RUNS=3  SHARED_BENCH=../shared/bench  WORK=${TMPDIR:-/tmp}/llmperf-bench  LLMPERF=target/release/llmperf
set -euo pipefail
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

# The export, its kernels counted and summed from the files by Python's json.
export_once() {
    rm -rf "$WORK/perfetto"
    local t
    t=$(timed "$BIN" -q export perfetto "$DB" -o "$WORK/perfetto")
    python3 - "$WORK/perfetto" "${DB%.sqlite}.json" >&2 <<'PY'
import gzip, json, os, sys
d, expect = sys.argv[1], json.load(open(sys.argv[2]))
calls = total = 0
# One event per line (as the exporter writes them): read line by line, so that a
# 10M-kernel export is checked in flat memory; the whole file must still be JSON.
for f in os.listdir(d):
    with gzip.open(os.path.join(d, f), "rt") as lines:
        head = next(lines)
        assert head.startswith('{"schemaVersion"'), head
        for line in lines:
            if line.startswith("]"):
                json.loads('{"traceEvents": [' + line)  # the tail: the document's last keys
                break
            e = json.loads(line.rstrip().rstrip(","))
            if e.get("cat") == "kernel" and e["ph"] == "X":
                calls += 1
                total += round(e["dur"] * 1000)
want = (sum(k["calls"] for k in expect["kernels"].values()), sum(k["total_ns"] for k in expect["kernels"].values()))
assert (calls, total) == want, ((calls, total), want)
print(f"export matches the ground truth: {calls} kernels, {total} ns")
PY
    echo "$t"
}

import_once() {
    rm -rf "$WORK/import-out"
    timed "$BIN" -q import nsys "$DB" pipeline.nsys.executable=/nonexistent/nsys -o "$WORK/import-out"
}

read -r t_ex m_ex < <(median_of "$RUNS" export_once)
read -r t_im m_im < <(median_of "$RUNS" import_once)
size=$(du -sk "$WORK/perfetto" | cut -f1)
printf '%-28s %9s %12s\n' "" "seconds" "peak MiB"
printf '%-28s %9.2f %12.1f\n' "llmperf export perfetto" "$t_ex" "$(echo "$m_ex / 1024" | bc -l)"
printf '%-28s %9.2f %12.1f\n' "llmperf import nsys" "$t_im" "$(echo "$m_im / 1024" | bc -l)"
printf 'export / import: %.2fx time; files: %d MiB gzipped\n' "$(echo "$t_ex / $t_im" | bc -l)" "$((size / 1024))"
