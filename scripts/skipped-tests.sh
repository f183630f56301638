#!/usr/bin/env bash
# After `cargo test`: how many tests were skipped, and why (one line per reason).
# Tests that need a file of the shared corpus (LLMPERF_CORPUS, else
# ../shared/fixtures) record themselves in target/tmp/skipped-tests.txt when it
# is missing, and so do the tests of GPU captures not committed yet
# (tests/fixtures/gpu/); a silent pass is not allowed.
set -euo pipefail
cd "$(dirname "$0")/.."
log=target/tmp/skipped-tests.txt
corpus="${LLMPERF_CORPUS:-../shared/fixtures}"
if [ ! -s "$log" ]; then
    echo "skipped tests: 0 (shared corpus: $corpus)"
    exit 0
fi
n=$(cut -f1 "$log" | sort -u | wc -l)
echo "skipped tests: $n (shared corpus: $corpus; set LLMPERF_CORPUS to where it is):"
cut -f2 "$log" | sort | uniq -c | sort -rn | sed 's/^ */  /'
