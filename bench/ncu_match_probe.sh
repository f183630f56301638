#!/usr/bin/env bash
# What ncu's --nvtx-include matches in range replay, measured: one line per
# expression with the number of ranges ncu logged as matched (`Skipping
# invalid capture range`, one per range, even on a host without a GPU). The
# probe (bench/ncu_match_probe.c) runs ITERS iterations, so every range it has
# appears ITERS times. docs/internals.md ("Region selectors") quotes this.
#
#   bench/ncu_match_probe.sh [ITERS] [EXPR...]     (default: the table of the docs)
#   NOCUDA=1 bench/ncu_match_probe.sh              (no CUDA call inside the ranges)
#   NOTAIL=1 bench/ncu_match_probe.sh 3 ASC@twin/  (no CUDA call after the last range)
# Needs gcc, ncu, and the NVTX headers of the nvtx-sys crate (cargo fetch).
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${1:-3}
shift || true
headers=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/nvtx-sys-2*/c/include 2>/dev/null | tail -1)
[ -n "$headers" ] || { echo "no nvtx-sys headers: run cargo fetch first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O1 -I"$headers" bench/ncu_match_probe.c -o "$work/probe" -ldl
exprs=("$@")
if [ ${#exprs[@]} -eq 0 ]; then
  exprs=('A/' 'A1/' 'B/' 'A' 'A/A1/' 'A/A1' 'A/*/A1' 'A/+/A1' 'A/A1]' '[A/A1' '[A' 'A1]' 'regex:A/A1'
         'LLM@decode_all/' 'regex:LLM@.*/' 'ASC@outer/' 'ASC@inner/' 'ASC@outer/inner'
         'se:range' 'regex:^se:range$' 'regex:^se\x3arange$' 'regex:^A$/' 'regex:^ASC$@^in.*$/' 'ASC@twin/')
fi
printf '%-28s %s\n' "expression" "ranges matched (of $ITERS per range)"
for e in "${exprs[@]}"; do
  timeout 120 ncu --replay-mode range --nvtx --nvtx-include "$e" --log-file "$work/log" \
    -o "$work/out" -f "$work/probe" "$ITERS" >/dev/null 2>&1 || true
  printf '%-28s %s\n' "$e" "$(grep -c 'Skipping invalid capture range' "$work/log" || true)"
done
