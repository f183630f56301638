#!/usr/bin/env bash
# Two llmperf builds import the same nsys exports; every artifact must be byte-identical.
#
# For a change that must not move a number (a refactor of the ingestion pass): run the build
# before the change and the build after on every SQLite export of the corpus and on the shared
# generator's exports, and compare every file of the two run directories but manifest.json
# (which holds the wall-clock times). Prints one line per export; exits 1 on the first
# difference, with `diff -r` of the two runs.
#
#   bench/nsys_same_bytes.sh OLD_LLMPERF NEW_LLMPERF [EXPORT.sqlite ...]
#   LLMPERF_CORPUS=../shared/fixtures  WORK=${TMPDIR:-/tmp}/llmperf-same-bytes
#
# With no exports named: every *.sqlite under $LLMPERF_CORPUS, then the generator's exports
# that bench/nsys_ingest.sh left in ${TMPDIR:-/tmp}/llmperf-bench (1M and 10M ranges and kernels).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 OLD_LLMPERF NEW_LLMPERF [EXPORT.sqlite ...]" >&2; exit 2; }
OLD=$(realpath "$1")
NEW=$(realpath "$2")
shift 2
CORPUS=${LLMPERF_CORPUS:-../shared/fixtures}
WORK=${WORK:-${TMPDIR:-/tmp}/llmperf-same-bytes}
if [ $# -gt 0 ]; then
    exports=("$@")
else
    mapfile -t exports < <(find "$CORPUS" -name '*.sqlite' | sort; ls "${TMPDIR:-/tmp}"/llmperf-bench/nsys_*.sqlite 2>/dev/null)
fi
[ ${#exports[@]} -gt 0 ] || { echo "no exports: set LLMPERF_CORPUS or name them" >&2; exit 2; }

same=0
for db in "${exports[@]}"; do
    abs=$(realpath "$db")
    for side in old new; do
        bin=$OLD
        [ $side = new ] && bin=$NEW
        # The same run directory, relative, on both sides: the run id and the path are written
        # into the reports and the output.
        rm -rf "${WORK:?}/$side"
        mkdir -p "$WORK/$side"
        status=0
        (cd "$WORK/$side" && "$bin" -q import nsys "$abs" -o run \
            pipeline.nsys.executable=/nonexistent/nsys) >"$WORK/$side.out" 2>&1 || status=$?
        echo "$status" >"$WORK/$side/run.status"
        mv "$WORK/$side.out" "$WORK/$side/run.out"
    done
    if diff -r -q -x manifest.json -x .llmperf-lock "$WORK/old" "$WORK/new" >/dev/null; then
        same=$((same + 1))
        echo "same bytes ($(find "$WORK/new/run" -type f | wc -l) files, exit $(cat "$WORK/new/run.status")): $db"
    else
        echo "DIFFERENT: $db" >&2
        diff -r -x manifest.json -x .llmperf-lock "$WORK/old" "$WORK/new" | head -40 >&2
        exit 1
    fi
done
echo "$same of ${#exports[@]} exports: every artifact byte-identical"
