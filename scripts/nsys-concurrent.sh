#!/usr/bin/env bash
# Two `nsys profile` sessions at once on this host: do they hang, and do named
# sessions (--session-new) or a private TMPDIR per session avoid it? On
# 2026-11-24 (nsys 2022.4.2, 3 rounds each) neither did: plain and named
# sessions finished 3 of 6, a private TMPDIR 1 of 6. Each round starts from a
# clean state: no nsys running, nsys's shared-memory session registry removed.
#
#   scripts/nsys-concurrent.sh [ROUNDS] [TIMEOUT_S]    (default 3 rounds, 45 s)
#
# Prints one line per session: variant, round, exit status (124: timed out,
# i.e. hung). Kills every nsys on the machine: never run it beside other work
# that uses nsys (make test does).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${LLMPERF:-target/release/llmperf}
[ -x "$BIN" ] || { echo "build first: make build (or set LLMPERF)" >&2; exit 2; }
BIN=$(realpath "$BIN")
ROUNDS=${1:-3}
LIMIT=${2:-45}
WORK=$(mktemp -d /tmp/nsys-concurrent.XXXXXX)
clean() {
    pkill -9 -f 'nsys' 2>/dev/null
    sleep 1
    rm -f /dev/shm/NSys-* /dev/shm/quadd-agent-instance-*
}
for variant in plain session tmpdir; do
    for round in $(seq "$ROUNDS"); do
        clean
        for i in 0 1; do
            dir="$WORK/$variant-$round-$i"
            mkdir -p "$dir/tmp"
            env=()
            extra=()
            case $variant in
                session) extra=(--session-new="llmperf-$round-$i") ;;
                tmpdir) env=("TMPDIR=$dir/tmp") ;;
            esac
            (
                env "${env[@]}" timeout "$LIMIT" nsys profile "${extra[@]}" --trace=nvtx,osrt --sample=none \
                    -o "$dir/rep" --force-overwrite=true "$BIN" -q workload --model nvtx_regions infer.iters=5 \
                    -o "$dir/w" >"$dir/log" 2>&1
                echo "$variant round $round session $i: exit $?"
            ) &
        done
        wait
    done
done
clean
rm -rf "$WORK"
