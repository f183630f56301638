#!/usr/bin/env bash
# Fuzz the ncu CSV ingester (fuzz/fuzz_targets/ncu_csv.rs) for a short time:
#   scripts/fuzz.sh [SECONDS]      (default 60; `make test` runs it with 60)
# Needs a nightly toolchain (rustup) and cargo-fuzz, installed here if missing.
# The fuzz corpus starts from the real ncu CSVs of the shared test corpus
# (LLMPERF_CORPUS, else ../shared/fixtures), when it is there.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz: installing the nightly toolchain (cargo fuzz needs it)"
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi
mkdir -p fuzz/corpus/ncu_csv
shared="${LLMPERF_CORPUS:-../shared/fixtures}"
if [ -d "$shared/real/derived" ]; then
    find "$shared/real/derived" -name '*.ncu*.csv' -exec cp -f {} fuzz/corpus/ncu_csv/ \;
else
    echo "fuzz: no shared corpus at $shared: starting from no seed files"
fi
# -rss_limit_mb: the reader streams; a blow-up in memory is a finding too.
cargo +nightly fuzz run --fuzz-dir fuzz ncu_csv fuzz/corpus/ncu_csv -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=262144 -print_final_stats=1
